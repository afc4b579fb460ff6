//! What real hosts keep of agentprism's answers, end to end: the Claude Code CLI (`claude -p`)
//! and the Codex CLI (`codex exec`) from `scripts/install-test-deps`, with agentprism as the
//! stdio shim and their model the scripted fake of `support::fake_host_model` on loopback.
//!
//! - **Large answers.** A run whose result is 400 KB: its `status` carries the whole outcome,
//!   which Claude Code diverts to a file and Codex cuts in the middle. The fake model takes
//!   every call from what the host kept of the previous answer (`FAKE-PLAN: page`): it learns
//!   from the `status` answer that the run completed and which `result` call comes next, pages
//!   the whole result by each page's `next`, and the chunks it was shown, joined, are the exact
//!   result the result resource serves.
//! - **Claude Code channels.** Claude Code registers channels only in its interactive mode, so
//!   these tests run it on a terminal (`script`, util-linux). The command docs/hosts.md gives
//!   (`MCP_PROTOCOL_NEGOTIATION=legacy` and the development flag) gets a channel message to the
//!   model; over 2026-07-28, Claude Code's default, it registers no channel and says why in
//!   its `--debug` log.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::shim::{Shim, World};

mod harness;
use crate::support::fake_host_model::{FakeHostModel, Plan, Step, next_call_in, stated_status};
use harness::*;

/// The name agentprism is registered under, in every snippet and doc.
const SERVER: &str = "agentprism-workflow";
/// A host session: start-up, a run, its polls and some fifty result pages on two loaded cores.
const SESSION_DEADLINE: Duration = Duration::from_secs(240);
/// The page size every `next` of agentprism suggests for `result`.
const PAGE_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    ClaudeCode,
    Codex,
}

#[test]
fn claude_code_learns_a_large_result_from_status_and_pages_it_whole() {
    pages_a_large_result(Host::ClaudeCode);
}

#[test]
fn codex_learns_a_large_result_from_status_and_pages_it_whole() {
    pages_a_large_result(Host::Codex);
}

/// A script whose result is about 400 KB of JSON: rows with quotes, backslashes, tabs and
/// multi-byte characters, so escaping and code-point boundaries fall on every page, and a run
/// of backslashes that JSON doubles and the page's own escaping doubles again, the most a
/// page grows by in an answer.
fn large_result_script() -> String {
    "export const meta = { name: 'large', description: 'a 400 KB result', model: 'mock' };\n\
     const reply = await agent('a large result\\n@mock reply fine');\n\
     const rows = [];\n\
     for (let index = 0; index < 5700; index++) {\n\
       rows.push(`row ${index}: \"quoted\" back\\\\slash\\ttab é ü 漢字 🙂 {\"k\":${index}}`);\n\
     }\n\
     const slashes = '\\\\'.repeat(6000);\n\
     return { reply, rows, slashes };\n"
        .to_owned()
}

fn pages_a_large_result(host: Host) {
    let deps = Deps::find();
    let world = World::with(|context| context.with_mock_backend(json!({})));
    let fake = FakeHostModel::start(Plan {
        server: SERVER.to_owned(),
        run_arguments: json!({"action": "run", "projectDir": world.context.project(), "script": large_result_script()}),
        pause_after_run: Duration::ZERO,
    });
    let setup = HostSetup::new(host, &world, &fake, &deps, &[]);
    let session = setup.spawn(
        "page",
        "FAKE-PLAN: page. Run the workflow and report its result.",
        &[],
    );
    let finished = session.finish(SESSION_DEADLINE, &fake);
    let steps = fake.steps();
    assert_eq!(finished.code, Some(0), "{}", finished.describe());
    let run_id = steps
        .iter()
        .find_map(|step| match step {
            Step::Answered { text } => text.strip_prefix("FAKE-DONE ").map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the fake model never answered: {steps:#?}"));
    assert_eq!(world.context.status(&run_id)["status"], "completed");

    // The completed status was too large for the host to show whole, and the fake took its
    // first `result` call from what the host kept of it.
    let outputs: Vec<(&str, &str)> = steps
        .iter()
        .filter_map(|step| match step {
            Step::Output { action, text } => Some((action.as_str(), text.as_str())),
            _ => None,
        })
        .collect();
    let (_, completed) = outputs
        .iter()
        .find(|(action, text)| {
            *action == "status" && stated_status(text).as_deref() == Some("completed")
        })
        .unwrap_or_else(|| panic!("no completed status crossed the host: {steps:#?}"));
    eprintln!(
        "{host:?}: the completed status as the model saw it ({} bytes):\n{}",
        completed.len(),
        glimpse(completed)
    );
    assert!(
        !completed.contains(&"row 2600:".to_owned()),
        "the host showed the whole 400 KB status, so nothing here was cut: {}",
        glimpse(completed)
    );
    let first = json!({"action": "result", "runId": run_id, "offset": 0, "maxBytes": PAGE_BYTES});
    assert_eq!(
        next_call_in(completed, "result"),
        Some(first),
        "{}",
        glimpse(completed)
    );

    // Every page crossed whole, and the chunks the model was shown are the exact result.
    let pages: Vec<Value> = outputs
        .iter()
        .filter(|(action, _)| *action == "result")
        .map(|(_, text)| {
            page_in(text).unwrap_or_else(|| {
                panic!(
                    "{host:?} did not show a result page whole: {}",
                    glimpse(text)
                )
            })
        })
        .collect();
    let joined: String = pages
        .iter()
        .map(|page| page["chunk"].as_str().expect("a chunk"))
        .collect();
    let expected = result_resource(&world, &run_id);
    assert!(
        expected.len() > 400_000,
        "the result is {} bytes",
        expected.len()
    );
    assert_eq!(
        pages.len(),
        expected.len().div_ceil(PAGE_BYTES),
        "one call per page"
    );
    assert!(
        joined == expected,
        "the pages joined differ from the result resource ({} and {} bytes)",
        joined.len(),
        expected.len()
    );
}

/// The documented way to get channel messages (docs/hosts.md and docs/monitor.md give the
/// same command) delivers one to the model: Claude Code registers the channel, and the run's
/// end arrives as a `<channel …>` message that starts the model's next turn.
#[test]
fn claude_code_gets_channel_messages_as_the_docs_say() {
    let (env, args) = documented_channel_command();
    let assignments: Vec<(&str, &str)> =
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let channel = ChannelSession::start(&assignments, &args);
    channel.release_the_run();
    let message = channel
        .fake
        .wait_for("a channel message", CHANNEL_DEADLINE, |steps| {
            steps.iter().find_map(|step| match step {
                Step::Answered { text } => {
                    text.strip_prefix("FAKE-DONE channel: ").map(str::to_owned)
                }
                _ => None,
            })
        });
    let run_id = &channel.run_id;
    assert!(
        message.starts_with(&format!(
            "<channel source=\"{SERVER}\" run_id=\"{run_id}\" kind=\"terminal\" status=\"completed\""
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("Workflow run {run_id} (told) completed.")),
        "{message}"
    );
    assert!(
        channel
            .debug_log()
            .contains("Channel notifications registered")
    );
}

/// Without `MCP_PROTOCOL_NEGOTIATION`, Claude Code negotiates 2026-07-28 and registers no
/// channel: it has no stream to take one on in that era, and says so in its log.
#[test]
fn claude_code_registers_no_channel_over_2026_07_28() {
    let (_, args) = documented_channel_command();
    let channel = ChannelSession::start(&[], &args);
    let skipped = "Channel notifications skipped: connection negotiated a modern protocol revision with no unsolicited notification path";
    let started = Instant::now();
    while !channel.debug_log().contains(skipped) {
        assert!(
            started.elapsed() < CHANNEL_DEADLINE,
            "Claude Code never said why it registered no channel:\n{}",
            channel.debug_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = channel.debug_log();
    assert!(
        log.contains(r#""protocolEra":"modern","negotiatedProtocolVersion":"2026-07-28""#),
        "{log}"
    );
    assert!(!log.contains("Channel notifications registered"), "{log}");
}

/// How long Claude Code may take to start, connect and answer in its interactive mode.
const CHANNEL_DEADLINE: Duration = Duration::from_secs(90);

/// The channel command of docs/hosts.md, which docs/monitor.md repeats: its environment
/// assignments and the arguments after `claude`.
fn documented_channel_command() -> (Vec<(String, String)>, Vec<String>) {
    let command_in = |doc: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        text.lines()
            .find(|line| line.contains("--dangerously-load-development-channels"))
            .unwrap_or_else(|| panic!("{doc} gives no channel command"))
            .trim()
            .to_owned()
    };
    let command = command_in("docs/hosts.md");
    assert_eq!(
        command,
        command_in("docs/monitor.md"),
        "the two docs give one command"
    );
    let mut words = command.split_whitespace();
    let mut env = Vec::new();
    let args = loop {
        match words.next() {
            Some("claude") => break words.map(str::to_owned).collect::<Vec<_>>(),
            Some(word) => {
                let (key, value) = word
                    .split_once('=')
                    .unwrap_or_else(|| panic!("not `VAR=value` or `claude`: {word} in {command}"));
                env.push((key.to_owned(), value.to_owned()));
            }
            None => panic!("no `claude` in {command}"),
        }
    };
    (env, args)
}

/// Claude Code in its interactive mode (it registers channels only there, never in `-p`),
/// driven by `FAKE-PLAN: channel`: it runs a workflow that waits for a file and ends its turn.
struct ChannelSession {
    fake: FakeHostModel,
    run_id: String,
    release: PathBuf,
    debug_dir: PathBuf,
    _session: Interactive,
    _setup: HostSetup,
    _world: World,
}

impl ChannelSession {
    fn start(env: &[(&str, &str)], args: &[String]) -> ChannelSession {
        let deps = Deps::find();
        let world = World::with(|context| context.with_mock_backend(json!({})));
        let release = world.context.path("release-the-agent");
        let script = format!(
            "export const meta = {{ name: 'told', description: 'ends while the host waits', model: 'mock' }};\n\
             const reply = await agent('wait\\n@mock wait_file {}');\n\
             return {{ reply }};\n",
            release.display()
        );
        let fake = FakeHostModel::start(Plan {
            server: SERVER.to_owned(),
            run_arguments: json!({"action": "run", "projectDir": world.context.project(), "script": script}),
            pause_after_run: Duration::ZERO,
        });
        let setup = HostSetup::new(Host::ClaudeCode, &world, &fake, &deps, env);
        let mut arguments: Vec<&str> = args.iter().map(String::as_str).collect();
        arguments.push("--debug");
        let mut session = setup.spawn_interactive(
            "channel",
            "FAKE-PLAN: channel. Run the workflow and wait for its message.",
            &arguments,
        );
        // Claude Code asks once per start whether the development channel is meant.
        session.answer("I am using this for local development", "\r");
        let run_id = fake.wait_for("the run's acknowledgement", CHANNEL_DEADLINE, |steps| {
            steps.iter().find_map(|step| match step {
                Step::Output { action, text } if action == "run" => {
                    Some(run_id_in_text(text).unwrap_or_else(|| panic!("no run id in {text}")))
                }
                _ => None,
            })
        });
        ChannelSession {
            debug_dir: world.context.path("host-home/.claude/debug"),
            fake,
            run_id,
            release,
            _session: session,
            _setup: setup,
            _world: world,
        }
    }

    /// Lets the run's agent answer, so the run completes.
    fn release_the_run(&self) {
        std::fs::write(&self.release, "").expect("release the agent");
    }

    /// Everything Claude Code's `--debug` wrote so far.
    fn debug_log(&self) -> String {
        let Ok(entries) = std::fs::read_dir(&self.debug_dir) else {
            return String::new();
        };
        entries
            .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
            .collect()
    }
}

/// A run id in a tool output: after `runId` (an acknowledgement), or the server-side task
/// Claude Code says it started (2026-07-28 makes `run` a task whose id is the run id).
fn run_id_in_text(text: &str) -> Option<String> {
    let (_, rest) = text
        .split_once("\"runId\":\"")
        .or_else(|| text.split_once("server-side task "))?;
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// The result page in a tool output: the first JSON object in it with a `chunk`.
fn page_in(output: &str) -> Option<Value> {
    output.match_indices('{').find_map(|(at, _)| {
        let value = serde_json::Deserializer::from_str(&output[at..])
            .into_iter::<Value>()
            .next()?
            .ok()?;
        value.get("chunk")?.is_string().then_some(value)
    })
}

/// The run's result as the result resource serves it, read over a session of its own.
fn result_resource(world: &World, run_id: &str) -> String {
    let mut shim = Shim::start(&world.context);
    shim.initialize();
    let read = shim.request(
        1,
        "resources/read",
        json!({"uri": format!("workflow://runs/{run_id}/result")}),
    );
    read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no result text: {read}"))
        .to_owned()
}

/// The start and end of a long text, for the log.
fn glimpse(text: &str) -> String {
    if text.len() <= 2000 {
        return text.to_owned();
    }
    let head: String = text.chars().take(1000).collect();
    let tail: Vec<char> = text.chars().rev().take(1000).collect();
    let tail: String = tail.into_iter().rev().collect();
    format!("{head}\n[… {} bytes in all …]\n{tail}", text.len())
}
