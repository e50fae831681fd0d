//! The Parquet segment reader (`storage/src/tier/parquet_read.rs`, `SegmentReader`) over
//! arbitrary bytes: it must answer an error, never panic, abort, hang or allocate without bound
//! (a panic inside the Parquet library is caught by the reader and answered as an error, see
//! `init`)
//! (libFuzzer's `-rss_limit_mb` and `-timeout`, set by `fuzz/run.sh`, catch the last two).
//!
//! Input: byte 0 the codec (as `row_codec`), byte 1 the range start, byte 2 the range length
//! (255: to the end), byte 3 the chunk size, then the file. Seeds are real segments sealed by
//! `SegmentWriter` from the shared data sets (small row groups, several pages). Checked, for
//! whatever the reader returns: chunks within the chunk size, offsets strictly increasing and
//! inside the range, each row a strict JSON object (a schema's rows are written from the typed
//! columns, so they are JSON by construction), and a schema-less row, which is stored verbatim,
//! exactly the canonical encoding the validator gives it (the reader checks it; before that check
//! a damaged file gave rows of garbage).
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use corecast_storage::json;
use corecast_storage::schema::RowCodec;
use corecast_storage::tier::{ReadOptions, SegmentReader};
use libfuzzer_sys::fuzz_target;
use sonic_rs::JsonValueTrait;

/// The seeds, and a panic hook that lets a panic raised inside a dependency (the Parquet, Arrow
/// or compression crates, which panic on some malformed files, at their own lines or in the
/// standard library's generic code they instantiate) unwind to `SegmentReader`'s
/// guard, which answers it as an error; libFuzzer's hook (abort: a crash) handles every other
/// panic, ours included, and a dependency panic that escapes the reader still aborts. Each
/// distinct dependency panic location is reported once on stderr.
fn init() {
    corecast_fuzz::seeds::init("parquet_segment");
    let abort = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        match location {
            // a dependency's own code, or the standard library's generic code instantiated in a
            // dependency (e.g. an overflowing `Iterator::sum` inside parquet's row counting)
            Some(at) if at.contains("/.cargo/registry/") || at.contains("/rustc/") => {
                static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
                let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
                if !seen.contains(&at) {
                    eprintln!("dependency panic (caught by SegmentReader) at {at}: {info}");
                    seen.push(at);
                }
            }
            _ => abort(info),
        }
    }));
}

fn codecs() -> &'static [RowCodec] {
    static CODECS: OnceLock<Vec<RowCodec>> = OnceLock::new();
    CODECS.get_or_init(corecast_fuzz::codecs)
}

fuzz_target!(init: init(), |data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let codecs = codecs();
    let codec = &codecs[data[0] as usize % codecs.len()];
    let start = data[1] as u64;
    let end = if data[2] == 255 { u64::MAX } else { start + data[2] as u64 };
    let chunk_rows = 1 + data[3] as usize % 16;
    let file = Bytes::copy_from_slice(&data[4..]);
    let Ok(mut reader) = SegmentReader::open(file, codec, start..end, &ReadOptions { chunk_rows, ..ReadOptions::default() })
    else {
        return;
    };
    let mut last: Option<u64> = None;
    let mut rows = 0u64;
    while let Ok(Some(chunk)) = reader.next_chunk() {
        assert!(!chunk.is_empty() && chunk.len() <= chunk_rows, "chunk of {} rows", chunk.len());
        for (offset, _ts, row) in chunk.iter() {
            assert!((start..end).contains(&offset), "offset {offset} outside {start}..{end}");
            if let Some(prev) = last {
                assert!(offset > prev, "offset {offset} after {prev}");
            }
            last = Some(offset);
            rows += 1;
            let value = json::parse(row).unwrap_or_else(|e| {
                panic!("row at {offset} is not JSON ({e}): {}", String::from_utf8_lossy(row))
            });
            assert!(value.is_object(), "row at {offset} is not an object");
            if codec.schema().is_none() {
                // stored verbatim: the reader must have checked it is canonical
                let mut again = Vec::new();
                codec.encode_row(&value, &mut again).expect("a schema-less row validates");
                assert!(
                    again == row,
                    "row at {offset} is not canonical:\n  read {}\n  canonical {}",
                    String::from_utf8_lossy(row),
                    String::from_utf8_lossy(&again)
                );
            }
        }
    }
    assert!(reader.stats().rows_returned <= reader.stats().rows_decoded || rows == 0);
});
