//! Spawning an ACP backend process and keeping it on a leash. Every agent runs in its own
//! process group behind an [`AgentProcess`] whose drop kills the whole group, because real
//! adapters ignore stdin EOF (codex, claude once a session exists) and leave children behind
//! (claude); killing only the leader would leak them. [`spawn_agent`] is the one place that
//! starts an agent, so tests and reviewers can see exactly what a child inherits.
//!
//! Drop runs only while the owner lives. So that no agent survives an owner that dies
//! without unwinding (SIGKILL included), the group's leader is, when [`Supervision`] names
//! one, a reaper ([`crate::acp::reaper`]: the agentprism binary re-executed) that forks the
//! agent with the inherited pipes and ends the group when the owner dies. Two things tell it:
//! a death signal armed against the thread that spawned it, which is why every spawn goes
//! through one spawner thread that lives as long as the process, and EOF on a socket whose
//! other end only this [`AgentProcess`] holds. Each group is also recorded on disk
//! ([`crate::acp::groups`]) so the next owner can end what a reaper could not. Without a
//! reaper (library embedders and unit tests, whose binary is not agentprism) the agent leads
//! its own group and gets only a death signal of its own, which does not reach its children.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};
use tokio_util::task::TaskTracker;

use crate::acp::groups::{self, GroupRecord};
use crate::acp::reaper;
use crate::acp::registry::override_variable;
use crate::acp::stderr::{self, StderrMark, StderrTail};
use crate::engine::runner::BackendSpec;
use crate::env::EnvSnapshot;

/// How agents are tied to the process that owns them (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct Supervision {
    /// The agentprism binary to run as each group's leader (`agentprism agent-reaper`);
    /// `None` makes the agent itself the leader.
    pub reaper: Option<PathBuf>,
    /// The folder of per-group records (`R/agent-groups`); `None` keeps none.
    pub records: Option<PathBuf>,
}

impl Supervision {
    /// What every agentprism process that runs agents uses: this very binary as the reaper
    /// (resolved once; see [`own_binary`]) and records under `persistence_root`.
    pub(crate) fn for_owner(persistence_root: &Path) -> std::io::Result<Supervision> {
        Ok(Supervision {
            reaper: Some(own_binary()?),
            records: Some(persistence_root.join(groups::FOLDER)),
        })
    }
}

/// The running agentprism binary, as a path a child can exec. On Linux that is
/// `/proc/self/exe`, which the forked child resolves to the same file even after a package
/// upgrade replaced or removed it on disk (so reaper and owner are always one version);
/// elsewhere `current_exe()`.
pub(crate) fn own_binary() -> std::io::Result<PathBuf> {
    let magic = Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && magic.exists() {
        return Ok(magic.to_path_buf());
    }
    std::env::current_exe()
}

/// How long a reaper may take to say whether the agent started.
const REAPER_REPORT_DEADLINE: Duration = Duration::from_secs(30);

/// A running agent process. Dropping it sends SIGKILL to its process group.
pub(crate) struct AgentProcess {
    backend: String,
    /// The command line as shown in error messages.
    command_line: String,
    /// The leader's pid, which is also the process group id (`process_group(0)`): the
    /// reaper's, or the agent's when there is no reaper.
    pid: u32,
    /// The agent's own pid under a reaper.
    agent_pid: Option<u32>,
    /// Our end of the reaper's socket pair: closing it (drop) makes the reaper end the group.
    owner_end: Option<OwnedFd>,
    /// The group's record on disk, removed on drop.
    record: Option<PathBuf>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Arc<StderrTail>,
    /// `Some(description)` once the leader has been reaped.
    exit: watch::Receiver<Option<String>>,
    /// Set once the group has been swept (by `terminate`, or right after the leader was
    /// reaped), so drop does not signal a process group id that the system may since have
    /// handed to someone else.
    swept: Arc<AtomicBool>,
}

/// Variables a child must not inherit: they belong to our service manager (sd_notify, socket
/// activation, watchdog), and an agent that used them would confuse it; or they describe the
/// session of the host that launched the first shim ([`crate::env::HOST_SESSION_MARKERS`]),
/// which is not the agent's session and has usually ended; or they lead to our secrets.
fn is_private_variable(name: &str) -> bool {
    name == "NOTIFY_SOCKET"
        || name.starts_with("LISTEN_")
        || name.starts_with("WATCHDOG_")
        || crate::env::is_host_session_marker(name)
        // The folder server's token, store, principal header and pack key, and their files.
        || name.starts_with("MHL_SERVE_")
        // Where systemd put this service's credentials (`crate::util::secret`).
        || name == crate::util::secret::CREDENTIALS_DIRECTORY
}

/// Starts `backend` with `base_env` plus the backend's own `env`, in a new process group led
/// by a reaper when `supervision` names one, stdin/stdout piped for ACP (straight to the
/// agent) and stderr drained into a bounded tail (and the debug log).
pub(crate) async fn spawn_agent(
    backend: &BackendSpec,
    base_env: &EnvSnapshot,
    supervision: &Supervision,
    tracker: &TaskTracker,
) -> Result<AgentProcess, String> {
    let command_line = std::iter::once(backend.command.as_str())
        .chain(backend.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    if Path::new(&backend.command).file_name() == Some(OsStr::new("npx")) {
        // npx downloads the adapter on its first start: say so, or a `validate` or `config`
        // that waits for it looks hung.
        crate::logging::notice(format_args!(
            "backend {}: starting `{command_line}` (npx downloads the adapter on its first start, which can take a minute)",
            backend.id
        ));
    }
    let (command, owner_end) = agent_command(backend, base_env, supervision)?;
    let records = supervision
        .records
        .clone()
        .filter(|_| supervision.reaper.is_some());
    let (mut child, record) = spawn_on_spawner(command, records, &backend.id)
        .await
        .map_err(|error| {
            start_error(
                backend,
                &command_line,
                error.kind() == std::io::ErrorKind::NotFound,
                &error.to_string(),
            )
        })?;
    let pid = child
        .id()
        .ok_or_else(|| format!("backend {}: `{command_line}` exited at once", backend.id))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = match child.stderr.take() {
        Some(pipe) => {
            let (stderr, drain) = stderr::drain(pipe, backend.id.clone(), pid);
            tracker.spawn(drain);
            stderr
        }
        None => Arc::new(StderrTail::detached()),
    };
    let (exit_tx, exit) = watch::channel(None);
    let swept = Arc::new(AtomicBool::new(false));
    tracker.spawn(watch_exit(child, pid, swept.clone(), exit_tx));
    let mut process = AgentProcess {
        backend: backend.id.clone(),
        command_line,
        pid,
        agent_pid: None,
        owner_end: None,
        record,
        stdin,
        stdout,
        stderr,
        exit,
        swept,
    };
    if let Some(owner_end) = owner_end {
        // On an error `process` is dropped here, which kills whatever the reaper started.
        let (agent_pid, owner_end) = read_reaper_report(owner_end)
            .await
            .map_err(|report| reaper_failure(backend, &process, report))?;
        process.agent_pid = Some(agent_pid);
        process.owner_end = Some(owner_end);
    }
    tracing::debug!(backend = %backend.id, pid, agent_pid = ?process.agent_pid, command = %process.command_line, "spawned agent");
    Ok(process)
}

/// The command that starts `backend`: through the reaper (with the owner's end of its socket
/// returned) when `supervision` names one, else the agent itself with a death signal armed;
/// either way with a cleaned environment, piped stdio and a process group of its own.
fn agent_command(
    backend: &BackendSpec,
    base_env: &EnvSnapshot,
    supervision: &Supervision,
) -> Result<(Command, Option<UnixStream>), String> {
    let owner_pid = std::process::id();
    let (mut command, owner_end) = match &supervision.reaper {
        Some(program) => {
            let (owner_end, reaper_end) = UnixStream::pair().map_err(|error| {
                format!(
                    "backend {}: cannot create the reaper's socket: {error}",
                    backend.id
                )
            })?;
            let mut command = Command::new(program);
            command
                .arg0("agentprism")
                .arg(reaper::SUBCOMMAND)
                .arg("--owner")
                .arg(owner_pid.to_string())
                .arg("--")
                .arg(&backend.command)
                .args(&backend.args);
            place_owner_socket(&mut command, OwnedFd::from(reaper_end));
            (command, Some(owner_end))
        }
        None => {
            let mut command = Command::new(&backend.command);
            command.args(&backend.args);
            arm_own_death_signal(&mut command, owner_pid);
            (command, None)
        }
    };
    command
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
    Ok((command, owner_end))
}

/// Waits for the child, so it is reaped as soon as it exits (kill_on_drop still covers a
/// runtime that shuts down first), then kills what is left of its group and says how it
/// ended. The group dies with its leader: whatever is left of it gets SIGKILL at once (an
/// idle pooled agent may sit in the pool for a long time before anyone drops it). A group
/// with members left keeps its id from reuse; an empty one answers ESRCH, unless its id came
/// back within these microseconds.
async fn watch_exit(
    mut child: Child,
    pid: u32,
    swept: Arc<AtomicBool>,
    exit_tx: watch::Sender<Option<String>>,
) {
    let description = match child.wait().await {
        Ok(status) => describe_status(status),
        Err(error) => format!("could not be waited for ({error})"),
    };
    if let Ok(pgid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    swept.store(true, Ordering::Relaxed);
    let _ = exit_tx.send(Some(description));
}

/// The start error of an agent its reaper could not start, with the agent's stderr tail.
fn reaper_failure(backend: &BackendSpec, process: &AgentProcess, report: ReaperReport) -> String {
    match report {
        ReaperReport::NotFound(text) => start_error(backend, &process.command_line, true, &text),
        ReaperReport::Failed(text) => {
            let message = start_error(backend, &process.command_line, false, &text);
            let tail = process.stderr_tail();
            if tail.is_empty() {
                message
            } else {
                format!("{message}; stderr: {tail}")
            }
        }
    }
}

/// The message of a spawn that failed, with the override hint where the backend has one.
fn start_error(backend: &BackendSpec, command_line: &str, not_found: bool, error: &str) -> String {
    let hint = override_variable(&backend.id)
        .map(|variable| format!(" (set {variable} to choose another command)"))
        .unwrap_or_default();
    if not_found {
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
}

/// Puts the reaper's end of the socket pair at [`reaper::OWNER_FD`] in the child, without
/// close-on-exec; our copy closes when the command is dropped after the spawn.
fn place_owner_socket(command: &mut Command, reaper_end: OwnedFd) {
    // SAFETY: between fork and exec the closure makes one raw syscall (dup2, or fcntl when
    // the fd already has the right number), both async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let raw = reaper_end.as_raw_fd();
            let done = if raw == reaper::OWNER_FD {
                nix::libc::fcntl(raw, nix::libc::F_SETFD, 0)
            } else {
                nix::libc::dup2(raw, reaper::OWNER_FD)
            };
            if done < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Without a reaper, the agent at least dies with the spawner thread (Linux); its children
/// do not.
#[cfg_attr(
    not(any(target_os = "linux", target_os = "android")),
    expect(unused_variables, reason = "no death signal outside Linux")
)]
fn arm_own_death_signal(command: &mut Command, owner_pid: u32) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: between fork and exec the closure makes two raw syscalls (prctl, getppid),
    // both async-signal-safe; it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if i64::from(nix::unistd::getppid().as_raw()) != i64::from(owner_pid) {
                return Err(std::io::Error::other("the owner is gone"));
            }
            Ok(())
        });
    }
}

/// Why a reaper did not start its agent.
enum ReaperReport {
    NotFound(String),
    Failed(String),
}

/// Reads the reaper's one status line (`ok <pid>` or `error <kind> <message>`) and hands
/// back the agent's pid and our end of the socket, which from now on only has to stay open.
async fn read_reaper_report(owner_end: UnixStream) -> Result<(u32, OwnedFd), ReaperReport> {
    let failed = |text: String| ReaperReport::Failed(text);
    owner_end
        .set_nonblocking(true)
        .map_err(|e| failed(format!("reaper socket: {e}")))?;
    let mut stream = tokio::net::UnixStream::from_std(owner_end)
        .map_err(|e| failed(format!("reaper socket: {e}")))?;
    let mut line = Vec::new();
    let read = tokio::time::timeout(REAPER_REPORT_DEADLINE, async {
        let mut buffer = [0u8; 512];
        while !line.contains(&b'\n') && line.len() < 4096 {
            match stream.read(&mut buffer).await {
                Ok(0) => return Err("the agent reaper exited before starting the agent".to_owned()),
                Ok(n) => line.extend_from_slice(&buffer[..n]),
                Err(error) => return Err(format!("reading the agent reaper's report: {error}")),
            }
        }
        Ok(())
    })
    .await;
    match read {
        Err(_) => {
            return Err(failed(format!(
                "the agent reaper did not report within {} s",
                REAPER_REPORT_DEADLINE.as_secs()
            )));
        }
        Ok(Err(text)) => return Err(failed(text)),
        Ok(Ok(())) => {}
    }
    let text = String::from_utf8_lossy(&line);
    let text = text.lines().next().unwrap_or_default().to_owned();
    if let Some(pid) = text.strip_prefix("ok ") {
        let pid = pid
            .trim()
            .parse()
            .map_err(|_| failed(format!("the agent reaper reported {text:?}")))?;
        let std_stream = stream
            .into_std()
            .map_err(|e| failed(format!("reaper socket: {e}")))?;
        return Ok((pid, OwnedFd::from(std_stream)));
    }
    if let Some(message) = text.strip_prefix("error not-found ") {
        return Err(ReaperReport::NotFound(message.to_owned()));
    }
    let message = text.strip_prefix("error other ").unwrap_or(&text);
    Err(failed(message.to_owned()))
}

/// One spawn request for the spawner thread.
struct SpawnJob {
    command: Command,
    /// The runtime the child's pipes and waiter belong to.
    runtime: tokio::runtime::Handle,
    /// `(folder, backend id)` when the group is to be recorded.
    record: Option<(PathBuf, String)>,
    reply: oneshot::Sender<std::io::Result<(Child, Option<PathBuf>)>>,
}

/// Spawns `command` on the spawner thread and records its group when `records` is given.
/// Every child of this process is forked by that one thread, which never exits, so a death
/// signal armed in a child fires when the process dies, not when some worker thread does.
async fn spawn_on_spawner(
    command: Command,
    records: Option<PathBuf>,
    backend: &str,
) -> std::io::Result<(Child, Option<PathBuf>)> {
    let (reply, answer) = oneshot::channel();
    let job = SpawnJob {
        command,
        runtime: tokio::runtime::Handle::current(),
        record: records.map(|folder| (folder, backend.to_owned())),
        reply,
    };
    spawner()?
        .send(job)
        .map_err(|_| std::io::Error::other("the agent spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| std::io::Error::other("the agent spawner thread dropped the request"))?
}

fn spawner() -> std::io::Result<&'static mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnJob>, String>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (sender, jobs) = mpsc::channel::<SpawnJob>();
            std::thread::Builder::new()
                .name("agentprism-spawner".into())
                .spawn(move || {
                    // The sender lives in a static, so this loop (and the thread) ends only
                    // with the process.
                    for job in jobs {
                        run_spawn_job(job);
                    }
                })
                .map(|_| sender)
                .map_err(|error| format!("cannot start the agent spawner thread: {error}"))
        })
        .as_ref()
        .map_err(|error| std::io::Error::other(error.clone()))
}

fn run_spawn_job(job: SpawnJob) {
    let SpawnJob {
        mut command,
        runtime,
        record,
        reply,
    } = job;
    let spawned = {
        let _context = runtime.enter();
        command.spawn()
    };
    // Closes our copy of the reaper's end of the socket pair (held by the pre_exec closure).
    drop(command);
    let result = spawned.map(|child| {
        let path = record.and_then(|(folder, backend)| {
            let record = GroupRecord::for_leader(child.id()?, &backend)?;
            groups::write(&folder, &record)
                .inspect_err(|error| {
                    tracing::warn!(%error, folder = %folder.display(), "cannot record an agent process group");
                })
                .ok()
        });
        (child, path)
    });
    if let Err(Ok((child, path))) = reply.send(result) {
        // The caller gave up: end what we started.
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _context = runtime.enter();
        drop(child);
        if let Some(path) = path {
            groups::remove(&path);
        }
    }
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
    pub(crate) fn take_stdio(&mut self) -> Option<(ChildStdin, ChildStdout)> {
        Some((self.stdin.take()?, self.stdout.take()?))
    }

    /// The group leader's pid (the process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn command_line(&self) -> &str {
        &self.command_line
    }

    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// The current end of the agent's stderr, taken when a request starts.
    pub(crate) fn stderr_mark(&self) -> StderrMark {
        self.stderr.mark()
    }

    /// What the agent wrote to stderr after `mark`, once the drain has read what the pipe
    /// holds: the part of a shared adapter's stderr that belongs to one failed request.
    pub(crate) async fn stderr_since(&self, mark: StderrMark) -> String {
        self.stderr.catch_up().await;
        self.stderr.since(mark)
    }

    /// A watch on the leader's exit, for the connection's close reason.
    pub(crate) fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit.clone()
    }

    pub(crate) fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Waits up to `limit` for the leader to exit; `true` if it did.
    pub(crate) async fn wait_exit(&self, limit: Duration) -> bool {
        wait_exit(self.exit.clone(), limit).await.is_some()
    }

    /// Signals the whole process group. A group that is already gone is not an error; one
    /// that was swept is never signalled again (its id may belong to someone else by now).
    pub(crate) fn signal_group(&self, signal: Signal) {
        if self.swept.load(Ordering::Relaxed) {
            return;
        }
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
    /// on its own, because agents leave children behind (the waiter does that as soon as it
    /// reaps the leader). Bounded by `2 * grace` plus a short wait for the reaper.
    pub(crate) async fn terminate(&self, grace: Duration) {
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
pub(crate) async fn wait_exit(
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
        // Even if the leader already exited, its children may still hold the group (unless
        // the waiter swept it, which `signal_group` knows).
        self.signal_group(Signal::SIGKILL);
        // A reaper still running ends the group on this EOF too.
        self.owner_end.take();
        if let Some(path) = self.record.take() {
            groups::remove(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::engine::runner::BackendOrigin;

    /// An agent never sees the service manager's variables, whether they come from the
    /// daemon's own environment or from the backend's `env`, nor the host session markers of
    /// the daemon's environment; everything else passes, the user's credentials and
    /// `CLAUDE_CODE_*` settings included.
    #[tokio::test]
    async fn agents_never_inherit_service_manager_variables_or_host_session_markers() {
        let mut private: Vec<&str> = crate::service::notify::CHILD_ENV_REMOVALS.to_vec();
        // Names the prefixes cover beyond the known list.
        private.push("LISTEN_SOMETHING_NEW");
        private.push("WATCHDOG_OTHER");
        private.extend(crate::env::HOST_SESSION_MARKERS);
        let kept = [
            ("PATH", "/usr/bin:/bin"),
            ("AGENTPRISM_KEPT", "base"),
            ("ANTHROPIC_API_KEY", "sk-user"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ("CLAUDE_CODE_USE_BEDROCK", "1"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "user-token"),
        ];
        let base =
            EnvSnapshot::from_pairs(private.iter().map(|name| (*name, "leaked")).chain(kept));
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
            structured_output_tool: true,
            file_roots: Vec::new(),
            origin: BackendOrigin::Host,
        };
        let tracker = TaskTracker::new();
        let mut agent = spawn_agent(&backend, &base, &Supervision::default(), &tracker)
            .await
            .expect("spawn sh");
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
        for (name, value) in kept {
            assert!(
                text.lines().any(|l| l == format!("{name}={value}")),
                "{name} must pass:\n{text}"
            );
        }
        assert!(text.lines().any(|l| l == "BACKEND_KEPT=backend"), "{text}");
        agent.terminate(Duration::from_secs(1)).await;
    }
}
