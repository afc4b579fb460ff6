//! Which kind of failure an agent's error (or a failed turn's other traces) describes: a
//! rejected credential, a usage limit, or something else. The evidence is read in order of
//! how much it can be trusted, and the first piece that decides wins:
//!
//! 1. the JSON-RPC code (-32000 is ACP's "auth required") and the adapter's structured
//!    `data`: claude-agent-acp's `errorKind`, codex-acp's `codex_error_info`;
//! 2. the HTTP status the adapter reports, as a field (`codex_error_info.<kind>.http_status_code`,
//!    `statusCode`) or in its fixed phrasing ("unexpected status 401 Unauthorized", "last
//!    status: 429 Too Many Requests", pi's "401: …");
//! 3. the adapter's stderr during the call, in wordings only a rejected key or a reached
//!    limit produces;
//! 4. the provider's own words in the message.
//!
//! So a provider message that happens to mention a limit cannot turn a structured
//! `authentication_failed` into a usage limit, and a bare number in a message ("line 401")
//! never decides anything. `tests.rs` runs this over the adapters' recorded answers in
//! `tests/fixtures/failures/`.

use serde_json::Value;

use crate::acp::connection::codes;

/// What a failure is, as far as pausing the run goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    AuthRequired,
    UsageLimit,
    Other,
}

/// What a failed call shows about why it failed.
#[derive(Default)]
pub(crate) struct Evidence<'a> {
    /// The JSON-RPC error code, when the adapter answered with an error.
    pub(crate) code: Option<i64>,
    pub(crate) message: &'a str,
    pub(crate) data: Option<&'a Value>,
    /// What the adapter wrote to stderr while the call ran.
    pub(crate) stderr: &'a str,
}

/// Decides what `evidence` describes; see the module documentation for the order.
pub(crate) fn classify(evidence: &Evidence) -> Verdict {
    if evidence.code == Some(codes::AUTH_REQUIRED) {
        return Verdict::AuthRequired;
    }
    if let Some(verdict) = evidence.data.and_then(structured_kind) {
        return verdict;
    }
    let data_text = evidence.data.map(Value::to_string).unwrap_or_default();
    let status = evidence
        .data
        .and_then(structured_status)
        .or_else(|| status_in_words(evidence.message))
        .or_else(|| status_in_words(&data_text));
    if let Some(verdict) = status.and_then(by_status) {
        return verdict;
    }
    if let Some(verdict) = wording(evidence.stderr, "") {
        return verdict;
    }
    wording(evidence.message, &data_text).unwrap_or(Verdict::Other)
}

/// A provider's 401/403 in the words an adapter passes on. Only wordings that cannot describe
/// anything but rejected credentials count: a bare "401" elsewhere in a message (a line
/// number, a token count) must not pause a run.
pub(crate) fn is_auth_failure(message: &str, data: &str) -> bool {
    let text = format!("{message} {data}").to_ascii_lowercase();
    [
        "invalid api key",
        "invalid x-api-key",
        "invalid_api_key",
        "incorrect api key",
        "api key is invalid",
        "fix external api key",
        "failed to authenticate",
        "authentication_error",
        "authentication failed",
        "permission_error",
    ]
    .iter()
    .any(|needle| text.contains(needle))
        || status_in_words(&text).is_some_and(|status| status == 401 || status == 403)
}

/// Whether a failure text says the provider's usage or rate limit was hit.
pub(crate) fn is_usage_limit(message: &str, data: &str) -> bool {
    let text = format!("{message} {data}").to_ascii_lowercase();
    ["usage limit", "usage_limit", "rate limit", "rate_limit"]
        .iter()
        .any(|needle| text.contains(needle))
        || status_in_words(&text) == Some(429)
}

/// The kinds adapters name in their error data: claude-agent-acp's `errorKind` (the Claude
/// SDK's assistant-message error) and codex-acp's `codex_error_info`.
fn structured_kind(data: &Value) -> Option<Verdict> {
    let kind = data
        .get("errorKind")
        .or_else(|| data.get("codex_error_info"))
        .and_then(Value::as_str)?;
    match kind {
        "authentication_failed" | "oauth_org_not_allowed" | "unauthorized" => {
            Some(Verdict::AuthRequired)
        }
        "rate_limit" | "billing_error" | "usage_limit_exceeded" => Some(Verdict::UsageLimit),
        _ => None,
    }
}

/// An HTTP status the adapter put in a field of its error data.
fn structured_status(data: &Value) -> Option<u16> {
    let number = |value: &Value| value.as_u64().and_then(|n| u16::try_from(n).ok());
    for key in ["statusCode", "status", "httpStatus", "http_status_code"] {
        if let Some(status) = data.get(key).and_then(number) {
            return Some(status);
        }
    }
    // codex: `{"response_too_many_failed_attempts": {"http_status_code": 429}}` and kin.
    data.get("codex_error_info")?
        .as_object()?
        .values()
        .find_map(|detail| detail.get("http_status_code").and_then(number))
}

/// The pause an HTTP status calls for, if any.
fn by_status(status: u16) -> Option<Verdict> {
    match status {
        401 | 403 => Some(Verdict::AuthRequired),
        429 => Some(Verdict::UsageLimit),
        _ => None,
    }
}

/// A credential or limit status in the fixed phrasings adapters report one with; the earliest
/// wins. A status counts only next to words that make it one ("status 401", "401
/// Unauthorized", "(429)", or pi's "401: " opening the text).
fn status_in_words(text: &str) -> Option<u16> {
    let lower = text.to_ascii_lowercase();
    let trimmed = lower.trim_start();
    let mut found: Option<(usize, u16)> = None;
    for status in [401u16, 403, 429] {
        if trimmed.starts_with(&format!("{status}:")) || trimmed.starts_with(&format!("{status} "))
        {
            return Some(status);
        }
        let patterns = [
            format!("status {status}"),
            format!("status: {status}"),
            format!("status code {status}"),
            format!("status code: {status}"),
            format!("({status})"),
            format!("api error: {status}"),
            format!("error: {status}"),
            format!("{status} unauthorized"),
            format!("{status} forbidden"),
            format!("{status} too many requests"),
        ];
        for pattern in &patterns {
            if let Some(index) = lower.find(pattern.as_str())
                && !lower[index + pattern.len()..].starts_with(|c: char| c.is_ascii_digit())
                && found.is_none_or(|(earliest, _)| index < earliest)
            {
                found = Some((index, status));
            }
        }
    }
    found.map(|(_, status)| status)
}

/// The words of a rejected credential, then those of a reached limit.
fn wording(message: &str, data: &str) -> Option<Verdict> {
    if is_auth_failure(message, data) {
        Some(Verdict::AuthRequired)
    } else if is_usage_limit(message, data) {
        Some(Verdict::UsageLimit)
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
