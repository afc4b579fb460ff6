//! The host-scoped receipt ledger: which automatic messages have been claimed, so that
//! concurrent views of one host (two panels of one conversation) inject each message once.
//! The channel sender keeps a ledger of its own with the same rule (`channels.rs`).
//!
//! A claim is `(scope, runId, eventId)`; the first claim wins and every later one is told it
//! lost. The scope is the host as this server can tell it apart ([`host_scope`]): the legacy
//! MCP session (what the seed calls `clientId`), else the 2026-07-28 principal, else one
//! shared local scope (the daemon serves one user, behind the same-user peer check).
//!
//! The ledger lives in memory and forgets its oldest claims beyond [`MAX_CLAIMS`]. That is
//! enough because exactly-once delivery is not on offer anyway: a host that accepts a message
//! and crashes before it records the claim's answer (the seed's accepted-message / lost-ack
//! case) repeats or drops the message whatever the server keeps. What the ledger prevents is
//! the common case, two live views racing to say the same thing; a server restart, or a claim
//! evicted after 16,384 newer ones, at worst lets one message be said twice.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use crate::mcp::handler::RequestContext;
use crate::util::sync::Lock;

/// Claims kept; the oldest is forgotten first.
pub(crate) const MAX_CLAIMS: usize = 16_384;

/// The scope of a request's claims.
pub(crate) fn host_scope(ctx: &RequestContext) -> String {
    match (&ctx.session_id, &ctx.principal) {
        (Some(session), _) => format!("session:{session}"),
        (None, Some(principal)) => format!("principal:{principal}"),
        (None, None) => "local".to_owned(),
    }
}

/// The scope of a legacy session's claims (the channel sender's).
pub(crate) fn session_scope(session_id: &str) -> String {
    format!("session:{session_id}")
}

/// First claim wins, bounded.
#[derive(Default)]
pub(crate) struct ReceiptLedger {
    claims: Mutex<Claims>,
}

/// The claims in arrival order, and the same as a set for lookups.
#[derive(Default)]
struct Claims {
    order: VecDeque<(String, String, String)>,
    set: HashSet<(String, String, String)>,
}

impl ReceiptLedger {
    /// Claims `event_id` of `run_id` for `scope`: `true` only for the first claim.
    pub(crate) fn claim(&self, scope: &str, run_id: &str, event_id: &str) -> bool {
        let key = (scope.to_owned(), run_id.to_owned(), event_id.to_owned());
        let mut claims = self.claims.locked();
        if !claims.set.insert(key.clone()) {
            return false;
        }
        claims.order.push_back(key);
        while claims.order.len() > MAX_CLAIMS {
            if let Some(oldest) = claims.order.pop_front() {
                claims.set.remove(&oldest);
            }
        }
        true
    }

    /// Whether `event_id` of `run_id` has been claimed in `scope`.
    pub(crate) fn is_claimed(&self, scope: &str, run_id: &str, event_id: &str) -> bool {
        let key = (scope.to_owned(), run_id.to_owned(), event_id.to_owned());
        self.claims.locked().set.contains(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_wins_within_a_scope_only() {
        let ledger = ReceiptLedger::default();
        assert!(!ledger.is_claimed("session:a", "r", "terminal-1-completed"));
        assert!(ledger.claim("session:a", "r", "terminal-1-completed"));
        assert!(!ledger.claim("session:a", "r", "terminal-1-completed"));
        assert!(ledger.is_claimed("session:a", "r", "terminal-1-completed"));
        // Another host, another run, another event: separate claims.
        assert!(ledger.claim("session:b", "r", "terminal-1-completed"));
        assert!(ledger.claim("session:a", "s", "terminal-1-completed"));
        assert!(ledger.claim("session:a", "r", "paused-1-requested"));
    }

    #[test]
    fn the_ledger_keeps_exactly_its_cap() {
        let ledger = ReceiptLedger::default();
        for index in 0..MAX_CLAIMS {
            assert!(ledger.claim("local", "r", &index.to_string()));
        }
        // At the cap everything is still known.
        assert!(ledger.is_claimed("local", "r", "0"));
        assert!(!ledger.claim("local", "r", "0"));
        // One more forgets the oldest, and only it.
        assert!(ledger.claim("local", "r", "new"));
        assert!(!ledger.is_claimed("local", "r", "0"));
        assert!(ledger.is_claimed("local", "r", "1"));
    }
}
