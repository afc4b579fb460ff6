//! The per-request guards of a folder server's listener: the bearer token of
//! [`Access::Bearer`](crate::transport::peer::Access::Bearer) and the caller's identity from
//! [`HttpOptions::principal_header`].
//!
//! They run after the Host/Origin checks and the intercept hook (so the hook's public routes,
//! an Agent Card or `/healthz`, answer without a token) and before anything else of the
//! request: no body is read, no path is told apart from another, for a caller without the
//! token. A refusal is 401 with a JSON-RPC-shaped body that names what is missing and never
//! echoes what was sent. The principal header is only trustworthy behind the token (an
//! authenticated upstream sets it; without the shared secret any client could), so
//! [`check_options`] refuses it on any other listener.

use hyper::StatusCode;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::request::Parts;

use super::HttpOptions;
use super::body::{HttpResponse, plain};
use crate::transport::peer::{self, Access};

/// The longest principal accepted, in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 256;

/// Why a request's principal header was refused; each message names the header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("this server needs the {header} header naming the caller")]
    Missing { header: String },
    #[error("the {header} header is sent more than once; send one value")]
    Repeated { header: String },
    #[error("the {header} header is empty; it must name the caller")]
    Empty { header: String },
    #[error("the {header} header is over {MAX_PRINCIPAL_BYTES} bytes")]
    TooLong { header: String },
    #[error(
        "the {header} header must be visible ASCII (0x21 to 0x7E, no spaces); encode other \
         names before they reach this server"
    )]
    NotVisibleAscii { header: String },
}

/// Options the transport cannot serve safely.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error(
        "principal_header {header} needs a bearer-token listener (Access::Bearer): without \
         the shared secret any client could name itself"
    )]
    PrincipalWithoutToken { header: String },
    #[error("principal_header {header:?} is not a valid HTTP header name")]
    InvalidHeaderName { header: String },
}

/// Refuses option combinations that would trust what a client says about itself.
pub fn check_options(options: &HttpOptions) -> Result<(), OptionsError> {
    let Some(header) = &options.principal_header else {
        return Ok(());
    };
    if hyper::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
        return Err(OptionsError::InvalidHeaderName {
            header: header.clone(),
        });
    }
    match options.access {
        Access::Bearer { .. } => Ok(()),
        Access::Open | Access::Owner { .. } => Err(OptionsError::PrincipalWithoutToken {
            header: header.clone(),
        }),
    }
}

/// The caller's principal when [`HttpOptions::principal_header`] names a header (`Ok(None)`
/// when it does not), or the reason the request is refused.
pub fn read_principal(
    headers: &HeaderMap,
    header: Option<&str>,
) -> Result<Option<String>, PrincipalError> {
    let Some(header) = header else {
        return Ok(None);
    };
    let named = || header.to_owned();
    let mut values = headers.get_all(header).iter();
    let Some(value) = values.next() else {
        return Err(PrincipalError::Missing { header: named() });
    };
    if values.next().is_some() {
        return Err(PrincipalError::Repeated { header: named() });
    }
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(PrincipalError::Empty { header: named() });
    }
    if bytes.len() > MAX_PRINCIPAL_BYTES {
        return Err(PrincipalError::TooLong { header: named() });
    }
    if !bytes.iter().all(|byte| (0x21..=0x7e).contains(byte)) {
        return Err(PrincipalError::NotVisibleAscii { header: named() });
    }
    // All visible ASCII, so this is the text as sent.
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The guards for one request that reached MCP routing: `Ok` with its principal (if the
/// listener takes one), or the 401 to send.
pub(super) fn admit(
    options: &HttpOptions,
    parts: &Parts,
) -> Result<Option<String>, Box<HttpResponse>> {
    if let Access::Bearer { .. } = options.access {
        let authorization = parts.headers.get(hyper::header::AUTHORIZATION);
        if !peer::bearer_matches(&options.access, authorization.map(HeaderValue::as_bytes)) {
            tracing::warn!(
                "refused {} {}: no valid bearer token",
                parts.method,
                parts.uri.path()
            );
            return Err(Box::new(unauthorized(
                "this server needs Authorization: Bearer <token> (missing or wrong)",
            )));
        }
    }
    read_principal(&parts.headers, options.principal_header.as_deref()).map_err(|error| {
        tracing::warn!("refused {} {}: {error}", parts.method, parts.uri.path());
        Box::new(unauthorized(&error.to_string()))
    })
}

fn unauthorized(message: &str) -> HttpResponse {
    let mut response = plain(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    fn principal(pairs: &[(&str, &[u8])]) -> Result<Option<String>, PrincipalError> {
        read_principal(&headers(pairs), Some("X-User"))
    }

    #[test]
    fn the_principal_is_one_visible_ascii_value_of_at_most_256_bytes() {
        assert_eq!(read_principal(&headers(&[]), None), Ok(None));
        assert_eq!(
            principal(&[("x-user", b"alice@example.com")]),
            Ok(Some("alice@example.com".into()))
        );
        let longest = "u".repeat(MAX_PRINCIPAL_BYTES);
        assert_eq!(
            principal(&[("X-USER", longest.as_bytes())]),
            Ok(Some(longest.clone()))
        );
        let header = || "X-User".to_owned();
        let over = "u".repeat(MAX_PRINCIPAL_BYTES + 1);
        assert_eq!(
            principal(&[("x-user", over.as_bytes())]),
            Err(PrincipalError::TooLong { header: header() })
        );
        assert_eq!(
            principal(&[]),
            Err(PrincipalError::Missing { header: header() })
        );
        assert_eq!(
            principal(&[("x-user", b"")]),
            Err(PrincipalError::Empty { header: header() })
        );
        assert_eq!(
            principal(&[("x-user", b"a"), ("x-user", b"b")]),
            Err(PrincipalError::Repeated { header: header() })
        );
        for bad in [&b"jane doe"[..], b"tab\there", b"caf\xc3\xa9", b"\x80x"] {
            assert_eq!(
                principal(&[("x-user", bad)]),
                Err(PrincipalError::NotVisibleAscii { header: header() }),
                "{bad:?}"
            );
        }
        let message = PrincipalError::Missing { header: header() }.to_string();
        assert_eq!(
            message,
            "this server needs the X-User header naming the caller"
        );
    }

    #[test]
    fn a_principal_header_needs_a_bearer_listener() {
        let mut options = HttpOptions {
            principal_header: Some("X-User".into()),
            ..HttpOptions::default()
        };
        for access in [Access::Open, Access::owner(Some("t".into()))] {
            options.access = access;
            assert_eq!(
                check_options(&options),
                Err(OptionsError::PrincipalWithoutToken {
                    header: "X-User".into()
                })
            );
        }
        options.access = Access::Bearer {
            token: Arc::from("t"),
        };
        assert_eq!(check_options(&options), Ok(()));
        assert_eq!(check_options(&HttpOptions::default()), Ok(()));
        options.principal_header = Some("X User".into());
        assert_eq!(
            check_options(&options),
            Err(OptionsError::InvalidHeaderName {
                header: "X User".into()
            })
        );
    }
}
