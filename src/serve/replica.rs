//! Several `serve` processes sharing one store (`--store`, docs/serve.md "Replicas"): where
//! the store is, how long a run lease lives, and the refusal of a store that cannot keep
//! replicas apart.
//!
//! A replica runs under [`crate::store::LeasePolicy::Ttl`]: it cannot see the other
//! replicas' processes, so a lease is held while its holder renews it (every third of the
//! TTL) and lapses after the TTL. Everything else (fenced writes, takeover by an explicit
//! `run/resume`, the owner key stored with each run) is the engine's and the store's; this
//! module only decides the deployment's settings and refuses unsafe ones before anything is
//! served.

use std::path::PathBuf;
use std::time::Duration;

use crate::env::EnvSnapshot;

/// The run lease's time to live by default (`MHL_SERVE_RUN_LOCK_TTL`).
pub(crate) const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(45);
/// The shortest lease TTL accepted: a heartbeat every 100 ms.
pub(crate) const MIN_LOCK_TTL: Duration = Duration::from_millis(300);
/// The longest lease TTL accepted: a dead replica's runs are resumable within a day.
pub(crate) const MAX_LOCK_TTL: Duration = Duration::from_secs(24 * 3600);

/// The environment variable of the lease TTL.
pub(crate) const LOCK_TTL_VAR: &str = "MHL_SERVE_RUN_LOCK_TTL";
/// The test hook that shortens the housekeeping sweep's period (honoured only where the
/// test hooks are built in).
pub(crate) const SWEEP_INTERVAL_VAR: &str = "MHL_SERVE_SWEEP_INTERVAL";

/// The location scheme of the test-only store without `cas` (`store::CheckThenWrite::without_cas`).
const WITHOUT_CAS_SCHEME: &str = "test-nocas:";

/// A setting of a replicated deployment that cannot be used; each message names the flag or
/// variable and what it expects.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicaError {
    #[error(
        "--store (MHL_SERVE_STORE) is empty; name a SQLite persistence root (a folder) or a PostgreSQL URL"
    )]
    EmptyLocation,
    #[error("{LOCK_TTL_VAR}: expected a duration such as 45s or 1500ms, got {0:?}")]
    BadTtl(String),
    #[error("{LOCK_TTL_VAR}: {given:?} is out of range; a run lease lives between 300ms and 24h")]
    TtlOutOfRange { given: String },
    #[error("{SWEEP_INTERVAL_VAR}: expected a duration such as 60s or 200ms, got {0:?}")]
    BadSweepInterval(String),
    #[error(
        "the run store named by --store does not offer atomic compare-and-swap (cas), so two replicas could execute one run at once; pass --single-replica (or set MHL_SERVE_SINGLE_REPLICA) to acknowledge that this is the only serve process writing to it"
    )]
    NoCas,
}

/// Where the shared store is.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum StoreLocation {
    /// A PostgreSQL connection URL (it may hold a password: never shown, see `Debug`).
    Postgres(String),
    /// A SQLite persistence root (a folder, created mode 0700 if missing).
    Sqlite(PathBuf),
    /// The test-only SQLite store that advertises neither `cas` nor `fence`.
    WithoutCas(PathBuf),
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Postgres(_) => f.write_str("Postgres(..)"),
            StoreLocation::Sqlite(root) => write!(f, "Sqlite({})", root.display()),
            StoreLocation::WithoutCas(root) => write!(f, "WithoutCas({})", root.display()),
        }
    }
}

impl StoreLocation {
    /// `--store`'s value: a `postgres://` / `postgresql://` URL or a path. `test-nocas:<path>`
    /// is honoured only where the test hooks are built in; elsewhere it is a path like any
    /// other.
    pub(crate) fn parse(text: &str) -> Result<StoreLocation, ReplicaError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ReplicaError::EmptyLocation);
        }
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(text.to_owned()));
        }
        if crate::env::TEST_HOOKS_BUILT_IN
            && let Some(path) = text.strip_prefix(WITHOUT_CAS_SCHEME)
        {
            return Ok(StoreLocation::WithoutCas(PathBuf::from(path)));
        }
        Ok(StoreLocation::Sqlite(PathBuf::from(text)))
    }

    /// The persistence root the store's files (and the engine's agent-group records) live
    /// under; `None` for a database server (this process then keeps its few local files in a
    /// temporary folder).
    pub(crate) fn root(&self) -> Option<&std::path::Path> {
        match self {
            StoreLocation::Sqlite(path) | StoreLocation::WithoutCas(path) => Some(path),
            StoreLocation::Postgres(_) => None,
        }
    }
}

/// A replicated deployment's settings (`serve <dir> --store ...`).
#[derive(Clone, Debug)]
pub(crate) struct ReplicaOptions {
    pub location: StoreLocation,
    /// The run lease's TTL: renewed every third of it, lapsed after it.
    pub lock_ttl: Duration,
    /// `--single-replica`: the operator vouches that one process writes to the store, so a
    /// store without `cas` is accepted.
    pub single_replica: bool,
    /// The `PG*` variables (and `HOME`) of the environment, which the composition root hands
    /// to a PostgreSQL store's connection (it reads the ones libpq's users expect).
    pub pg_environment: Vec<(String, String)>,
}

impl ReplicaOptions {
    /// The settings of `--store <location>` with the lease TTL from the environment.
    pub(crate) fn new(
        location: &str,
        single_replica: bool,
        env: &EnvSnapshot,
    ) -> Result<ReplicaOptions, ReplicaError> {
        Ok(ReplicaOptions {
            location: StoreLocation::parse(location)?,
            lock_ttl: lock_ttl(env.non_empty(LOCK_TTL_VAR))?,
            single_replica,
            pg_environment: env
                .iter()
                .filter(|(name, _)| name.starts_with("PG") || *name == "HOME")
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        })
    }

    /// The longest one call to a database server may take: below a third of the TTL (a
    /// quarter, at most 5 s), so a hung database fails calls before a lease can lapse.
    pub(crate) fn call_deadline(&self) -> Duration {
        (self.lock_ttl / 4).min(Duration::from_secs(5))
    }

    /// Refuses a store that cannot keep replicas apart (`cas`: whether it offers atomic
    /// compare-and-swap between its users), unless the operator said there is only one.
    pub(crate) fn check(&self, cas: bool) -> Result<(), ReplicaError> {
        if !cas && !self.single_replica {
            return Err(ReplicaError::NoCas);
        }
        Ok(())
    }
}

/// `MHL_SERVE_RUN_LOCK_TTL` (absent: 45 s), between [`MIN_LOCK_TTL`] and [`MAX_LOCK_TTL`].
pub(crate) fn lock_ttl(value: Option<&str>) -> Result<Duration, ReplicaError> {
    let Some(text) = value else {
        return Ok(DEFAULT_LOCK_TTL);
    };
    let ttl =
        humantime::parse_duration(text.trim()).map_err(|_| ReplicaError::BadTtl(text.into()))?;
    if !(MIN_LOCK_TTL..=MAX_LOCK_TTL).contains(&ttl) {
        return Err(ReplicaError::TtlOutOfRange { given: text.into() });
    }
    Ok(ttl)
}

/// The housekeeping sweep's period: [`super::SWEEP_INTERVAL`], unless the test hook
/// `MHL_SERVE_SWEEP_INTERVAL` shortens it (only where the test hooks are built in).
pub(crate) fn sweep_interval(env: &EnvSnapshot) -> Result<Duration, ReplicaError> {
    let Some(text) = env
        .non_empty(SWEEP_INTERVAL_VAR)
        .filter(|_| crate::env::TEST_HOOKS_BUILT_IN)
    else {
        return Ok(super::SWEEP_INTERVAL);
    };
    let interval = humantime::parse_duration(text.trim())
        .map_err(|_| ReplicaError::BadSweepInterval(text.into()))?;
    Ok(interval.max(Duration::from_millis(10)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_ttl_is_a_duration_within_its_range() {
        assert_eq!(lock_ttl(None).unwrap(), Duration::from_secs(45));
        assert_eq!(
            lock_ttl(Some("1500ms")).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(lock_ttl(Some("300ms")).unwrap(), MIN_LOCK_TTL);
        assert_eq!(lock_ttl(Some("24h")).unwrap(), MAX_LOCK_TTL);
        let short = lock_ttl(Some("299ms")).unwrap_err().to_string();
        assert_eq!(
            short,
            "MHL_SERVE_RUN_LOCK_TTL: \"299ms\" is out of range; a run lease lives between 300ms and 24h"
        );
        assert!(lock_ttl(Some("86401s")).is_err());
        let bad = lock_ttl(Some("soon")).unwrap_err().to_string();
        assert_eq!(
            bad,
            "MHL_SERVE_RUN_LOCK_TTL: expected a duration such as 45s or 1500ms, got \"soon\""
        );
    }

    #[test]
    fn a_location_is_a_path_or_a_url_and_a_url_is_never_echoed() {
        assert_eq!(
            StoreLocation::parse("/var/lib/runs").unwrap(),
            StoreLocation::Sqlite(PathBuf::from("/var/lib/runs"))
        );
        for url in [
            "postgres://agentprism:secret@db/agentprism",
            "PostgreSQL://db/x",
        ] {
            let location = StoreLocation::parse(url).unwrap();
            assert_eq!(location, StoreLocation::Postgres(url.to_owned()));
            assert_eq!(format!("{location:?}"), "Postgres(..)");
            assert_eq!(location.root(), None);
        }
        assert!(matches!(
            StoreLocation::parse(" "),
            Err(ReplicaError::EmptyLocation)
        ));
        assert_eq!(
            StoreLocation::parse("test-nocas:/tmp/x").unwrap(),
            StoreLocation::WithoutCas(PathBuf::from("/tmp/x"))
        );
    }

    #[test]
    fn a_store_without_cas_needs_the_single_replica_acknowledgement() {
        let options = |single_replica| ReplicaOptions {
            location: StoreLocation::Sqlite(PathBuf::from("/x")),
            lock_ttl: DEFAULT_LOCK_TTL,
            single_replica,
            pg_environment: Default::default(),
        };
        let error = options(false).check(false).unwrap_err().to_string();
        assert!(error.contains("--single-replica"), "{error}");
        assert!(options(true).check(false).is_ok());
        assert!(options(false).check(true).is_ok());
    }
}
