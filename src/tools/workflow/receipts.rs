//! Exact retries of `run` and `resume` (docs/api.md, "Exact retries"): a bounded table of
//! receipts, one per request identity, so a retried request gets the first answer instead
//! of admitting a second run.
//!
//! The identity is the session and JSON-RPC id in a legacy session, and the client's
//! idempotency key (or, for `resume`, the request id and arguments) without one. A receipt
//! holds its answer in a cell a concurrent retry waits on; what the cell must not keep (a
//! failure before admission, a stateless refusal) the caller leaves out with [`Uncached`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::OnceCell;

use crate::engine::Engine;
use crate::mcp::handler::{McpError, RequestContext};
use crate::model::{RunId, RunStatus};
use crate::util::sync::Lock;

/// Run receipts kept for exact retries; the oldest go first.
const MAX_RECEIPTS: usize = 1024;

/// Why a receipt cell was left empty.
pub(super) enum Uncached {
    Error(McpError),
    Answer(Value),
}

/// The receipts of one server.
#[derive(Default)]
pub(super) struct ReceiptBook {
    receipts: Mutex<Receipts>,
}

impl ReceiptBook {
    /// The receipt for `key`, made when there is none. The same key with other arguments is
    /// refused. For a stateless resume (`check_generation`) a receipt whose answer no longer
    /// describes the run (a newer generation, or the generation it started was stopped or
    /// paused since) is replaced by a fresh one, so the request resumes again.
    pub(super) async fn receipt(
        &self,
        engine: &Engine,
        key: &ReceiptKey,
        check_generation: bool,
    ) -> Result<Arc<Receipt>, String> {
        let receipt = self.lock_receipts().get_or_insert(&key.id, &key.digest);
        if receipt.digest != key.digest {
            return Err(format!(
                "{} was already used with different arguments; use a new key for a new request",
                key.describe
            ));
        }
        let stale = match receipt.answer.get() {
            Some(answer) if check_generation => {
                let answer = serde_json::from_str(answer).unwrap_or(Value::Null);
                !resume_still_stands(engine, &answer).await
            }
            _ => false,
        };
        if !stale {
            return Ok(receipt);
        }
        let mut receipts = self.lock_receipts();
        // Another retry may have replaced it meanwhile: share that one.
        if let Some(current) = receipts.get(&key.id)
            && !Arc::ptr_eq(&current, &receipt)
        {
            return Ok(current);
        }
        receipts.remove(&key.id);
        Ok(receipts.insert(&key.id, &key.digest))
    }

    /// Drops the receipts of a legacy session that ended: its ids will not come again.
    pub(super) fn forget_session(&self, session_id: &str) {
        self.lock_receipts().forget_session(session_id);
    }

    fn lock_receipts(&self) -> std::sync::MutexGuard<'_, Receipts> {
        self.receipts.locked()
    }
}

/// Whether a resume acknowledgement still describes the run: the generation it started
/// is the latest, and it has not been stopped, paused or failed since.
async fn resume_still_stands(engine: &Engine, answer: &Value) -> bool {
    let acknowledged = answer
        .pointer("/structuredContent/continuation/generation")
        .and_then(Value::as_u64);
    let Some(run_id) = answer
        .pointer("/structuredContent/runId")
        .and_then(Value::as_str)
        .and_then(|id| RunId::parse(id).ok())
    else {
        return false;
    };
    match engine.load_reconciled(&run_id).await {
        Ok(record) => {
            acknowledged == Some(u64::from(record.generation))
                && !matches!(
                    record.status,
                    RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed
                )
        }
        Err(_) => false,
    }
}

/// The `_meta` key that makes a stateless `run` retryable (docs/api.md, "Exact retries").
pub const IDEMPOTENCY_KEY_META: &str = "agentprism/idempotencyKey";
/// Longest idempotency key accepted, in bytes.
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// What identifies one run/resume request for exact retries.
pub(super) struct ReceiptKey {
    /// The receipt table's key; the engine's operation id is derived from it.
    pub(super) id: String,
    /// Digest of the arguments: a receipt answers only the same arguments.
    digest: String,
    /// How the key is named in an error.
    describe: String,
}

/// Exact-retry identity (docs/api.md). In a legacy session: the session and the JSON-RPC
/// id, which is unique there. Stateless, where every client numbers its requests from 1:
/// the client's `_meta["agentprism/idempotencyKey"]` with the arguments; without one a `run`
/// has no identity (it always admits a new run) and a `resume` is known by its id and
/// arguments, its receipt checked against the run before it answers.
pub(super) fn receipt_key(
    ctx: &RequestContext,
    arguments: &Value,
    is_resume: bool,
) -> Result<Option<ReceiptKey>, String> {
    let id = ctx.request_id.to_string();
    if let Some(session) = &ctx.session_id {
        return Ok(Some(ReceiptKey {
            id: format!("s\u{0}{session}\u{0}{id}"),
            // A legacy retry is known by its id alone.
            digest: String::new(),
            describe: format!("request id {id}"),
        }));
    }
    let digest =
        crate::util::sha256_hex(crate::engine::journal::canonical_json(arguments).as_bytes());
    let action = if is_resume { "resume" } else { "run" };
    match ctx.meta.get(IDEMPOTENCY_KEY_META) {
        None | Some(Value::Null) => {}
        Some(Value::String(key)) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_BYTES => {
            return Ok(Some(ReceiptKey {
                id: format!("k\u{0}{action}\u{0}{key}"),
                digest,
                describe: format!("_meta[\"{IDEMPOTENCY_KEY_META}\"] {key:?}"),
            }));
        }
        Some(_) => {
            return Err(format!(
                "_meta[\"{IDEMPOTENCY_KEY_META}\"] must be a string of 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
            ));
        }
    }
    if !is_resume {
        return Ok(None);
    }
    Ok(Some(ReceiptKey {
        id: format!("n\u{0}{id}\u{0}{digest}"),
        digest,
        describe: format!("request id {id}"),
    }))
}

/// One request identity's answer, as its JSON text (a third of the heap its value takes;
/// the table keeps up to [`MAX_RECEIPTS`]). A retry that arrives while the first request
/// still prepares waits on the same cell.
pub(super) struct Receipt {
    digest: String,
    pub(super) answer: OnceCell<Box<str>>,
}

/// Bounded receipts of run/resume answers, one per request identity; the oldest go first.
#[derive(Default)]
struct Receipts {
    cells: HashMap<String, Arc<Receipt>>,
    order: VecDeque<String>,
}

impl Receipts {
    fn get(&self, key: &str) -> Option<Arc<Receipt>> {
        self.cells.get(key).cloned()
    }

    fn get_or_insert(&mut self, key: &str, digest: &str) -> Arc<Receipt> {
        match self.get(key) {
            Some(receipt) => receipt,
            None => self.insert(key, digest),
        }
    }

    fn insert(&mut self, key: &str, digest: &str) -> Arc<Receipt> {
        while self.order.len() >= MAX_RECEIPTS {
            if let Some(oldest) = self.order.pop_front() {
                self.cells.remove(&oldest);
            }
        }
        let receipt = Arc::new(Receipt {
            digest: digest.to_owned(),
            answer: OnceCell::new(),
        });
        self.cells.insert(key.to_owned(), receipt.clone());
        self.order.push_back(key.to_owned());
        receipt
    }

    fn remove(&mut self, key: &str) {
        self.cells.remove(key);
        self.order.retain(|known| known != key);
    }

    fn forget_session(&mut self, session_id: &str) {
        let prefix = format!("s\u{0}{session_id}\u{0}");
        self.cells.retain(|key, _| !key.starts_with(&prefix));
        self.order.retain(|key| !key.starts_with(&prefix));
    }
}
