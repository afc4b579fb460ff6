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
