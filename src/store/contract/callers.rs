//! Contract rules for what a front end keeps with a run: the caller tag, read narrowly and
//! changed only by compare-and-set (a run reclaimed by id exactly once), and the companion
//! files frozen with the script.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::store::{Fence, ScriptChange};

/// `run_caller` tells an unknown run (`None`) from a run without a tag (`Some(None)`);
/// `set_run_caller` installs a tag only over the one it expects, answers `false` (changing
/// nothing) otherwise or for an unknown run, and `load_run` reads the same tag.
pub async fn caller_is_read_narrowly_and_set_by_compare_and_set<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let unknown = run_id("z-zzzzzz");
    assert_eq!(store.run_caller(&unknown).await.expect("read"), None);
    assert!(
        !store
            .set_run_caller(&unknown, None, Some("session:a"))
            .await
            .expect("cas on an unknown run")
    );
    assert_eq!(store.run_caller(id).await.expect("read"), Some(None));

    assert!(
        !store
            .set_run_caller(id, Some("session:x"), Some("session:a"))
            .await
            .expect("cas with a wrong expectation"),
        "the run has no tag, so expecting one fails"
    );
    assert_eq!(store.run_caller(id).await.expect("read"), Some(None));
    assert!(
        store
            .set_run_caller(id, None, Some("session:a"))
            .await
            .expect("cas")
    );
    assert!(
        !store
            .set_run_caller(id, None, Some("session:b"))
            .await
            .expect("second cas"),
        "a tag is installed once over the same expectation"
    );
    assert_eq!(
        store.run_caller(id).await.expect("read"),
        Some(Some("session:a".to_owned()))
    );
    assert_eq!(
        store.load_run(id).await.expect("load").caller.as_deref(),
        Some("session:a")
    );
    assert!(
        store
            .set_run_caller(id, Some("session:a"), Some("session:b"))
            .await
            .expect("cas from a tag")
    );
    assert!(
        store
            .set_run_caller(id, Some("session:b"), None)
            .await
            .expect("cas to none")
    );
    assert_eq!(store.run_caller(id).await.expect("read"), Some(None));
}

/// A tag given at admission is stored; `update_run` never changes it, whatever the record it
/// writes says, so a stale record written back after a reclaim keeps the reclaimer's tag.
pub async fn update_run_leaves_the_caller_alone<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let record = RunRecord {
        caller: Some("principal:ann".to_owned()),
        ..run_record(RUN, PROJECT, 1_700_000_000_000)
    };
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create");
    assert_eq!(
        store.run_caller(&record.run_id).await.expect("read"),
        Some(Some("principal:ann".to_owned()))
    );
    let stale = RunRecord {
        caller: None,
        status: RunStatus::Completed,
        ..record.clone()
    };
    for change in [ScriptChange::Unchanged, ScriptChange::Changed] {
        store
            .update_run(&stale, change, Fence("token-a"))
            .await
            .expect("update");
        assert_eq!(
            store.load_run(&record.run_id).await.expect("load"),
            RunRecord {
                caller: Some("principal:ann".to_owned()),
                ..stale.clone()
            }
        );
    }
}

/// Of several handles reclaiming one run at once, each expecting no tag, exactly one wins and
/// its tag is the one stored.
pub async fn concurrent_reclaims_have_one_winner<B: Backend>(backend: &B) {
    const RACERS: usize = 8;
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    let mut handles = vec![store.clone()];
    handles.push(backend.open(&data).await);
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut racers = Vec::new();
    for racer in 0..RACERS {
        let (store, start) = (handles[racer % handles.len()].clone(), start.clone());
        let id = record.run_id.clone();
        racers.push(tokio::spawn(async move {
            let tag = format!("session:racer-{racer}");
            start.wait().await;
            let won = store
                .set_run_caller(&id, None, Some(&tag))
                .await
                .expect("cas");
            won.then_some(tag)
        }));
    }
    let mut winners = Vec::new();
    for racer in racers {
        winners.extend(racer.await.expect("racer task"));
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        store.run_caller(&record.run_id).await.expect("read"),
        Some(winners.pop())
    );
}

/// Companion files are written with the script at admission and read back exactly (an
/// empty text and non-ASCII included); `ScriptChange::Unchanged` keeps them as stored and
/// `Changed` replaces them, to none as well.
pub async fn companion_files_travel_with_the_script<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let files: BTreeMap<String, String> = [
        ("prompts/review.md", "Review the diff.\n"),
        ("schemas/out.json", "{\"type\":\"object\"}"),
        ("empty.txt", ""),
        ("notes/ünï.md", "— ok"),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    let record = RunRecord {
        files: files.clone(),
        meta: json!({ "name": "review", "files": files.keys().collect::<Vec<_>>() }),
        ..run_record(RUN, PROJECT, 1_700_000_000_000)
    };
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);

    let revised_files: BTreeMap<String, String> = [(
        "prompts/review.md".to_owned(),
        "Review it again.".to_owned(),
    )]
    .into();
    let revised = RunRecord {
        files: revised_files.clone(),
        script: "revised".to_owned(),
        ..record.clone()
    };
    store
        .update_run(&revised, ScriptChange::Unchanged, Fence("token-a"))
        .await
        .expect("update");
    assert_eq!(
        store.load_run(&record.run_id).await.expect("load").files,
        files
    );
    store
        .update_run(&revised, ScriptChange::Changed, Fence("token-a"))
        .await
        .expect("update with script");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), revised);
    let without = RunRecord {
        files: BTreeMap::new(),
        ..revised.clone()
    };
    store
        .update_run(&without, ScriptChange::Changed, Fence("token-a"))
        .await
        .expect("update to no files");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), without);
}
