//! Several `agentprism serve <dir>` replicas sharing one store (`--store`, docs/serve.md
//! "Replicas"), through the real binary: runs started, polled and resumed through different
//! replicas (`sharing`), a replica killed or stalled past its lease TTL and its run taken over
//! by an explicit resume elsewhere (`takeover`), the refusal of a store without `cas`, and
//! housekeeping with `/metrics` (`housekeeping`).
//!
//! The store is a parameter ([`StoreUnderTest`]): a SQLite persistence root every replica
//! opens (SQLite offers `cas` and `fence` between processes on one host); a PostgreSQL
//! server is another location of the same tests.

mod cutoff;
mod housekeeping;
mod sharing;
mod takeover;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::serve::{Client, Served, copy_folder, extra_fixtures};
use crate::support::context::{TestContext, prompts_in_log};

/// The bearer token every replica of a test requires (the principal header needs one).
pub const TOKEN: &str = "replica-test-token";
/// The header an (imagined) gateway puts the caller's identity in.
pub const PRINCIPAL: &str = "X-User";
/// The lease TTL of the tests: short, so a dead replica's runs lapse quickly.
pub const TTL: &str = "1500ms";

/// The store the replicas of one test share.
pub enum StoreUnderTest {
    /// A SQLite persistence root inside the test's temp dir.
    Sqlite(PathBuf),
}

impl StoreUnderTest {
    pub fn new(ctx: &TestContext) -> StoreUnderTest {
        StoreUnderTest::Sqlite(ctx.path("shared-store"))
    }

    /// `--store`'s value.
    pub fn location(&self) -> String {
        match self {
            StoreUnderTest::Sqlite(path) => path.display().to_string(),
        }
    }

    /// The store itself, read by a test to check what the replicas journaled.
    pub fn open(&self) -> agentprism::store::SqliteStore {
        match self {
            StoreUnderTest::Sqlite(path) => {
                agentprism::store::SqliteStore::open(path).expect("open the shared store")
            }
        }
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
        .map(|_| {
            let mut flags = vec![
                "--store",
                location.as_str(),
                "--token",
                TOKEN,
                "--principal-header",
                PRINCIPAL,
            ];
            flags.extend_from_slice(extra);
            Served::start(ctx, folder, &flags)
        })
        .collect()
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
