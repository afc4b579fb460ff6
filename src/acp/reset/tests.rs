//! The reset parser against the usage-limit errors each built-in adapter passes on, with a
//! fixed present (Thursday 2026-01-01 12:00:00 UTC) and fixed zone rules: local time is
//! UTC−5, Europe/Paris UTC+1 (winter), America/New_York UTC−5.

use super::*;
use serde_json::json;

/// 2026-01-01T12:00:00Z.
const NOW: u64 = 1_767_268_800;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn fixed_offsets(zone: Option<&str>, _utc: i64) -> Option<i64> {
    match zone {
        None => Some(-5 * 3600),
        Some("Europe/Paris") => Some(3600),
        Some("America/New_York") => Some(-5 * 3600),
        Some(_) => None,
    }
}

fn parse(text: &str) -> Option<String> {
    reset_at_with(text, now(), &fixed_offsets)
        .map(|at| humantime::format_rfc3339_seconds(at).to_string())
}

#[test]
fn claude_code_messages() {
    // Claude Code's limit banner with a named zone: 3pm in Paris is 14:00 UTC, still today.
    assert_eq!(
        parse("Claude usage limit reached. Your limit resets 3pm (Europe/Paris)."),
        Some("2026-01-01T14:00:00Z".into())
    );
    // The session-window banner without a zone: 3pm local (UTC−5) is 20:00 UTC.
    assert_eq!(
        parse("5-hour limit reached ∙ resets 3pm"),
        Some("2026-01-01T20:00:00Z".into())
    );
    // A time already past today is tomorrow's: 11am Paris was 10:00 UTC.
    assert_eq!(
        parse("You've hit your limit · resets 11am (Europe/Paris)"),
        Some("2026-01-02T10:00:00Z".into())
    );
    // The older form: the reset as Unix seconds after a bar.
    assert_eq!(
        parse("Claude AI usage limit reached|1767290400"),
        Some("2026-01-01T18:00:00Z".into())
    );
    // claude-agent-acp passing on the API's 429 with its body.
    let data = json!({"errorKind": "rate_limit", "resetsInSeconds": 5400}).to_string();
    assert_eq!(
        parse(&format!("API Error: Request rejected (429) {data}")),
        Some("2026-01-01T13:30:00Z".into())
    );
}

#[test]
fn codex_messages() {
    assert_eq!(
        parse("You've hit your usage limit. Upgrade to Pro or try again in 2 hours 3 minutes."),
        Some("2026-01-01T14:03:00Z".into())
    );
    assert_eq!(
        parse("You've hit your usage limit. Try again at 3:04 PM."),
        Some("2026-01-01T20:04:00Z".into())
    );
    let data = json!({
        "codex_error_info": "usage_limit_exceeded",
        "message": "You've hit your usage limit.",
        "resets_in_seconds": 7380,
    });
    assert_eq!(
        parse(&data.to_string()),
        Some("2026-01-01T14:03:00Z".into())
    );
}

#[test]
fn opencode_and_pi_pass_on_the_providers_body() {
    // opencode: the provider's 429 body as the error message.
    let body = json!({"type": "error", "error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "resets_at": 1_767_272_400,
    }});
    assert_eq!(
        parse(&format!("Internal error: {body}")),
        Some("2026-01-01T13:00:00Z".into())
    );
    // pi: the status and body, or the header it was given.
    assert_eq!(
        parse("429 rate_limit_error: Number of requests exceeded. retry-after: 90"),
        Some("2026-01-01T12:01:30Z".into())
    );
    assert_eq!(
        parse(r#"{"resetsAt":"2026-01-01T15:30:00Z"}"#),
        Some("2026-01-01T15:30:00Z".into())
    );
    assert_eq!(
        parse(r#"{"resetsAt":1767281400000}"#),
        Some("2026-01-01T15:30:00Z".into())
    );
}

#[test]
fn every_unit_of_a_wait_in_words() {
    for (text, expected) in [
        ("try again in 5 seconds", "2026-01-01T12:00:05Z"),
        ("Try again in 1 day.", "2026-01-02T12:00:00Z"),
        ("resets in 45 minutes", "2026-01-01T12:45:00Z"),
        ("try again in 1 hour and 30 minutes", "2026-01-01T13:30:00Z"),
        ("try again in 2d 3h", "2026-01-03T15:00:00Z"),
        (
            "rate limited, retry after 90 seconds",
            "2026-01-01T12:01:30Z",
        ),
    ] {
        assert_eq!(parse(text), Some(expected.into()), "{text}");
    }
}

#[test]
fn clock_times_in_every_spelling() {
    for (text, expected) in [
        ("resets at 3pm (America/New_York)", "2026-01-01T20:00:00Z"),
        ("resets 9.30am (Europe/Paris)", "2026-01-02T08:30:00Z"),
        ("try again at 15:30", "2026-01-01T20:30:00Z"),
        ("try again at 12 AM", "2026-01-02T05:00:00Z"),
        ("rate limited; retry after 3pm", "2026-01-01T20:00:00Z"),
        ("resets 3pm (UTC)", "2026-01-01T15:00:00Z"),
        // Codex names the day when the limit lifts on another one.
        (
            "You've hit your usage limit. Try again at Jan 2nd, 2026 12:18 AM.",
            "2026-01-02T05:18:00Z",
        ),
        ("try again at Jan 3rd 9:05 PM", "2026-01-04T02:05:00Z"),
        (
            "try again at February 1st, 2026 3:04 PM",
            "2026-02-01T20:04:00Z",
        ),
    ] {
        assert_eq!(parse(text), Some(expected.into()), "{text}");
    }
}

#[test]
fn no_reset_is_made_up() {
    for text in [
        "API Error: 429 rate_limit_error",
        "You've hit your usage limit",
        "try again later",
        "resets tomorrow at 9",
        r#"{"resetsInSeconds":null}"#,
        // A wait no clock can show is no time.
        r#"{"resets_in_seconds": 18446744073709551615}"#,
        // A zone the database does not know gives no time rather than a guess.
        "resets 3pm (Mars/Olympus_Mons)",
        // A bare number is no clock time.
        "resets 3 (Europe/Paris)",
    ] {
        assert_eq!(parse(text), None, "{text}");
    }
}

/// The system's tz database: Paris is UTC+1 in winter and UTC+2 in summer, and a clock time
/// across the spring change lands on the new offset.
#[test]
fn system_zone_files_give_the_offset_of_the_day() {
    let winter = 1_767_268_800; // 2026-01-01
    let summer = 1_782_907_200; // 2026-07-01
    assert_eq!(zoneinfo::offset(Some("Europe/Paris"), winter), Some(3600));
    assert_eq!(zoneinfo::offset(Some("Europe/Paris"), summer), Some(7200));
    assert_eq!(zoneinfo::offset(Some("../../etc/passwd"), winter), None);
    // Saturday 2026-03-28 12:00 UTC; the clocks go forward on Sunday 29th at 02:00.
    let before_change = UNIX_EPOCH + Duration::from_secs(1_774_699_200);
    let at = reset_at_with(
        "resets 10am (Europe/Paris)",
        before_change,
        &zoneinfo::offset,
    )
    .map(|at| humantime::format_rfc3339_seconds(at).to_string());
    assert_eq!(at, Some("2026-03-29T08:00:00Z".into()));
}
