//! Era shaping: what the core adds to or takes from a handler's result or error before it
//! leaves, so handlers answer once for both eras.
//!
//! 2026-07-28 results get `resultType` and, on cacheable methods, `ttlMs` and `cacheScope`
//! (S6); a missing resource becomes -32602 with `data.uri` (S7); errors carry the HTTP status
//! the revision asks for. Legacy sessions older than 2025-06-18 lose `resource_link` blocks.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::answer::PreparedResult;
use super::context::{Era, McpError, codes};

/// Whether a cached modern result may be shared between callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

/// Adds `resultType` and, for cacheable results, `ttlMs`/`cacheScope`. A field the handler
/// set itself is kept.
pub(super) fn modern(method: &str, mut result: Value, ttl_ms: u64, scope: CacheScope) -> Value {
    let Value::Object(map) = &mut result else {
        return result;
    };
    map.entry("resultType").or_insert_with(|| "complete".into());
    let cacheable = matches!(
        method,
        "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "resources/read"
            | "resources/directory/read"
            | "server/discover"
    );
    if cacheable {
        map.entry("ttlMs").or_insert_with(|| ttl_ms.into());
        map.entry("cacheScope")
            .or_insert_with(|| scope.as_str().into());
    }
    result
}

/// A prepared `tools/call` result's text as the era sends it, or `None` when the era would
/// reshape it beyond what text can follow (an older session's result with links): the
/// same bytes [`modern`] or [`without_links_before_2025_06_18`] would give its value.
pub(super) fn prepared_text<'a>(era: &Era, prepared: &'a PreparedResult) -> Option<Cow<'a, str>> {
    let json = prepared.json();
    match era {
        Era::Legacy { version } => (version.as_str() >= "2025-06-18" || !prepared.has_links())
            .then_some(Cow::Borrowed(json)),
        Era::Modern { .. } => match prepared.value() {
            // `modern` appends the key last (the maps keep their order).
            Value::Object(map) if !map.contains_key("resultType") => {
                let body = json.strip_suffix('}')?;
                let separator = if map.is_empty() { "" } else { "," };
                Some(Cow::Owned(format!(
                    "{body}{separator}\"resultType\":\"complete\"}}"
                )))
            }
            _ => Some(Cow::Borrowed(json)),
        },
    }
}

/// `resource_link` content blocks arrived with 2025-06-18; an older session's client may
/// reject a result that has one, so its tool results keep only the other blocks.
pub(super) fn without_links_before_2025_06_18(version: &str, mut result: Value) -> Value {
    // Versions are dates, so they order as strings.
    if version >= "2025-06-18" {
        return result;
    }
    if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
        content.retain(|block| block.get("type").and_then(Value::as_str) != Some("resource_link"));
    }
    result
}

/// A handler's error as the era sends it, with its HTTP status.
pub(super) fn error(era: &Era, params: &Value, error: McpError) -> (McpError, u16) {
    if !era.is_modern() {
        return (error, 200);
    }
    let error = if error.code == codes::RESOURCE_NOT_FOUND {
        let uri = params.get("uri").cloned().unwrap_or(Value::Null);
        McpError::invalid_params(error.message).with_data(json!({"uri": uri}))
    } else {
        error
    };
    let status = modern_error_status(error.code);
    (error, status)
}

/// The HTTP status for an error of a stateless request.
fn modern_error_status(code: i64) -> u16 {
    match code {
        codes::METHOD_NOT_FOUND => 404,
        codes::HEADER_MISMATCH | codes::MISSING_CAPABILITY | codes::UNSUPPORTED_VERSION => 400,
        _ => 200,
    }
}

const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Whether a `notifications/message` at `level` passes a session's `logging/setLevel`.
pub(super) fn level_allows(minimum: Option<&str>, level: Option<&str>) -> bool {
    let rank = |name: &str| LOG_LEVELS.iter().position(|candidate| *candidate == name);
    match (minimum.and_then(rank), level.and_then(rank)) {
        (Some(minimum), Some(level)) => level >= minimum,
        _ => true,
    }
}
