//! Call identity and replay (engine.md 2.1 and 2.4).
//!
//! Every call gets an identity hash (what it asks), an inputs hash (where and how it runs)
//! and a path (the script frames it was called from). On resume, each call is matched
//! against the run's replay pool, the recorded rows no later generation replaced: a match
//! replays the recorded result with no agent call; anything else runs live. Matching is by
//! identity, not index, because `pipeline` stages run in completion order.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

use crate::model::{CallKind, CallOutcome, CallRecord};
use crate::util::sha256_hex;

/// The parts of an agent call that define what it asks.
#[derive(Clone, Debug, Default)]
pub(crate) struct AgentIdentity<'a> {
    pub prompt: &'a str,
    pub model: Option<&'a str>,
    pub mode: Option<&'a str>,
    /// Non-empty config options, in ascending id order.
    pub config_options: &'a [(String, Value)],
    /// The portable reasoning level, when the call sets one.
    pub effort: Option<&'a str>,
    pub tier: Option<&'a str>,
    pub phase: Option<&'a str>,
    pub agent_type: Option<&'a str>,
    /// The agent definition's text digest, when `agentType` is set.
    pub agent_definition: Option<&'a str>,
    pub schema: Option<&'a Value>,
}

/// `hash` = sha256 of `JSON.stringify({prompt, model, [mode], [configOptions], [effort], tier,
/// phase, agentType, agentDef, schema})` in that key order; absent values are `null`, and
/// `mode`, `configOptions` and `effort` are left out when unset.
pub(crate) fn agent_hash(identity: &AgentIdentity<'_>) -> String {
    /// The hashed object, serialized straight from borrowed fields in the key order above
    /// (the bytes `JSON.stringify` gives), instead of from a `Value` tree of copies.
    #[derive(serde::Serialize)]
    struct Hashed<'a> {
        prompt: &'a str,
        model: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mode: Option<&'a str>,
        #[serde(rename = "configOptions", skip_serializing_if = "Option::is_none")]
        config_options: Option<Map<String, Value>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        effort: Option<&'a str>,
        tier: Option<&'a str>,
        phase: Option<&'a str>,
        #[serde(rename = "agentType")]
        agent_type: Option<&'a str>,
        #[serde(rename = "agentDef")]
        agent_definition: Option<&'a str>,
        schema: Option<&'a Value>,
    }
    let hashed = Hashed {
        prompt: identity.prompt,
        model: identity.model,
        mode: identity.mode,
        // Collected as before, so a repeated id keeps its first place and its last value.
        config_options: (!identity.config_options.is_empty())
            .then(|| identity.config_options.iter().cloned().collect()),
        effort: identity.effort,
        tier: identity.tier,
        phase: identity.phase,
        agent_type: identity.agent_type,
        agent_definition: identity.agent_definition,
        schema: identity.schema,
    };
    sha256_hex(&serde_json::to_vec(&hashed).unwrap_or_default())
}

/// `inputsHash` = sha256 of the key-sorted canonical JSON of the call's operational inputs
/// (`cwd`, `isolation`, `keepSession`, `images`, `mcpServers`, `meta`, `promptMeta`, `label`,
/// `backends`), as a value; the driver writes the same bytes with [`CanonicalObject`].
#[cfg(test)]
pub(crate) fn inputs_hash(inputs: &Value) -> String {
    sha256_hex(canonical_json(inputs).as_bytes())
}

/// Checkpoint `hash` = sha256 of `JSON.stringify({promptText, kind, choices})`.
pub(crate) fn checkpoint_hash(prompt: &str, kind: &str, choices: Option<&Value>) -> String {
    let mut map = Map::new();
    map.insert("promptText".into(), Value::String(prompt.to_owned()));
    map.insert("kind".into(), Value::String(kind.to_owned()));
    map.insert("choices".into(), choices.cloned().unwrap_or(Value::Null));
    sha256_hex(Value::Object(map).to_string().as_bytes())
}

/// An object written as [`canonical_json`] writes one, member by member, for a caller that
/// has its members at hand in ascending key order: no map is built only to be sorted.
pub(crate) struct CanonicalObject {
    out: Vec<u8>,
    #[cfg(debug_assertions)]
    last: Option<&'static str>,
}

impl CanonicalObject {
    pub(crate) fn new() -> CanonicalObject {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        CanonicalObject {
            out,
            #[cfg(debug_assertions)]
            last: None,
        }
    }

    fn key(&mut self, key: &'static str) {
        #[cfg(debug_assertions)]
        {
            assert!(
                self.last.is_none_or(|last| last < key),
                "{key} out of order"
            );
            self.last = Some(key);
        }
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        write_scalar(&key, &mut self.out);
        self.out.push(b':');
    }

    /// A string, number, boolean or null member (an option of one: `None` is `null`).
    pub(crate) fn scalar(&mut self, key: &'static str, value: &impl serde::Serialize) {
        self.key(key);
        write_scalar(value, &mut self.out);
    }

    /// A member of any JSON value, its objects' keys sorted; `None` is `null`.
    pub(crate) fn value(&mut self, key: &'static str, value: Option<&Value>) {
        self.key(key);
        write_canonical(value.unwrap_or(&Value::Null), &mut self.out);
    }

    /// The sha256 of the object's bytes, as [`inputs_hash`] hashes a value.
    pub(crate) fn hash(mut self) -> String {
        self.out.push(b'}');
        sha256_hex(&self.out)
    }
}

/// JSON with every object's keys sorted, recursively, and no whitespace.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only whole JSON tokens and the structural bytes are written, so this is UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Writes `value` as [`canonical_json`] does, without building a sorted copy of it.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (position, (key, member)) in members.into_iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                write_scalar(&key.as_str(), out);
                out.push(b':');
                write_canonical(member, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// A string, number, boolean or null in serde_json's compact form (its escaping included).
fn write_scalar(value: &impl serde::Serialize, out: &mut Vec<u8>) {
    // Writing to a `Vec` cannot fail, and neither can serializing a scalar.
    let _ = serde_json::to_writer(out, value);
}

/// Why a call ran live instead of replaying (kept in logs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LiveReason {
    NotRecorded,
    AmbiguousIdentity,
    AmbiguousContent,
    InputsChanged,
    CandidateConsumed,
    /// The only match is a null/error row, or blank schema-less text.
    Blocked,
}

/// The pool's answer for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReplayDecision {
    /// Replay pool row `row`; `match_kind` is `path-hash` or `unique-hash`.
    Replay {
        row: usize,
        match_kind: &'static str,
    },
    Live(LiveReason),
}

/// The rows a resume may replay, with their consumption state.
///
/// Rows are indexed once by the identities `decide` matches on, so each decision looks at the
/// few rows that share the call's identity instead of scanning the whole pool: a resume of a
/// 10,000-call journal is linear, not quadratic.
#[derive(Debug, Default)]
pub(crate) struct ReplayPool {
    rows: Vec<CallRecord>,
    consumed: Vec<bool>,
    /// For a script revision: only rows at or after this position (in recorded order) are
    /// eligible, so calls the revision moved earlier run live (engine.md Decision 4).
    ordered_cursor: Option<usize>,
    /// Row positions, ascending, by a digest of `(kind, hash, path)` (rows with a path only).
    by_path: HashMap<u64, Vec<usize>>,
    /// Row positions, ascending, by a digest of `(kind, hash, inputs_hash)`.
    by_inputs: HashMap<u64, Vec<usize>>,
    /// Row positions, ascending, by a digest of `hash` alone.
    by_hash: HashMap<u64, Vec<usize>>,
    /// The rows this resume set aside to rerun (`engine::rerun`), no longer in `rows`.
    set_aside: Vec<CallRecord>,
}

/// A bucket key. Different identities may share a digest, so every lookup still compares
/// the rows it finds with the call; the digest only narrows the search.
fn digest(parts: &[Option<&str>]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

impl ReplayPool {
    /// A pool over `rows` (ordered by generation, then index). `ordered` is set for revisions.
    pub(crate) fn new(rows: Vec<CallRecord>, ordered: bool) -> ReplayPool {
        let consumed = vec![false; rows.len()];
        let mut by_path: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut by_inputs: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
        for (position, row) in rows.iter().enumerate() {
            let kind = Some(row.kind.as_str());
            let hash = Some(row.hash.as_str());
            if let Some(path) = row.path.as_deref() {
                by_path
                    .entry(digest(&[kind, hash, Some(path)]))
                    .or_default()
                    .push(position);
            }
            by_inputs
                .entry(digest(&[kind, hash, row.inputs_hash.as_deref()]))
                .or_default()
                .push(position);
            by_hash.entry(digest(&[hash])).or_default().push(position);
        }
        ReplayPool {
            rows,
            consumed,
            ordered_cursor: ordered.then_some(0),
            by_path,
            by_inputs,
            by_hash,
            set_aside: Vec::new(),
        }
    }

    /// The pool of a resume that reruns `set_aside` (rows no longer in the pool): a call
    /// with one of their identities that runs live says it runs as a rerun.
    pub(crate) fn with_set_aside(mut self, set_aside: Vec<CallRecord>) -> ReplayPool {
        self.set_aside = set_aside;
        self
    }

    /// The rows this resume set aside to rerun.
    pub(crate) fn set_aside(&self) -> &[CallRecord] {
        &self.set_aside
    }

    /// Whether a call may replay or rerun anything: a first generation's pool is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.set_aside.is_empty()
    }

    /// What a user reads of a live decision for the call `(hash, path)`.
    pub(crate) fn live_reason(
        &self,
        reason: LiveReason,
        hash: &str,
        path: Option<&str>,
    ) -> crate::model::LiveReason {
        use crate::model::LiveReason as Shown;
        let rerun = self
            .set_aside
            .iter()
            .any(|row| row.hash == hash && row.path.as_deref() == path);
        match reason {
            _ if rerun => Shown::Rerun,
            LiveReason::NotRecorded => Shown::NotRecorded,
            LiveReason::InputsChanged => Shown::InputsChanged,
            LiveReason::Blocked => Shown::FailedBefore,
            LiveReason::AmbiguousIdentity
            | LiveReason::AmbiguousContent
            | LiveReason::CandidateConsumed => Shown::Ambiguous,
        }
    }

    #[cfg(test)]
    pub(crate) fn rows(&self) -> &[CallRecord] {
        &self.rows
    }

    pub(crate) fn row(&self, row: usize) -> &CallRecord {
        &self.rows[row]
    }

    /// The rows whose `hash` is `hash`, in pool order.
    pub(crate) fn rows_with_hash<'a>(
        &'a self,
        hash: &'a str,
    ) -> impl Iterator<Item = &'a CallRecord> {
        self.by_hash
            .get(&digest(&[Some(hash)]))
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|&position| &self.rows[position])
            .filter(move |row| row.hash == hash)
    }

    /// The eligible positions of a bucket that satisfy `matches`: none, one, or more than one
    /// (then the first two), which is all `decide` needs to know.
    fn eligible_matches(
        &self,
        bucket: Option<&Vec<usize>>,
        matches: impl Fn(&CallRecord) -> bool,
    ) -> Vec<usize> {
        let bucket = bucket.map_or(&[][..], Vec::as_slice);
        // Buckets ascend, so the eligible positions are a suffix.
        let first = self.ordered_cursor.map_or(0, |cursor| {
            bucket.partition_point(|&position| position < cursor)
        });
        bucket[first..]
            .iter()
            .copied()
            .filter(|&position| matches(&self.rows[position]))
            .take(2)
            .collect()
    }

    fn blocks(record: &CallRecord) -> bool {
        match record.outcome {
            CallOutcome::Result => match &record.result {
                Some(Value::String(text)) => text.trim().is_empty(),
                Some(_) => false,
                None => true,
            },
            CallOutcome::Null | CallOutcome::Error => true,
        }
    }

    /// Decides whether a call replays, by the rules of engine.md 2.4.
    pub(crate) fn decide(
        &self,
        kind: CallKind,
        path: Option<&str>,
        hash: &str,
        inputs_hash: Option<&str>,
    ) -> ReplayDecision {
        let kind_name = Some(kind.as_str());
        if let Some(path) = path {
            let exact = self.eligible_matches(
                self.by_path
                    .get(&digest(&[kind_name, Some(hash), Some(path)])),
                |row| row.kind == kind && row.hash == hash && row.path.as_deref() == Some(path),
            );
            match exact.as_slice() {
                [] => {}
                [only] => {
                    let row = &self.rows[*only];
                    if Self::blocks(row) {
                        return ReplayDecision::Live(LiveReason::Blocked);
                    }
                    if row.inputs_hash.as_deref() != inputs_hash {
                        return ReplayDecision::Live(LiveReason::InputsChanged);
                    }
                    if self.consumed[*only] {
                        return ReplayDecision::Live(LiveReason::CandidateConsumed);
                    }
                    return ReplayDecision::Replay {
                        row: *only,
                        match_kind: "path-hash",
                    };
                }
                _ => return ReplayDecision::Live(LiveReason::AmbiguousIdentity),
            }
        }
        let same = self.eligible_matches(
            self.by_inputs
                .get(&digest(&[kind_name, Some(hash), inputs_hash])),
            |row| row.kind == kind && row.hash == hash && row.inputs_hash.as_deref() == inputs_hash,
        );
        match same.as_slice() {
            [] => ReplayDecision::Live(LiveReason::NotRecorded),
            [only] => {
                if Self::blocks(&self.rows[*only]) {
                    ReplayDecision::Live(LiveReason::Blocked)
                } else if self.consumed[*only] {
                    ReplayDecision::Live(LiveReason::CandidateConsumed)
                } else {
                    ReplayDecision::Replay {
                        row: *only,
                        match_kind: "unique-hash",
                    }
                }
            }
            _ => ReplayDecision::Live(LiveReason::AmbiguousContent),
        }
    }

    /// Marks a row replayed; with ordering, later calls may only match rows after it.
    pub(crate) fn consume(&mut self, row: usize) {
        self.consumed[row] = true;
        if let Some(cursor) = self.ordered_cursor.as_mut() {
            *cursor = (*cursor).max(row + 1);
        }
    }

    /// Rows of the same identity a live call re-executes: they stop being candidates.
    pub(crate) fn superseded_by_live(
        &self,
        kind: CallKind,
        path: Option<&str>,
        hash: &str,
    ) -> Vec<(u32, u32)> {
        self.rows_with_hash(hash)
            .filter(|row| {
                row.kind == kind
                    && (path.is_none() || row.path.as_deref() == path)
                    && Self::blocks(row)
            })
            .map(|row| (row.generation, row.index))
            .collect()
    }
}

#[cfg(test)]
mod tests;
