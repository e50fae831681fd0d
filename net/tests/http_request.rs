//! HTTP request heads, query strings and responses: exact bytes, every error and its status.

use corecast_net::http::query::{parse_qsl, percent_decode, Query};
use corecast_net::http::request::{parse_request, HttpError, HttpLimits, Request};
use corecast_net::http::response::{
    http_date, http_error_response, json_error, json_error_body, not_found, ResponseHead,
};

fn parse_ok(bytes: &[u8]) -> (Request, usize) {
    parse_request(bytes, &HttpLimits::default())
        .expect("valid head")
        .expect("complete head")
}

fn parse_err(bytes: &[u8]) -> HttpError {
    parse_request(bytes, &HttpLimits::default()).expect_err("invalid head")
}

#[test]
fn parses_an_upgrade_request() {
    let head = b"GET /trades?offset=5&where=%7B%7D HTTP/1.1\r\nHost: localhost:8000\r\n\
        Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    let mut bytes = head.to_vec();
    bytes.extend_from_slice(b"\x81\x85trailing frame");
    let (req, consumed) = parse_ok(&bytes);
    assert_eq!(consumed, head.len());
    assert_eq!(req.method, "GET");
    assert_eq!(req.target, "/trades?offset=5&where=%7B%7D");
    assert_eq!(req.path, "/trades");
    assert_eq!(req.query, "offset=5&where=%7B%7D");
    assert_eq!(req.version_minor, 1);
    assert_eq!(req.header("HOST"), Some("localhost:8000"));
    assert_eq!(req.headers[0].0, "host");
    assert!(req.header_has_token("connection", "upgrade"));
    assert!(req.header_has_token("Connection", "KEEP-ALIVE"));
    assert!(!req.header_has_token("connection", "close"));
    assert!(req.keep_alive());
    assert_eq!(req.content_length, 0);
    assert_eq!(req.header("missing"), None);
}

#[test]
fn partial_heads_ask_for_more() {
    let head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 0..head.len() {
        assert_eq!(
            parse_request(&head[..cut], &HttpLimits::default()),
            Ok(None),
            "cut at {cut}"
        );
    }
    assert_eq!(parse_ok(head).1, head.len());
}

#[test]
fn path_is_percent_decoded_with_its_slash() {
    assert_eq!(
        parse_ok(b"GET /bad%20name HTTP/1.1\r\n\r\n").0.path,
        "/bad name"
    );
    assert_eq!(parse_ok(b"GET / HTTP/1.1\r\n\r\n").0.path, "/");
    assert_eq!(parse_ok(b"GET /a+b HTTP/1.1\r\n\r\n").0.path, "/a+b");
    assert_eq!(parse_ok(b"GET /%zz HTTP/1.1\r\n\r\n").0.path, "/%zz");
    assert_eq!(parse_ok(b"GET /%C3%A9 HTTP/1.1\r\n\r\n").0.path, "/\u{e9}");
    assert_eq!(parse_ok(b"GET /%FF HTTP/1.1\r\n\r\n").0.path, "/\u{fffd}");
    let (req, _) = parse_ok(b"GET /x? HTTP/1.1\r\n\r\n");
    assert_eq!((req.path.as_str(), req.query.as_str()), ("/x", ""));
}

#[test]
fn absolute_form_targets_lose_scheme_and_authority() {
    let (req, _) = parse_ok(b"GET http://host:8000/trades?publish HTTP/1.1\r\n\r\n");
    assert_eq!(
        (req.path.as_str(), req.query.as_str()),
        ("/trades", "publish")
    );
    let (req, _) = parse_ok(b"GET https://host HTTP/1.1\r\n\r\n");
    assert_eq!(req.path, "/");
    let (req, _) = parse_ok(b"GET http://host?offset=1 HTTP/1.1\r\n\r\n");
    assert_eq!((req.path.as_str(), req.query.as_str()), ("/", "offset=1"));
    let err = parse_err(b"OPTIONS * HTTP/1.1\r\n\r\n");
    assert_eq!(err, HttpError::BadTarget { target: "*".into() });
    assert_eq!(err.status(), 400);
}

#[test]
fn http_1_0_parses_and_keep_alive_follows_its_rules() {
    let (req, _) = parse_ok(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(req.version_minor, 0);
    assert!(!req.keep_alive());
    assert!(
        parse_ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .0
            .keep_alive()
    );
    assert!(!parse_ok(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .0
        .keep_alive());
}

#[test]
fn other_versions_are_505() {
    let err = parse_err(b"GET / HTTP/2.0\r\n\r\n");
    assert_eq!(err, HttpError::UnsupportedVersion);
    assert_eq!(err.status(), 505);
}

#[test]
fn malformed_heads_are_400() {
    for bad in [
        &b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nbad header: x\x01y\r\n\r\n",
        b"G(T / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ] {
        let err = parse_err(bad);
        assert!(matches!(err, HttpError::Malformed(_)), "{err:?}");
        assert_eq!(err.status(), 400);
    }
}

#[test]
fn a_long_request_line_is_414_before_it_ends() {
    let limits = HttpLimits::default();
    let mut line = b"GET /".to_vec();
    line.resize(limits.request_line_bytes_max, b'a');
    let ok = [line.as_slice(), b" HTTP/1.1\r\n\r\n"].concat();
    // The request line is the path plus " HTTP/1.1": over the limit by 9.
    let err = parse_err(&ok);
    assert!(
        matches!(err, HttpError::RequestLineTooLong { .. }),
        "{err:?}"
    );
    assert_eq!(err.status(), 414);

    let mut exact = b"GET /".to_vec();
    exact.resize(limits.request_line_bytes_max - 9, b'a');
    exact.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    assert!(parse_ok(&exact).0.target.len() > 8000);

    // Unterminated: refused once more than the limit is buffered.
    let streaming = vec![b'a'; limits.request_line_bytes_max + 2];
    let err = parse_request(&[b"GET /", &streaming[..]].concat(), &limits).unwrap_err();
    assert_eq!(err.status(), 414);
    assert_eq!(
        parse_request(&[b"GET /", &streaming[..100]].concat(), &limits),
        Ok(None)
    );
}

#[test]
fn a_100_kb_head_is_431_as_soon_as_it_passes_the_limit() {
    let limits = HttpLimits::default();
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    let mut i = 0;
    while head.len() < 100_000 {
        head.extend_from_slice(format!("x-h{}: {}\r\n", i % 10, "v".repeat(1000)).as_bytes());
        i += 1;
    }
    let mut first_error = None;
    for end in (1..=head.len()).step_by(512) {
        match parse_request(&head[..end], &limits) {
            Ok(None) => {}
            Ok(Some(_)) => panic!("no blank line, cannot be complete"),
            Err(e) => {
                first_error = Some((end, e));
                break;
            }
        }
    }
    let (end, err) = first_error.expect("refused");
    assert!(end >= limits.head_bytes_max && end < limits.head_bytes_max + 512);
    assert!(matches!(err, HttpError::HeadTooLarge { .. }), "{err:?}");
    assert_eq!(err.status(), 431);

    // A complete head just over the limit is refused too, one just under is fine.
    let big = |value_bytes: usize| {
        let mut h = b"GET / HTTP/1.1\r\nx: ".to_vec();
        h.resize(h.len() + value_bytes, b'v');
        h.extend_from_slice(b"\r\n\r\n");
        h
    };
    let under = big(limits.head_bytes_max - 23);
    assert_eq!(under.len(), limits.head_bytes_max);
    assert!(parse_ok(&under).1 == limits.head_bytes_max);
    assert_eq!(parse_err(&big(limits.head_bytes_max - 22)).status(), 431);
}

#[test]
fn more_than_64_headers_is_431() {
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..64 {
        head.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
    }
    let ok = [head.as_slice(), b"\r\n"].concat();
    assert_eq!(parse_ok(&ok).0.headers.len(), 64);
    head.extend_from_slice(b"h64: v\r\n\r\n");
    let err = parse_err(&head);
    assert_eq!(err, HttpError::TooManyHeaders { limit: 64 });
    assert_eq!(err.status(), 431);
}

#[test]
fn body_framing_headers() {
    let (req, consumed) = parse_ok(b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!((req.content_length, consumed), (5, 39));
    let dup_same = b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(parse_ok(dup_same).0.content_length, 5);
    let err = parse_err(b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\n");
    assert_eq!(
        err.to_string(),
        "content-length is given twice with different values (5 and 40)"
    );
    assert_eq!(err.status(), 400);
    for bad in [
        &b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n"[..],
        b"POST /x HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    ] {
        let err = parse_err(bad);
        assert!(matches!(err, HttpError::BadContentLength { .. }), "{err:?}");
        assert_eq!(err.status(), 400);
    }
    let err = parse_err(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(err, HttpError::TransferEncoding);
    assert_eq!(err.status(), 501);
}

#[test]
fn header_values_are_trimmed_and_repeated_headers_kept() {
    let (req, _) = parse_ok(b"GET / HTTP/1.1\r\nX-A:   one  \r\nx-a: two\r\n\r\n");
    assert_eq!(req.header("x-a"), Some("one"));
    assert_eq!(req.headers_all("X-A").collect::<Vec<_>>(), ["one", "two"]);
    let (req, _) =
        parse_ok(b"GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: Upgrade\r\n\r\n");
    assert!(req.header_has_token("connection", "upgrade"));
}

// ---- query strings (Python parse_qsl(keep_blank_values=True)) ----

fn pairs(q: &str) -> Vec<(String, String)> {
    parse_qsl(q.as_bytes())
}

fn owned(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn parse_qsl_matches_python() {
    // Expected values from CPython 3's urllib.parse.parse_qsl(q, keep_blank_values=True).
    assert_eq!(
        pairs("a=1&a=2&b"),
        owned(&[("a", "1"), ("a", "2"), ("b", "")])
    );
    assert_eq!(
        pairs("&&x=%zz%4&y=a+b%2B"),
        owned(&[("x", "%zz%4"), ("y", "a b+")])
    );
    assert_eq!(
        pairs("where=%7B%22side%22%3A1%7D&publish"),
        owned(&[("where", "{\"side\":1}"), ("publish", "")])
    );
    assert_eq!(
        pairs("k=%C3%A9%FF%C3"),
        owned(&[("k", "\u{e9}\u{fffd}\u{fffd}")])
    );
    assert_eq!(pairs("=v&k="), owned(&[("", "v"), ("k", "")]));
    assert_eq!(pairs("a=b=c"), owned(&[("a", "b=c")]));
    assert_eq!(pairs("a;b=c"), owned(&[("a;b", "c")]));
    assert_eq!(pairs(""), owned(&[]));
    assert_eq!(pairs("%"), owned(&[("%", "")]));
    assert_eq!(pairs("x=%4"), owned(&[("x", "%4")]));
    assert_eq!(pairs("x=%%41"), owned(&[("x", "%A")]));
}

#[test]
fn query_folds_last_value_first_position() {
    let q = Query::parse(b"offset=1&publish&offset=7&where=%7B%7D");
    assert_eq!(q.get("offset"), Some("7"));
    assert_eq!(q.get("publish"), Some(""));
    assert!(q.contains("where"));
    assert_eq!(q.get("nope"), None);
    assert_eq!(q.keys().collect::<Vec<_>>(), ["offset", "publish", "where"]);
    assert_eq!(q.len(), 3);
    assert!(Query::parse(b"&&").is_empty());
}

#[test]
fn percent_decode_borrows_when_clean() {
    assert!(matches!(
        percent_decode(b"plain", true),
        std::borrow::Cow::Borrowed("plain")
    ));
    assert_eq!(percent_decode(b"a+b", false), "a+b");
    assert_eq!(percent_decode(b"a+b", true), "a b");
}

// ---- responses ----

#[test]
fn response_head_exact_bytes() {
    let bytes = ResponseHead::new(200)
        .header("content-type", "application/json")
        .header("date", &http_date(1_796_081_745))
        .finish(b"{}");
    assert_eq!(
        bytes,
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
          date: Mon, 30 Nov 2026 23:35:45 GMT\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
    );
    assert_eq!(
        ResponseHead::new(204).finish_head(),
        b"HTTP/1.1 204 No Content\r\n\r\n"
    );
}

#[test]
fn http_dates() {
    assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    assert_eq!(http_date(1_796_081_745), "Mon, 30 Nov 2026 23:35:45 GMT");
    assert_eq!(http_date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
}

#[test]
fn json_errors() {
    assert_eq!(
        json_error_body("not_found", "no \"x\"", true),
        br#"{"error":{"code":"not_found","message":"no \"x\"","retryable":true,"operation_id":null}}"#
    );
    let body =
        br#"{"error":{"code":"forbidden","message":"no","retryable":false,"operation_id":null}}"#;
    let expected = [
        format!(
            "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
        body,
    ]
    .concat();
    assert_eq!(json_error(403, "forbidden", "no", false), expected);
    let nf = String::from_utf8(not_found("/nope")).unwrap();
    assert!(nf.starts_with("HTTP/1.1 404 Not Found\r\n"), "{nf}");
    assert!(nf.ends_with(r#"{"error":{"code":"not_found","message":"no endpoint at /nope","retryable":false,"operation_id":null}}"#));
}

#[test]
fn every_http_error_has_a_response() {
    let errors = [
        (HttpError::Malformed(httparse::Error::Token), 400),
        (HttpError::UnsupportedVersion, 505),
        (
            HttpError::RequestLineTooLong {
                bytes: 9000,
                limit: 8192,
            },
            414,
        ),
        (
            HttpError::HeadTooLarge {
                bytes: 20000,
                limit: 16384,
            },
            431,
        ),
        (HttpError::TooManyHeaders { limit: 64 }, 431),
        (HttpError::BadTarget { target: "*".into() }, 400),
        (HttpError::BadContentLength { value: "x".into() }, 400),
        (HttpError::TransferEncoding, 501),
    ];
    for (err, status) in errors {
        assert_eq!(err.status(), status);
        let text = String::from_utf8(http_error_response(&err)).unwrap();
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"));
        assert!(text.contains(&format!("\"code\":\"{}\"", err.code())));
    }
}

#[test]
fn random_heads_never_panic() {
    use rand::{Rng, RngCore, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let seed = b"GET /a%20b?x=%zz&y=+ HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n\r\n";
    let limits = HttpLimits {
        request_line_bytes_max: 64,
        head_bytes_max: 128,
        headers_count_max: 4,
    };
    for _ in 0..5000 {
        let mut bytes = seed.to_vec();
        for _ in 0..rng.random_range(0..6) {
            let i = rng.random_range(0..bytes.len());
            match rng.random_range(0..3) {
                0 => bytes[i] = rng.random(),
                1 => bytes.insert(i, rng.random()),
                _ => {
                    bytes.remove(i);
                }
            }
        }
        if rng.random_range(0..10) == 0 {
            bytes.resize(rng.random_range(0..300), 0);
            rng.fill_bytes(&mut bytes);
        }
        for cut in [bytes.len(), rng.random_range(0..=bytes.len())] {
            for limits in [HttpLimits::default(), limits] {
                match parse_request(&bytes[..cut], &limits) {
                    Ok(Some((req, consumed))) => {
                        assert!(consumed <= cut && consumed <= limits.head_bytes_max);
                        assert!(req.path.starts_with('/'));
                    }
                    Ok(None) => assert!(cut < limits.head_bytes_max),
                    Err(e) => assert!(matches!(e.status(), 400 | 414 | 431 | 501 | 505)),
                }
                let _ = Query::parse(&bytes[..cut]);
            }
        }
    }
}
