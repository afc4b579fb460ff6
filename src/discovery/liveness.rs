//! Is the process a record names still that daemon (daemon.md 1.4a)? `kill(pid, 0)` alone
//! lies: EPERM means another user's process holds the pid, a zombie answers like a live one,
//! and pids recycle, also across reboots. So a record's pid counts only if it exists, is ours,
//! is not a zombie, and has the start time and boot id the record carries.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::DaemonRecord;

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
    /// `kill(pid, 0)` said ESRCH.
    NoProcess,
    /// `kill(pid, 0)` said EPERM: another user's process, so not our daemon.
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

/// Whether the daemon `record` describes is still running.
pub fn process_alive_as(record: &DaemonRecord) -> Liveness {
    identity_liveness(record.pid, record.proc_start, record.boot_id.as_deref())
}

/// Whether the process `pid` that started at `proc_start` during boot `boot_id` (when known)
/// is still running. Run leases use the same check.
pub fn identity_liveness(pid: u32, proc_start: u64, boot_id: Option<&str>) -> Liveness {
    let Some(raw) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
        return Liveness::Dead(DeadReason::InvalidPid);
    };
    match kill(Pid::from_raw(raw), None) {
        Ok(()) => {}
        Err(Errno::EPERM) => return Liveness::Dead(DeadReason::NotOurs),
        Err(_) => return Liveness::Dead(DeadReason::NoProcess),
    }
    if let (Some(recorded), Some(current)) = (boot_id, current_boot_id())
        && recorded != current
    {
        return Liveness::Reused(ReuseReason::OtherBoot);
    }
    match proc_stat(pid) {
        None => Liveness::Dead(DeadReason::NoProcess),
        Some(stat) if stat.zombie => Liveness::Dead(DeadReason::Zombie),
        Some(stat) if stat.start_time != proc_start => Liveness::Reused(ReuseReason::StartTime {
            recorded: proc_start,
            actual: stat.start_time,
        }),
        Some(_) => Liveness::Alive,
    }
}

/// This boot's id (Linux `/proc/sys/kernel/random/boot_id`), `None` where unavailable. A
/// record without one, or a reader without one, skips the boot check and relies on the start
/// time alone.
pub fn current_boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = text.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// The fields of `/proc/<pid>/stat` identity needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 22, clock ticks after boot.
    pub start_time: u64,
    /// State `Z` (or `X`).
    pub zombie: bool,
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Parses a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    // Field 3 was `state`; field 22 is 19 further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat {
        start_time,
        zombie: matches!(state, "Z" | "X"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::record::sample;

    fn own_record() -> DaemonRecord {
        let mut record = sample(std::process::id(), "me", "0.1.0");
        record.proc_start = proc_stat(record.pid).unwrap().start_time;
        record.boot_id = current_boot_id();
        record
    }

    #[test]
    fn own_process_is_alive() {
        assert_eq!(process_alive_as(&own_record()), Liveness::Alive);
    }

    #[test]
    fn wrong_start_or_boot_is_reuse() {
        let mut record = own_record();
        record.proc_start += 1;
        assert!(matches!(
            process_alive_as(&record),
            Liveness::Reused(ReuseReason::StartTime { .. })
        ));
        let mut record = own_record();
        if record.boot_id.is_some() {
            record.boot_id = Some("another-boot".into());
            assert_eq!(
                process_alive_as(&record),
                Liveness::Reused(ReuseReason::OtherBoot)
            );
        }
        // No recorded boot id: the start time alone decides.
        let mut record = own_record();
        record.boot_id = None;
        assert_eq!(process_alive_as(&record), Liveness::Alive);
    }

    #[test]
    fn invalid_and_absent_pids_are_dead() {
        assert_eq!(
            identity_liveness(0, 1, None),
            Liveness::Dead(DeadReason::InvalidPid)
        );
        assert_eq!(
            identity_liveness(u32::MAX, 1, None),
            Liveness::Dead(DeadReason::InvalidPid)
        );
        // Above the kernel's pid_max ceiling (4194304), so never a live pid.
        assert_eq!(
            identity_liveness(4_194_305, 1, None),
            Liveness::Dead(DeadReason::NoProcess)
        );
    }

    #[test]
    fn pid_1_is_not_ours_unless_we_are_root() {
        let liveness = identity_liveness(1, 1, None);
        if nix::unistd::getuid().is_root() {
            assert!(!matches!(liveness, Liveness::Dead(DeadReason::NotOurs)));
        } else {
            assert_eq!(liveness, Liveness::Dead(DeadReason::NotOurs));
        }
    }

    #[test]
    fn stat_parsing_handles_odd_names() {
        let line = "77 (a) b (c)) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                start_time: 5555,
                zombie: false
            })
        );
        let zombie = line.replace(") S ", ") Z ");
        assert!(parse_stat(&zombie).unwrap().zombie);
        assert_eq!(parse_stat("garbage"), None);
    }
}
