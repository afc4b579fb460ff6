//! Where a store lives, as one string (`serve --store`, `MHL_SERVE_STORE`): a
//! `postgres://` or `postgresql://` URL opens the shared PostgreSQL store; anything else is
//! the persistence root of an embedded SQLite store.

use std::path::PathBuf;
use std::sync::Arc;

use super::postgres::{PgOptions, PostgresStore, redacted};
use super::{SqliteStore, Store, StoreError, StoreResult};

/// A parsed store location.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A PostgreSQL connection URL (it may hold a password: show it with
    /// [`StoreLocation::display`], never `{:?}` of the URL itself).
    Postgres(String),
    /// A SQLite persistence root.
    Sqlite(PathBuf),
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Postgres(url) => write!(formatter, "Postgres({})", redacted(url)),
            StoreLocation::Sqlite(root) => write!(formatter, "Sqlite({})", root.display()),
        }
    }
}

impl StoreLocation {
    /// Reads `location`; an empty one is refused.
    pub fn parse(location: &str) -> StoreResult<StoreLocation> {
        let trimmed = location.trim();
        if trimmed.is_empty() {
            return Err(StoreError::Io(
                "the store location is empty; expected a postgres:// URL or a SQLite \
                 persistence folder"
                    .to_owned(),
            ));
        }
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(trimmed.to_owned()));
        }
        Ok(StoreLocation::Sqlite(PathBuf::from(location)))
    }

    /// The location for messages and logs: a URL's password hidden.
    pub fn display(&self) -> String {
        match self {
            StoreLocation::Postgres(url) => redacted(url),
            StoreLocation::Sqlite(root) => root.display().to_string(),
        }
    }

    /// Whether several processes on several hosts can share it.
    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, StoreLocation::Postgres(_))
    }
}

/// Opens the store at `location`: PostgreSQL with `options` (its deadline, pool and the
/// local folder for script copies), or SQLite at the path (`options` unused).
pub async fn open_location(location: &str, options: PgOptions) -> StoreResult<Arc<dyn Store>> {
    match StoreLocation::parse(location)? {
        StoreLocation::Postgres(url) => Ok(Arc::new(PostgresStore::connect(&url, options).await?)),
        StoreLocation::Sqlite(root) => Ok(Arc::new(SqliteStore::open(&root)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_the_rest_are_sqlite_roots() {
        assert_eq!(
            StoreLocation::parse("postgres://me:pw@db/runs").unwrap(),
            StoreLocation::Postgres("postgres://me:pw@db/runs".to_owned())
        );
        assert!(
            StoreLocation::parse("PostgreSQL://db/runs")
                .unwrap()
                .is_shared()
        );
        assert_eq!(
            StoreLocation::parse("/var/lib/agentprism").unwrap(),
            StoreLocation::Sqlite(PathBuf::from("/var/lib/agentprism"))
        );
        assert!(!StoreLocation::parse("./state").unwrap().is_shared());
        let empty = StoreLocation::parse("  ").unwrap_err().to_string();
        assert!(empty.contains("store location is empty"), "{empty}");
    }

    #[test]
    fn the_password_never_shows() {
        let location = StoreLocation::parse("postgres://me:hunter2@db/runs").unwrap();
        assert_eq!(location.display(), "postgres://me:***@db/runs");
        assert!(!format!("{location:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn a_sqlite_root_opens_the_embedded_store() {
        let folder = tempfile::tempdir().unwrap();
        let root = folder.path().join("root");
        let store = open_location(root.to_str().unwrap(), PgOptions::new(folder.path()))
            .await
            .unwrap();
        assert!(store.capabilities().cas);
        assert!(root.join(super::super::sqlite::DATABASE_FILE).is_file());
    }
}
