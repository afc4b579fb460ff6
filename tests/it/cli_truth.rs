//! The command line says what is true: `--help` and the completion scripts list the public
//! commands and nothing internal, every argument explains itself, `runs` says where it looked
//! when it lists nothing and gives ISO 8601 times, `pause` and `config` reach the same engine
//! code as the `workflow` tool's actions, a run whose every agent call failed does not exit
//! 0, `validate` tells a script's verdicts from usage errors, and engine rejections name the
//! flag of the field they are about.

use clap::CommandFactory;
use serde_json::json;

use crate::shim::{World, eventually, run_id_of};
use crate::support::context::{TestContext, prompts_in_log};

const HEADER: &str =
    "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\n";

/// `completions` is a public command and listed as one; the internal `agent-reaper` command
/// and `daemon run --log-file` are in neither `--help` nor any completion script.
#[test]
fn help_and_completions_list_public_commands_only() {
    let ctx = TestContext::new();
    let help = ctx.run(&["--help"]);
    assert_eq!(help.code(), 0, "{}", help.stderr);
    for public in ["completions", "pause", "config"] {
        assert!(help.stdout.contains(public), "{public}: {}", help.stdout);
    }
    assert!(!help.stdout.contains("reaper"), "{}", help.stdout);
    let daemon_run = ctx.run(&["daemon", "run", "--help"]);
    assert!(
        !daemon_run.stdout.contains("log-file"),
        "{}",
        daemon_run.stdout
    );
    for shell in ["bash", "zsh", "fish"] {
        let script = ctx.run(&["completions", shell]);
        assert_eq!(script.code(), 0, "{shell}: {}", script.stderr);
        for internal in ["reaper", "log-file", "--owner"] {
            assert!(
                !script.stdout.contains(internal),
                "{shell} completion offers {internal:?}"
            );
        }
        for public in ["pause", "config", "completions", "force-owner"] {
            assert!(
                script.stdout.contains(public),
                "{shell} completion lacks {public:?}"
            );
        }
    }
}

/// Every command, subcommand, flag and positional argument a person can see says what it
/// is for (`--json`, `--all`, `-f` and `<RUN_ID>` included).
#[test]
fn every_visible_command_and_argument_has_help_text() {
    fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
            if arg
                .get_help()
                .is_none_or(|help| help.to_string().trim().is_empty())
            {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            let sub_path = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() {
                missing.push(sub_path.clone());
            }
            walk(sub, &sub_path, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&agentprism::cli::Cli::command(), "agentprism", &mut missing);
    assert!(missing.is_empty(), "no help text: {missing:#?}");
}

/// `runs` that lists nothing says on stderr which project it looked at and how to see
/// others; `--all` together with `--project-dir` is refused rather than one of them ignored.
#[test]
fn runs_with_nothing_to_list_names_all_and_project_dir() {
    let ctx = TestContext::new();
    let empty = ctx.run(&["runs"]);
    assert_eq!(empty.code(), 0, "{}", empty.stderr);
    assert!(empty.stdout.is_empty(), "{}", empty.stdout);
    for needle in [
        "no runs of project",
        "--all",
        "--project-dir",
        "nor of any other",
    ] {
        assert!(
            empty.stderr.contains(needle),
            "{needle:?}: {}",
            empty.stderr
        );
    }
    let other = ctx.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let script = ctx.write("wf.js", &format!("{HEADER}return 1;\n"));
    let ran = ctx.run(&[
        "run",
        script.to_str().unwrap(),
        "--project-dir",
        other.to_str().unwrap(),
    ]);
    assert_eq!(ran.code(), 0, "{}", ran.stderr);
    let here = ctx.run(&["runs"]);
    assert_eq!(here.code(), 0, "{}", here.stderr);
    assert!(here.stdout.is_empty(), "{}", here.stdout);
    for needle in [
        "other projects have runs",
        "agentprism runs --all",
        "--project-dir",
    ] {
        assert!(here.stderr.contains(needle), "{needle:?}: {}", here.stderr);
    }
    let json = ctx.run(&["runs", "--json"]);
    assert_eq!(json.json(), json!([]));
    assert!(json.stderr.contains("--all"), "{}", json.stderr);
    let all = ctx.run(&["runs", "--all"]);
    assert!(all.stdout.contains(&ran.run_id()), "{}", all.stdout);
    assert!(all.stderr.is_empty(), "{}", all.stderr);
    let both = ctx.run(&["runs", "--all", "--project-dir", other.to_str().unwrap()]);
    assert_eq!(both.code(), 2, "{}", both.stderr);
}

/// `runs --json` gives each time in ISO 8601, the same text `status` gives.
#[test]
fn runs_json_times_are_iso_8601_like_status() {
    let ctx = TestContext::new();
    let script = ctx.write("wf.js", &format!("{HEADER}return 1;\n"));
    let ran = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(ran.code(), 0, "{}", ran.stderr);
    let run_id = ran.run_id();
    let status = ctx.status(&run_id);
    let listed = ctx.run(&["runs", "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    let row = listed.json()[0].clone();
    assert_eq!(row["runId"], run_id.as_str(), "{row:#}");
    for field in ["startedAt", "updatedAt"] {
        let time = row[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field}: {row:#}"));
        humantime::parse_rfc3339(time).unwrap_or_else(|e| panic!("{field} {time:?}: {e}"));
        assert_eq!(row[field], status[field], "{field}");
    }
    assert_eq!(row["status"], "completed");
    assert_eq!(row["hasResult"], true);
}

/// `pause` asks the engine's pause: a run already paused answers 0, a run that has ended or
/// waits for its setup answer has nothing to pause (2).
#[test]
fn pause_answers_for_paused_ended_and_pending_runs() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const ok = await checkpoint('go?');\nreturn ok;\n"),
    );
    let waiting = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(waiting.code(), 3, "{}", waiting.stderr);
    let run_id = waiting.run_id();
    let paused = ctx.run(&["pause", &run_id]);
    assert_eq!(paused.code(), 0, "{}", paused.stderr);
    assert!(
        paused.stderr.contains(&format!(
            "run {run_id} was already paused; continue it with `agentprism resume {run_id}`"
        )),
        "{}",
        paused.stderr
    );
    let document = ctx.run(&["pause", &run_id, "--json"]).json();
    assert_eq!(
        (
            &document["paused"],
            &document["pauseRequested"],
            &document["status"]
        ),
        (&json!(true), &json!(false), &json!("paused")),
        "{document:#}"
    );
    let done = ctx.run(&["resume", &run_id, "--reply", "0=true"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let ended = ctx.run(&["pause", &run_id]);
    assert_eq!(ended.code(), 2, "{}", ended.stderr);
    assert!(
        ended
            .stderr
            .contains("is completed: nothing to pause, it has ended"),
        "{}",
        ended.stderr
    );
    assert!(ended.stdout.is_empty(), "{}", ended.stdout);
    let setup = ctx.write(
        "setup.js",
        "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');\n",
    );
    let pending = ctx.run(&["run", setup.to_str().unwrap()]);
    assert_eq!(pending.code(), 3, "{}", pending.stderr);
    let refused = ctx.run(&["pause", &pending.run_id()]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("agentprism setup"),
        "{}",
        refused.stderr
    );
    let unknown = ctx.run(&["pause", "nosuch-run1"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.stderr);
}

/// A run the daemon executes is paused there: while its agent call runs the pause is only
/// requested (1); once the call finishes the run is paused, and `pause` says so (0).
#[test]
fn pause_of_a_daemon_run_is_requested_then_holds() {
    let world = World::with(|context| {
        let log = context.path("agent.log");
        context.with_mock_backend(json!({"MOCK_ACP_LOG": log}))
    });
    let release = world.context.path("release");
    let mut shim = world.shim();
    shim.initialize();
    let script = format!(
        "{HEADER}const a = await agent('first\\n@mock wait_file {}');\nconst b = await agent('second');\nreturn [a, b];\n",
        release.display()
    );
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": script}),
    );
    let run_id = run_id_of(&ack);
    eventually("the first call reaches the agent", || {
        !prompts_in_log(&world.context, "agent.log").is_empty()
    });
    let requested = world.context.run(&["pause", &run_id]);
    assert_eq!(requested.code(), 1, "{}", requested.stderr);
    assert!(
        requested.stderr.contains("pause requested"),
        "{}",
        requested.stderr
    );
    std::fs::write(&release, "").unwrap();
    eventually("the run pauses", || {
        world.context.status(&run_id)["status"] == "paused"
    });
    assert_eq!(world.context.status(&run_id)["reason"], "requested");
    let held = world.context.run(&["pause", &run_id]);
    assert_eq!(held.code(), 0, "{}", held.stderr);
    assert!(
        held.stderr.contains("was already paused"),
        "{}",
        held.stderr
    );
    let prompts = prompts_in_log(&world.context, "agent.log");
    assert!(
        !prompts.iter().any(|prompt| prompt.contains("second")),
        "a paused run started its next call: {prompts:?}"
    );
}

/// A run that completed although every agent call it made failed exits 1, for `run` and for
/// `resume`, with the failed calls and a line saying why on stderr.
#[test]
fn a_run_whose_every_agent_call_failed_exits_1() {
    let ctx = TestContext::new();
    let failing = "const a = await agent('x\\n@mock error -32603 kaput');";
    let script = ctx.write("wf.js", &format!("{HEADER}{failing}\nreturn a;\n"));
    let ran = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(ran.code(), 1, "{}", ran.stderr);
    let run_id = ran.run_id();
    for needle in [
        "1 of 1 agent calls failed:",
        "kaput",
        &format!("run {run_id} completed, but its only agent call failed: exit 1"),
    ] {
        assert!(ran.stderr.contains(needle), "{needle:?}: {}", ran.stderr);
    }
    assert_eq!(ctx.status(&run_id)["status"], "completed");
    let two = ctx.write(
        "two.js",
        &format!("{HEADER}{failing}\nconst ok = await checkpoint('go on?');\nconst b = await agent('y\\n@mock error -32603 again');\nreturn [a, ok, b];\n"),
    );
    let waiting = ctx.run(&["run", two.to_str().unwrap()]);
    assert_eq!(waiting.code(), 3, "{}", waiting.stderr);
    let run_id = waiting.run_id();
    let resumed = ctx.run(&["resume", &run_id, "--reply", "1=true"]);
    assert_eq!(resumed.code(), 1, "{}", resumed.stderr);
    assert!(
        resumed.stderr.contains(&format!(
            "run {run_id} completed, but all 2 of its agent calls failed: exit 1"
        )),
        "{}",
        resumed.stderr
    );
    // One call that succeeds is enough for a completed run to exit 0.
    let mixed = ctx.write(
        "mixed.js",
        &format!("{HEADER}{failing}\nconst b = await agent('fine');\nreturn [a, b];\n"),
    );
    let finished = ctx.run(&["run", mixed.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
}

/// `validate` exits as the TypeScript product's: 1 a parse (static) failure, 2 a dry-run or
/// routing failure, 3 a usage error or a script it could not read, 0 valid.
#[test]
fn validate_tells_parse_dry_run_and_usage_failures_apart() {
    let ctx = TestContext::new();
    let script = |name: &str, body: &str| ctx.write(name, body).display().to_string();
    let syntax = script("syntax.js", &format!("{HEADER}return (;\n"));
    let not_literal = script(
        "meta.js",
        "export const meta = { name: 'x', description: makeIt() };\nreturn 1;\n",
    );
    let throws = script("throws.js", &format!("{HEADER}throw new Error('boom');\n"));
    let unrouted = script(
        "unrouted.js",
        "export const meta = { name: 'x', description: 'd', model: 'nosuch/model' };\nreturn await agent('x');\n",
    );
    let typed = script(
        "typed.js",
        "export const meta = { name: 'x', description: 'd', model: 'mock', inputSchema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } };\nreturn args.n;\n",
    );
    let valid = script("valid.js", &format!("{HEADER}return await agent('x');\n"));
    let missing = ctx.path("missing.js").display().to_string();
    let nowhere = ctx.path("nowhere").display().to_string();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec![&syntax], 1, "SCRIPT_VALIDATION_ERROR: SyntaxError"),
        (vec![&not_literal], 1, "meta must be a literal"),
        (vec![&throws], 2, "the mocked dry run failed"),
        (vec![&unrouted], 2, "not registered"),
        (
            vec![&typed, "--args", r#"{"n": "one"}"#],
            2,
            "args do not match",
        ),
        (vec![&missing], 3, "missing.js"),
        (
            vec![&valid, "--args", "{n: 1}"],
            3,
            "--args must be strict JSON",
        ),
        (vec![&valid, "--project-dir", &nowhere], 3, "--project-dir"),
        (vec![&valid, "--bogus"], 3, "--bogus"),
        (vec![], 3, "<SCRIPT_OR_NAME>"),
        (vec![&valid], 0, ""),
    ];
    for (args, code, needle) in cases {
        let mut argv = vec!["validate"];
        argv.extend(args);
        let finished = ctx.run(&argv);
        assert_eq!(finished.code(), code, "{argv:?}: {}", finished.stderr);
        assert!(
            finished.stderr.contains(needle),
            "{argv:?}: expected {needle:?} in:\n{}",
            finished.stderr
        );
    }
}

/// `config` probes the backends it is given by the `config` action's code: a summary by
/// default, the whole document with `--json`; 1 when a backend could not be probed, 2 for a
/// malformed flag.
#[test]
fn config_probes_backends_like_the_config_action() {
    let ctx = TestContext::new();
    let summary = ctx.run(&["config", "--harness", "mock"]);
    assert_eq!(summary.code(), 0, "{}", summary.stderr);
    assert!(summary.stdout.contains("mock: ready"), "{}", summary.stdout);
    assert!(
        summary.stdout.contains("modes: default, plan"),
        "{}",
        summary.stdout
    );
    let document = ctx.run(&["config", "--harness", "mock", "--json"]);
    assert_eq!(document.code(), 0, "{}", document.stderr);
    let document = document.json();
    assert_eq!(document["action"], "config", "{document:#}");
    assert_eq!(document["harnesses"][0]["backend"], "mock", "{document:#}");
    assert_eq!(document["harnesses"][0]["probed"], true, "{document:#}");
    assert_eq!(
        document["authoringSummary"]["backends"][0]["route"], "mock",
        "{document:#}"
    );
    let routed = ctx.run(&["config", "--model-spec", "mock/mock-smart", "--json"]);
    assert_eq!(routed.code(), 0, "{}", routed.stderr);
    assert_eq!(routed.json()["harnesses"][0]["model"], "mock-smart");
    let unknown = ctx.run(&["config", "--harness", "mock", "--harness", "nosuch"]);
    assert_eq!(unknown.code(), 1, "{}", unknown.stderr);
    assert!(
        unknown
            .stdout
            .contains("nosuch: not usable: unknown backend"),
        "{}",
        unknown.stdout
    );
    assert!(
        unknown
            .stderr
            .contains("1 of 2 backends could not be probed"),
        "{}",
        unknown.stderr
    );
    let nowhere = ctx.path("nowhere").display().to_string();
    for (args, needle) in [
        (vec!["--model-spec", "mock"], "--model-spec"),
        (vec!["--model-filter", ""], "--model-filter"),
        (vec!["--project-dir", nowhere.as_str()], "--project-dir"),
    ] {
        let mut argv = vec!["config"];
        argv.extend(&args);
        let refused = ctx.run(&argv);
        assert_eq!(refused.code(), 2, "{argv:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains(needle),
            "{argv:?}: {}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty(), "{argv:?}: {}", refused.stdout);
    }
}

/// An engine rejection about a field names the flag that sets it, whether or not the
/// engine's message names the field (`checkpointReplies` is `--reply` here).
#[test]
fn rejections_name_the_flag_of_their_field() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        &format!("{HEADER}const ok = await checkpoint('go?');\nreturn ok;\n"),
    );
    let waiting = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(waiting.code(), 3, "{}", waiting.stderr);
    let run_id = waiting.run_id();
    let wrong = ctx.run(&["resume", &run_id, "--reply", "5=true"]);
    assert_eq!(wrong.code(), 2, "{}", wrong.stderr);
    assert!(
        wrong
            .stderr
            .contains("--reply: checkpoint 5 is not waiting for an answer"),
        "{}",
        wrong.stderr
    );
    let cancel = ctx.run(&["stop", &run_id, "--call", "9"]);
    assert_eq!(cancel.code(), 2, "{}", cancel.stderr);
    assert!(cancel.stderr.contains("--call 9"), "{}", cancel.stderr);
    for internal in ["callIndex", "checkpointReplies"] {
        assert!(
            !wrong.stderr.contains(internal) && !cancel.stderr.contains(internal),
            "{internal}: {}{}",
            wrong.stderr,
            cancel.stderr
        );
    }
}
