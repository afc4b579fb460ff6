//! Claude Code's session transcript as the evidence of a failed turn that claude-agent-acp
//! does not report. Without `x-should-retry: false` from the provider, Claude Code retries a
//! 401 up to ten times with growing waits (minutes in all) and says nothing over ACP or on
//! stderr meanwhile, so a call whose time limit comes first would end `AGENT_TIMEOUT`. Each
//! retry is written to the transcript (`<config dir>/projects/<cwd folder>/<session id>.jsonl`)
//! as `{"type":"system","subtype":"api_error","error":{"status":401,"message":"401 {…}"}}`,
//! and a turn that failed for good as a synthetic assistant message with `isApiErrorMessage`,
//! `apiErrorStatus` and `error` (the Claude SDK's error kind).
//!
//! Only the file's last 64 KiB are read, off the async workers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

/// The last provider error of the current turn of Claude session `session_id` under
/// `config_dir`: its message and `{"status", "errorKind"}` as error data, for
/// [`crate::acp::failure`] to classify; `None` when the turn has no error since its prompt
/// or a real answer came after it.
pub(crate) async fn claude_turn_error(
    config_dir: &Path,
    session_id: &str,
) -> Option<(String, Value)> {
    let projects = config_dir.join("projects");
    let name = format!("{session_id}.jsonl");
    let read = move || -> Option<(String, Value)> {
        let path = std::fs::read_dir(&projects)
            .ok()?
            .flatten()
            .map(|folder| folder.path().join(&name))
            .find(|path| path.is_file())?;
        last_error(&tail(&path)?)
    };
    tokio::time::timeout(Duration::from_secs(5), tokio::task::spawn_blocking(read))
        .await
        .ok()?
        .ok()?
}

/// Where Claude Code keeps its transcripts for an agent started with `variable`'s values.
pub(crate) fn claude_config_dir(variable: impl Fn(&str) -> Option<PathBuf>) -> Option<PathBuf> {
    variable("CLAUDE_CONFIG_DIR").or_else(|| variable("HOME").map(|home| home.join(".claude")))
}

/// How much of the end of an agent's own record is read: its last turn's entries.
const TAIL_BYTES: u64 = 64 * 1024;

/// The last [`TAIL_BYTES`] of the file at `path` (less if it is shorter), however the file
/// grows meanwhile.
pub(crate) fn tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut handle = std::fs::File::open(path).ok()?;
    let length = handle.metadata().ok()?.len();
    handle
        .seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    handle.take(TAIL_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The newest error entry in `text` that no user prompt or real answer follows.
pub(crate) fn last_error(text: &str) -> Option<(String, Value)> {
    for line in text.lines().rev() {
        // The first line of a cut tail is partial; it fails to parse and is skipped.
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let field = |name: &str| entry.get(name).and_then(Value::as_str);
        match field("type") {
            Some("system") if field("subtype") == Some("api_error") => {
                let error = entry.get("error")?;
                let message = error.get("message").and_then(Value::as_str)?;
                return Some((
                    format!("API Error (retrying): {message}"),
                    json!({"status": error.get("status")}),
                ));
            }
            Some("assistant") => {
                if entry.get("isApiErrorMessage").and_then(Value::as_bool) != Some(true) {
                    return None;
                }
                let text = entry
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|block| block.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                let mut data = json!({"status": entry.get("apiErrorStatus")});
                if let Some(kind) = field("error") {
                    data["errorKind"] = json!(kind);
                }
                return Some((text, data));
            }
            Some("user") => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Claude Code 2.1 wrote them while retrying a 401 and after a 429.
    #[test]
    fn the_last_error_of_the_turn_is_found_and_older_ones_are_not() {
        let prompt = r#"{"type":"user","message":{"role":"user","content":"Say hello"}}"#;
        let retry = r#"{"type":"system","subtype":"api_error","level":"error","error":{"message":"401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}","status":401},"retryInMs":37097,"retryAttempt":7,"maxRetries":10}"#;
        let request = r#"{"type":"api-request","sessionId":"s"}"#;
        let text = format!("{prompt}\n{request}\n{retry}\n{request}\n");
        let (message, data) = last_error(&text).expect("an error");
        assert!(message.contains("invalid x-api-key"), "{message}");
        assert_eq!(data, json!({"status": 401}));
        let limit = r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: Request rejected (429) · rate limit"}]},"error":"rate_limit","isApiErrorMessage":true,"apiErrorStatus":429}"#;
        let (message, data) = last_error(&format!("{prompt}\n{limit}\n")).expect("an error");
        assert_eq!(message, "API Error: Request rejected (429) · rate limit");
        assert_eq!(data, json!({"status": 429, "errorKind": "rate_limit"}));
        // An error before the current prompt, or followed by a real answer, is not this turn's.
        let answer = r#"{"type":"assistant","message":{"model":"claude-sonnet-4-6","content":[]}}"#;
        assert_eq!(last_error(&format!("{retry}\n{prompt}\n{request}\n")), None);
        assert_eq!(last_error(&format!("{prompt}\n{retry}\n{answer}\n")), None);
    }
}
