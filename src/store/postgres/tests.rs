//! What the contract suite cannot say about PostgreSQL: a late write blocked behind a
//! takeover is fenced, independent pools racing for a lease, replicas migrating at once, the
//! refusal of a newer schema, the call deadline against a blackholed connection, the
//! database's clock, passwords kept out of errors, and the housekeeping queries (against
//! SQLite's default implementations too).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{PgOptions, PostgresStore};
use crate::model::{RunId, RunStatus};
use crate::store::contract::{PROJECT, RUN, call, expiring_lease, lease, run_record, write};
use crate::store::{
    CallReads, Calls, Fence, LeaseReads, Leases, RunCounts, RunReads, Runs, ScriptChange,
    SqliteStore, Store, StoreError,
};
use crate::testing::{PgCluster, PgDatabase, ProxyMode, TcpProxy};

/// A folder for script copies and the options of a test store on it.
pub(super) fn options(scripts: &tempfile::TempDir, deadline: Duration) -> PgOptions {
    PgOptions {
        call_deadline: deadline,
        pool_size: 4,
        ..PgOptions::new(scripts.path())
    }
}

pub(super) async fn open(url: &str, scripts: &tempfile::TempDir) -> PostgresStore {
    PostgresStore::connect(url, options(scripts, Duration::from_secs(10)))
        .await
        .expect("open the store")
}

pub(super) async fn fresh() -> (PgDatabase, tempfile::TempDir, PostgresStore) {
    let database = PgCluster::shared().create_database().await;
    let scripts = tempfile::tempdir().unwrap();
    let store = open(&database.url, &scripts).await;
    (database, scripts, store)
}

pub(super) fn id() -> RunId {
    RunId::parse(RUN).unwrap()
}

/// A write that reached the database while a takeover held the run's row waits for it, then
/// is refused, and writes nothing: the check and the write are one atomic step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_queued_behind_a_takeover_is_fenced_and_writes_nothing() {
    let (database, _scripts, store) = fresh().await;
    let record = run_record(RUN, PROJECT, 1_700_000_000_000);
    store.create_run(&record, &lease("token-a")).await.unwrap();
    let store = Arc::new(store);

    // Another replica's takeover, inside a transaction it has not committed yet.
    let cluster = PgCluster::shared();
    let (mut successor, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let takeover = successor.transaction().await.unwrap();
    let taken = takeover
        .execute(
            "UPDATE runs SET lease_token = 'token-b' WHERE run_id = $1 AND lease_token = 'token-a'",
            &[&RUN],
        )
        .await
        .unwrap();
    assert_eq!(taken, 1);

    let late = tokio::spawn({
        let store = store.clone();
        async move {
            let row = call(1, 0, 1);
            store
                .append_call(&id(), write(&row, &[], &[]), Fence("token-a"))
                .await
        }
    });
    // The late write is queued on the row lock before the takeover commits.
    let waiting = Instant::now();
    loop {
        let blocked = cluster
            .execute_one(
                &database.name,
                &format!(
                    "SELECT 1 FROM pg_stat_activity
                     WHERE datname = '{}' AND wait_event_type = 'Lock'",
                    database.name
                ),
            )
            .await
            .unwrap();
        if blocked > 0 {
            break;
        }
        assert!(
            !late.is_finished(),
            "the late write did not wait for the row lock"
        );
        assert!(
            waiting.elapsed() < Duration::from_secs(10),
            "the late write never queued"
        );
        tokio::task::yield_now().await;
    }
    takeover.commit().await.unwrap();

    match late.await.unwrap() {
        Err(StoreError::Fenced(run)) => assert_eq!(run.as_str(), RUN),
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(
        store.calls(&id()).await.unwrap().is_empty(),
        "nothing was written"
    );
    assert_eq!(store.lease(&id()).await.unwrap().unwrap().token, "token-b");
}

/// Replicas with pools of their own racing to take over the same lease: one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_replicas_racing_for_a_lease_have_one_winner() {
    let (database, scripts, first) = fresh().await;
    first
        .create_run(&run_record(RUN, PROJECT, 1), &lease("token-a"))
        .await
        .unwrap();
    let mut replicas = vec![Arc::new(first)];
    for _ in 0..3 {
        replicas.push(Arc::new(open(&database.url, &scripts).await));
    }
    let attempts = replicas.iter().enumerate().flat_map(|(replica, store)| {
        (0..3).map(move |attempt| {
            let store = store.clone();
            tokio::spawn(async move {
                let token = format!("token-{replica}-{attempt}");
                let taken = store
                    .acquire_lease(&id(), Some("token-a"), &expiring_lease(&token, "r", 5))
                    .await
                    .unwrap();
                taken.then_some(token)
            })
        })
    });
    let mut winners = Vec::new();
    for attempt in attempts.collect::<Vec<_>>() {
        winners.extend(attempt.await.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let held = replicas[3].lease(&id()).await.unwrap().unwrap();
    assert_eq!(held.token, winners[0]);
}

/// Replicas opening a new database at once migrate it once, under the advisory lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_migrate_once() {
    let database = PgCluster::shared().create_database().await;
    let scripts = tempfile::tempdir().unwrap();
    let opening: Vec<_> = (0..4)
        .map(|_| {
            let url = database.url.clone();
            let options = options(&scripts, Duration::from_secs(20));
            tokio::spawn(async move { PostgresStore::connect(&url, options).await })
        })
        .collect();
    let mut stores = Vec::new();
    for opened in opening {
        stores.push(
            opened
                .await
                .unwrap()
                .expect("every replica opens the store"),
        );
    }
    let versions = PgCluster::shared()
        .execute_one(
            &database.name,
            "SELECT version FROM agentprism_schema_version",
        )
        .await
        .unwrap();
    assert_eq!(versions, super::migrations::MIGRATIONS.len() as u64);
    stores[0]
        .create_run(&run_record(RUN, PROJECT, 1), &lease("token-a"))
        .await
        .unwrap();
    assert_eq!(stores[3].load_run(&id()).await.unwrap().run_id, id());
}

/// A database written by a newer agentprism is refused, naming both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_naming_both_versions() {
    let (database, scripts, store) = fresh().await;
    drop(store);
    let known = super::migrations::MIGRATIONS.len();
    PgCluster::shared()
        .execute(
            &database.name,
            &format!(
                "INSERT INTO agentprism_schema_version (version) VALUES ({})",
                known + 1
            ),
        )
        .await
        .unwrap();
    let refused = PostgresStore::connect(&database.url, options(&scripts, Duration::from_secs(10)))
        .await
        .err()
        .expect("a newer schema is refused");
    let message = refused.to_string();
    assert!(matches!(refused, StoreError::Corrupt(_)), "{refused:?}");
    assert!(
        message.contains(&format!("schema version {}", known + 1))
            && message.contains(&format!("versions up to {known}")),
        "{message}"
    );
    assert!(
        !message.contains(PgCluster::shared().password()),
        "{message}"
    );
}

/// With the database cut off behind a blackhole, a call fails at its deadline instead of
/// hanging, and the next call after the cut heals reaches the database again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_database_fails_calls_at_the_deadline() {
    let database = PgCluster::shared().create_database().await;
    let proxy = TcpProxy::start(database.address).await.unwrap();
    let url = PgCluster::shared().url_via(proxy.address(), &database.name);
    let scripts = tempfile::tempdir().unwrap();
    let deadline = Duration::from_millis(700);
    let store = PostgresStore::connect(&url, options(&scripts, deadline))
        .await
        .unwrap();
    store
        .create_run(&run_record(RUN, PROJECT, 1), &lease("token-a"))
        .await
        .unwrap();
    let before = store
        .clock_ms()
        .await
        .expect("the clock answers through the proxy");

    proxy.set_mode(ProxyMode::Blackhole);
    let started = Instant::now();
    let outcome = store.load_run(&id()).await.map(drop);
    missed_deadline("load_run", outcome, started.elapsed(), deadline);
    let started = Instant::now();
    let outcome = store.renew_lease(&id(), "token-a", 10).await;
    missed_deadline("renew_lease", outcome, started.elapsed(), deadline);
    let started = Instant::now();
    let outcome = store
        .update_run(
            &run_record(RUN, PROJECT, 1),
            ScriptChange::Unchanged,
            Fence("token-a"),
        )
        .await;
    missed_deadline("update_run", outcome, started.elapsed(), deadline);
    let started = Instant::now();
    let outcome = store.clock_ms().await.map(drop);
    missed_deadline("clock_ms", outcome, started.elapsed(), deadline);

    proxy.set_mode(ProxyMode::Pass);
    let after = store
        .clock_ms()
        .await
        .expect("a new connection after the cut heals");
    assert!(after >= before);
    assert_eq!(store.load_run(&id()).await.unwrap().run_id, id());
}

/// A call that failed at its deadline: an `Io` error saying so, after the deadline and well
/// before three of them.
fn missed_deadline(
    what: &str,
    outcome: Result<(), StoreError>,
    elapsed: Duration,
    deadline: Duration,
) {
    match outcome {
        Err(StoreError::Io(message)) => {
            assert!(message.contains("deadline"), "{what}: {message}");
            assert!(
                !message.contains(PgCluster::shared().password()),
                "{message}"
            );
        }
        other => panic!("{what}: expected a deadline failure, got {other:?}"),
    }
    assert!(
        elapsed >= deadline && elapsed < deadline * 3,
        "{what} took {elapsed:?}"
    );
}

/// `clock_ms` is the database's `now`: it answers close to this host's clock (the
/// database runs here), and it fails when the database cannot be reached, so it is not
/// this host's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_is_the_databases() {
    let database = PgCluster::shared().create_database().await;
    let proxy = TcpProxy::start(database.address).await.unwrap();
    let url = PgCluster::shared().url_via(proxy.address(), &database.name);
    let scripts = tempfile::tempdir().unwrap();
    let store = PostgresStore::connect(&url, options(&scripts, Duration::from_millis(500)))
        .await
        .unwrap();
    let local = crate::util::now_ms();
    let clock = store.clock_ms().await.unwrap();
    assert!((clock - local).abs() < 5_000, "{clock} vs {local}");
    proxy.set_mode(ProxyMode::Drop);
    let cut = store.clock_ms().await;
    assert!(matches!(cut, Err(StoreError::Io(_))), "{cut:?}");
}

/// A wrong password, an unreachable server and a malformed URL fail with messages that
/// name the location, password hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_never_show_the_password() {
    let cluster = PgCluster::shared();
    let scripts = tempfile::tempdir().unwrap();
    let wrong = format!(
        "postgres://agentprism:wrong-Secret-1@127.0.0.1:{}/postgres",
        cluster.port()
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = format!("postgres://agentprism:wrong-Secret-1@127.0.0.1:{closed_port}/db");
    let malformed = "postgres://agentprism:wrong-Secret-1@127.0.0.1:notaport/db".to_owned();
    for url in [wrong, unreachable, malformed] {
        let error = PostgresStore::connect(&url, options(&scripts, Duration::from_secs(5)))
            .await
            .err()
            .expect("the store does not open");
        let message = error.to_string();
        assert!(!message.contains("wrong-Secret-1"), "{message}");
        assert!(message.contains("agentprism:***@127.0.0.1"), "{message}");
    }
}

/// Runs in every status, some finished long ago: the counts and the housekeeping listing.
async fn housekeeping_queries_answer_from_the_store(store: &dyn Store) {
    let statuses = [
        ("a-000001", RunStatus::Running, 50),
        ("a-000002", RunStatus::Pending, 40),
        ("a-000003", RunStatus::Completed, 10),
        ("a-000004", RunStatus::Failed, 30),
        ("a-000005", RunStatus::Aborted, 20),
        ("a-000006", RunStatus::Completed, 900),
        ("a-000007", RunStatus::Paused, 5),
    ];
    for (run, status, updated_at) in statuses {
        let record = crate::model::RunRecord {
            status,
            updated_at,
            ..run_record(run, PROJECT, 1)
        };
        store.create_run(&record, &lease("token")).await.unwrap();
    }
    let counts = store.run_counts().await.unwrap();
    assert_eq!(
        counts,
        RunCounts {
            pending: 1,
            running: 1,
            paused: 1,
            completed: 2,
            failed: 1,
            aborted: 1,
        }
    );
    assert_eq!(counts.total(), 7);
    let ids = |runs: Vec<RunId>| {
        runs.iter()
            .map(|id| id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    // Oldest update first; neither active nor paused runs; strictly before the cutoff.
    assert_eq!(
        ids(store.terminal_before(900, 10).await.unwrap()),
        ["a-000003", "a-000005", "a-000004"]
    );
    assert_eq!(
        ids(store.terminal_before(901, 2).await.unwrap()),
        ["a-000003", "a-000005"]
    );
    assert!(store.terminal_before(10, 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_queries_on_postgres() {
    let (_database, _scripts, store) = fresh().await;
    housekeeping_queries_answer_from_the_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_queries_on_sqlite() {
    let folder = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&folder.path().join("root")).unwrap();
    housekeeping_queries_answer_from_the_store(&store).await;
}

/// A replica stalled inside a transaction (SIGSTOP between two statements) holds the run's
/// row lock; the server ends its session after half a deadline, so another replica's
/// takeover still succeeds within its own deadline, and the stalled session's next statement
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stalled_inside_a_transaction_does_not_block_a_takeover() {
    let (database, scripts, first) = fresh().await;
    first
        .create_run(&run_record(RUN, PROJECT, 1), &lease("token-a"))
        .await
        .unwrap();
    let deadline = Duration::from_millis(1200);
    let stalled_options = options(&scripts, deadline);
    let (config, tls) = super::connection::config(&database.url, &stalled_options).unwrap();
    let (mut stalled, connection) = config.connect(tls).await.unwrap();
    tokio::spawn(connection);
    let transaction = stalled.transaction().await.unwrap();
    transaction
        .query(
            "SELECT run_key FROM runs WHERE run_id = $1 FOR NO KEY UPDATE",
            &[&RUN],
        )
        .await
        .unwrap();

    let successor = PostgresStore::connect(&database.url, options(&scripts, deadline))
        .await
        .unwrap();
    let started = Instant::now();
    let taken = successor
        .acquire_lease(&id(), Some("token-a"), &expiring_lease("token-b", "r2", 9))
        .await
        .expect("the takeover gets the row within its deadline");
    assert!(taken);
    assert!(started.elapsed() < deadline, "{:?}", started.elapsed());
    let late = transaction
        .execute(
            "UPDATE runs SET status = 'failed' WHERE run_id = $1",
            &[&RUN],
        )
        .await;
    assert!(late.is_err(), "the stalled session was ended: {late:?}");
    assert_eq!(
        first.load_run(&id()).await.unwrap().status,
        RunStatus::Running
    );
}
