//! What serve replicas sharing one store cost (area `replicas` of `docs/performance.md`). In
//! this process: each replica is a `FolderServer` over an engine of its own,
//! with its own handle on one SQLite persistence root (its own connections, as a separate
//! process would have) and its own lease owner id, under `LeasePolicy::Ttl`; requests go
//! through the MCP core (`McpServer::handle_bytes`, no socket) as stateless 2026-07-28
//! requests; agents are in-process instant runners, so only the replicas' own work counts.
//!
//! - **runs/s with 1, 2 and 3 replicas**: 60 runs of a 10-call workflow started round robin
//!   through the replicas, all at once, until every one reads `completed`.
//! - **`run/status` through another replica**: status of completed runs asked of a replica
//!   that did not execute them (a stored read): p50, p99.
//! - **a lease renewal**: the heartbeat's two store calls (`clock_ms`, `renew_lease`) on a held
//!   run's lease: p50, p99.
//! - **takeover**: a replica executing a run (held inside an agent call) dies — its runtime is
//!   dropped, so nothing of it renews, releases or records anything — and another replica
//!   polls `run/status` until the run reads failed, resumes it and polls until it completes.
//!   From the death to the completed resume, with a 1.5 s TTL (goal: TTL + under 1 s).
//!
//! Each figure on SQLite (one persistence root), on PostgreSQL (a database of the private
//! test cluster, `agentprism::testing::PgCluster`, over loopback TCP), and on PostgreSQL over
//! TLS (`sslmode=verify-full`: a cluster of the bench's own started with `ssl=on` and a
//! certificate for `localhost` from an authority the bench makes), so the two PostgreSQL rows
//! differ by TLS alone.
//!
//! Run with `cargo bench --bench replicas` (release) or `scripts/measure replicas`. Wall
//! times on a shared machine are noisy.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::engine::instant::{HeldRunner, InstantRunner};
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::runner::AgentRunner;
use agentprism::engine::{Engine, EngineConfig};
use agentprism::mcp::{McpServer, ServerOptions, TransportContext, TransportKind};
use agentprism::model::RunId;
use agentprism::serve::{FolderOptions, FolderServer};
use agentprism::store::{LeasePolicy, PgOptions, PostgresStore, SqliteStore, Store};
use agentprism::testing::PgCluster;
use serde_json::{Value, json};

mod support;

const RUNS: usize = 60;
const STATUS_SAMPLES: usize = 2_000;
const RENEWALS: usize = 1_000;
const TAKEOVER_TTL: Duration = Duration::from_millis(1500);

fn main() {
    let base = tempfile::tempdir().expect("temp dir");
    let folder = write_folder(base.path());
    let runtime = runtime();
    println!("SQLite (one persistence root):");
    measure(&runtime, "SQLite", base.path(), &folder, |name| {
        Box::pin(std::future::ready(Location::Sqlite(base.path().join(name))))
    });
    println!("PostgreSQL (the private test cluster, one database per measurement):");
    measure(&runtime, "PostgreSQL", base.path(), &folder, |_| {
        Box::pin(async { Location::Postgres(PgCluster::shared().create_database().await.url) })
    });
    println!(
        "PostgreSQL over TLS, verify-full (a cluster with ssl=on, one database per measurement):"
    );
    let (tls_cluster, root) = tls_cluster(base.path());
    let cluster = &tls_cluster;
    let root = &root;
    measure(&runtime, "PostgreSQL TLS", base.path(), &folder, |_| {
        Box::pin(async move {
            let url = cluster.create_database().await.url;
            Location::Postgres(format!(
                "{}?sslmode=verify-full&sslrootcert={}",
                url.replace("@127.0.0.1:", "@localhost:"),
                root.display()
            ))
        })
    });
}

/// A private cluster serving TLS with a certificate for `localhost` from an authority made
/// here, and the authority's certificate file (`sslrootcert`).
fn tls_cluster(base: &Path) -> (PgCluster, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).expect("the CA certificate").pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("a server key");
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("server parameters")
        .signed_by(&key, &issuer)
        .expect("the server certificate");
    let root = base.join("ca.pem");
    std::fs::write(&root, ca_pem).expect("write the CA certificate");
    let cluster = PgCluster::start_with_tls(&agentprism::testing::ServerTls {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        client_ca_pem: None,
    })
    .expect("start a TLS cluster");
    (cluster, root)
}

/// Where one measurement's store is.
#[derive(Clone)]
enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// A replica's own handle on the store (its own connections).
    async fn open(&self, scratch: &Path) -> Arc<dyn Store> {
        match self {
            Location::Sqlite(root) => Arc::new(SqliteStore::open(root).expect("open the store")),
            Location::Postgres(url) => Arc::new(
                PostgresStore::connect(url, PgOptions::new(scratch))
                    .await
                    .expect("connect"),
            ),
        }
    }
}

type NewLocation<'a> =
    dyn Fn(&str) -> std::pin::Pin<Box<dyn std::future::Future<Output = Location> + 'a>> + 'a;

fn measure<'a>(
    runtime: &tokio::runtime::Runtime,
    backend: &str,
    base: &'a Path,
    folder: &'a Path,
    new_location: impl Fn(&str) -> std::pin::Pin<Box<dyn std::future::Future<Output = Location> + 'a>>
    + 'a,
) {
    let new_location: &NewLocation<'a> = &new_location;
    runtime.block_on(async {
        for count in 1..=3 {
            let location = new_location(&format!("store-{count}")).await;
            let mut replicas = Vec::new();
            for _ in 0..count {
                replicas.push(
                    Replica::new(
                        &location,
                        base,
                        folder,
                        InstantRunner::new(),
                        Duration::from_secs(45),
                    )
                    .await,
                );
            }
            let (elapsed, run_ids) = run_many(&replicas).await;
            println!(
                "{count} replica(s): {RUNS} runs of 10 calls in {:.2} s: {:.1} runs/s",
                elapsed.as_secs_f64(),
                RUNS as f64 / elapsed.as_secs_f64()
            );
            support::figure(
                "replicas",
                &format!("{backend}: runs/s, {count} replica(s), {RUNS} runs of 10 calls"),
                format!("{:.1}/s", RUNS as f64 / elapsed.as_secs_f64()),
                "-",
            );
            if count == 3 {
                let mut status = status_elsewhere(&replicas, &run_ids).await;
                report(backend, "`run/status` through another replica", &mut status);
            }
        }
        let location = new_location("store-renew").await;
        let mut renewals = renewal_cost(&location, base, folder).await;
        report(
            backend,
            "a lease renewal (`clock_ms` + `renew_lease`)",
            &mut renewals,
        );
    });
    let location = runtime.block_on(new_location("store-takeover"));
    let takeover = takeover(&location, base, folder, runtime);
    println!(
        "takeover with a {} ms TTL: {:.0} ms from the death to the completed resume ({:.0} ms over the TTL)",
        TAKEOVER_TTL.as_millis(),
        takeover.as_secs_f64() * 1e3,
        (takeover.as_secs_f64() - TAKEOVER_TTL.as_secs_f64()) * 1e3
    );
    support::figure(
        "replicas",
        &format!(
            "{backend}: takeover, death to completed resume ({} ms TTL)",
            TAKEOVER_TTL.as_millis()
        ),
        format!(
            "TTL + {:.0} ms",
            (takeover.as_secs_f64() - TAKEOVER_TTL.as_secs_f64()) * 1e3
        ),
        "TTL + < 1 s",
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The served folder: a 10-call workflow.
fn write_folder(base: &Path) -> PathBuf {
    let folder = base.join("workflows");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(
        folder.join("ten.js"),
        "export const meta = { name: 'ten', description: 'ten calls', model: 'codex' };\nfor (let i = 0; i < 10; i++) { await agent('prompt ' + i, { label: 'call ' + i }); }\nreturn 'done';\n",
    )
    .expect("ten.js");
    std::fs::canonicalize(folder).expect("the folder's path")
}

/// One replica: its MCP core and its handle on the shared store.
struct Replica {
    server: Arc<McpServer>,
    store: Arc<dyn Store>,
}

impl Replica {
    async fn new(
        location: &Location,
        base: &Path,
        folder: &Path,
        runner: Arc<dyn AgentRunner>,
        ttl: Duration,
    ) -> Replica {
        let store = location.open(&base.join("scratch")).await;
        let config = EngineConfig {
            home: Some(base.to_path_buf()),
            probe: false,
            max_runs: RUNS + 10,
            max_active_per_project: RUNS + 10,
            allow_script_backends: true,
            lease_policy: LeasePolicy::Ttl(ttl),
            ..EngineConfig::default()
        };
        let engine = Engine::new(
            store.clone(),
            runner,
            Arc::new(NamedBackends::new(["codex"])),
            config,
        );
        let loaded = agentprism::serve::folder::load(folder).expect("load the folder");
        let handler = FolderServer::new(engine, loaded, FolderOptions::default()).expect("server");
        Replica {
            server: Arc::new(McpServer::new(handler, ServerOptions::default())),
            store,
        }
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        let answer = self.try_call(method, params).await;
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    async fn try_call(&self, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let outcome = self
            .server
            .handle_bytes(
                body.to_string().as_bytes(),
                TransportContext::new(TransportKind::Http, "replicas-bench"),
            )
            .await;
        outcome.response.expect("a response")
    }

    async fn state(&self, run_id: &str) -> Value {
        self.call("run/status", json!({"runId": run_id})).await
    }
}

/// Starts [`RUNS`] runs round robin through `replicas` and polls each (through the next
/// replica) until it completes.
async fn run_many(replicas: &[Replica]) -> (Duration, Vec<String>) {
    let started = Instant::now();
    let mut run_ids = Vec::new();
    for run in 0..RUNS {
        let replica = &replicas[run % replicas.len()];
        let view = replica.call("run/start", json!({"name": "ten"})).await;
        run_ids.push(view["runId"].as_str().expect("runId").to_owned());
    }
    for (run, run_id) in run_ids.iter().enumerate() {
        let poller = &replicas[(run + 1) % replicas.len()];
        loop {
            let view = poller.state(run_id).await;
            match view["state"].as_str() {
                Some("completed") => break,
                Some("working") => tokio::time::sleep(Duration::from_millis(1)).await,
                other => panic!("run {run_id}: unexpected state {other:?}: {view}"),
            }
        }
    }
    (started.elapsed(), run_ids)
}

/// `run/status` of completed runs through a replica that did not execute them.
async fn status_elsewhere(replicas: &[Replica], run_ids: &[String]) -> Vec<Duration> {
    let mut samples = Vec::new();
    for sample in 0..STATUS_SAMPLES {
        let run = sample % run_ids.len();
        let replica = &replicas[(run + 2) % replicas.len()];
        let started = Instant::now();
        let view = replica.state(&run_ids[run]).await;
        samples.push(started.elapsed());
        debug_assert_eq!(view["state"], "completed");
    }
    samples
}

/// The heartbeat's store calls on the lease of a run held inside an agent call.
async fn renewal_cost(location: &Location, base: &Path, folder: &Path) -> Vec<Duration> {
    let (held, mut agent_started, _cancelled) = HeldRunner::new();
    let replica = Replica::new(location, base, folder, held, Duration::from_secs(45)).await;
    let view = replica.call("run/start", json!({"name": "ten"})).await;
    let run_id = RunId::parse(view["runId"].as_str().expect("runId")).expect("a run id");
    agent_started.recv().await.expect("the agent call started");
    let token = replica
        .store
        .lease(&run_id)
        .await
        .expect("the lease")
        .expect("held")
        .token;
    let mut samples = Vec::new();
    for _ in 0..RENEWALS {
        let started = Instant::now();
        let now = replica.store.clock_ms().await.expect("the clock");
        replica
            .store
            .renew_lease(&run_id, &token, now + 45_000)
            .await
            .expect("renewed");
        samples.push(started.elapsed());
    }
    samples
}

/// Death of the executing replica (its runtime dropped) to the completed resume elsewhere.
fn takeover(
    location: &Location,
    base: &Path,
    folder: &Path,
    survivor_runtime: &tokio::runtime::Runtime,
) -> Duration {
    let doomed_runtime = runtime();
    let (run_id, doomed) = doomed_runtime.block_on(async {
        let (held, mut agent_started, _cancelled) = HeldRunner::new();
        let doomed = Replica::new(location, base, folder, held, TAKEOVER_TTL).await;
        let view = doomed.call("run/start", json!({"name": "ten"})).await;
        agent_started.recv().await.expect("the agent call started");
        (view["runId"].as_str().expect("runId").to_owned(), doomed)
    });
    let survivor = survivor_runtime.block_on(Replica::new(
        location,
        base,
        folder,
        InstantRunner::new(),
        TAKEOVER_TTL,
    ));
    let died = Instant::now();
    doomed_runtime.shutdown_background();
    std::mem::forget(doomed);
    survivor_runtime.block_on(async {
        loop {
            let view = survivor.state(&run_id).await;
            if view["state"] == "failed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        survivor.call("run/resume", json!({"runId": run_id})).await;
        loop {
            let view = survivor.state(&run_id).await;
            if view["state"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    died.elapsed()
}

fn report(backend: &str, what: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{what}: p50 {:.3} ms, p99 {:.3} ms over {} samples",
        ms(at(50)),
        ms(at(99)),
        samples.len()
    );
    support::figure(
        "replicas",
        &format!("{backend}: {what}: p50 / p99"),
        format!("{:.3} / {:.3} ms", ms(at(50)), ms(at(99))),
        "-",
    );
}
