//! Data frames (PROTOCOL.md §5): `[offset,ts,row]` as one complete server text frame.
//!
//! This runs once per row on the commit path, so it writes the WebSocket header and the
//! payload straight into the batch buffer: the payload length is computed first (`itoa`
//! formats both numbers on the stack), then header, then payload, with no intermediate
//! allocation.

use crate::ws::frame::{encode_header, header_len, OpCode};

/// Bytes the payload `[offset,ts,row]` takes for the given values and row length.
pub fn data_payload_len(offset: Option<u64>, ts_us: Option<i64>, row_bytes: usize) -> usize {
    let offset_bytes = offset.map_or(4, |o| itoa::Buffer::new().format(o).len());
    let ts_bytes = ts_us.map_or(4, |t| itoa::Buffer::new().format(t).len());
    4 + offset_bytes + ts_bytes + row_bytes
}

/// Bytes the whole frame (header and payload) takes.
pub fn data_frame_len(offset: Option<u64>, ts_us: Option<i64>, row_bytes: usize) -> usize {
    let payload = data_payload_len(offset, ts_us, row_bytes);
    header_len(payload as u64) + payload
}

/// Appends one FIN, unmasked text frame holding `[offset,ts_us,row_json]`; `None` is written
/// `null`. `row_json` is the row's compact JSON object, copied verbatim.
pub fn encode_data_frame(
    offset: Option<u64>,
    ts_us: Option<i64>,
    row_json: &[u8],
    out: &mut Vec<u8>,
) {
    debug_assert!(row_json.first() == Some(&b'{') && row_json.last() == Some(&b'}'));
    let mut offset_buf = itoa::Buffer::new();
    let mut ts_buf = itoa::Buffer::new();
    let offset_text: &[u8] = match offset {
        Some(o) => offset_buf.format(o).as_bytes(),
        None => b"null",
    };
    let ts_text: &[u8] = match ts_us {
        Some(t) => ts_buf.format(t).as_bytes(),
        None => b"null",
    };
    let payload_bytes = 4 + offset_text.len() + ts_text.len() + row_json.len();
    out.reserve(header_len(payload_bytes as u64) + payload_bytes);
    let start = out.len();
    encode_header(true, OpCode::Text, payload_bytes as u64, None, out);
    out.push(b'[');
    out.extend_from_slice(offset_text);
    out.push(b',');
    out.extend_from_slice(ts_text);
    out.push(b',');
    out.extend_from_slice(row_json);
    out.push(b']');
    debug_assert_eq!(
        out.len() - start,
        header_len(payload_bytes as u64) + payload_bytes
    );
}
