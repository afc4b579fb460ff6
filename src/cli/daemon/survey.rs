//! The reconciled view of this user's daemons under one persistence root (daemon.md 1.11):
//! instance records matched against the process table, stale records pruned (never
//! signalled), each tracked daemon probed and given its role (current, draining, other
//! family, unresponsive), plus what the run-control key file allows.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};

use crate::daemon::probe::Probe;
use crate::discovery::pointer::read_pointer;
use crate::discovery::process_table::{PruneReason, prune};
use crate::discovery::record::read_instance_records;
use crate::discovery::{
    DaemonRecord, Entry, Paths, ProcessScan, Role, RunControlKey, current_fingerprint,
    fingerprint_of, process_alive_as, reconcile,
};
use crate::env::{self, EnvSnapshot};

/// One line of `daemon status`.
#[derive(Debug)]
pub(super) struct Listed {
    pub(super) role: &'static str,
    pub(super) pid: Option<u32>,
    pub(super) entry: Entry,
    pub(super) health: Option<Value>,
    /// Why the daemon is listed under its role, when that needs saying.
    pub(super) note: Option<String>,
}

/// The reconciled view of this user's daemons under one persistence root.
pub(super) struct Survey {
    pub(super) paths: Paths,
    pub(super) fingerprint: String,
    pub(super) listed: Vec<Listed>,
    pub(super) pruned: Vec<(PathBuf, String)>,
    pub(super) key: KeyState,
}

/// What the run-control key file allows (daemon.md 1.1: a doubtful key fails closed).
#[derive(Debug)]
pub(super) enum KeyState {
    Usable,
    /// No key yet: the next daemon creates it.
    Absent,
    /// The file exists but cannot be trusted: daemons run with control off, `/healthz`
    /// carries no proof, and there is no supersession until it is replaced.
    Unusable(String),
}

impl KeyState {
    fn of(loaded: &Result<RunControlKey, crate::discovery::KeyError>) -> KeyState {
        match loaded {
            Ok(_) => KeyState::Usable,
            Err(crate::discovery::KeyError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                KeyState::Absent
            }
            Err(error) => KeyState::Unusable(error.to_string()),
        }
    }

    pub(super) fn json(&self, path: &Path) -> Value {
        match self {
            KeyState::Usable => json!({"key": path, "usable": true, "error": null}),
            KeyState::Absent => json!({"key": path, "usable": null, "error": null}),
            KeyState::Unusable(error) => json!({"key": path, "usable": false, "error": error}),
        }
    }
}

/// Reads the records, scans the process table, prunes what is stale and probes every tracked
/// daemon.
pub(super) async fn survey(env: &EnvSnapshot) -> Result<Survey> {
    let paths = Paths::from_env(env)?;
    crate::daemon::remember_token(env, &paths);
    let fingerprint = current_fingerprint();
    let loaded = RunControlKey::load(&paths.run_control_key());
    let key_state = KeyState::of(&loaded);
    let key = loaded.ok();
    let records = read_instance_records(&paths)?;
    let processes = daemon_processes(env, &paths)?;
    let entries = reconcile(&records, &processes, process_alive_as);
    let removed = prune(&entries)?;
    let pointer = read_pointer(&paths, &fingerprint);
    let mut listed = Vec::new();
    let mut pruned = Vec::new();
    for entry in entries {
        let (role, pid, health, note) = match &entry.role {
            Role::Pruned(reason) => {
                if let Some(file) = &entry.record
                    && removed.contains(&file.path)
                {
                    pruned.push((file.path.clone(), prune_reason(reason)));
                }
                continue;
            }
            Role::Tracked => {
                let record = entry.own_record().expect("tracked entries have a record");
                let named = pointer
                    .as_ref()
                    .is_some_and(|current| current.same_instance(record));
                let (role, health, note) =
                    probe_tracked(record, key.as_ref(), named, &fingerprint).await;
                (role, Some(record.pid), health, note)
            }
            Role::Untracked => (
                "untracked",
                entry.process.as_ref().map(|p| p.pid),
                None,
                Some("no record; listed from the process table".into()),
            ),
            Role::Foreign => (
                "foreign",
                entry.process.as_ref().map(|p| p.pid),
                None,
                Some("a record of another implementation; never signalled without --all".into()),
            ),
            Role::Malformed { reason } => (
                "malformed",
                None,
                None,
                Some(format!("unreadable record: {reason}")),
            ),
        };
        listed.push(Listed {
            role,
            pid,
            entry,
            health,
            note,
        });
    }
    Ok(Survey {
        paths,
        fingerprint,
        listed,
        pruned,
        key: key_state,
    })
}

/// agentprism daemon processes of this user (this binary, or `AGENTPRISM_DAEMON_BIN`) that
/// serve `paths`' persistence root.
fn daemon_processes(
    env: &EnvSnapshot,
    paths: &Paths,
) -> Result<Vec<crate::discovery::process_table::DaemonProcess>> {
    let mut scan = ProcessScan::new();
    if let Ok(exe) = std::env::current_exe() {
        scan = scan.with_binary(exe);
    }
    if let Some(binary) = env.non_empty(env::DAEMON_BIN) {
        scan = scan.with_binary(binary);
    }
    Ok(scan
        .scan()?
        .into_iter()
        .filter(|process| serves_root(process.pid, paths.root()))
        .collect())
}

/// The role of a tracked daemon by its `/healthz` answer: current (named by the pointer and
/// qualifying), draining, other family, or unresponsive; with the health body or the reason.
async fn probe_tracked(
    record: &DaemonRecord,
    key: Option<&RunControlKey>,
    named: bool,
    fingerprint: &str,
) -> (&'static str, Option<Value>, Option<String>) {
    let probe =
        crate::daemon::probe::probe(record, key, crate::discovery::healthz::HEALTHZ_TIMEOUT).await;
    match probe {
        Probe::Identified(health) => {
            let role = if record.env_fingerprint != fingerprint {
                "other family"
            } else if named && crate::daemon::probe::body_qualifies(&health) {
                "current"
            } else {
                "draining"
            };
            (role, Some(health), None)
        }
        Probe::Unresponsive => ("unresponsive", None, Some("no /healthz answer".into())),
        Probe::Refused(why) | Probe::Mismatch(why) => ("unresponsive", None, Some(why)),
    }
}

/// Whether process `pid` serves the persistence root `root`, judged by the environment it
/// started with. An unreadable environment counts as ours: better listed than hidden.
pub(super) fn serves_root(pid: u32, root: &Path) -> bool {
    let Some(env) = process_environment(pid) else {
        return true;
    };
    Paths::from_env(&env).is_ok_and(|paths| paths.root() == root)
}

pub(super) fn process_environment(pid: u32) -> Option<EnvSnapshot> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(EnvSnapshot::from_pairs(
        bytes.split(|&b| b == 0).filter_map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            let (key, value) = text.split_once('=')?;
            Some((key.to_owned(), value.to_owned()))
        }),
    ))
}

/// The env family of a process without a record, from the environment it started with.
pub(super) fn process_family(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    use std::os::unix::ffi::OsStrExt;
    Some(fingerprint_of(bytes.split(|&b| b == 0).filter_map(
        |pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            Some((
                std::ffi::OsStr::from_bytes(&pair[..at]).to_owned(),
                std::ffi::OsStr::from_bytes(&pair[at + 1..]).to_owned(),
            ))
        },
    )))
}

pub(super) fn prune_reason(reason: &PruneReason) -> String {
    match reason {
        PruneReason::Dead(dead) => format!("{}", crate::discovery::Liveness::Dead(dead.clone())),
        PruneReason::Reused(reused) => {
            format!("{}", crate::discovery::Liveness::Reused(reused.clone()))
        }
        PruneReason::InstanceMismatch { process } => {
            format!("the process on the pid was started as instance {process}")
        }
    }
}
