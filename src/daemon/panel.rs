//! `GET /ui`: the run monitor panel in a plain browser (`agentprism monitor`,
//! `docs/monitor.md`), served by the daemon through its intercept hook.
//!
//! The hook runs after the transport's peer check (another user's connection is refused with
//! 403 before anything of it is read; where the kernel cannot name the peer, a request
//! without the bearer token is 401) and after the Host and Origin checks, so `/ui` is behind
//! exactly the guards `/mcp` is. The page then speaks MCP to the same origin's `/mcp`: its
//! `Origin` is the daemon's own `http://127.0.0.1:<port>`, a loopback origin the transport
//! already accepts, so nothing new is let in. The answer carries the page's own content
//! security policy as a header (the text of its meta tag plus `frame-ancestors 'none'`, which
//! only a header can say), `nosniff`, `no-store`, and `X-Frame-Options: DENY`.

use std::sync::Arc;

use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};

use crate::transport::http::{HttpBody, Intercept};

/// The panel's path on the daemon.
pub(crate) const PANEL_PATH: &str = "/ui";
/// The policy sent when the page declares none (never with the shipped panel): nothing at all.
const FALLBACK_CSP: &str = "default-src 'none'";
/// The header when the page's policy cannot be a header value: nothing, and no framing.
const FALLBACK_CSP_HEADER: &str = "default-src 'none'; frame-ancestors 'none'";

/// `inner`, with `/ui` answered first.
pub(crate) fn with_panel(inner: Intercept) -> Intercept {
    Arc::new(move |parts: &Parts| {
        if parts.uri.path() != PANEL_PATH {
            return inner(parts);
        }
        Some(
            if parts.method == Method::GET || parts.method == Method::HEAD {
                panel(parts.method == Method::HEAD)
            } else {
                let mut response = Response::new(HttpBody::full("method not allowed"));
                *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                response
            },
        )
    })
}

fn panel(head_only: bool) -> Response<HttpBody> {
    let html = crate::tools::monitor::PANEL_HTML;
    let body = if head_only {
        HttpBody::empty()
    } else {
        HttpBody::full(html)
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // A meta tag cannot carry frame-ancestors (browsers ignore it there), so the header adds
    // it: another site's page must not frame the panel and click through it.
    let csp = format!(
        "{}; frame-ancestors 'none'",
        crate::tools::monitor::panel_csp().unwrap_or(FALLBACK_CSP)
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&csp).unwrap_or(HeaderValue::from_static(FALLBACK_CSP_HEADER)),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
