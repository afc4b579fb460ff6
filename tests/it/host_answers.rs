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
//! - **Claude Code channels.** With `--dangerously-load-development-channels`, a channel
//!   message reaches the model only over the 2025 handshake (`MCP_PROTOCOL_NEGOTIATION=legacy`);
//!   over 2026-07-28, Claude Code's default, it registers no channel and says why in its log.

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
