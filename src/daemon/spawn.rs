//! Starting the daemon in the background and waiting until it is ready, the way sccache and
//! atuin auto-start theirs: take the family's spawn lock, probe again (the previous holder may
//! have started one), spawn, and wait with a deadline for the family pointer to name a daemon
//! whose `/healthz` proves its identity. Every failure says how to see why: run
//! `agentprism daemon run` in the foreground, and where the log is.
//!
//! A spawned daemon is detached from whoever started it ([`spawn_daemon`]): a new session
//! (`setsid`, so the host's Ctrl-C or terminal hang-up does not reach it), descriptors above
//! stderr marked close-on-exec (a host's jobserver pipe or socket must not stay open in a
//! process that lives for hours), umask 077, stdin from `/dev/null`, stdout and stderr
//! appended to the daemon log, working folder `$HOME`, and no service-manager variables
//! (`NOTIFY_SOCKET`, `LISTEN_*`, `WATCHDOG_*` belong to whoever the manager started).
//!
//! `agentprism daemon start` and the `agentprism-workflow` shim both call [`ensure_daemon`].

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::probe::Probe;
use super::probe_family;
use crate::discovery::spawn_lock::SpawnLock;
use crate::discovery::{DaemonRecord, DiscoveryError, Paths, RunControlKey, compare_versions};
use crate::env::{self, EnvSnapshot};

/// How long a spawner waits for its daemon to become ready.
pub(crate) const READY_DEADLINE: Duration = Duration::from_secs(10);
/// How long a live daemon that does not answer `/healthz` is given before the spawner gives
/// up (it never spawns a second daemon over the same store).
pub(crate) const UNRESPONSIVE_DEADLINE: Duration = Duration::from_secs(10);
/// How often readiness and an unresponsive daemon are re-probed.
const POLL: Duration = Duration::from_millis(50);
/// The readiness poll right after spawning, for the first `FAST_POLL_WINDOW`.
const FAST_POLL: Duration = Duration::from_millis(5);
const FAST_POLL_WINDOW: Duration = Duration::from_millis(500);
/// How often an unresponsive daemon is re-probed (each probe itself waits up to 2 s).
const UNRESPONSIVE_POLL: Duration = Duration::from_millis(500);

/// The arguments of a self-spawned daemon: `daemon run --instance-id <uuid> [--supersede]
/// [--port N] --log-file <log>`.
#[derive(Clone, Debug)]
pub(crate) struct SpawnArgs {
    /// Lets the spawner (and `daemon status`) recognise this particular daemon.
    pub instance_id: String,
    pub supersede: bool,
    /// An explicit port; `None` leaves it to `AGENTPRISM_DAEMON_PORT` or the default.
    pub port: Option<u16>,
}

impl SpawnArgs {
    /// A fresh instance id, no supersession, the configured port.
    pub(crate) fn new() -> SpawnArgs {
        SpawnArgs {
            instance_id: uuid::Uuid::new_v4().to_string(),
            supersede: false,
            port: None,
        }
    }

    /// The argument list after the binary.
    pub(crate) fn to_args(&self, log: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "daemon".into(),
            "run".into(),
            "--instance-id".into(),
            self.instance_id.clone().into(),
        ];
        if self.supersede {
            args.push("--supersede".into());
        }
        if let Some(port) = self.port {
            args.push("--port".into());
            args.push(port.to_string().into());
        }
        args.push("--log-file".into());
        args.push(log.as_os_str().to_owned());
        args
    }
}

impl Default for SpawnArgs {
    fn default() -> Self {
        SpawnArgs::new()
    }
}

/// Why no daemon could be made ready. Every message ends with a hint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnsureError {
    #[error(
        "the agentprism daemon (pid {pid}, {url}) is running but did not answer /healthz within \
         {waited:?}; it may be stopped (SIGSTOP) or overloaded. Not starting a second daemon over \
         the same store. `agentprism daemon status` shows it, `agentprism daemon stop` ends it; \
         log: {log}"
    )]
    Unresponsive {
        pid: u32,
        url: String,
        waited: Duration,
        log: PathBuf,
    },
    #[error("{0}")]
    Discovery(#[from] DiscoveryError),
    #[error(
        "could not start the agentprism daemon {binary}: {source}. Set {var} to the agentprism \
         binary, or run `{binary} daemon run` in a terminal to see why",
        var = env::DAEMON_BIN
    )]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the agentprism daemon exited ({status}) before it was ready. Run `{binary} daemon run` \
         in a terminal to see why; log: {log}{tail}"
    )]
    Exited {
        status: String,
        binary: String,
        log: PathBuf,
        tail: String,
    },
    #[error(
        "the agentprism daemon (pid {pid}) was not ready after {waited:?}. Run `{binary} daemon \
         run` in a terminal to see why; log: {log}{tail}"
    )]
    NotReady {
        pid: u32,
        waited: Duration,
        binary: String,
        log: PathBuf,
        tail: String,
    },
}

/// How [`ensure_daemon`] finds or starts a daemon.
#[derive(Clone, Debug)]
pub(crate) struct EnsureOptions {
    /// The `agentprism` binary to spawn ([`daemon_binary`]).
    pub binary: PathBuf,
    /// `--port` for a spawned daemon; `None` lets it read `AGENTPRISM_DAEMON_PORT`.
    pub port: Option<u16>,
    pub lock_deadline: Duration,
    pub ready_deadline: Duration,
    pub unresponsive_deadline: Duration,
    /// Set when `daemon install` put this family under a service manager: a cold start
    /// (or a successor) is asked of the manager first, then self-spawned if that fails.
    pub managed: Option<ManagedStart>,
}

/// Starting a daemon through the service manager `daemon install` set up (daemon.md 2).
#[derive(Clone, Debug)]
pub(crate) struct ManagedStart {
    pub record: crate::service::install::ManagedRecord,
    pub paths: crate::service::install::InstallPaths,
    /// The version to start (`agentprism@<version>.service`).
    pub version: String,
}

impl ManagedStart {
    /// The managed setup for a shim of `fingerprint` and `version`, if `managed.json` exists
    /// and was written for this env family.
    pub(crate) fn for_family(
        env: &EnvSnapshot,
        fingerprint: &str,
        version: &str,
    ) -> Option<ManagedStart> {
        let home = PathBuf::from(env.home()?);
        let paths = crate::service::install::InstallPaths {
            binary: PathBuf::new(),
            log: Paths::from_env(env).ok()?.daemon_log(),
            uid: nix::unistd::getuid().as_raw(),
            tool_path: OsString::from(env.path().unwrap_or(crate::service::launchd::DEFAULT_PATH)),
            home,
        };
        let record = crate::service::install::read_managed(&paths)?;
        (record.fingerprint == fingerprint).then(|| ManagedStart {
            paths: crate::service::install::InstallPaths {
                binary: record.binary.clone(),
                ..paths
            },
            record,
            version: version.to_owned(),
        })
    }

    /// Asks the manager; `Err` says why it did not (the caller self-spawns instead).
    async fn start(&self) -> Result<(), String> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            crate::service::install::start_managed(&this.record, &this.paths, &this.version)
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
    }
}

impl EnsureOptions {
    /// The daemon.md deadlines (10 s each) and the binary from [`daemon_binary`].
    pub(crate) fn new(binary: PathBuf) -> EnsureOptions {
        EnsureOptions {
            binary,
            port: None,
            lock_deadline: crate::discovery::spawn_lock::DEFAULT_DEADLINE,
            ready_deadline: READY_DEADLINE,
            unresponsive_deadline: UNRESPONSIVE_DEADLINE,
            managed: None,
        }
    }
}

/// A daemon ready for new sessions.
#[derive(Debug)]
pub(crate) struct Ready {
    /// Its record, as the family pointer holds it; `record.url` is the MCP endpoint.
    pub record: DaemonRecord,
    /// Its `/healthz` answer.
    pub health: Value,
    /// The daemon process when this call spawned it. Keep it while the caller lives, or
    /// drop it: either way tokio reaps it when it exits, so it never lingers as a zombie
    /// that `kill(pid, 0)` would call alive.
    pub spawned: Option<tokio::process::Child>,
}

/// Finds the current daemon of family `fingerprint`, or starts one and waits until it is
/// ready (daemon.md 1.3): probe; take the spawn lock; probe again; spawn; wait for a
/// qualifying pointer; release the lock. A live daemon that does not answer is waited for
/// up to `unresponsive_deadline`, then reported, never replaced.
pub(crate) async fn ensure_daemon(
    paths: &Paths,
    fingerprint: &str,
    options: &EnsureOptions,
) -> Result<Ready, EnsureError> {
    let key = RunControlKey::load_or_create(paths).ok();
    if let Some(ready) = find_ready(paths, fingerprint, key.as_ref(), options).await? {
        return Ok(ready);
    }
    start_under_lock(paths, fingerprint, options, key.as_ref(), false, |_| true).await
}

/// The cold-start and successor paths alike: take the spawn lock; probe again (the previous
/// holder may have done the job meanwhile: a qualifying daemon that `accept`s is used); else
/// spawn `daemon run [--supersede]` and wait for a qualifying pointer that `accept`s. The lock
/// is released on return.
async fn start_under_lock(
    paths: &Paths,
    fingerprint: &str,
    options: &EnsureOptions,
    key: Option<&RunControlKey>,
    supersede: bool,
    accept: impl Fn(&Value) -> bool,
) -> Result<Ready, EnsureError> {
    let _lock = take_spawn_lock(paths, fingerprint, options).await?;
    if let Some(ready) = find_ready(paths, fingerprint, key, options).await?
        && accept(&ready.health)
    {
        return Ok(ready);
    }
    let spawn_args = SpawnArgs {
        port: options.port,
        supersede,
        ..SpawnArgs::new()
    };
    spawn_and_wait(paths, fingerprint, key, options, &spawn_args, accept).await
}

/// Takes the family's spawn lock (waiting up to `options.lock_deadline`) off the runtime.
async fn take_spawn_lock(
    paths: &Paths,
    fingerprint: &str,
    options: &EnsureOptions,
) -> Result<SpawnLock, EnsureError> {
    let (owned_paths, owned_fingerprint, deadline) =
        (paths.clone(), fingerprint.to_owned(), options.lock_deadline);
    let acquired = tokio::task::spawn_blocking(move || {
        SpawnLock::acquire(&owned_paths, &owned_fingerprint, deadline)
    })
    .await
    .map_err(|e| {
        DiscoveryError::io(
            "wait for",
            paths.spawn_lock(fingerprint),
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(acquired?)
}

/// Starts a successor for an older daemon that speaks our control protocol (daemon.md 1.8):
/// under the spawn lock, re-probe (another shim may have done it: a qualifying daemon of
/// `min_version` or newer is adopted), else spawn `daemon run --supersede` and wait until the
/// pointer names a qualifying daemon at least that new.
pub(crate) async fn ensure_successor(
    paths: &Paths,
    fingerprint: &str,
    options: &EnsureOptions,
    min_version: &str,
) -> Result<Ready, EnsureError> {
    let key = RunControlKey::load_or_create(paths).ok();
    let new_enough = |health: &Value| {
        health
            .get("version")
            .and_then(Value::as_str)
            .is_some_and(|version| compare_versions(version, min_version).is_ge())
    };
    start_under_lock(paths, fingerprint, options, key.as_ref(), true, new_enough).await
}

/// Spawns a daemon with `spawn_args` and waits (≤ `ready_deadline`) until the family pointer
/// names a qualifying daemon whose `/healthz` body passes `accept`.
async fn spawn_and_wait(
    paths: &Paths,
    fingerprint: &str,
    key: Option<&RunControlKey>,
    options: &EnsureOptions,
    spawn_args: &SpawnArgs,
    accept: impl Fn(&Value) -> bool,
) -> Result<Ready, EnsureError> {
    paths.ensure_dirs()?;
    if let Some(managed) = &options.managed {
        match managed.start().await {
            Ok(()) => {
                // The manager returns once the daemon sent READY, which follows its pointer
                // CAS; the wait covers managers that return earlier (launchd's kickstart).
                if let Some(ready) =
                    wait_for_pointer(paths, fingerprint, key, options.ready_deadline, &accept).await
                {
                    return Ok(ready);
                }
                eprintln!(
                    "agentprism: the {} daemon did not become ready; starting one directly",
                    managed.record.manager
                );
            }
            Err(error) => eprintln!(
                "agentprism: could not start the daemon through {}: {error}; starting one directly",
                managed.record.manager
            ),
        }
    }
    let log = paths.daemon_log();
    let mut child = spawn_daemon(&options.binary, &spawn_args.to_args(&log), paths)?;
    let pid = child.id().unwrap_or(0);
    let started = Instant::now();
    let binary = options.binary.display().to_string();
    loop {
        if let Some((record, probe)) = probe_family(paths, fingerprint, key).await
            && let Probe::Identified(health) = &probe
            && probe.qualifies()
            && accept(health)
        {
            break Ok(Ready {
                record,
                health: health.clone(),
                spawned: Some(child),
            });
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                // Exit 0 is "already running": another spawner's daemon won the pointer.
                if status.success()
                    && let Some((record, Probe::Identified(health))) =
                        probe_family(paths, fingerprint, key).await
                    && super::probe::body_qualifies(&health)
                    && accept(&health)
                {
                    break Ok(Ready {
                        record,
                        health,
                        spawned: None,
                    });
                }
                break Err(EnsureError::Exited {
                    status: status.to_string(),
                    binary,
                    tail: log_tail(&log),
                    log,
                });
            }
            Ok(None) => {}
            Err(error) => {
                break Err(EnsureError::Spawn {
                    binary,
                    source: error,
                });
            }
        }
        if started.elapsed() >= options.ready_deadline {
            break Err(EnsureError::NotReady {
                pid,
                waited: started.elapsed(),
                binary,
                tail: log_tail(&log),
                log,
            });
        }
        // A daemon is usually ready within tens of milliseconds: look often at first, then
        // back off so a slow start does not spin.
        let pause = if started.elapsed() < FAST_POLL_WINDOW {
            FAST_POLL
        } else {
            POLL
        };
        tokio::time::sleep(pause).await;
    }
}

/// Waits (≤ `deadline`) for the pointer to name a qualifying daemon that `accept`s.
async fn wait_for_pointer(
    paths: &Paths,
    fingerprint: &str,
    key: Option<&RunControlKey>,
    deadline: Duration,
    accept: impl Fn(&Value) -> bool,
) -> Option<Ready> {
    let started = Instant::now();
    loop {
        if let Some((record, Probe::Identified(health))) =
            probe_family(paths, fingerprint, key).await
            && super::probe::body_qualifies(&health)
            && accept(&health)
        {
            return Some(Ready {
                record,
                health,
                spawned: None,
            });
        }
        if started.elapsed() >= deadline {
            return None;
        }
        tokio::time::sleep(FAST_POLL).await;
    }
}

/// Probes the family pointer; a live daemon that does not answer is re-probed until
/// `unresponsive_deadline`, then reported. `None`: nothing qualifying (spawn one).
async fn find_ready(
    paths: &Paths,
    fingerprint: &str,
    key: Option<&RunControlKey>,
    options: &EnsureOptions,
) -> Result<Option<Ready>, EnsureError> {
    let started = Instant::now();
    loop {
        let Some((record, probe)) = probe_family(paths, fingerprint, key).await else {
            return Ok(None);
        };
        match probe {
            Probe::Identified(health) if super::probe::body_qualifies(&health) => {
                return Ok(Some(Ready {
                    record,
                    health,
                    spawned: None,
                }));
            }
            // Exiting or starting: a new daemon may claim the pointer once it is gone.
            Probe::Identified(_) => return Ok(None),
            Probe::Unresponsive | Probe::Refused(_) | Probe::Mismatch(_) => {
                if started.elapsed() >= options.unresponsive_deadline {
                    return Err(EnsureError::Unresponsive {
                        pid: record.pid,
                        url: record.url,
                        waited: started.elapsed(),
                        log: paths.daemon_log(),
                    });
                }
                tokio::time::sleep(UNRESPONSIVE_POLL).await;
            }
        }
    }
}

/// Starts `binary args` as a detached daemon (see the module documentation) with its output
/// appended to `paths.daemon_log()`. The returned child is not killed on drop.
pub(crate) fn spawn_daemon(
    binary: &Path,
    args: &[OsString],
    paths: &Paths,
) -> Result<tokio::process::Child, EnsureError> {
    let spawn_error = |source: std::io::Error| EnsureError::Spawn {
        binary: binary.display().to_string(),
        source,
    };
    paths.ensure_dirs()?;
    let log = paths.daemon_log();
    let open_log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)
            .map_err(|e| crate::util::annotate(e, "open", &log))
    };
    use std::os::unix::fs::OpenOptionsExt;
    let stdout = open_log().map_err(spawn_error)?;
    let stderr = open_log().map_err(spawn_error)?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_dir())
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut command = std::process::Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .current_dir(home);
    for (key, _) in std::env::vars_os() {
        if is_manager_variable(key.as_bytes()) {
            command.env_remove(key);
        }
    }
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, umask, close_range/fcntl); it allocates nothing.
    unsafe {
        command.pre_exec(detach_in_child);
    }
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(false);
    command.spawn().map_err(spawn_error)
}

/// Whether a variable belongs to a service manager's contract with *its* process.
fn is_manager_variable(key: &[u8]) -> bool {
    key == b"NOTIFY_SOCKET" || key.starts_with(b"LISTEN_") || key.starts_with(b"WATCHDOG_")
}

/// Runs between fork and exec: new session, private umask, every inherited descriptor above
/// stderr marked close-on-exec (std's own exec-error pipe is already close-on-exec, so
/// marking rather than closing keeps exec failures reported).
fn detach_in_child() -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: plain system calls on the child's own process state.
    unsafe {
        if libc::setsid() == -1 {
            return Err(std::io::Error::last_os_error());
        }
        libc::umask(0o077);
        #[cfg(target_os = "linux")]
        {
            let marked = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if marked == 0 {
                return Ok(());
            }
        }
        // Older kernels: mark each possible descriptor (bounded, in case the limit is huge).
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536) as libc::c_int
        } else {
            1024
        };
        for fd in 3..highest {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// The `agentprism` binary to run as the daemon: `AGENTPRISM_DAEMON_BIN`; else this
/// executable when it is `agentprism` itself; else the `agentprism` next to it (the shim's
/// sibling, real path); else `agentprism` from `PATH`.
pub(crate) fn daemon_binary(env: &EnvSnapshot) -> PathBuf {
    if let Some(binary) = env.non_empty(env::DAEMON_BIN) {
        return PathBuf::from(binary);
    }
    let exe = std::env::current_exe()
        .ok()
        .map(|exe| std::fs::canonicalize(&exe).unwrap_or(exe));
    if let Some(exe) = exe {
        if exe.file_name().is_some_and(|name| name == "agentprism") {
            return exe;
        }
        if let Some(sibling) = exe.parent().map(|dir| dir.join("agentprism"))
            && sibling.is_file()
        {
            return sibling;
        }
    }
    PathBuf::from("agentprism")
}

/// The last lines of the daemon log, for a startup error.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(8).collect();
    if lines.is_empty() {
        return String::new();
    }
    let mut tail = String::from("\nlast log lines:");
    for line in lines.into_iter().rev() {
        tail.push_str("\n  ");
        tail.push_str(line);
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_args_and_manager_variables() {
        let args = SpawnArgs {
            instance_id: "id".into(),
            supersede: true,
            port: Some(0),
        }
        .to_args(Path::new("/r/logs/daemon.log"));
        assert_eq!(
            args,
            [
                "daemon",
                "run",
                "--instance-id",
                "id",
                "--supersede",
                "--port",
                "0",
                "--log-file",
                "/r/logs/daemon.log"
            ]
            .map(OsString::from)
        );
        assert!(is_manager_variable(b"NOTIFY_SOCKET"));
        assert!(is_manager_variable(b"LISTEN_FDS"));
        assert!(is_manager_variable(b"WATCHDOG_USEC"));
        assert!(!is_manager_variable(b"HOME"));
    }
}
