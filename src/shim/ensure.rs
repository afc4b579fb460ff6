//! Finding the daemon of this shim's env family, or starting one (daemon.md 1.3, 1.4 and 2
//! "Self-spawn"). A pointer is only a hint: its pid must still be the same process (start
//! time and boot id) and `/healthz` on its port must answer with the recorded identity and an
//! HMAC proof of our challenge, so a stale file or a squatter on the port is never dialled.
//! A daemon that is alive and identified but slow is waited for, never replaced: two daemons
//! over one store would both run the same work.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::{GetOutcome, get_within};
use crate::discovery::healthz::{Challenge, HEALTHZ_TIMEOUT, IdentityMismatch, verify_identity};
use crate::discovery::pointer::read_pointer;
use crate::discovery::{
    DaemonRecord, DiscoveryError, Paths, RunControlKey, SpawnLock, compare_versions,
    process_alive_as,
};
use crate::env;

/// How long a live but unresponsive daemon is waited for before the shim gives up.
pub const UNRESPONSIVE_BACKOFF: Duration = Duration::from_secs(10);
/// How long the shim waits for the spawn lock.
pub const SPAWN_LOCK_DEADLINE: Duration = Duration::from_secs(10);
/// How long a spawned daemon has to publish a qualifying pointer.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);
/// How often the pointer is re-read while a spawned daemon starts.
const READY_POLL: Duration = Duration::from_millis(5);
/// How often an unresponsive daemon is probed again.
const UNRESPONSIVE_POLL: Duration = Duration::from_millis(250);

/// A daemon this shim may talk to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Daemon {
    pub pid: u32,
    pub instance_id: String,
    pub port: u16,
    pub version: String,
}

/// Why no daemon could be found or started. Every message ends with a way to see more.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(
        "the agentprism daemon (pid {pid}, port {port}) is running but has not answered /healthz \
         for {waited:?}: {detail}; not starting a second daemon over the same store (see \
         `agentprism daemon status` and {log})"
    )]
    Unresponsive {
        pid: u32,
        port: u16,
        waited: Duration,
        detail: String,
        log: String,
    },
    #[error(
        "no agentprism binary to start the daemon: set {var} or install `agentprism` next to \
         `agentprism-workflow` or on PATH",
        var = env::DAEMON_BIN
    )]
    NoBinary,
    #[error("starting the daemon {} failed: {source}", binary.display())]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the daemon started from {} exited ({status}) before it was ready; run `{} daemon run` in \
         the foreground to see why, or read {log}",
        binary.display(),
        binary.display()
    )]
    Exited {
        binary: PathBuf,
        status: std::process::ExitStatus,
        log: String,
    },
    #[error(
        "the daemon started from {} did not become ready within {waited:?} ({detail}); run `{} \
         daemon run` in the foreground to see why, or read {log}",
        binary.display(),
        binary.display()
    )]
    NotReady {
        binary: PathBuf,
        waited: Duration,
        detail: String,
        log: String,
    },
}

/// Finds or starts the daemon of one env family.
pub struct Ensurer {
    paths: Paths,
    fingerprint: String,
    /// This shim's version: daemons at least this new are adopted.
    version: String,
    /// `AGENTPRISM_DAEMON_BIN`, if set.
    daemon_bin: Option<PathBuf>,
    /// The run-control key, once read; healthz proofs are checked with it.
    key: std::sync::Mutex<Option<RunControlKey>>,
}

/// What one look at the pointer found.
#[derive(Debug)]
enum Probe {
    Qualifies(Daemon),
    /// No usable daemon: spawning one is right.
    Absent(String),
    /// A live daemon that does not answer well: wait, never spawn.
    Unresponsive(DaemonRecord, String),
}

impl Ensurer {
    pub fn new(paths: Paths, fingerprint: String, version: &str) -> Ensurer {
        let daemon_bin = std::env::var_os(env::DAEMON_BIN)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from);
        Ensurer {
            paths,
            fingerprint,
            version: version.to_owned(),
            daemon_bin,
            key: std::sync::Mutex::new(None),
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// Returns a qualifying daemon, starting one under the spawn lock if there is none.
    pub async fn ensure(&self) -> Result<Daemon, EnsureError> {
        let started = Instant::now();
        loop {
            match self.probe().await {
                Probe::Qualifies(daemon) => return Ok(daemon),
                Probe::Unresponsive(record, detail) => {
                    self.back_off(started, &record, detail).await?;
                    continue;
                }
                Probe::Absent(_) => {}
            }
            let lock = self.spawn_lock().await?;
            // The previous holder may have started a daemon while we waited.
            match self.probe().await {
                Probe::Qualifies(daemon) => return Ok(daemon),
                Probe::Unresponsive(record, detail) => {
                    drop(lock);
                    self.back_off(started, &record, detail).await?;
                    continue;
                }
                Probe::Absent(_) => {
                    let daemon = self.spawn_and_wait().await;
                    drop(lock);
                    return daemon;
                }
            }
        }
    }

    /// Waits a little before probing an unresponsive daemon again, or gives up after
    /// [`UNRESPONSIVE_BACKOFF`].
    async fn back_off(
        &self,
        started: Instant,
        record: &DaemonRecord,
        detail: String,
    ) -> Result<(), EnsureError> {
        let waited = started.elapsed();
        if waited >= UNRESPONSIVE_BACKOFF {
            return Err(EnsureError::Unresponsive {
                pid: record.pid,
                port: record.port,
                waited,
                detail,
                log: self.paths.daemon_log().display().to_string(),
            });
        }
        tokio::time::sleep(UNRESPONSIVE_POLL.min(UNRESPONSIVE_BACKOFF - waited)).await;
        Ok(())
    }

    async fn spawn_lock(&self) -> Result<SpawnLock, EnsureError> {
        let started = Instant::now();
        loop {
            match SpawnLock::acquire(&self.paths, &self.fingerprint, Duration::ZERO) {
                Ok(lock) => return Ok(lock),
                Err(DiscoveryError::LockTimeout { path, .. }) => {
                    let waited = started.elapsed();
                    if waited >= SPAWN_LOCK_DEADLINE {
                        return Err(DiscoveryError::LockTimeout { path, waited }.into());
                    }
                    tokio::time::sleep(crate::discovery::LOCK_POLL).await;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Reads the pointer and checks the daemon it names (daemon.md 1.4).
    async fn probe(&self) -> Probe {
        let Some(record) = read_pointer(&self.paths, &self.fingerprint) else {
            return Probe::Absent("no family pointer".into());
        };
        let liveness = process_alive_as(&record);
        if !liveness.is_alive() {
            return Probe::Absent(format!("the pointer names pid {}: {liveness}", record.pid));
        }
        let challenge = Challenge::new(record.port);
        let path = format!("/healthz?challenge={}", challenge.nonce);
        let (status, body) = match get_within(record.port, &path, HEALTHZ_TIMEOUT).await {
            GetOutcome::Answered { status, body } => (status, body),
            GetOutcome::Refused(error) => {
                return Probe::Unresponsive(record, format!("alive but {error}"));
            }
            GetOutcome::Broken(error) => return Probe::Unresponsive(record, error.to_string()),
            GetOutcome::TimedOut => {
                return Probe::Unresponsive(
                    record,
                    format!("/healthz took longer than {HEALTHZ_TIMEOUT:?}"),
                );
            }
        };
        let Ok(body) = serde_json::from_slice::<Value>(&body) else {
            return Probe::Unresponsive(record, format!("/healthz answered {status}, not JSON"));
        };
        if status != 200 {
            return Probe::Unresponsive(record, format!("/healthz answered {status}"));
        }
        if let Err(mismatch) = self.verify(&record, &body, &challenge.nonce) {
            return Probe::Unresponsive(
                record,
                format!("the listener on its port is not that daemon: {mismatch}"),
            );
        }
        let lame_duck = body.get("lameDuck").and_then(Value::as_bool) == Some(true)
            || body.get("state").and_then(Value::as_str) == Some("superseded");
        if lame_duck {
            return Probe::Absent(format!("daemon pid {} is a lame duck", record.pid));
        }
        let version = body
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or(&record.version)
            .to_owned();
        // Succession hooks in here: a daemon older than this shim is adopted as it is until
        // the shim learns to start a `--supersede` successor for it (daemon.md 1.8).
        if compare_versions(&version, &self.version).is_lt() {
            eprintln!(
                "agentprism-workflow: adopting daemon pid {} of older version {version} (this \
                 shim is {})",
                record.pid, self.version
            );
        }
        Probe::Qualifies(Daemon {
            pid: record.pid,
            instance_id: record.instance_id.clone(),
            port: record.port,
            version,
        })
    }

    /// Checks the healthz identity. Without a usable run-control key the proof cannot be
    /// checked; the fields still must match, and the shim says so on stderr.
    fn verify(
        &self,
        record: &DaemonRecord,
        body: &Value,
        nonce: &str,
    ) -> Result<(), IdentityMismatch> {
        let mut cached = self.key.lock().expect("key lock");
        if cached.is_none() {
            match RunControlKey::load(&self.paths.run_control_key()) {
                Ok(key) => *cached = Some(key),
                Err(error) => {
                    drop(cached);
                    let placeholder = RunControlKey::from_bytes([0; 32]);
                    return match verify_identity(record, body, &placeholder, nonce) {
                        Err(IdentityMismatch::Proof) => {
                            eprintln!(
                                "agentprism-workflow: cannot check the daemon's healthz proof \
                                 ({error}); trusting its pid, instance and fingerprint"
                            );
                            Ok(())
                        }
                        other => other,
                    };
                }
            }
        }
        let key = cached.as_ref().expect("key loaded");
        verify_identity(record, body, key, nonce)
    }

    /// Spawns `agentprism daemon run --instance-id <uuid>` and waits for a qualifying pointer.
    /// Any qualifying daemon will do: one started by hand may have won the pointer.
    async fn spawn_and_wait(&self) -> Result<Daemon, EnsureError> {
        let binary = self.daemon_binary()?;
        let log = self.paths.daemon_log();
        let instance_id = uuid::Uuid::new_v4().to_string();
        let mut child = spawn_daemon(&binary, &instance_id, &self.paths)?;
        let started = Instant::now();
        let log_text = log.display().to_string();
        let mut last;
        loop {
            match self.probe().await {
                Probe::Qualifies(daemon) => return Ok(daemon),
                Probe::Absent(why) | Probe::Unresponsive(_, why) => last = why,
            }
            if let Ok(Some(status)) = child.try_wait() {
                // It may have lost a race to a daemon started by hand: one more look.
                if let Probe::Qualifies(daemon) = self.probe().await {
                    return Ok(daemon);
                }
                return Err(EnsureError::Exited {
                    binary,
                    status,
                    log: log_text,
                });
            }
            let waited = started.elapsed();
            if waited >= READY_DEADLINE {
                return Err(EnsureError::NotReady {
                    binary,
                    waited,
                    detail: last,
                    log: log_text,
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// `AGENTPRISM_DAEMON_BIN`, else `agentprism` beside the shim's real path, else on PATH.
    pub fn daemon_binary(&self) -> Result<PathBuf, EnsureError> {
        if let Some(binary) = &self.daemon_bin {
            return Ok(binary.clone());
        }
        sibling_binary("agentprism").ok_or(EnsureError::NoBinary)
    }
}

/// `name` beside this executable (symlinks resolved), else on PATH.
pub fn sibling_binary(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| is_executable(path));
    beside.or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate))
        })
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Starts the daemon detached from the shim (daemon.md 2 "Self-spawn"): its own session, no
/// inherited descriptors beyond stdio, stdin from /dev/null, output appended to the daemon
/// log, cwd `$HOME`, umask 077, and no service-manager variables the host may have leaked.
/// The returned child is polled while waiting for readiness; tokio reaps it once dropped, so
/// a daemon that dies while the shim lives does not linger as a zombie that looks alive.
pub fn spawn_daemon(
    binary: &Path,
    instance_id: &str,
    paths: &Paths,
) -> Result<tokio::process::Child, EnsureError> {
    paths.ensure_dirs()?;
    let log_path = paths.daemon_log();
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| DiscoveryError::Io {
                doing: "open the daemon log",
                path: log_path.clone(),
                source: e,
            })?
    };
    let spawn_error = |source| EnsureError::Spawn {
        binary: binary.to_path_buf(),
        source,
    };
    let log_for_stderr = log.try_clone().map_err(spawn_error)?;
    let mut command = tokio::process::Command::new(binary);
    command
        .args(["daemon", "run", "--instance-id", instance_id])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_for_stderr)
        .kill_on_drop(false);
    if let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) {
        command.current_dir(home);
    }
    for (key, _) in std::env::vars_os() {
        let name = key.to_string_lossy();
        if name == "NOTIFY_SOCKET" || name.starts_with("LISTEN_") || name.starts_with("WATCHDOG_") {
            command.env_remove(&key);
        }
    }
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setsid, umask, close_range, fcntl); it allocates nothing.
    unsafe {
        command.pre_exec(detach_in_child);
    }
    command.spawn().map_err(spawn_error)
}

/// In the forked child: a new session (so the host's signals to the shim's group never
/// reach the daemon), umask 077, and every descriptor above stderr marked close-on-exec.
/// Marking rather than closing keeps std's exec-error pipe working.
fn detach_in_child() -> std::io::Result<()> {
    use nix::libc;
    nix::unistd::setsid().map_err(std::io::Error::from)?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes descriptor flags of this process.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked != 0 {
        // Older kernels: mark what a typical descriptor table holds, one by one.
        for fd in 3..4096 {
            // SAFETY: fcntl on a descriptor number that may be closed just fails with EBADF.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
