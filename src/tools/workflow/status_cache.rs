//! Kept `status` answers, so that polling a run does not build the same document, its
//! `Value` and its text again while nothing in it changed.
//!
//! An answer is kept per run and inspection bounds under an [`AnswerVersion`] read before
//! the answer was built, and served only while a fresh read gives the same one:
//! - a run stored as not running: its stored version (`Store::run_version`), which the store
//!   changes on every write made while the run's stored status is not `running`;
//! - a run this process executes: its stored version and its live view's revision
//!   (`Engine::live_revision`), which its driver moves around every step that may change
//!   what status shows (a store write of the run, a change of the view); it is read once
//!   more after the build, and an answer built while a step ran is not kept. Permission
//!   requests, which reach status outside the driver's steps, rule out keeping and serving.
//!
//! So a served answer is the one a fresh build would give. Never kept: answers of a run
//! stored as `running` that another process executes, with pending permissions, with live
//! activity from elsewhere (a run not executed here), or whose document's status is not the
//! version's. A backend that keeps no version keeps nothing here. Any doubt is a miss.
//!
//! An answer is kept the second time it is built under the same version and bounds, not the
//! first: a run that is asked about once after it settles (a host's last poll) leaves only a
//! small marker here, not its document, so the daemon's memory does not grow with every run
//! it finished; a run that is polled again is served from here from its third call on.
//!
//! Bounded in entries (markers included) and in bytes (the serialised answer's length,
//! measured once when it is kept); the least recently used entry goes first, and an answer
//! over a single entry's share (a completed run's uncapped `outcome`) is not kept at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::engine::StatusQuery;
use crate::mcp::PreparedResult;
use crate::model::RunId;
use crate::util::sync::Lock;

/// Answers kept at most, over all runs.
pub(super) const MAX_ENTRIES: usize = 256;
/// Serialised bytes of the kept answers at most.
pub(super) const MAX_BYTES: usize = 8 << 20;
/// An answer longer than this is not kept.
pub(super) const MAX_ENTRY_BYTES: usize = 1 << 20;

/// What an answer was built under: the run's stored version (`Store::run_version`) and,
/// for a run this process executes, its live view's revision (`Engine::live_revision`).
/// A kept answer is served only under an equal one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AnswerVersion {
    pub(super) stored: u64,
    pub(super) live: Option<u64>,
}

impl From<u64> for AnswerVersion {
    fn from(stored: u64) -> AnswerVersion {
        AnswerVersion { stored, live: None }
    }
}

/// The cache; one per workflow tool.
pub(super) struct StatusCache {
    limits: Limits,
    state: Mutex<State>,
}

/// The bounds, fixed at construction (the constants above outside tests).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) entries: usize,
    pub(super) bytes: usize,
    pub(super) entry_bytes: usize,
}

#[derive(Default)]
struct State {
    /// Kept answers by run: few per run (one per set of inspection bounds asked), so a
    /// lookup borrows the run id instead of building a key.
    runs: HashMap<RunId, Vec<Entry>>,
    /// Entries in `runs`, against `Limits::entries`.
    entries: usize,
    /// Their bytes, against `Limits::bytes`.
    bytes: usize,
    /// Bumped per lookup and insert: the recency eviction compares.
    clock: u64,
}

struct Entry {
    /// The inspection bounds the answer was built with.
    last_n: usize,
    log_lines: usize,
    label_glob: Option<String>,
    /// The run's version read before the answer was built.
    version: AnswerVersion,
    /// The answer with its text, written once and shared with the calls it serves; `None`
    /// for the marker of its first build under `version`.
    answer: Option<Arc<PreparedResult>>,
    /// The answer's serialised length.
    bytes: usize,
    /// `State::clock` when last served or kept.
    used: u64,
}

impl Entry {
    fn answers(&self, query: &StatusQuery) -> bool {
        self.last_n == query.last_n
            && self.log_lines == query.log_lines
            && self.label_glob == query.label_glob
    }
}

impl Default for StatusCache {
    fn default() -> Self {
        StatusCache::with_limits(Limits {
            entries: MAX_ENTRIES,
            bytes: MAX_BYTES,
            entry_bytes: MAX_ENTRY_BYTES,
        })
    }
}

impl StatusCache {
    pub(super) fn with_limits(limits: Limits) -> StatusCache {
        StatusCache {
            limits,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below leaves the state consistent before anything that could panic.
        self.state.locked()
    }

    /// The answer kept for `run_id` and `query` under exactly `version`. One kept under
    /// another version is dropped: the run changed since.
    pub(super) fn get(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
        version: AnswerVersion,
    ) -> Option<Arc<PreparedResult>> {
        let mut guard = self.state();
        let state = &mut *guard;
        state.clock += 1;
        let clock = state.clock;
        let entries = state.runs.get_mut(run_id)?;
        let position = entries.iter().position(|entry| entry.answers(query))?;
        if entries[position].version == version {
            let entry = &mut entries[position];
            entry.used = clock;
            return entry.answer.clone();
        }
        let stale = entries.swap_remove(position);
        if entries.is_empty() {
            state.runs.remove(run_id);
        }
        state.entries -= 1;
        state.bytes -= stale.bytes;
        None
    }

    /// Records a build of `answer` for `run_id` and `query` under `version`: the second one
    /// under the same version keeps it, the first leaves a marker. Replaces what was kept for
    /// them, evicting the least recently used entries to stay within the limits. Returns
    /// the answer as kept, so the call that kept it answers with the same text.
    pub(super) fn put(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
        version: AnswerVersion,
        answer: &Value,
    ) -> Option<Arc<PreparedResult>> {
        let mut guard = self.state();
        let state = &mut *guard;
        let mut built_before = false;
        if let Some(entries) = state.runs.get_mut(run_id)
            && let Some(position) = entries.iter().position(|entry| entry.answers(query))
        {
            let old = entries.swap_remove(position);
            if entries.is_empty() {
                state.runs.remove(run_id);
            }
            state.entries -= 1;
            state.bytes -= old.bytes;
            built_before = old.version == version;
        }
        // Measured before the text is written, so an answer over the bounds costs no copy.
        let bytes = if built_before {
            serialised_len(answer)
        } else {
            0
        };
        if bytes > self.limits.entry_bytes || bytes > self.limits.bytes || self.limits.entries == 0
        {
            return None;
        }
        let kept = built_before.then(|| Arc::new(PreparedResult::new(answer.clone())));
        while state.entries + 1 > self.limits.entries || state.bytes + bytes > self.limits.bytes {
            evict_oldest(state);
        }
        state.clock += 1;
        let used = state.clock;
        state.entries += 1;
        state.bytes += bytes;
        state.runs.entry(run_id.clone()).or_default().push(Entry {
            last_n: query.last_n,
            log_lines: query.log_lines,
            label_glob: query.label_glob.clone(),
            version,
            answer: kept.clone(),
            bytes,
            used,
        });
        kept
    }

    /// Drops every answer kept for `run_id` (the run is gone, or its status failed).
    pub(super) fn forget(&self, run_id: &RunId) {
        let mut guard = self.state();
        let state = &mut *guard;
        if let Some(entries) = state.runs.remove(run_id) {
            state.entries -= entries.len();
            state.bytes -= entries.iter().map(|entry| entry.bytes).sum::<usize>();
        }
    }

    /// How many answers and bytes are kept.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let state = self.state();
        (state.entries, state.bytes)
    }
}

/// Drops the least recently used entry (a scan: at most [`MAX_ENTRIES`], and only when the
/// cache is full).
fn evict_oldest(state: &mut State) {
    let oldest = state
        .runs
        .iter()
        .flat_map(|(run_id, entries)| {
            entries
                .iter()
                .enumerate()
                .map(move |(position, entry)| (entry.used, run_id, position))
        })
        .min_by_key(|(used, _, _)| *used)
        .map(|(_, run_id, position)| (run_id.clone(), position));
    let Some((run_id, position)) = oldest else {
        return;
    };
    if let Some(entries) = state.runs.get_mut(&run_id) {
        let old = entries.swap_remove(position);
        if entries.is_empty() {
            state.runs.remove(&run_id);
        }
        state.entries -= 1;
        state.bytes -= old.bytes;
    }
}

/// The length `answer` serialises to, without building the text.
fn serialised_len(answer: &Value) -> usize {
    crate::util::json_len(answer)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What `get` serves, as a value.
    trait GetValue {
        fn get_value(&self, run_id: &RunId, query: &StatusQuery, version: u64) -> Option<Value>;
    }

    impl GetValue for StatusCache {
        fn get_value(&self, run_id: &RunId, query: &StatusQuery, version: u64) -> Option<Value> {
            let prepared = self.get(run_id, query, version.into())?;
            assert_eq!(
                prepared.json(),
                serde_json::to_string(prepared.value()).unwrap()
            );
            Some(prepared.value().clone())
        }
    }

    fn run(n: usize) -> RunId {
        RunId::parse(&format!("lq3k2m1-run{n:03}")).expect("a valid run id")
    }

    fn query(last_n: usize) -> StatusQuery {
        StatusQuery {
            last_n,
            ..StatusQuery::default()
        }
    }

    /// Builds `answer` twice under `version`, as two status calls do: kept.
    fn keep(cache: &StatusCache, id: &RunId, bounds: &StatusQuery, version: u64, answer: &Value) {
        cache.put(id, bounds, version.into(), answer);
        cache.put(id, bounds, version.into(), answer);
    }

    #[test]
    fn an_answer_is_kept_on_its_second_build_under_one_version() {
        let cache = StatusCache::default();
        let (id, bounds) = (run(1), query(20));
        cache.put(&id, &bounds, AnswerVersion::from(7u64), &answer(10));
        assert_eq!(cache.usage(), (1, 0), "only a marker");
        assert_eq!(
            cache.get_value(&id, &bounds, 7),
            None,
            "a marker serves nothing"
        );
        cache.put(&id, &bounds, AnswerVersion::from(8u64), &answer(10));
        assert_eq!(
            cache.get_value(&id, &bounds, 8),
            None,
            "a first build under a new version"
        );
        cache.put(&id, &bounds, AnswerVersion::from(8u64), &answer(10));
        assert_eq!(cache.usage(), (1, 10));
        assert_eq!(cache.get_value(&id, &bounds, 8), Some(answer(10)));
    }

    /// An answer serialising to exactly `bytes` bytes (at least 8).
    fn answer(bytes: usize) -> Value {
        let value = json!("x".repeat(bytes - 2));
        assert_eq!(serialised_len(&value), bytes);
        value
    }

    #[test]
    fn an_answer_is_served_under_its_version_and_bounds_only() {
        let cache = StatusCache::default();
        let (id, bounds) = (run(1), query(20));
        keep(&cache, &id, &bounds, 7, &json!({"a": 1}));
        assert_eq!(cache.get_value(&id, &bounds, 7), Some(json!({"a": 1})));
        assert_eq!(cache.get_value(&id, &query(5), 7), None, "other bounds");
        let glob = StatusQuery {
            label_glob: Some("call*".to_owned()),
            ..bounds.clone()
        };
        assert_eq!(cache.get_value(&id, &glob, 7), None, "a label glob");
        assert_eq!(cache.get_value(&run(2), &bounds, 7), None, "another run");
        assert_eq!(cache.get_value(&id, &bounds, 8), None, "a newer version");
        assert_eq!(cache.usage(), (0, 0), "the stale answer is dropped");
        assert_eq!(cache.get_value(&id, &bounds, 7), None, "and stays dropped");
    }

    #[test]
    fn a_new_answer_replaces_the_old_one_and_forget_drops_a_run() {
        let cache = StatusCache::default();
        let id = run(1);
        keep(&cache, &id, &query(20), 1, &answer(10));
        keep(&cache, &id, &query(20), 2, &answer(12));
        keep(&cache, &id, &query(5), 2, &answer(14));
        assert_eq!(cache.usage(), (2, 26));
        assert_eq!(cache.get_value(&id, &query(20), 2), Some(answer(12)));
        cache.forget(&id);
        assert_eq!(cache.usage(), (0, 0));
        assert_eq!(cache.get_value(&id, &query(5), 2), None);
    }

    #[test]
    fn the_entry_limit_holds_at_its_edge_and_evicts_the_least_recently_used() {
        let cache = StatusCache::default();
        for n in 0..MAX_ENTRIES {
            keep(&cache, &run(n), &query(20), 1, &answer(8));
        }
        assert_eq!(cache.usage(), (MAX_ENTRIES, MAX_ENTRIES * 8));
        // Run 0 is used again, so run 1 is now the least recently used.
        assert!(cache.get_value(&run(0), &query(20), 1).is_some());
        keep(&cache, &run(MAX_ENTRIES), &query(20), 1, &answer(8));
        assert_eq!(cache.usage(), (MAX_ENTRIES, MAX_ENTRIES * 8));
        assert!(cache.get_value(&run(1), &query(20), 1).is_none(), "evicted");
        assert!(cache.get_value(&run(0), &query(20), 1).is_some());
        assert!(cache.get_value(&run(MAX_ENTRIES), &query(20), 1).is_some());
    }

    #[test]
    fn the_byte_limits_hold_at_their_edges() {
        let cache = StatusCache::with_limits(Limits {
            entries: 10,
            bytes: 100,
            entry_bytes: 60,
        });
        keep(&cache, &run(1), &query(20), 1, &answer(60));
        keep(&cache, &run(2), &query(20), 1, &answer(40));
        assert_eq!(cache.usage(), (2, 100), "exactly the byte limit");
        keep(&cache, &run(3), &query(20), 1, &answer(61));
        assert_eq!(cache.usage(), (2, 100), "over one entry's share: not kept");
        assert!(cache.get_value(&run(3), &query(20), 1).is_none());
        keep(&cache, &run(3), &query(20), 1, &answer(8));
        assert_eq!(cache.usage(), (2, 48), "the oldest went to make room");
        assert!(cache.get_value(&run(1), &query(20), 1).is_none());
        assert!(cache.get_value(&run(2), &query(20), 1).is_some());
    }

    #[test]
    fn the_real_limits_are_the_documented_ones() {
        let limits = StatusCache::default().limits;
        assert_eq!(
            (limits.entries, limits.bytes, limits.entry_bytes),
            (256, 8 * 1024 * 1024, 1024 * 1024)
        );
        let big = StatusCache::default();
        keep(&big, &run(1), &query(20), 1, &answer(MAX_ENTRY_BYTES));
        assert_eq!(
            big.usage(),
            (1, MAX_ENTRY_BYTES),
            "an answer of exactly the share"
        );
        keep(&big, &run(2), &query(20), 1, &answer(MAX_ENTRY_BYTES + 1));
        assert_eq!(big.usage(), (1, MAX_ENTRY_BYTES), "one byte over it");
    }
}
