//! Contract rules for the journal of open sessions: a live call's session is journaled under
//! the lease, one entry per call and generation (a later attempt replaces it), read back in
//! (generation, index) order, refused after a takeover, and deleted with its run.

use serde_json::json;

use super::*;
use crate::model::OpenSession;
use crate::store::Fence;

/// The session call `index` of `generation` opened, as `id`.
pub fn open_session(generation: u32, index: u32, id: &str) -> OpenSession {
    OpenSession {
        generation,
        index,
        hash: format!("hash-{index}"),
        path: Some("3:7<1:1".to_owned()),
        inputs_hash: Some(format!("inputs-{index}")),
        session: json!({"backendId": "mock", "sessionId": id}),
        cwd: "/home/dev/shop".to_owned(),
        opened_at: 1_700_000_000_500 + i64::from(index),
    }
}

/// Entries come back whole, ordered by (generation, index), whatever order they were written
/// in; a call's second session in the same generation replaces its first.
pub async fn open_sessions_are_journaled_per_call_and_generation<B: Backend>(backend: &B) {
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert!(store.open_sessions(id).await.expect("none yet").is_empty());
    let later = open_session(2, 0, "s-3");
    let first = open_session(1, 1, "s-1");
    let unkeyed = OpenSession {
        path: None,
        inputs_hash: None,
        ..open_session(1, 0, "s-0")
    };
    for session in [&later, &first, &unkeyed] {
        store
            .journal_session(id, session, fence)
            .await
            .expect("journal");
    }
    let retried = OpenSession {
        session: json!({"backendId": "mock", "sessionId": "s-2"}),
        opened_at: first.opened_at + 10,
        ..first.clone()
    };
    store
        .journal_session(id, &retried, fence)
        .await
        .expect("journal the retry's session");
    assert_eq!(
        store.open_sessions(id).await.expect("read"),
        vec![unkeyed, retried, later]
    );
    // Another handle, as another process would have, reads the same.
    let second = backend.open(&data).await;
    assert_eq!(second.open_sessions(id).await.expect("read").len(), 3);
}

/// After a takeover the old holder's journal write is refused and stores nothing; an unknown
/// run is reported; deleting the run deletes its entries.
pub async fn open_sessions_are_fenced_and_deleted_with_the_run<B: Backend>(backend: &B) {
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    let id = &record.run_id;
    store
        .journal_session(id, &open_session(1, 0, "s-0"), Fence("token-a"))
        .await
        .expect("journal");
    let second = backend.open(&data).await;
    assert!(
        second
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    assert_fenced(
        store
            .journal_session(id, &open_session(1, 1, "s-1"), Fence("token-a"))
            .await,
        "a journal write by the old holder",
    );
    assert_eq!(second.open_sessions(id).await.expect("read").len(), 1);
    let unknown = run_id("zz9zz9-nobody");
    assert_unknown(
        store.open_sessions(&unknown).await,
        "read of an unknown run",
    );
    assert_unknown(
        store
            .journal_session(&unknown, &open_session(1, 0, "s"), Fence("token-a"))
            .await,
        "journal for an unknown run",
    );
    second.delete_run(id).await.expect("delete");
    let again = run_record(RUN, PROJECT, 9);
    store
        .create_run(&again, &lease("token-n"))
        .await
        .expect("re-create");
    assert!(
        store.open_sessions(id).await.expect("read").is_empty(),
        "a new run under the same id starts with no journaled session"
    );
}

/// A group commit journals its sessions and appends its calls together, fenced: the holder's
/// lands whole; after a takeover the old holder's writes neither.
pub async fn a_group_commit_journals_sessions_and_appends_calls_fenced<B: Backend>(backend: &B) {
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    let id = &record.run_id;
    let rows = [call(1, 0, 1), call(1, 1, 2)];
    let events = [event(1, "agentEnd")];
    let writes = [write(&rows[0], &[], &[]), write(&rows[1], &[], &events)];
    let sessions = [open_session(1, 2, "s-2"), open_session(1, 3, "s-3")];
    store
        .commit_group(id, &sessions, &writes, Fence("token-a"))
        .await
        .expect("commit the group");
    assert_eq!(store.open_sessions(id).await.expect("read"), sessions);
    assert_eq!(store.calls(id).await.expect("read").len(), 2);
    // Sessions alone are a group too.
    store
        .commit_group(id, &[open_session(1, 4, "s-4")], &[], Fence("token-a"))
        .await
        .expect("commit sessions alone");
    assert_eq!(store.open_sessions(id).await.expect("read").len(), 3);

    let second = backend.open(&data).await;
    assert!(
        second
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    let late = [call(1, 5, 3)];
    assert_fenced(
        store
            .commit_group(
                id,
                &[open_session(1, 5, "s-5")],
                &[write(&late[0], &[], &[])],
                Fence("token-a"),
            )
            .await,
        "a group commit by the old holder",
    );
    assert_eq!(second.open_sessions(id).await.expect("read").len(), 3);
    assert_eq!(second.calls(id).await.expect("read").len(), 2);
}
