//! Records are hints; the process table is the truth (daemon.md 1.11). `daemon status` and
//! `daemon stop --all` scan this user's processes for agentprism daemons, join them with the
//! records by pid and identity, and so list a daemon that lost its record ("untracked") and
//! prune a record whose pid now belongs to someone else, without ever signalling it. Signals
//! go through a pidfd opened *before* the final identity check, so the pid cannot be recycled
//! between check and signal.
//!
//! What counts as a daemon process ([`ProcessScan::matches`]): its arguments after argv[0]
//! contain `daemon` immediately followed by `run`, and the program is agentprism's: the
//! executable's file name (without the kernel's ` (deleted)` suffix after an upgrade) starts
//! with `agentprism`, or the executable is one of the configured binaries
//! (`AGENTPRISM_DAEMON_BIN`), or argv[0]'s file name starts with `agentprism` (a binary
//! started under another name by a wrapper that sets argv[0], such as `exec -a`). A script
//! run through an interpreter is not recognised: its executable is the interpreter and its
//! argv[0] is the interpreter's name.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::Signal;

use super::liveness::{DeadReason, Liveness, ReuseReason, proc_stat};
use super::record::{RecordFile, RecordRead, read_record};
use super::{DaemonRecord, DiscoveryError, Result};

/// A running process that looks like an agentprism daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonProcess {
    pub pid: u32,
    /// Clock ticks after boot, comparable with a record's `procStart`.
    pub start_time: u64,
    /// The executable, without the ` (deleted)` suffix.
    pub exe: PathBuf,
    /// The executable was replaced or removed since the process started (an upgrade).
    pub exe_deleted: bool,
    /// Arguments, lossily decoded for display.
    pub cmdline: Vec<String>,
    /// The `--instance-id` a spawning shim passed, if any.
    pub instance_id: Option<String>,
}

/// Finds daemon processes of the current user.
#[derive(Clone, Debug, Default)]
pub struct ProcessScan {
    /// Executables that count as daemon binaries whatever their name.
    binaries: Vec<PathBuf>,
}

/// How one record or process came out of [`reconcile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A record of ours whose process is alive with the recorded identity.
    Tracked,
    /// A daemon process no record accounts for: listed and stoppable.
    Untracked,
    /// A record of ours whose process is gone or whose pid was reused: delete the record,
    /// never signal the pid.
    Pruned(PruneReason),
    /// A record of another implementation or name: listed, never touched.
    Foreign,
    /// A record file that does not parse: listed with its path and reason, left in place.
    Malformed { reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PruneReason {
    Dead(DeadReason),
    Reused(ReuseReason),
    /// The process on the pid has the recorded start time but was spawned with another
    /// `--instance-id`.
    InstanceMismatch {
        process: String,
    },
}

/// One line of `daemon status`.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub role: Role,
    pub record: Option<RecordFile>,
    pub process: Option<DaemonProcess>,
}

/// A process identity to signal: pid plus start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalTarget {
    pub pid: u32,
    pub start_time: u64,
}

/// What [`signal_verified`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signalled {
    /// Sent through a pidfd.
    ViaPidfd,
    /// Sent with `kill(2)` after re-verifying, on a kernel without pidfds.
    ViaKill,
    /// The process had already exited.
    AlreadyGone,
}

#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("refusing to signal: this entry ({0:?}) has no verified process")]
    NotSignallable(Role),
    #[error("refusing to signal pid {pid}: it now belongs to another process")]
    Reused { pid: u32 },
    #[error("signal pid {pid}: {errno}")]
    Failed { pid: u32, errno: Errno },
}

impl ProcessScan {
    /// A scan that recognises agentprism binaries by name.
    pub fn new() -> ProcessScan {
        ProcessScan::default()
    }

    /// Also recognise `binary` (canonicalised when possible), e.g. `AGENTPRISM_DAEMON_BIN`.
    pub(crate) fn with_binary(mut self, binary: impl Into<PathBuf>) -> ProcessScan {
        let binary = binary.into();
        self.binaries
            .push(std::fs::canonicalize(&binary).unwrap_or(binary));
        self
    }

    /// Whether a process running `exe` with arguments `cmdline` (argv[0] first) is an
    /// agentprism daemon; the rule is in the module documentation.
    pub fn matches(&self, exe: &Path, cmdline: &[OsString]) -> bool {
        let runs_daemon = cmdline
            .get(1..)
            .unwrap_or_default()
            .windows(2)
            .any(|pair| pair[0] == "daemon" && pair[1] == "run");
        if !runs_daemon {
            return false;
        }
        let (exe, _) = strip_deleted(exe);
        named_agentprism(&exe)
            || self.binaries.contains(&exe)
            || cmdline
                .first()
                .is_some_and(|argv0| named_agentprism(Path::new(argv0)))
    }

    /// Every daemon process of the current user (Linux `/proc`; empty where there is none).
    pub fn scan(&self) -> Result<Vec<DaemonProcess>> {
        let proc = Path::new("/proc");
        let entries = match std::fs::read_dir(proc) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(DiscoveryError::io("list", proc, e)),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(process) = self.inspect(pid) {
                found.push(process);
            }
        }
        found.sort_by_key(|p| p.pid);
        Ok(found)
    }

    /// `pid` as a daemon process of ours, if it is one. Processes vanish mid-read; any
    /// failure reads as "not a daemon".
    pub fn inspect(&self, pid: u32) -> Option<DaemonProcess> {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        if std::fs::metadata(&dir).ok()?.uid() != nix::unistd::getuid().as_raw() {
            return None;
        }
        let cmdline = split_cmdline(&std::fs::read(dir.join("cmdline")).ok()?);
        let exe = std::fs::read_link(dir.join("exe")).ok()?;
        if !self.matches(&exe, &cmdline) {
            return None;
        }
        let stat = proc_stat(pid)?;
        if stat.zombie {
            return None;
        }
        let (exe, exe_deleted) = strip_deleted(&exe);
        Some(DaemonProcess {
            pid,
            start_time: stat.start_time,
            exe,
            exe_deleted,
            instance_id: instance_id_arg(&cmdline),
            cmdline: cmdline
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        })
    }
}

impl Entry {
    /// The identity a stop may signal: a tracked record's process, or a scanned untracked or
    /// foreign process. Pruned and malformed entries have none.
    pub fn signal_target(&self) -> Option<SignalTarget> {
        match (&self.role, &self.process, &self.record) {
            (
                Role::Tracked,
                _,
                Some(RecordFile {
                    read: RecordRead::Ours(record),
                    ..
                }),
            ) => Some(SignalTarget {
                pid: record.pid,
                start_time: record.proc_start,
            }),
            (Role::Untracked | Role::Foreign, Some(process), _) => Some(SignalTarget {
                pid: process.pid,
                start_time: process.start_time,
            }),
            _ => None,
        }
    }

    /// Our record, when the entry has one.
    pub fn own_record(&self) -> Option<&DaemonRecord> {
        match &self.record {
            Some(RecordFile {
                read: RecordRead::Ours(record),
                ..
            }) => Some(record),
            _ => None,
        }
    }
}

/// Joins `records` (from `instances/`) with scanned `processes`. `liveness` decides whether a
/// record's process is still its daemon (normally [`super::process_alive_as`]); a record that
/// passes is tracked even if the scan did not recognise its binary. Output: one entry per
/// record, then one per process no tracked record claimed.
pub fn reconcile(
    records: &[RecordFile],
    processes: &[DaemonProcess],
    liveness: impl Fn(&DaemonRecord) -> Liveness,
) -> Vec<Entry> {
    let mut claimed = vec![false; processes.len()];
    let mut entries = Vec::new();
    for file in records {
        let position =
            |pid: Option<u32>| pid.and_then(|pid| processes.iter().position(|p| p.pid == pid));
        let (role, index) = match &file.read {
            RecordRead::Ours(record) => {
                let index = position(Some(record.pid));
                let role = match liveness(record) {
                    Liveness::Alive => {
                        match index.and_then(|i| processes[i].instance_id.as_ref()) {
                            Some(id) if *id != record.instance_id => {
                                Role::Pruned(PruneReason::InstanceMismatch {
                                    process: id.clone(),
                                })
                            }
                            _ => Role::Tracked,
                        }
                    }
                    Liveness::Dead(reason) => Role::Pruned(PruneReason::Dead(reason)),
                    Liveness::Reused(reason) => Role::Pruned(PruneReason::Reused(reason)),
                };
                // Only a tracked record owns the process on its pid; otherwise that process
                // (if it is a daemon at all) is somebody else and shows up as untracked.
                (role.clone(), index.filter(|_| role == Role::Tracked))
            }
            RecordRead::Foreign(foreign) => (Role::Foreign, position(foreign.pid)),
            RecordRead::Malformed { reason } => (
                Role::Malformed {
                    reason: reason.clone(),
                },
                None,
            ),
            RecordRead::Absent => continue,
        };
        if let Some(i) = index {
            claimed[i] = true;
        }
        entries.push(Entry {
            role,
            record: Some(file.clone()),
            process: index.map(|i| processes[i].clone()),
        });
    }
    for (process, claimed) in processes.iter().zip(claimed) {
        if !claimed {
            entries.push(Entry {
                role: Role::Untracked,
                record: None,
                process: Some(process.clone()),
            });
        }
    }
    entries
}

/// Deletes the record files of pruned entries, each only if it still names the same instance
/// (a daemon that just started on the recycled pid keeps its fresh record). Returns the paths
/// removed.
pub fn prune(entries: &[Entry]) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in entries {
        let (Role::Pruned(_), Some(file)) = (&entry.role, &entry.record) else {
            continue;
        };
        let RecordRead::Ours(stale) = &file.read else {
            continue;
        };
        match read_record(&file.path) {
            RecordRead::Ours(now) if now.same_instance(stale) => {}
            _ => continue,
        }
        match std::fs::remove_file(&file.path) {
            Ok(()) => removed.push(file.path.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(DiscoveryError::io("remove stale record", &file.path, e)),
        }
    }
    Ok(removed)
}

/// Sends `signal` to the entry's process after re-verifying its identity.
pub fn signal_verified(entry: &Entry, signal: Signal) -> Result<Signalled, SignalError> {
    let target = entry
        .signal_target()
        .ok_or_else(|| SignalError::NotSignallable(entry.role.clone()))?;
    signal_target(target, signal)
}

/// Sends `signal` to `target`: opens a pidfd, re-checks the start time of the pid (so the
/// pidfd is known to refer to the target), then signals through the pidfd. Without pidfd
/// support it re-checks and uses `kill(2)`, which leaves a microsecond window for pid reuse.
pub fn signal_target(target: SignalTarget, signal: Signal) -> Result<Signalled, SignalError> {
    let pid = target.pid;
    let raw = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or(SignalError::Failed {
            pid,
            errno: Errno::EINVAL,
        })?;
    let verify = || match proc_stat(pid) {
        None => Ok(false),
        Some(stat) if stat.zombie => Ok(false),
        Some(stat) if stat.start_time == target.start_time => Ok(true),
        Some(_) => Err(SignalError::Reused { pid }),
    };
    match pidfd::open(raw) {
        Ok(fd) => {
            if !verify()? {
                return Ok(Signalled::AlreadyGone);
            }
            match pidfd::send_signal(&fd, signal) {
                Ok(()) => Ok(Signalled::ViaPidfd),
                Err(Errno::ESRCH) => Ok(Signalled::AlreadyGone),
                Err(errno) => Err(SignalError::Failed { pid, errno }),
            }
        }
        Err(Errno::ESRCH) => Ok(Signalled::AlreadyGone),
        Err(_) => {
            if !verify()? {
                return Ok(Signalled::AlreadyGone);
            }
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal) {
                Ok(()) => Ok(Signalled::ViaKill),
                Err(Errno::ESRCH) => Ok(Signalled::AlreadyGone),
                Err(errno) => Err(SignalError::Failed { pid, errno }),
            }
        }
    }
}

/// The value of `--instance-id <id>` or `--instance-id=<id>`.
pub(crate) fn instance_id_arg(cmdline: &[OsString]) -> Option<String> {
    let mut args = cmdline.iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--instance-id" {
            return args.next().map(|v| v.to_string_lossy().into_owned());
        }
        if let Some(value) = arg.as_bytes().strip_prefix(b"--instance-id=") {
            return Some(String::from_utf8_lossy(value).into_owned());
        }
    }
    None
}

fn split_cmdline(bytes: &[u8]) -> Vec<OsString> {
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .map(|arg| OsString::from_vec(arg.to_vec()))
        .collect()
}

/// Splits the ` (deleted)` suffix the kernel appends to `/proc/<pid>/exe` of a replaced binary.
fn strip_deleted(exe: &Path) -> (PathBuf, bool) {
    match exe.as_os_str().as_bytes().strip_suffix(b" (deleted)") {
        Some(path) => (PathBuf::from(OsStr::from_bytes(path)), true),
        None => (exe.to_path_buf(), false),
    }
}

fn named_agentprism(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.as_bytes().starts_with(b"agentprism"))
}

/// Raw `pidfd_open`/`pidfd_send_signal` (nix 0.32 wraps neither).
#[cfg(target_os = "linux")]
pub(crate) mod pidfd {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use nix::errno::Errno;
    use nix::libc;
    use nix::sys::signal::Signal;

    pub(crate) fn open(pid: i32) -> Result<OwnedFd, Errno> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is
        // passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    pub(crate) fn send_signal(fd: &OwnedFd, signal: Signal) -> Result<(), Errno> {
        // SAFETY: a valid pidfd, a signal number, a null siginfo (the kernel fills in a
        // default one) and zero flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 { Err(Errno::last()) } else { Ok(()) }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) mod pidfd {
    use nix::errno::Errno;
    use nix::sys::signal::Signal;

    pub(crate) struct Fd;

    pub fn open(_pid: i32) -> Result<Fd, Errno> {
        Err(Errno::ENOSYS)
    }

    pub(crate) fn send_signal(_fd: &Fd, _signal: Signal) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::record::sample;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn match_rule() {
        let scan = ProcessScan::new().with_binary("/opt/x/prism-daemon");
        let agentprism = Path::new("/usr/local/bin/agentprism");
        assert!(scan.matches(agentprism, &args(&["agentprism", "daemon", "run"])));
        assert!(scan.matches(
            agentprism,
            &args(&[
                "agentprism",
                "--verbose",
                "daemon",
                "run",
                "--instance-id",
                "x"
            ])
        ));
        assert!(scan.matches(
            Path::new("/usr/local/bin/agentprism (deleted)"),
            &args(&["agentprism", "daemon", "run"])
        ));
        assert!(scan.matches(
            Path::new("/opt/x/prism-daemon"),
            &args(&["prism-daemon", "daemon", "run"])
        ));
        // A wrapper that set argv[0].
        assert!(scan.matches(
            Path::new("/usr/bin/bash"),
            &args(&["agentprism-wrapped", "daemon", "run"])
        ));
        // Not running the daemon.
        assert!(!scan.matches(agentprism, &args(&["agentprism", "daemon", "status"])));
        assert!(!scan.matches(agentprism, &args(&["agentprism", "run", "daemon"])));
        assert!(!scan.matches(agentprism, &args(&["daemon", "run"])));
        assert!(!scan.matches(agentprism, &args(&[])));
        // Not ours.
        assert!(!scan.matches(
            Path::new("/usr/bin/node"),
            &args(&["node", "daemon", "run"])
        ));
        assert!(!scan.matches(
            Path::new("/usr/bin/sh"),
            &args(&["/usr/bin/sh", "/tmp/agentprism-fake", "daemon", "run"])
        ));
    }

    #[test]
    fn instance_id_forms() {
        assert_eq!(
            instance_id_arg(&args(&["a", "daemon", "run", "--instance-id", "x"])),
            Some("x".into())
        );
        assert_eq!(
            instance_id_arg(&args(&["a", "--instance-id=y"])),
            Some("y".into())
        );
        assert_eq!(
            instance_id_arg(&args(&["--instance-id=argv0-does-not-count"])),
            None
        );
        assert_eq!(instance_id_arg(&args(&["a", "--instance-id"])), None);
    }

    #[test]
    fn cmdline_and_deleted_suffix() {
        assert_eq!(
            split_cmdline(b"a\0b c\0\0d\0"),
            args(&["a", "b c", "", "d"])
        );
        assert!(split_cmdline(b"").is_empty());
        assert_eq!(
            strip_deleted(Path::new("/x/agentprism (deleted)")),
            (PathBuf::from("/x/agentprism"), true)
        );
        assert_eq!(
            strip_deleted(Path::new("/x/agentprism")),
            (PathBuf::from("/x/agentprism"), false)
        );
    }

    fn process(pid: u32, start_time: u64, instance_id: Option<&str>) -> DaemonProcess {
        DaemonProcess {
            pid,
            start_time,
            exe: "/usr/bin/agentprism".into(),
            exe_deleted: false,
            cmdline: vec!["agentprism".into(), "daemon".into(), "run".into()],
            instance_id: instance_id.map(str::to_owned),
        }
    }

    fn file(read: RecordRead) -> RecordFile {
        RecordFile {
            path: PathBuf::from("/r/daemons/instances/x.json"),
            read,
        }
    }

    #[test]
    fn reconcile_roles() {
        let tracked = sample(10, "t", "0.1.0");
        let dead = sample(11, "d", "0.1.0");
        let reused = sample(12, "r", "0.1.0");
        let mismatched = sample(13, "m", "0.1.0");
        let unscanned = sample(14, "u", "0.1.0");
        let foreign =
            crate::discovery::record::parse_record(br#"{"name":"agentprism-daemon","pid":15}"#);
        let records = vec![
            file(RecordRead::Ours(tracked.clone())),
            file(RecordRead::Ours(dead.clone())),
            file(RecordRead::Ours(reused.clone())),
            file(RecordRead::Ours(mismatched.clone())),
            file(RecordRead::Ours(unscanned.clone())),
            file(foreign),
            file(RecordRead::Malformed {
                reason: "not JSON".into(),
            }),
        ];
        let processes = vec![
            process(10, tracked.proc_start, Some("t")),
            // A new daemon on the reused pid 12.
            process(12, 999, None),
            process(13, mismatched.proc_start, Some("other")),
            process(15, 5, None),
            process(20, 7, Some("lost")),
        ];
        let liveness = |record: &DaemonRecord| match record.pid {
            11 => Liveness::Dead(DeadReason::NoProcess),
            12 => Liveness::Reused(ReuseReason::StartTime {
                recorded: record.proc_start,
                actual: 999,
            }),
            _ => Liveness::Alive,
        };
        let entries = reconcile(&records, &processes, liveness);
        let roles: Vec<_> = entries
            .iter()
            .map(|e| (e.role.clone(), e.process.as_ref().map(|p| p.pid)))
            .collect();
        assert_eq!(
            roles,
            vec![
                (Role::Tracked, Some(10)),
                (Role::Pruned(PruneReason::Dead(DeadReason::NoProcess)), None),
                (
                    Role::Pruned(PruneReason::Reused(ReuseReason::StartTime {
                        recorded: reused.proc_start,
                        actual: 999
                    })),
                    None
                ),
                (
                    Role::Pruned(PruneReason::InstanceMismatch {
                        process: "other".into()
                    }),
                    None
                ),
                (Role::Tracked, None),
                (Role::Foreign, Some(15)),
                (
                    Role::Malformed {
                        reason: "not JSON".into()
                    },
                    None
                ),
                (Role::Untracked, Some(12)),
                (Role::Untracked, Some(13)),
                (Role::Untracked, Some(20)),
            ]
        );
        // Signal targets: tracked by record identity, untracked/foreign by process, never a
        // pruned or malformed record.
        assert_eq!(
            entries[0].signal_target(),
            Some(SignalTarget {
                pid: 10,
                start_time: tracked.proc_start
            })
        );
        assert_eq!(
            entries[4].signal_target(),
            Some(SignalTarget {
                pid: 14,
                start_time: unscanned.proc_start
            })
        );
        for pruned in &entries[1..4] {
            assert_eq!(pruned.signal_target(), None);
            assert!(matches!(
                signal_verified(pruned, Signal::SIGTERM),
                Err(SignalError::NotSignallable(_))
            ));
        }
        assert_eq!(entries[6].signal_target(), None);
        assert_eq!(
            entries[7].signal_target(),
            Some(SignalTarget {
                pid: 12,
                start_time: 999
            })
        );
    }

    #[test]
    fn prune_removes_only_unchanged_stale_records() {
        let temp = tempfile::tempdir().unwrap();
        let paths = crate::discovery::Paths::new(temp.path());
        let stale = sample(11, "old", "0.1.0");
        crate::discovery::record::write_own_record(&paths, &stale).unwrap();
        let stale_two = sample(12, "old2", "0.1.0");
        crate::discovery::record::write_own_record(&paths, &stale_two).unwrap();
        let records = crate::discovery::record::read_instance_records(&paths).unwrap();
        let entries = reconcile(&records, &[], |_| Liveness::Dead(DeadReason::NoProcess));
        // Meanwhile a new daemon took pid 12 and wrote its record.
        crate::discovery::record::write_own_record(&paths, &sample(12, "new", "0.1.0")).unwrap();
        let removed = prune(&entries).unwrap();
        assert_eq!(removed, vec![paths.instance_record(11)]);
        assert!(paths.instance_record(12).exists());
    }
}
