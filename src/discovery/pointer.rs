//! The family pointer `<fp>.json` names the family's current daemon. Daemons change it only
//! by compare-and-swap under `flock(<fp>.pointer.lock)`, so two daemons starting at once
//! cannot both believe they are current, and a daemon that exits never removes a pointer its
//! successor has already written (the read-then-unlink race of pitfall 11).
//!
//! A pointer that holds a foreign or malformed record is replaced like a missing one: the
//! pointer names the current daemon *of this implementation*; foreign daemons keep their own
//! records and stay visible to `daemon status`.

use std::time::Duration;

use super::record::{RecordRead, read_record, write_record};
use super::{DaemonRecord, DiscoveryError, Paths, Result, compare_versions, lock_file};

/// How long a daemon waits for another daemon's pointer CAS, which takes milliseconds.
pub(crate) const POINTER_LOCK_DEADLINE: Duration = Duration::from_secs(5);

/// What [`claim_pointer`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// The pointer now names us. `replaced` is what it named before, if anything.
    Claimed { replaced: Replaced },
    /// A live daemon we may not displace is current: exit 0 "already running".
    AlreadyRunning(DaemonRecord),
}

/// What a successful claim overwrote.
#[derive(Clone, Debug, PartialEq)]
pub enum Replaced {
    Nothing,
    /// Our own earlier claim (the same instance rewriting its pointer).
    Itself,
    /// A daemon that failed the liveness check.
    Dead(DaemonRecord),
    /// A live daemon of a strictly lower version, which we supersede.
    Superseded(DaemonRecord),
    /// A record of another implementation, or one that did not parse.
    NotOurs(RecordRead),
}

/// Points the family of `record.env_fingerprint` at `record`, if allowed: when there is no
/// pointer, when the daemon it names is not alive (`is_alive`, normally
/// `|r| process_alive_as(r).is_alive()`), or when `supersede` is set and its version is
/// strictly lower than ours. Otherwise the pointer is left alone.
pub fn claim_pointer(
    paths: &Paths,
    record: &DaemonRecord,
    supersede: bool,
    is_alive: impl Fn(&DaemonRecord) -> bool,
) -> Result<Claim> {
    paths.ensure_dirs()?;
    let fingerprint = &record.env_fingerprint;
    let _lock = lock_file(&paths.pointer_lock(fingerprint), POINTER_LOCK_DEADLINE)?;
    let pointer = paths.pointer(fingerprint);
    let replaced = match read_record(&pointer) {
        RecordRead::Absent => Replaced::Nothing,
        RecordRead::Ours(existing) if existing.same_instance(record) => Replaced::Itself,
        RecordRead::Ours(existing) if !is_alive(&existing) => Replaced::Dead(existing),
        RecordRead::Ours(existing)
            if supersede && compare_versions(&existing.version, &record.version).is_lt() =>
        {
            Replaced::Superseded(existing)
        }
        RecordRead::Ours(existing) => return Ok(Claim::AlreadyRunning(existing)),
        other => Replaced::NotOurs(other),
    };
    write_record(&pointer, record)?;
    Ok(Claim::Claimed { replaced })
}

/// The pointer of family `fingerprint`, if it holds a record of ours.
pub(crate) fn read_pointer(paths: &Paths, fingerprint: &str) -> Option<DaemonRecord> {
    super::record::read_own_record(&paths.pointer(fingerprint))
}

/// Removes the pointer of family `fingerprint` if, under the pointer lock, it still names the
/// daemon `(pid, instance_id)`. Returns whether it did.
pub fn clear_pointer_if_mine(
    paths: &Paths,
    fingerprint: &str,
    pid: u32,
    instance_id: &str,
) -> Result<bool> {
    let pointer = paths.pointer(fingerprint);
    if !pointer.exists() {
        return Ok(false);
    }
    let _lock = lock_file(&paths.pointer_lock(fingerprint), POINTER_LOCK_DEADLINE)?;
    match read_record(&pointer) {
        RecordRead::Ours(existing)
            if existing.pid == pid && existing.instance_id == instance_id =>
        {
            match std::fs::remove_file(&pointer) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(DiscoveryError::io("remove pointer", pointer, e)),
            }
        }
        _ => Ok(false),
    }
}

/// Removes this daemon's `instances/<pid>.json` if it still names `instance_id` (a record a
/// later process on the same pid wrote is left alone). Missing is fine.
pub fn remove_own_record(paths: &Paths, pid: u32, instance_id: &str) -> Result<()> {
    let path = paths.instance_record(pid);
    match read_record(&path) {
        RecordRead::Ours(existing) if existing.instance_id != instance_id => return Ok(()),
        RecordRead::Absent => return Ok(()),
        _ => {}
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DiscoveryError::io("remove daemon record", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::record::sample;

    fn setup() -> (tempfile::TempDir, Paths) {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        (temp, paths)
    }

    const ALIVE: fn(&DaemonRecord) -> bool = |_| true;
    const DEAD: fn(&DaemonRecord) -> bool = |_| false;

    #[test]
    fn first_claim_wins_and_same_instance_may_reclaim() {
        let (_temp, paths) = setup();
        let me = sample(10, "a", "0.1.0");
        assert_eq!(
            claim_pointer(&paths, &me, false, ALIVE).unwrap(),
            Claim::Claimed {
                replaced: Replaced::Nothing
            }
        );
        assert_eq!(read_pointer(&paths, &me.env_fingerprint), Some(me.clone()));
        assert_eq!(
            claim_pointer(&paths, &me, false, ALIVE).unwrap(),
            Claim::Claimed {
                replaced: Replaced::Itself
            }
        );
    }

    #[test]
    fn live_owner_blocks_unless_strictly_older_and_superseding() {
        let (_temp, paths) = setup();
        let owner = sample(10, "a", "0.2.0");
        claim_pointer(&paths, &owner, false, ALIVE).unwrap();
        for (version, supersede) in [
            ("0.3.0", false),
            ("0.2.0", true),
            ("0.2.0+other", true),
            ("0.1.9", true),
            ("0.2.0-rc.1", true),
        ] {
            let challenger = sample(11, "b", version);
            assert_eq!(
                claim_pointer(&paths, &challenger, supersede, ALIVE).unwrap(),
                Claim::AlreadyRunning(owner.clone()),
                "{version} supersede={supersede}"
            );
            assert_eq!(
                read_pointer(&paths, &owner.env_fingerprint),
                Some(owner.clone())
            );
        }
        let newer = sample(12, "c", "0.3.0");
        assert_eq!(
            claim_pointer(&paths, &newer, true, ALIVE).unwrap(),
            Claim::Claimed {
                replaced: Replaced::Superseded(owner)
            }
        );
        assert_eq!(read_pointer(&paths, &newer.env_fingerprint), Some(newer));
    }

    #[test]
    fn dead_owner_is_replaced_whatever_its_version() {
        let (_temp, paths) = setup();
        let owner = sample(10, "a", "9.0.0");
        claim_pointer(&paths, &owner, false, ALIVE).unwrap();
        let me = sample(11, "b", "0.1.0");
        assert_eq!(
            claim_pointer(&paths, &me, false, DEAD).unwrap(),
            Claim::Claimed {
                replaced: Replaced::Dead(owner)
            }
        );
    }

    #[test]
    fn foreign_or_malformed_pointer_is_replaced() {
        let (_temp, paths) = setup();
        let me = sample(11, "b", "0.1.0");
        paths.ensure_dirs().unwrap();
        std::fs::write(
            paths.pointer(&me.env_fingerprint),
            br#"{"name":"agentprism-daemon","version":"0.30.0","pid":1}"#,
        )
        .unwrap();
        assert!(matches!(
            claim_pointer(&paths, &me, false, ALIVE).unwrap(),
            Claim::Claimed {
                replaced: Replaced::NotOurs(RecordRead::Foreign(_))
            }
        ));
        std::fs::write(paths.pointer(&me.env_fingerprint), b"{").unwrap();
        assert!(matches!(
            claim_pointer(&paths, &me, false, ALIVE).unwrap(),
            Claim::Claimed {
                replaced: Replaced::NotOurs(RecordRead::Malformed { .. })
            }
        ));
    }

    #[test]
    fn clear_only_own_pointer() {
        let (_temp, paths) = setup();
        let me = sample(10, "a", "0.1.0");
        let fp = me.env_fingerprint.clone();
        assert!(!clear_pointer_if_mine(&paths, &fp, 10, "a").unwrap());
        claim_pointer(&paths, &me, false, ALIVE).unwrap();
        assert!(!clear_pointer_if_mine(&paths, &fp, 10, "other").unwrap());
        assert!(!clear_pointer_if_mine(&paths, &fp, 11, "a").unwrap());
        assert!(paths.pointer(&fp).exists());
        assert!(clear_pointer_if_mine(&paths, &fp, 10, "a").unwrap());
        assert!(!paths.pointer(&fp).exists());
    }

    #[test]
    fn remove_own_record_spares_a_newer_owner_of_the_pid() {
        let (_temp, paths) = setup();
        let me = sample(10, "a", "0.1.0");
        crate::discovery::record::write_own_record(&paths, &me).unwrap();
        remove_own_record(&paths, 10, "someone-else").unwrap();
        assert!(paths.instance_record(10).exists());
        remove_own_record(&paths, 10, "a").unwrap();
        assert!(!paths.instance_record(10).exists());
        remove_own_record(&paths, 10, "a").unwrap();
    }

    #[test]
    fn concurrent_claims_elect_one() {
        for _ in 0..10 {
            let (_temp, paths) = setup();
            let paths = std::sync::Arc::new(paths);
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
            let threads: Vec<_> = (0..6u32)
                .map(|i| {
                    let (paths, barrier) = (paths.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let me = sample(100 + i, &format!("i{i}"), "0.1.0");
                        barrier.wait();
                        claim_pointer(&paths, &me, false, ALIVE).unwrap()
                    })
                })
                .collect();
            let claims: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            let winners = claims
                .iter()
                .filter(|c| matches!(c, Claim::Claimed { .. }))
                .count();
            assert_eq!(winners, 1, "{claims:?}");
        }
    }
}
