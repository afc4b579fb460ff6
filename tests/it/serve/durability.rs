//! `--state-dir`: a run outlives a `kill -9` of its server. A new process over the same state
//! folder hands the run to the first caller who names its id, resumes it under the same id,
//! and the mock agent's log shows that the call completed before the kill was not prompted
//! again.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::{Value, json};

use super::{Served, copy_folder, extra_fixtures, made_up_id, wait_until};
use crate::support::context::{TestContext, prompts_in_log};

/// How many prompts the mock agents received for `title`'s step (its gate path is unique).
fn prompted(ctx: &TestContext, gates: &Path, title: &str) -> usize {
    let gate = gates.join(title).display().to_string();
    prompts_in_log(ctx, "acp.log")
        .iter()
        .filter(|prompt| prompt.contains(&gate))
        .count()
}

#[test]
fn a_run_killed_mid_way_is_reclaimed_and_resumed_by_a_new_process_without_prompting_done_calls() {
    let ctx = TestContext::new();
    let log = ctx.path("acp.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let folder = copy_folder(&ctx, &extra_fixtures("durable"), "workflows");
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let state = ctx.path("serve-state");
    let state_dir = ["--state-dir", state.to_str().unwrap()];

    let mut first = Served::start(&ctx, &folder, &state_dir);
    let starter = first.session(&[]);
    let run_id = starter.start("steps", json!({"gates": gates}));
    wait_until("the Gather step's prompt", || {
        prompted(&ctx, &gates, "Gather") == 1
    });
    std::fs::write(gates.join("Gather"), "").unwrap();
    // The next prompt goes out only after the first call settled (and was journaled).
    wait_until("the Analyze step's prompt", || {
        prompted(&ctx, &gates, "Analyze") == 1
    });
    let live = starter.status(&run_id);
    assert_eq!(live["state"], "working", "{live}");
    assert_eq!(live["step"], "Analyze", "{live}");
    assert_eq!(live["stepIndex"], 2, "{live}");
    assert_eq!(live["stepTotal"], 3, "{live}");

    let killed = first.kill();
    assert_eq!(killed.status.signal(), Some(9), "{}", killed.stderr);
    assert!(
        std::fs::metadata(&state).unwrap().is_dir(),
        "the state folder is kept"
    );

    let second = Served::start(&ctx, &folder, &state_dir);
    let claimer = second.session(&[]);
    let late = second.session(&[]);
    let interrupted = claimer.status(&run_id);
    assert!(
        interrupted["state"] == "canceled" || interrupted["state"] == "failed",
        "an interrupted run is stopped or failed: {interrupted}"
    );
    assert_eq!(interrupted["resumable"], true, "{interrupted}");
    assert_eq!(interrupted["runId"], run_id.as_str());
    assert_eq!(interrupted["name"], "steps");
    // What is durable: the phase Gather's settled call was journaled with (the Analyze phase
    // event was still buffered for the next call's write when the process died).
    assert_eq!(interrupted["reached"][0], "Gather", "{interrupted}");
    assert_eq!(interrupted["stepTotal"], 3, "{interrupted}");

    // The first caller to name the id has it now: another session of the new process sees
    // exactly what an unknown id gets.
    let fake = made_up_id(&run_id);
    for method in ["run/status", "run/resume", "run/logs"] {
        let of_real = late.send(method, json!({"runId": run_id})).normalised();
        let of_fake = late.send(method, json!({"runId": fake})).normalised();
        assert_eq!(of_real, of_fake, "{method} after the hand-over");
        let message: Value = serde_json::from_str(&of_real).unwrap();
        assert_eq!(message["error"]["message"], "unknown runId", "{method}");
    }
    assert_eq!(late.method("run/list", json!({}))["runs"], json!([]));
    let listed = claimer.method("run/list", json!({}));
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str(), "{listed}");

    let resumed = claimer.method("run/resume", json!({"runId": run_id}));
    assert_eq!(resumed["runId"], run_id.as_str(), "the same id: {resumed}");
    assert_eq!(resumed["generation"], 2, "{resumed}");
    std::fs::write(gates.join("Analyze"), "").unwrap();
    std::fs::write(gates.join("Publish"), "").unwrap();
    let done = claimer.wait_state(&run_id, "completed");
    assert_eq!(
        done["result"],
        json!({"steps": ["ECHO: Gather", "ECHO: Analyze", "ECHO: Publish"]}),
        "{done}"
    );
    assert_eq!(
        prompted(&ctx, &gates, "Gather"),
        1,
        "the call completed before the kill is replayed, not prompted again"
    );
    assert_eq!(
        prompted(&ctx, &gates, "Analyze"),
        2,
        "the call the kill interrupted is prompted again"
    );
    assert_eq!(prompted(&ctx, &gates, "Publish"), 1);
    let logs = claimer.method("run/logs", json!({"runId": run_id}));
    assert_eq!(logs["lines"], json!(["published after 3 steps"]), "{logs}");
    // Still the claimer's after it finished, and still nobody else's.
    assert_eq!(
        late.send("run/status", json!({"runId": run_id}))
            .normalised(),
        late.send("run/status", json!({"runId": fake})).normalised()
    );
    let stopped = second.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}

#[test]
fn without_a_state_dir_a_new_process_knows_no_run_of_the_last_one() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &super::fixtures(), "workflows");
    let first = Served::start(&ctx, &folder, &[]);
    let run_id = first
        .session(&[])
        .start("approval", json!({"request": "forget me"}));
    let stopped = first.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);

    let second = Served::start(&ctx, &folder, &[]);
    let caller = second.session(&[]);
    let answer = caller.send("run/status", json!({"runId": run_id}));
    assert_eq!(
        answer.json()["error"]["message"],
        "unknown runId",
        "{:?}",
        answer.reply
    );
}
