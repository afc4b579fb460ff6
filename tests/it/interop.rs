//! Interop: the real `agentprism run` binary driving a real ACP adapter
//! (`@zed-industries/claude-agent-acp`, which runs the Claude Code CLI under it) end to end,
//! offline, against the loopback fake model server in `support::fake_llm`. The mock agent
//! tests show the engine speaks ACP as the spec says; this shows a real agent agrees.
//!
//! Node 22 and the adapter come from `scripts/install-test-deps`, which writes a manifest
//! naming both. Without it these tests fail and say so: a silently skipped interop test would
//! read as a passing one.
//!
//! The child gets a scrubbed environment with a fresh HOME, and that HOME doubles as a tag:
//! every process the run starts inherits it, so after the run the tests look for any process
//! still carrying it (adapters ignore stdin EOF and leave children behind, see
//! `shared/spec/acp.md` §6.2) and a guard kills such leftovers even when a test fails.
//! Every wait has a deadline, so a misbehaving adapter costs at most about a minute.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, asks_for_json};

/// Longest `agentprism run` may take. Two real turns take ~10-20 s on two shared cores (most
/// of it Node starting the Claude Code CLI); the rest is headroom. With the two deadlines
/// below, a test is bounded by about a minute whatever the adapter does.
const RUN_DEADLINE: Duration = Duration::from_secs(40);
/// Longest `agentprism status` may take; it only reads the store.
const STATUS_DEADLINE: Duration = Duration::from_secs(10);
/// How long adapter processes may take to go away once `agentprism run` has returned.
const EXIT_DEADLINE: Duration = Duration::from_secs(10);

/// A structured call's schema, small enough for the fake to answer with a fixed value.
const OK_SCHEMA: &str =
    "{ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_through_claude_agent_acp_complete_offline() {
    let context = InteropContext::new().await;
    let script = format!(
        "export const meta = {{ name: 'interop', description: 'two calls through a real adapter', model: 'claude' }};\n\
         const greeting = await agent('Say hello to the interop test');\n\
         const verdict = await agent('Report whether the interop test works.', {{ schema: {OK_SCHEMA} }});\n\
         return {{ greeting, verdict }};\n"
    );
    let started = Instant::now();
    let outcome = context.run_script(&script).await;
    eprintln!("interop: two-call run took {:?}", started.elapsed());
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let result: Value = serde_json::from_str(outcome.stdout.trim())
        .unwrap_or_else(|error| panic!("result is not JSON ({error}): {}", outcome.describe()));
    let greeting = result["greeting"].as_str().unwrap_or_default();
    assert!(
        greeting.contains("MOCK-REPLY: Say hello to the interop test"),
        "first call's reply: {}",
        outcome.describe()
    );
    assert_eq!(
        result["verdict"],
        json!({"ok": true}),
        "{}",
        outcome.describe()
    );

    let prompts = context.fake.prompts();
    assert!(
        prompts.iter().any(|p| p == "Say hello to the interop test"),
        "the fake never saw the first prompt: {prompts:#?}"
    );
    assert!(
        prompts
            .iter()
            .any(|p| p.starts_with("Report whether the interop test works.") && asks_for_json(p)),
        "the fake never saw the structured prompt with its JSON instructions: {prompts:#?}"
    );
    let requests = context.fake.requests();
    let summary: Vec<String> = requests
        .iter()
        .map(|request| format!("{} {} -> {}", request.method, request.path, request.status))
        .collect();
    eprintln!("interop: the fake model server saw {summary:?}");
    assert!(
        requests
            .iter()
            .all(|request| request.header("x-api-key").is_none_or(|key| key == "mock")),
        "a request carried a key other than the fake one"
    );
    context.assert_no_processes_left().await;
}

/// What a 429 from the model becomes. claude-agent-acp turns it into JSON-RPC -32603 "API
/// Error: 429 … rate_limit_error" (acp.md §3), which `acp::failure` classifies as a usage
/// limit: the call fails with `PROVIDER_USAGE_LIMIT` and the engine pauses the whole run with
/// reason `usage_limit` (exit code 3) rather than returning null from the call, so the run can
/// be resumed once the limit lifts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_model_pauses_the_run_for_its_usage_limit() {
    let context = InteropContext::new().await;
    let script = "export const meta = { name: 'interop-429', description: 'a rate-limited model', model: 'claude' };\n\
                  return await agent('Please answer. MOCK_STATUS=429');\n";
    let started = Instant::now();
    let outcome = context.run_script(script).await;
    eprintln!("interop: rate-limited run took {:?}", started.elapsed());
    assert_eq!(
        outcome.code,
        Some(3),
        "exit code of a paused run: {}",
        outcome.describe()
    );
    let run_id = outcome
        .run_id()
        .unwrap_or_else(|| panic!("no `run <id> admitted` line: {}", outcome.describe()));

    let status = context.status(&run_id).await;
    assert_eq!(status["status"], "paused", "status: {status:#}");
    assert_eq!(status["reason"], "usage_limit", "status: {status:#}");
    assert_eq!(
        status["calls"][0]["errorCode"], "PROVIDER_USAGE_LIMIT",
        "status: {status:#}"
    );
    let limited = context
        .fake
        .requests()
        .iter()
        .filter(|request| request.status == 429)
        .count();
    eprintln!("interop: the fake answered 429 to {limited} request(s)");
    assert!(limited > 0, "the fake never rate-limited a request");
    context.assert_no_processes_left().await;
}

/// Where `scripts/install-test-deps` put Node 22 and the adapter.
struct Deps {
    node: PathBuf,
    adapter_entry: PathBuf,
}

impl Deps {
    /// Reads the manifest the install script writes last; panics with the fix if it is not
    /// there or names files that are gone.
    fn find() -> Deps {
        let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
        let manifest = dir.join("interop-deps.env");
        let missing = |what: &str| -> ! {
            panic!(
                "interop test dependencies are missing ({what}); run `scripts/install-test-deps` \
                 (it installs Node 22 and claude-agent-acp into {} from npm)",
                dir.display()
            )
        };
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|error| missing(&format!("{}: {error}", manifest.display())));
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(PathBuf::from)
                .unwrap_or_else(|| missing(&format!("{} has no {name}", manifest.display())))
        };
        let deps = Deps {
            node: field("node"),
            adapter_entry: field("adapter_entry"),
        };
        for path in [&deps.node, &deps.adapter_entry] {
            if !path.is_file() {
                missing(&format!("{} does not exist", path.display()));
            }
        }
        // AGENTPRISM_CLAUDE_ACP_ARGS is split on whitespace, so the entry path cannot have any.
        assert!(
            !deps
                .adapter_entry
                .to_string_lossy()
                .contains(char::is_whitespace),
            "the adapter path {} contains whitespace; install the deps elsewhere with \
             AGENTPRISM_TEST_DEPS",
            deps.adapter_entry.display()
        );
        deps
    }
}

/// One test's world: its fake model server, deps, and a temp dir holding HOME, the
/// persistence root and the project.
struct InteropContext {
    fake: FakeLlm,
    deps: Deps,
    home: PathBuf,
    root: PathBuf,
    project: PathBuf,
    /// Kills whatever still carries this test's HOME when the test ends, pass or fail.
    _sweeper: Sweeper,
    /// Declared last so the sweeper runs before the folder disappears.
    dir: tempfile::TempDir,
}

/// What one `agentprism` invocation did.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl InteropContext {
    async fn new() -> InteropContext {
        let deps = Deps::find();
        let fake = FakeLlm::start().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let root = dir.path().join("state");
        let project = dir.path().join("project");
        for folder in [&home, &project] {
            std::fs::create_dir_all(folder)
                .unwrap_or_else(|error| panic!("create {}: {error}", folder.display()));
        }
        InteropContext {
            fake,
            deps,
            _sweeper: Sweeper { home: home.clone() },
            home,
            root,
            project,
            dir,
        }
    }

    /// Writes `script` into the temp dir and runs it in the foreground.
    async fn run_script(&self, script: &str) -> Outcome {
        let path = self.dir.path().join("workflow.js");
        std::fs::write(&path, script)
            .unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
        let project = self.project.display().to_string();
        self.agentprism(
            &[
                "run",
                &path.display().to_string(),
                "--project-dir",
                &project,
            ],
            RUN_DEADLINE,
        )
        .await
    }

    async fn status(&self, run_id: &str) -> Value {
        let outcome = self
            .agentprism(&["status", run_id, "--json"], STATUS_DEADLINE)
            .await;
        assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
        serde_json::from_str(outcome.stdout.trim())
            .unwrap_or_else(|error| panic!("status is not JSON ({error}): {}", outcome.describe()))
    }

    /// Runs the real binary with only the variables the run and the adapter need. Output goes
    /// to files so that a run killed at its deadline still shows what it printed.
    async fn agentprism(&self, args: &[&str], deadline: Duration) -> Outcome {
        let node_dir = self.deps.node.parent().expect("node has a folder");
        let output = tempfile::tempdir_in(self.dir.path()).expect("output dir");
        let stdout_path = output.path().join("stdout");
        let stderr_path = output.path().join("stderr");
        let create = |path: &Path| {
            std::fs::File::create(path)
                .unwrap_or_else(|error| panic!("create {}: {error}", path.display()))
        };
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentprism"));
        command
            .args(args)
            .current_dir(&self.project)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display()),
            )
            .env("HOME", &self.home)
            .env("AGENTPRISM_PERSISTENCE_ROOT", &self.root)
            .env("AGENTPRISM_CLAUDE_ACP_CMD", &self.deps.node)
            .env("AGENTPRISM_CLAUDE_ACP_ARGS", &self.deps.adapter_entry)
            // Below RUN_DEADLINE, so a single stuck handshake or turn is reported by the
            // engine (with the adapter's stderr) before our kill would hide it.
            .env("AGENTPRISM_AGENT_TIMEOUT_MS", "30000")
            .env("AGENTPRISM_ACP_INIT_TIMEOUT_MS", "15000")
            .env("ANTHROPIC_BASE_URL", self.fake.base_url())
            .env("ANTHROPIC_API_KEY", "mock")
            // Claude Code would otherwise try telemetry, error reporting and update checks,
            // which offline only cost time.
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .stdin(Stdio::null())
            .stdout(create(&stdout_path))
            .stderr(create(&stderr_path))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn agentprism");
        let pid = child.id().expect("agentprism has a pid");
        let code = match tokio::time::timeout(deadline, child.wait()).await {
            Ok(status) => status.expect("wait for agentprism").code(),
            Err(_) => {
                // Its group only; adapters have their own groups, which the sweeper handles.
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                let _ = child.wait().await;
                let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                panic!(
                    "agentprism {args:?} did not finish within {deadline:?}; stderr:\n{stderr}\n\
                     fake LLM saw: {:#?}",
                    self.fake.prompts()
                );
            }
        };
        Outcome {
            code,
            stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
        }
    }

    /// Waits until no process carries this test's HOME any more.
    async fn assert_no_processes_left(&self) {
        assert_no_process_with_home(&self.home, EXIT_DEADLINE).await;
    }
}

/// Waits up to `within` until no process carries `home` in its environment, or fails the
/// test listing the processes that outlived the run.
pub(crate) async fn assert_no_process_with_home(home: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = processes_with_home(home);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let described: Vec<String> = left
                .iter()
                .map(|pid| format!("{pid}: {}", command_line(*pid)))
                .collect();
            panic!("agent processes outlived the run: {described:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Outcome {
    /// `<id>` from agentprism's `run <id> admitted` line.
    fn run_id(&self) -> Option<String> {
        self.stderr.lines().find_map(|line| {
            let id = line.strip_prefix("run ")?.strip_suffix(" admitted")?;
            Some(id.to_owned())
        })
    }

    fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Kills every process still carrying `home` when dropped, so a failed test does not leave a
/// Node process running for the rest of the test binary (or the machine).
pub(crate) struct Sweeper {
    pub(crate) home: PathBuf,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        for pid in processes_with_home(&self.home) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Processes whose environment has `HOME=<home>`. The home is a fresh temp folder, so only
/// processes started for this test match; zombies show an empty environment and do not.
pub(crate) fn processes_with_home(home: &Path) -> Vec<i32> {
    let wanted = format!("HOME={}", home.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // Unreadable means gone or not ours; either way not a leftover we could kill.
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        })
        .collect()
}

pub(crate) fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}
