//! How ACP errors become [`AgentFailure`]s. ACP has one dedicated code the engine cares about
//! (-32000, auth required); usage limits have none, so they are recognised from the words real
//! adapters use (claude's "rate_limit_error", codex's `codex_error_info:"usage_limit_exceeded"`).
//! Messages are bounded because they end up in run events and journals.

use serde_json::{Value, json};

use crate::acp::connection::{RpcError, codes};
use crate::engine::runner::{AgentFailure, FailureKind};

/// Longest agent-provided message we copy into a failure.
const MESSAGE_LIMIT: usize = 2000;
/// Longest stderr tail we append to a failure.
const STDERR_LIMIT: usize = 1500;

pub(crate) fn execution(message: impl Into<String>) -> AgentFailure {
    AgentFailure::new(FailureKind::Execution, message)
}

/// Appends the end of the agent's stderr, if any, to `message`.
pub(crate) fn with_stderr(message: String, stderr_tail: &str) -> String {
    if stderr_tail.is_empty() {
        return message;
    }
    format!(
        "{message}; agent stderr (last lines): {}",
        tail(stderr_tail, STDERR_LIMIT)
    )
}

/// Maps an error from `method` on `backend`.
pub(crate) fn rpc_failure(
    backend: &str,
    method: &str,
    error: RpcError,
    init_auth_methods: &[Value],
    stderr_tail: &str,
) -> AgentFailure {
    let (code, message, data) = match error {
        RpcError::Closed(message) => return execution(with_stderr(message, stderr_tail)),
        RpcError::Remote {
            code,
            message,
            data,
        } => (code, message, data),
    };
    let message = head(&message, MESSAGE_LIMIT);
    if code == codes::AUTH_REQUIRED {
        let advertised = data
            .as_ref()
            .and_then(|data| data.get("authMethods"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(init_auth_methods);
        let mut failure = AgentFailure::new(
            FailureKind::AuthRequired,
            format!("backend {backend} requires authentication ({method}): {message}"),
        );
        failure.auth_context = Some(auth_context(backend, advertised));
        return failure;
    }
    let data_text = data.as_ref().map(Value::to_string).unwrap_or_default();
    if is_usage_limit(&message, &data_text) {
        let mut failure = AgentFailure::new(
            FailureKind::UsageLimit,
            format!("backend {backend} hit a usage limit ({method}): {message}"),
        );
        failure.reset_hint = reset_hint(&message).or_else(|| reset_hint(&data_text));
        return failure;
    }
    execution(with_stderr(
        format!("backend {backend}: {method} failed: {message} (code {code})"),
        stderr_tail,
    ))
}

/// `{backendId, methods:[{id, type?, name?}]}`: only identifiers and labels, never anything a
/// method might carry besides (descriptions can embed URLs with tokens, `_meta` anything).
pub(crate) fn auth_context(backend: &str, methods: &[Value]) -> Value {
    let methods: Vec<Value> = methods
        .iter()
        .filter_map(|method| {
            let id = method.get("id")?.as_str()?;
            let mut entry = json!({"id": id});
            for field in ["type", "name"] {
                if let Some(value) = method.get(field).and_then(Value::as_str) {
                    entry[field] = json!(value);
                }
            }
            Some(entry)
        })
        .collect();
    json!({"backendId": backend, "methods": methods})
}

fn is_usage_limit(message: &str, data: &str) -> bool {
    let text = format!("{message} {data}").to_ascii_lowercase();
    [
        "usage limit",
        "usage_limit",
        "rate limit",
        "rate_limit",
        "429",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// The provider's words about when the limit lifts: "try again at …" or "resets …", up to the
/// end of that sentence.
fn reset_hint(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let start = ["try again at", "try again in", "resets"]
        .iter()
        .filter_map(|needle| lower.find(needle))
        .min()?;
    let rest = &text[start..];
    let end = rest
        .char_indices()
        .find(|&(index, ch)| {
            ch == '\n' || ch == '"' || (ch == '.' && rest[index + 1..].starts_with([' ', '\n']))
        })
        .map_or(rest.len(), |(index, _)| index);
    let hint = head(rest[..end].trim().trim_end_matches('.'), 200);
    (!hint.is_empty()).then_some(hint)
}

/// The first `limit` bytes of `text`, cut at a character boundary.
fn head(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// The last `limit` bytes of `text`, cut at a character boundary.
fn tail(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut cut = text.len() - limit;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    format!("…{}", &text[cut..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(code: i64, message: &str, data: Option<Value>) -> RpcError {
        RpcError::Remote {
            code,
            message: message.to_owned(),
            data,
        }
    }

    #[test]
    fn auth_required_uses_error_methods_first_and_drops_extras() {
        let init = [json!({"id": "login", "name": "Log in", "description": "secret-ish"})];
        let failure = rpc_failure("pi", "session/new", remote(-32000, "auth", None), &init, "");
        assert_eq!(failure.kind, FailureKind::AuthRequired);
        assert_eq!(
            failure.auth_context,
            Some(json!({"backendId": "pi", "methods": [{"id": "login", "name": "Log in"}]}))
        );
        let data = json!({"authMethods": [{"id": "key", "type": "env_var", "_meta": {"x": 1}}]});
        let failure = rpc_failure(
            "pi",
            "session/new",
            remote(-32000, "auth", Some(data)),
            &init,
            "",
        );
        assert_eq!(
            failure.auth_context,
            Some(json!({"backendId": "pi", "methods": [{"id": "key", "type": "env_var"}]}))
        );
    }

    #[test]
    fn usage_limits_are_recognised_from_message_or_data() {
        let codex = json!({"codex_error_info": "usage_limit_exceeded"});
        let failure = rpc_failure(
            "codex",
            "session/prompt",
            remote(-32603, "Internal error", Some(codex)),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        let failure = rpc_failure(
            "codex",
            "session/prompt",
            remote(
                -32603,
                "You've hit your usage limit. Try again at 3:05 PM. Upgrade to Pro.",
                None,
            ),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        assert_eq!(failure.reset_hint.as_deref(), Some("Try again at 3:05 PM"));
        let failure = rpc_failure(
            "claude",
            "session/prompt",
            remote(-32603, "API Error: 429 rate_limit_error", None),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        assert_eq!(failure.reset_hint, None);
    }

    #[test]
    fn other_errors_are_bounded_execution_failures_with_stderr() {
        let long = "x".repeat(5000);
        let failure = rpc_failure(
            "mock",
            "session/prompt",
            remote(-32603, &long, None),
            &[],
            "boom\nlast line",
        );
        assert_eq!(failure.kind, FailureKind::Execution);
        assert!(failure.message.len() < 4000, "{}", failure.message.len());
        assert!(
            failure
                .message
                .starts_with("backend mock: session/prompt failed: xxx")
        );
        assert!(
            failure.message.ends_with("last line"),
            "{}",
            failure.message
        );
        let failure = rpc_failure("mock", "m", RpcError::Closed("gone".into()), &[], "");
        assert_eq!(
            (failure.kind, failure.message.as_str()),
            (FailureKind::Execution, "gone")
        );
    }
}
