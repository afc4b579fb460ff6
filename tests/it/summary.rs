//! The run summary end to end: the real binary and store, the scripted mock agent. A run that
//! pauses at a checkpoint and is resumed says, in status, `runs` and `runs --json` and on
//! the foreground run's last line, what its last generation's calls did and what the whole
//! run spent.

use serde_json::{Value, json};

use crate::support::context::TestContext;

const HEADER: &str =
    "export const meta = { name: 'summed', description: 'a test workflow', model: 'mock' };\n";

/// Two live calls, one that fails once and is retried, one that fails for good (null), a
/// checkpoint, then one more call after the resume.
fn script(flag: &std::path::Path) -> String {
    format!(
        "{HEADER}const a = await agent('one');\n\
         const b = await agent('two\\n@mock once {} error -32603 flaky', {{retries: 1, retryDelayMs: 0}});\n\
         const c = await agent('three\\n@mock error -32603 kaput');\n\
         const ok = await checkpoint('go on?');\n\
         const d = await agent('four');\n\
         return {{a, b, c, ok, d}};\n",
        flag.display()
    )
}

/// The run's line in `runs --json`.
fn listed(ctx: &TestContext, run_id: &str) -> Value {
    let listed = ctx.run(&["runs", "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    listed
        .json()
        .as_array()
        .and_then(|runs| runs.iter().find(|run| run["runId"] == run_id).cloned())
        .unwrap_or_else(|| panic!("{run_id} is not listed: {}", listed.stdout))
}

/// `12 calls · 1.0k tok` as the CLI writes a summary (no cost: the mock reports none).
fn line(summary: &Value) -> String {
    let calls = summary["calls"]["total"].as_u64().unwrap();
    let tokens = summary["total"]["totalTokens"].as_u64().unwrap();
    let tokens = if tokens < 1_000 {
        tokens.to_string()
    } else if tokens < 10_000 {
        format!("{}.{}k", tokens / 1_000, tokens % 1_000 / 100)
    } else {
        format!("{}k", tokens / 1_000)
    };
    format!(
        "{calls} call{} · {tokens} tok",
        if calls == 1 { "" } else { "s" }
    )
}

#[test]
fn a_resumed_run_counts_its_last_generation_and_sums_every_generations_spend() {
    let ctx = TestContext::new();
    let file = ctx.write("wf.js", &script(&ctx.path("flaky-once")));
    let paused = ctx.run(&["run", file.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();

    let first = ctx.status(&run_id);
    assert_eq!(first["status"], "paused", "{first:#}");
    let summary = &first["summary"];
    assert_eq!(summary["generation"], 1, "{first:#}");
    assert_eq!(
        summary["calls"],
        json!({"total": 3, "live": 3, "replayed": 0, "failed": 1, "retried": 1})
    );
    let spent = first["tokenUsage"]["totalTokens"].as_u64().unwrap();
    assert!(spent > 0, "{first:#}");
    assert_eq!(summary["total"], first["tokenUsage"], "{first:#}");
    assert_eq!(summary["usage"].as_array().unwrap().len(), 1, "{first:#}");
    assert_eq!(summary["usage"][0]["backend"], "mock");
    assert_eq!(summary["usage"][0]["calls"], 3);
    assert!(summary["total"].get("costUsd").is_none(), "{first:#}");
    assert_eq!(listed(&ctx, &run_id)["summary"], *summary);
    let paused_line = format!("run {run_id} paused · {} · ", line(summary));
    assert!(
        paused.stderr.lines().any(|l| l.starts_with(&paused_line)),
        "{paused_line:?} in:\n{}",
        paused.stderr
    );

    let done = ctx.run(&["resume", &run_id, "--reply", "3=true"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let last = ctx.status(&run_id);
    assert_eq!(last["status"], "completed", "{last:#}");
    let summary = &last["summary"];
    assert_eq!(summary["generation"], 2, "{last:#}");
    // `a` and `b` replay; `c` failed, so it runs (and fails) again; `d` is new.
    assert_eq!(
        summary["calls"],
        json!({"total": 4, "live": 2, "replayed": 2, "failed": 1, "retried": 0})
    );
    let total = last["tokenUsage"]["totalTokens"].as_u64().unwrap();
    assert!(total > spent, "the second generation spent too: {last:#}");
    assert_eq!(summary["total"], last["tokenUsage"], "{last:#}");
    assert_eq!(
        summary["usage"][0]["calls"], 5,
        "3 live calls, then 2: {last:#}"
    );
    assert!(
        summary["durationMs"].as_u64().unwrap() >= first["summary"]["durationMs"].as_u64().unwrap()
    );
    let last_line = done.stderr.lines().last().unwrap_or_default();
    assert!(
        last_line.starts_with(&format!("run {run_id} completed · {} · ", line(summary))),
        "{}",
        done.stderr
    );

    let row = listed(&ctx, &run_id);
    assert_eq!(row["summary"], *summary);
    let text = ctx.run(&["runs"]);
    let shown = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&run_id))
        .unwrap_or_default();
    assert!(shown.contains(&line(summary)), "{}", text.stdout);
    let status_text = ctx.run(&["status", &run_id]);
    assert!(
        status_text
            .stdout
            .contains(&format!("summary: {} · ", line(summary)))
            && status_text
                .stdout
                .contains("(generation 2: 2 live, 2 replayed, 1 failed, 0 retried)"),
        "{}",
        status_text.stdout
    );
}

/// While a resumed generation runs, neither status nor `runs` shows the summary the previous
/// generation left (it no longer describes the run); the new one comes when it ends.
#[test]
fn a_run_executing_again_shows_no_summary_until_its_generation_ends() {
    let ctx = TestContext::new();
    let gate = ctx.path("gate");
    let file = ctx.write(
        "wf.js",
        &format!(
            "{HEADER}const a = await agent('one');\nconst ok = await checkpoint('go on?');\n\
             const b = await agent('two\\n@mock wait_file {}');\nreturn {{a, ok, b}};\n",
            gate.display()
        ),
    );
    let paused = ctx.run(&["run", file.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    assert_eq!(ctx.status(&run_id)["summary"]["generation"], 1);

    let resumed = ctx.spawn(&["resume", &run_id, "--reply", "1=true"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let running = loop {
        // The resume's process waits at the gate; another process sees the run running.
        let status = ctx.status(&run_id);
        if status["status"] == "running" && status["generation"] == 2 {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never resumed: {status:#}"
        );
    };
    assert!(running.get("summary").is_none(), "{running:#}");
    assert!(listed(&ctx, &run_id).get("summary").is_none());
    let text = ctx.run(&["runs"]);
    let shown = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&run_id))
        .unwrap_or_default();
    assert!(!shown.contains(" tok"), "{}", text.stdout);

    std::fs::write(&gate, "").unwrap();
    let done = resumed.finish(std::time::Duration::from_secs(60));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let summary = &ctx.status(&run_id)["summary"];
    assert_eq!(summary["generation"], 2, "{summary:#}");
    assert_eq!(
        summary["calls"],
        json!({"total": 2, "live": 1, "replayed": 1, "failed": 0, "retried": 0})
    );
}
