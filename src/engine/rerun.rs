//! Rerunning chosen calls of a run: which recorded rows a resume sets aside so that those
//! calls run live again, while the rest of the run replays by content (engine.md, "Rerun").
//!
//! A target names a call by its index or every call with a label. It is looked up among the
//! run's replay candidates (the rows no later generation consumed), the newest row per
//! index, which is what `status` lists. Every candidate with the same identity is set aside
//! too, so no older copy of the answer can replay in its place. Calls inside a nested
//! `workflow()` have no rows of their own (they are not journaled), so they cannot be named.
//!
//! Pure: the manager reads the rows and writes the set-aside marks.

use std::collections::{BTreeMap, HashSet};

use crate::model::{CallKind, CallRecord};

/// The most targets one resume may name.
pub const MAX_TARGETS: usize = 256;
/// The longest label a target may give: the longest a call can have.
pub const MAX_LABEL_BYTES: usize = crate::engine::script::NAME_MAX_BYTES;

/// A call a resume redoes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RerunTarget {
    /// The call with this index (`status` lists it).
    Index(u32),
    /// Every call with this label.
    Label(String),
}

impl RerunTarget {
    /// The target as the caller wrote it, for messages and the resume's digest.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            RerunTarget::Index(index) => (*index).into(),
            RerunTarget::Label(label) => label.as_str().into(),
        }
    }
}

/// The rows a resume set aside as its acknowledgement lists them (`continuation.rerun`,
/// `[{generation, callIndex, label}]`), for a line: `0 (draft), 3`.
pub fn describe(set_aside: &[serde_json::Value]) -> String {
    set_aside
        .iter()
        .map(|row| match row["label"].as_str() {
            Some(label) => format!("{} ({label})", row["callIndex"]),
            None => row["callIndex"].to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate rows `targets` name, each with every candidate of its identity, ascending
/// by `(generation, index)`. Errors say which target names nothing and what can be named.
pub fn select(pool: &[CallRecord], targets: &[RerunTarget]) -> Result<Vec<CallRecord>, String> {
    if targets.is_empty() {
        return Err("rerun must name at least one call".into());
    }
    if targets.len() > MAX_TARGETS {
        return Err(format!(
            "rerun names {} calls; at most {MAX_TARGETS} can be named",
            targets.len()
        ));
    }
    let newest = newest_by_index(pool);
    let mut chosen: Vec<&CallRecord> = Vec::new();
    for target in targets {
        match target {
            RerunTarget::Index(index) => chosen.push(by_index(&newest, *index)?),
            RerunTarget::Label(label) => chosen.extend(by_label(&newest, label)?),
        }
    }
    // One set of identities, so a label that names thousands of calls costs one pass.
    let identities: HashSet<(CallKind, &str, Option<&str>)> = chosen
        .iter()
        .map(|row| (row.kind, row.hash.as_str(), row.path.as_deref()))
        .collect();
    let mut set_aside: Vec<CallRecord> = pool
        .iter()
        .filter(|row| identities.contains(&(row.kind, row.hash.as_str(), row.path.as_deref())))
        .cloned()
        .collect();
    set_aside.sort_by_key(|row| (row.generation, row.index));
    set_aside.dedup_by_key(|row| (row.generation, row.index));
    Ok(set_aside)
}

/// The newest candidate of each index: the call `status` shows under that index.
fn newest_by_index(pool: &[CallRecord]) -> BTreeMap<u32, &CallRecord> {
    let mut newest: BTreeMap<u32, &CallRecord> = BTreeMap::new();
    for row in pool {
        let entry = newest.entry(row.index).or_insert(row);
        if row.generation > entry.generation {
            *entry = row;
        }
    }
    newest
}

fn by_index<'a>(
    newest: &BTreeMap<u32, &'a CallRecord>,
    index: u32,
) -> Result<&'a CallRecord, String> {
    let Some(row) = newest.get(&index) else {
        let range = match (newest.keys().next(), newest.keys().next_back()) {
            (Some(first), Some(last)) => format!("the run's recorded calls are {first} to {last}"),
            _ => "the run has no recorded calls".to_owned(),
        };
        return Err(format!(
            "call {index} has no recorded answer to rerun: {range} (status lists them; calls \
             inside a nested workflow() are not journaled on their own and cannot be rerun)"
        ));
    };
    if row.kind == CallKind::Checkpoint {
        return Err(format!(
            "call {index} is a checkpoint; rerun redoes agent calls (a checkpoint's answer \
             stands once given)"
        ));
    }
    Ok(row)
}

fn by_label<'a>(
    newest: &BTreeMap<u32, &'a CallRecord>,
    label: &str,
) -> Result<Vec<&'a CallRecord>, String> {
    let matching: Vec<&CallRecord> = newest
        .values()
        .copied()
        .filter(|row| row.kind == CallKind::Agent && row.label.as_deref() == Some(label))
        .collect();
    if !matching.is_empty() {
        return Ok(matching);
    }
    let mut labels: Vec<&str> = newest
        .values()
        .filter(|row| row.kind == CallKind::Agent)
        .filter_map(|row| row.label.as_deref())
        .collect();
    labels.sort_unstable();
    labels.dedup();
    let shown = labels.len().min(10);
    let more = if labels.len() > shown {
        format!(" and {} more", labels.len() - shown)
    } else {
        String::new()
    };
    Err(format!(
        "no recorded agent call is labelled {label:?} (labels: {}{more}; calls inside a nested \
         workflow() are not journaled on their own and cannot be rerun)",
        if shown == 0 {
            "none".to_owned()
        } else {
            labels[..shown]
                .iter()
                .map(|l| format!("{l:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(generation: u32, index: u32, label: &str, hash: &str) -> CallRecord {
        CallRecord {
            path: Some(format!("p{index}")),
            inputs_hash: Some("in".into()),
            label: Some(label.into()),
            result: Some("r".into()),
            ..CallRecord::agent_row(generation, index, hash)
        }
    }

    fn keys(rows: &[CallRecord]) -> Vec<(u32, u32)> {
        rows.iter().map(|r| (r.generation, r.index)).collect()
    }

    #[test]
    fn an_index_names_the_newest_row_and_every_copy_of_its_identity() {
        // Generation 2 replayed call 0 and re-ran call 1 with a changed prompt; generation
        // 1's call 1 stays a candidate, and so does an older row with call 0's identity.
        let mut older_copy = row(1, 5, "a", "a");
        older_copy.path = Some("p0".into());
        let pool = vec![
            row(1, 1, "b", "old-b"),
            older_copy,
            row(2, 0, "a", "a"),
            row(2, 1, "b", "new-b"),
        ];
        assert_eq!(
            keys(&select(&pool, &[RerunTarget::Index(1)]).unwrap()),
            [(2, 1)]
        );
        assert_eq!(
            keys(&select(&pool, &[RerunTarget::Index(0)]).unwrap()),
            [(1, 5), (2, 0)]
        );
    }

    #[test]
    fn a_label_names_every_call_with_it() {
        let pool = vec![
            row(1, 0, "r", "x"),
            row(1, 1, "r", "y"),
            row(1, 2, "s", "z"),
        ];
        let chosen = select(
            &pool,
            &[RerunTarget::Label("r".into()), RerunTarget::Index(1)],
        )
        .unwrap();
        assert_eq!(keys(&chosen), [(1, 0), (1, 1)]);
    }

    #[test]
    fn a_label_of_ten_thousand_calls_sets_each_aside_once() {
        let pool: Vec<CallRecord> = (0..10_000)
            .map(|index| row(1, index, "reviewer", &format!("h{index}")))
            .collect();
        let chosen = select(
            &pool,
            &[RerunTarget::Label("reviewer".into()), RerunTarget::Index(7)],
        )
        .unwrap();
        assert_eq!(chosen.len(), 10_000);
    }

    #[test]
    fn unknown_targets_and_checkpoints_are_refused_by_name() {
        let mut checkpoint = row(1, 1, "ok?", "c");
        checkpoint.kind = CallKind::Checkpoint;
        let pool = vec![row(1, 0, "writer", "w"), checkpoint];
        let missing = select(&pool, &[RerunTarget::Index(7)]).unwrap_err();
        assert!(
            missing.contains("call 7") && missing.contains("0 to 1"),
            "{missing}"
        );
        let label = select(&pool, &[RerunTarget::Label("reader".into())]).unwrap_err();
        assert!(
            label.contains("\"reader\"") && label.contains("\"writer\""),
            "{label}"
        );
        assert!(label.contains("nested workflow()"), "{label}");
        let checkpoint = select(&pool, &[RerunTarget::Index(1)]).unwrap_err();
        assert!(checkpoint.contains("checkpoint"), "{checkpoint}");
        assert!(select(&pool, &[]).unwrap_err().contains("at least one"));
        let many = vec![RerunTarget::Index(0); MAX_TARGETS + 1];
        assert!(select(&pool, &many).unwrap_err().contains("at most 256"));
        assert_eq!(
            select(&pool, &vec![RerunTarget::Index(0); MAX_TARGETS])
                .unwrap()
                .len(),
            1
        );
    }
}
