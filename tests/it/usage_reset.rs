//! A usage-limit pause carries the moment the limit lifts: the mock agent's usage-limit error
//! says "try again in 5 seconds", and the run's status shows `resetAt` about five seconds
//! after the call failed, next to the provider's words in `resetHint`; a limit that names no
//! time shows none.

use std::time::{Duration, SystemTime};

use crate::engine::mock_harness;

const META: &str = "export const meta = { name: 'x', description: 'd', model: 'mock' };\n";

#[tokio::test]
async fn a_usage_limit_pause_carries_when_the_limit_resets() {
    let h = mock_harness();
    let before = SystemTime::now();
    let (_, status) = h
        .run_to_end(&format!(
            "{META}return await agent('x\\n@mock usage_limit try again in 5 seconds');"
        ))
        .await;
    let after = SystemTime::now();
    assert_eq!(status["reason"], "usage_limit", "{status:#}");
    let reset_at = status["outcome"]["resetAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no resetAt: {status:#}"));
    let reset_at = humantime::parse_rfc3339(reset_at).expect("resetAt is RFC 3339 UTC");
    // The parser reads the wait at the failure, between `before` and `after`; the stored
    // time keeps milliseconds.
    let earliest = before + Duration::from_secs(5) - Duration::from_millis(1);
    let latest = after + Duration::from_secs(5);
    assert!(
        reset_at >= earliest && reset_at <= latest,
        "resetAt {reset_at:?} not within five seconds of the failure: {status:#}"
    );
    assert!(
        status["outcome"]["resetHint"]
            .as_str()
            .is_some_and(|hint| hint.contains("try again in 5 seconds")),
        "{status:#}"
    );

    let (_, status) = h
        .run_to_end(&format!(
            "{META}return await agent('x\\n@mock usage_limit');"
        ))
        .await;
    assert_eq!(status["reason"], "usage_limit", "{status:#}");
    assert_eq!(status["outcome"].get("resetAt"), None, "{status:#}");
    h.engine.shutdown(Duration::from_secs(5)).await;
}
