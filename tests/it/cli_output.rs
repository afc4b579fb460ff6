//! What the command line prints, and that printing never ends it badly: a closed stdout,
//! probe limits, failed calls' messages, signal hints, and user-facing wording.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use crate::support::context::{DEADLINE, TestContext, finish_child, prompts_in_log};

const HEADER: &str =
    "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\n";

fn count_runs(ctx: &TestContext) -> usize {
    let listed = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    listed.json().as_array().map(Vec::len).unwrap_or(0)
}

/// Runs `agentprism args` with stdout a pipe whose reader is already gone, so every write
/// to it fails with EPIPE (`agentprism status <id> | head -0`).
fn run_into_closed_pipe(ctx: &TestContext, args: &[&str]) -> crate::support::context::Finished {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let (err_reader, err_writer) = std::io::pipe().expect("pipe");
    let mut child = ctx
        .command(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(err_writer)
        .spawn()
        .expect("spawn agentprism");
    // `finish_child` reads both streams; give it a stdout that is at EOF at once.
    let (empty_reader, empty_writer) = std::io::pipe().expect("pipe");
    drop(empty_writer);
    child.stdout = Some(std::process::ChildStdout::from(std::os::fd::OwnedFd::from(
        empty_reader,
    )));
    child.stderr = Some(std::process::ChildStderr::from(std::os::fd::OwnedFd::from(
        err_reader,
    )));
    finish_child(child, DEADLINE)
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}log('hello');\nreturn {{big: 'x'.repeat(100000)}};\n"),
    );
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let run_id = finished.run_id();
    let script_path = script.to_str().unwrap();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["status", &run_id], 0),
        (vec!["status", &run_id, "--json"], 0),
        (vec!["result", &run_id], 0),
        (vec!["runs", "--all"], 0),
        (vec!["runs", "--all", "--json"], 0),
        (vec!["run", script_path], 0),
        (vec!["validate", script_path, "--no-probe"], 0),
        (vec!["completions", "bash"], 0),
        (vec!["daemon", "status"], 3),
    ];
    for (args, expected) in cases {
        let finished = run_into_closed_pipe(&ctx, &args);
        assert_eq!(
            finished.code(),
            expected,
            "{args:?} into a closed pipe; stderr:\n{}",
            finished.stderr
        );
        assert!(
            !finished.stderr.contains("panicked") && !finished.stderr.contains("Broken pipe"),
            "{args:?} complained about the closed pipe:\n{}",
            finished.stderr
        );
    }
}

/// A foreground `daemon run` prints its URL to a closed stdout and still serves, then exits
/// 0 on its idle timeout; `agentprism-workflow --version` into a closed pipe exits 0 too.
#[test]
fn a_foreground_daemon_and_the_shim_survive_a_closed_stdout() {
    let ctx = TestContext::new()
        .set("AGENTPRISM_DAEMON_PORT", "0")
        .set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "300")
        .set("AGENTPRISM_DAEMON_TICK_MS", "50");
    let finished = run_into_closed_pipe(&ctx, &["daemon", "run"]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("idle") && !finished.stderr.contains("panicked"),
        "{}",
        finished.stderr
    );
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let shim = std::process::Command::new(env!("CARGO_BIN_EXE_agentprism-workflow"))
        .arg("--version")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run the shim");
    assert!(shim.status.success(), "{shim:?}");
}

/// A backend whose `session/new` outlasts the probe limit rejects the run (exit 2), naming
/// the backend and the limit; nothing is stored.
#[test]
fn a_probe_slower_than_the_probe_limit_rejects_the_run() {
    let ctx = TestContext::new()
        .with_mock_backend(json!({"MOCK_ACP_SESSION_DELAY_MS": "5000"}))
        .set("AGENTPRISM_PROBE_TIMEOUT_MS", "300");
    let script = ctx.write("wf.js", &format!("{HEADER}return await agent('x');\n"));
    let started = std::time::Instant::now();
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("probe of backend mock")
            && finished.stderr.contains("300 ms")
            && finished.stderr.contains("AGENTPRISM_PROBE_TIMEOUT_MS"),
        "{}",
        finished.stderr
    );
    assert!(finished.stdout.is_empty(), "{}", finished.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the rejection must not wait for the slow probe"
    );
    assert_eq!(count_runs(&ctx), 0, "a rejected run leaves no record");
    // A probe that answers within the limit admits the run as before.
    let ctx = ctx
        .with_mock_backend(json!({"MOCK_ACP_SESSION_DELAY_MS": "50"}))
        .set("AGENTPRISM_PROBE_TIMEOUT_MS", "20000");
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
}

/// A failed call's message is printed, not only its code, by run and status, and stderr
/// says how many agent calls failed.
#[test]
fn failed_calls_are_reported_with_their_messages() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const a = await agent('x\\n@mock error -32603 kaput');\nconst b = await agent('fine');\nreturn [a, b];\n"),
    );
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    for needle in [
        "failed: AGENT_EXECUTION_ERROR: backend mock: session/prompt failed: kaput",
        "1 of 2 agent calls failed:",
    ] {
        assert!(
            finished.stderr.contains(needle),
            "{needle:?} in:\n{}",
            finished.stderr
        );
    }
    let run_id = finished.run_id();
    let status = ctx.run(&["status", &run_id]);
    assert_eq!(status.code(), 0, "{}", status.stderr);
    assert!(
        status
            .stdout
            .contains("AGENT_EXECUTION_ERROR: backend mock: session/prompt failed: kaput"),
        "{}",
        status.stdout
    );
    assert!(
        status.stderr.contains("1 of 2 agent calls failed:"),
        "{}",
        status.stderr
    );
    let document = ctx.status(&run_id);
    assert!(
        document["calls"][0]["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("kaput")),
        "{document:#}"
    );
}

/// A failed attempt that is tried again prints `retry N/M`, and status counts the attempts.
#[test]
fn retried_attempts_are_printed_and_counted() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        &format!(
            "{HEADER}const a = await agent('x\\n@mock error -32603 kaput', \
             {{label: 'flaky', retries: 2, retryDelayMs: 100}});\n\
             return [a, await agent('fine')];\n"
        ),
    );
    let started = std::time::Instant::now();
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(started.elapsed() >= Duration::from_millis(200));
    for needle in [
        "flaky: retry 2/3: AGENT_EXECUTION_ERROR: backend mock: session/prompt failed: kaput",
        "(waiting 0.1s)",
        "flaky: retry 3/3: AGENT_EXECUTION_ERROR",
    ] {
        assert!(
            finished.stderr.contains(needle),
            "{needle:?} in:\n{}",
            finished.stderr
        );
    }
    let run_id = finished.run_id();
    let document = ctx.status(&run_id);
    assert_eq!(document["calls"][0]["attempts"], 3, "{document:#}");
    let status = ctx.run(&["status", &run_id]);
    assert!(status.stdout.contains("(3 attempts)"), "{}", status.stdout);
}

/// SIGTERM and SIGHUP pause a foreground run like Ctrl-C, print how to resume it, and exit
/// with 128 + the signal's number.
#[test]
fn sigterm_and_sighup_pause_the_run_and_print_the_resume_hint() {
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGHUP, 129)] {
        let ctx = TestContext::new();
        let log = ctx.path("agent.log");
        let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
        let script = ctx.write(
            "wf.js",
            &format!("{HEADER}return await agent('slow\\n@mock hang');\n"),
        );
        let running = ctx.spawn(&["run", script.to_str().unwrap()]);
        let started = std::time::Instant::now();
        while prompts_in_log(&ctx, "agent.log").is_empty() {
            assert!(started.elapsed() < DEADLINE, "the call never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        running.signal(signal);
        let finished = running.finish(DEADLINE);
        assert_eq!(finished.code(), code, "{signal}: {}", finished.stderr);
        let run_id = finished.run_id();
        assert!(
            finished
                .stderr
                .contains(&format!("resume it with `agentprism resume {run_id}`")),
            "{signal}: {}",
            finished.stderr
        );
        let status = ctx.status(&run_id);
        assert_eq!(
            (status["status"].as_str(), status["reason"].as_str()),
            (Some("paused"), Some("interrupted")),
            "{signal}"
        );
    }
}

/// Messages a CLI user sees name CLI commands, give a position once, and never an internal
/// name of the engine.
#[test]
fn cli_messages_use_cli_words_and_no_internal_names() {
    let ctx = TestContext::new();
    let cases = [
        (
            "new Date();\nreturn 1;\n",
            "`new Date()` without arguments is unavailable in workflow scripts (runs must replay deterministically) at line 2, column 1\n",
        ),
        (
            "const x = 'a\0b';\nreturn x;\n",
            "the script contains a NUL character (U+0000) at line 2, column 13",
        ),
        (
            "throw new Error(Date.name + ' ' + String(Date));\n",
            "SCRIPT_ERROR: Date function Date()",
        ),
    ];
    for (body, expected) in cases {
        let script = ctx.write("wf.js", &format!("{HEADER}{body}"));
        let finished = ctx.run(&["run", script.to_str().unwrap()]);
        assert_eq!(finished.code(), 2, "{body:?}: {}", finished.stderr);
        assert!(
            finished.stderr.contains(expected),
            "{body:?}: expected {expected:?} in:\n{}",
            finished.stderr
        );
        for internal in ["SafeDate", "internal null bytes", "(line "] {
            assert!(
                !finished.stderr.contains(internal),
                "{body:?}: {internal:?} in:\n{}",
                finished.stderr
            );
        }
    }
    // A run waiting for backend approval is answered with the CLI's own command.
    let script = ctx.write(
        "setup.js",
        "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');\n",
    );
    let pending = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(pending.code(), 3, "{}", pending.stderr);
    let run_id = pending.run_id();
    let resumed = ctx.run(&["resume", &run_id]);
    assert_eq!(resumed.code(), 2, "{}", resumed.stderr);
    assert!(
        resumed
            .stderr
            .contains(&format!("`agentprism setup {run_id} --approve`")),
        "{}",
        resumed.stderr
    );
    assert!(
        !resumed.stderr.contains("setup-response"),
        "{}",
        resumed.stderr
    );
}

/// `agentprism status` of a run a daemon executes shows the daemon's live calls, which only
/// that process knows (they are not in the store until they settle).
#[test]
fn status_of_a_daemon_owned_run_shows_its_live_calls() {
    let world = crate::shim::World::new();
    let mut shim = world.shim();
    shim.initialize();
    let script = format!(
        "{HEADER}const a = await agent('slow\\n@mock hang', {{label: 'waiter'}});\nreturn a;\n"
    );
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": script}),
    );
    let run_id = crate::shim::run_id_of(&ack);
    let started = std::time::Instant::now();
    let document = loop {
        let document = world.context.status(&run_id);
        if document["calls"]
            .as_array()
            .is_some_and(|calls| !calls.is_empty())
        {
            break document;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no live call shown: {document:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(document["status"], "running", "{document:#}");
    assert_eq!(document["calls"][0]["label"], "waiter", "{document:#}");
    assert!(
        matches!(
            document["calls"][0]["status"].as_str(),
            Some("running" | "queued")
        ),
        "{document:#}"
    );
    let text = world.context.run(&["status", &run_id]);
    assert!(
        text.stdout
            .lines()
            .any(|line| line.contains("waiter") && line.contains("running")),
        "{}",
        text.stdout
    );
    let stopped = world.context.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
}
