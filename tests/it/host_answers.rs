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

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::shim::{Shim, World};
use crate::support::fake_host_model::{FakeHostModel, Plan, Step, next_call_in, stated_status};

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

/// Where `scripts/install-test-deps` put the hosts.
struct Deps {
    claude: PathBuf,
    codex: PathBuf,
    node: PathBuf,
}

impl Deps {
    fn find() -> Deps {
        let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
        let manifest = dir.join("interop-deps.env");
        let missing = |what: &str| -> ! {
            panic!(
                "host test dependencies are missing ({what}); run `scripts/install-test-deps` \
                 (it installs Claude Code and Codex into {} from npm)",
                dir.display()
            )
        };
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|error| missing(&format!("{}: {error}", manifest.display())));
        let field = |name: &str| {
            let path = text
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(PathBuf::from)
                .unwrap_or_else(|| missing(&format!("{} has no {name}", manifest.display())));
            if !path.is_file() {
                missing(&format!("{} does not exist", path.display()));
            }
            path
        };
        Deps {
            claude: field("claude"),
            codex: field("codex"),
            node: field("node"),
        }
    }
}

/// One host in its own HOME, using the fake model and agentprism's stdio shim.
struct HostSetup {
    host: Host,
    binary: PathBuf,
    project: PathBuf,
    env: Vec<(String, String)>,
    mcp_config: PathBuf,
    output_dir: PathBuf,
    _sweeper: Sweeper,
}

impl HostSetup {
    fn new(
        host: Host,
        world: &World,
        fake: &FakeHostModel,
        deps: &Deps,
        extra_env: &[(&str, &str)],
    ) -> HostSetup {
        let context = &world.context;
        let home = context.path("host-home");
        let output_dir = context.path("host-output");
        for folder in [&home, &output_dir] {
            std::fs::create_dir_all(folder)
                .unwrap_or_else(|error| panic!("create {}: {error}", folder.display()));
        }
        let agentprism_env: serde_json::Map<String, Value> = context
            .env
            .iter()
            .filter(|(key, _)| key.starts_with("AGENTPRISM_"))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        let shim = PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow"));
        let node_dir = deps.node.parent().expect("node has a folder");
        let mut env = vec![
            (
                "PATH".to_owned(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display()),
            ),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        );
        let mcp_config = home.join("mcp.json");
        let binary = match host {
            Host::ClaudeCode => {
                let server =
                    json!({"type": "stdio", "command": shim, "args": [], "env": agentprism_env});
                write(
                    &mcp_config,
                    &format!("{:#}", json!({"mcpServers": {SERVER: server}})),
                );
                env.extend(
                    [
                        ("ANTHROPIC_BASE_URL", fake.base_url().as_str()),
                        ("ANTHROPIC_API_KEY", "fake-key"),
                        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                        ("DISABLE_AUTOUPDATER", "1"),
                        ("DISABLE_TELEMETRY", "1"),
                        ("DISABLE_ERROR_REPORTING", "1"),
                        ("MCP_TIMEOUT", "60000"),
                    ]
                    .map(|(key, value)| (key.to_owned(), value.to_owned())),
                );
                if nix::unistd::geteuid().is_root() {
                    env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
                }
                deps.claude.clone()
            }
            Host::Codex => {
                let env_table: Vec<String> = agentprism_env
                    .iter()
                    .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                    .collect();
                let config = format!(
                    "model = \"fake-model\"\n\
                     model_provider = \"fake\"\n\
                     check_for_update_on_startup = false\n\
                     \n\
                     [model_providers.fake]\n\
                     name = \"fake model\"\n\
                     base_url = {base_url}\n\
                     wire_api = \"responses\"\n\
                     env_key = \"FAKE_MODEL_KEY\"\n\
                     request_max_retries = 0\n\
                     stream_max_retries = 0\n\
                     \n\
                     [mcp_servers.{SERVER}]\n\
                     command = {command}\n\
                     args = []\n\
                     env = {{ {env_table} }}\n\
                     startup_timeout_sec = 60\n\
                     tool_timeout_sec = 180\n\
                     default_tools_approval_mode = \"approve\"\n",
                    base_url = toml_string(&json!(fake.openai_base_url())),
                    command = toml_string(&json!(shim)),
                    env_table = env_table.join(", "),
                );
                write(&home.join(".codex/config.toml"), &config);
                env.push(("FAKE_MODEL_KEY".to_owned(), "fake-key".to_owned()));
                deps.codex.clone()
            }
        };
        HostSetup {
            host,
            binary,
            _sweeper: Sweeper { home },
            project: context.project(),
            env,
            mcp_config,
            output_dir,
        }
    }

    /// Starts one host session in its non-interactive mode with `prompt`.
    fn spawn(&self, label: &str, prompt: &str, extra_args: &[&str]) -> HostProcess {
        let mut command = Command::new(&self.binary);
        match self.host {
            Host::ClaudeCode => {
                command
                    .arg("-p")
                    .arg(prompt)
                    .arg("--mcp-config")
                    .arg(&self.mcp_config)
                    .arg("--strict-mcp-config")
                    .args(["--allowedTools", &format!("mcp__{SERVER}__workflow")]);
            }
            Host::Codex => {
                command
                    .args(["exec", "--skip-git-repo-check", "--color", "never"])
                    .arg(prompt);
            }
        }
        command.args(extra_args);
        let stdout = self.output_dir.join(format!("{label}.stdout"));
        let stderr = self.output_dir.join(format!("{label}.stderr"));
        let child = command
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(create(&stdout))
            .stderr(create(&stderr))
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {}: {error}", self.binary.display()));
        HostProcess {
            child: Some(child),
            stdout,
            stderr,
        }
    }
}

impl HostSetup {
    /// Starts Claude Code's interactive mode with `prompt` as its first message, on a
    /// terminal of its own (`script` allocates it), after marking onboarding, the project's
    /// trust dialog and the API key as answered in its configuration.
    fn spawn_interactive(&self, label: &str, prompt: &str, extra_args: &[&str]) -> Interactive {
        let key = "fake-key";
        let config = json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [key], "rejected": []},
            "projects": {self.project.display().to_string(): {"hasTrustDialogAccepted": true}},
            // Claude Code's channels are behind its `tengu_harbor` feature flag, which its
            // service turns on for accounts in the research preview; offline, the test gives
            // the value in the flags cache and lets Claude Code read it
            // (`CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF`).
            "cachedGrowthBookFeatures": {"tengu_harbor": true},
        });
        let home = self
            .env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .expect("HOME");
        write(&home.join(".claude.json"), &config.to_string());
        let mut words = vec![self.binary.display().to_string(), prompt.to_owned()];
        words.extend([
            "--mcp-config".to_owned(),
            self.mcp_config.display().to_string(),
            "--strict-mcp-config".to_owned(),
            "--allowedTools".to_owned(),
            format!("mcp__{SERVER}__workflow"),
        ]);
        words.extend(extra_args.iter().map(|arg| (*arg).to_owned()));
        let command: Vec<String> = words
            .iter()
            .map(|word| format!("'{}'", word.replace('\'', "'\\''")))
            .collect();
        let stdout = self.output_dir.join(format!("{label}.screen"));
        let child = Command::new("script")
            .args(["-qfec", &format!("exec {}", command.join(" ")), "/dev/null"])
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .env("TERM", "xterm-256color")
            .env("CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF", "1")
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(create(&stdout))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("spawn script (util-linux) for Claude Code: {error}"));
        Interactive {
            child,
            screen: stdout,
        }
    }
}

/// An interactive host on a terminal; its process group is killed when it is dropped.
struct Interactive {
    child: Child,
    /// What the terminal was sent.
    screen: PathBuf,
}

impl Interactive {
    /// Waits until the terminal shows `text` (compared without spaces, as cursor moves
    /// stand between the words), then types `keys`.
    fn answer(&mut self, text: &str, keys: &str) {
        let wanted: String = text.split_whitespace().collect();
        let started = Instant::now();
        loop {
            let shown = visible(&std::fs::read(&self.screen).unwrap_or_default());
            if shown.contains(&wanted) {
                break;
            }
            assert!(
                started.elapsed() < CHANNEL_DEADLINE,
                "the terminal never showed {text:?}: {shown}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("the terminal's input");
        stdin
            .write_all(keys.as_bytes())
            .expect("type on the terminal");
        stdin.flush().expect("type on the terminal");
    }
}

/// The printable text of terminal output, without escape sequences and whitespace.
fn visible(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut shown = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter; other escapes: ESC and one character.
            if chars.next_if_eq(&'[').is_some() {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() || c == '~' {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if !c.is_whitespace() && !c.is_control() {
            shown.push(c);
        }
    }
    shown
}

impl Drop for Interactive {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// One host process; its process group is killed if it is dropped unfinished.
struct HostProcess {
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// What a finished host session left.
struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl HostProcess {
    fn finish(mut self, deadline: Duration, fake: &FakeHostModel) -> Finished {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the host") {
                break status;
            }
            if started.elapsed() > deadline {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                panic!(
                    "the host did not finish within {deadline:?}\n{}\nsteps: {:#?}",
                    self.output(None).describe(),
                    fake.steps()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        self.output(status.code())
    }

    fn output(&self, code: Option<i32>) -> Finished {
        Finished {
            code,
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl Finished {
    fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Kills every process still carrying `home` when dropped.
struct Sweeper {
    home: PathBuf,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        for pid in processes_with_home(&self.home) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Processes whose environment has `HOME=<home>`; the home is this test's.
fn processes_with_home(home: &Path) -> Vec<i32> {
    let wanted = format!("HOME={}", home.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        })
        .collect()
}

/// A TOML basic string: JSON string escapes are valid TOML ones for what we write.
fn toml_string(value: &Value) -> String {
    match value {
        Value::String(text) => Value::String(text.clone()).to_string(),
        other => Value::String(other.to_string()).to_string(),
    }
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|error| panic!("create {}: {error}", parent.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

fn create(path: &Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|error| panic!("create {}: {error}", path.display()))
}
