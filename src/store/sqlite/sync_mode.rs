//! How far a commit is on disk when it returns: the `PRAGMA synchronous` the store's
//! connection runs with, chosen by `AGENTPRISM_STORE_SYNC`.
//!
//! In WAL mode SQLite appends each commit to the `-wal` file. With `FULL` it syncs that file
//! before the commit returns, so a settled call's journal entry is on the disk before the
//! engine counts the call as settled, and an OS crash or a power cut cannot take it back. With
//! `NORMAL` it syncs the WAL only at a checkpoint: a process crash still keeps every commit
//! (they are in the kernel's page cache), but an OS crash or power cut may drop the commits
//! since the last checkpoint, and the calls they settled run live again on resume. `FULL`
//! costs one sync per transaction, not per call: the engine commits the calls that settle
//! together in one transaction (its group commit, `engine/driver/durability.rs`), so they
//! share the sync (docs/performance.md measures it).

use crate::env::{self, EnvSnapshot};

/// The durability of a commit, from `AGENTPRISM_STORE_SYNC`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreSync {
    /// `full` (the default): every commit is synced to the disk before it returns, so it
    /// survives a process crash, an OS crash and a power cut.
    #[default]
    Full,
    /// `normal`: commits survive a process crash, but an OS crash or power cut may drop the
    /// last ones (since the WAL's last checkpoint). Saves one sync per commit.
    Normal,
}

impl StoreSync {
    /// Reads `AGENTPRISM_STORE_SYNC`: unset or empty is [`StoreSync::Full`]; a value other than
    /// `full` or `normal` (any case) is refused with an error naming the variable.
    pub fn from_env(env: &EnvSnapshot) -> Result<StoreSync, String> {
        let Some(value) = env.non_empty(env::STORE_SYNC) else {
            return Ok(StoreSync::Full);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "full" => Ok(StoreSync::Full),
            "normal" => Ok(StoreSync::Normal),
            _ => Err(format!(
                "{} must be `full` (every commit synced to the disk, the default) or `normal` \
                 (an OS crash or power cut may drop the last commits), got {value:?}",
                env::STORE_SYNC
            )),
        }
    }

    /// The value of `PRAGMA synchronous` that gives this durability.
    pub(super) fn pragma(self) -> &'static str {
        match self {
            StoreSync::Full => "FULL",
            StoreSync::Normal => "NORMAL",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: &str) -> Result<StoreSync, String> {
        StoreSync::from_env(&EnvSnapshot::from_pairs([(env::STORE_SYNC, value)]))
    }

    #[test]
    fn unset_is_full_and_both_values_are_read_in_any_case() {
        assert_eq!(
            StoreSync::from_env(&EnvSnapshot::default()),
            Ok(StoreSync::Full)
        );
        assert_eq!(read(""), Ok(StoreSync::Full));
        assert_eq!(read("full"), Ok(StoreSync::Full));
        assert_eq!(read(" Normal "), Ok(StoreSync::Normal));
    }

    #[test]
    fn another_value_is_refused_naming_the_variable() {
        for value in ["off", "extra", "1", "fsync"] {
            let error = read(value).unwrap_err();
            assert!(error.contains("AGENTPRISM_STORE_SYNC"), "{error}");
            assert!(error.contains(&format!("{value:?}")), "{error}");
        }
    }
}
