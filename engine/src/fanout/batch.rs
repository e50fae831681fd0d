//! One committed batch, framed once.
//!
//! The writer thread turns the rows of one commit of one stream into a single buffer holding every
//! row's complete WebSocket text frame (`[offset,ts,row]` with its header). That buffer is shared by
//! `Arc` with every shard and sliced (reference-counted, never copied) into each subscriber's
//! vectored write. Row positions are kept so `where=` filters can read a row without re-parsing the
//! frame.

use std::sync::OnceLock;

use bytes::Bytes;
use corecast_net::protocol::frame::encode_data_frame;

/// The frames of one commit of one stream, in offset order.
///
/// Shape: `frames` holds `len()` complete frames back to back; frame `i` spans
/// `frame_start(i)..frame_end(i)` and its row JSON spans `rows[i]`. `first` is the sequence of
/// frame 0 (the offset on durable streams; an internal counter on live-only ones).
pub struct FrameBatch {
    /// Sequence (offset) of the first frame.
    pub first: u64,
    /// All frames, back to back.
    pub frames: Bytes,
    ends: Vec<u32>,
    rows: Vec<(u32, u32)>,
    /// The SSE rendering, built on first use by an SSE reader and shared by all of them.
    sse: OnceLock<SseBatch>,
}

/// One batch's rows as SSE events (`id: <offset>`, `data: [offset,ts,row]`, blank line), back
/// to back; event `i` ends at `ends[i]`.
pub struct SseBatch {
    /// All events, back to back.
    pub events: Bytes,
    ends: Vec<u32>,
}

impl SseBatch {
    /// The events `from..to` (indexes into the batch) as one shared slice.
    pub fn slice(&self, from: usize, to: usize) -> Bytes {
        let to = to.min(self.ends.len());
        if from >= to {
            return Bytes::new();
        }
        let start = if from == 0 {
            0
        } else {
            self.ends[from - 1] as usize
        };
        self.events.slice(start..self.ends[to - 1] as usize)
    }

    /// Bytes of events `from..to`.
    pub fn bytes_between(&self, from: usize, to: usize) -> usize {
        let start = if from == 0 {
            0
        } else {
            self.ends[from - 1] as usize
        };
        self.ends[to - 1] as usize - start
    }
}

/// Accumulates rows into a [`FrameBatch`].
pub struct FrameBatchBuilder {
    first: u64,
    durable: bool,
    buf: Vec<u8>,
    ends: Vec<u32>,
    rows: Vec<(u32, u32)>,
}

impl FrameBatchBuilder {
    /// Starts a batch whose first row gets sequence `first`. `durable` says whether the wire
    /// offset is the sequence (true) or `null` (live-only streams).
    pub fn new(first: u64, durable: bool, capacity: usize) -> FrameBatchBuilder {
        FrameBatchBuilder {
            first,
            durable,
            buf: Vec::with_capacity(capacity),
            ends: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Frames the next row (its sequence is `first + len`) stamped `ts_us` (µs since the epoch;
    /// every row of one publish frame shares one stamp).
    pub fn push(&mut self, row: &[u8], ts_us: i64) {
        let seq = self.first + self.ends.len() as u64;
        let before = self.buf.len();
        encode_data_frame(self.durable.then_some(seq), Some(ts_us), row, &mut self.buf);
        let end = self.buf.len();
        // the row is the frame's last bytes but one (`]`)
        let row_end = end - 1;
        let row_start = row_end - row.len();
        debug_assert!(row_start >= before);
        self.rows.push((row_start as u32, row_end as u32));
        self.ends.push(end as u32);
    }

    /// The sequence the next pushed row gets.
    pub fn next_seq(&self) -> u64 {
        self.first + self.ends.len() as u64
    }

    /// Rows pushed so far.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of the frames pushed so far.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Seals the batch.
    pub fn finish(self) -> FrameBatch {
        FrameBatch {
            first: self.first,
            frames: Bytes::from(self.buf),
            ends: self.ends,
            rows: self.rows,
            sse: OnceLock::new(),
        }
    }
}

impl FrameBatch {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Sequence after the last frame.
    pub fn end(&self) -> u64 {
        self.first + self.ends.len() as u64
    }

    /// Byte offset where frame `i` starts.
    pub fn frame_start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1] as usize
        }
    }

    /// Byte offset where frame `i` ends.
    pub fn frame_end(&self, i: usize) -> usize {
        self.ends[i] as usize
    }

    /// The frames `from..to` (indexes into this batch) as one shared slice.
    pub fn slice(&self, from: usize, to: usize) -> Bytes {
        let to = to.min(self.len());
        if from >= to {
            return Bytes::new();
        }
        self.frames
            .slice(self.frame_start(from)..self.frame_end(to - 1))
    }

    /// The row JSON of frame `i`.
    pub fn row(&self, i: usize) -> &[u8] {
        let (a, b) = self.rows[i];
        &self.frames[a as usize..b as usize]
    }

    /// The payload of frame `i`: `[offset,ts,row]` without the WebSocket header.
    pub fn payload(&self, i: usize) -> &[u8] {
        let start = self.frame_start(i);
        let header = match self.frames[start + 1] & 0x7f {
            126 => 4,
            127 => 10,
            _ => 2,
        };
        &self.frames[start + header..self.frame_end(i)]
    }

    /// The batch as SSE events, rendered on the first call (by the first SSE reader of the
    /// stream) and shared by every later one; streams without SSE readers never pay for it.
    /// Live-only batches (offset `null`) get no `id:` line.
    pub fn sse(&self) -> &SseBatch {
        self.sse.get_or_init(|| {
            let mut buf = Vec::with_capacity(self.frames.len() + self.len() * 24);
            let mut ends = Vec::with_capacity(self.len());
            for i in 0..self.len() {
                let p = self.payload(i);
                let id = (!p.starts_with(b"[null,")).then_some(self.first + i as u64);
                corecast_net::sse::push_event(id, p, &mut buf);
                ends.push(buf.len() as u32);
            }
            SseBatch {
                events: Bytes::from(buf),
                ends,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_rows_and_slices() {
        let mut b = FrameBatchBuilder::new(7, true, 256);
        b.push(br#"{"a":1}"#, 1_000);
        b.push(br#"{"a":2}"#, 1_000);
        b.push(br#"{"a":3}"#, 1_000);
        let fb = b.finish();
        assert_eq!(fb.len(), 3);
        assert_eq!(fb.end(), 10);
        assert_eq!(fb.row(1), br#"{"a":2}"#);
        let f0 = &fb.frames[fb.frame_start(0)..fb.frame_end(0)];
        assert_eq!(f0[0], 0x81);
        assert_eq!(&f0[2..], br#"[7,1000,{"a":1}]"#);
        let all = fb.slice(0, 3);
        assert_eq!(all.len(), fb.frames.len());
        let mid = fb.slice(1, 2);
        assert_eq!(&mid[2..], br#"[8,1000,{"a":2}]"#);
        let tail = fb.slice(2, 3);
        assert_eq!(&tail[2..], br#"[9,1000,{"a":3}]"#);
        assert_eq!(fb.payload(1), br#"[8,1000,{"a":2}]"#);
        let sse = fb.sse();
        assert_eq!(
            &sse.slice(1, 3)[..],
            b"id: 8\ndata: [8,1000,{\"a\":2}]\n\nid: 9\ndata: [9,1000,{\"a\":3}]\n\n"
        );
        assert!(std::ptr::eq(sse, fb.sse()), "rendered once");
    }

    #[test]
    fn live_only_frames_carry_null_offsets() {
        let mut b = FrameBatchBuilder::new(1, false, 64);
        b.push(br#"{}"#, 5);
        let fb = b.finish();
        assert_eq!(&fb.frames[2..], br#"[null,5,{}]"#);
    }
}
