//! Close codes (RFC 6455 §7.4) and close frame payloads (§5.5.1).

/// The longest close reason in bytes: a control frame carries at most 125 bytes, two of
/// which are the code (RFC 6455 §5.5, §5.5.1).
pub const CLOSE_REASON_BYTES_MAX: usize = 123;

/// A close status code (RFC 6455 §7.4), with the ones corecast sends as constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: normal closure.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: going away (server shutting down, stream stopping).
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: protocol error (a frame or message broke RFC 6455).
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1007: invalid payload data (text that is not UTF-8).
    pub const INVALID_PAYLOAD: CloseCode = CloseCode(1007);
    /// 1008: policy violation (`forbidden`).
    pub const POLICY_VIOLATION: CloseCode = CloseCode(1008);
    /// 1009: message too big (`frame too large`, `too_big`).
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1011: internal error (`stream unavailable`).
    pub const INTERNAL_ERROR: CloseCode = CloseCode(1011);
    /// 4400: `bad_request` (PROTOCOL.md §8).
    pub const BAD_REQUEST: CloseCode = CloseCode(4400);
    /// 4404: `no_such_stream`.
    pub const NO_SUCH_STREAM: CloseCode = CloseCode(4404);
    /// 4409: `superseded`.
    pub const SUPERSEDED: CloseCode = CloseCode(4409);
    /// 4410: `stream_retired`.
    pub const STREAM_RETIRED: CloseCode = CloseCode(4410);
    /// 4412: `exactly_once_unavailable`.
    pub const EXACTLY_ONCE_UNAVAILABLE: CloseCode = CloseCode(4412);
    /// 4416: `not_replayable`.
    pub const NOT_REPLAYABLE: CloseCode = CloseCode(4416);
    /// 4429: `too_slow`.
    pub const TOO_SLOW: CloseCode = CloseCode(4429);

    /// Whether `code` may appear in a close frame (RFC 6455 §7.4.1-§7.4.2, IANA registry):
    /// 1000-1003, 1007-1014, 3000-4999. 1004-1006 and 1015 are never sent; the rest below
    /// 3000 is reserved; 5000 and up is undefined.
    pub fn is_sendable(code: u16) -> bool {
        matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

/// `s` cut to at most `bytes_max` bytes at a UTF-8 character boundary.
pub fn truncate_utf8(s: &str, bytes_max: usize) -> &str {
    if s.len() <= bytes_max {
        return s;
    }
    let mut end = bytes_max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A close frame payload (RFC 6455 §5.5.1): the code big-endian, then `reason` cut to
/// [`CLOSE_REASON_BYTES_MAX`] bytes at a character boundary.
pub fn close_payload(code: CloseCode, reason: &str) -> Vec<u8> {
    let reason = truncate_utf8(reason, CLOSE_REASON_BYTES_MAX);
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.0.to_be_bytes());
    payload.extend_from_slice(reason.as_bytes());
    payload
}
