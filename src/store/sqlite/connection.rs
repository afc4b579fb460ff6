//! Opening the database: private files, the connection's settings (WAL, the chosen
//! `synchronous`, busy timeout, small pages, no checkpoint on close), the schema migrations,
//! and the write transaction every read-modify-write operation runs in.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, FileControl, MAIN_DB, Transaction, TransactionBehavior};

use super::StoreSync;
use crate::store::{StoreError, StoreResult};

/// Schema migrations in the order they apply; after migration `n` (1-based) the database's
/// `user_version` is `n`. Append new files, never edit one a release shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_initial.sql"),
    include_str!("../migrations/sqlite/0002_isolation.sql"),
    include_str!("../migrations/sqlite/0003_reset_at.sql"),
    include_str!("../migrations/sqlite/0004_auto_resume.sql"),
    include_str!("../migrations/sqlite/0005_open_sessions.sql"),
    include_str!("../migrations/sqlite/0006_live_reason.sql"),
    include_str!("../migrations/sqlite/0007_summary.sql"),
    include_str!("../migrations/sqlite/0008_trace.sql"),
    include_str!("../migrations/sqlite/0009_lease_host.sql"),
    include_str!("../migrations/sqlite/0010_run_queue.sql"),
    include_str!("../migrations/sqlite/0011_call_keys.sql"),
    include_str!("../migrations/sqlite/0012_call_blocks.sql"),
];

/// The version whose migration keys each call row by one integer ([`check_call_keys`]).
const CALL_KEYS_VERSION: usize = 11;

/// The `application_id` (the bytes "agpr") the first migration gives a store. Stores of the
/// pre-release builds have none: their versions counted another series of scripts, and this
/// build neither reads nor converts them (docs/store.md).
pub(super) const APPLICATION_ID: i64 = 0x6167_7072;

/// The page size of a new database. Every commit copies each page it touched into the WAL
/// whole, and a settled call touches a handful of pages with rows of a few hundred bytes, so
/// small pages keep the bytes written per call small (about 7 KiB instead of 28 KiB with
/// SQLite's default of 4 KiB). An existing database keeps the page size it was created with.
pub(super) const PAGE_SIZE: i64 = 1024;

/// How long a statement waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Room for every statement text the store prepares (about forty), so none is evicted and
/// re-prepared on a hot path.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// Adds what was being done to a SQLite error.
pub(super) trait Context<T> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T>;
}

impl<T> Context<T> for rusqlite::Result<T> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T> {
        self.map_err(|error| StoreError::Io(format!("{}: {error}", doing())))
    }
}

/// Opens the database file at `path` (creating it readable by its owner only), configured and
/// migrated to the current schema, its commits as durable as `sync` says.
pub(super) fn open(root: &Path, path: &Path, sync: StoreSync) -> StoreResult<Connection> {
    create_private_folder(root)?;
    create_private_file(path)?;
    let mut connection =
        Connection::open(path).context(|| format!("open database {}", path.display()))?;
    configure(&connection, path, sync)?;
    migrate(&mut connection, path)?;
    Ok(connection)
}

/// Starts a transaction that holds the write lock from its first statement, so that what it
/// checks cannot change before it writes.
pub(super) fn write_transaction(
    connection: &mut Connection,
    doing: impl FnOnce() -> String,
) -> StoreResult<Transaction<'_>> {
    connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(doing)
}

/// The persistence root: created 0700, and narrowed to 0700 at open if it was left wider,
/// with the script copies' folders under it.
pub(super) fn create_private_folder(folder: &Path) -> StoreResult<()> {
    crate::util::private_dir::ensure(folder).map_err(|error| StoreError::Io(error.to_string()))?;
    crate::store::script_copies::narrow_existing(folder)
}

/// Creates the database file readable by its owner only before SQLite opens it; SQLite gives
/// the `-wal` and `-shm` files the same permissions.
fn create_private_file(path: &Path) -> StoreResult<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map(drop)
        .map_err(|error| StoreError::Io(format!("create {}: {error}", path.display())))
}

fn configure(connection: &Connection, path: &Path, sync: StoreSync) -> StoreResult<()> {
    let doing = || format!("configure database {}", path.display());
    // Two processes opening a new database at once race to switch it to WAL, and SQLite
    // answers that race with SQLITE_BUSY at once instead of calling the busy handler. So
    // the settings are applied again after a short pause, within the usual busy timeout.
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    let journal_mode = loop {
        match apply_settings(connection, sync) {
            Err(error) if is_busy(&error) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => break other.context(doing)?,
        }
    };
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{}: the journal mode stayed {journal_mode:?} instead of WAL",
            doing()
        )));
    }
    Ok(())
}

/// The connection's settings; every one of them can be applied again. Returns the journal
/// mode SQLite reports after asking for WAL.
fn apply_settings(connection: &Connection, sync: StoreSync) -> rusqlite::Result<String> {
    // Set first, so that the pragmas below already wait for a concurrent opener.
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    // Before WAL mode: once a database is in WAL mode (or has any table) its page size is
    // fixed, and for such a database this is a no-op.
    connection.pragma_update(None, "page_size", PAGE_SIZE)?;
    let journal_mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    // Per connection, not stored in the file: every process that opens the store applies
    // its own choice (`sync_mode.rs`).
    connection.pragma_update(None, "synchronous", sync.pragma())?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    // A short-lived process (`agentprism run`, `status`) would otherwise checkpoint the WAL
    // into the database and delete it when it closes, and the next one recreate it: four
    // fsyncs per process. Committed transactions are in the WAL either way, and the next
    // opener reads them from there, so this keeps every commit across a crash; the WAL is
    // still checkpointed by the automatic checkpoint once it grows past 1,000 pages.
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    // The planner would otherwise weigh bound values (`LIMIT ?`, a run key), and a cached
    // statement bound anew would be prepared again on each use: most of a status read's
    // cost. With the stability guarantee a cached statement keeps its plan.
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    let mut persist = 1;
    connection.file_control(Some(MAIN_DB), FileControl::PersistWal(&mut persist))?;
    Ok(journal_mode)
}

/// Whether SQLite refused for a lock another connection holds.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Applies the migrations the database lacks, all in one transaction, so a crash leaves the
/// old version and a concurrent opener waits and then finds nothing left to do. A store
/// this build does not know (a pre-release one, another program's, a newer one) is refused
/// unchanged.
fn migrate(connection: &mut Connection, path: &Path) -> StoreResult<()> {
    let doing = || format!("migrate database {}", path.display());
    // The usual case, an up-to-date database, needs no write lock.
    if schema_of(connection).context(doing)? == (APPLICATION_ID, MIGRATIONS.len() as i64) {
        return Ok(());
    }
    let transaction = write_transaction(connection, doing)?;
    let (application_id, version) = schema_of(&transaction).context(doing)?;
    let applied = applied_migrations(path, application_id, version)?;
    for (number, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        let version = number + 1;
        if version == CALL_KEYS_VERSION {
            check_call_keys(&transaction, path)?;
        }
        transaction
            .execute_batch(sql)
            .context(|| format!("{}: apply migration {version}", doing()))?;
        transaction
            .pragma_update(None, "user_version", version as i64)
            .context(doing)?;
    }
    transaction.commit().context(doing)
}

/// Refuses, before anything is changed, a store with a call row the integer call key cannot
/// hold (`call_keys.rs`): a generation above 4,095, which takes 4,095 resumes of one run, or
/// an index above 1,048,575, which `maxAgents` never allows.
fn check_call_keys(connection: &Connection, path: &Path) -> StoreResult<()> {
    let doing = || format!("check the call rows of {}", path.display());
    let beyond: i64 = connection
        .query_row(
            "SELECT COUNT(*) FROM calls
             WHERE generation NOT BETWEEN 0 AND ?1 OR call_index NOT BETWEEN 0 AND ?2
                OR run_key NOT BETWEEN 0 AND ?3",
            rusqlite::params![
                super::call_keys::MAX_GENERATION,
                super::call_keys::MAX_CALL_INDEX,
                super::events::MAX_RUN_KEY
            ],
            |row| row.get(0),
        )
        .context(doing)?;
    if beyond > 0 {
        return Err(StoreError::Corrupt(format!(
            "{}: {beyond} call rows have a generation above {}, a call index above {} or a run \
             key out of range, which this agentprism cannot convert; nothing was changed. Keep \
             using the agentprism that wrote them, or delete those runs with it first",
            path.display(),
            super::call_keys::MAX_GENERATION,
            super::call_keys::MAX_CALL_INDEX,
        )));
    }
    Ok(())
}

/// The database's `application_id` and `user_version`.
fn schema_of(connection: &Connection) -> rusqlite::Result<(i64, i64)> {
    let application_id = connection.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    Ok((application_id, version))
}

/// How many of [`MIGRATIONS`] a database with these header values has applied, or why this
/// build refuses it.
fn applied_migrations(path: &Path, application_id: i64, version: i64) -> StoreResult<usize> {
    let path = path.display();
    let known = MIGRATIONS.len();
    match (application_id, usize::try_from(version)) {
        // A new, empty file.
        (0, Ok(0)) => Ok(0),
        (0, Ok(version)) => Err(StoreError::Io(format!(
            "{path} was written by a pre-release agentprism (its schema version {version} \
             predates this store format), and this agentprism neither reads nor converts such \
             stores; nothing was changed. Move that persistence root aside (or delete {path} \
             with its -wal and -shm files) to start with an empty store, or keep using the \
             agentprism that wrote it"
        ))),
        (APPLICATION_ID, Ok(version)) if version <= known => Ok(version),
        (APPLICATION_ID, Ok(version)) => Err(StoreError::Corrupt(format!(
            "{path} has schema version {version}, but this agentprism knows versions up to \
             {known}; use a newer agentprism for this persistence root"
        ))),
        (APPLICATION_ID, Err(_)) => Err(StoreError::Corrupt(format!(
            "{path} has the invalid schema version {version}"
        ))),
        (other, _) => Err(StoreError::Io(format!(
            "{path} is not an agentprism run store (its SQLite application id is {other}, \
             an agentprism store's is {APPLICATION_ID}); nothing was changed"
        ))),
    }
}
