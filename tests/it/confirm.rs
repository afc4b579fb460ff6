//! A run's size before it starts: `validate` reports the agent calls per phase and the warning
//! above 25; earlier runs of the same script give a token estimate; a run above the
//! confirmation threshold (`AGENTPRISM_CONFIRM_AGENTS`, default 100) is refused off a terminal
//! with nothing stored, and starts with `--yes`, an explicit `--max-agents`/`maxAgents` at or
//! above its size, or the threshold turned off; on a pseudo-terminal it asks, and the answer
//! decides. Elicitation is driven by
//! `tests/e2e/prompts_client.mjs` (`prompts.rs`).

use serde_json::{Value, json};

use crate::support::context::TestContext;
use crate::workflow_tool::setup;

/// `args.n` agent calls, half in phase One and half in phase Two.
const MANY: &str = "export const meta = { name: 'many', description: 'n calls in two phases', model: 'MODEL',
  inputSchema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } };
phase('One');
const first = await parallel(Array.from({ length: Math.ceil(args.n / 2) }, (_, i) => () => agent(`a ${i}`, { label: `one:${i}` })));
phase('Two');
const second = await parallel(Array.from({ length: Math.floor(args.n / 2) }, (_, i) => () => agent(`b ${i}`, { label: `two:${i}` })));
return first.length + second.length;
";

fn many(ctx: &TestContext) -> String {
    ctx.write("many.js", &MANY.replace("MODEL", "mock"))
        .display()
        .to_string()
}

fn validate(ctx: &TestContext, script: &str, n: u32) -> Value {
    let finished = ctx.run(&["validate", script, "--args", &json!({"n": n}).to_string()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    finished.json()
}

fn run_count(ctx: &TestContext) -> usize {
    let listed = ctx.run(&["runs", "--json"]);
    listed.json().as_array().map_or(0, Vec::len)
}

#[test]
fn validate_reports_the_size_per_phase_and_warns_above_25() {
    let ctx = TestContext::new();
    let script = many(&ctx);
    let at_25 = validate(&ctx, &script, 25);
    assert_eq!(at_25["size"]["agents"], 25, "{at_25:#}");
    assert_eq!(
        at_25["size"]["phases"],
        json!([{"title": "One", "agents": 13}, {"title": "Two", "agents": 12}])
    );
    assert!(
        !at_25["warnings"]
            .to_string()
            .contains("agent calls (more than 25)")
    );
    let at_26 = validate(&ctx, &script, 26);
    assert!(
        at_26["warnings"]
            .to_string()
            .contains("this run will start 26 agent calls (more than 25)"),
        "{at_26:#}"
    );
    assert_eq!(at_26["size"]["needsConfirmation"], false);
    assert_eq!(
        validate(&ctx, &script, 101)["size"]["needsConfirmation"],
        true
    );
    assert_eq!(at_26["size"]["history"], Value::Null);
}

#[test]
fn earlier_runs_of_the_script_give_a_token_estimate() {
    let ctx = TestContext::new();
    let script = many(&ctx);
    for _ in 0..2 {
        let finished = ctx.run(&["run", &script, "--args", r#"{"n":3}"#]);
        assert_eq!(finished.code(), 0, "{}", finished.stderr);
    }
    let report = validate(&ctx, &script, 10);
    let size = &report["size"];
    assert_eq!(size["history"]["runs"], 2, "{report:#}");
    let average = size["history"]["avgTokensPerCall"].as_u64().unwrap();
    assert!(average > 0, "{report:#}");
    assert_eq!(size["estimatedTokens"], average * 10);
    let finished = ctx.run(&["run", &script, "--args", r#"{"n":2}"#]);
    assert!(
        finished
            .stderr
            .contains("size: 2 agent calls in 2 phases (≈"),
        "{}",
        finished.stderr
    );
}

#[test]
fn a_run_above_the_threshold_needs_a_confirmation_off_a_terminal() {
    let ctx = TestContext::new();
    let script = many(&ctx);
    let args = r#"{"n":101}"#;
    let refused = ctx.run(&["run", &script, "--args", args]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    for part in [
        "101 agent calls (One 51, Two 50)",
        "threshold of 100 (AGENTPRISM_CONFIRM_AGENTS)",
        "--yes or --max-agents 101",
    ] {
        assert!(refused.stderr.contains(part), "{part}: {}", refused.stderr);
    }
    assert_eq!(run_count(&ctx), 0, "a refusal stores nothing");

    let yes = ctx.run(&["run", &script, "--args", args, "--yes"]);
    assert_eq!(yes.code(), 0, "{}", yes.stderr);
    assert_eq!(yes.json(), json!(101));
    let explicit = ctx.run(&["run", &script, "--args", args, "--max-agents", "101"]);
    assert_eq!(explicit.code(), 0, "{}", explicit.stderr);
    // A maxAgents below the size caps the run at the threshold: it starts without a question.
    let capped = ctx.run(&["run", &script, "--args", args, "--max-agents", "100"]);
    assert_ne!(capped.code(), 2, "{}", capped.stderr);
    assert_eq!(run_count(&ctx), 3);

    let off = TestContext::new().set("AGENTPRISM_CONFIRM_AGENTS", "0");
    let script = many(&off);
    let unasked = off.run(&["run", &script, "--args", args]);
    assert_eq!(unasked.code(), 0, "{}", unasked.stderr);

    let low = TestContext::new().set("AGENTPRISM_CONFIRM_AGENTS", "5");
    let script = many(&low);
    let six = low.run(&["run", &script, "--args", r#"{"n":6}"#]);
    assert_eq!(
        six.code(),
        2,
        "a threshold below 25 applies too: {}",
        six.stderr
    );

    let bad = TestContext::new().set("AGENTPRISM_CONFIRM_AGENTS", "abc");
    let script = many(&bad);
    let refused = bad.run(&["run", &script, "--args", r#"{"n":1}"#]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("AGENTPRISM_CONFIRM_AGENTS"),
        "{}",
        refused.stderr
    );
}

#[tokio::test]
async fn the_workflow_tool_refuses_naming_max_agents_and_carries_the_size() {
    let s = setup();
    let script = MANY.replace("MODEL", "codex");
    let refused = s
        .call(json!({"action": "run", "projectDir": s.h.project, "script": script, "args": {"n": 101}}))
        .await;
    assert_eq!(refused["isError"], true, "{refused:#}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("confirm with maxAgents: 101"), "{text}");
    let listed = s.h.engine.runs().list_runs(None, 10).await.unwrap();
    assert!(listed.is_empty(), "a refusal stores nothing: {listed:?}");

    let admitted = s
        .call(
            json!({"action": "run", "projectDir": s.h.project, "script": script,
                     "args": {"n": 101}, "maxAgents": 101}),
        )
        .await;
    assert_eq!(admitted["isError"], Value::Null, "{admitted:#}");
    let size = &admitted["structuredContent"]["size"];
    assert_eq!(size["agents"], 101, "{admitted:#}");
    assert_eq!(size["phases"][0], json!({"title": "One", "agents": 51}));
    let text = admitted["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("It starts 101 agent calls in 2 phases"),
        "{text}"
    );
}

/// `agentprism run` with stdin and stderr on a pseudo-terminal: it asks, and `answer` is typed.
fn run_on_a_terminal(ctx: &TestContext, script: &str, answer: &str) -> (i32, String, String) {
    use std::io::{Read as _, Write as _};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = std::fs::File::from(pty.slave);
    let mut command = ctx.command(&["run", script, "--args", r#"{"n":101}"#]);
    command
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .stdout(Stdio::piped());
    let mut child = command.spawn().expect("spawn agentprism");
    drop(command);
    let mut master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        // Ends with EIO once the child and every copy of the terminal's other side are gone.
        while let Ok(read) = reader.read(&mut buffer) {
            if read == 0 || sender.send(buffer[..read].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains("[y/N]") {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = receiver
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no question on the terminal: {seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    master.write_all(format!("{answer}\n").as_bytes()).unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    while let Ok(chunk) = receiver.recv_timeout(Duration::from_millis(200)) {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    (code, stdout, seen)
}

#[test]
fn on_a_terminal_the_run_asks_and_the_answer_decides() {
    let ctx = TestContext::new();
    let script = many(&ctx);
    let (code, _, terminal) = run_on_a_terminal(&ctx, &script, "n");
    assert_eq!(code, 2, "{terminal}");
    assert!(
        terminal.contains("(One 51, Two 50)") && terminal.contains("Start 101 agent calls? [y/N]"),
        "{terminal}"
    );
    assert_eq!(run_count(&ctx), 0, "a declined run stores nothing");

    let (code, stdout, terminal) = run_on_a_terminal(&ctx, &script, "y");
    assert_eq!(code, 0, "{terminal}");
    assert_eq!(stdout.trim(), "101", "{terminal}");
    assert_eq!(run_count(&ctx), 1);
}
