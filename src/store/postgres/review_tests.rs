//! A hostile review's tests of the PostgreSQL store: two replicas racing the lease's
//! compare-and-swap round after round, concurrent appenders keeping the event stream dense,
//! the pool reconnecting after the database dropped its sessions (as a restart does), and a
//! text PostgreSQL cannot hold (a NUL character) refused with a clear error that wrote nothing,
//! where SQLite keeps it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tests::{fresh, id, open};
use super::{PgOptions, PostgresStore};
use crate::model::RunStatus;
use crate::store::contract::{PROJECT, RUN, event, expiring_lease, lease, run_record};
use crate::store::{
    EventReads, Events, Fence, LeaseReads, Leases, RunReads, Runs, ScriptChange, SqliteStore,
    StoreError,
};
use crate::testing::PgCluster;

/// Two replicas (pools of their own) race the same compare-and-swap 60 times: each round
/// exactly one wins, and the lease then holds the winner's token; the loser can neither
/// renew nor release it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_the_lease_cas_have_one_winner_every_round() {
    let (database, scripts, first) = fresh().await;
    first
        .create_run(&run_record(RUN, PROJECT, 1), &lease("round-0"))
        .await
        .unwrap();
    let replicas = [
        Arc::new(first),
        Arc::new(open(&database.url, &scripts).await),
    ];
    let mut current = "round-0".to_owned();
    for round in 1..=60 {
        let attempts = replicas.iter().enumerate().map(|(replica, store)| {
            let store = store.clone();
            let expected = current.clone();
            tokio::spawn(async move {
                let token = format!("round-{round}-replica-{replica}");
                let lease = expiring_lease(&token, &format!("replica-{replica}"), 5);
                let won = store
                    .acquire_lease(&id(), Some(&expected), &lease)
                    .await
                    .unwrap();
                (token, won)
            })
        });
        let mut winners = Vec::new();
        let mut losers = Vec::new();
        for attempt in attempts.collect::<Vec<_>>() {
            let (token, won) = attempt.await.unwrap();
            if won {
                winners.push(token)
            } else {
                losers.push(token)
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let held = replicas[0].lease(&id()).await.unwrap().unwrap().token;
        assert_eq!(held, winners[0], "round {round}");
        let loser = &losers[0];
        match replicas[1].renew_lease(&id(), loser, 10).await {
            Err(StoreError::Fenced(_)) => {}
            other => panic!("round {round}: a loser's renewal gave {other:?}"),
        }
        replicas[0].release_lease(&id(), loser).await.unwrap();
        assert_eq!(
            replicas[1].lease(&id()).await.unwrap().unwrap().token,
            winners[0],
            "round {round}: a loser's release left the lease alone"
        );
        current = winners.remove(0);
    }
}

/// Two appenders on two replicas, both under the lease, each appending the next seq it
/// read: the stream stays dense (1..=n, no gap, no duplicate) and each round one of them
/// is told its seq does not continue the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_keep_the_event_stream_dense() {
    let (database, scripts, first) = fresh().await;
    first
        .create_run(&run_record(RUN, PROJECT, 1), &lease("held"))
        .await
        .unwrap();
    let replicas = [
        Arc::new(first),
        Arc::new(open(&database.url, &scripts).await),
    ];
    let mut appended = 0;
    for _round in 0..30 {
        let next = replicas[0].last_event_seq(&id()).await.unwrap() + 1;
        let attempts: Vec<_> = replicas
            .iter()
            .map(|store| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .append_events(&id(), &[event(next, "log")], Fence("held"))
                        .await
                })
            })
            .collect();
        let mut succeeded = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(()) => succeeded += 1,
                Err(StoreError::Io(message)) => {
                    assert!(
                        message.contains("does not continue the stream"),
                        "{message}"
                    )
                }
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(succeeded, 1);
        appended += 1;
    }
    let seqs: Vec<u64> = replicas[1]
        .events(&id(), 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|event| event.seq)
        .collect();
    assert_eq!(seqs, (1..=appended).collect::<Vec<u64>>());
}

/// The database ends every session of the store (as a restart or a failover does): the
/// pooled connections are broken, and the next call reconnects instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_reconnects_after_the_database_dropped_its_sessions() {
    let (database, _scripts, store) = fresh().await;
    // Several connections in the pool.
    let (a, b, c) = tokio::join!(store.clock_ms(), store.clock_ms(), store.clock_ms());
    for read in [a, b, c] {
        read.unwrap();
    }
    let cluster = PgCluster::shared();
    let sessions = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        database.name
    );
    let ended = cluster.execute_one("postgres", &sessions).await.unwrap();
    assert!(ended > 0, "the store had sessions to end");
    let remaining = format!(
        "SELECT 1 FROM pg_stat_activity WHERE datname = '{}'",
        database.name
    );
    let waiting = Instant::now();
    while cluster.execute_one("postgres", &remaining).await.unwrap() > 0 {
        assert!(waiting.elapsed() < Duration::from_secs(10), "sessions stay");
        tokio::task::yield_now().await;
    }
    for attempt in 0..6 {
        store
            .clock_ms()
            .await
            .unwrap_or_else(|error| panic!("call {attempt} after the sessions ended: {error}"));
    }
}

/// A NUL character, which PostgreSQL's text type cannot hold: in a script SQLite keeps it and
/// PostgreSQL refuses the write with an error saying so, writing nothing (no half-created
/// run); in a display text (an error message, a phase) PostgreSQL keeps the run recordable
/// with U+FFFD in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_refused_in_a_script_and_replaced_in_a_message() {
    let mut record = run_record(RUN, PROJECT, 1);
    record.script = "await agent(\"a\0b\");\n".to_owned();

    let folder = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(folder.path()).unwrap();
    sqlite.create_run(&record, &lease("held")).await.unwrap();
    assert_eq!(sqlite.load_run(&id()).await.unwrap().script, record.script);

    let (_database, _scripts, store) = fresh().await;
    let refused = store
        .create_run(&record, &lease("held"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("NUL character"), "{refused}");
    assert!(refused.contains(&format!("create run {RUN}")), "{refused}");
    assert!(matches!(
        store.load_run(&id()).await,
        Err(StoreError::UnknownRun(_))
    ));

    let clean = run_record(RUN, PROJECT, 1);
    store.create_run(&clean, &lease("held")).await.unwrap();
    let mut failed = clean.clone();
    failed.status = RunStatus::Failed;
    failed.error_message = Some("agent said \0".to_owned());
    failed.current_phase = Some("phase\0one".to_owned());
    // Display texts keep the run recordable: the NUL becomes U+FFFD, nothing else changes.
    store
        .update_run(&failed, ScriptChange::Unchanged, Fence("held"))
        .await
        .expect("a failure whose message carries a NUL is still recorded");
    let stored = store.load_run(&id()).await.unwrap();
    assert_eq!(stored.status, RunStatus::Failed);
    assert_eq!(stored.error_message.as_deref(), Some("agent said \u{FFFD}"));
    assert_eq!(stored.current_phase.as_deref(), Some("phase\u{FFFD}one"));
}

/// A replica that finds another's migration running waits for it for the few deadlines
/// `connect` grants migrating, not just one: the server's `statement_timeout` (one deadline)
/// must not cut the wait for the advisory lock short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_past_one_deadline_for_another_replicas_migration() {
    let database = PgCluster::shared().create_database().await;
    let scripts = tempfile::tempdir().unwrap();
    let (migrating, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    migrating
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&super::migrations::MIGRATION_LOCK],
        )
        .await
        .unwrap();
    let deadline = Duration::from_millis(700);
    let options = PgOptions {
        call_deadline: deadline,
        pool_size: 2,
        ..PgOptions::new(scripts.path())
    };
    let started = Instant::now();
    let url = database.url.clone();
    let waiting = tokio::spawn(async move { PostgresStore::connect(&url, options).await });
    // The other replica's migration lasts one and a half deadlines.
    tokio::time::sleep(deadline.mul_f32(1.5)).await;
    assert!(!waiting.is_finished(), "the waiting replica gave up early");
    migrating
        .execute(
            "SELECT pg_advisory_unlock($1)",
            &[&super::migrations::MIGRATION_LOCK],
        )
        .await
        .unwrap();
    let store = waiting
        .await
        .unwrap()
        .expect("connect after the other migration");
    assert!(started.elapsed() >= deadline);
    store.clock_ms().await.unwrap();
}
