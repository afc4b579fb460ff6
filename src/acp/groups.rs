//! Durable records of the agent process groups an owner (a daemon or a foreground run)
//! started, and the sweep that ends the groups of owners that died. The reaper
//! ([`crate::acp::reaper`]) normally ends a group the moment its owner dies; a record is the
//! second line: a reaper that could not act (stopped, or killed together with its owner)
//! leaves a live group whose record names a dead owner, and the next owner to start kills it.
//!
//! Layout: `R/agent-groups/` (0700), one file per group named `<pgid>-<leaderStart>.json`
//! (0600), written with [`crate::util::write_atomic`] by the owner right after the spawn and
//! removed once the group's leader has been reaped. The format is versioned (frozen sample
//! in the tests below).
//!
//! A record is never believed on its word. The sweep signals a group only when the record's
//! owner is no longer running (pid + start time + boot id, as daemon records are checked) and
//! its leader still is: same pid, same start time, same boot, still leading the group, still
//! an `agentprism agent-reaper`. Only then does it send SIGKILL to the group; a record whose
//! leader is gone or is another process is removed without any signal, never a bare
//! `kill(-pgid)`. The one remaining window is the leader dying, being reaped, its whole group
//! exiting and the pid being reused as a new group's leader between the check and the
//! `killpg`, all within microseconds.

use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::discovery::liveness::{current_boot_id, identity_liveness, proc_stat};

/// Folder under the persistence root that holds the records.
pub(crate) const FOLDER: &str = "agent-groups";
/// The record format's version.
pub(crate) const RECORD_VERSION: u32 = 1;

/// One live agent process group and the owner that started it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupRecord {
    pub version: u32,
    /// The group id, which is the leader's (the reaper's) pid.
    pub pgid: u32,
    /// The leader's start time (`/proc/<pid>/stat` field 22).
    pub leader_start: u64,
    /// The boot the pids belong to; `None` where the system has no boot id.
    pub boot_id: Option<String>,
    pub owner_pid: u32,
    pub owner_start: u64,
    /// The backend id, for people reading the folder.
    pub backend: String,
}

impl GroupRecord {
    /// A record for the group led by `pgid`, owned by this process. `None` when the leader's
    /// or our own start time cannot be read (no `/proc`): such a record could never be
    /// verified, so none is written.
    pub(crate) fn for_leader(pgid: u32, backend: &str) -> Option<GroupRecord> {
        let leader_start = proc_stat(pgid)?.start_time;
        let owner_pid = std::process::id();
        let owner_start = proc_stat(owner_pid)?.start_time;
        Some(GroupRecord {
            version: RECORD_VERSION,
            pgid,
            leader_start,
            boot_id: current_boot_id(),
            owner_pid,
            owner_start,
            backend: backend.to_owned(),
        })
    }

    /// The record's file name in the folder.
    pub(crate) fn file_name(&self) -> String {
        format!("{}-{}.json", self.pgid, self.leader_start)
    }
}

/// Writes `record` into `folder` (created 0700 if missing; its parent must exist) and
/// returns the file's path.
pub(crate) fn write(folder: &Path, record: &GroupRecord) -> std::io::Result<PathBuf> {
    crate::discovery::paths::ensure_private_dir(folder).map_err(std::io::Error::other)?;
    let path = folder.join(record.file_name());
    let bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    crate::util::write_atomic(&path, &bytes, crate::discovery::paths::FILE_MODE)?;
    Ok(path)
}

/// Removes a record; one that is already gone is fine.
pub(crate) fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot remove an agent group record")
        }
    }
}

/// What a sweep did, for logs and tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SweepReport {
    /// Groups of dead owners that were still alive and got SIGKILL.
    pub killed: Vec<u32>,
    /// Records of dead owners whose leader was gone or was another process: removed, no
    /// signal sent.
    pub stale: usize,
    /// Records of owners still running: left alone.
    pub live_owners: usize,
    /// Files that are not records of this version: left alone.
    pub unreadable: usize,
}

/// Ends the recorded groups of owners that are no longer running, then removes their records
/// (see the module documentation for the checks). A missing folder is an empty sweep.
pub(crate) fn sweep(folder: &Path) -> SweepReport {
    let mut report = SweepReport::default();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return report;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let path = entry.path();
        let record = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<GroupRecord>(&bytes).ok())
            .filter(|record| record.version == RECORD_VERSION);
        let Some(record) = record else {
            report.unreadable += 1;
            continue;
        };
        let owner = identity_liveness(
            record.owner_pid,
            record.owner_start,
            record.boot_id.as_deref(),
        );
        if owner.is_alive() {
            report.live_owners += 1;
            continue;
        }
        if leader_verified(&record) {
            match i32::try_from(record.pgid) {
                Ok(pgid) => match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
                    Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                    Err(error) => {
                        tracing::warn!(pgid, %error, "cannot kill an orphaned agent group");
                    }
                },
                Err(_) => continue,
            }
            tracing::warn!(
                pgid = record.pgid,
                owner = record.owner_pid,
                backend = %record.backend,
                "killed the agent process group of an owner that died ({owner})"
            );
            report.killed.push(record.pgid);
        } else {
            report.stale += 1;
        }
        remove(&path);
    }
    report
}

/// Whether the record's leader is still the very reaper that was recorded, leading its group.
fn leader_verified(record: &GroupRecord) -> bool {
    if !identity_liveness(record.pgid, record.leader_start, record.boot_id.as_deref()).is_alive() {
        return false;
    }
    let leads = crate::util::process::proc_stat(record.pgid)
        .is_some_and(|stat| i64::from(stat.pgrp) == i64::from(record.pgid));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", record.pgid)).unwrap_or_default();
    let is_reaper = cmdline
        .split(|&byte| byte == 0)
        .nth(1)
        .is_some_and(|arg| arg == crate::acp::reaper::SUBCOMMAND.as_bytes());
    leads && is_reaper
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The v1 format as written by the first release; a change that breaks it fails here.
    const FROZEN_V1: &str = r#"{"version":1,"pgid":4242,"leaderStart":987654,"bootId":"0b5e8c1e-8f6e-4c59-9d4b-5b2f0d6f1a77","ownerPid":4200,"ownerStart":987000,"backend":"claude"}"#;

    #[test]
    fn the_frozen_v1_record_reads() {
        let record: GroupRecord = serde_json::from_str(FROZEN_V1).expect("v1 parses");
        assert_eq!(
            record,
            GroupRecord {
                version: 1,
                pgid: 4242,
                leader_start: 987654,
                boot_id: Some("0b5e8c1e-8f6e-4c59-9d4b-5b2f0d6f1a77".into()),
                owner_pid: 4200,
                owner_start: 987000,
                backend: "claude".into(),
            }
        );
        assert_eq!(serde_json::to_string(&record).unwrap(), FROZEN_V1);
        assert_eq!(record.file_name(), "4242-987654.json");
    }

    /// A record whose owner is running is left alone; a dead owner's record whose leader is
    /// not the recorded process is removed without a signal.
    #[test]
    fn records_of_live_owners_stay_and_stale_ones_go_without_a_signal() {
        let folder = tempfile::tempdir().unwrap();
        let dir = folder.path().join(FOLDER);
        // Our own process as the owner: alive.
        let mut live = GroupRecord::for_leader(std::process::id(), "mine").expect("own stat");
        live.pgid = 1;
        let live_path = write(&dir, &live).unwrap();
        // A dead owner (start time off by one: "reused"), and our own pid as a leader whose
        // start time does not match: must not be signalled.
        let mut stale = GroupRecord::for_leader(std::process::id(), "stale").unwrap();
        stale.owner_start += 1;
        stale.leader_start += 1;
        let stale_path = write(&dir, &stale).unwrap();
        std::fs::write(dir.join("junk.json"), b"{}").unwrap();
        let report = sweep(&dir);
        assert_eq!(
            report,
            SweepReport {
                killed: Vec::new(),
                stale: 1,
                live_owners: 1,
                unreadable: 1
            }
        );
        assert!(live_path.exists());
        assert!(!stale_path.exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&live_path), 0o600);
    }
}
