//! `agentprism run/validate/status/resume/runs/stop` end to end: the real binary, the real
//! store on disk, and the scripted mock agent as a real subprocess.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::context::{TestContext, pids_in, prompts_in_log, wait_gone};

const HEADER: &str =
    "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\n";

fn count_runs(ctx: &TestContext) -> usize {
    let finished = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    finished.json().as_array().map(Vec::len).unwrap_or(0)
}

#[test]
fn run_prints_the_result_and_the_run_is_listed_then_removed() {
    let ctx = TestContext::new();
    let script = ctx.write("wf.js", &format!("{HEADER}const [a, b] = await parallel([() => agent('hello'), () => agent('world')]);\nlog('done', a);\nreturn {{a, b, n: args.n}};\n"));
    let finished = ctx.run(&["run", script.to_str().unwrap(), "--args", r#"{"n": 7}"#]);
    assert_eq!(finished.code(), 0, "stderr:\n{}", finished.stderr);
    assert_eq!(
        finished.json(),
        json!({"a": "ECHO: hello", "b": "ECHO: world", "n": 7})
    );
    let run_id = finished.run_id();
    let status = ctx.status(&run_id);
    assert_eq!(status["status"], "completed");
    assert_eq!(status["calls"].as_array().unwrap().len(), 2);
    assert_eq!(status["logTail"]["lines"], json!(["done ECHO: hello"]));
    let list = ctx.run(&["runs", "--json"]);
    assert!(list.stdout.contains(&run_id));
    let removed = ctx.run(&["runs", "rm", &run_id]);
    assert_eq!(removed.code(), 0, "{}", removed.stderr);
    assert!(
        script.exists(),
        "runs rm must never delete the caller's own script file"
    );
    let gone = ctx.run(&["status", &run_id]);
    assert_eq!(gone.code(), 2);
    assert!(
        gone.stderr
            .contains(&format!("No workflow run found for runId \"{run_id}\"")),
        "{}",
        gone.stderr
    );
}

#[test]
fn validate_is_zero_token_and_reports_the_dry_run() {
    let ctx = TestContext::new().with_mock_backend(json!({"MOCK_ACP_LOG": "LOG"}));
    let ctx = {
        let log = ctx.path("agent.log");
        ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}))
    };
    let script = ctx.write("wf.js", &format!("{HEADER}return await agent('x', {{schema: {{type: 'object', properties: {{k: {{type: 'string'}}}}, required: ['k']}}}});\n"));
    let finished = ctx.run(&["validate", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let report = finished.json();
    assert_eq!(report["valid"], true);
    assert_eq!(report["dryRunCalls"], 1);
    assert_eq!(report["size"]["agents"], 1);
    assert_eq!(report["size"]["checkpoints"], 0);
    assert_eq!(report["size"]["history"], Value::Null);
    assert_eq!(report["size"]["needsConfirmation"], false);
    assert_eq!(report["probes"][0]["probed"], true);
    assert!(
        prompts_in_log(&ctx, "agent.log").is_empty(),
        "validate must not prompt any agent"
    );
    assert_eq!(count_runs(&ctx), 0);
}

#[test]
fn bad_input_is_rejected_with_exit_2_and_no_run_record() {
    let ctx = TestContext::new();
    let big = ctx.write(
        "big.js",
        &format!("{HEADER}// {}\nreturn 1;\n", "x".repeat(1 << 20)),
    );
    let not_utf8 = ctx.path("bad.js");
    std::fs::write(&not_utf8, [HEADER.as_bytes(), b"return '\xff';\n"].concat()).unwrap();
    let not_literal = ctx.write(
        "meta.js",
        "export const meta = { name: 'x', description: makeIt() };\nreturn 1;\n",
    );
    let schema = ctx.write(
        "schema.js",
        "export const meta = { name: 'x', description: 'd', model: 'mock', inputSchema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } };\nreturn args.n;\n",
    );
    let unknown_backend = ctx.write("unknown.js", "export const meta = { name: 'x', description: 'd', model: 'nosuch/model' };\nreturn await agent('x');\n");
    let plain = ctx.write("plain.js", &format!("{HEADER}return await agent('x');\n"));
    // (arguments, expected message, one extra environment variable)
    type Case<'a> = (Vec<String>, &'a str, Option<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            vec!["run".into(), big.display().to_string()],
            "over the limit of 1048576 bytes",
            None,
        ),
        (
            vec!["run".into(), not_utf8.display().to_string()],
            "not valid UTF-8",
            None,
        ),
        (
            vec!["run".into(), not_literal.display().to_string()],
            "meta must be a literal",
            None,
        ),
        (
            vec![
                "run".into(),
                plain.display().to_string(),
                "--args".into(),
                "{n: 1}".into(),
            ],
            "--args must be strict JSON",
            None,
        ),
        (
            vec![
                "run".into(),
                schema.display().to_string(),
                "--args".into(),
                r#"{"n": "one"}"#.into(),
            ],
            "args do not match meta.inputSchema",
            None,
        ),
        (
            vec!["run".into(), unknown_backend.display().to_string()],
            "\"nosuch\", which is not registered",
            None,
        ),
        (
            vec!["run".into(), plain.display().to_string()],
            "AGENTPRISM_BACKENDS",
            Some(("AGENTPRISM_BACKENDS", "{not json")),
        ),
        (
            vec!["run".into(), plain.display().to_string()],
            "reserved",
            Some(("AGENTPRISM_BACKENDS", r#"{"claude": {"command": "x"}}"#)),
        ),
        (
            vec!["run".into(), plain.display().to_string()],
            "backend mock could not be used",
            Some((
                "AGENTPRISM_BACKENDS",
                r#"{"mock": {"command": "/nonexistent/agent-binary"}}"#,
            )),
        ),
        (
            vec!["run".into(), plain.display().to_string()],
            "backend mock could not be used",
            Some((
                "AGENTPRISM_BACKENDS",
                r#"{"mock": {"command": "sleep", "args": ["30"]}}"#,
            )),
        ),
    ];
    for (args, expected, env) in cases {
        let mut case = TestContext {
            dir: tempfile::tempdir().unwrap(),
            env: ctx.env.clone(),
        };
        case.env.insert(
            "AGENTPRISM_PERSISTENCE_ROOT".into(),
            ctx.state().display().to_string(),
        );
        case.env
            .insert("AGENTPRISM_ACP_INIT_TIMEOUT_MS".into(), "1500".into());
        std::fs::create_dir_all(case.project()).unwrap();
        if let Some((key, value)) = env {
            case.env.insert(key.into(), value.into());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let finished = case.run(&argv);
        assert_eq!(
            finished.code(),
            2,
            "{argv:?} should be rejected; stderr:\n{}",
            finished.stderr
        );
        assert!(
            finished.stderr.contains(expected),
            "{argv:?}: expected {expected:?} in:\n{}",
            finished.stderr
        );
        assert!(
            finished.stdout.is_empty(),
            "{argv:?} printed {}",
            finished.stdout
        );
    }
    assert_eq!(
        count_runs(&ctx),
        0,
        "no rejected input may leave a run record"
    );
}

#[test]
fn checkpoints_pause_with_exit_3_and_resume_with_a_reply() {
    let ctx = TestContext::new();
    let script = ctx.write("wf.js", &format!("{HEADER}const a = await agent('one');\nconst ok = await checkpoint('ship it?');\nreturn {{a, ok}};\n"));
    let paused = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    assert!(
        paused
            .stderr
            .contains(&format!("agentprism resume {run_id} --reply 1=true")),
        "{}",
        paused.stderr
    );
    let status = ctx.status(&run_id);
    assert_eq!(status["reason"], "checkpoint_required");
    let wrong = ctx.run(&["resume", &run_id, "--reply", "1=yes"]);
    assert_eq!(wrong.code(), 2);
    assert!(
        wrong.stderr.contains("must be true or false"),
        "{}",
        wrong.stderr
    );
    let done = ctx.run(&["resume", &run_id, "--reply", "1=true"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(done.json(), json!({"a": "ECHO: one", "ok": true}));
    let again = ctx.run(&["resume", &run_id]);
    assert_eq!(again.code(), 2, "a completed run cannot be resumed");
}

/// A paused `select` or `input` checkpoint is reported with its prompt and a reply of its
/// kind; a reply that is not a choice is refused naming them, and one of them resumes.
#[test]
fn select_and_input_checkpoints_suggest_a_reply_of_their_kind() {
    let ctx = TestContext::new();
    let script = ctx.write("wf.js", &format!("{HEADER}const pick = await checkpoint('which?', {{kind: 'select', choices: ['red', 'blue']}});\nconst name = await checkpoint('name?', {{kind: 'input'}});\nreturn {{pick, name}};\n"));
    let paused = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    for expected in [
        "checkpoint 0: which?".to_owned(),
        format!("agentprism resume {run_id} --reply 0='\"red\"'"),
    ] {
        assert!(
            paused.stderr.contains(&expected),
            "{expected}: {}",
            paused.stderr
        );
    }
    let wrong = ctx.run(&["resume", &run_id, "--reply", "0=\"green\""]);
    assert_eq!(wrong.code(), 2);
    assert!(
        wrong.stderr.contains(r#"must be one of ["red","blue"]"#),
        "{}",
        wrong.stderr
    );
    let input = ctx.run(&["resume", &run_id, "--reply", "0=\"blue\""]);
    assert_eq!(input.code(), 3, "{}", input.stderr);
    for expected in [
        "checkpoint 1: name?".to_owned(),
        format!("agentprism resume {run_id} --reply 1='\"your answer\"'"),
    ] {
        assert!(
            input.stderr.contains(&expected),
            "{expected}: {}",
            input.stderr
        );
    }
    let done = ctx.run(&["resume", &run_id, "--reply", "1=\"Ada\""]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(done.json(), json!({"pick": "blue", "name": "Ada"}));
}

#[test]
fn an_edited_call_runs_live_while_unchanged_calls_replay() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let text = format!(
        "{HEADER}const a = await agent('zero');\nconst b = await agent('one');\nawait checkpoint('continue?');\nconst c = await agent('two');\nreturn [a, b, c];\n"
    );
    let script = ctx.write("wf.js", &text);
    let paused = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    let stopped = ctx.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert_eq!(ctx.status(&run_id)["status"], "aborted");
    std::fs::write(
        &script,
        text.replace("agent('two')", "agent('two, edited')"),
    )
    .unwrap();
    let done = ctx.run(&["resume", &run_id, "--reply", "2=true"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(done.stderr.contains("revised script"), "{}", done.stderr);
    assert_eq!(
        done.json(),
        json!(["ECHO: zero", "ECHO: one", "ECHO: two, edited"])
    );
    assert_eq!(
        prompts_in_log(&ctx, "agent.log"),
        vec!["zero", "one", "two, edited"],
        "calls 0 and 1 must replay without prompting"
    );
    let status = ctx.status(&run_id);
    assert_eq!(status["scriptRevisions"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_killed_run_is_interrupted_and_resumes_with_completed_calls_replayed() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const out = [];\nfor (let i = 0; i < 20; i++) out.push(await agent('p' + i + '\\n@mock delay 40'));\nreturn out.length;\n"),
    );
    let running = ctx.spawn(&["run", script.to_str().unwrap()]);
    // Wait until some calls are journaled, then kill the run process outright.
    let run_id = {
        let started = std::time::Instant::now();
        loop {
            let listed = ctx.run(&["runs", "--all", "--json"]).json();
            if let Some(id) = listed
                .as_array()
                .and_then(|runs| runs.first())
                .and_then(|r| r["runId"].as_str())
            {
                let status = ctx.status(id);
                if status["calls"].as_array().is_some_and(|calls| {
                    calls.iter().filter(|c| c["status"].is_null()).count() >= 5
                }) {
                    break id.to_owned();
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the run never got going"
            );
        }
    };
    running.signal(Signal::SIGKILL);
    let killed = running.finish(Duration::from_secs(20));
    assert!(killed.status.code().is_none(), "killed by a signal");
    let status = ctx.status(&run_id);
    assert_eq!(status["status"], "paused", "{status:#}");
    assert_eq!(status["reason"], "interrupted");
    // The dead generation's summary comes from its stored calls: every one it settled.
    let summary = &status["summary"];
    assert_eq!(summary["generation"], 1, "{status:#}");
    assert_eq!(summary["total"], status["tokenUsage"], "{status:#}");
    let settled = status["truncation"]["calls"]["total"].as_u64().unwrap();
    assert_eq!(
        summary["calls"]["total"].as_u64(),
        Some(settled),
        "{status:#}"
    );
    assert_eq!(
        summary["usage"][0]["calls"].as_u64(),
        Some(settled),
        "{status:#}"
    );
    let completed_before: Vec<String> = prompts_in_log(&ctx, "agent.log");
    let done = ctx.run(&["resume", &run_id]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(done.json(), json!(20));
    let prompts = prompts_in_log(&ctx, "agent.log");
    for i in 0..20 {
        let text = format!("p{i}\n@mock delay 40");
        let times = prompts.iter().filter(|p| **p == text).count();
        assert!((1..=2).contains(&times), "call {i} prompted {times} times");
    }
    // At most the call in flight at the kill runs twice; every journaled one replays.
    assert!(
        prompts.len() <= 21,
        "{} prompts after {} before",
        prompts.len(),
        completed_before.len()
    );
}

#[test]
fn crashing_hanging_and_eof_ignoring_backends_leave_no_process_behind() {
    let ctx = TestContext::new();
    let pid_file = ctx.path("pids");
    let ctx = ctx
        .with_mock_backend(json!({"MOCK_ACP_PID_FILE": pid_file, "MOCK_ACP_SPAWN_CHILD": "1", "MOCK_ACP_EXIT_ON_EOF": "0"}))
        .set("AGENTPRISM_AGENT_TIMEOUT_MS", "700");
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const crashed = await agent('boom\\n@mock crash');\nconst hung = await agent('wait\\n@mock hang');\nconst fine = await agent('fine');\nreturn {{crashed, hung, fine}};\n"),
    );
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert_eq!(
        finished.json(),
        json!({"crashed": null, "hung": null, "fine": "ECHO: fine"})
    );
    let status = ctx.status(&finished.run_id());
    let codes: Vec<Value> = status["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["errorCode"].clone())
        .collect();
    assert_eq!(
        codes,
        vec![
            json!("AGENT_EXECUTION_ERROR"),
            json!("AGENT_TIMEOUT"),
            Value::Null
        ]
    );
    let pids = pids_in(&pid_file);
    assert!(
        pids.len() >= 4,
        "the probe and the agents wrote their pids: {pids:?}"
    );
    wait_gone(&pids);
}

#[test]
fn ctrl_c_leaves_the_run_paused_and_resumable_with_exit_130() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const a = await agent('slow\\n@mock hang');\nreturn a;\n"),
    );
    let running = ctx.spawn(&["run", script.to_str().unwrap()]);
    // The call is running once the agent has its prompt.
    let started = std::time::Instant::now();
    while prompts_in_log(&ctx, "agent.log").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    running.signal(Signal::SIGINT);
    let finished = running.finish(Duration::from_secs(30));
    assert_eq!(finished.code(), 130, "{}", finished.stderr);
    let run_id = finished.run_id();
    assert!(
        finished
            .stderr
            .contains(&format!("agentprism resume {run_id}")),
        "{}",
        finished.stderr
    );
    let status = ctx.status(&run_id);
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("paused"), Some("interrupted"))
    );
    assert_eq!(
        status["calls"][0]["errorCode"], "WORKFLOW_ABORTED",
        "{status:#}"
    );
}

/// The packages ship `agentprism completions <shell>`, and `--help` lists it.
#[test]
fn completions_are_printed_for_the_packaged_shells_only() {
    let ctx = TestContext::new();
    for (shell, marker) in [
        ("bash", "_agentprism()"),
        ("zsh", "#compdef agentprism"),
        ("fish", "complete -c agentprism"),
    ] {
        let finished = ctx.run(&["completions", shell]);
        assert_eq!(finished.code(), 0, "{shell}: {}", finished.stderr);
        assert!(
            finished.stdout.contains(marker),
            "{shell}: {}",
            finished.stdout
        );
        assert!(finished.stdout.contains("daemon"), "{shell}");
    }
    assert_eq!(ctx.run(&["completions", "powershell"]).code(), 2);
    let help = ctx.run(&["--help"]);
    assert!(help.stdout.contains("completions"), "{}", help.stdout);
}
