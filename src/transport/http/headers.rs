//! Header rules: the 2026-07-28 header/body match (S2, with `=?base64?…?=` values decoded),
//! and the Host and Origin checks that keep other sites' pages away from a loopback server.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hyper::header::HeaderMap;
use serde_json::Value;

use crate::mcp::handler::{McpError, codes};

/// Standard base64 with padding, as header values are encoded. Bits after the last whole
/// byte are ignored rather than refused: a sender's encoder never sets them, and a decoder
/// that refused them would turn a header that matches the body into a mismatch.
const HEADER_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Checks the 2026-07-28 headers against the body (S2): `MCP-Protocol-Version`, `Mcp-Method`,
/// and `Mcp-Name` for methods that name a tool, prompt or resource.
pub(crate) fn check_modern_headers(
    headers: &HeaderMap,
    version: &str,
    method: &str,
    params: &Value,
) -> Result<(), McpError> {
    let mismatch = |what: String| Err(McpError::new(codes::HEADER_MISMATCH, what));
    match header_decoded(headers, "mcp-protocol-version")? {
        Some(value) if value == version => {}
        Some(value) => {
            return mismatch(format!(
                "MCP-Protocol-Version {value} does not match _meta version {version}"
            ));
        }
        None => return mismatch("MCP-Protocol-Version header is missing".into()),
    }
    match header_decoded(headers, "mcp-method")? {
        Some(value) if value == method => {}
        Some(value) => {
            return mismatch(format!("Mcp-Method {value} does not match method {method}"));
        }
        None => return mismatch("Mcp-Method header is missing".into()),
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str),
        "resources/read" => params.get("uri").and_then(Value::as_str),
        // SEP-2663 routes every request for a task by its id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            params.get("taskId").and_then(Value::as_str)
        }
        _ => None,
    };
    if let Some(name) = named {
        match header_decoded(headers, "mcp-name")? {
            Some(value) if value == name => {}
            Some(value) => return mismatch(format!("Mcp-Name {value} does not match {name}")),
            None => return mismatch("Mcp-Name header is missing".into()),
        }
    }
    Ok(())
}

/// A header value, trimmed, with `=?base64?…?=` decoded.
fn header_decoded(headers: &HeaderMap, name: &str) -> Result<Option<String>, McpError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| {
            McpError::new(
                codes::HEADER_MISMATCH,
                format!("{name} is not visible ASCII"),
            )
        })?
        .trim();
    if let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        let decoded = HEADER_BASE64
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                McpError::new(codes::HEADER_MISMATCH, format!("{name} has invalid base64"))
            })?;
        return Ok(Some(decoded));
    }
    Ok(Some(value.to_owned()))
}

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

/// `127.0.0.1`, `localhost` or `[::1]`, without a port or with the bound one.
pub(crate) fn host_allowed(host: &str, port: u16) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let (name, host_port) = match host.rsplit_once(':') {
        Some((name, port_text))
            if !name.is_empty() && (name.ends_with(']') || !name.contains(':')) =>
        {
            (name.to_owned(), Some(port_text.to_owned()))
        }
        _ => (host.clone(), None),
    };
    let loopback = matches!(name.as_str(), "127.0.0.1" | "localhost" | "[::1]");
    loopback && host_port.is_none_or(|text| text.parse::<u16>().ok() == Some(port))
}

/// A loopback origin (`http://` or `https://`; `localhost`, `[::1]` or any address of
/// 127.0.0.0/8) on any port, or one listed exactly.
pub(crate) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim();
    if allowed.iter().any(|entry| entry == origin) {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let name = match rest.rsplit_once(':') {
        Some((name, port))
            if (name.ends_with(']') || !name.contains(':')) && port.parse::<u16>().is_ok() =>
        {
            name
        }
        _ => rest,
    };
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "localhost" | "[::1]")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|address| address.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(value: &str) -> Result<Option<String>, McpError> {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-name", value.parse().unwrap());
        header_decoded(&headers, "mcp-name")
    }

    #[test]
    fn loopback_origins_pass_over_http_and_https_and_others_need_listing() {
        for origin in [
            "http://127.0.0.1:5173",
            "https://127.0.0.1",
            "http://127.1.2.3:8080",
            "https://localhost:3000",
            "https://[::1]:443",
            "http://LOCALHOST",
        ] {
            assert!(origin_allowed(origin, &[]), "{origin}");
        }
        for origin in [
            "https://128.0.0.1",
            "http://10.0.0.1:8080",
            "https://localhost.example",
            "https://127.0.0.1.example",
            "ftp://127.0.0.1",
            "null",
            "https://127.0.0.1:99999",
        ] {
            assert!(!origin_allowed(origin, &[]), "{origin}");
        }
        assert!(origin_allowed(
            "https://app.example",
            &["https://app.example".to_owned()]
        ));
    }

    #[test]
    fn base64_header_values_decode_padded_standard_text_only() {
        assert_eq!(
            decoded(" =?base64?d29ya2Zsb3c=?= ").unwrap().as_deref(),
            Some("workflow")
        );
        assert_eq!(
            decoded("=?base64?w6k=?=").unwrap().as_deref(),
            Some("\u{e9}")
        );
        assert_eq!(decoded("=?base64??=").unwrap().as_deref(), Some(""));
        // Stray bits after the last byte are ignored, as the encoders never set them.
        assert_eq!(decoded("=?base64?QR==?=").unwrap().as_deref(), Some("A"));
        assert_eq!(decoded("plain").unwrap().as_deref(), Some("plain"));
        for bad in [
            "=?base64?d29ya2Zsb3c?=",
            "=?base64?d29y=a2Zsb3c?=",
            "=?base64?QQ=?=",
            "=?base64?Q===?=",
            "=?base64?d2-y?=",
            "=?base64?/w==?=",
        ] {
            let error = decoded(bad).expect_err(bad);
            assert_eq!(error.code, codes::HEADER_MISMATCH, "{bad}");
            assert_eq!(error.message, "mcp-name has invalid base64", "{bad}");
        }
    }
}
