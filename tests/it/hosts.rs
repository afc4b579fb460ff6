//! Real MCP hosts end to end: the Claude Code CLI (`claude -p`) and the Codex CLI (`codex
//! exec`), installed by `scripts/install-test-deps`, with agentprism registered in their MCP
//! configuration as the stdio shim and over Streamable HTTP. Their model is the scripted fake in
//! `support::fake_host_model` on loopback, so nothing reaches the network and no key is needed.
//!
//! One scenario per host and transport, in two host sessions:
//! 1. The fake model sees the `workflow` tool in the host's tool list (with its schema) and
//!    calls `run`, whose preparation takes 15 s (the mock agent's `initialize` is slow, and the
//!    zero-token probe waits for it); it then thinks for 15 s before calling `status`. Both
//!    stretches exceed the ~10 s after which Codex retires the thread that spawned the shim
//!    (issue 10, defect 1). After that `status` (the run waits for a file) the fake parks, and
//!    the test kills the host with SIGKILL: the run keeps running in the daemon.
//! 2. The test lets the run finish; a new host session polls `status` until the run is
//!    terminal, reads `result` and answers; the answer and the result crossed the host.
//!
//! Each host's two scenarios run at once in one test (each is dominated by its two 15 s waits),
//! so the two tests take about 40 s together.
//! Every host gets its own HOME, which also tags every process it starts: a sweeper kills what
//! still carries it when the test ends, and the world's daemons are killed by their records.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::shim::World;
use crate::support::fake_host_model::{FakeHostModel, Plan, Step};

/// The name agentprism is registered under, in every snippet and doc.
const SERVER: &str = "agentprism-workflow";
/// The stretches the host's connection to agentprism must survive.
const PAUSE: Duration = Duration::from_secs(15);
/// From the first host's start to the parked `status`: start-up, 15 s preparation, 15 s
/// pause, and headroom for two loaded cores.
const FIRST_SESSION_DEADLINE: Duration = Duration::from_secs(120);
/// The second host session: start-up and a few quick calls.
const SECOND_SESSION_DEADLINE: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    ClaudeCode,
    Codex,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Stdio,
    Http,
}

#[test]
fn claude_code_runs_a_workflow_across_host_sessions_over_stdio_and_http() {
    both_transports(Host::ClaudeCode);
}

#[test]
fn codex_runs_a_workflow_across_host_sessions_over_stdio_and_http() {
    both_transports(Host::Codex);
}

/// Both transports at once: each scenario mostly waits, so two in parallel cost one's time.
fn both_transports(host: Host) {
    std::thread::scope(|scope| {
        let stdio = scope.spawn(|| scenario(host, Transport::Stdio));
        let http = scope.spawn(|| scenario(host, Transport::Http));
        let (stdio, http) = (stdio.join(), http.join());
        for outcome in [stdio, http] {
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

fn scenario(host: Host, transport: Transport) {
    let started = Instant::now();
    let deps = Deps::find();
    // Every new mock agent process takes 15 s to initialize; the daemon's pool keeps the one
    // the probe started, so only preparation pays it.
    let world = World::with(|context| {
        context.with_mock_backend(json!({"MOCK_ACP_INIT_DELAY_MS": PAUSE.as_millis().to_string()}))
    });
    let release = world.context.path("release-the-agent");
    let script = format!(
        "export const meta = {{ name: 'hosted', description: 'a workflow through a real host', model: 'mock' }};\n\
         const reply = await agent('hello from the host test\\n@mock wait_file {}');\n\
         return {{ done: true, reply }};\n",
        release.display()
    );
    let fake = FakeHostModel::start(Plan {
        server: SERVER.to_owned(),
        run_arguments: json!({"action": "run", "projectDir": world.context.project(), "script": script}),
        pause_after_run: PAUSE,
    });
    let endpoint = match transport {
        Transport::Stdio => Endpoint::Shim,
        Transport::Http => {
            let started = world.context.run(&["daemon", "start"]);
            assert_eq!(started.code(), 0, "daemon start: {}", started.stderr);
            let url = world.pointer().expect("a daemon pointer")["url"]
                .as_str()
                .expect("the daemon's url")
                .to_owned();
            Endpoint::Http(url)
        }
    };
    let setup = HostSetup::new(host, endpoint, &world, &fake, &deps);

    // Session 1: run, a 15 s pause, status; then the host dies mid-run.
    let mut first = setup.spawn("first", "FAKE-PLAN: run. Start the workflow and watch it.");
    let run_id = fake.wait_for("the parked status call", FIRST_SESSION_DEADLINE, |steps| {
        steps.iter().find_map(|step| match step {
            Step::Parked { run_id } => Some(run_id.clone()),
            _ => None,
        })
    });
    eprintln!(
        "{host:?}/{transport:?}: run {run_id} admitted and polled after {:?}",
        started.elapsed()
    );
    assert_tool_listed(&fake, host);
    first.kill();
    let status = world.context.status(&run_id);
    assert_eq!(
        status["status"], "running",
        "the run outlives the killed host: {status:#}"
    );
    if transport == Transport::Stdio {
        setup.assert_no_shim_left();
    }

    // Session 2: a new host session reads the run to its end.
    std::fs::write(&release, "").expect("release the agent");
    let second = setup.spawn(
        "second",
        &format!("FAKE-PLAN: check {run_id}. Report the run's result."),
    );
    let finished = second.finish(SECOND_SESSION_DEADLINE, &fake);
    assert_eq!(finished.code, Some(0), "{}", finished.describe());
    assert!(
        finished.stdout.contains(&format!("FAKE-DONE {run_id}")),
        "the host printed the model's answer: {}",
        finished.describe()
    );
    let steps = fake.steps();
    let result = steps
        .iter()
        .find_map(|step| match step {
            Step::Output { action, text } if action == "result" => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result output crossed the host: {steps:#?}"));
    assert!(
        result.contains("done"),
        "the result through the host: {result}"
    );
    let actions: Vec<&str> = steps
        .iter()
        .filter_map(|step| match step {
            Step::Called { arguments } => arguments["action"].as_str(),
            _ => None,
        })
        .collect();
    assert_eq!(actions.first(), Some(&"run"), "{actions:?}");
    assert_eq!(actions.last(), Some(&"result"), "{actions:?}");
    assert!(
        steps
            .iter()
            .any(|step| matches!(step, Step::Answered { text } if text.contains(&run_id))),
        "{steps:#?}"
    );
    assert_eq!(world.context.status(&run_id)["status"], "completed");
    assert_paths_faked(&fake);
    eprintln!("{host:?}/{transport:?}: done in {:?}", started.elapsed());
}

/// The host listed `workflow` to the model with agentprism's schema.
fn assert_tool_listed(fake: &FakeHostModel, host: Host) {
    let tools = fake.listed_tools();
    let tool = tools
        .first()
        .unwrap_or_else(|| panic!("{host:?} never listed the workflow tool"));
    match host {
        Host::ClaudeCode => {
            assert_eq!(tool.api, "anthropic");
            assert_eq!(tool.name, format!("mcp__{SERVER}__workflow"));
        }
        Host::Codex => assert_eq!(
            (tool.namespace.as_deref(), tool.name.as_str(), tool.api),
            (Some("mcp__agentprism_workflow"), "workflow", "responses"),
            "{tool:#?}"
        ),
    }
    let actions = &tool.schema["properties"]["action"]["enum"];
    for action in ["run", "status", "result"] {
        assert!(
            actions
                .as_array()
                .is_some_and(|list| list.iter().any(|a| a == action)),
            "action {action} in the listed schema: {:#}",
            tool.schema
        );
    }
    assert!(
        tool.schema["properties"]["script"].is_object(),
        "{:#}",
        tool.schema
    );
    assert!(
        tool.description.contains("workflow"),
        "{}",
        tool.description
    );
}

/// Nothing the host asked for fell through to the fake's 404.
fn assert_paths_faked(fake: &FakeHostModel) {
    let unknown: Vec<String> = fake
        .requests()
        .iter()
        .filter(|request| request.status == 404)
        .map(|request| format!("{} {}", request.method, request.path))
        .collect();
    assert!(
        unknown.is_empty(),
        "requests the fake did not know: {unknown:?}"
    );
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

/// How the host reaches agentprism.
enum Endpoint {
    /// The host launches `agentprism-workflow`.
    Shim,
    /// The daemon's `/mcp` URL.
    Http(String),
}

/// One host, configured in its own HOME to use the fake model and agentprism.
struct HostSetup {
    host: Host,
    binary: PathBuf,
    home: PathBuf,
    project: PathBuf,
    /// The whole environment of the host process.
    env: Vec<(String, String)>,
    /// Claude Code's `--mcp-config` file.
    mcp_config: PathBuf,
    output_dir: PathBuf,
    /// Kills what still carries this HOME when the test ends, pass or fail.
    _sweeper: Sweeper,
}

impl HostSetup {
    fn new(
        host: Host,
        endpoint: Endpoint,
        world: &World,
        fake: &FakeHostModel,
        deps: &Deps,
    ) -> HostSetup {
        let context = &world.context;
        let home = context.path("host-home");
        let output_dir = context.path("host-output");
        for folder in [&home, &output_dir] {
            std::fs::create_dir_all(folder)
                .unwrap_or_else(|error| panic!("create {}: {error}", folder.display()));
        }
        // What agentprism needs goes in the server's `env` in the host's config: Codex passes
        // only HOME and PATH to MCP servers (docs/hosts.md).
        let agentprism_env: serde_json::Map<String, Value> = context
            .env
            .iter()
            .filter(|(key, _)| key.starts_with("AGENTPRISM_"))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        let shim = PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow"));
        let node_dir = deps.node.parent().expect("node has a folder");
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display());
        let mut env = vec![
            ("PATH".to_owned(), path),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        let mcp_config = home.join("mcp.json");
        let binary = match host {
            Host::ClaudeCode => {
                let server = match &endpoint {
                    Endpoint::Shim => json!({
                        "type": "stdio", "command": shim, "args": [], "env": agentprism_env,
                    }),
                    Endpoint::Http(url) => json!({"type": "http", "url": url}),
                };
                let config = json!({"mcpServers": {SERVER: server}});
                write(&mcp_config, &format!("{config:#}"));
                env.extend(
                    [
                        ("ANTHROPIC_BASE_URL", fake.base_url().as_str()),
                        ("ANTHROPIC_API_KEY", "fake-key"),
                        // No telemetry, error reports, update checks or other side traffic.
                        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                        ("DISABLE_AUTOUPDATER", "1"),
                        ("DISABLE_TELEMETRY", "1"),
                        ("DISABLE_ERROR_REPORTING", "1"),
                        ("MCP_TIMEOUT", "60000"),
                    ]
                    .map(|(key, value)| (key.to_owned(), value.to_owned())),
                );
                if nix::unistd::geteuid().is_root() {
                    // Claude Code refuses some modes as root outside a declared sandbox.
                    env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
                }
                deps.claude.clone()
            }
            Host::Codex => {
                let server = match &endpoint {
                    Endpoint::Shim => {
                        let env_table: Vec<String> = agentprism_env
                            .iter()
                            .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                            .collect();
                        format!(
                            "command = {}\nargs = []\nenv = {{ {} }}\n",
                            toml_string(&json!(shim)),
                            env_table.join(", ")
                        )
                    }
                    Endpoint::Http(url) => format!("url = {}\n", toml_string(&json!(url))),
                };
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
                     {server}\
                     startup_timeout_sec = 60\n\
                     # Above agentprism's 120 s preparation limit (the default is 60 s).\n\
                     tool_timeout_sec = 180\n\
                     # codex exec cannot ask; without this the workflow call is refused.\n\
                     default_tools_approval_mode = \"approve\"\n",
                    base_url = toml_string(&json!(fake.openai_base_url())),
                );
                write(&home.join(".codex/config.toml"), &config);
                env.push(("FAKE_MODEL_KEY".to_owned(), "fake-key".to_owned()));
                deps.codex.clone()
            }
        };
        HostSetup {
            host,
            binary,
            _sweeper: Sweeper { home: home.clone() },
            home,
            project: context.project(),
            env,
            mcp_config,
            output_dir,
        }
    }

    /// Starts one host session in its non-interactive mode with `prompt`.
    fn spawn(&self, label: &str, prompt: &str) -> HostProcess {
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

    /// The shim of a killed host ends by itself (its parent process is gone).
    fn assert_no_shim_left(&self) {
        let started = Instant::now();
        loop {
            let shims: Vec<i32> = processes_with_home(&self.home)
                .into_iter()
                .filter(|pid| command_line(*pid).contains("agentprism-workflow"))
                .collect();
            if shims.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the shim outlived its killed host: {shims:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
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
    /// SIGKILL to the host alone, as when its terminal is closed under it: what it started
    /// must notice by itself.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
        self.child = Some(child);
    }

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
            let _ = child.kill();
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

/// Processes whose environment has `HOME=<home>`; the home is this test's, so only its
/// processes match (zombies show an empty environment and do not).
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

fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
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
