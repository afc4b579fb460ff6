//! Spawning an ACP backend process and keeping it on a leash. Every agent runs in its own
//! process group behind an [`AgentProcess`] whose drop kills the whole group, because real
//! adapters ignore stdin EOF (codex, claude once a session exists) and leave children behind
//! (claude); killing only the leader would leak them. [`spawn_agent`] is the one place that
//! starts an agent, so tests and reviewers can see exactly what a child inherits.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::acp::registry::override_variable;
use crate::engine::runner::BackendSpec;
use crate::env::EnvSnapshot;

/// How much of an agent's stderr we keep for error messages.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// A running agent process. Dropping it sends SIGKILL to its process group.
pub struct AgentProcess {
    backend: String,
    /// The command line as shown in error messages.
    command_line: String,
    /// The leader's pid, which is also the process group id (`process_group(0)`).
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Arc<StderrTail>,
    /// `Some(description)` once the leader has been reaped.
    exit: watch::Receiver<Option<String>>,
    /// Set once `terminate` has swept the group, so drop does not signal a process group id
    /// that the system may since have handed to someone else.
    swept: AtomicBool,
}

/// The last few KiB an agent wrote to stderr; shared with the task that drains the pipe.
#[derive(Default)]
pub struct StderrTail {
    bytes: Mutex<VecDeque<u8>>,
}

impl StderrTail {
    fn push(&self, line: &[u8]) {
        let mut bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bytes.extend(line);
        bytes.push_back(b'\n');
        let excess = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
        bytes.drain(..excess);
    }

    /// The kept text, trimmed (lossy at a cut multibyte character).
    pub fn text(&self) -> String {
        let bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (front, back) = bytes.as_slices();
        let mut all = Vec::with_capacity(bytes.len());
        all.extend_from_slice(front);
        all.extend_from_slice(back);
        String::from_utf8_lossy(&all).trim().to_owned()
    }
}

/// Variables a child must not inherit: they belong to our service manager (sd_notify, socket
/// activation, watchdog), and an agent that used them would confuse it.
fn is_private_variable(name: &str) -> bool {
    name == "NOTIFY_SOCKET" || name.starts_with("LISTEN_") || name.starts_with("WATCHDOG_")
}

/// Starts `backend` with `base_env` plus the backend's own `env`, in a new process group,
/// stdin/stdout piped for ACP and stderr drained into a bounded tail (and the debug log).
pub fn spawn_agent(
    backend: &BackendSpec,
    base_env: &EnvSnapshot,
    tracker: &TaskTracker,
) -> Result<AgentProcess, String> {
    let command_line = std::iter::once(backend.command.as_str())
        .chain(backend.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let mut command = Command::new(&backend.command);
    command
        .args(&backend.args)
        .env_clear()
        .envs(
            base_env
                .iter()
                .filter(|(name, _)| !is_private_variable(name)),
        )
        .envs(&backend.env);
    // Again after the backend's own `env`, which could name them too: an agent holding our
    // NOTIFY_SOCKET could tell systemd we are ready or stopping.
    for name in crate::service::notify::CHILD_ENV_REMOVALS {
        command.env_remove(name);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| {
        let hint = override_variable(&backend.id)
            .map(|variable| format!(" (set {variable} to choose another command)"))
            .unwrap_or_default();
        if error.kind() == std::io::ErrorKind::NotFound {
            format!(
                "backend {}: command `{}` not found{hint}",
                backend.id, backend.command
            )
        } else {
            format!(
                "backend {}: cannot start `{command_line}`: {error}{hint}",
                backend.id
            )
        }
    })?;
    let pid = child
        .id()
        .ok_or_else(|| format!("backend {}: `{command_line}` exited at once", backend.id))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = Arc::new(StderrTail::default());
    if let Some(pipe) = child.stderr.take() {
        let tail = stderr.clone();
        let id = backend.id.clone();
        tracker.spawn(async move {
            let mut lines = tokio::io::BufReader::new(pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                match lines.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let trimmed = line.strip_suffix(b"\n").unwrap_or(&line);
                        tracing::debug!(backend = %id, pid, "stderr: {}", String::from_utf8_lossy(trimmed));
                        tail.push(trimmed);
                    }
                }
            }
        });
    }
    let (exit_tx, exit) = watch::channel(None);
    // The child is moved into its waiter so it is reaped as soon as it exits; kill_on_drop
    // still covers a runtime that shuts down first.
    tracker.spawn(async move {
        let description = match child.wait().await {
            Ok(status) => describe_status(status),
            Err(error) => format!("could not be waited for ({error})"),
        };
        let _ = exit_tx.send(Some(description));
    });
    tracing::debug!(backend = %backend.id, pid, command = %command_line, "spawned agent");
    Ok(AgentProcess {
        backend: backend.id.clone(),
        command_line,
        pid,
        stdin,
        stdout,
        stderr,
        exit,
        swept: AtomicBool::new(false),
    })
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by {signal}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => status.to_string(),
    }
}

impl AgentProcess {
    /// The agent's stdin and stdout, once, for the ACP connection.
    pub fn take_stdio(&mut self) -> Option<(ChildStdin, ChildStdout)> {
        Some((self.stdin.take()?, self.stdout.take()?))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    pub fn stderr_handle(&self) -> Arc<StderrTail> {
        self.stderr.clone()
    }

    /// A watch on the leader's exit, for the connection's close reason.
    pub fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit.clone()
    }

    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Waits up to `limit` for the leader to exit; `true` if it did.
    pub async fn wait_exit(&self, limit: Duration) -> bool {
        wait_exit(self.exit.clone(), limit).await.is_some()
    }

    /// Signals the whole process group. A group that is already gone is not an error.
    pub fn signal_group(&self, signal: Signal) {
        let Ok(pgid) = i32::try_from(self.pid) else {
            return;
        };
        match killpg(Pid::from_raw(pgid), signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(error) => {
                tracing::warn!(backend = %self.backend, pid = self.pid, %error, "cannot signal the agent's process group");
            }
        }
    }

    /// Orderly stop after the caller closed stdin: wait for the leader, then SIGTERM the
    /// group, wait, then SIGKILL it. The group is swept with SIGKILL even when the leader left
    /// on its own, because agents leave children behind. Bounded by `2 * grace` plus a short
    /// wait for the reaper.
    pub async fn terminate(&self, grace: Duration) {
        if !self.wait_exit(grace).await {
            self.signal_group(Signal::SIGTERM);
            self.wait_exit(grace).await;
        }
        self.signal_group(Signal::SIGKILL);
        self.swept.store(true, Ordering::Relaxed);
        self.wait_exit(Duration::from_millis(500)).await;
    }
}

/// Waits up to `limit` for the exit description.
pub async fn wait_exit(
    mut exit: watch::Receiver<Option<String>>,
    limit: Duration,
) -> Option<String> {
    let waited = tokio::time::timeout(limit, async {
        exit.wait_for(Option::is_some)
            .await
            .map(|description| description.clone())
    })
    .await;
    match waited {
        Ok(Ok(description)) => description,
        _ => exit.borrow().clone(),
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // Even if the leader already exited, its children may still hold the group.
        if !self.swept.load(Ordering::Relaxed) {
            self.signal_group(Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::engine::runner::BackendOrigin;

    /// An agent never sees the service manager's variables, whether they come from the
    /// daemon's own environment or from the backend's `env`; everything else passes.
    #[tokio::test]
    async fn agents_never_inherit_service_manager_variables() {
        let mut private: Vec<&str> = crate::service::notify::CHILD_ENV_REMOVALS.to_vec();
        // Names the prefixes cover beyond the known list.
        private.push("LISTEN_SOMETHING_NEW");
        private.push("WATCHDOG_OTHER");
        let base = EnvSnapshot::from_pairs(
            private
                .iter()
                .map(|name| (*name, "leaked"))
                .chain([("PATH", "/usr/bin:/bin"), ("AGENTPRISM_KEPT", "base")]),
        );
        let backend = BackendSpec {
            id: "env-dump".into(),
            command: "sh".into(),
            args: vec!["-c".into(), "env".into()],
            env: [
                ("NOTIFY_SOCKET".to_owned(), "/run/from-backend".to_owned()),
                ("LISTEN_FDS".to_owned(), "1".to_owned()),
                ("BACKEND_KEPT".to_owned(), "backend".to_owned()),
            ]
            .into(),
            session_meta: None,
            origin: BackendOrigin::Host,
        };
        let tracker = TaskTracker::new();
        let mut agent = spawn_agent(&backend, &base, &tracker).expect("spawn sh");
        let (_stdin, mut stdout) = agent.take_stdio().unwrap();
        let mut text = String::new();
        tokio::time::timeout(Duration::from_secs(30), stdout.read_to_string(&mut text))
            .await
            .expect("sh printed its environment")
            .unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .collect();
        for name in &private {
            assert!(!names.contains(name), "{name} reached the agent:\n{text}");
        }
        assert!(text.lines().any(|l| l == "AGENTPRISM_KEPT=base"), "{text}");
        assert!(text.lines().any(|l| l == "BACKEND_KEPT=backend"), "{text}");
        agent.terminate(Duration::from_secs(1)).await;
    }
}
