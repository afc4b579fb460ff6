//! Is the process a record names still that daemon (daemon.md 1.4a)? `kill(pid, 0)` alone
//! lies: EPERM means another user's process may hold the pid, a zombie answers like a live
//! one, and pids recycle, also across reboots. So a record's pid counts only if it exists, is
//! not a zombie, and has the start time and boot id the record carries.
//!
//! The rule and the `/proc/<pid>/stat` reading are not discovery's own: they live in
//! [`crate::util::process`], which run leases and agent-group records use as well, so every
//! caller gets the same answer for the same process. This module keeps the names discovery's
//! callers use and applies the rule to a daemon record.

pub use crate::util::process::{
    DeadReason, Liveness, ProcStat, ReuseReason, current_boot_id, parse_stat, proc_stat,
};

use super::DaemonRecord;

/// Whether the daemon `record` describes is still running.
pub fn process_alive_as(record: &DaemonRecord) -> Liveness {
    identity_liveness(record.pid, record.proc_start, record.boot_id.as_deref())
}

/// Whether the process `pid` that started at `proc_start` during boot `boot_id` (when known)
/// is still running: [`crate::util::process::identity`].
pub fn identity_liveness(pid: u32, proc_start: u64, boot_id: Option<&str>) -> Liveness {
    crate::util::process::identity(pid, proc_start, boot_id)
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
    fn the_group_is_read_past_odd_command_names() {
        let line = "77 (a) b (c)) S 1 70 70 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 1000 10";
        let stat = parse_stat(line).expect("parsed");
        assert_eq!((stat.pgrp, stat.zombie), (70, false));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn stat_parsing_handles_odd_names() {
        let line = "77 (a) b (c)) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                start_time: 5555,
                zombie: false,
                pgrp: 77,
            })
        );
        let zombie = line.replace(") S ", ") Z ");
        assert!(parse_stat(&zombie).unwrap().zombie);
        assert_eq!(parse_stat("garbage"), None);
    }
}
