//! Seed corpora, generated at run time from the repository's tests and the shared data sets.
//!
//! Each target calls [`init`] from libFuzzer's initialisation (before the corpus directories are
//! read). When `CORECAST_FUZZ_SEEDS` names a directory, the target's seeds are written there as
//! files named by their content hash (so writing them again is a no-op), and `fuzz/run.sh` passes
//! that directory to libFuzzer as a second corpus. Sources:
//!
//! - string literals of the tests that exercise the surface (HTTP heads from
//!   `net/tests/http_request.rs` and `net/tests/ws_handshake.rs`, `where=` filters from
//!   `engine/src/filter.rs` and `tests/*.rs`, `Last-Event-ID`s from `net/src/sse/mod.rs` and
//!   `tests/sse.rs`, rows from `storage/tests/schema_*.rs`), extracted by [`string_literals`];
//! - the first rows of each shared data set (`shared/data/*.jsonl`), raw and canonical;
//! - frames and streams built with the codec's own encoders (as the WebSocket tests build them);
//! - signed pull cursors and sealed Parquet segments made by the code under test.

use std::io::Write;
use std::path::Path;

use corecast_engine::cursor::{Binding, CursorKey};
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{encode_close, encode_frame, OpCode};
use corecast_storage::json;
use corecast_storage::schema::RowCodec;
use corecast_storage::tier::{write_segment, SealOptions};

use crate::{codecs, data_path, repo_path, DATA_SETS, KITCHEN_SINK_ROW};

/// Writes the seeds of `target` into `$CORECAST_FUZZ_SEEDS` when it is set; does nothing
/// otherwise.
pub fn init(target: &str) {
    let Some(dir) = std::env::var_os("CORECAST_FUZZ_SEEDS") else {
        return;
    };
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).expect("seed directory");
    let seeds = match target {
        "ws_frame" => ws_frame(),
        "ws_receiver" => ws_receiver(),
        "http_request" => http_request(),
        "row_codec" => row_codec(),
        "where_filter" => where_filter(),
        "pull_cursor" => pull_cursor(),
        "sse_last_event_id" => sse_last_event_id(),
        "parquet_segment" => parquet_segment(),
        other => panic!("no seeds for target {other}"),
    };
    for seed in &seeds {
        let name = format!("seed-{:016x}", fnv1a(seed));
        let mut f = std::fs::File::create(dir.join(name)).expect("seed file");
        f.write_all(seed).expect("seed written");
    }
    eprintln!("seeds: {} for {target} in {}", seeds.len(), dir.display());
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Every string literal in a Rust source file (`"…"`, `b"…"`, `r#"…"#`, `br"…"`), unescaped,
/// as bytes. Comments and char literals are skipped; good enough for test files.
pub fn string_literals(src: &str) -> Vec<Vec<u8>> {
    let s = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'/' if s.get(i + 1) == Some(&b'/') => {
                while i < s.len() && s[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' => {
                // a char literal ('"', '\'', '\\', 'x') or a lifetime
                if s.get(i + 1) == Some(&b'\\') && s.get(i + 3) == Some(&b'\'') {
                    i += 4;
                } else if s.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if !ident_before(s, i) && matches!(s.get(i + 1), Some(b'#') | Some(b'"')) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while s.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if s.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let start = j + 1;
                let mut k = start;
                let mut end = None;
                while k < s.len() {
                    if s[k] == b'"'
                        && s[k + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == b'#')
                            .count()
                            == hashes
                    {
                        end = Some(k);
                        break;
                    }
                    k += 1;
                }
                let Some(end) = end else { break };
                out.push(s[start..end].to_vec());
                i = end + 1 + hashes;
            }
            b'"' => {
                let mut lit = Vec::new();
                let mut j = i + 1;
                while j < s.len() && s[j] != b'"' {
                    if s[j] == b'\\' && j + 1 < s.len() {
                        j += 1;
                        match s[j] {
                            b'n' => lit.push(b'\n'),
                            b'r' => lit.push(b'\r'),
                            b't' => lit.push(b'\t'),
                            b'0' => lit.push(0),
                            b'x' if j + 2 < s.len() => {
                                let hex = std::str::from_utf8(&s[j + 1..j + 3]).unwrap_or("");
                                if let Ok(v) = u8::from_str_radix(hex, 16) {
                                    lit.push(v);
                                }
                                j += 2;
                            }
                            b'u' if s.get(j + 1) == Some(&b'{') => {
                                let close = s[j..].iter().position(|&c| c == b'}').map(|p| j + p);
                                if let Some(close) = close {
                                    let hex = std::str::from_utf8(&s[j + 2..close]).unwrap_or("");
                                    if let Some(c) =
                                        u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
                                    {
                                        let mut buf = [0u8; 4];
                                        lit.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                                    }
                                    j = close;
                                }
                            }
                            b'\n' => {
                                while j + 1 < s.len() && s[j + 1].is_ascii_whitespace() {
                                    j += 1;
                                }
                            }
                            other => lit.push(other),
                        }
                    } else {
                        lit.push(s[j]);
                    }
                    j += 1;
                }
                out.push(lit);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn ident_before(s: &[u8], i: usize) -> bool {
    i > 0 && (s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_')
}

/// The literals of each repository file in `files` (missing files are skipped).
fn literals_of(files: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in files {
        if let Ok(src) = std::fs::read_to_string(repo_path(f)) {
            out.extend(string_literals(&src));
        }
    }
    out
}

/// The first `n` non-empty lines of a shared data set (none when it is absent).
fn data_lines(name: &str, n: usize) -> Vec<Vec<u8>> {
    let Ok(f) = std::fs::File::open(data_path(name)) else {
        return Vec::new();
    };
    use std::io::BufRead;
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(String::into_bytes)
        .collect()
}

fn canonical(codec: &RowCodec, row: &[u8]) -> Option<Vec<u8>> {
    let v = json::parse(row).ok()?;
    let mut out = Vec::new();
    codec.encode_row(&v, &mut out).ok()?;
    Some(out)
}

fn prefixed(prefix: &[u8], body: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(body);
    v
}

// ---------------------------------------------------------------------------------------------

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn ws_frames(masked: bool) -> Vec<Vec<u8>> {
    let mask = masked.then_some(MASK);
    let text = "héllo wörld €𝄞 ".repeat(4);
    let mut frames = Vec::new();
    for (fin, op, payload) in [
        (true, OpCode::Text, text.as_bytes().to_vec()),
        (true, OpCode::Text, Vec::new()),
        (false, OpCode::Text, text.as_bytes()[..7].to_vec()),
        (true, OpCode::Continuation, text.as_bytes()[7..].to_vec()),
        (true, OpCode::Binary, (0..=255u8).collect()),
        (true, OpCode::Binary, vec![0xAB; 300]),
        (true, OpCode::Ping, b"ping".to_vec()),
        (true, OpCode::Pong, vec![7; 125]),
    ] {
        let mut f = Vec::new();
        encode_frame(fin, op, &payload, mask, &mut f);
        frames.push(f);
    }
    let mut close = Vec::new();
    encode_close(Some(CloseCode(1000)), "bye ✓", mask, &mut close);
    frames.push(close);
    // A non-minimal 64-bit length form for a 5-byte payload.
    let mut f = vec![0x81, if masked { 0xFF } else { 0x7F }];
    f.extend_from_slice(&5u64.to_be_bytes());
    if masked {
        f.extend_from_slice(&MASK);
    }
    let mut p = b"hello".to_vec();
    if masked {
        corecast_net::ws::frame::apply_mask(&mut p, MASK);
    }
    f.extend_from_slice(&p);
    frames.push(f);
    frames
}

fn ws_frame() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // byte 0: bit 0 the role (0 server: masked frames), bits 1-2 the size limit
    for (cfg, masked) in [(0u8, true), (1u8, false), (2u8, true), (7u8, false)] {
        for f in ws_frames(masked) {
            out.push(prefixed(&[cfg], &f));
        }
    }
    out.push(prefixed(&[0x80], "δοκιμή \u{10FFFF}".as_bytes()));
    out
}

fn ws_receiver() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (cfg, masked) in [(0u8, true), (1u8, false), (6u8, true)] {
        let frames = ws_frames(masked);
        // the whole sequence (close last), and a fragmented message with control frames in it
        let all: Vec<u8> = frames.concat();
        out.push(prefixed(&[cfg, 0x11], &all));
        let mut inter = Vec::new();
        inter.extend_from_slice(&frames[2]);
        inter.extend_from_slice(&frames[6]);
        inter.extend_from_slice(&frames[7]);
        inter.extend_from_slice(&frames[3]);
        inter.extend_from_slice(&frames[4]);
        out.push(prefixed(&[cfg, 0x5a], &inter));
        // invalid UTF-8 in the middle of a text frame
        let mut bad = Vec::new();
        let mut payload = "abc€def".as_bytes().to_vec();
        payload[4] = 0xFF;
        encode_frame(
            true,
            OpCode::Text,
            &payload,
            masked.then_some(MASK),
            &mut bad,
        );
        out.push(prefixed(&[cfg, 0x01], &bad));
    }
    out
}

fn http_request() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = literals_of(&[
        "net/tests/http_request.rs",
        "net/tests/ws_handshake.rs",
        "tests/hostile.rs",
    ])
    .into_iter()
    .filter(|l| l.windows(5).any(|w| w == b"HTTP/") && l.len() < 4096)
    .collect();
    out.push(
        b"GET /trades?offset=5&where=%7B%22side%22%3A1%7D&lastEventId=7 HTTP/1.1\r\nHost: x\r\n\
          Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            .to_vec(),
    );
    out.push(
        b"POST /trades?publisher_id=a%20b&seq=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
    );
    out
}

fn row_codec() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // byte 0: the codec (0 schema-less, 1 kitchen sink, 2.. the data sets); 0xFF: the row is
    // preceded by its own schema and a NUL
    for lit in literals_of(&[
        "storage/tests/schema_validate.rs",
        "storage/tests/schema_json.rs",
        "storage/tests/schema_datasets.rs",
    ]) {
        if lit.first() == Some(&b'{') && lit.len() < 4096 {
            out.push(prefixed(&[0], &lit));
            out.push(prefixed(&[1], &lit));
        }
    }
    out.push(prefixed(&[1], KITCHEN_SINK_ROW.as_bytes()));
    for (i, (rows, schema)) in DATA_SETS.iter().enumerate() {
        for line in data_lines(rows, 6) {
            out.push(prefixed(&[0], &line));
            out.push(prefixed(&[2 + i as u8], &line));
        }
        if let (Ok(schema), Some(line)) = (
            std::fs::read(data_path(schema)),
            data_lines(rows, 1).into_iter().next(),
        ) {
            let mut v = vec![0xFF];
            v.extend_from_slice(&schema);
            v.push(0);
            v.extend_from_slice(&line);
            out.push(v);
        }
    }
    let mut v = vec![0xFF];
    v.extend_from_slice(crate::KITCHEN_SINK_SCHEMA.as_bytes());
    v.push(0);
    v.extend_from_slice(KITCHEN_SINK_ROW.as_bytes());
    out.push(v);
    out
}

fn where_filter() -> Vec<Vec<u8>> {
    // byte 0: the codec (as row_codec); then the filter, a NUL, the row
    let filters: Vec<Vec<u8>> = literals_of(&[
        "engine/src/filter.rs",
        "tests/broker.rs",
        "tests/pull.rs",
        "tests/sse.rs",
    ])
    .into_iter()
    .filter(|l| l.first() == Some(&b'{') && l.len() < 512)
    .collect();
    let codecs = codecs();
    let mut out = Vec::new();
    for (i, (rows, _)) in DATA_SETS.iter().enumerate() {
        let codec = &codecs[(2 + i).min(codecs.len() - 1)];
        for line in data_lines(rows, 2) {
            let row = canonical(codec, &line).unwrap_or(line.clone());
            // a filter naming each column with the row's own value, and the tests' filters
            if let Ok(v) = json::parse(&row) {
                use sonic_rs::JsonContainerTrait;
                if let Some(obj) = v.as_object() {
                    for (k, val) in obj.iter().take(4) {
                        let f = format!(
                            "{{{}:[{},null]}}",
                            sonic_rs::to_string(k).unwrap_or_default(),
                            sonic_rs::to_string(val).unwrap_or_default()
                        );
                        let mut s = vec![2 + i as u8];
                        s.extend_from_slice(f.as_bytes());
                        s.push(0);
                        s.extend_from_slice(&row);
                        out.push(s);
                    }
                }
            }
            for f in filters.iter().take(20) {
                let mut s = vec![0];
                s.extend_from_slice(f);
                s.push(0);
                s.extend_from_slice(&row);
                out.push(s);
            }
        }
    }
    out
}

/// The key and binding the cursor target verifies against.
pub const CURSOR_KEY: &[u8] = b"corecast fuzz cursor key 0123456";
/// The cursor lifetime the target signs with.
pub const CURSOR_TTL_S: u64 = 300;

fn pull_cursor() -> Vec<Vec<u8>> {
    // layout (see fuzz_targets/pull_cursor.rs): next u64, now u64, then
    // stream \0 stream_id \0 filter \0 caller \0 cursor
    let key = CursorKey::new(CURSOR_KEY, CURSOR_TTL_S);
    let mut out = Vec::new();
    for (next, now, stream, filter) in [
        (0u64, 1_796_081_766u64, "trades", ""),
        (42, 1_700_000_000, "es-mbo", r#"{"side":"B"}"#),
        (u64::MAX, u64::MAX - 10, "x", "{}"),
    ] {
        let b = Binding {
            stream,
            stream_id: "0b9c2e4e-7d43-4a57-9a1e-3f1f2b0c6d5e",
            filter,
            caller: "127.0.0.1",
        };
        let cursor = key.sign(&b, next, now);
        let mut s = Vec::new();
        s.extend_from_slice(&next.to_be_bytes());
        s.extend_from_slice(&now.to_be_bytes());
        for part in [b.stream, b.stream_id, b.filter, b.caller, cursor.as_str()] {
            s.extend_from_slice(part.as_bytes());
            s.push(0);
        }
        s.pop();
        out.push(s);
    }
    out
}

fn sse_last_event_id() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = literals_of(&["net/src/sse/mod.rs", "tests/sse.rs"])
        .into_iter()
        .filter(|l| l.len() <= 40)
        .collect();
    for s in [
        "0",
        "42",
        "9223372036854775807",
        "9223372036854775808",
        " +5_000 ",
        "-0",
        "007",
    ] {
        out.push(s.as_bytes().to_vec());
    }
    out
}

fn parquet_segment() -> Vec<Vec<u8>> {
    // layout (see fuzz_targets/parquet_segment.rs): codec, range start, range length,
    // chunk rows, then the file
    let codecs = codecs();
    let mut out = Vec::new();
    let mut sources: Vec<(usize, Vec<Vec<u8>>)> =
        vec![(1, vec![KITCHEN_SINK_ROW.as_bytes().to_vec(); 3])];
    for (i, (rows, _)) in DATA_SETS.iter().enumerate() {
        let lines = data_lines(rows, 7);
        sources.push((0, lines.clone()));
        if 2 + i < codecs.len() {
            sources.push((2 + i, lines));
        }
    }
    for (c, lines) in sources {
        let codec = &codecs[c];
        let rows: Vec<Vec<u8>> = lines.iter().filter_map(|l| canonical(codec, l)).collect();
        if rows.is_empty() {
            continue;
        }
        let mut file = Vec::new();
        let options = SealOptions {
            max_row_group_rows: 3,
            batch_rows: 2,
            zstd_level: 1,
        };
        let sealed = write_segment(
            codec,
            rows.iter()
                .enumerate()
                .map(|(i, r)| (i as u64 + 1, 1_796_081_766_000_000 + i as i64, r.as_slice())),
            &mut file,
            &options,
        );
        if sealed.is_ok() {
            out.push(prefixed(&[c as u8, 0, 255, 2], &file));
            out.push(prefixed(&[c as u8, 3, 2, 0], &file));
        }
    }
    out
}
