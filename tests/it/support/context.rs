//! `TestContext`: one test's private world. Its own HOME, persistence root and project
//! folder in a temp dir, a scrubbed environment (no inherited `AGENTPRISM_*`), the real
//! binaries from `CARGO_BIN_EXE_*`, and the scripted mock agent as a backend. Every child
//! runs in its own process group, which is killed when the test is done with it.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Long enough for a loaded 2-core machine; a healthy command takes milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct TestContext {
    pub dir: tempfile::TempDir,
    pub env: BTreeMap<String, String>,
}

/// What a finished command left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// The run id from `run <id> admitted` on stderr.
    pub fn run_id(&self) -> String {
        run_id_in(&self.stderr).unwrap_or_else(|| panic!("no run id in stderr:\n{}", self.stderr))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

pub fn run_id_in(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("run ")?;
        let (id, tail) = rest.split_once(' ')?;
        (tail.starts_with("admitted")).then(|| id.to_owned())
    })
}

pub fn agentprism_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentprism"))
}

pub fn mock_agent_binary() -> PathBuf {
    let path = agentprism_binary()
        .parent()
        .expect("bin dir")
        .join("examples/mock_acp_agent");
    assert!(
        path.exists(),
        "{} does not exist: run `cargo build --examples` (plain `cargo test` builds it)",
        path.display()
    );
    path
}

impl TestContext {
    pub fn new() -> TestContext {
        let dir = tempfile::tempdir().expect("temp dir");
        for folder in ["home", "state", "project", "tmp"] {
            std::fs::create_dir_all(dir.path().join(folder)).expect("create folder");
        }
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        );
        env.insert(
            "HOME".to_owned(),
            dir.path().join("home").to_string_lossy().into_owned(),
        );
        env.insert(
            "AGENTPRISM_PERSISTENCE_ROOT".to_owned(),
            dir.path().join("state").to_string_lossy().into_owned(),
        );
        // Everything a child puts under the system's temporary folder (a folder server's
        // temporary state folder, which a SIGKILL at the end of a test leaves behind) lands
        // in the test's own folder and goes with it.
        env.insert(
            "TMPDIR".to_owned(),
            dir.path().join("tmp").to_string_lossy().into_owned(),
        );
        let context = TestContext { dir, env };
        context.with_mock_backend(json!({}))
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn project(&self) -> PathBuf {
        self.path("project")
    }

    pub fn state(&self) -> PathBuf {
        self.path("state")
    }

    /// Registers the mock agent as backend `mock`, with extra env for it (its knobs).
    pub fn with_mock_backend(mut self, env: Value) -> TestContext {
        let backends = json!({"mock": {"command": mock_agent_binary(), "env": env}});
        self.env
            .insert("AGENTPRISM_BACKENDS".into(), backends.to_string());
        self
    }

    pub fn set(mut self, key: &str, value: impl Into<String>) -> TestContext {
        self.env.insert(key.to_owned(), value.into());
        self
    }

    pub fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, text).expect("write file");
        path
    }

    /// A command for `agentprism` with this context's environment only.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(agentprism_binary());
        command
            .args(args)
            .env_clear()
            .envs(&self.env)
            .current_dir(self.project())
            .process_group(0);
        command
    }

    /// Starts `agentprism` in the background.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentprism");
        Running { child: Some(child) }
    }

    /// Runs `agentprism` to completion within the deadline.
    pub fn run(&self, args: &[&str]) -> Finished {
        self.spawn(args).finish(DEADLINE)
    }

    /// `agentprism status <id> --json`.
    pub fn status(&self, run_id: &str) -> Value {
        let finished = self.run(&["status", run_id, "--json"]);
        assert_eq!(finished.code(), 0, "status failed: {}", finished.stderr);
        finished.json()
    }
}

/// A background `agentprism`; its process group is killed if it is dropped unfinished.
pub struct Running {
    child: Option<Child>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal to the process (not its agents, which have their own groups).
    pub fn signal(&self, signal: Signal) {
        let _ = nix::sys::signal::kill(Pid::from_raw(self.pid() as i32), signal);
    }

    pub fn finish(mut self, deadline: Duration) -> Finished {
        finish_child(self.child.take().expect("running"), deadline)
    }
}

/// Waits for `child` within `deadline`, collecting its stdout and stderr; kills its process
/// group and fails the test if it does not finish.
pub fn finish_child(mut child: Child, deadline: Duration) -> Finished {
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "command did not finish within {deadline:?}; stderr:\n{}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Finished {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// Whether a process is gone (or a zombie nobody reaped: it runs nothing).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|rest| rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
    }
}

/// Waits until every pid is gone.
pub fn wait_gone(pids: &[i32]) {
    let started = Instant::now();
    while !pids.iter().all(|pid| process_gone(*pid)) {
        assert!(
            started.elapsed() < DEADLINE,
            "processes still alive: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids a mock agent wrote to its pid file.
pub fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Makes `command` run as `uid` (group `uid` too, no supplementary groups): for tests of
/// what another user's process may do. Needs root.
pub fn run_as(command: &mut Command, uid: u32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure makes three raw syscalls, which are
    // async-signal-safe; it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            let gid = nix::unistd::Gid::from_raw(uid);
            nix::unistd::setgroups(&[gid])?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            Ok(())
        });
    }
}

/// The prompts the mock agents of `ctx` logged to `log` (their `MOCK_ACP_LOG`), in order.
pub fn prompts_in_log(ctx: &TestContext, log: &str) -> Vec<String> {
    std::fs::read_to_string(ctx.path(log))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == "session/prompt")
        .map(|message| {
            message["params"]["prompt"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The first text block of a tool result.
pub fn first_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
