//! Who owns a served run, and the one rule every owner-gated answer goes through.
//!
//! A run belongs to the caller that started it: the principal when the server takes
//! identities from a header (`--principal-header`), otherwise the legacy session
//! (`Mcp-Session-Id`, or the one stdio session), otherwise the shared anonymous owner of
//! stateless callers. The key is stored with the run (the engine's `caller` tag), so a later
//! process over the same `--state-dir` knows it.
//!
//! [`Owners::admit`] decides whether a caller may see a run. Anyone but the owner gets
//! [`Unknown`], the very answer of an id that does not exist, so an id is no existence
//! oracle. This process remembers the runs it started or handed over ([`Owners::claimed`]);
//! a run it has never seen (one a previous process started) is handed to the first caller
//! that names its unguessable id, unless a principal owns it: a principal's run stays that
//! principal's. The hand-over is a compare-and-set on the stored key, so two callers racing
//! for one id cannot both win.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::engine::Engine;
use crate::mcp::handler::RequestContext;
use crate::model::RunId;
use crate::util::sync::Lock;

/// The stored key of runs a synchronous `tools/call` made: never handed to anyone.
pub(crate) const SYNC_CALLER: &str = "sync";
const ANONYMOUS: &str = "anonymous";
/// The owner of A2A tasks when no principal header is configured.
const A2A: &str = "a2a";

/// A caller's owner key: `principal:<name>`, `session:<id>`, `anonymous` or `a2a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OwnerKey(String);

impl OwnerKey {
    /// The key of the caller of `ctx`.
    pub(crate) fn of(ctx: &RequestContext) -> OwnerKey {
        if let Some(principal) = &ctx.principal {
            return OwnerKey(format!("principal:{principal}"));
        }
        match &ctx.session_id {
            Some(session) => OwnerKey(format!("session:{session}")),
            None => OwnerKey(ANONYMOUS.to_owned()),
        }
    }

    /// The key of an A2A caller (`POST /a2a`): its principal, the same key as over MCP, else
    /// the one owner every A2A caller without a principal shares.
    pub(crate) fn a2a(principal: Option<&str>) -> OwnerKey {
        match principal {
            Some(principal) => OwnerKey(format!("principal:{principal}")),
            None => OwnerKey(A2A.to_owned()),
        }
    }

    /// The key as stored with a run or a queued start.
    pub(crate) fn stored(key: &str) -> OwnerKey {
        OwnerKey(key.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    fn is_principal(stored: &str) -> bool {
        stored.starts_with("principal:")
    }
}

/// The caller may not see the run, or it does not exist: one answer for both.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unknown;

/// What this process knows of a run it started or handed over.
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    pub owner: OwnerKey,
    /// The workflow's name, when known here (a live view needs its declared phases).
    pub workflow: Option<String>,
    /// The generation this process last started (a live view shows it).
    pub generation: u32,
    /// Start order, so `run/list` lists runs oldest first.
    pub seq: u64,
}

/// The owners of the runs this process has started or handed over.
#[derive(Default)]
pub struct Owners {
    /// Run → claim, for runs this process started or that were handed over here. A run not
    /// in it is one this process has never seen (or has forgotten after the terminal TTL).
    claimed: Mutex<HashMap<RunId, Claim>>,
    /// The next [`Claim::seq`].
    next_seq: std::sync::atomic::AtomicU64,
    /// Serialises hand-overs, so a caller who names an id just handed to someone else in
    /// this process sees the new owner in `claimed` instead of taking the run over again.
    handover: tokio::sync::Mutex<()>,
}

impl Owners {
    /// Records a run this process just started (or resumed) for `owner`.
    pub(crate) fn started(
        &self,
        run_id: &RunId,
        owner: &OwnerKey,
        workflow: &str,
        generation: u32,
    ) {
        let seq = self.seq();
        let mut claimed = self.claimed.locked();
        let claim = claimed.entry(run_id.clone()).or_insert_with(|| Claim {
            owner: owner.clone(),
            workflow: None,
            generation,
            seq,
        });
        claim.workflow = Some(workflow.to_owned());
        claim.generation = generation;
    }

    /// What this process knows of `run_id`.
    pub(crate) fn claim(&self, run_id: &RunId) -> Option<Claim> {
        self.claimed.locked().get(run_id).cloned()
    }

    fn seq(&self) -> u64 {
        self.next_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets a run (deleted after its terminal TTL).
    pub(crate) fn forget(&self, run_id: &RunId) {
        self.claimed.locked().remove(run_id);
    }

    /// The runs `owner` may list, oldest first.
    pub(crate) fn runs_of(&self, owner: &OwnerKey) -> Vec<RunId> {
        let mut runs: Vec<(u64, RunId)> = self
            .claimed
            .locked()
            .iter()
            .filter(|(_, claim)| claim.owner == *owner)
            .map(|(run_id, claim)| (claim.seq, run_id.clone()))
            .collect();
        runs.sort();
        runs.into_iter().map(|(_, run_id)| run_id).collect()
    }

    /// Whether `owner` may act on `run_id`, handing over a run this process has never seen
    /// to its first caller (see the module documentation).
    pub(crate) async fn admit(
        &self,
        engine: &Engine,
        run_id: &RunId,
        owner: &OwnerKey,
    ) -> Result<(), Unknown> {
        if let Some(known) = self.known(run_id, owner) {
            return known;
        }
        let _handover = self.handover.lock().await;
        if let Some(known) = self.known(run_id, owner) {
            return known;
        }
        // A run of an earlier process (or of another replica): ask the store.
        for _ in 0..3 {
            let stored = match engine.run_caller(run_id).await {
                Ok(Some(stored)) => stored,
                // No run: a queued start, or one that just became a run (read again).
                Ok(None) => match self.admit_queued(engine, run_id, owner).await {
                    Some(answer) => return answer,
                    None => continue,
                },
                Err(_) => return Err(Unknown),
            };
            let stored_key = stored.as_deref().unwrap_or(ANONYMOUS);
            if stored_key == SYNC_CALLER {
                return Err(Unknown);
            }
            if stored_key == owner.as_str() {
                self.remember(run_id, owner);
                return Ok(());
            }
            if OwnerKey::is_principal(stored_key) {
                return Err(Unknown);
            }
            match engine
                .reclaim(run_id, stored.as_deref(), Some(owner.as_str()))
                .await
            {
                Ok(true) => {
                    self.remember(run_id, owner);
                    return Ok(());
                }
                // Someone else changed the key first: read it again.
                Ok(false) => continue,
                Err(_) => return Err(Unknown),
            }
        }
        Err(Unknown)
    }

    /// A start in the queue (no run yet) is its owner's only: it is handed over to nobody
    /// until it is a run. `None` when there is no entry either.
    async fn admit_queued(
        &self,
        engine: &Engine,
        run_id: &RunId,
        owner: &OwnerKey,
    ) -> Option<Result<(), Unknown>> {
        match engine.queue().queued(run_id).await {
            Ok(Some(entry)) if entry.start.caller == owner.as_str() => {
                self.remember(run_id, owner);
                Some(Ok(()))
            }
            Ok(None) => None,
            _ => Some(Err(Unknown)),
        }
    }

    /// The answer for a run this process already knows, `None` for one it does not.
    fn known(&self, run_id: &RunId, owner: &OwnerKey) -> Option<Result<(), Unknown>> {
        let claimed = self.claimed.locked();
        let claim = claimed.get(run_id)?;
        Some(if claim.owner == *owner {
            Ok(())
        } else {
            Err(Unknown)
        })
    }

    fn remember(&self, run_id: &RunId, owner: &OwnerKey) {
        let seq = self.seq();
        self.claimed
            .locked()
            .entry(run_id.clone())
            .or_insert_with(|| Claim {
                owner: owner.clone(),
                workflow: None,
                generation: 0,
                seq,
            });
    }
}
