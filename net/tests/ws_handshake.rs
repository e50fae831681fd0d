//! The opening handshake (RFC 6455 §4): accept key, validation, 101 bytes, the client side.

use corecast_net::http::request::{parse_request, HttpLimits, Request};
use corecast_net::ws::handshake::{
    accept_key, check_response, client_key, client_request, is_upgrade_request, response_101,
    response_101_with_date, validate_upgrade, ClientHandshakeError, HandshakeError,
};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

fn request(head: &str) -> Request {
    parse_request(head.as_bytes(), &HttpLimits::default())
        .unwrap()
        .unwrap()
        .0
}

fn upgrade_with(extra: &str) -> String {
    format!("GET /trades HTTP/1.1\r\nHost: x\r\n{extra}\r\n")
}

const GOOD: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

#[test]
fn accept_key_matches_rfc_6455_example() {
    assert_eq!(accept_key(KEY), ACCEPT);
}

#[test]
fn response_101_matches_the_captured_reference() {
    // PROTOCOL.md §1, minus `server: uvicorn`.
    assert_eq!(
        response_101("nsvQqMvWzOofB5b27YYYgl/V1BY="),
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: nsvQqMvWzOofB5b27YYYgl/V1BY=\r\n\r\n"
    );
    assert_eq!(
        response_101_with_date(
            "nsvQqMvWzOofB5b27YYYgl/V1BY=",
            "Mon, 30 Nov 2026 23:35:45 GMT"
        ),
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: nsvQqMvWzOofB5b27YYYgl/V1BY=\r\n\
          date: Mon, 30 Nov 2026 23:35:45 GMT\r\n\r\n"
    );
}

#[test]
fn a_valid_upgrade_is_accepted() {
    let req = request(&upgrade_with(GOOD));
    assert!(is_upgrade_request(&req));
    assert_eq!(validate_upgrade(&req), Ok(ACCEPT.to_owned()));
    // Case and extra tokens do not matter; offered extensions and subprotocols are ignored.
    let loose = "upgrade: WebSocket\r\nconnection: keep-alive, upgrade\r\n\
        sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\
        Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\
        Sec-WebSocket-Protocol: streamcast, json\r\n";
    assert_eq!(
        validate_upgrade(&request(&upgrade_with(loose))),
        Ok(ACCEPT.to_owned())
    );
}

#[test]
fn plain_http_is_not_an_upgrade() {
    assert!(!is_upgrade_request(&request("GET /stats HTTP/1.1\r\n\r\n")));
}

fn refused(req: &Request) -> HandshakeError {
    validate_upgrade(req).expect_err("refused")
}

#[test]
fn every_refusal_and_its_status() {
    let post = request(&format!("POST /t HTTP/1.1\r\n{GOOD}\r\n"));
    assert_eq!(
        refused(&post),
        HandshakeError::MethodNotGet {
            method: "POST".into()
        }
    );
    let old = request(&format!("GET /t HTTP/1.0\r\n{GOOD}\r\n"));
    assert_eq!(refused(&old), HandshakeError::NotHttp11);
    let cases = [
        (
            GOOD.replace("Upgrade: websocket\r\n", ""),
            HandshakeError::NoUpgradeWebsocket,
            400,
        ),
        (
            GOOD.replace("websocket", "h2c"),
            HandshakeError::NoUpgradeWebsocket,
            400,
        ),
        (
            GOOD.replace("Connection: Upgrade", "Connection: keep-alive"),
            HandshakeError::NoConnectionUpgrade,
            400,
        ),
        (
            GOOD.replace("Version: 13", "Version: 8"),
            HandshakeError::UnsupportedVersion {
                version: Some("8".into()),
            },
            426,
        ),
        (
            GOOD.replace("Sec-WebSocket-Version: 13\r\n", ""),
            HandshakeError::UnsupportedVersion { version: None },
            426,
        ),
        (
            GOOD.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""),
            HandshakeError::MissingKey,
            400,
        ),
        (
            GOOD.replace(KEY, "dGhlIHNhbXBsZQ=="),
            HandshakeError::BadKey {
                key: "dGhlIHNhbXBsZQ==".into(),
            },
            400,
        ),
        (
            GOOD.replace(
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n",
            ),
            HandshakeError::RepeatedKey { count: 2 },
            400,
        ),
        (
            GOOD.replace(KEY, "not base64!!"),
            HandshakeError::BadKey {
                key: "not base64!!".into(),
            },
            400,
        ),
    ];
    for (headers, expected, status) in cases {
        let err = refused(&request(&upgrade_with(&headers)));
        assert_eq!(err, expected);
        assert_eq!(err.status(), status);
        let text = String::from_utf8(err.response()).unwrap();
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
        assert_eq!(
            text.contains("\r\nSec-WebSocket-Version: 13\r\n"),
            status == 426,
            "{text}"
        );
        // a 426 names the protocol to upgrade to, with the connection option that goes with it
        assert_eq!(
            text.contains("\r\nUpgrade: websocket\r\n")
                && text.contains("\r\nconnection: upgrade, close\r\n"),
            status == 426,
            "{text}"
        );
        assert!(!text.contains("Some("), "{text}");
    }
    assert_eq!(
        HandshakeError::UnsupportedVersion {
            version: Some("8".into())
        }
        .to_string(),
        "unsupported Sec-WebSocket-Version 8 (this server speaks 13)"
    );
    for version in [None, Some(String::new())] {
        assert_eq!(
            HandshakeError::UnsupportedVersion { version }.to_string(),
            "missing Sec-WebSocket-Version (this server speaks 13)"
        );
    }
    assert_eq!(
        HandshakeError::MethodNotGet {
            method: "PUT".into()
        }
        .status(),
        400
    );
    assert_eq!(HandshakeError::NotHttp11.status(), 400);
}

#[test]
fn client_and_server_agree() {
    let key = client_key(*b"the sample nonce");
    assert_eq!(key, KEY);
    let bytes = client_request("localhost:8000", "/trades?offset=1&where=%7B%7D", &key);
    assert_eq!(
        bytes,
        b"GET /trades?offset=1&where=%7B%7D HTTP/1.1\r\nHost: localhost:8000\r\n\
          Upgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let (req, consumed) = parse_request(&bytes, &HttpLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(consumed, bytes.len());
    let accept = validate_upgrade(&req).unwrap();
    let mut answer = response_101_with_date(&accept, "Mon, 30 Nov 2026 23:35:45 GMT");
    let head_bytes = answer.len();
    for cut in 0..head_bytes {
        assert_eq!(check_response(&answer[..cut], &key), Ok(None));
    }
    answer.extend_from_slice(b"\x81\x7e\x02\xb1{");
    assert_eq!(check_response(&answer, &key), Ok(Some(head_bytes)));
}

#[test]
fn client_refuses_bad_switches() {
    let ok = String::from_utf8(response_101(ACCEPT)).unwrap();
    let check = |text: &str| check_response(text.as_bytes(), KEY);
    assert_eq!(
        check(&ok.replace(ACCEPT, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=")),
        Err(ClientHandshakeError::BadAccept {
            got: Some("AAAAAAAAAAAAAAAAAAAAAAAAAAA=".into())
        })
    );
    assert_eq!(
        check(&ok.replace("Upgrade: websocket\r\n", "")),
        Err(ClientHandshakeError::NoUpgradeWebsocket)
    );
    assert_eq!(
        check(&ok.replace("Connection: Upgrade\r\n", "")),
        Err(ClientHandshakeError::NoConnectionUpgrade)
    );
    assert_eq!(
        check(&ok.replace(
            "\r\n\r\n",
            "\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        )),
        Err(ClientHandshakeError::UnexpectedExtension {
            value: "permessage-deflate".into()
        })
    );
    assert_eq!(
        check(&ok.replace("\r\n\r\n", "\r\nSec-WebSocket-Protocol: json\r\n\r\n")),
        Err(ClientHandshakeError::UnexpectedProtocol {
            value: "json".into()
        })
    );
    assert_eq!(
        check("HTTP/1.1 403 Forbidden\r\ncontent-length: 12\r\n\r\n{\"error\":{}}"),
        Err(ClientHandshakeError::Refused {
            status: 403,
            head_bytes: 46,
            content_length: 12
        })
    );
    assert!(matches!(
        check("HTTP/1.1 xyz\r\n\r\n"),
        Err(ClientHandshakeError::Malformed(_))
    ));
    let huge = format!("HTTP/1.1 101 OK\r\nx: {}", "a".repeat(20_000));
    assert_eq!(
        check(&huge),
        Err(ClientHandshakeError::HeadTooLarge { limit: 16 * 1024 })
    );
}
