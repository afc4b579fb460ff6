//! The four built-in backends through their real ACP adapters — claude-agent-acp, codex-acp,
//! opencode and pi-acp, the packages `acp::registry` launches, pinned and installed by
//! `scripts/install-test-deps` — each run by the real `agentprism` binary against the
//! loopback fake model server (`support::fake_llm`), offline, with a HOME of its own:
//! single and structured calls whose results carry no adapter chatter, `parallel` of 4, a
//! provider 401 that pauses `auth_required` and resumes once the fake accepts again, a 429
//! that pauses `usage_limit` with a `resetHint`, and `stop --call` of one call of a
//! `parallel` while its sibling finishes (on the same agent process, or on pi, which holds
//! one session per adapter process, on a process of its own). `adapter_effort.rs` uses the
//! same setup for `effort`. How each adapter is pointed at
//! the fake is in [`Backend::configure`]; what each one does is in `docs/adapters.md`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::interop::{Sweeper, command_line};
use crate::support::fake_llm::{FakeLlm, RESET_SECONDS};

/// How long agent processes may take to go once a run has ended.
const EXIT_DEADLINE: Duration = Duration::from_secs(15);

/// Longest one `agentprism run`/`resume` may take: pi starts a `pi` process per session (~3 s
/// each) and opencode takes ~10 s to start, on two shared cores.
const RUN_DEADLINE: Duration = Duration::from_secs(120);
const STATUS_DEADLINE: Duration = Duration::from_secs(10);

const OK_SCHEMA: &str =
    "{ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Claude,
    Codex,
    Opencode,
    Pi,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Claude => "claude",
            Backend::Codex => "codex",
            Backend::Opencode => "opencode",
            Backend::Pi => "pi",
        }
    }
}

/// The manifest lines `scripts/install-test-deps` writes.
pub(crate) struct Deps {
    fields: Vec<(String, PathBuf)>,
}

impl Deps {
    fn find() -> Deps {
        let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
        let manifest = dir.join("interop-deps.env");
        let text = std::fs::read_to_string(&manifest).unwrap_or_else(|error| {
            panic!(
                "adapter test dependencies are missing ({}: {error}); run `scripts/install-test-deps`",
                manifest.display()
            )
        });
        let fields = text
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_owned(), PathBuf::from(value)))
            .collect();
        Deps { fields }
    }

    pub(crate) fn get(&self, name: &str) -> &Path {
        let path = self
            .fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, path)| path.as_path())
            .unwrap_or_else(|| {
                panic!("the test-deps manifest has no {name}; run `scripts/install-test-deps`")
            });
        assert!(
            path.exists(),
            "{} does not exist; run `scripts/install-test-deps`",
            path.display()
        );
        assert!(
            !path.to_string_lossy().contains(char::is_whitespace),
            "{} contains whitespace (AGENTPRISM_*_ACP_ARGS are split on it)",
            path.display()
        );
        path
    }
}

pub(crate) struct Context {
    backend: Backend,
    pub(crate) fake: FakeLlm,
    pub(crate) deps: Deps,
    home: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) project: PathBuf,
    /// Set for every `agentprism` the test starts, after the backend's own.
    pub(crate) extra_env: Vec<(String, String)>,
    _sweeper: Sweeper,
    pub(crate) dir: tempfile::TempDir,
}

/// An `agentprism` process a test started; dropped unfinished, its process group is killed.
struct Running<'a> {
    context: &'a Context,
    args: Vec<String>,
    deadline: Duration,
    pid: u32,
    child: Option<tokio::process::Child>,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    /// Holds the two output files.
    _output: tempfile::TempDir,
}

impl Running<'_> {
    /// Waits for the process to exit, within its deadline.
    async fn finish(mut self) -> Outcome {
        let mut child = self.child.take().expect("a running child");
        let code = match tokio::time::timeout(self.deadline, child.wait()).await {
            Ok(status) => status.expect("wait").code(),
            Err(_) => {
                let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
                let _ = child.wait().await;
                panic!(
                    "agentprism {:?} on {} did not finish within {:?}; stderr:\n{}\nthe fake saw: {:#?}",
                    self.args,
                    self.context.backend.name(),
                    self.deadline,
                    self.stderr(),
                    self.context.fake.all_prompts()
                );
            }
        };
        Outcome {
            code,
            stdout: std::fs::read_to_string(&self.stdout_path).unwrap_or_default(),
            stderr: self.stderr(),
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The run id from the `run <id> admitted` line written so far.
    fn run_id(&self) -> String {
        Outcome {
            code: None,
            stdout: String::new(),
            stderr: self.stderr(),
        }
        .run_id()
    }

    /// The processes this one started directly: the pooled agent processes.
    fn children(&self) -> Vec<i32> {
        children_of(self.pid as i32)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && child.try_wait().ok().flatten().is_none()
        {
            let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
    }
}

/// The processes whose parent is `parent`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid …`; the command may contain spaces, so split after `)`.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Whether `pid` is running (a zombie has ended, whatever its parent does about it).
fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        !matches!(state, Some('Z' | 'X'))
    })
}

pub(crate) struct Outcome {
    pub(crate) code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    pub(crate) fn run_id(&self) -> String {
        self.stderr
            .lines()
            .find_map(|line| {
                Some(
                    line.strip_prefix("run ")?
                        .strip_suffix(" admitted")?
                        .to_owned(),
                )
            })
            .unwrap_or_else(|| panic!("no `run <id> admitted` line: {}", self.describe()))
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {}", self.describe()))
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Context {
    pub(crate) async fn new(backend: Backend) -> Context {
        let deps = Deps::find();
        let fake = FakeLlm::start().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let root = dir.path().join("state");
        let project = dir.path().join("project");
        for folder in [&home, &project] {
            std::fs::create_dir_all(folder).expect("create test folders");
        }
        let context = Context {
            backend,
            fake,
            deps,
            _sweeper: Sweeper { home: home.clone() },
            home,
            root,
            project,
            extra_env: Vec::new(),
            dir,
        };
        context.write_config();
        context
    }

    /// Files an adapter reads its provider from, in the test's HOME; opencode and pi get a
    /// reasoning model beside the default one, which only `adapter_effort.rs` chooses.
    fn write_config(&self) {
        let write = |path: PathBuf, text: String| {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("config folder");
            std::fs::write(&path, text).expect("write config");
        };
        match self.backend {
            Backend::Codex => {
                std::fs::create_dir_all(self.home.join(".codex")).expect("CODEX_HOME")
            }
            Backend::Opencode => write(
                self.home.join("opencode.json"),
                json!({
                    "provider": {"mock": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Mock",
                        "options": {"baseURL": self.fake.openai_base_url(), "apiKey": "mock"},
                        "models": {
                            "mock-model": {"name": "Mock model"},
                            "mock-reasoner": {"name": "Mock reasoner", "reasoning": true}
                        }
                    }},
                    "model": "mock/mock-model",
                    "autoupdate": false,
                    "share": "disabled"
                })
                .to_string(),
            ),
            Backend::Pi => {
                write(
                    self.home.join(".pi/agent/models.json"),
                    json!({"providers": {"mock": {
                        "baseUrl": self.fake.openai_base_url(),
                        "api": "openai-completions",
                        "apiKey": "mock",
                        "models": ([false, true].map(|reasoning| json!({
                            "id": if reasoning { "mock-reasoner" } else { "mock-model" },
                            "name": "Mock", "reasoning": reasoning, "input": ["text"],
                            "contextWindow": 128000, "maxTokens": 4096,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}})))
                    }}})
                    .to_string(),
                );
                write(
                    self.home.join(".pi/agent/settings.json"),
                    json!({"defaultProvider": "mock", "defaultModel": "mock-model"}).to_string(),
                );
            }
            Backend::Claude => {}
        }
    }

    /// The variables that point this backend's adapter at the fake.
    fn configure(&self, command: &mut tokio::process::Command) {
        let node = self.deps.get("node");
        let node_dir = node.parent().expect("node folder").to_owned();
        let mut path = format!("{}:/usr/bin:/bin", node_dir.display());
        match self.backend {
            Backend::Claude => {
                command
                    .env("AGENTPRISM_CLAUDE_ACP_CMD", node)
                    .env(
                        "AGENTPRISM_CLAUDE_ACP_ARGS",
                        self.deps.get("claude_acp_entry"),
                    )
                    .env("ANTHROPIC_BASE_URL", self.fake.base_url())
                    .env("ANTHROPIC_API_KEY", "mock")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_ERROR_REPORTING", "1");
            }
            Backend::Codex => {
                // No spaces anywhere: the args variable is split on whitespace. No retries of
                // its own, so a 401 is reported in a second instead of after ~7 s.
                let provider = format!(
                    "model_providers.mock={{name=\"mock\",base_url=\"{}\",wire_api=\"responses\",env_key=\"MOCK_API_KEY\",request_max_retries=0,stream_max_retries=0}}",
                    self.fake.openai_base_url()
                );
                command
                    .env("AGENTPRISM_CODEX_ACP_CMD", self.deps.get("codex_acp_bin"))
                    .env(
                        "AGENTPRISM_CODEX_ACP_ARGS",
                        format!("-c model_provider=\"mock\" -c model=\"mock-model\" -c {provider}"),
                    )
                    .env("CODEX_HOME", self.home.join(".codex"))
                    .env("MOCK_API_KEY", "mock");
            }
            Backend::Opencode => {
                command
                    .env("AGENTPRISM_OPENCODE_ACP_CMD", self.deps.get("opencode_bin"))
                    .env("AGENTPRISM_OPENCODE_ACP_ARGS", "acp")
                    .env("OPENCODE_CONFIG", self.home.join("opencode.json"))
                    .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
                    .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
                    .env("OPENCODE_DISABLE_MODELS_FETCH", "1");
            }
            Backend::Pi => {
                path = format!("{}:{path}", self.deps.get("pi_bin_dir").display());
                command
                    .env("AGENTPRISM_PI_ACP_CMD", node)
                    .env("AGENTPRISM_PI_ACP_ARGS", self.deps.get("pi_acp_entry"))
                    .env("PI_OFFLINE", "1");
            }
        }
        command.env("PATH", path);
    }

    pub(crate) async fn run_script(&self, script: &str) -> Outcome {
        let path = self.dir.path().join("workflow.js");
        std::fs::write(&path, script).expect("write script");
        let project = self.project.display().to_string();
        self.agentprism(&[
            "run",
            &path.display().to_string(),
            "--project-dir",
            &project,
        ])
        .await
    }

    pub(crate) async fn status(&self, run_id: &str) -> Value {
        let outcome = self.agentprism(&["status", run_id, "--json"]).await;
        assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
        outcome.json()
    }

    pub(crate) async fn agentprism(&self, args: &[&str]) -> Outcome {
        self.start(args).finish().await
    }

    /// Starts `agentprism <args>` in its own process group, as the user would, with this
    /// backend pointed at the fake.
    fn start(&self, args: &[&str]) -> Running<'_> {
        let deadline = if args[0] == "status" {
            STATUS_DEADLINE
        } else {
            RUN_DEADLINE
        };
        let output = tempfile::tempdir_in(self.dir.path()).expect("output dir");
        let stdout_path = output.path().join("stdout");
        let stderr_path = output.path().join("stderr");
        let create = |path: &Path| std::fs::File::create(path).expect("output file");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentprism"));
        command
            .args(args)
            .current_dir(&self.project)
            .env_clear()
            .env("HOME", &self.home)
            .env("AGENTPRISM_PERSISTENCE_ROOT", &self.root)
            .env("AGENTPRISM_AGENT_TIMEOUT_MS", "60000")
            .env("AGENTPRISM_ACP_INIT_TIMEOUT_MS", "30000");
        self.configure(&mut command);
        command.envs(self.extra_env.iter().map(|(name, value)| (name, value)));
        command
            .stdin(Stdio::null())
            .stdout(create(&stdout_path))
            .stderr(create(&stderr_path))
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().expect("spawn agentprism");
        Running {
            context: self,
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            deadline,
            pid: child.id().expect("pid"),
            child: Some(child),
            stdout_path,
            stderr_path,
            _output: output,
        }
    }

    /// Asks for the run's status until `settled` holds for it.
    async fn until_status(&self, run_id: &str, settled: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + RUN_DEADLINE;
        loop {
            let status = self.status(run_id).await;
            if settled(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id} did not get there within {RUN_DEADLINE:?}: {status:#}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Each model request the fake answered so far: status and prompt, for failure messages.
    pub(crate) fn fake_log(&self) -> Vec<String> {
        self.fake
            .requests()
            .iter()
            .filter(|request| request.method == "POST")
            .map(|request| {
                let prompt = request
                    .json()
                    .map(|body| crate::support::fake_llm::last_user_text(&body))
                    .unwrap_or_default();
                format!("{} {} {prompt:?}", request.status, request.path)
            })
            .collect()
    }

    pub(crate) async fn assert_no_processes_left(&self) {
        crate::interop::assert_no_process_with_home(&self.home, EXIT_DEADLINE).await;
    }
}

pub(crate) fn header(backend: Backend, name: &str) -> String {
    format!(
        "export const meta = {{ name: '{name}', description: 'adapter test', model: '{}' }};\n",
        backend.name()
    )
}

/// One call, a structured call and `parallel` of 4: every result is exactly the fake's
/// answer, with no adapter warning, banner or retry notice in it.
async fn calls_give_clean_answers(backend: Backend) {
    let context = Context::new(backend).await;
    let script = format!(
        "{}const greeting = await agent('Say hello');\n\
         const verdict = await agent('Report whether the adapter works.', {{ schema: {OK_SCHEMA} }});\n\
         const many = await parallel([1, 2, 3, 4].map((n) => () => agent(`Parallel call ${{n}}`)));\n\
         return {{ greeting, verdict, many }};\n",
        header(backend, "calls")
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let result = outcome.json();
    assert_eq!(
        result["greeting"],
        "MOCK-REPLY: Say hello",
        "{}",
        outcome.describe()
    );
    assert_eq!(
        result["verdict"],
        json!({"ok": true}),
        "{}",
        outcome.describe()
    );
    let many: Vec<Value> = (1..=4)
        .map(|n| json!(format!("MOCK-REPLY: Parallel call {n}")))
        .collect();
    assert_eq!(result["many"], json!(many), "{}", outcome.describe());
    context.assert_no_processes_left().await;
}

/// A provider 401 pauses the run `auth_required` with an authContext naming the backend;
/// once the fake accepts the key again, resume completes the same run, the call reopening
/// its recorded session (all four adapters take it back).
async fn a_401_pauses_and_resume_completes(backend: Backend) {
    let context = Context::new(backend).await;
    context.fake.fail_with(Some(401));
    let script = format!(
        "{}return await agent('Say hello');\n",
        header(backend, "auth")
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(outcome.code, Some(3), "{}", outcome.describe());
    let run_id = outcome.run_id();
    let status = context.status(&run_id).await;
    assert_eq!(status["status"], "paused", "{status:#}");
    assert_eq!(status["reason"], "auth_required", "{status:#}");
    assert_eq!(
        status["outcome"]["authContext"]["backendId"],
        backend.name(),
        "{status:#}"
    );
    context.fake.fail_with(None);
    let resumed = context.agentprism(&["resume", &run_id]).await;
    assert_eq!(resumed.code, Some(0), "{}", resumed.describe());
    // The resumed call reopens the session the pause recorded: the adapter takes it back,
    // and its first turn is the continuation prompt, not the call's prompt again.
    assert_eq!(
        resumed.json(),
        json!(
            "MOCK-REPLY: You were interrupted. Continue the task you were given; when done, \
             give your final answer as asked."
        ),
        "{}",
        resumed.describe()
    );
    context.assert_no_processes_left().await;
}

/// A 429 that says when the limit resets pauses `usage_limit` with that `resetHint`.
///
/// opencode retries a 429 five times by itself, waiting out the `retry-after` each time
/// (nothing in its configuration turns that off), so its 429 says `retry-after: 0` while the
/// body still says the limit resets in an hour: the hint must come from the body.
async fn a_429_pauses_with_its_reset_hint(backend: Backend) {
    let context = Context::new(backend).await;
    let retry_after = match backend {
        Backend::Opencode => " MOCK_RETRY_AFTER=0",
        _ => "",
    };
    let script = format!(
        "{}return await agent('Please answer. MOCK_STATUS=429{retry_after}');\n",
        header(backend, "limit")
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(outcome.code, Some(3), "{}", outcome.describe());
    let status = context.status(&outcome.run_id()).await;
    assert_eq!(status["reason"], "usage_limit", "{status:#}");
    let hint = status["outcome"]["resetHint"].as_str().unwrap_or_default();
    assert!(!hint.is_empty(), "no resetHint: {status:#}");
    // The fake's body says the limit lifts RESET_SECONDS from when it answered.
    let reset_at = status["outcome"]["resetAt"]
        .as_str()
        .and_then(|at| humantime::parse_rfc3339(at).ok())
        .unwrap_or_else(|| panic!("no resetAt: {status:#}"));
    let wait = reset_at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        wait.as_secs() + 120 > RESET_SECONDS && wait.as_secs() <= RESET_SECONDS,
        "resetAt is not about {RESET_SECONDS} s away: {status:#}"
    );
    if backend == Backend::Opencode {
        assert!(hint.contains("3600 s"), "{status:#}");
        let limited = context
            .fake
            .requests()
            .iter()
            .filter(|request| request.status == 429)
            .count();
        assert!(
            limited > 1,
            "opencode did not retry the 429 ({limited} requests)"
        );
    }
    assert!(
        outcome.stderr.contains("usage limit; resets at "),
        "{}",
        outcome.describe()
    );
    context.assert_no_processes_left().await;
}

/// `parallel` of a slow call and a held one, on the backend's one pooled process (pi: on two
/// processes, since pi-acp holds one session at a time): `stop --call 0`, sent to the
/// foreground `agentprism run` (a `cancel-agent` intent it carries out within a second),
/// cancels the slow call while the fake still holds its sibling's reply. The sibling is let
/// go only once call 0 has settled as `AGENT_CANCELLED`, which every adapter reaches by
/// answering `session/cancel` (no session is abandoned), so the sibling's process must still
/// be serving it then. The sibling's answer arrives, the cancelled call is `null`, a call
/// after the `parallel` is answered too, the run completes and no agent process is left.
async fn stop_one_call_while_its_sibling_finishes(backend: Backend) {
    let context = Context::new(backend).await;
    let script = format!(
        "{}const [slow, quick] = await parallel([\n\
           () => agent('Take your time. MOCK_DELAY=60000'),\n\
           () => agent('Answer when let go. MOCK_HOLD'),\n\
         ]);\n\
         const after = await agent('Go on after the stop');\n\
         return {{ slow, quick, after }};\n",
        header(backend, "stop")
    );
    let path = context.dir.path().join("workflow.js");
    std::fs::write(&path, script).expect("write script");
    let path = path.display().to_string();
    let project = context.project.display().to_string();
    let run = context.start(&["run", &path, "--project-dir", &project]);
    if let Err(waiting) = context
        .fake
        .until_waiting(&["MOCK_DELAY", "MOCK_HOLD"], RUN_DEADLINE)
        .await
    {
        panic!(
            "both calls did not reach the fake; waiting: {waiting:?}; stderr:\n{}",
            run.stderr()
        );
    }
    let run_id = run.run_id();
    // Both sessions run on the one pooled process; on pi each has a process of its own.
    let agents = run.children();
    let expected = if backend == Backend::Pi { 2 } else { 1 };
    assert_eq!(agents.len(), expected, "{:?}", described(&agents));

    let stopped = context.agentprism(&["stop", &run_id, "--call", "0"]).await;
    assert_eq!(stopped.code, Some(0), "{}", stopped.describe());
    assert!(
        stopped.stderr.contains("cancelled call 0"),
        "{}",
        stopped.describe()
    );
    let status = context
        .until_status(&run_id, |status| {
            status["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|call| call["index"] == 0 && call["errorCode"].is_string())
        })
        .await;
    let cancelled = status["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|call| call["index"] == 0)
        .expect("call 0");
    assert_eq!(cancelled["errorCode"], "AGENT_CANCELLED", "{status:#}");
    // The sibling is still at the fake, on the same process.
    assert!(
        context
            .fake
            .until_waiting(&["MOCK_HOLD"], Duration::ZERO)
            .await
            .is_ok(),
        "the held call gave up before it was let go"
    );
    // On pi the cancelled call's process may end with its session; the sibling's must not.
    assert!(
        agents.iter().any(|pid| is_alive(*pid)),
        "the sibling's agent process was killed: {:?}",
        described(&agents)
    );

    context.fake.release_held();
    let outcome = run.finish().await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    assert_eq!(
        outcome.json(),
        json!({
            "slow": null,
            "quick": "MOCK-REPLY: Answer when let go. MOCK_HOLD",
            "after": "MOCK-REPLY: Go on after the stop",
        }),
        "{}\nthe fake answered: {:#?}",
        outcome.describe(),
        context.fake_log()
    );
    // The cancel landed: no adapter left the engine to abandon the session.
    assert!(
        !outcome.stderr.contains("abandoning the session"),
        "{}",
        outcome.describe()
    );
    assert_eq!(context.status(&run_id).await["status"], "completed");
    context.assert_no_processes_left().await;
}

fn described(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|pid| format!("{pid}: {}", command_line(*pid)))
        .collect()
}

macro_rules! adapter_tests {
    ($module:ident, $backend:expr $(, $extra:ident)*) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn calls_give_clean_answers() {
                super::calls_give_clean_answers($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_401_pauses_and_resume_completes() {
                super::a_401_pauses_and_resume_completes($backend).await;
            }

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $extra() {
                    super::$extra($backend).await;
                }
            )*
        }
    };
}

adapter_tests!(
    claude,
    Backend::Claude,
    a_429_pauses_with_its_reset_hint,
    stop_one_call_while_its_sibling_finishes
);
adapter_tests!(
    codex,
    Backend::Codex,
    a_429_pauses_with_its_reset_hint,
    stop_one_call_while_its_sibling_finishes
);
adapter_tests!(
    opencode,
    Backend::Opencode,
    a_429_pauses_with_its_reset_hint,
    stop_one_call_while_its_sibling_finishes
);
adapter_tests!(
    pi,
    Backend::Pi,
    a_429_pauses_with_its_reset_hint,
    stop_one_call_while_its_sibling_finishes
);
