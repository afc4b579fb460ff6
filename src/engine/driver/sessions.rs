//! The sessions a generation's agent calls open: the journal of them a resumed generation
//! reads when it starts, the recorded session a re-run call continues (the choice is
//! `engine::reopen`'s), and what the driver does when a call's session opened: it keeps the
//! path the session took for the call's row and `agentEnd`, and journals a session the
//! agent can reopen with the generation's next write ([`super::durability`]).

use serde_json::Value;

use crate::engine::driver::{Driver, Persistence};
use crate::engine::reopen::{self, CallIdentity, FreshReason, ReopenPath};
use crate::model::OpenSession;

/// The journal a generation continues from: the sessions earlier generations' calls
/// opened, and the entries this generation's calls already continue.
#[derive(Default)]
pub(super) struct Reopening {
    journaled: Vec<OpenSession>,
    taken: Vec<(u32, u32)>,
}

/// What an agent task reports once its call's session opened.
pub(super) struct SessionOpened {
    /// The session's reference with the reopen path's fields: what the call's row keeps.
    pub(super) session: Option<Value>,
    /// Set when the call asked to reopen a session: what became of it.
    pub(super) path: Option<ReopenPath>,
    /// For a session the agent can reopen: its reference and folder, to journal.
    pub(super) journal: Option<(Value, String)>,
}

/// What the driver keeps of a live call's session.
#[derive(Default)]
pub(super) struct CallSession {
    /// The recorded session the call asked to reopen.
    pub(super) reopening: Option<String>,
    /// What became of the reopen, or why the call did not ask for one.
    pub(super) path: Option<ReopenPath>,
    /// The session's reference, for a row whose result carries none.
    pub(super) session: Option<Value>,
}

impl Driver {
    /// Reads the sessions earlier generations journaled; a generation with nothing before
    /// it, or the dry run, has none. A failed read is logged and the calls start cold.
    pub(super) async fn load_journaled_sessions(&mut self) {
        let Persistence::Store { store, .. } = &self.setup.persistence else {
            return;
        };
        if self.setup.generation <= 1 {
            return;
        }
        match store.open_sessions(&self.setup.run_id).await {
            Ok(journaled) => self.reopening.journaled = journaled,
            Err(error) => {
                tracing::warn!(run = %self.setup.run_id, %error, "could not read the journaled sessions; re-run calls start fresh sessions");
            }
        }
    }

    /// The recorded session a live re-run of the call continues, and its
    /// [`CallSession`]: an isolated call continues none (its worktree is gone) and says so.
    pub(super) fn continuation_session(
        &mut self,
        identity: CallIdentity<'_>,
        isolated: bool,
    ) -> CallSession {
        let rows: Vec<_> = self.setup.pool.rows_with_hash(identity.hash).collect();
        let found = reopen::continuation(
            &self.reopening.journaled,
            &rows,
            identity,
            &self.reopening.taken,
        );
        let Some(found) = found else {
            return CallSession::default();
        };
        if isolated {
            return CallSession {
                path: Some(ReopenPath::Fresh(FreshReason::Isolated)),
                ..CallSession::default()
            };
        }
        self.reopening.taken.extend(found.entry);
        CallSession {
            reopening: Some(found.session_id),
            ..CallSession::default()
        }
    }

    /// A call's session opened: its path and reference are kept for the row, and a session
    /// the agent can reopen is journaled (root calls of a live generation) at the next tick
    /// if the call is still live then, or with its row if the call is cut off first; the
    /// task prompts at once. A refused write halts the generation as any lost write does.
    pub(super) async fn on_session_opened(&mut self, index: u32, opened: SessionOpened) {
        let SessionOpened {
            session,
            path,
            journal,
        } = opened;
        let dry = self.dry();
        let Some(call) = self.in_flight.get_mut(&index) else {
            return;
        };
        call.session.session = session;
        if path.is_some() {
            call.session.path = path;
        }
        let Some((reference, cwd)) = journal else {
            return;
        };
        if call.scope == "root" && !dry {
            let entry = OpenSession {
                generation: self.setup.generation,
                index,
                hash: call.hash.clone(),
                path: call.path.clone(),
                inputs_hash: call.inputs_hash.clone(),
                session: reference,
                cwd,
                opened_at: crate::util::now_ms(),
            };
            // Written at the next tick, or with the call's row if it is cut off first.
            self.journaling.push(entry);
        }
    }
}
