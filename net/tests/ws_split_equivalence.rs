//! The server's incremental WebSocket read path gives the same outcome however the byte stream
//! is split into reads (RFC 6455 over TCP: the peer's frames arrive in arbitrary pieces).
//!
//! Each random case builds a stream of masked client frames: text and binary messages, some
//! fragmented, with pings, pongs and small closes between fragments; payload lengths that
//! hit the 7-, 16- and 64-bit length forms (0, 1, 125-128, 65535-65537, random), sometimes in
//! a non-minimal form; text with multi-byte code points cut anywhere by fragment boundaries;
//! and, in some cases, one fault: invalid UTF-8 at a random place in a text message (1007),
//! a bad close frame (1002/1007), a misplaced or malformed frame (1002), or a frame or
//! fragmented message over the size limit (1009). It feeds the stream to the receive path
//! the server and the client use, `ws::receiver::Receiver` (`FrameDecoder` → `check_partial`
//! / `MessageAssembler::push`), once whole and twice split (every byte, random sizes, cuts
//! inside headers and mask keys, a few cuts), and checks:
//!
//! - the whole-stream outcome is the one the generator intended: every message (kind and
//!   exact bytes), ping, pong and close up to the end, then the exact error or close;
//! - every split gives the same outcome;
//! - in a split, each event comes in the read that delivered its frame's last byte (never
//!   held back), and an error comes no earlier than the read that delivered its first bad
//!   byte and no later than the one that delivered the end of its frame (of its header, for
//!   what the header decides); invalid UTF-8 in a message fails exactly in the read that
//!   delivered the offending byte (or the final frame's end, for a code point cut by it).
//!
//! A failure names the case's seed; `WS_SPLIT_CASE=<seed>` reruns that case alone,
//! `WS_SPLIT_SEED` / `WS_SPLIT_CASES` change the run.

use corecast_net::ws::frame::{
    FrameError, FrameLimits, OpCode, Role, CONTROL_PAYLOAD_BYTES_MAX, MESSAGE_BYTES_MAX_DEFAULT,
};
use corecast_net::ws::message::ProtocolViolation;
use corecast_net::ws::receiver::{ReceiveError, Received, Receiver};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The run's fixed seed; each case's seed derives from it and the case's index.
const SEED: u64 = 0xC0DE_CA57_5EED_0001;
/// Random cases per run.
const CASES: u64 = 3000;
/// Splits tried per case (besides the whole stream).
const SPLITS: usize = 2;
/// Largest data frame payload generated (within any limit used).
const FRAME_CAP: u64 = 100_000;

// ---------------------------------------------------------------------------------------------
// A small deterministic PRNG (xorshift64*, seeded through splitmix64).

struct Rng(u64);

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix64(seed).max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next() % n
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi, "{lo} > {hi}");
        lo + self.below((hi - lo) as u64 + 1) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A random code point, weighted towards multi-byte ones and the encoding boundaries.
fn rand_char(rng: &mut Rng) -> char {
    let c = match rng.below(20) {
        0..=7 => rng.below(0x80) as u32,
        8..=11 => 0x80 + rng.below(0x780) as u32,
        12..=15 => loop {
            let c = 0x800 + rng.below(0xF800) as u32;
            if !(0xD800..=0xDFFF).contains(&c) {
                break c;
            }
        },
        16..=18 => 0x10000 + rng.below(0x10_0000) as u32,
        _ => rng.pick(&[
            0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFEFF, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF,
        ]),
    };
    char::from_u32(c).expect("a scalar value")
}

/// Random valid text to cut long payloads from (building them char by char is slow in debug).
fn text_pool() -> String {
    let mut rng = Rng::new(0x7E47);
    let mut s = String::new();
    while s.len() < 160 * 1024 {
        s.push(rand_char(&mut rng));
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The receive path under test: `corecast_net::ws::receiver::Receiver`, as
// `engine/src/session/ws_io.rs` and the client drive it, with the socket replaced by the reads
// it is handed.

/// Something the reader reported.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Message { binary: bool, data: Vec<u8> },
    Ping(Vec<u8>),
    Pong,
    Close { code: Option<u16>, reason: String },
}

/// Why the connection ends.
type Fail = ReceiveError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The bytes ran out with the connection open.
    Open,
    /// The peer's close frame was read.
    Closed,
    /// A violation: the server closes with `Fail::close_code`.
    Failed(Fail),
}

struct Reader {
    rx: Receiver,
}

impl Reader {
    fn new(limit: u64) -> Reader {
        let limits = FrameLimits {
            role: Role::Server,
            max_message_bytes: limit,
        };
        Reader {
            rx: Receiver::new(limits, Vec::new()),
        }
    }

    /// One read's bytes: every event `Receiver::next_event` gives until it asks for another
    /// read. `Some` once the connection is over.
    fn read(&mut self, bytes: &[u8], seen: &mut Vec<Seen>) -> Option<End> {
        self.rx.extend(bytes);
        loop {
            match self.rx.next_event() {
                Ok(None) => return None,
                Ok(Some(Received::Message { binary, data })) => {
                    seen.push(Seen::Message { binary, data })
                }
                Ok(Some(Received::Ping(p))) => seen.push(Seen::Ping(p)),
                Ok(Some(Received::Pong)) => seen.push(Seen::Pong),
                Ok(Some(Received::Close { code, reason })) => {
                    seen.push(Seen::Close {
                        code: code.map(|c| c.0),
                        reason,
                    });
                    return Some(End::Closed);
                }
                Err(e) => return Some(End::Failed(e)),
            }
        }
    }
}

/// What feeding a stream in given reads produced.
#[derive(Debug)]
struct Outcome {
    /// Each event with the index of the read that produced it.
    seen: Vec<(Seen, usize)>,
    end: End,
    /// The read in which the connection ended (`None` when `Open`).
    end_read: Option<usize>,
    /// Bytes left buffered (an incomplete frame) when the stream ran out open.
    leftover: usize,
    /// Whether no message was open at the end.
    idle: bool,
}

/// Feeds `wire` cut at `cuts` (sorted, inside the stream): reads `[0, c1)`, `[c1, c2)`, ….
fn feed(wire: &[u8], cuts: &[usize], limit: u64) -> Outcome {
    let mut reader = Reader::new(limit);
    let mut seen = Vec::new();
    let mut tagged = Vec::new();
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain(std::iter::once(wire.len()))
        .collect();
    for (i, w) in bounds.windows(2).enumerate() {
        let end = reader.read(&wire[w[0]..w[1]], &mut seen);
        tagged.extend(seen.drain(..).map(|s| (s, i)));
        if let Some(end) = end {
            return Outcome {
                seen: tagged,
                end,
                end_read: Some(i),
                leftover: 0,
                idle: reader.rx.is_idle(),
            };
        }
    }
    Outcome {
        seen: tagged,
        end: End::Open,
        end_read: None,
        leftover: reader.rx.buffered(),
        idle: reader.rx.is_idle(),
    }
}

// ---------------------------------------------------------------------------------------------
// The generator: a client's byte stream and the outcome it should have.

#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    /// Where the payload starts (after the mask key).
    header_end: usize,
    end: usize,
}

/// How the intended stream ends.
#[derive(Debug, Clone, Copy)]
enum Expected {
    Closed {
        /// The close frame's last byte.
        last: usize,
    },
    Failed {
        fail: Fail,
        /// The first byte that makes the stream invalid: no error before the read that
        /// delivers it.
        earliest: usize,
        /// The error comes no later than the read that delivers this byte.
        latest: usize,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Seven,
    Sixteen,
    SixtyFour,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MsgFault {
    /// Invalid UTF-8 somewhere in a text message.
    Utf8,
    /// The last fragment takes the message over the limit (its own length is within it).
    TooBig,
    /// A text or binary frame while the message is open.
    DataInside,
}

fn b0(fin: bool, rsv: u8, opcode: u8) -> u8 {
    (u8::from(fin) << 7) | (rsv << 4) | opcode
}

/// Appends a frame header declaring `len` payload bytes in the length form `form`.
fn put_header(wire: &mut Vec<u8>, b0: u8, mask: Option<[u8; 4]>, len: u64, form: Form) {
    let mbit = if mask.is_some() { 0x80 } else { 0 };
    match form {
        Form::Seven => wire.extend([b0, mbit | len as u8]),
        Form::Sixteen => {
            wire.extend([b0, mbit | 126]);
            wire.extend((len as u16).to_be_bytes());
        }
        Form::SixtyFour => {
            wire.extend([b0, mbit | 127]);
            wire.extend(len.to_be_bytes());
        }
    }
    if let Some(k) = mask {
        wire.extend(k);
    }
}

/// Appends `payload`, masked with `mask` when given.
fn put_payload(wire: &mut Vec<u8>, mask: Option<[u8; 4]>, payload: &[u8]) {
    let k = mask.unwrap_or([0; 4]);
    wire.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
}

/// The first index `i` such that `payload[..=i]` cannot start valid UTF-8 (the offending
/// byte), or `None` when the only fault is a code point cut by the end.
fn offending_byte(payload: &[u8]) -> Option<usize> {
    let v = std::str::from_utf8(payload).unwrap_err().valid_up_to();
    (v..payload.len().min(v + 4)).find(
        |&i| matches!(std::str::from_utf8(&payload[v..=i]), Err(e) if e.error_len().is_some()),
    )
}

struct Gen<'p> {
    rng: Rng,
    pool: &'p str,
    /// What is generated so far.
    case: Case,
}

impl Gen<'_> {
    fn dead(&self) -> bool {
        self.case.end.is_some()
    }

    /// Records an event the reader must report, unless the stream already ended.
    fn saw(&mut self, s: Seen, span: Span) {
        if !self.dead() {
            self.case.seen.push((s, span.end - 1));
        }
    }

    /// Ends the intended stream with `fail`, unless it already ended.
    fn fail(&mut self, fail: Fail, earliest: usize, latest: usize) {
        if !self.dead() {
            self.case.log.push(format!(
                "  ^ expected {fail:?} in bytes {earliest}..={latest}"
            ));
            self.case.end = Some(Expected::Failed {
                fail,
                earliest,
                latest,
            });
        }
    }

    fn key(&mut self) -> [u8; 4] {
        if self.rng.chance(5) {
            [0; 4]
        } else {
            (self.rng.next() as u32).to_ne_bytes()
        }
    }

    /// A payload length up to `max` and the limit: the edges of the three length forms,
    /// small and random ones.
    fn len(&mut self, max: usize) -> usize {
        let n = match self.rng.below(100) {
            0..=9 => 0,
            10..=17 => 1,
            18..=39 => self.rng.range(2, 20),
            40..=54 => self.rng.pick(&[124, 125, 126, 127, 128]),
            55..=79 => self.rng.range(0, 1000),
            80..=87 => self.rng.range(1000, 8000),
            88..=91 => self.rng.pick(&[65535, 65536]),
            92..=93 => self.rng.pick(&[65534, 65537]),
            94..=95 => self.rng.range(65538, FRAME_CAP as usize),
            _ => self.rng.range(0, 300),
        };
        n.min(max).min(self.case.limit as usize)
    }

    fn form(&mut self, len: u64) -> Form {
        let minimal = match len {
            0..=125 => Form::Seven,
            126..=0xFFFF => Form::Sixteen,
            _ => Form::SixtyFour,
        };
        if self.rng.chance(85) || minimal == Form::SixtyFour {
            return minimal;
        }
        if minimal == Form::Seven && self.rng.chance(50) {
            return Form::Sixteen;
        }
        Form::SixtyFour
    }

    /// Appends a header declaring `len` bytes in `form`.
    fn header(&mut self, b0: u8, mask: Option<[u8; 4]>, len: u64, form: Form) -> Span {
        let start = self.case.wire.len();
        put_header(&mut self.case.wire, b0, mask, len, form);
        let span = Span {
            start,
            header_end: self.case.wire.len(),
            end: self.case.wire.len(),
        };
        self.case.spans.push(span);
        self.case.log.push(format!(
            "{start}: b0={b0:#04x} masked={} len={len} header={}",
            mask.is_some(),
            span.header_end - start
        ));
        span
    }

    /// Appends a frame: header (length form chosen at random) and masked payload.
    fn frame(&mut self, b0: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Span {
        let form = self.form(payload.len() as u64);
        self.frame_in(b0, mask, payload, form)
    }

    fn frame_in(&mut self, b0: u8, mask: Option<[u8; 4]>, payload: &[u8], form: Form) -> Span {
        let mut span = self.header(b0, mask, payload.len() as u64, form);
        put_payload(&mut self.case.wire, mask, payload);
        span.end = self.case.wire.len();
        *self.case.spans.last_mut().unwrap() = span;
        span
    }

    /// `n` bytes of valid UTF-8.
    fn text(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        while n - out.len() > 64 {
            let pool = self.pool;
            let mut s = self.rng.below(pool.len() as u64) as usize;
            while !pool.is_char_boundary(s) {
                s -= 1;
            }
            let mut e = (s + n - out.len()).min(pool.len());
            while !pool.is_char_boundary(e) {
                e -= 1;
            }
            out.extend_from_slice(&pool.as_bytes()[s..e]);
        }
        while out.len() < n {
            let mut c = rand_char(&mut self.rng);
            if c.len_utf8() > n - out.len() {
                c = char::from(b'a' + self.rng.below(26) as u8);
            }
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
        out
    }

    /// A sequence that is invalid UTF-8 whatever valid text follows it.
    fn bad_seq(&mut self) -> Vec<u8> {
        let cont = |rng: &mut Rng| 0x80 + rng.below(0x40) as u8;
        match self.rng.below(7) {
            // A continuation byte with no lead.
            0 => vec![cont(&mut self.rng)],
            // Never a lead byte.
            1 => vec![self.rng.pick(&[0xC0, 0xC1, 0xF5, 0xF7, 0xF8, 0xFE, 0xFF])],
            // Overlong 3- and 4-byte forms.
            2 => vec![0xE0, 0x80 + self.rng.below(0x20) as u8, cont(&mut self.rng)],
            3 => vec![0xF0, 0x80 + self.rng.below(0x10) as u8, 0x80, 0x80],
            // A surrogate.
            4 => vec![0xED, 0xA0 + self.rng.below(0x20) as u8, cont(&mut self.rng)],
            // Over U+10FFFF.
            5 => vec![0xF4, 0x90 + self.rng.below(0x30) as u8, 0x80, 0x80],
            // A multi-byte code point cut short (what follows is not a continuation byte).
            _ => loop {
                let c = rand_char(&mut self.rng);
                if c.len_utf8() > 1 {
                    let mut b = [0; 4];
                    let bytes = c.encode_utf8(&mut b).as_bytes();
                    break bytes[..self.rng.range(1, bytes.len() - 1)].to_vec();
                }
            },
        }
    }

    /// `n` bytes: valid text with an invalid sequence starting at `p` (`p + len <= n`).
    fn text_with_bad(&mut self, n: usize, p: usize, bad: &[u8]) -> Vec<u8> {
        let mut out = self.text(p);
        out.extend_from_slice(bad);
        let rest = self.text(n - out.len());
        out.extend(rest);
        out
    }

    fn ctrl_len(&mut self) -> usize {
        match self.rng.below(4) {
            0 => 0,
            1 => 1,
            2 => CONTROL_PAYLOAD_BYTES_MAX,
            _ => self.rng.range(0, CONTROL_PAYLOAD_BYTES_MAX),
        }
    }

    /// A valid close payload: its code and reason.
    fn close_payload(&mut self) -> (Vec<u8>, Option<u16>, String) {
        if self.rng.chance(20) {
            return (Vec::new(), None, String::new());
        }
        let code = match self.rng.below(3) {
            0 => self.rng.range(3000, 4999) as u16,
            _ => self.rng.pick(&[
                1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4999,
            ]),
        };
        let n = match self.rng.below(4) {
            0 => 0,
            1 => 123,
            _ => self.rng.range(0, 123),
        };
        let reason = String::from_utf8(self.text(n)).unwrap();
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice(reason.as_bytes());
        (p, Some(code), reason)
    }

    /// A valid ping, pong or (when `close_ok`, sometimes) close, which ends the stream.
    fn control(&mut self, close_ok: bool) {
        let k = self.key();
        match self.rng.below(100) {
            0..=7 if close_ok => {
                let (p, code, reason) = self.close_payload();
                let span = self.frame(b0(true, 0, OpCode::Close.bits()), Some(k), &p);
                self.saw(Seen::Close { code, reason }, span);
                if !self.dead() {
                    self.case.end = Some(Expected::Closed { last: span.end - 1 });
                }
            }
            0..=53 => {
                let n = self.ctrl_len();
                let p = self.rng.bytes(n);
                let span = self.frame(b0(true, 0, OpCode::Ping.bits()), Some(k), &p);
                self.saw(Seen::Ping(p), span);
            }
            _ => {
                let n = self.ctrl_len();
                let p = self.rng.bytes(n);
                let span = self.frame(b0(true, 0, OpCode::Pong.bits()), Some(k), &p);
                self.saw(Seen::Pong, span);
            }
        }
    }

    /// A data message, fragmented or not, with controls between its fragments; or one with
    /// the fault `fault`.
    fn message(&mut self, fault: Option<MsgFault>) {
        let binary = match fault {
            Some(MsgFault::Utf8) => false,
            _ => self.rng.chance(40),
        };
        let frags = match fault {
            Some(MsgFault::TooBig) => self.rng.range(2, 4),
            // Fragments sent before the intruding frame.
            Some(MsgFault::DataInside) => self.rng.range(1, 3),
            _ if self.rng.chance(55) => 1,
            _ => self.rng.range(2, 5),
        };
        let limit = self.case.limit as usize;
        let cap = self.case.limit.min(FRAME_CAP) as usize;
        let mut budget = limit;
        let mut lens = Vec::with_capacity(frags);
        for _ in 0..frags {
            let l = self.len(cap.min(budget));
            budget -= l;
            lens.push(l);
        }
        let mut bad_at = None;
        let payload = match fault {
            Some(MsgFault::TooBig) => {
                let head = frags - 1;
                if lens[..head].iter().sum::<usize>() == 0 {
                    lens[0] = 1;
                }
                let s: usize = lens[..head].iter().sum();
                lens[head] = self.rng.range(limit - s + 1, limit);
                let total = s + lens[head];
                if !binary && lens[head] >= 4 && self.rng.chance(60) {
                    // Invalid UTF-8 in the fragment that is over the limit: 1009 still (the
                    // size is checked first), however the fragment arrives.
                    let bad = self.bad_seq();
                    let p = self.rng.range(s, total - bad.len());
                    self.text_with_bad(total, p, &bad)
                } else if binary {
                    self.rng.bytes(total)
                } else {
                    self.text(total)
                }
            }
            Some(MsgFault::Utf8) => {
                let bad = self.bad_seq();
                let sum: usize = lens.iter().sum();
                if sum < bad.len() {
                    lens[0] += bad.len() - sum;
                }
                let total: usize = lens.iter().sum();
                let room = total - bad.len();
                let p = if self.rng.chance(20) {
                    room
                } else {
                    self.rng.range(0, room)
                };
                let payload = self.text_with_bad(total, p, &bad);
                let e = std::str::from_utf8(&payload).unwrap_err();
                assert_eq!(e.valid_up_to(), p, "generator: {payload:02x?}");
                bad_at = Some((p, offending_byte(&payload)));
                payload
            }
            _ if binary => self.rng.bytes(lens.iter().sum()),
            _ => {
                let total = lens.iter().sum();
                self.text(total)
            }
        };
        let total = payload.len();
        let mut off = 0;
        let mut last = None;
        for (i, &l) in lens.iter().enumerate() {
            let fin = fault != Some(MsgFault::DataInside) && i == frags - 1;
            let op = match (i, binary) {
                (0, false) => OpCode::Text,
                (0, true) => OpCode::Binary,
                _ => OpCode::Continuation,
            };
            let k = self.key();
            let span = self.frame(b0(fin, 0, op.bits()), Some(k), &payload[off..off + l]);
            match (fault, bad_at) {
                (Some(MsgFault::Utf8), Some((at, Some(m)))) if (off..off + l).contains(&m) => {
                    let b = span.header_end + (m - off);
                    let fail = Fail::Message(ProtocolViolation::InvalidUtf8 { at });
                    self.fail(fail, b, b);
                }
                (Some(MsgFault::Utf8), Some((at, None))) if fin => {
                    let fail = Fail::Message(ProtocolViolation::InvalidUtf8 { at });
                    self.fail(fail, span.end - 1, span.end - 1);
                }
                (Some(MsgFault::TooBig), _) if fin => {
                    let fail = Fail::Message(ProtocolViolation::MessageTooBig {
                        bytes: total as u64,
                        limit: self.case.limit,
                    });
                    self.fail(fail, span.start, span.end - 1);
                }
                _ => {}
            }
            off += l;
            last = Some(span);
            if !fin && self.rng.chance(35) {
                for _ in 0..self.rng.range(1, 2) {
                    self.control(true);
                }
            }
        }
        if fault == Some(MsgFault::DataInside) {
            let op = self.rng.pick(&[OpCode::Text, OpCode::Binary]);
            let fin = self.rng.chance(70);
            let n = self.len(300);
            let p = self.text(n);
            let k = self.key();
            let span = self.frame(b0(fin, 0, op.bits()), Some(k), &p);
            let fail = Fail::Message(ProtocolViolation::MessageAlreadyOpen { opcode: op });
            self.fail(fail, span.start, span.header_end - 1);
        } else {
            self.saw(
                Seen::Message {
                    binary,
                    data: payload,
                },
                last.unwrap(),
            );
        }
    }

    /// One fault that ends the connection.
    fn fault(&mut self) {
        let k = self.key();
        let any_op = [OpCode::Text, OpCode::Binary, OpCode::Ping, OpCode::Pong];
        let ctrl_op = [OpCode::Ping, OpCode::Pong, OpCode::Close];
        let data_op = [OpCode::Text, OpCode::Binary, OpCode::Continuation];
        match self.rng.below(20) {
            0..=6 => self.message(Some(MsgFault::Utf8)),
            7 if self.case.limit < MESSAGE_BYTES_MAX_DEFAULT => {
                self.message(Some(MsgFault::TooBig))
            }
            7 => self.message(Some(MsgFault::Utf8)),
            8 => self.message(Some(MsgFault::DataInside)),
            9 => {
                let n = self.len(300);
                let p = self.rng.bytes(n);
                let fin = self.rng.chance(50);
                let span = self.frame(b0(fin, 0, 0), Some(k), &p);
                let fail = Fail::Message(ProtocolViolation::ContinuationWithoutMessage);
                self.fail(fail, span.start, span.header_end - 1);
            }
            10 => {
                let span = self.frame(b0(true, 0, OpCode::Close.bits()), Some(k), &[0x03]);
                self.fail(
                    Fail::Message(ProtocolViolation::CloseLengthOne),
                    span.start,
                    span.end - 1,
                );
            }
            11 => {
                let code = match self.rng.below(3) {
                    0 => self.rng.range(0, 999) as u16,
                    1 => self.rng.range(5000, 65535) as u16,
                    _ => self
                        .rng
                        .pick(&[0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999]),
                };
                let mut p = code.to_be_bytes().to_vec();
                let n = self.rng.range(0, 123);
                p.extend(self.text(n));
                let span = self.frame(b0(true, 0, OpCode::Close.bits()), Some(k), &p);
                let fail = Fail::Message(ProtocolViolation::InvalidCloseCode { code });
                self.fail(fail, span.start, span.end - 1);
            }
            12 => {
                let bad = self.bad_seq();
                let n = self.rng.range(bad.len(), 123);
                let at = self.rng.range(0, n - bad.len());
                let mut p = 1000u16.to_be_bytes().to_vec();
                p.extend(self.text_with_bad(n, at, &bad));
                let span = self.frame(b0(true, 0, OpCode::Close.bits()), Some(k), &p);
                let fail = Fail::Message(ProtocolViolation::InvalidCloseReason);
                self.fail(fail, span.start, span.end - 1);
            }
            13 => {
                let rsv = self.rng.range(1, 7) as u8;
                let op = self.rng.pick(&any_op);
                let n = self.len(CONTROL_PAYLOAD_BYTES_MAX);
                let p = self.text(n);
                let span = self.frame(b0(true, rsv, op.bits()), Some(k), &p);
                let fail = Fail::Frame(FrameError::ReservedBits { rsv });
                self.fail(fail, span.start, span.header_end - 1);
            }
            14 => {
                let opcode = self.rng.pick(&[3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF]);
                let n = self.len(300);
                let p = self.rng.bytes(n);
                let span = self.frame(b0(true, 0, opcode), Some(k), &p);
                let fail = Fail::Frame(FrameError::ReservedOpcode { opcode });
                self.fail(fail, span.start, span.header_end - 1);
            }
            15 => {
                let op = self.rng.pick(&any_op);
                let n = self.len(CONTROL_PAYLOAD_BYTES_MAX);
                let p = self.text(n);
                let span = self.frame(b0(true, 0, op.bits()), None, &p);
                let fail = Fail::Frame(FrameError::UnmaskedFrame);
                self.fail(fail, span.start, span.header_end - 1);
            }
            16 => {
                let opcode = self.rng.pick(&ctrl_op);
                let n = self.ctrl_len();
                let p = self.rng.bytes(n);
                let span = self.frame(b0(false, 0, opcode.bits()), Some(k), &p);
                let fail = Fail::Frame(FrameError::ControlFragmented { opcode });
                self.fail(fail, span.start, span.header_end - 1);
            }
            17 => {
                let opcode = self.rng.pick(&ctrl_op);
                let n = self.rng.range(CONTROL_PAYLOAD_BYTES_MAX + 1, 400);
                let p = self.rng.bytes(n);
                let form = self.rng.pick(&[Form::Sixteen, Form::SixtyFour]);
                let span = self.frame_in(b0(true, 0, opcode.bits()), Some(k), &p, form);
                let fail = Fail::Frame(FrameError::ControlTooLong {
                    opcode,
                    len: n as u64,
                });
                self.fail(fail, span.start, span.header_end - 1);
            }
            18 => {
                let op = self.rng.pick(&data_op);
                let len = (1 << 63) | self.rng.next() >> self.rng.below(64);
                let fin = self.rng.chance(50);
                let span = self.header(b0(fin, 0, op.bits()), Some(k), len, Form::SixtyFour);
                let fail = Fail::Frame(FrameError::LengthMsbSet { len });
                self.fail(fail, span.start, span.header_end - 1);
            }
            _ => {
                let op = self.rng.pick(&data_op);
                let len = match self.rng.below(4) {
                    0 => self.case.limit + 1,
                    1 => self.case.limit + 1 + self.rng.below(1000),
                    2 => self.case.limit + 1 + self.rng.below(1 << 40),
                    _ => u64::MAX >> 1,
                };
                let form = self.form(len);
                let fin = self.rng.chance(50);
                let span = self.header(b0(fin, 0, op.bits()), Some(k), len, form);
                let fail = Fail::Frame(FrameError::TooBig {
                    len,
                    limit: self.case.limit,
                });
                self.fail(fail, span.start, span.header_end - 1);
            }
        }
    }
}

/// A random case: the stream, its frames, and what reading it must give.
struct Case {
    limit: u64,
    wire: Vec<u8>,
    spans: Vec<Span>,
    seen: Vec<(Seen, usize)>,
    end: Option<Expected>,
    leftover: usize,
    log: Vec<String>,
}

fn generate(rng: Rng, pool: &str) -> Case {
    let mut g = Gen {
        rng,
        pool,
        case: Case {
            limit: MESSAGE_BYTES_MAX_DEFAULT,
            wire: Vec::new(),
            spans: Vec::new(),
            seen: Vec::new(),
            end: None,
            leftover: 0,
            log: Vec::new(),
        },
    };
    if g.rng.chance(15) {
        // A small limit, so fragmented messages outgrow it.
        g.case.limit = match g.rng.below(3) {
            0 => g.rng.pick(&[125, 126, 127, 1000, 65535, 65536]),
            _ => g.rng.range(128, 70_000) as u64,
        };
    }
    let items = g.rng.range(1, 6);
    let fault_at = g.rng.chance(45).then(|| g.rng.range(0, items - 1));
    for i in 0..items {
        if g.dead() {
            break;
        }
        if fault_at == Some(i) {
            g.fault();
            break;
        }
        if g.rng.chance(70) {
            g.message(None);
        } else {
            g.control(true);
        }
    }
    if !g.dead() {
        match g.rng.below(10) {
            0 | 1 => {
                let k = g.key();
                let (p, code, reason) = g.close_payload();
                let span = g.frame(b0(true, 0, OpCode::Close.bits()), Some(k), &p);
                g.saw(Seen::Close { code, reason }, span);
                g.case.end = Some(Expected::Closed { last: span.end - 1 });
            }
            2 => {
                // A valid frame cut short: reading stops open with it buffered.
                let k = g.key();
                let (op, p) = match g.rng.below(3) {
                    0 => {
                        let n = g.len(5000).max(1);
                        (OpCode::Text, g.text(n))
                    }
                    1 => {
                        let n = g.len(5000);
                        (OpCode::Binary, g.rng.bytes(n))
                    }
                    _ => {
                        let n = g.ctrl_len();
                        (OpCode::Ping, g.rng.bytes(n))
                    }
                };
                let span = g.frame(b0(true, 0, op.bits()), Some(k), &p);
                let cut = g.rng.range(span.start + 1, span.end - 1);
                g.case.wire.truncate(cut);
                g.case.leftover = cut - span.start;
                g.case.log.push(format!("  cut at {cut}"));
            }
            _ => {}
        }
    }
    if g.dead() {
        // Never read: more frames, or garbage.
        for _ in 0..g.rng.range(0, 2) {
            if g.rng.chance(50) {
                g.message(None);
            } else {
                g.control(true);
            }
        }
        if g.rng.chance(30) {
            let n = g.rng.range(1, 20);
            let junk = g.rng.bytes(n);
            g.case.wire.extend(junk);
        }
    }
    g.case
}

/// Cut points for one way of splitting the stream into reads.
fn split(rng: &mut Rng, case: &Case) -> (&'static str, Vec<usize>) {
    let len = case.wire.len();
    let mut cuts = Vec::new();
    let name = match rng.below(4) {
        0 if len <= 2500 => {
            cuts.extend(1..len);
            "every byte"
        }
        0 | 1 => {
            let mut at = 0;
            loop {
                at += match rng.below(100) {
                    0..=29 => 1,
                    30..=59 => rng.range(2, 16),
                    60..=84 => rng.range(17, 512),
                    _ => rng.range(513, 16384),
                };
                if at >= len {
                    break;
                }
                cuts.push(at);
            }
            "random sizes"
        }
        2 => {
            for s in &case.spans {
                if rng.chance(50) {
                    cuts.push(s.start);
                }
                if rng.chance(70) {
                    cuts.push(rng.range(s.start + 1, s.header_end - 1));
                }
                if rng.chance(40) {
                    // Inside the mask key (or the length) at its end.
                    let lo = (s.start + 1).max(s.header_end.saturating_sub(3));
                    cuts.push(rng.range(lo, s.header_end - 1));
                }
                if rng.chance(30) {
                    cuts.push(s.header_end);
                }
                if s.end > s.header_end && rng.chance(40) {
                    cuts.push(rng.range(s.header_end, s.end));
                }
            }
            "inside headers"
        }
        _ => {
            for _ in 0..rng.range(1, 4) {
                cuts.push(rng.range(0, len));
            }
            "a few cuts"
        }
    };
    if let Some(Expected::Failed {
        earliest, latest, ..
    }) = case.end
    {
        if rng.chance(60) {
            // The bytes that decide the error in reads of their own.
            cuts.extend([earliest, earliest + 1, latest, latest + 1]);
        }
    }
    cuts.retain(|&c| c > 0 && c < len);
    cuts.sort_unstable();
    cuts.dedup();
    (name, cuts)
}

/// The index of the read (reads cut at `cuts`) that delivers byte `b`.
fn read_of(cuts: &[usize], b: usize) -> usize {
    cuts.partition_point(|&c| c <= b)
}

fn check_whole(case: &Case, whole: &Outcome) -> Result<(), String> {
    let seen: Vec<&Seen> = whole.seen.iter().map(|(s, _)| s).collect();
    let want: Vec<&Seen> = case.seen.iter().map(|(s, _)| s).collect();
    if seen != want {
        return Err(format!(
            "whole stream: events differ from the intended ones\n got {}\nwant {}",
            brief(&seen),
            brief(&want)
        ));
    }
    let want_end = match case.end {
        None => End::Open,
        Some(Expected::Closed { .. }) => End::Closed,
        Some(Expected::Failed { fail, .. }) => End::Failed(fail),
    };
    if whole.end != want_end {
        return Err(format!(
            "whole stream: ended {:?}, intended {want_end:?}",
            whole.end
        ));
    }
    if let End::Failed(f) = whole.end {
        let code = f.close_code().0;
        assert!(matches!(code, 1002 | 1007 | 1009), "{f:?} → {code}");
    }
    if whole.end == End::Open && (whole.leftover != case.leftover || !whole.idle) {
        return Err(format!(
            "whole stream: open with {} bytes left (intended {}), idle {}",
            whole.leftover, case.leftover, whole.idle
        ));
    }
    Ok(())
}

fn check_split(case: &Case, whole: &Outcome, cuts: &[usize], got: &Outcome) -> Result<(), String> {
    let a: Vec<&Seen> = got.seen.iter().map(|(s, _)| s).collect();
    let b: Vec<&Seen> = whole.seen.iter().map(|(s, _)| s).collect();
    if a != b {
        return Err(format!(
            "events differ from the whole stream's\n split {}\n whole {}",
            brief(&a),
            brief(&b)
        ));
    }
    if (got.end, got.leftover, got.idle) != (whole.end, whole.leftover, whole.idle) {
        return Err(format!(
            "ended {:?} (left {}, idle {}); whole stream ended {:?} (left {}, idle {})",
            got.end, got.leftover, got.idle, whole.end, whole.leftover, whole.idle
        ));
    }
    for (i, ((s, read), (_, last))) in got.seen.iter().zip(&case.seen).enumerate() {
        let due = read_of(cuts, *last);
        if *read != due {
            return Err(format!(
                "event {i} ({}) came in read {read}; its last byte {last} arrived in read {due}",
                brief(&[s])
            ));
        }
    }
    match (case.end, got.end_read) {
        (Some(Expected::Closed { last }), Some(r)) if r != read_of(cuts, last) => Err(format!(
            "close came in read {r}, its last byte {last} arrived in read {}",
            read_of(cuts, last)
        )),
        (
            Some(Expected::Failed {
                fail,
                earliest,
                latest,
            }),
            Some(r),
        ) if r < read_of(cuts, earliest) || r > read_of(cuts, latest) => Err(format!(
            "{fail:?} came in read {r}, not in reads {}..={} (bytes {earliest}..={latest})",
            read_of(cuts, earliest),
            read_of(cuts, latest)
        )),
        _ => Ok(()),
    }
}

/// A short description of events (payloads abbreviated).
fn brief(seen: &[&Seen]) -> String {
    let parts: Vec<String> = seen
        .iter()
        .map(|s| match s {
            Seen::Message { binary, data } => {
                let n = data.len().min(12);
                format!(
                    "{}[{}]{:02x?}{}",
                    if *binary { "bin" } else { "text" },
                    data.len(),
                    &data[..n],
                    if data.len() > n { "…" } else { "" }
                )
            }
            other => format!("{other:?}"),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// One case: generate, read whole, read split `SPLITS` ways.
fn run_case(seed: u64, pool: &str) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let case = generate(Rng::new(rng.next()), pool);
    let whole = feed(&case.wire, &[], case.limit);
    check_whole(&case, &whole).map_err(|e| describe(&case, e))?;
    for _ in 0..SPLITS {
        let (how, cuts) = split(&mut rng, &case);
        let got = feed(&case.wire, &cuts, case.limit);
        check_split(&case, &whole, &cuts, &got).map_err(|e| {
            let shown: Vec<usize> = cuts.iter().copied().take(60).collect();
            describe(
                &case,
                format!(
                    "split \"{how}\", {} reads, cuts {shown:?}: {e}",
                    cuts.len() + 1
                ),
            )
        })?;
    }
    Ok(())
}

fn describe(case: &Case, e: String) -> String {
    let frames: Vec<&str> = case.log.iter().map(String::as_str).take(40).collect();
    format!(
        "{e}\nlimit {}, {} bytes, frames:\n{}",
        case.limit,
        case.wire.len(),
        frames.join("\n")
    )
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

#[test]
fn any_split_of_the_stream_reads_like_the_whole_stream() {
    let pool = text_pool();
    let base = env_u64("WS_SPLIT_SEED").unwrap_or(SEED);
    let seeds: Vec<u64> = match env_u64("WS_SPLIT_CASE") {
        Some(one) => vec![one],
        None => (0..env_u64("WS_SPLIT_CASES").unwrap_or(CASES))
            .map(|i| splitmix64(base ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect(),
    };
    for (i, &seed) in seeds.iter().enumerate() {
        let result = catch_unwind(AssertUnwindSafe(|| run_case(seed, &pool)))
            .unwrap_or_else(|_| Err("panicked (message above)".to_string()));
        if let Err(e) = result {
            panic!(
                "case {i} (run seed {base:#x}, case seed {seed:#x}; rerun it alone with \
                 WS_SPLIT_CASE={seed:#x}): {e}"
            );
        }
    }
}

/// What feeding a stream in the given reads ends with.
fn end_of(wire: &[u8], cuts: &[usize], limit: u64) -> End {
    feed(wire, cuts, limit).end
}

/// A masked client frame, minimal length form.
fn masked(fin: bool, op: OpCode, payload: &[u8]) -> Vec<u8> {
    let form = match payload.len() {
        0..=125 => Form::Seven,
        126..=0xFFFF => Form::Sixteen,
        _ => Form::SixtyFour,
    };
    let key = Some([0x37, 0xfa, 0x21, 0x3d]);
    let mut wire = Vec::new();
    put_header(
        &mut wire,
        b0(fin, 0, op.bits()),
        key,
        payload.len() as u64,
        form,
    );
    put_payload(&mut wire, key, payload);
    wire
}

/// Regression: a text continuation frame that takes the message over the limit and holds
/// invalid UTF-8 was refused 1009 when it arrived in one read (`push` checks the size
/// first) but 1007 when its first bytes arrived before the rest (`check_partial` checked
/// only the UTF-8): the close code depended on how TCP split the stream.
#[test]
fn over_limit_text_continuation_with_bad_utf8_is_1009_however_split() {
    let limit = 100;
    let wire = [
        masked(false, OpCode::Text, &[b'a'; 60]),
        masked(
            true,
            OpCode::Continuation,
            &[&[0xFF][..], &[b'b'; 59]].concat(),
        ),
    ]
    .concat();
    let too_big = End::Failed(Fail::Message(ProtocolViolation::MessageTooBig {
        bytes: 120,
        limit: 100,
    }));
    assert_eq!(end_of(&wire, &[], limit), too_big, "one read");
    // The second frame's header and its first payload byte (0xFF) in one read, the rest later.
    let second = 2 + 4 + 60;
    let header2 = 2 + 4;
    assert_eq!(
        end_of(&wire, &[second, second + header2 + 1], limit),
        too_big,
        "split after the bad byte"
    );
    let every: Vec<usize> = (1..wire.len()).collect();
    assert_eq!(end_of(&wire, &every, limit), too_big, "every byte");
}
