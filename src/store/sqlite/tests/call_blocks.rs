//! Call blocks (`call_blocks.rs`): which calls of a group commit become one block, every read
//! answering for blocks what it answers for the same calls as rows, a key recorded only once
//! across rows and blocks, and a damaged block reported, not misread.

use serde_json::json;

use super::*;
use crate::store::contract::checkpoint_call;

/// Generation 1 of the run the tests write: 40 calls, index 7 a checkpoint, index 12 with a
/// result too long for a block, index 3 with a result of `null` and index 4 with no session
/// or result, committed in four groups in a shuffled settlement order, the third group only
/// index 25 (which settled late). Each call's ordinal is its settlement's.
fn generation_one() -> Vec<Vec<CallRecord>> {
    let groups: [Vec<u32>; 4] = [
        vec![3, 0, 2, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        vec![16, 15, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27],
        vec![25],
        (28..=39).rev().collect(),
    ];
    let mut ordinal = 0;
    groups
        .iter()
        .map(|group| {
            group
                .iter()
                .map(|&index| {
                    ordinal += 1;
                    match index {
                        7 => checkpoint_call(1, index, ordinal),
                        3 => CallRecord {
                            result: Some(serde_json::Value::Null),
                            ..call(1, index, ordinal)
                        },
                        4 => CallRecord {
                            result: None,
                            session: None,
                            ..call(1, index, ordinal)
                        },
                        12 => CallRecord {
                            result: Some(json!("x".repeat(5000))),
                            ..call(1, index, ordinal)
                        },
                        _ => call(1, index, ordinal),
                    }
                })
                .collect()
        })
        .collect()
}

/// Generation 2: calls 0 to 9 replayed from generation 1 (each superseding its source) and
/// two live calls, in one group.
fn generation_two() -> (Vec<CallRecord>, Vec<[(u32, u32); 1]>) {
    let calls: Vec<CallRecord> = (0..12)
        .map(|index| CallRecord {
            origin: if index < 10 {
                CallOrigin::JournalReplay
            } else {
                CallOrigin::Runner
            },
            ..call(2, index, 100 + u64::from(index))
        })
        .collect();
    let supersedes = (0..12).map(|index| [(1, index)]).collect();
    (calls, supersedes)
}

/// Writes the run's calls: `grouped` as the groups above (blocks where neighbours settle
/// together), else each call in a commit of its own (rows only).
async fn written(grouped: bool, with_second: bool) -> (tempfile::TempDir, SqliteStore, RunId) {
    let (folder, store, record) = store_with_run().await;
    let id = record.run_id.clone();
    let fence = Fence("token-a");
    for group in generation_one() {
        let writes: Vec<CallWrite<'_>> = group.iter().map(|call| write(call, &[], &[])).collect();
        append(&store, &id, &writes, grouped, fence).await;
    }
    if with_second {
        let (calls, supersedes) = generation_two();
        let writes: Vec<CallWrite<'_>> = calls
            .iter()
            .zip(&supersedes)
            .map(|(call, supersedes)| write(call, &supersedes[..], &[]))
            .collect();
        append(&store, &id, &writes, grouped, fence).await;
    }
    (folder, store, id)
}

async fn append(
    store: &SqliteStore,
    id: &RunId,
    writes: &[CallWrite<'_>],
    grouped: bool,
    fence: Fence<'_>,
) {
    if grouped {
        store.append_calls(id, writes, fence).await.expect("group");
    } else {
        for write in writes {
            store
                .append_call(id, write.clone(), fence)
                .await
                .expect("one call");
        }
    }
}

fn scalar(store: &SqliteStore, sql: &str) -> i64 {
    store
        .connection()
        .query_row(sql, [], |row| row.get(0))
        .expect(sql)
}

/// Every call read of the run, at limits around the blocks' edges.
async fn reads(store: &SqliteStore, id: &RunId) -> String {
    let mut out = vec![
        format!("{:?}", store.calls(id).await.expect("calls")),
        format!("{:?}", store.replay_pool(id).await.expect("replay pool")),
        format!("{:?}", store.latest_calls(id).await.expect("latest")),
        format!(
            "{:?}",
            store.checkpoint_calls(id).await.expect("checkpoints")
        ),
        format!(
            "{:?}",
            store.next_settlement_ordinal(id).await.expect("ordinal")
        ),
    ];
    for limit in [0, 1, 2, 3, 5, 8, 13, 14, 15, 26, 27, 39, 40, 100] {
        out.push(format!(
            "{:?}",
            store.call_tail(id, limit).await.expect("tail")
        ));
        out.push(format!(
            "{:?}",
            store.call_tail_rows(id, limit).await.expect("tail rows")
        ));
        for count in [false, true] {
            out.push(format!(
                "{:?}",
                store
                    .status_call_tail(id, limit, count)
                    .await
                    .expect("status tail")
            ));
        }
    }
    out.join("\n")
}

#[tokio::test]
async fn every_read_answers_for_blocks_what_it_answers_for_rows() {
    for with_second in [false, true] {
        let (_a, blocks, id) = written(true, with_second).await;
        let (_b, rows, same_id) = written(false, with_second).await;
        assert_eq!(id, same_id);
        assert_eq!(scalar(&rows, "SELECT COUNT(*) FROM call_blocks"), 0);
        assert!(scalar(&blocks, "SELECT COUNT(*) FROM call_blocks") > 0);
        let (grouped, apart) = (reads(&blocks, &id).await, reads(&rows, &id).await);
        for (line, (grouped, apart)) in grouped.lines().zip(apart.lines()).enumerate() {
            assert_eq!(
                grouped, apart,
                "read {line}, with generation 2: {with_second}"
            );
        }
        assert_eq!(grouped.lines().count(), apart.lines().count());
    }
}

#[tokio::test]
async fn neighbours_of_a_group_are_blocks_and_the_rest_rows() {
    let (_folder, store, _id) = written(true, true).await;
    let connection = store.connection();
    let blocks: Vec<(i64, i64)> = connection
        .prepare(
            "SELECT first_key & 1048575, block_key & 1048575 FROM call_blocks ORDER BY block_key",
        )
        .expect("prepare")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("blocks");
    // Generation 1: 7 (a checkpoint) and 12 (too long) are rows and cut the first group; 25
    // settled alone and cuts the second. Generation 2: one block of its twelve.
    assert_eq!(
        blocks,
        [
            (0, 6),
            (8, 11),
            (13, 14),
            (15, 24),
            (26, 27),
            (28, 39),
            (0, 11)
        ]
    );
    let rows: Vec<i64> = connection
        .prepare("SELECT call_index FROM calls ORDER BY call_key")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(rows, [7, 12, 25]);
}

#[tokio::test]
async fn a_group_longer_than_a_block_is_cut_into_blocks() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let calls: Vec<CallRecord> = (0..300)
        .map(|index| call(1, index, u64::from(index)))
        .collect();
    let writes: Vec<CallWrite<'_>> = calls.iter().map(|call| write(call, &[], &[])).collect();
    store
        .append_calls(id, &writes, Fence("token-a"))
        .await
        .expect("group");
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM call_blocks"),
        2,
        "{} entries, then the rest",
        crate::store::sqlite::call_blocks::MAX_ENTRIES
    );
    assert_eq!(store.calls(id).await.expect("calls"), calls);
    assert_eq!(store.call_tail(id, 3).await.expect("tail").total, 300);
}

#[tokio::test]
async fn a_key_already_recorded_is_refused_and_nothing_is_stored() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let (a, b, c) = (call(1, 4, 1), call(1, 5, 2), call(1, 6, 3));
    store
        .append_call(id, write(&b, &[], &[]), fence)
        .await
        .expect("a row");
    let over_row = store
        .append_calls(
            id,
            &[
                write(&a, &[], &[]),
                write(&b, &[], &[]),
                write(&c, &[], &[]),
            ],
            fence,
        )
        .await;
    match over_row {
        Err(StoreError::Io(message)) => assert!(
            message.contains("call 5 of generation 1 is already recorded"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        store.calls(id).await.expect("calls"),
        std::slice::from_ref(&b)
    );

    let (d, e) = (call(1, 8, 4), call(1, 9, 5));
    store
        .append_calls(id, &[write(&d, &[], &[]), write(&e, &[], &[])], fence)
        .await
        .expect("a block");
    for (again, named) in [
        (vec![call(1, 9, 6)], "already recorded"),
        (
            vec![call(1, 7, 6), call(1, 8, 7)],
            "call 8 of generation 1 is already recorded",
        ),
        (
            vec![call(1, 9, 6), call(1, 10, 7)],
            "call 9 of generation 1 is already recorded",
        ),
    ] {
        let writes: Vec<CallWrite<'_>> = again.iter().map(|call| write(call, &[], &[])).collect();
        match store.append_calls(id, &writes, fence).await {
            Err(StoreError::Io(message)) => assert!(message.contains(named), "{message}"),
            other => panic!("expected a refusal naming {named}, got {other:?}"),
        }
    }
    assert_eq!(store.calls(id).await.expect("calls"), [b, d, e]);
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM call_blocks"), 1);
}

#[tokio::test]
async fn a_call_in_a_block_is_superseded_and_deleting_the_run_deletes_its_blocks() {
    let (_folder, store, id) = written(true, false).await;
    let fence = Fence("token-a");
    store
        .set_aside_calls(&id, &[(1, 3), (1, 20)], 2, fence)
        .await
        .expect("set aside");
    let missing = store.set_aside_calls(&id, &[(1, 40)], 2, fence).await;
    assert!(
        matches!(&missing, Err(StoreError::Io(message)) if message.contains("call 40 of generation 1 to supersede does not exist")),
        "{missing:?}"
    );
    let calls = store.calls(&id).await.expect("calls");
    let superseded: Vec<u32> = calls
        .iter()
        .filter(|call| call.superseded_by == Some(2))
        .map(|call| call.index)
        .collect();
    assert_eq!(superseded, [3, 20]);
    let pool = store.replay_pool(&id).await.expect("pool");
    assert_eq!(pool.len(), 38);
    assert!(pool.iter().all(|call| ![3, 20].contains(&call.index)));

    store.delete_run(&id).await.expect("delete");
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM call_blocks"), 0);
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM calls"), 0);
}

#[tokio::test]
async fn a_damaged_block_is_reported_naming_it() {
    let (_folder, store, id) = written(true, false).await;
    store
        .connection()
        .execute(
            "UPDATE call_blocks SET body = x'28b52ffd00' WHERE first_key & 1048575 = 15",
            [],
        )
        .expect("damage");
    match store.calls(&id).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("table call_blocks"), "{message}");
            assert!(message.contains(id.as_str()), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The tail reads the newest blocks only, and stops before the damaged one.
    let tail = store.call_tail(&id, 5).await.expect("tail");
    let indexes: Vec<u32> = tail.calls.iter().map(|call| call.index).collect();
    assert_eq!(indexes, [35, 36, 37, 38, 39]);
}
