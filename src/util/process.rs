//! Process identity and liveness: the one reading of `/proc/<pid>/stat` and the one rule for
//! "is the process that wrote this record still running?". Daemon records (`discovery`), run
//! leases (`engine`, `daemon`) and agent-group records (`acp`) all ask it here, so neither
//! `engine` nor `discovery` owns it and both give the same answer for the same process.
//!
//! A process is named by its pid, its start time (clock ticks after boot, `/proc/<pid>/stat`
//! field 22) and, when known, the boot id (`/proc/sys/kernel/random/boot_id`). `kill(pid, 0)`
//! alone lies: pids are recycled (also across reboots), a zombie answers like a live process,
//! and EPERM only says that someone else's process holds the pid. So the rule is:
//!
//! - **No process** (`ESRCH`, or no `/proc/<pid>/stat`): dead.
//! - **Zombie** (state `Z` or `X`): dead; it has exited and only waits to be reaped.
//! - **Boot id**: a recorded boot id that differs from this boot's means the recorded process
//!   ended with the boot it ran in (`Reused(OtherBoot)`). When the record or this reader has
//!   no boot id, the start time alone decides.
//! - **Start time**: a different start time means another process took the pid
//!   (`Reused(StartTime)`).
//! - **EPERM** (a process we may not signal): the process still exists, so it is alive when
//!   its identity matches, like any other. When it does not match, or its `stat` cannot be
//!   read (`hidepid`), the pid belongs to another user's, different process: dead
//!   (`Dead(NotOurs)`), and never signalled.
//!
//! Everything else is alive. [`judge`] is the rule as a pure function, so it is tested for
//! every case without needing another user's process.

use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// What became of the process a record names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The same process is still running.
    Alive,
    /// No usable process holds the pid.
    Dead(DeadReason),
    /// A different process holds the pid now: the record is stale and must never lead to a
    /// signal.
    Reused(ReuseReason),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadReason {
    /// Zero, or too large to be a pid.
    InvalidPid,
    /// `kill(pid, 0)` said ESRCH, or the process has no `/proc` entry.
    NoProcess,
    /// `kill(pid, 0)` said EPERM and the process is not the recorded one (or cannot be
    /// read): another user's process holds the pid.
    NotOurs,
    /// Exited, not yet reaped.
    Zombie,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReuseReason {
    /// The machine rebooted since the record was written.
    OtherBoot,
    /// The process on the pid started at another time.
    StartTime { recorded: u64, actual: u64 },
}

/// What `kill(pid, 0)` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The pid exists and we may signal it.
    Allowed,
    /// The pid exists but belongs to a process we may not signal (EPERM).
    Forbidden,
    /// No such process (ESRCH or any other error).
    Absent,
}

/// The fields of `/proc/<pid>/stat` identity needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 22, clock ticks after boot.
    pub start_time: u64,
    /// State `Z` (or `X`).
    pub zombie: bool,
    /// Field 5, the process group: the agent reaper checks who is still in its group.
    pub pgrp: i32,
}

/// The identity a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Recorded<'a> {
    pub pid: u32,
    pub start_time: u64,
    pub boot_id: Option<&'a str>,
}

impl Liveness {
    pub fn is_alive(&self) -> bool {
        *self == Liveness::Alive
    }
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Liveness::Alive => f.write_str("alive"),
            Liveness::Dead(DeadReason::InvalidPid) => f.write_str("dead (invalid pid)"),
            Liveness::Dead(DeadReason::NoProcess) => f.write_str("dead (no such process)"),
            Liveness::Dead(DeadReason::NotOurs) => f.write_str("dead (pid held by another user)"),
            Liveness::Dead(DeadReason::Zombie) => f.write_str("dead (zombie)"),
            Liveness::Reused(ReuseReason::OtherBoot) => {
                f.write_str("stale (recorded before a reboot)")
            }
            Liveness::Reused(ReuseReason::StartTime { recorded, actual }) => write!(
                f,
                "stale (pid reused: started at tick {actual}, record says {recorded})"
            ),
        }
    }
}

/// Whether the process `pid` that started at `start_time` during boot `boot_id` (when known)
/// is still running, by the rule in the module documentation.
pub fn identity(pid: u32, start_time: u64, boot_id: Option<&str>) -> Liveness {
    let Some(raw) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
        return Liveness::Dead(DeadReason::InvalidPid);
    };
    let signal = match kill(Pid::from_raw(raw), None) {
        Ok(()) => Signal::Allowed,
        Err(Errno::EPERM) => Signal::Forbidden,
        Err(_) => Signal::Absent,
    };
    if signal == Signal::Absent {
        return Liveness::Dead(DeadReason::NoProcess);
    }
    let recorded = Recorded {
        pid,
        start_time,
        boot_id,
    };
    judge(
        &recorded,
        signal,
        proc_stat(pid),
        current_boot_id().as_deref(),
    )
}

/// The rule itself: `signal` is what `kill(pid, 0)` said, `stat` what `/proc/<pid>/stat`
/// holds (if readable), `current_boot` this boot's id (if known).
pub(crate) fn judge(
    recorded: &Recorded<'_>,
    signal: Signal,
    stat: Option<ProcStat>,
    current_boot: Option<&str>,
) -> Liveness {
    if recorded.pid == 0 || i32::try_from(recorded.pid).is_err() {
        return Liveness::Dead(DeadReason::InvalidPid);
    }
    let boot_changed = matches!(
        (recorded.boot_id, current_boot),
        (Some(recorded_boot), Some(current)) if recorded_boot != current
    );
    let verdict = match stat {
        _ if signal == Signal::Absent => Liveness::Dead(DeadReason::NoProcess),
        _ if boot_changed => Liveness::Reused(ReuseReason::OtherBoot),
        None => Liveness::Dead(DeadReason::NoProcess),
        Some(stat) if stat.zombie => Liveness::Dead(DeadReason::Zombie),
        Some(stat) if stat.start_time != recorded.start_time => {
            Liveness::Reused(ReuseReason::StartTime {
                recorded: recorded.start_time,
                actual: stat.start_time,
            })
        }
        Some(_) => Liveness::Alive,
    };
    // A process we may not signal still exists; only its identity decides. One that is not
    // the recorded process is someone else's.
    match verdict {
        Liveness::Alive => Liveness::Alive,
        _ if signal == Signal::Forbidden => Liveness::Dead(DeadReason::NotOurs),
        other => other,
    }
}

/// This boot's id (Linux `/proc/sys/kernel/random/boot_id`), `None` where unavailable. Read
/// once: it cannot change while this process runs.
pub fn current_boot_id() -> Option<String> {
    static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = text.trim();
            (!id.is_empty()).then(|| id.to_owned())
        })
        .clone()
}

/// This machine's host name (`gethostname`), read once; `None` where it cannot be read or is
/// not UTF-8.
pub fn host_name() -> Option<String> {
    static HOST: OnceLock<Option<String>> = OnceLock::new();
    HOST.get_or_init(|| {
        let name = nix::unistd::gethostname().ok()?.into_string().ok()?;
        (!name.is_empty()).then_some(name)
    })
    .clone()
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist (or is hidden from us).
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Parses a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 5 was the group; field 22 is 17 further on.
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        start_time,
        zombie: matches!(state, "Z" | "X"),
        pgrp,
    })
}

/// A live (not zombie) process's start time, to record beside its pid.
pub fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid)
        .filter(|stat| !stat.zombie)
        .map(|stat| stat.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: ProcStat = ProcStat {
        start_time: 5555,
        zombie: false,
        pgrp: 77,
    };

    fn recorded(boot_id: Option<&str>) -> Recorded<'_> {
        Recorded {
            pid: 77,
            start_time: 5555,
            boot_id,
        }
    }

    #[test]
    fn a_matching_process_is_alive_whether_or_not_we_may_signal_it() {
        for signal in [Signal::Allowed, Signal::Forbidden] {
            assert_eq!(
                judge(&recorded(Some("b1")), signal, Some(STAT), Some("b1")),
                Liveness::Alive,
                "{signal:?}"
            );
        }
    }

    #[test]
    fn a_process_we_may_not_signal_that_is_not_the_recorded_one_is_not_ours() {
        let moved = ProcStat {
            start_time: 6000,
            ..STAT
        };
        assert_eq!(
            judge(&recorded(None), Signal::Forbidden, Some(moved), None),
            Liveness::Dead(DeadReason::NotOurs)
        );
        // Hidden by `hidepid`: nothing confirms it is the recorded process.
        assert_eq!(
            judge(&recorded(None), Signal::Forbidden, None, None),
            Liveness::Dead(DeadReason::NotOurs)
        );
        let zombie = ProcStat {
            zombie: true,
            ..STAT
        };
        assert_eq!(
            judge(&recorded(None), Signal::Forbidden, Some(zombie), None),
            Liveness::Dead(DeadReason::NotOurs)
        );
    }

    #[test]
    fn another_boot_means_the_recorded_process_is_gone() {
        assert_eq!(
            judge(
                &recorded(Some("b0")),
                Signal::Allowed,
                Some(STAT),
                Some("b1")
            ),
            Liveness::Reused(ReuseReason::OtherBoot)
        );
        // Either side without a boot id: the start time alone decides.
        assert_eq!(
            judge(&recorded(None), Signal::Allowed, Some(STAT), Some("b1")),
            Liveness::Alive
        );
        assert_eq!(
            judge(&recorded(Some("b0")), Signal::Allowed, Some(STAT), None),
            Liveness::Alive
        );
    }

    #[test]
    fn absent_zombie_and_restarted_processes_are_not_alive() {
        assert_eq!(
            judge(&recorded(None), Signal::Absent, Some(STAT), None),
            Liveness::Dead(DeadReason::NoProcess)
        );
        assert_eq!(
            judge(&recorded(None), Signal::Allowed, None, None),
            Liveness::Dead(DeadReason::NoProcess)
        );
        let zombie = ProcStat {
            zombie: true,
            ..STAT
        };
        assert_eq!(
            judge(&recorded(None), Signal::Allowed, Some(zombie), None),
            Liveness::Dead(DeadReason::Zombie)
        );
        let moved = ProcStat {
            start_time: 6000,
            ..STAT
        };
        assert_eq!(
            judge(&recorded(None), Signal::Allowed, Some(moved), None),
            Liveness::Reused(ReuseReason::StartTime {
                recorded: 5555,
                actual: 6000
            })
        );
        let zero = Recorded {
            pid: 0,
            ..recorded(None)
        };
        assert_eq!(
            judge(&zero, Signal::Allowed, Some(STAT), None),
            Liveness::Dead(DeadReason::InvalidPid)
        );
    }

    #[test]
    fn this_process_is_alive_under_its_own_identity_only() {
        let pid = std::process::id();
        let start = start_time(pid).expect("own start time");
        let boot = current_boot_id();
        assert_eq!(identity(pid, start, boot.as_deref()), Liveness::Alive);
        assert!(!identity(pid, start + 1, None).is_alive());
        if boot.is_some() {
            assert_eq!(
                identity(pid, start, Some("another-boot")),
                Liveness::Reused(ReuseReason::OtherBoot)
            );
        }
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "77 (a) b (c)) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 1000 10";
        assert_eq!(parse_stat(line), Some(STAT));
        assert!(parse_stat(&line.replace(") S ", ") Z ")).unwrap().zombie);
        assert_eq!(parse_stat("garbage"), None);
    }
}
