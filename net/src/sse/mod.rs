//! Server-Sent Events framing (WHATWG HTML §9.2), as pure functions over bytes.
//!
//! corecast's SSE endpoint writes one event per row — `id: <offset>`, `data: [offset,ts,row]`
//! (the WebSocket payload, byte for byte), a blank line — plus `retry:`, comment pings and a
//! closing `event: end`. The writer builds the row events once per committed batch; these
//! functions only append bytes to a buffer. [`parse_last_event_id`] is the strict reader of the
//! `Last-Event-ID` a reconnecting client sends back.

/// Appends one event: an optional `id:` line, then one `data:` line per line of `data` (an SSE
/// data line cannot hold a line break: CR, LF and CRLF each start a new `data:` line), then the
/// blank line that dispatches it.
pub fn push_event(id: Option<u64>, data: &[u8], out: &mut Vec<u8>) {
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        out.push(b'\n');
    }
    push_data_lines(data, out);
    out.push(b'\n');
}

/// Appends a named event (`event: NAME`, the data lines, the blank line). `name` must hold no
/// line break.
pub fn push_named_event(name: &str, data: &[u8], out: &mut Vec<u8>) {
    debug_assert!(!name.bytes().any(|b| b == b'\r' || b == b'\n'));
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    push_data_lines(data, out);
    out.push(b'\n');
}

/// Appends `retry: MS` (the client's reconnection delay) and a blank line.
pub fn push_retry(ms: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"retry: ");
    out.extend_from_slice(itoa::Buffer::new().format(ms).as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Appends a comment line (`: TEXT`) and a blank line: ignored by clients, keeps proxies and
/// idle timers from closing a quiet stream.
pub fn push_comment(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b": ");
    for b in text.bytes() {
        out.push(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
    out.extend_from_slice(b"\n\n");
}

fn push_data_lines(data: &[u8], out: &mut Vec<u8>) {
    let mut rest = data;
    loop {
        out.extend_from_slice(b"data: ");
        match rest.iter().position(|&b| b == b'\r' || b == b'\n') {
            None => {
                out.extend_from_slice(rest);
                out.push(b'\n');
                return;
            }
            Some(i) => {
                out.extend_from_slice(&rest[..i]);
                out.push(b'\n');
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
        }
    }
}

/// The offset a `Last-Event-ID` names, or `None` unless it is a plain decimal offset: 1 to 19
/// ASCII digits, nothing else (no sign, space, exponent, separator or line break), within int64.
pub fn parse_last_event_id(value: &str) -> Option<u64> {
    let b = value.as_bytes();
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = value.parse().ok()?;
    (v <= i64::MAX as u64).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events() {
        let mut out = Vec::new();
        push_retry(3000, &mut out);
        push_event(Some(7), b"[7,1,{\"a\":1}]", &mut out);
        push_event(None, b"a\nb\r\nc\rd", &mut out);
        push_named_event("end", br#"{"reason":"max_age"}"#, &mut out);
        push_comment("ping\n", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "retry: 3000\n\nid: 7\ndata: [7,1,{\"a\":1}]\n\ndata: a\ndata: b\ndata: c\ndata: d\n\n\
             event: end\ndata: {\"reason\":\"max_age\"}\n\n: ping \n\n"
        );
    }

    #[test]
    fn last_event_id_is_strict() {
        assert_eq!(parse_last_event_id("0"), Some(0));
        assert_eq!(parse_last_event_id("42"), Some(42));
        assert_eq!(
            parse_last_event_id("9223372036854775807"),
            Some(i64::MAX as u64)
        );
        for bad in [
            "",
            "²",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1e3",
            "1\n2",
            "1\r",
            "0x10",
            "1_000",
            "trades:5",
            "5-0",
            "9223372036854775808",
            "99999999999999999999",
            "١٢",
        ] {
            assert_eq!(parse_last_event_id(bad), None, "{bad:?}");
        }
    }
}
