//! The verdict over what the real adapters answered (`tests/fixtures/failures/*.json`,
//! recorded by `record.py` there), and the order in which evidence decides.

use serde_json::{Value, json};

use super::*;

/// Every recorded fixture: (file name, contents).
fn fixtures() -> Vec<(String, Value)> {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/failures");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&folder)
        .expect("tests/fixtures/failures")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".json"))
        .map(|entry| {
            let text = std::fs::read_to_string(entry.path()).expect("read fixture");
            let fixture = serde_json::from_str(&text).expect("fixture is JSON");
            (entry.file_name().to_string_lossy().into_owned(), fixture)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// What the fake's status calls for.
fn expected(fixture: &Value) -> Verdict {
    match fixture["fake"]["status"].as_u64() {
        Some(401 | 403) => Verdict::AuthRequired,
        Some(429) => Verdict::UsageLimit,
        other => panic!("a fixture with status {other:?}"),
    }
}

/// Each adapter that answers a 401 or a 429 with a JSON-RPC error gets the verdict the
/// provider's status calls for, from the error and the stderr recorded with it.
#[test]
fn recorded_adapter_errors_get_the_verdict_of_the_providers_status() {
    let mut errors = 0;
    for (name, fixture) in fixtures() {
        let Some(error) = fixture["prompt"].get("error") else {
            continue;
        };
        errors += 1;
        let evidence = Evidence {
            code: error["code"].as_i64(),
            message: error["message"].as_str().unwrap_or_default(),
            data: error.get("data"),
            stderr: fixture["stderr"].as_str().unwrap_or_default(),
        };
        assert_eq!(classify(&evidence), expected(&fixture), "{name}: {error}");
    }
    // codex and opencode answer every scenario with an error, claude its 429.
    assert!(errors >= 10, "only {errors} recorded errors");
}

/// The structured parts decide before any wording: an `errorKind` or `codex_error_info` the
/// words alone would not recognise, or would read the other way.
#[test]
fn structured_codes_decide_before_words() {
    let cases = [
        // claude-agent-acp's kind for a 401, with a message the wording tables do not know.
        (
            "Internal error: API Error: Invalid bearer token",
            json!({"errorKind": "authentication_failed"}),
            Verdict::AuthRequired,
        ),
        // codex's own kind, with no status in its words.
        (
            "Internal error",
            json!({"message": "Your access token could not be refreshed", "codex_error_info": "unauthorized"}),
            Verdict::AuthRequired,
        ),
        // A limit whose provider text mentions an API key: the kind says limit.
        (
            "Internal error: API Error: Request rejected (429) · this API key has been rate limited; authentication failed twice",
            json!({"errorKind": "rate_limit"}),
            Verdict::UsageLimit,
        ),
        // The status codex reports as a field, with a message that says nothing.
        (
            "Internal error",
            json!({"message": "exceeded retry limit", "codex_error_info": {"response_too_many_failed_attempts": {"http_status_code": 401}}}),
            Verdict::AuthRequired,
        ),
        // A status field beats words that describe the other failure.
        (
            "Internal error: invalid x-api-key",
            json!({"statusCode": 429}),
            Verdict::UsageLimit,
        ),
    ];
    for (message, data, verdict) in cases {
        let evidence = Evidence {
            code: Some(-32603),
            message,
            data: Some(&data),
            stderr: "",
        };
        assert_eq!(classify(&evidence), verdict, "{message} {data}");
    }
    // -32000 is auth whatever the words say.
    let evidence = Evidence {
        code: Some(-32000),
        message: "usage limit reached",
        ..Evidence::default()
    };
    assert_eq!(classify(&evidence), Verdict::AuthRequired);
}

/// The status an adapter reports in its fixed phrasing decides before stderr and words.
#[test]
fn a_reported_status_decides_before_stderr_and_words() {
    let evidence = Evidence {
        code: Some(-32603),
        message: "Internal error",
        data: Some(&json!({"message": "exceeded retry limit, last status: 429 Too Many Requests"})),
        stderr: "warning: invalid api key in ~/.config/other-tool",
    };
    assert_eq!(classify(&evidence), Verdict::UsageLimit);
    let evidence = Evidence {
        code: Some(-32603),
        message: "401: rate limit of the key store reached",
        ..Evidence::default()
    };
    assert_eq!(classify(&evidence), Verdict::AuthRequired);
}

/// stderr decides before the message's own words; bare numbers decide nothing.
#[test]
fn stderr_decides_before_message_words_and_numbers_never_do() {
    let evidence = Evidence {
        code: Some(-32603),
        message: "Internal error: the request was rejected; rate limits apply",
        stderr: r#"Error: 401 {"error":{"code":"invalid_api_key"}}"#,
        ..Evidence::default()
    };
    assert_eq!(classify(&evidence), Verdict::AuthRequired);
    for message in [
        "tool failed at line 401 of 403 lines",
        "wrote 429 bytes",
        "status 4010 reached",
    ] {
        let evidence = Evidence {
            code: Some(-32603),
            message,
            ..Evidence::default()
        };
        assert_eq!(classify(&evidence), Verdict::Other, "{message}");
    }
}

/// The turns an adapter left unanswered, or answered with an empty `end_turn` (pi-acp always
/// drops pi's error; both leave a turn open at times): the provider error the agent wrote to
/// its own session file or transcript gets the verdict of the provider's status.
#[test]
fn recorded_session_files_of_unreported_failures_get_the_verdict() {
    let mut judged = 0;
    for (name, fixture) in fixtures() {
        if fixture["prompt"].get("error").is_some() {
            continue;
        }
        let Some(files) = fixture["sessionFiles"].as_object() else {
            continue;
        };
        for line in files.values().filter_map(Value::as_str) {
            let (message, data) = if name.starts_with("claude") {
                crate::acp::transcript::last_error(line).expect("a recorded error")
            } else {
                let entry: Value = serde_json::from_str(line).expect("a pi entry");
                let message = entry["message"]["errorMessage"]
                    .as_str()
                    .expect("errorMessage");
                (message.to_owned(), Value::Null)
            };
            let evidence = Evidence {
                message: &message,
                data: Some(&data).filter(|data| !data.is_null()),
                ..Evidence::default()
            };
            assert_eq!(classify(&evidence), expected(&fixture), "{name}: {message}");
            judged += 1;
        }
    }
    assert!(judged >= 6, "only {judged} recorded session files");
}

/// The reset moment, where the adapter passes one on: codex turns the body's `resets_at` into
/// "try again at <clock time>", pi's session file keeps the whole body. claude-agent-acp
/// passes on neither the body's reset nor `anthropic-ratelimit-unified-reset`.
#[test]
fn recorded_usage_limits_carry_the_reset_moment_the_adapter_passes_on() {
    let all = fixtures();
    let fixture = |name: &str| {
        all.iter()
            .find(|(file, _)| file == name)
            .map(|(_, fixture)| fixture.clone())
            .unwrap_or_else(|| panic!("no fixture {name}"))
    };
    let error = |fixture: &Value| crate::acp::connection::RpcError::Remote {
        code: fixture["prompt"]["error"]["code"].as_i64().expect("code"),
        message: fixture["prompt"]["error"]["message"]
            .as_str()
            .expect("message")
            .to_owned(),
        data: fixture["prompt"]["error"].get("data").cloned(),
    };
    let codex = crate::acp::failure::rpc_failure(
        "codex",
        "session/prompt",
        error(&fixture("codex-openai-429.json")),
        &[],
        "",
    );
    assert!(codex.reset_at.is_some(), "{codex:?}");
    assert!(
        codex
            .reset_hint
            .is_some_and(|hint| hint.starts_with("try again at")),
        "codex hint"
    );
    let claude = crate::acp::failure::rpc_failure(
        "claude",
        "session/prompt",
        error(&fixture("claude-anthropic-429.json")),
        &[],
        "",
    );
    assert_eq!(
        (claude.kind, claude.reset_at),
        (crate::engine::runner::FailureKind::UsageLimit, None)
    );
    let pi = fixture("pi-openai-429.json");
    let line = pi["sessionFiles"]
        .as_object()
        .and_then(|files| files.values().next())
        .and_then(Value::as_str)
        .expect("pi's session file");
    let entry: Value = serde_json::from_str(line).expect("a pi entry");
    let message = entry["message"]["errorMessage"]
        .as_str()
        .expect("errorMessage")
        .to_owned();
    let pi = crate::acp::failure::rpc_failure(
        "pi",
        "session/prompt",
        crate::acp::connection::RpcError::Remote {
            code: -32603,
            message,
            data: None,
        },
        &[],
        "",
    );
    assert_eq!(
        pi.kind,
        crate::engine::runner::FailureKind::UsageLimit,
        "{pi:?}"
    );
    assert!(pi.reset_at.is_some(), "{pi:?}");
}
