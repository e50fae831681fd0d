//! One committed batch, framed once.
//!
//! The writer thread turns the rows of one commit of one stream into a single buffer holding every
//! row's complete WebSocket text frame (`[offset,ts,row]` with its header). That buffer is shared by
//! `Arc` with every shard and sliced (reference-counted, never copied) into each subscriber's
//! vectored write. Row positions are kept so `where=` filters can read a row without re-parsing the
//! frame.

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
    }

    #[test]
    fn live_only_frames_carry_null_offsets() {
        let mut b = FrameBatchBuilder::new(1, false, 64);
        b.push(br#"{}"#, 5);
        let fb = b.finish();
        assert_eq!(&fb.frames[2..], br#"[null,5,{}]"#);
    }
}
