//! How ACP errors and failed turns become [`AgentFailure`]s. [`crate::acp::verdict`] decides
//! whether one is a rejected credential (`auth_required`), a usage limit or something else,
//! structured codes first; this module builds the failure: the auth methods to offer, when a
//! limit lifts (a hint in words and a moment), the agent's stderr and setup advice for
//! anything else. `docs/adapters.md` lists how each built-in adapter reports 401s and 429s.
//!
//! Messages are bounded because they end up in run events and journals.

use serde_json::Value;

use crate::acp::connection::RpcError;
use crate::acp::verdict::{self, Evidence, Verdict};
use crate::acp::{advice, reset};
use crate::engine::runner::{AgentFailure, FailureKind};
use crate::model::{AuthContext, AuthMethod};

/// Longest agent-provided message we copy into a failure.
const MESSAGE_LIMIT: usize = 2000;
/// Longest stderr tail we append to a failure.
const STDERR_LIMIT: usize = 1500;

pub(crate) fn execution(message: impl Into<String>) -> AgentFailure {
    AgentFailure::new(FailureKind::Execution, message)
}

/// Appends the end of the agent's stderr, if any, to `message`, and the advice for a known
/// setup problem either of them shows ([`advice`]).
pub(crate) fn with_stderr(message: String, stderr_tail: &str) -> String {
    let advice = advice::for_failure(&[&message, stderr_tail]);
    let mut message = message;
    if !stderr_tail.is_empty() {
        message = format!(
            "{message}; agent stderr (last lines): {}",
            tail(stderr_tail, STDERR_LIMIT)
        );
    }
    match advice {
        Some(advice) => format!("{message}. {advice}"),
        None => message,
    }
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
    let evidence = Evidence {
        code: Some(code),
        message: &message,
        data: data.as_ref(),
        stderr: stderr_tail,
    };
    match verdict::classify(&evidence) {
        Verdict::AuthRequired => {
            let advertised = data
                .as_ref()
                .and_then(|data| data.get("authMethods"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(init_auth_methods);
            auth_required(
                backend,
                format!("backend {backend} requires authentication ({method}): {message}"),
                advertised,
            )
        }
        Verdict::UsageLimit => {
            let data_text = data.as_ref().map(Value::to_string).unwrap_or_default();
            usage_limit(
                format!("backend {backend} hit a usage limit ({method}): {message}"),
                &[&message, &data_text],
            )
        }
        Verdict::Other => {
            let data_text = data.as_ref().map(Value::to_string).unwrap_or_default();
            let mut failure = execution(with_stderr(
                format!("backend {backend}: {method} failed: {message} (code {code})"),
                stderr_tail,
            ));
            failure.retry_after = reset::retry_after(
                &format!("{message} {data_text}"),
                std::time::SystemTime::now(),
            );
            failure
        }
    }
}

/// A turn that timed out: `auth_required` or `usage_limit` when what the agent recorded of
/// the turn (`recorded`: the provider error from its session file or transcript, as message
/// and data) or its stderr during the turn shows a rejected credential or a reached limit
/// (an adapter that retries internally says so nowhere else), else a timeout with `message`.
pub(crate) fn timeout_failure(
    backend: &str,
    message: String,
    stderr_during_turn: &str,
    recorded: Option<(String, Option<Value>)>,
    init_auth_methods: &[Value],
) -> AgentFailure {
    let (recorded_message, recorded_data) = recorded.unwrap_or_default();
    let evidence = Evidence {
        code: None,
        message: &recorded_message,
        data: recorded_data.as_ref(),
        stderr: stderr_during_turn,
    };
    let what = if recorded_message.is_empty() {
        message
    } else {
        format!(
            "{message}; the agent recorded: {}",
            head(&recorded_message, MESSAGE_LIMIT)
        )
    };
    match verdict::classify(&evidence) {
        Verdict::AuthRequired => auth_required(
            backend,
            with_stderr(
                format!("backend {backend} requires authentication ({what})"),
                stderr_during_turn,
            ),
            init_auth_methods,
        ),
        Verdict::UsageLimit => {
            let data_text = recorded_data
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default();
            usage_limit(
                with_stderr(
                    format!("backend {backend} hit a usage limit ({what})"),
                    stderr_during_turn,
                ),
                &[&recorded_message, &data_text, stderr_during_turn],
            )
        }
        Verdict::Other => AgentFailure::new(FailureKind::Timeout, what),
    }
}

fn auth_required(backend: &str, message: String, methods: &[Value]) -> AgentFailure {
    let mut failure = AgentFailure::new(FailureKind::AuthRequired, message);
    failure.auth_context = Some(Box::new(auth_context(backend, methods)));
    failure
}

/// A usage-limit failure with the reset hint and moment from the first of `sources` that
/// says when the limit lifts.
fn usage_limit(message: String, sources: &[&str]) -> AgentFailure {
    let mut failure = AgentFailure::new(FailureKind::UsageLimit, message);
    failure.reset_hint = sources.iter().find_map(|text| reset_hint(text));
    failure.reset_at = reset::reset_at(&sources.join(" ")).and_then(reset::unix_ms);
    failure
}

/// `{backendId, methods:[{id, type?, name?}]}`: only identifiers and labels, never anything a
/// method might carry besides (descriptions can embed URLs with tokens, `_meta` anything).
pub(crate) fn auth_context(backend: &str, methods: &[Value]) -> AuthContext {
    let text =
        |method: &Value, field: &str| method.get(field).and_then(Value::as_str).map(str::to_owned);
    let methods = methods
        .iter()
        .filter_map(|method| {
            Some(AuthMethod {
                id: text(method, "id")?,
                kind: text(method, "type"),
                name: text(method, "name"),
            })
        })
        .collect();
    AuthContext {
        backend_id: backend.to_owned(),
        methods,
    }
}

/// When the limit lifts, if the provider said: a number of seconds in a body (`resets_in_seconds`,
/// `resetsInSeconds`) or a quoted `retry-after`, as the time it ends (from now); a body's
/// `resets_at`/`resetsAt` (Unix seconds, or an RFC 3339 time); else the provider's words
/// ("try again at …", "resets …") up to the end of that sentence.
pub(crate) fn reset_hint(text: &str) -> Option<String> {
    reset_hint_at(text, std::time::SystemTime::now())
}

/// [`reset_hint`] with `now` as the present, so a relative wait becomes a time.
fn reset_hint_at(text: &str, now: std::time::SystemTime) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    for key in reset::WAIT_KEYS {
        if let Some(seconds) = reset::number_after(&lower, key) {
            let at = now + std::time::Duration::from_secs(seconds);
            return Some(format!(
                "resets at {} (in {})",
                humantime::format_rfc3339_seconds(at),
                spell_seconds(seconds)
            ));
        }
    }
    for key in ["resets_at", "resetsat"] {
        if let Some(at) = time_after(text, &lower, key) {
            return Some(format!(
                "resets at {}",
                humantime::format_rfc3339_seconds(at)
            ));
        }
    }
    // Words, not field names: "resets" must stand alone ("resets at 5 PM", "resets in 2
    // hours"), so a field such as `resetsInSeconds` with no number is not taken for a time.
    let start = ["try again at", "try again in", "resets "]
        .iter()
        .filter_map(|needle| reset::word_at(&lower, needle))
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

/// The time after `key` (found in `lower`, read from `text`): Unix seconds (milliseconds
/// when the number is too large for seconds) or an RFC 3339 time.
fn time_after(text: &str, lower: &str, key: &str) -> Option<std::time::SystemTime> {
    if let Some(number) = reset::number_after(lower, key) {
        let seconds = if number > 100_000_000_000 {
            number / 1000
        } else {
            number
        };
        return Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds));
    }
    lower.match_indices(key).find_map(|(index, _)| {
        let rest = text[index + key.len()..].trim_start_matches(['"', '\'', ':', '=', ' ', '\\']);
        let end = rest
            .find(|ch: char| {
                ch == '"' || ch == '\'' || ch == ',' || ch == '}' || ch.is_whitespace()
            })
            .unwrap_or(rest.len());
        humantime::parse_rfc3339_weak(&rest[..end]).ok()
    })
}

/// `3600` → "3600 s, about 1 h"; short waits stay in seconds.
fn spell_seconds(seconds: u64) -> String {
    match seconds {
        0..=119 => format!("{seconds} s"),
        120..=3599 => format!("{seconds} s, about {} min", seconds.div_ceil(60)),
        _ => format!("{seconds} s, about {} h", seconds.div_ceil(3600)),
    }
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
    use serde_json::json;

    fn remote(code: i64, message: &str, data: Option<Value>) -> RpcError {
        RpcError::Remote {
            code,
            message: message.to_owned(),
            data,
        }
    }

    #[test]
    fn a_timeout_with_a_rejected_key_on_stderr_is_auth_required() {
        // Anthropic's and an OpenAI-compatible provider's 401 bodies as an adapter logs them
        // while it retries.
        for stderr in [
            r#"API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}} · Retrying in 2 seconds"#,
            r#"Error: 401 {"error":{"message":"Incorrect API key provided: sk-test","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        ] {
            let failure = timeout_failure("claude", "the turn timed out".into(), stderr, None, &[]);
            assert_eq!(failure.kind, FailureKind::AuthRequired, "{stderr}");
            assert!(failure.auth_context.is_some());
        }
    }

    /// Claude Code retrying a 401 writes each attempt to its transcript and nothing to
    /// stderr; a 429 that ended the turn is there as the synthetic error message.
    #[test]
    fn a_timeout_with_a_recorded_provider_error_pauses() {
        let retrying = (
            r#"API Error (retrying): 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#.to_owned(),
            Some(json!({"status": 401})),
        );
        let failure = timeout_failure("claude", "timed out".into(), "", Some(retrying), &[]);
        assert_eq!(
            failure.kind,
            FailureKind::AuthRequired,
            "{}",
            failure.message
        );
        let limited = (
            "API Error: Request rejected (429) · please try again in 2 hours".to_owned(),
            Some(json!({"status": 429, "errorKind": "rate_limit"})),
        );
        let failure = timeout_failure("claude", "timed out".into(), "", Some(limited), &[]);
        assert_eq!(failure.kind, FailureKind::UsageLimit, "{}", failure.message);
        assert!(failure.reset_at.is_some(), "{failure:?}");
        let other = (
            "API Error: 500 overloaded".to_owned(),
            Some(json!({"status": 500})),
        );
        let failure = timeout_failure("claude", "timed out".into(), "", Some(other), &[]);
        assert_eq!(failure.kind, FailureKind::Timeout);
    }

    /// The kinds claude-agent-acp and codex-acp put in the error data decide, whatever the
    /// words: an authentication kind with a message no wording table knows, a limit kind
    /// whose provider text talks about keys.
    #[test]
    fn adapter_error_kinds_decide_before_the_words() {
        let cases = [
            (
                "Internal error: API Error: Invalid bearer token",
                json!({"errorKind": "authentication_failed"}),
                FailureKind::AuthRequired,
            ),
            (
                "Internal error",
                json!({"message": "Your access token could not be refreshed", "codex_error_info": "unauthorized"}),
                FailureKind::AuthRequired,
            ),
            (
                "Internal error: API Error: Request rejected · this key was rate limited after authentication failed twice",
                json!({"errorKind": "rate_limit"}),
                FailureKind::UsageLimit,
            ),
        ];
        for (message, data, kind) in cases {
            let failure = rpc_failure(
                "claude",
                "session/prompt",
                remote(-32603, message, Some(data)),
                &[],
                "",
            );
            assert_eq!(failure.kind, kind, "{message}");
        }
    }

    #[test]
    fn a_timeout_without_a_credential_error_stays_a_timeout() {
        let failure = timeout_failure(
            "claude",
            "timed out".into(),
            "read 401 lines of main.rs",
            None,
            &[],
        );
        assert_eq!(failure.kind, FailureKind::Timeout);
        assert_eq!(failure.message, "timed out");
    }

    #[test]
    fn auth_required_uses_error_methods_first_and_drops_extras() {
        let init = [json!({"id": "login", "name": "Log in", "description": "secret-ish"})];
        let failure = rpc_failure("pi", "session/new", remote(-32000, "auth", None), &init, "");
        assert_eq!(failure.kind, FailureKind::AuthRequired);
        assert_eq!(
            json!(failure.auth_context),
            json!({"backendId": "pi", "methods": [{"id": "login", "name": "Log in"}]})
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
            json!(failure.auth_context),
            json!({"backendId": "pi", "methods": [{"id": "key", "type": "env_var"}]})
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

    /// Each built-in adapter's observed way of passing on a provider's 401/403 (acp.md §3 and
    /// the adapter tests): all of them pause as auth_required with the advertised methods.
    #[test]
    fn every_adapters_credential_failure_is_auth_required() {
        let init = [json!({"id": "login", "name": "Log in"})];
        let cases = [
            // claude-agent-acp 0.101: the 401 text, -32603.
            (
                "claude",
                remote(
                    -32603,
                    "Internal error: Invalid API key · Fix external API key",
                    None,
                ),
            ),
            // claude-agent-acp 0.23 (the Claude Code CLI's own words).
            (
                "claude",
                remote(
                    -32603,
                    "Failed to authenticate. API Error: 401 {\"type\":\"error\"}",
                    None,
                ),
            ),
            // opencode 1.18: the provider's message, -32603 with data.errorName.
            (
                "opencode",
                remote(
                    -32603,
                    "Internal error: invalid x-api-key",
                    Some(json!({"service": "session", "errorName": "APIError"})),
                ),
            ),
            // codex-acp 0.16: after its reconnects, the status in data.message.
            (
                "codex",
                remote(
                    -32603,
                    "Internal error",
                    Some(json!({
                        "message": "unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:1/v1/responses",
                        "codex_error_info": "other"
                    })),
                ),
            ),
            (
                "codex",
                remote(
                    -32603,
                    "Internal error",
                    Some(json!({"message": "unexpected status 403 Forbidden: no access"})),
                ),
            ),
            // pi-acp: its own -32000 with data.authMethods, and pi's error text.
            ("pi", remote(-32000, "Authentication required", None)),
            (
                "pi",
                remote(-32603, "401: {\"type\":\"authentication_error\"}", None),
            ),
        ];
        for (backend, error) in cases {
            let shown = format!("{error:?}");
            let failure = rpc_failure(backend, "session/prompt", error, &init, "");
            assert_eq!(failure.kind, FailureKind::AuthRequired, "{shown}");
            assert_eq!(
                json!(failure.auth_context),
                json!({"backendId": backend, "methods": [{"id": "login", "name": "Log in"}]}),
                "{shown}"
            );
        }
        // Numbers alone are not credentials.
        let failure = rpc_failure(
            "claude",
            "session/prompt",
            remote(-32603, "tool failed at line 401 of 403 lines", None),
            &init,
            "",
        );
        assert_eq!(failure.kind, FailureKind::Execution);
    }

    #[test]
    fn reset_hints_come_from_bodies_headers_and_words() {
        let failure = rpc_failure(
            "codex",
            "session/prompt",
            remote(
                -32603,
                "Internal error",
                Some(
                    json!({"message": "You've hit your usage limit. Try again at 9:38 AM.", "codex_error_info": "usage_limit_exceeded"}),
                ),
            ),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        assert_eq!(failure.reset_hint.as_deref(), Some("Try again at 9:38 AM"));
        let failure = rpc_failure(
            "opencode",
            "session/prompt",
            remote(
                -32603,
                "Internal error: 429 {\"error\":{\"type\":\"usage_limit_reached\",\"resets_in_seconds\":3600}}",
                None,
            ),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        let hint = failure.reset_hint.expect("a hint");
        assert!(
            hint.starts_with("resets at ") && hint.ends_with(" (in 3600 s, about 1 h)"),
            "{hint}"
        );
        let failure = rpc_failure(
            "claude",
            "session/prompt",
            remote(
                -32603,
                "API Error: Request rejected (429) · rate limit reached, retry after 90 seconds",
                Some(json!({"errorKind": "rate_limit"})),
            ),
            &[],
            "",
        );
        let hint = failure.reset_hint.expect("a hint");
        assert!(hint.ends_with(" (in 90 s)"), "{hint}");
        assert_eq!(
            reset_hint("resets_at: 0").as_deref(),
            Some("resets at 1970-01-01T00:00:00Z")
        );
        assert_eq!(reset_hint("API Error: 429 rate_limit_error"), None);
    }

    /// A body's wait in seconds, in either spelling, becomes the time the limit lifts.
    #[test]
    fn a_wait_in_seconds_becomes_the_time_the_limit_lifts() {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_268_800);
        for text in [
            r#"{"error":{"type":"usage_limit_reached","resetsInSeconds":3600}}"#,
            r#"{"resets_in_seconds": 3600}"#,
            r#"{"retryAfter":"3600"}"#,
        ] {
            assert_eq!(
                reset_hint_at(text, now).as_deref(),
                Some("resets at 2026-01-01T13:00:00Z (in 3600 s, about 1 h)"),
                "{text}"
            );
        }
        assert_eq!(
            reset_hint_at(r#"{"resetsAt":"2026-01-01T15:30:00Z"}"#, now).as_deref(),
            Some("resets at 2026-01-01T15:30:00Z")
        );
        assert_eq!(
            reset_hint_at(r#"{"resetsAt":1767281400000}"#, now).as_deref(),
            Some("resets at 2026-01-01T15:30:00Z")
        );
        // A field name is never taken for the provider's words.
        assert_eq!(reset_hint_at(r#"{"resetsInSeconds":null}"#, now), None);
        assert_eq!(
            reset_hint_at("Your limit resets tomorrow at 9.", now).as_deref(),
            Some("resets tomorrow at 9")
        );
    }

    /// The usage-limit error as an adapter sends it: the wait in `data.resetsInSeconds`.
    #[test]
    fn a_usage_limit_with_resets_in_seconds_hints_a_time() {
        let data = json!({"errorKind": "usage_limit", "resetsInSeconds": 5400});
        let failure = rpc_failure(
            "claude",
            "session/prompt",
            remote(-32603, "Internal error: usage limit reached", Some(data)),
            &[],
            "",
        );
        assert_eq!(failure.kind, FailureKind::UsageLimit);
        let hint = failure.reset_hint.expect("a hint");
        assert!(hint.starts_with("resets at 20"), "{hint}");
        assert!(hint.ends_with(" (in 5400 s, about 2 h)"), "{hint}");
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
