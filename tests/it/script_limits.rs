//! What a script can make the engine hold, through the engine's library API with the instant
//! runner: the call past `maxAgents` fails the run with the limit error however many calls
//! start at once, and a script that enters phases without end fails at the per-generation
//! phase ceiling with a message naming it.

use std::time::{Duration, Instant};

use agentprism::engine::{LimitOverrides, StatusQuery};
use serde_json::{Value, json};

use crate::engine::{Harness, harness};

const HEADER: &str = "export const meta = { name: 'x', description: 'd', model: 'codex' };\n";

/// Admits `body` under `limits`, waits for its run to settle, and returns its status.
async fn settled_status(h: &Harness, body: &str, limits: LimitOverrides) -> Value {
    let admission = h.admit(&format!("{HEADER}{body}"), limits).await;
    h.engine.wait(&admission.run_id).await;
    json!(
        h.engine
            .status(&admission.run_id, &StatusQuery::default())
            .await
            .expect("status")
    )
}

/// Runs the rest of the script only live: the dry run's answers start with `[dry-run]`.
const LIVE_ONLY: &str = "if ((await agent('first')).startsWith('[dry-run]')) return 'dry';\n";

#[tokio::test]
async fn a_hundred_thousand_calls_at_once_fail_with_the_agent_limit() {
    let h = harness();
    let started = Instant::now();
    let status = settled_status(
        &h,
        &format!(
            "{LIVE_ONLY}const calls = [];\n\
             for (let i = 0; i < 100000; i++) calls.push(agent('task ' + i));\n\
             await Promise.all(calls);"
        ),
        LimitOverrides {
            max_agents: Some(20),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(status["status"], "failed", "{status}");
    let outcome = status["outcome"].to_string();
    assert!(outcome.contains("AGENT_LIMIT_EXCEEDED"), "{outcome}");
    assert!(
        outcome.contains("the run reached its limit of 20 agent calls (maxAgents)"),
        "{outcome}"
    );
    // The dry run meets its own limit the same way, and admission refuses the script.
    let refused = h
        .start(&format!(
            "{HEADER}const calls = [];\n\
             for (let i = 0; i < 100000; i++) calls.push(agent('task ' + i));\n\
             await Promise.all(calls);"
        ))
        .await
        .expect_err("the dry run fails");
    let refused = refused.to_string();
    assert!(
        refused.contains("AGENT_LIMIT_EXCEEDED: the run reached its limit of 10000 agent calls"),
        "{refused}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_limit_counts_refused_calls_as_the_driver_does() {
    let h = harness();
    // The second call's options are refused by the driver; it counts all the same, so the
    // third call is the one past a limit of two, refused in the script.
    let status = settled_status(
        &h,
        "await agent('one');\n\
         let refused = null;\n\
         try { await agent('two', {noSuchOption: 1}); } catch (e) { refused = e.code; }\n\
         try { await agent('three'); } catch (e) { return {refused, limit: e.code, message: e.message}; }\n\
         return 'no limit';",
        LimitOverrides {
            max_agents: Some(2),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        status["outcome"]["result"],
        json!({
            "refused": "SCRIPT_VALIDATION_ERROR",
            "limit": "AGENT_LIMIT_EXCEEDED",
            "message": "the run reached its limit of 2 agent calls (maxAgents)",
        }),
        "{status}"
    );
}

#[tokio::test]
async fn entering_phases_without_end_fails_at_the_phase_ceiling() {
    let h = harness();
    let status = settled_status(
        &h,
        &format!("{LIVE_ONLY}for (let i = 0; ; i++) phase('phase ' + i);"),
        LimitOverrides::default(),
    )
    .await;
    assert_eq!(status["status"], "failed", "{status}");
    let outcome = status["outcome"].to_string();
    assert!(
        outcome.contains("the script entered more than 10000 phases in one run of it"),
        "{outcome}"
    );
}
