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
/// `backends`).
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
mod tests {
    use super::*;
    use crate::model::{CallOrigin, Usage};

    fn row(index: u32, path: &str, hash: &str, outcome: CallOutcome) -> CallRecord {
        CallRecord {
            generation: 1,
            index,
            kind: CallKind::Agent,
            hash: hash.into(),
            path: Some(path.into()),
            inputs_hash: Some("in".into()),
            label: None,
            phase: None,
            outcome,
            origin: CallOrigin::Runner,
            result: (outcome == CallOutcome::Result).then(|| Value::String(format!("r{index}"))),
            error: None,
            aborted: false,
            attempts: 1,
            usage: Usage::default(),
            model_requested: None,
            model_resolved: None,
            backend_id: None,
            resolved_cwd: None,
            replay: None,
            session: None,
            settlement_ordinal: u64::from(index),
            superseded_by: None,
            changes: None,
            live_reason: None,
        }
    }

    #[test]
    fn hashes_follow_the_documented_key_order() {
        let identity = AgentIdentity {
            prompt: "hi",
            model: Some("codex"),
            ..AgentIdentity::default()
        };
        let expected = sha256_hex(
            br#"{"prompt":"hi","model":"codex","tier":null,"phase":null,"agentType":null,"agentDef":null,"schema":null}"#,
        );
        assert_eq!(agent_hash(&identity), expected);
        let with_mode = AgentIdentity {
            mode: Some("plan"),
            ..identity.clone()
        };
        assert_ne!(agent_hash(&with_mode), expected);
        let with_effort = AgentIdentity {
            effort: Some("high"),
            ..identity.clone()
        };
        assert_eq!(
            agent_hash(&with_effort),
            sha256_hex(
                br#"{"prompt":"hi","model":"codex","effort":"high","tier":null,"phase":null,"agentType":null,"agentDef":null,"schema":null}"#,
            )
        );
        assert_eq!(
            checkpoint_hash("ok?", "confirm", None),
            sha256_hex(br#"{"promptText":"ok?","kind":"confirm","choices":null}"#)
        );
        assert_eq!(
            canonical_json(&serde_json::json!({"b": 1, "a": {"d": 2, "c": 3}})),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
    }

    #[test]
    fn hashes_are_the_bytes_the_value_trees_gave() {
        // The construction these functions used before they wrote from borrowed fields.
        let tree_hash = |identity: &AgentIdentity<'_>| {
            let mut map = Map::new();
            let text = |v: Option<&str>| v.map_or(Value::Null, |t| Value::String(t.to_owned()));
            map.insert("prompt".into(), Value::String(identity.prompt.to_owned()));
            map.insert("model".into(), text(identity.model));
            if let Some(mode) = identity.mode {
                map.insert("mode".into(), Value::String(mode.to_owned()));
            }
            if !identity.config_options.is_empty() {
                let options: Map<String, Value> = identity.config_options.iter().cloned().collect();
                map.insert("configOptions".into(), Value::Object(options));
            }
            if let Some(effort) = identity.effort {
                map.insert("effort".into(), Value::String(effort.to_owned()));
            }
            map.insert("tier".into(), text(identity.tier));
            map.insert("phase".into(), text(identity.phase));
            map.insert("agentType".into(), text(identity.agent_type));
            map.insert("agentDef".into(), text(identity.agent_definition));
            map.insert(
                "schema".into(),
                identity.schema.cloned().unwrap_or(Value::Null),
            );
            sha256_hex(Value::Object(map).to_string().as_bytes())
        };
        let schema = serde_json::json!({"type": "object", "properties": {"z": {}, "a": [1, 2.5]}});
        let options = vec![
            ("b".to_owned(), serde_json::json!("x")),
            ("a".to_owned(), serde_json::json!(1)),
            ("b".to_owned(), serde_json::json!(null)),
        ];
        let full = AgentIdentity {
            prompt: "quote \" tab \t é \u{1F980} \u{7}",
            model: Some("codex"),
            mode: Some("plan"),
            config_options: &options,
            effort: Some("max"),
            tier: Some("fast"),
            phase: Some("review"),
            agent_type: Some("critic"),
            agent_definition: Some("d1"),
            schema: Some(&schema),
        };
        for identity in [full.clone(), AgentIdentity::default()] {
            assert_eq!(agent_hash(&identity), tree_hash(&identity));
        }
        let sorted_copy = |value: &Value| {
            fn sorted(value: &Value) -> Value {
                match value {
                    Value::Object(map) => {
                        let mut keys: Vec<&String> = map.keys().collect();
                        keys.sort();
                        Value::Object(
                            keys.into_iter()
                                .map(|k| (k.clone(), sorted(&map[k])))
                                .collect(),
                        )
                    }
                    Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
                    other => other.clone(),
                }
            }
            sorted(value).to_string()
        };
        let value = serde_json::json!({
            "z": [{"b": null, "a": true}, -1, 1e300, "\n\"é"], "é": {}, "": [], "A": 0.5,
            "cwd": "/tmp/x y", "images": null,
        });
        assert_eq!(canonical_json(&value), sorted_copy(&value));
        assert_eq!(canonical_json(&serde_json::json!("s")), "\"s\"");
    }

    #[test]
    fn exact_path_hash_replays_once() {
        let mut pool = ReplayPool::new(vec![row(0, "1:1", "h", CallOutcome::Result)], false);
        let decision = pool.decide(CallKind::Agent, Some("1:1"), "h", Some("in"));
        assert_eq!(
            decision,
            ReplayDecision::Replay {
                row: 0,
                match_kind: "path-hash"
            }
        );
        pool.consume(0);
        assert_eq!(
            pool.decide(CallKind::Agent, Some("1:1"), "h", Some("in")),
            ReplayDecision::Live(LiveReason::CandidateConsumed)
        );
        assert_eq!(
            pool.decide(CallKind::Agent, Some("1:1"), "h", Some("other")),
            ReplayDecision::Live(LiveReason::InputsChanged)
        );
    }

    #[test]
    fn null_rows_block_and_spoil_uniqueness() {
        // Same prompt in two thunks: one completed, one null (engine.md scenario 14).
        let pool = ReplayPool::new(
            vec![
                row(0, "2:5", "h", CallOutcome::Result),
                row(1, "3:5", "h", CallOutcome::Null),
            ],
            false,
        );
        assert_eq!(
            pool.decide(CallKind::Agent, Some("2:5"), "h", Some("in")),
            ReplayDecision::Replay {
                row: 0,
                match_kind: "path-hash"
            }
        );
        assert_eq!(
            pool.decide(CallKind::Agent, Some("3:5"), "h", Some("in")),
            ReplayDecision::Live(LiveReason::Blocked)
        );
        // Moved to a new line: two rows share the content, so it is ambiguous.
        assert_eq!(
            pool.decide(CallKind::Agent, Some("9:9"), "h", Some("in")),
            ReplayDecision::Live(LiveReason::AmbiguousContent)
        );
    }

    #[test]
    fn unique_hash_replays_moved_calls() {
        let pool = ReplayPool::new(vec![row(0, "1:1", "h", CallOutcome::Result)], false);
        assert_eq!(
            pool.decide(CallKind::Agent, Some("5:1"), "h", Some("in")),
            ReplayDecision::Replay {
                row: 0,
                match_kind: "unique-hash"
            }
        );
        assert_eq!(
            pool.decide(CallKind::Agent, Some("5:1"), "x", Some("in")),
            ReplayDecision::Live(LiveReason::NotRecorded)
        );
    }

    #[test]
    fn blank_text_never_replays() {
        let mut blank = row(0, "1:1", "h", CallOutcome::Result);
        blank.result = Some(Value::String("  ".into()));
        let pool = ReplayPool::new(vec![blank], false);
        assert_eq!(
            pool.decide(CallKind::Agent, Some("1:1"), "h", Some("in")),
            ReplayDecision::Live(LiveReason::Blocked)
        );
    }

    #[test]
    fn revisions_replay_in_order_only() {
        // Recorded A B C; the revision calls B, A, C: A moved earlier than B runs live.
        let mut pool = ReplayPool::new(
            vec![
                row(0, "1:1", "a", CallOutcome::Result),
                row(1, "2:1", "b", CallOutcome::Result),
                row(2, "3:1", "c", CallOutcome::Result),
            ],
            true,
        );
        let ReplayDecision::Replay { row: b, .. } =
            pool.decide(CallKind::Agent, Some("7:1"), "b", Some("in"))
        else {
            panic!("b should replay");
        };
        pool.consume(b);
        assert_eq!(
            pool.decide(CallKind::Agent, Some("8:1"), "a", Some("in")),
            ReplayDecision::Live(LiveReason::NotRecorded)
        );
        assert!(matches!(
            pool.decide(CallKind::Agent, Some("9:1"), "c", Some("in")),
            ReplayDecision::Replay { row: 2, .. }
        ));
    }

    /// The matching rules as a plain scan of every row, the way they read in engine.md 2.4;
    /// the indexed pool must decide exactly as this does.
    fn decide_by_scan(
        pool: &ReplayPool,
        cursor: Option<usize>,
        kind: CallKind,
        path: Option<&str>,
        hash: &str,
        inputs_hash: Option<&str>,
    ) -> ReplayDecision {
        let eligible = |i: usize| cursor.is_none_or(|cursor| i >= cursor);
        let rows = pool.rows();
        if let Some(path) = path {
            let exact: Vec<usize> = (0..rows.len())
                .filter(|&i| eligible(i))
                .filter(|&i| {
                    rows[i].kind == kind
                        && rows[i].hash == hash
                        && rows[i].path.as_deref() == Some(path)
                })
                .collect();
            match exact.as_slice() {
                [] => {}
                [only] => {
                    let row = &rows[*only];
                    return if ReplayPool::blocks(row) {
                        ReplayDecision::Live(LiveReason::Blocked)
                    } else if row.inputs_hash.as_deref() != inputs_hash {
                        ReplayDecision::Live(LiveReason::InputsChanged)
                    } else if pool.consumed[*only] {
                        ReplayDecision::Live(LiveReason::CandidateConsumed)
                    } else {
                        ReplayDecision::Replay {
                            row: *only,
                            match_kind: "path-hash",
                        }
                    };
                }
                _ => return ReplayDecision::Live(LiveReason::AmbiguousIdentity),
            }
        }
        let same: Vec<usize> = (0..rows.len())
            .filter(|&i| eligible(i))
            .filter(|&i| {
                rows[i].kind == kind
                    && rows[i].hash == hash
                    && rows[i].inputs_hash.as_deref() == inputs_hash
            })
            .collect();
        match same.as_slice() {
            [] => ReplayDecision::Live(LiveReason::NotRecorded),
            [only] if ReplayPool::blocks(&rows[*only]) => ReplayDecision::Live(LiveReason::Blocked),
            [only] if pool.consumed[*only] => ReplayDecision::Live(LiveReason::CandidateConsumed),
            [only] => ReplayDecision::Replay {
                row: *only,
                match_kind: "unique-hash",
            },
            _ => ReplayDecision::Live(LiveReason::AmbiguousContent),
        }
    }

    #[test]
    fn indexed_decisions_equal_a_full_scan_over_thousands_of_rows() {
        // A small deterministic generator, so that identities collide often: repeated
        // prompts, moved lines, changed inputs, null and blank rows, both kinds.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |bound: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % bound
        };
        let outcomes = [
            CallOutcome::Result,
            CallOutcome::Result,
            CallOutcome::Null,
            CallOutcome::Error,
        ];
        let mut rows = Vec::new();
        for index in 0..2_000 {
            let mut record = row(
                index,
                &format!("{}:1", next(400)),
                &format!("h{}", next(1_500)),
                outcomes[next(4) as usize],
            );
            record.inputs_hash = (next(5) != 0).then(|| format!("in{}", next(2)));
            if next(10) == 0 {
                record.path = None;
            }
            if next(20) == 0 {
                record.kind = CallKind::Checkpoint;
            }
            if next(30) == 0 {
                record.result = Some(Value::String(" ".into()));
            }
            rows.push(record);
        }
        for ordered in [false, true] {
            let mut pool = ReplayPool::new(rows.clone(), ordered);
            let mut replayed = 0;
            for step in 0..3_000 {
                // Mostly a recorded call, sometimes moved or with changed inputs, sometimes new;
                // a revision calls them roughly in recorded order, or nothing would replay.
                let position = if ordered {
                    (step * 2 / 3 + next(4) as usize).min(rows.len() - 1)
                } else {
                    next(rows.len() as u64) as usize
                };
                let source = &rows[position];
                let (mut kind, mut path, mut hash, mut inputs) = (
                    source.kind,
                    source.path.clone(),
                    source.hash.clone(),
                    source.inputs_hash.clone(),
                );
                if next(5) == 0 {
                    path = (next(10) != 0).then(|| format!("{}:1", next(420)));
                }
                if next(10) == 0 {
                    inputs = (next(5) != 0).then(|| format!("in{}", next(2)));
                }
                if next(8) == 0 {
                    hash = format!("h{}", next(1_600));
                    kind = if next(20) == 0 {
                        CallKind::Checkpoint
                    } else {
                        CallKind::Agent
                    };
                }
                let expected = decide_by_scan(
                    &pool,
                    pool.ordered_cursor,
                    kind,
                    path.as_deref(),
                    &hash,
                    inputs.as_deref(),
                );
                let decided = pool.decide(kind, path.as_deref(), &hash, inputs.as_deref());
                assert_eq!(decided, expected, "{kind:?} {path:?} {hash} {inputs:?}");
                let scanned: Vec<(u32, u32)> = pool
                    .rows()
                    .iter()
                    .filter(|row| {
                        row.kind == kind
                            && row.hash == hash
                            && (path.is_none() || row.path == path)
                            && ReplayPool::blocks(row)
                    })
                    .map(|row| (row.generation, row.index))
                    .collect();
                assert_eq!(
                    pool.superseded_by_live(kind, path.as_deref(), &hash),
                    scanned
                );
                if let ReplayDecision::Replay { row, .. } = decided {
                    pool.consume(row);
                    replayed += 1;
                }
            }
            // A revision's cursor soon passes most rows (hashes repeat across the pool), so
            // only the unordered pool must replay often; both must decide as the scan does.
            assert!(
                ordered || replayed > 300,
                "the generator should exercise replays, got {replayed}"
            );
        }
    }
}
