//! Contract rules for the folder server's queue of starts: order, the bound, one winner per
//! claim across handles, a claim that lapses, removal and ending.

use serde_json::json;

use super::*;
use crate::model::{Enqueued, QueueOutcome, QueueStats, QueuedStart, QueuedState};

fn start(id: &str, at: i64) -> QueuedStart {
    QueuedStart {
        run_id: run_id(id),
        workflow: "review".to_owned(),
        caller: "session:a".to_owned(),
        arguments: json!({"pr": id}),
        enqueued_at: at,
    }
}

async fn position(store: &Arc<dyn Store>, id: &str) -> Option<QueuedState> {
    store
        .queued(&run_id(id))
        .await
        .expect("read the entry")
        .map(|entry| entry.state)
}

/// Entries keep their order and their content; the bound counts waiting entries (claimed
/// ones included) and a full queue keeps nothing; a taken id is refused.
pub async fn the_queue_keeps_order_and_its_bound<B: Backend>(backend: &B) {
    let data = backend.create().await;
    let store = backend.open(&data).await;
    assert_eq!(
        store.queue_stats().await.expect("stats"),
        QueueStats::default()
    );
    for (n, id) in ["q-aaaaa1", "q-aaaaa2", "q-aaaaa3"].iter().enumerate() {
        let at = store
            .enqueue(&start(id, 100 + n as i64), 3)
            .await
            .expect("enqueue");
        assert_eq!(at, Enqueued::At(n as u64 + 1));
    }
    assert_eq!(
        store
            .enqueue(&start("q-aaaaa4", 200), 3)
            .await
            .expect("full"),
        Enqueued::Full(3)
    );
    assert_eq!(
        position(&store, "q-aaaaa4").await,
        None,
        "a full queue keeps nothing"
    );
    assert!(matches!(
        store.enqueue(&start("q-aaaaa1", 300), 10).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let entry = store
        .queued(&run_id("q-aaaaa2"))
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(entry.start, start("q-aaaaa2", 101));
    assert_eq!(entry.state, QueuedState::Waiting { position: 2 });
    assert_eq!(
        store.queue_stats().await.expect("stats"),
        QueueStats {
            length: 3,
            oldest_enqueued_at: Some(100)
        }
    );

    // A claimed entry still counts against the bound; it is starting, and the others move
    // up.
    let head = store.claim_queued("r1", 1_000, 2_000).await.expect("claim");
    assert_eq!(head.map(|s| s.run_id), Some(run_id("q-aaaaa1")));
    assert_eq!(
        store
            .enqueue(&start("q-aaaaa4", 200), 3)
            .await
            .expect("still full"),
        Enqueued::Full(3)
    );
    assert_eq!(
        position(&store, "q-aaaaa1").await,
        Some(QueuedState::Starting)
    );
    assert_eq!(
        position(&store, "q-aaaaa3").await,
        Some(QueuedState::Waiting { position: 2 })
    );

    // Removing the head (its run was admitted) frees its place against the bound.
    assert_eq!(
        store
            .remove_queued(&run_id("q-aaaaa1"))
            .await
            .expect("remove"),
        None
    );
    assert_eq!(
        position(&store, "q-aaaaa3").await,
        Some(QueuedState::Waiting { position: 2 })
    );
    assert_eq!(
        store
            .enqueue(&start("q-aaaaa4", 200), 3)
            .await
            .expect("room"),
        Enqueued::At(3)
    );
}

/// Claims go to the oldest unclaimed entry, one winner each across handles; a claim given
/// back or past its moment is claimed again; an ended entry is never claimed.
pub async fn claims_take_the_head_once_each<B: Backend>(backend: &B) {
    let data = backend.create().await;
    let store = backend.open(&data).await;
    let other = backend.open(&data).await;
    for (n, id) in ["q-bbbbb1", "q-bbbbb2", "q-bbbbb3"].iter().enumerate() {
        store
            .enqueue(&start(id, n as i64), 10)
            .await
            .expect("enqueue");
    }
    let claim = |store: Arc<dyn Store>, claimer: &'static str| {
        tokio::spawn(async move {
            let claimed = store
                .claim_queued(claimer, 1_000, 5_000)
                .await
                .expect("claim");
            (claimer, claimed.expect("an entry").run_id.to_string())
        })
    };
    let (first, second) = tokio::join!(claim(store.clone(), "r1"), claim(other.clone(), "r2"));
    let mut won = [first.expect("claim task"), second.expect("claim task")];
    won.sort_by(|a, b| a.1.cmp(&b.1));
    let ids: Vec<&str> = won.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["q-bbbbb1", "q-bbbbb2"],
        "two claimers get the two oldest, once each"
    );
    let holder_of_second = won[1].0;

    // Ended entries are skipped, and a claim given back waits again at its place.
    assert!(
        store
            .end_queued(
                &run_id("q-bbbbb3"),
                QueueOutcome::Canceled,
                "canceled by its owner",
                1_100
            )
            .await
            .expect("end")
    );
    assert!(
        !store
            .end_queued(&run_id("q-bbbbb3"), QueueOutcome::Failed, "again", 1_200)
            .await
            .expect("end twice"),
        "an ended entry ends once"
    );
    assert_eq!(
        store.claim_queued("r3", 1_000, 5_000).await.expect("claim"),
        None
    );
    store
        .unclaim_queued(&run_id("q-bbbbb2"), "someone-else")
        .await
        .expect("unclaim");
    assert_eq!(
        store.claim_queued("r3", 1_000, 5_000).await.expect("claim"),
        None
    );
    store
        .unclaim_queued(&run_id("q-bbbbb2"), holder_of_second)
        .await
        .expect("unclaim");
    let again = store.claim_queued("r3", 1_000, 5_000).await.expect("claim");
    assert_eq!(again.map(|s| s.run_id), Some(run_id("q-bbbbb2")));

    // A claim past its moment (its replica died) is taken by the next claimer.
    let lapsed = other.claim_queued("r4", 5_001, 9_000).await.expect("claim");
    assert_eq!(lapsed.map(|s| s.run_id), Some(run_id("q-bbbbb1")));

    ended_entries_tell_their_remover_and_are_pruned(&store).await;
}

/// The end of [`claims_take_the_head_once_each`]: `q-bbbbb1` is claimed, `q-bbbbb3` was
/// canceled at 1,100 and `q-bbbbb2` waits, claimed.
async fn ended_entries_tell_their_remover_and_are_pruned(store: &Arc<dyn Store>) {
    // An entry ended while it was being started tells its remover so.
    assert!(
        store
            .end_queued(
                &run_id("q-bbbbb1"),
                QueueOutcome::Canceled,
                "canceled",
                6_000
            )
            .await
            .expect("end")
    );
    assert_eq!(
        store
            .remove_queued(&run_id("q-bbbbb1"))
            .await
            .expect("remove"),
        Some(QueueOutcome::Canceled)
    );
    assert_eq!(store.queued(&run_id("q-bbbbb1")).await.expect("read"), None);

    // Ended entries stay readable until pruned.
    assert_eq!(
        position(store, "q-bbbbb3").await,
        Some(QueuedState::Ended {
            outcome: QueueOutcome::Canceled,
            message: "canceled by its owner".to_owned()
        })
    );
    assert_eq!(
        store.prune_queue(1_100).await.expect("prune"),
        0,
        "ended at 1100, not before"
    );
    assert_eq!(store.prune_queue(1_101).await.expect("prune"), 1);
    assert_eq!(position(store, "q-bbbbb3").await, None);
    assert_eq!(
        store.queue_stats().await.expect("stats"),
        QueueStats {
            length: 1,
            oldest_enqueued_at: Some(1)
        }
    );
}
