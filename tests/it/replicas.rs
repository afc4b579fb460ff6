//! Several `agentprism serve <dir>` replicas sharing one store (`--store`, docs/serve.md
//! "Replicas"), through the real binary: runs started, polled and resumed through different
//! replicas (`sharing`), a replica killed or stalled past its lease TTL and its run taken over
//! by an explicit resume elsewhere (`takeover`), the refusal of a store without `cas`, and
//! housekeeping with `/metrics` (`housekeeping`).
//!
//! The store is a parameter ([`StoreUnderTest`]): each test runs on a SQLite persistence
//! root every replica opens (SQLite offers `cas` and `fence` between processes on one host)
//! and on a database of the test binary's private PostgreSQL cluster, where a TCP proxy can
//! cut one replica off from the database.

mod cutoff;
pub mod housekeeping;
mod queue;
mod sharing;
mod takeover;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentprism::store::{PgOptions, Store};
use agentprism::testing::{PgCluster, PgDatabase, TcpProxy};
use serde_json::{Value, json};

use crate::serve::{Client, Served, copy_folder, extra_fixtures};
use crate::support::context::{TestContext, prompts_in_log};

/// The bearer token every replica of a test requires (the principal header needs one).
pub const TOKEN: &str = "replica-test-token";
/// The header an (imagined) gateway puts the caller's identity in.
pub const PRINCIPAL: &str = "X-User";
/// The lease TTL of the tests: short, so a dead replica's runs lapse quickly.
pub const TTL: &str = "1500ms";

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// The store the replicas of one test share, and a runtime for the test's own store calls
/// (and its proxies' tasks).
pub struct StoreUnderTest {
    pub backend: Backend,
    runtime: tokio::runtime::Runtime,
    /// Somewhere for this process's script copies when it opens the store itself.
    scratch: PathBuf,
}

pub enum Backend {
    /// A SQLite persistence root inside the test's temp dir.
    Sqlite(PathBuf),
    /// A database of its own on the test binary's private PostgreSQL cluster.
    Postgres(PgDatabase),
}

impl StoreUnderTest {
    pub fn new(ctx: &TestContext, kind: Kind) -> StoreUnderTest {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let backend = match kind {
            Kind::Sqlite => Backend::Sqlite(ctx.path("shared-store")),
            Kind::Postgres => {
                Backend::Postgres(runtime.block_on(PgCluster::shared().create_database()))
            }
        };
        StoreUnderTest {
            backend,
            runtime,
            scratch: ctx.path("test-store-scratch"),
        }
    }

    /// `--store`'s value.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(path) => path.display().to_string(),
            Backend::Postgres(database) => database.url.clone(),
        }
    }

    /// A `--store` value reaching the database through a proxy of its own, which the test
    /// can switch to cut that one replica off; `None` for SQLite (no network to cut).
    pub fn proxied(&self) -> Option<(String, TcpProxy)> {
        let Backend::Postgres(database) = &self.backend else {
            return None;
        };
        let proxy = self
            .runtime
            .block_on(TcpProxy::start(database.address))
            .expect("start the proxy");
        let url = PgCluster::shared().url_via(proxy.address(), &database.name);
        Some((url, proxy))
    }

    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The store itself, opened by the test to read what the replicas wrote.
    pub fn open(&self) -> Arc<dyn Store> {
        self.block_on(agentprism::store::open_location(
            &self.location(),
            PgOptions::new(&self.scratch),
        ))
        .expect("open the shared store")
    }
}

/// A test context whose mock agents log every message to `acp.log`, with the short lease
/// TTL.
pub fn context() -> TestContext {
    let ctx = TestContext::new();
    let log = ctx.path("acp.log");
    let mut ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    ctx.env
        .insert("MHL_SERVE_RUN_LOCK_TTL".to_owned(), TTL.to_owned());
    ctx
}

/// The folder every replica serves: `calls` (three quick agent calls) and `steps` (three
/// calls, each held until its gate file exists), at one path for all.
pub fn workflows(ctx: &TestContext) -> PathBuf {
    let folder = copy_folder(ctx, &extra_fixtures("durable"), "workflows");
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replicas");
    copy_folder(ctx, &own, "workflows");
    folder
}

/// Starts `count` replicas of `folder` over `store`, each with the token and principal
/// header and `extra` flags.
pub fn replicas(
    ctx: &TestContext,
    folder: &Path,
    store: &StoreUnderTest,
    count: usize,
    extra: &[&str],
) -> Vec<Served> {
    let location = store.location();
    (0..count)
        .map(|_| replica_at(ctx, folder, &location, extra))
        .collect()
}

/// One replica over the store at `location` (as [`replicas`] starts them).
pub fn replica_at(ctx: &TestContext, folder: &Path, location: &str, extra: &[&str]) -> Served {
    let mut flags = vec![
        "--store",
        location,
        "--token",
        TOKEN,
        "--principal-header",
        PRINCIPAL,
    ];
    flags.extend_from_slice(extra);
    Served::start(ctx, folder, &flags)
}

/// The principal `user`'s legacy session on `served`.
pub fn as_user(served: &Served, user: &str) -> Client {
    served.session(&[
        ("Authorization", &format!("Bearer {TOKEN}")),
        (PRINCIPAL, user),
    ])
}

/// How often the mock agents were prompted with a prompt containing `needle`.
pub fn prompted(ctx: &TestContext, needle: &str) -> usize {
    prompts_in_log(ctx, "acp.log")
        .iter()
        .filter(|prompt| prompt.contains(needle))
        .count()
}

/// How many `session/cancel` messages the mock agents received.
pub fn cancels(ctx: &TestContext) -> usize {
    std::fs::read_to_string(ctx.path("acp.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == "session/cancel")
        .count()
}

/// `run/status` through `client` until the run is failed and resumable (its replica's lease
/// lapsed), within the deadline.
pub fn wait_lapsed(client: &Client, run_id: &str) -> Value {
    client.poll(run_id, "failed after its lease lapsed", |view| {
        view["state"] == "failed"
    })
}
