//! The HTTP request head parser (`net/src/http/request.rs`) and the query string parser
//! (`net/src/http/query.rs`) on arbitrary bytes.
//!
//! Checked, for the default limits and for small ones:
//!
//! - a complete head parses to the same request from the head's own bytes (`buf[..consumed]`),
//!   and every shorter prefix of it answers "need more" or an error, never another request;
//! - a parsed request respects the limits: request line and head lengths, header count; names
//!   are lowercase, values trimmed, the path starts with `/` and `content_length` agrees with
//!   the header;
//! - `Query::parse` folds `parse_qsl` (each key once, first position, last value), and
//!   `percent_decode` borrows exactly when nothing needed decoding.
#![no_main]

use std::borrow::Cow;

use corecast_net::http::query::{parse_qsl, percent_decode, Query};
use corecast_net::http::request::{parse_request, HttpLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: corecast_fuzz::seeds::init("http_request"), |data: &[u8]| {
    let small = HttpLimits {
        request_line_bytes_max: 64,
        head_bytes_max: 256,
        headers_count_max: 4,
    };
    for limits in [HttpLimits::default(), small] {
        check_head(data, &limits);
    }
    check_query(data);
    if let Some(q) = data.iter().position(|&b| b == b'?') {
        let end = data[q..].iter().position(|&b| b == b' ').map_or(data.len(), |e| q + e);
        check_query(&data[q + 1..end]);
    }
});

fn check_head(data: &[u8], limits: &HttpLimits) {
    let Ok(Some((req, consumed))) = parse_request(data, limits) else {
        return;
    };
    assert!(consumed <= data.len() && consumed <= limits.head_bytes_max);
    assert!(data[..consumed].ends_with(b"\n"));
    assert_eq!(
        parse_request(&data[..consumed], limits),
        Ok(Some((req.clone(), consumed))),
        "the head alone parses the same"
    );
    // a few prefixes (all of them for short heads)
    let step = (consumed / 64).max(1);
    for cut in (0..consumed).step_by(step) {
        if let Ok(Some(other)) = parse_request(&data[..cut], limits) {
            panic!("prefix of {cut} bytes parsed as {other:?}; the whole head as {req:?}");
        }
    }
    assert!(req.headers.len() <= limits.headers_count_max);
    assert!(req.path.starts_with('/'), "path {:?}", req.path);
    assert!(req.version_minor <= 1);
    let line_len = data.iter().position(|&b| b == b'\n').unwrap_or(0);
    assert!(line_len <= limits.request_line_bytes_max + 1);
    for (name, value) in &req.headers {
        assert_eq!(*name, name.to_ascii_lowercase());
        assert_eq!(value.as_str(), value.trim_matches([' ', '\t']));
    }
    let declared = req
        .header("content-length")
        .map(|v| v.parse::<u64>().expect("checked"));
    assert_eq!(req.content_length, declared.unwrap_or(0));
    let _ = req.keep_alive();
    check_query(req.query.as_bytes());
}

fn check_query(raw: &[u8]) {
    let pairs = parse_qsl(raw);
    let q = Query::parse(raw);
    // the fold: each key once, at its first position, with its last value
    let mut want: Vec<(String, String)> = Vec::new();
    for (k, v) in &pairs {
        match want.iter_mut().find(|(wk, _)| wk == k) {
            Some(slot) => slot.1 = v.clone(),
            None => want.push((k.clone(), v.clone())),
        }
    }
    assert_eq!(q.pairs(), &want[..]);
    assert_eq!(q.len(), want.len());
    for (k, v) in &want {
        assert_eq!(q.get(k), Some(v.as_str()));
    }
    for plus in [false, true] {
        let d = percent_decode(raw, plus);
        let plain = !raw.iter().any(|&b| b == b'%' || (plus && b == b'+'));
        if plain {
            assert_eq!(d, String::from_utf8_lossy(raw));
        }
        if matches!(d, Cow::Borrowed(_)) {
            assert!(plain && std::str::from_utf8(raw).is_ok());
        }
        assert!(d.len() <= raw.len() * 3);
    }
}
