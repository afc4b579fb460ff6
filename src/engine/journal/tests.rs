//! Call identity hashes and the replay pool's decisions.

use super::*;

fn row(index: u32, path: &str, hash: &str, outcome: CallOutcome) -> CallRecord {
    CallRecord {
        path: Some(path.into()),
        inputs_hash: Some("in".into()),
        outcome,
        result: (outcome == CallOutcome::Result).then(|| Value::String(format!("r{index}"))),
        ..CallRecord::agent_row(1, index, hash)
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

#[test]
fn a_live_call_with_a_set_aside_identity_runs_as_a_rerun() {
    use crate::model::LiveReason as Shown;
    let kept = row(1, "p1", "h1", CallOutcome::Result);
    let set_aside = row(0, "p0", "h0", CallOutcome::Result);
    let pool = ReplayPool::new(vec![kept], false).with_set_aside(vec![set_aside]);
    assert!(!pool.is_empty());
    let decision = pool.decide(CallKind::Agent, Some("p0"), "h0", Some("in"));
    let ReplayDecision::Live(reason) = decision else {
        panic!("a set-aside row must not replay: {decision:?}");
    };
    assert_eq!(pool.live_reason(reason, "h0", Some("p0")), Shown::Rerun);
    // The same decision for any other identity says what the pool found.
    assert_eq!(
        pool.live_reason(reason, "h9", Some("p9")),
        Shown::NotRecorded
    );
    assert_eq!(
        pool.live_reason(LiveReason::Blocked, "h9", None),
        Shown::FailedBefore
    );
    assert_eq!(
        pool.live_reason(LiveReason::CandidateConsumed, "h9", None),
        Shown::Ambiguous
    );
    // A pool of nothing but set-aside rows still decides, so the rerun is said.
    let only = ReplayPool::new(Vec::new(), false).with_set_aside(vec![row(
        0,
        "p0",
        "h0",
        CallOutcome::Result,
    )]);
    assert!(!only.is_empty());
}

/// Members written one by one in key order hash as the value they make does.
#[test]
fn an_object_written_member_by_member_hashes_as_its_value() {
    let nested =
        serde_json::json!({"z": [3, {"b": null, "a": "é\"\n"}], "a": {"y": 1.5, "x": true}});
    for (image, keep, label) in [
        (None, None, "agent 1"),
        (Some(&nested), Some(true), "le \"label\""),
        (Some(&Value::Null), Some(false), ""),
    ] {
        let mut written = CanonicalObject::new();
        written.scalar("backends", &Some("digest"));
        written.value("images", image);
        written.scalar("keepSession", &keep);
        written.scalar("label", &label);
        written.value("meta", Some(&nested));
        written.value("promptMeta", None);
        let value = serde_json::json!({
            "promptMeta": null, "meta": nested, "label": label, "keepSession": keep,
            "images": image, "backends": "digest",
        });
        assert_eq!(written.hash(), inputs_hash(&value), "{value}");
    }
}
