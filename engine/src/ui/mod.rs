//! `GET /ui`: the live page, served from assets compiled into the binary.
//!
//! In: a plain HTTP `GET` or `HEAD` whose path is `/ui`, `/ui/`, or one of the page's assets
//! (`/ui/app.js`, `/ui/app.css`). Out: the asset, whole, in one response, from the accepting
//! shard's thread (nothing to read, nothing to allocate but the response). The page itself has
//! no data of its own: it polls `GET /stats` (once a second, never two requests in flight) and
//! tails a stream over its SSE endpoint (`GET /NAME/events`, resumed with `Last-Event-ID` or
//! `?lastEventId=N`), reading the stream's schema from `GET /v1/streams/NAME`. EventSource
//! hides why it was refused, so when it gives up the page fetches the same URL once to learn
//! the status, the server's message and `Retry-After`: it stops on a refusal and waits on a
//! 503 or 429. Any method but `GET` and `HEAD` on the page's paths answers 405. So with `[auth]` configured the
//! page needs exactly what any reader needs: to be authenticated for the page
//! ([`crate::auth::http::need`] classifies `/ui…` as "authenticated only"), `stats.read` for
//! `/stats` and `data.read` on the stream it tails.
//!
//! No CDN, no framework, no build step: plain HTML, CSS and JavaScript, checked at compile time
//! to stay within [`ASSETS_BYTES_MAX`]. The answers forbid any other origin for scripts, styles
//! and connections (`Content-Security-Policy`), so the page works offline and cannot be made to
//! load anything from elsewhere.

use corecast_net::http::response::ResponseHead;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script: polling, the sparklines, the tail.
const APP_JS: &str = include_str!("assets/app.js");
/// Its style sheet.
const APP_CSS: &str = include_str!("assets/app.css");

/// The most the page's assets may weigh together, bytes (issue 16: ≤ 200 KB).
pub const ASSETS_BYTES_MAX: usize = 200 * 1024;
const _: () = assert!(INDEX_HTML.len() + APP_JS.len() + APP_CSS.len() <= ASSETS_BYTES_MAX);

/// What every asset answer carries besides its type: no caching across versions of the binary,
/// and a policy that allows this origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded asset: its content type and bytes.
struct Asset {
    content_type: &'static str,
    body: &'static str,
}

/// The asset at `name` (the request path without its leading `/`), if it is one of the page's.
fn asset(name: &str) -> Option<Asset> {
    let (content_type, body) = match name {
        "ui" | "ui/" | "ui/index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "ui/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "ui/app.css" => ("text/css; charset=utf-8", APP_CSS),
        _ => return None,
    };
    Some(Asset { content_type, body })
}

/// Whether `name` (a request path without its leading `/`) is one of the page's paths.
pub fn wants(name: &str) -> bool {
    asset(name).is_some()
}

/// The whole response for `name`: the asset with its headers, or a 404 for a path under `/ui/`
/// that is not one (callers check [`wants`] first; this never panics on what they pass).
pub fn serve(name: &str) -> Vec<u8> {
    match asset(name) {
        Some(a) => ResponseHead::new(200)
            .header("content-type", a.content_type)
            .header("cache-control", "no-cache")
            .header("x-content-type-options", "nosniff")
            .header("content-security-policy", CSP)
            .finish(a.body.as_bytes()),
        None => corecast_net::http::response::json_error(
            404,
            "not_found",
            &format!("no such page: /{name} (the page is /ui)"),
            false,
        ),
    }
}

/// The answer to any other method on one of the page's paths: 405 with `Allow: GET, HEAD`
/// (the page is read, never written).
pub fn not_allowed(method: &str, name: &str) -> Vec<u8> {
    let method: String = method.chars().take(16).collect();
    ResponseHead::new(405)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .header("allow", "GET, HEAD")
        .finish(&corecast_net::http::response::json_error_body(
            "method_not_allowed",
            &format!("{method} is not taken at /{name}: the page is read with GET (or HEAD)"),
            false,
        ))
}

/// Every asset's size, bytes, for the docs and the tests.
pub fn assets_bytes() -> usize {
    INDEX_HTML.len() + APP_JS.len() + APP_CSS.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_types() {
        for p in ["ui", "ui/", "ui/index.html", "ui/app.js", "ui/app.css"] {
            assert!(wants(p), "{p}");
            let r = String::from_utf8(serve(p)).unwrap();
            assert!(r.starts_with("HTTP/1.1 200"), "{p}: {r}");
            assert!(r.contains("content-security-policy: "), "{p}");
        }
        for p in ["", "uix", "ui/other", "ui/app.js/x", "stats"] {
            assert!(!wants(p), "{p}");
        }
        assert!(String::from_utf8(serve("ui/nope"))
            .unwrap()
            .starts_with("HTTP/1.1 404"));
        let r = String::from_utf8(not_allowed("POST", "ui")).unwrap();
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        assert!(r.contains("allow: GET, HEAD\r\n"), "{r}");
        assert!(r.contains("POST is not taken at /ui"), "{r}");
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for body in [INDEX_HTML, APP_JS, APP_CSS] {
            // the SVG namespace is a name, not a location
            let body = body.replace("http://www.w3.org/2000/svg", "");
            assert!(!body.contains("http://"), "no absolute URL");
            assert!(!body.contains("https://"), "no absolute URL");
            assert!(!body.contains("//cdn"), "no CDN");
        }
        assert!(assets_bytes() <= ASSETS_BYTES_MAX);
    }
}
