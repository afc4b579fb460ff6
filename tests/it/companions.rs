//! What the folder server needs of the engine, through its library API with the instant
//! runner and the real SQLite store: companion files frozen at admission (a resume sees the
//! frozen text, a revision reads them again), the caller tag and its reclaim, and the
//! per-project cap as configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentprism::engine::instant::InstantRunner;
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::{
    Engine, EngineConfig, EngineError, ResumeRequest, RunRequest, ScriptInput, StatusQuery,
};
use agentprism::model::{RunId, RunStatus};
use agentprism::store::{RunReads, SqliteStore};
use serde_json::{Value, json};

use crate::engine::{Harness, harness};

const PROMPT: &str = "prompts/review.md";

/// Pauses at a checkpoint after one agent call that sends the companion text; returns the
/// text as it reads it before and after the pause.
const SCRIPT: &str = "export const meta = { name: 'c', description: 'd', model: 'codex', files: ['prompts/review.md'] };\nconst before = await agent(file('prompts/review.md'));\nconst ok = await checkpoint('go on?');\nreturn { before, after: file('prompts/review.md'), ok };\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("folders");
    std::fs::write(path, text).expect("write");
}

/// Starts `flow.js` of the project (a path script, so it can be revised) and waits for its
/// first generation to settle.
async fn start_flow(h: &Harness, script: &str) -> (RunId, PathBuf) {
    let flow = h.project.join("flow.js");
    write(&flow, script);
    let admission = h
        .engine
        .start(RunRequest {
            project_dir: h.project.clone(),
            script: ScriptInput::Path(flow.clone()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted");
    h.engine.wait(&admission.run_id).await;
    (admission.run_id, flow)
}

async fn status(h: &Harness, run_id: &RunId) -> Value {
    json!(
        h.engine
            .status(run_id, &StatusQuery::default())
            .await
            .expect("status")
    )
}

/// Resumes `run_id`, answering checkpoint `index` with `true`, and waits for it to settle.
async fn resume(h: &Harness, run_id: &RunId, index: u32) -> Value {
    let admission = h
        .engine
        .resume(ResumeRequest {
            run_id: Some(run_id.clone()),
            checkpoint_replies: vec![(index, json!(true))],
            ..Default::default()
        })
        .await
        .expect("resumed");
    h.engine.wait(run_id).await;
    json!({ "continuation": admission.continuation, "status": status(h, run_id).await })
}

#[tokio::test]
async fn a_resume_sees_the_frozen_companion_text_though_the_file_changed() {
    let h = harness();
    write(&h.project.join(PROMPT), "Review the first draft.");
    let (run_id, _) = start_flow(&h, SCRIPT).await;
    let paused = status(&h, &run_id).await;
    assert_eq!(paused["status"], "paused", "{paused:#}");
    assert_eq!(paused["reason"], "checkpoint_required");
    assert_eq!(h.runner.prompts(), 1);
    let stored = h.store.load_run(&run_id).await.expect("load");
    assert_eq!(stored.files[PROMPT], "Review the first draft.");

    write(&h.project.join(PROMPT), "Review something else entirely.");
    let resumed = resume(&h, &run_id, 1).await;
    assert_eq!(resumed["continuation"]["scriptRevised"], false);
    let done = &resumed["status"];
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["outcome"]["result"],
        json!({ "before": "ECHO: Review the first draft.", "after": "Review the first draft.", "ok": true })
    );
    assert_eq!(
        h.runner.prompts(),
        1,
        "the agent call was replayed, not prompted again"
    );
}

#[tokio::test]
async fn a_revised_script_reads_its_companion_files_again() {
    let h = harness();
    write(&h.project.join(PROMPT), "Review the first draft.");
    let (run_id, flow) = start_flow(&h, SCRIPT).await;
    assert_eq!(status(&h, &run_id).await["status"], "paused");

    write(&h.project.join(PROMPT), "Review the second draft.");
    write(&flow, &format!("{SCRIPT}// revised\n"));
    let resumed = resume(&h, &run_id, 1).await;
    assert_eq!(resumed["continuation"]["scriptRevised"], true);
    let done = &resumed["status"];
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["outcome"]["result"],
        json!({ "before": "ECHO: Review the second draft.", "after": "Review the second draft.", "ok": true })
    );
    assert_eq!(h.runner.prompts(), 2, "the changed prompt is a new call");
    let stored = h.store.load_run(&run_id).await.expect("load");
    assert_eq!(stored.files[PROMPT], "Review the second draft.");
}

#[tokio::test]
async fn companion_problems_reject_the_run_and_store_nothing() {
    let h = harness();
    write(&h.project.join("outside.md"), "not a companion");
    std::os::unix::fs::symlink(h.project.join("outside.md"), h.project.join("link.md"))
        .expect("link");
    let cases = [
        (
            "export const meta = { name: 'c', description: 'd', model: 'codex', files: ['prompts/missing.md'] };\nreturn 1;",
            "meta.files[0] \"prompts/missing.md\": ",
        ),
        (
            "export const meta = { name: 'c', description: 'd', model: 'codex', files: ['link.md'] };\nreturn 1;",
            "meta.files[0] \"link.md\": ",
        ),
        (
            "export const meta = { name: 'c', description: 'd', model: 'codex', files: ['outside.md'] };\nreturn file('other.md');",
            "file(\"other.md\"): \"other.md\" is not declared in meta.files; add it to meta.files",
        ),
        (
            "export const meta = { name: 'c', description: 'd', model: 'codex', files: ['../x.md'] };\nreturn 1;",
            "meta.files[0] \"../x.md\" has a `..` component",
        ),
    ];
    for (script, expected) in cases {
        let error = h.start(script).await.expect_err(script);
        let message = error.to_string();
        assert!(
            matches!(error, EngineError::Rejected(_)) && message.contains(expected),
            "{script}: {message}"
        );
    }
    assert!(h.engine.list(None, 50).await.expect("list").is_empty());
    // The dry run reads the same texts the run will.
    let (run_id, status) = h
        .run_to_end("export const meta = { name: 'c', description: 'd', model: 'codex', files: ['outside.md'] };\nif (file('outside.md') !== 'not a companion') throw new Error('wrong text');\nreturn file('outside.md');")
        .await;
    assert_eq!(status["status"], "completed", "{run_id}: {status:#}");
    assert_eq!(status["outcome"]["result"], "not a companion");
}

#[tokio::test]
async fn the_caller_tag_is_stored_and_reclaimed_exactly_once() {
    let h = harness();
    let admission = h
        .engine
        .start(RunRequest {
            project_dir: h.project.clone(),
            script: ScriptInput::Inline(
                "export const meta = { name: 'c', description: 'd', model: 'codex' };\nreturn await checkpoint('go?');".into(),
            ),
            args: json!({}),
            limits: Default::default(),
            caller: Some("session:first".into()),
            trace: None,
        })
        .await
        .expect("admitted");
    let run_id = admission.run_id;
    h.engine.wait(&run_id).await;
    let caller = |value: &str| Some(Some(value.to_owned()));
    assert_eq!(
        h.engine.run_caller(&run_id).await.expect("caller"),
        caller("session:first")
    );
    let unknown = RunId::parse("zz-zzzzzz").expect("id");
    assert_eq!(h.engine.run_caller(&unknown).await.expect("caller"), None);
    assert!(
        !h.engine
            .reclaim(&unknown, None, Some("session:x"))
            .await
            .expect("reclaim")
    );

    // A second process on the same store reclaims the run by id, once.
    let other = Engine::new(
        h.store.clone(),
        InstantRunner::new(),
        Arc::new(NamedBackends::new(["codex"])),
        EngineConfig::default(),
    );
    assert!(
        other
            .reclaim(&run_id, Some("session:first"), Some("session:second"))
            .await
            .expect("reclaim")
    );
    assert!(
        !h.engine
            .reclaim(&run_id, Some("session:first"), Some("session:third"))
            .await
            .expect("reclaim")
    );
    assert_eq!(
        other.run_caller(&run_id).await.expect("caller"),
        caller("session:second")
    );
    // Executing and settling a generation writes the run row, never the tag.
    let resumed = resume(&h, &run_id, 0).await;
    assert_eq!(resumed["status"]["status"], "completed");
    assert_eq!(
        h.engine.run_caller(&run_id).await.expect("caller"),
        caller("session:second")
    );
}

const NEEDS_SETUP: &str = "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');";

#[tokio::test]
async fn the_per_project_cap_is_configured() {
    for cap in [1usize, 6] {
        let dir = tempfile::tempdir().expect("temp dir");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let store = Arc::new(SqliteStore::open(&dir.path().join("state")).expect("store"));
        let engine = Engine::new(
            store,
            InstantRunner::new(),
            Arc::new(NamedBackends::new(["codex"])),
            EngineConfig {
                max_active_per_project: cap,
                probe: false,
                ..EngineConfig::default()
            },
        );
        let start = || {
            engine.start(RunRequest {
                project_dir: project.clone(),
                script: ScriptInput::Inline(NEEDS_SETUP.into()),
                args: json!({}),
                limits: Default::default(),
                caller: None,
                trace: None,
            })
        };
        for _ in 0..cap {
            let admission = start().await.expect("within the cap");
            assert_eq!(admission.status, RunStatus::Pending);
        }
        let refused = start().await.expect_err("over the cap").to_string();
        assert!(
            refused.contains(&format!("already has {cap} active runs")),
            "{refused}"
        );
    }
    assert_eq!(EngineConfig::default().max_active_per_project, 4);
}
