//! What a script can make the engine hold, through the engine's library API with the instant
//! runner: the call past `maxAgents` fails the run with the limit error however many calls
//! start at once, a script that enters phases without end fails at the per-generation
//! phase ceiling with a message naming it, and neither a message of megabytes thrown nor
//! 10,000 calls without a route make a refusal or a failure of more than a few KiB, nor
//! thousands of phases an admission answer of more than two warnings about them.

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

/// The most a refusal or a run's failure says, whatever the script threw or called.
const SAID_AT_MOST: usize = 20 << 10;

#[tokio::test]
async fn ten_thousand_calls_without_a_route_are_refused_in_a_few_lines() {
    let h = harness();
    let refused = h
        .start(
            "export const meta = { name: 'x', description: 'd', model: 'nowhere' };\n\
             for (let i = 0; i < 10000; i++) await agent('task ' + i, {label: 'task ' + i});",
        )
        .await
        .expect_err("no call has a route");
    let refused = refused.to_string();
    assert!(
        refused.len() < 2_048,
        "{} bytes: {refused:.300}",
        refused.len()
    );
    assert!(
        refused.starts_with(
            "missing routing: 10000 agent calls have no route: task 0@0, task 1@1, task 2@2, \
             task 3@3, task 4@4 and 9995 more (model spec \"nowhere\""
        ),
        "{refused}"
    );
}

#[tokio::test]
async fn a_thrown_message_of_megabytes_is_cut_in_the_refusal_and_in_the_run() {
    let h = harness();
    let throw = "const e = new Error('x'.repeat(5000000)); e.code = 'C'.repeat(100000); throw e;";
    let refused = h
        .start(&format!("{HEADER}{throw}"))
        .await
        .expect_err("the dry run throws");
    let refused = refused.to_string();
    assert!(refused.len() < SAID_AT_MOST, "{} bytes", refused.len());
    assert!(
        refused.contains("… (cut: the message had 5000000 bytes)"),
        "{refused:.300}"
    );
    // Thrown live only: the run fails, and its row, events and status keep the cut text.
    let status = settled_status(
        &h,
        &format!("{LIVE_ONLY}{throw}"),
        LimitOverrides::default(),
    )
    .await;
    assert_eq!(status["status"], "failed", "{status:.300}");
    let said = status.to_string();
    assert!(said.len() < 4 * SAID_AT_MOST, "{} bytes", said.len());
    assert!(
        said.contains("… (cut: the message had 5000000 bytes)"),
        "{said:.500}"
    );
}

#[tokio::test]
async fn thousands_of_phases_declared_and_entered_warn_in_two_lines() {
    let h = harness();
    let declared: Vec<String> = (0..20_000).map(|i| format!("{{title:'d{i}'}}")).collect();
    let script = format!(
        "export const meta = {{ name: 'x', description: 'd', model: 'codex', phases: [{}] }};\n\
         await agent('one', {{phase: 'd7'}});\n\
         for (let i = 0; i < 9000; i++) phase('u' + i);\n\
         return 1;",
        declared.join(",")
    );
    let admission = h.admit(&script, LimitOverrides::default()).await;
    assert_eq!(
        admission.size.as_ref().map(|size| size["phases"].clone()),
        Some(json!([{"title": "d7", "agents": 1}])),
        "the call's phase: phases the script only entered start no calls"
    );
    assert_eq!(
        admission.warnings,
        [
            r#"phases "u0", "u1", "u2", "u3", "u4" and 8995 more are not declared in meta.phases"#,
            r#"declared phases "d0", "d1", "d2", "d3", "d4" and 19994 more were not used by the dry run"#,
        ]
    );
}

#[tokio::test]
async fn ten_thousand_calls_each_in_a_phase_of_its_own_are_sized_in_twenty_lines() {
    let h = harness();
    let admission = h
        .admit(
            &format!(
                "{HEADER}for (let i = 0; i < 10000; i += 16) {{\n\
                 const batch = [];\n\
                 for (let j = i; j < i + 16 && j < 10000; j++) batch.push(() => agent('p' + j, {{phase: 'ph' + j}}));\n\
                 await parallel(batch);\n}}\nreturn 1;"
            ),
            LimitOverrides {
                max_agents: Some(10_000),
                ..Default::default()
            },
        )
        .await;
    let size = admission.size.expect("a size");
    assert_eq!(size["agents"], 10_000);
    assert_eq!(size["phases"].as_array().map(Vec::len), Some(20), "{size}");
    assert_eq!(
        size["phasesNotListed"],
        json!({"phases": 9_980, "agents": 9_980})
    );
    assert!(size.to_string().len() < 2_048, "{size}");
}

#[tokio::test]
async fn a_checkpoint_of_megabytes_is_refused_naming_the_limit() {
    let h = harness();
    let ask = "await checkpoint('Q'.repeat(5000000));";
    let refused = h
        .start(&format!("{HEADER}{ask}"))
        .await
        .expect_err("the dry run's checkpoint is refused");
    assert!(
        refused
            .to_string()
            .contains("checkpoint() question must be at most 16384 bytes, got 5000000"),
        "{refused}"
    );
    let status = settled_status(
        &h,
        &format!(
            "{LIVE_ONLY}await checkpoint('pick', {{kind: 'select', choices: ['c'.repeat(2000000)]}});"
        ),
        LimitOverrides::default(),
    )
    .await;
    assert_eq!(status["status"], "failed", "{status:.300}");
    let said = status.to_string();
    assert!(said.len() < SAID_AT_MOST, "{} bytes", said.len());
    assert!(
        said.contains("checkpoint() option choices[0] must be at most 256 bytes, got 2000000"),
        "{said:.600}"
    );
}
