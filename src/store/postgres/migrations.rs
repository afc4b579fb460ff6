//! The schema's versions: numbered scripts under `migrations/postgres/`, applied by whichever
//! replica opens the database first, under a session advisory lock so that replicas starting
//! together apply each script once (the others wait, then find nothing left to do). Each
//! script commits with its version row in one transaction. A database at a version this
//! build does not know is refused, naming both versions: an older replica must not write a
//! schema it does not understand.

use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::connection::{Context, describe, redacted};
use crate::store::{StoreError, StoreResult};

/// Schema migrations in the order they apply; after migration `n` (1-based) the highest
/// version in `agentprism_schema_version` is `n`. Append new files, never edit an applied one.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_initial.sql"),
    include_str!("../migrations/postgres/0002_isolation.sql"),
    include_str!("../migrations/postgres/0003_reset_at.sql"),
    include_str!("../migrations/postgres/0004_auto_resume.sql"),
    include_str!("../migrations/postgres/0005_open_sessions.sql"),
    include_str!("../migrations/postgres/0006_live_reason.sql"),
    include_str!("../migrations/postgres/0007_summary.sql"),
    include_str!("../migrations/postgres/0008_trace.sql"),
    include_str!("../migrations/postgres/0009_lease_host.sql"),
    include_str!("../migrations/postgres/0010_run_queue.sql"),
];

/// The advisory lock key the migrations hold: "agentprism" folded into a 64-bit number, so
/// another application on the same database is unlikely to pick it.
pub(super) const MIGRATION_LOCK: i64 = 0x6167_656e_7470_7269;

/// Brings the database at `url` to the current schema over a connection of its own, closed
/// at the end, which also releases the advisory lock if anything failed on the way. The
/// session's `statement_timeout` is `budget` (the whole migration's), not the per-call
/// deadline the URL's settings give: waiting for another replica's migration is one
/// statement (`pg_advisory_lock`) that may last longer than a call.
pub(super) async fn migrate(
    config: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
    url: &str,
    budget: std::time::Duration,
) -> StoreResult<()> {
    let (mut client, connection) = config.connect(tls).await.map_err(|error| {
        StoreError::Io(format!(
            "connect to the PostgreSQL store {}: {}",
            redacted(url),
            describe(&error)
        ))
    })?;
    let driver = tokio::spawn(connection);
    let budget_ms = budget.as_millis().max(1);
    let outcome = match client
        .batch_execute(&format!("SET statement_timeout = {budget_ms}"))
        .await
    {
        Ok(()) => migrate_with(&mut client, url).await,
        Err(error) => Err(StoreError::Io(format!(
            "migrate the PostgreSQL store {}: {}",
            redacted(url),
            describe(&error)
        ))),
    };
    drop(client);
    driver.await.ok();
    outcome
}

async fn migrate_with(client: &mut Client, url: &str) -> StoreResult<()> {
    let doing = || format!("migrate the PostgreSQL store {}", redacted(url));
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .context(doing)?;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS agentprism_schema_version (
                 version    BIGINT PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await
        .context(doing)?;
    let applied: i64 = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM agentprism_schema_version",
            &[],
        )
        .await
        .context(doing)?
        .get(0);
    let known = MIGRATIONS.len();
    let applied = usize::try_from(applied).map_err(|_| {
        StoreError::Corrupt(format!(
            "the PostgreSQL store {} has the invalid schema version {applied}",
            redacted(url)
        ))
    })?;
    if applied > known {
        return Err(StoreError::Corrupt(format!(
            "the PostgreSQL store {} has schema version {applied}, but this agentprism knows \
             versions up to {known}; use a newer agentprism with this database",
            redacted(url)
        )));
    }
    for (number, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        let version = number as i64 + 1;
        let transaction = client.transaction().await.context(doing)?;
        transaction
            .batch_execute(sql)
            .await
            .context(|| format!("{}: apply migration {version}", doing()))?;
        transaction
            .execute(
                "INSERT INTO agentprism_schema_version (version) VALUES ($1)",
                &[&version],
            )
            .await
            .context(doing)?;
        transaction.commit().await.context(doing)?;
    }
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .context(doing)?;
    Ok(())
}
