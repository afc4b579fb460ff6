//! The engine through its library API, with the in-process instant runner and the real
//! SQLite store: admission, execution, journal, replay, checkpoints, stop and resume.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentprism::engine::instant::InstantRunner;
use agentprism::engine::{
    Engine, EngineConfig, EngineError, ResumeRequest, RunRequest, ScriptInput, StatusQuery,
};
use agentprism::model::{CallOrigin, RunId, RunStatus};
use agentprism::store::{CallReads, EventReads, SqliteStore};
use serde_json::{Value, json};

mod control;

pub use agentprism::engine::routing::NamedBackends;

pub struct Harness {
    pub _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub project: PathBuf,
    pub engine: Engine,
    pub runner: Arc<InstantRunner>,
    pub store: Arc<SqliteStore>,
}

pub fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("state");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store = Arc::new(SqliteStore::open(&root).expect("store"));
    let runner = InstantRunner::new();
    let engine = Engine::new(
        store.clone(),
        runner.clone(),
        Arc::new(NamedBackends::new(["claude", "codex", "pi"])),
        EngineConfig {
            home: Some(dir.path().to_path_buf()),
            ..EngineConfig::default()
        },
    );
    Harness {
        _dir: dir,
        root,
        project,
        engine,
        runner,
        store,
    }
}

impl Harness {
    pub async fn start(&self, script: &str) -> Result<RunId, EngineError> {
        let admission = self
            .engine
            .start(RunRequest {
                project_dir: self.project.clone(),
                script: ScriptInput::Inline(script.to_owned()),
                args: json!({}),
                limits: Default::default(),
                caller: None,
                trace: None,
            })
            .await?;
        Ok(admission.run_id)
    }

    pub async fn run_to_end(&self, script: &str) -> (RunId, Value) {
        let run_id = self.start(script).await.expect("admitted");
        self.engine.wait(&run_id).await;
        let status = json!(
            self.engine
                .status(&run_id, &StatusQuery::default())
                .await
                .expect("status")
        );
        (run_id, status)
    }

    /// Resumes `run_id` with these checkpoint answers, waits for it to settle, and returns
    /// its status.
    pub async fn resume_to_end(&self, run_id: &RunId, replies: Vec<(u32, Value)>) -> Value {
        self.engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: replies,
                ..Default::default()
            })
            .await
            .expect("resumed");
        self.engine.wait(run_id).await;
        json!(
            self.engine
                .status(run_id, &StatusQuery::default())
                .await
                .expect("status")
        )
    }

    /// Admits `script` with these limits; panics if preparation rejects it.
    pub async fn admit(
        &self,
        script: &str,
        limits: agentprism::engine::LimitOverrides,
    ) -> agentprism::engine::Admission {
        self.engine
            .start(RunRequest {
                project_dir: self.project.clone(),
                script: ScriptInput::Inline(script.to_owned()),
                args: json!({}),
                limits,
                caller: None,
                trace: None,
            })
            .await
            .expect("admitted")
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("projects")
    }
}

fn count_files(dir: &Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn a_run_completes_with_its_result_and_script_copy() {
    let h = harness();
    let (run_id, status) = h
        .run_to_end("export const meta = { name: 'hi', description: 'd' };\nconst r = await agent('hi', {model: 'codex'});\nreturn {r};")
        .await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(status["outcome"]["result"], json!({"r": "ECHO: hi"}));
    let script_path = status["scriptPath"].as_str().unwrap();
    assert!(script_path.ends_with(&format!("{run_id}.script.js")));
    assert!(Path::new(script_path).exists());
    let page = json!(h.engine.result_page(&run_id, 0, 16384).await.unwrap());
    assert_eq!(page["chunk"], json!({"r": "ECHO: hi"}).to_string());
}

#[tokio::test]
async fn bad_scripts_are_rejected_and_nothing_is_persisted() {
    let h = harness();
    for script in [
        "const x = 1;",
        "export const meta = { name: 'x', description: 'd' };\nreturn Date.now();",
        "export const meta = { name: 'x', description: 'd' };\nconst f = Date; f.now();",
        "export const meta = { name: 'x', description: 'd' };\nawait agent('x');",
        "export const meta = { name: 'x', description: 'd', model: 'codex' };\nawait agent('x', {configOptions: {model: 'y'}});",
        "export const meta = { name: 'x', description: 'd', model: 'codex' };\nawait parallel([agent('a')]);",
        "export const meta = { name: 'x', description: 'd', model: 'codex' };\nagent('a').then(() => { throw new Error('late'); }); await agent('b');",
    ] {
        let error = h.start(script).await.expect_err(script);
        assert!(
            matches!(error, EngineError::Rejected(_)),
            "{script}: {error:?}"
        );
    }
    assert_eq!(count_files(&h.runs_dir()), 0);
    assert!(h.engine.list(None, 50).await.unwrap().is_empty());
}

#[tokio::test]
async fn missing_routing_lists_the_call() {
    let h = harness();
    let error = h
        .start("export const meta = { name: 'x', description: 'd' };\nawait agent('x');")
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("agent 0@0"), "{message}");
    assert!(message.contains("codex"), "{message}");
}

#[tokio::test]
async fn checkpoints_pause_until_answered() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'codex' };\nconst a = await agent('one');\nconst ok = await checkpoint('continue?');\nreturn {a, ok};";
    let (run_id, status) = h.run_to_end(script).await;
    assert_eq!(status["status"], "paused");
    assert_eq!(status["reason"], "checkpoint_required");
    assert_eq!(status["outcome"]["checkpointContext"]["callIndex"], 1);
    let error = h
        .engine
        .resume(ResumeRequest {
            run_id: Some(run_id.clone()),
            checkpoint_replies: vec![(1, json!("yes"))],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(error.to_string().contains("true or false"), "{error}");
    let prompts_before = h.runner.prompts();
    let status = h.resume_to_end(&run_id, vec![(1, json!(true))]).await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({"a": "ECHO: one", "ok": true})
    );
    assert_eq!(
        h.runner.prompts(),
        prompts_before,
        "call 0 must replay, not prompt again"
    );
    assert_eq!(
        status["outcome"]["checkpointsTaken"][0]["source"],
        "injected"
    );
}

#[tokio::test]
async fn revised_script_replays_unchanged_calls() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'codex' };\nconst a = await agent('zero');\nconst b = await agent('one');\nconst ok = await checkpoint('go?');\nconst c = await agent('two');\nreturn [a, b, c];";
    let (run_id, status) = h.run_to_end(script).await;
    assert_eq!(status["reason"], "checkpoint_required");
    h.engine
        .stop(&run_id, None, &StatusQuery::default())
        .await
        .unwrap();
    let file = PathBuf::from(status["scriptPath"].as_str().unwrap());
    std::fs::write(&file, script.replace("agent('two')", "agent('TWO edited')")).unwrap();
    let before = h.runner.prompts();
    let admission = h
        .engine
        .resume(ResumeRequest {
            run_id: Some(run_id.clone()),
            checkpoint_replies: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        admission.continuation.as_ref().unwrap()["scriptRevised"],
        true
    );
    h.engine.wait(&run_id).await;
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    // The checkpoint was never answered, so the run pauses again on it.
    assert_eq!(status["reason"], "checkpoint_required", "{status:#}");
    let calls = h.store.latest_calls(&run_id).await.unwrap();
    let origins: Vec<CallOrigin> = calls.iter().map(|c| c.origin).collect();
    assert_eq!(
        origins,
        vec![CallOrigin::JournalReplay, CallOrigin::JournalReplay]
    );
    assert_eq!(h.runner.prompts(), before);
    let status = h.resume_to_end(&run_id, vec![(2, json!(true))]).await;
    assert_eq!(
        status["outcome"]["result"],
        json!(["ECHO: zero", "ECHO: one", "ECHO: TWO edited"])
    );
    assert_eq!(
        h.runner.prompts(),
        before + 1,
        "only the edited call runs live"
    );
}

#[tokio::test]
async fn stopping_a_completed_run_is_a_no_op_and_results_page_by_code_point() {
    let h = harness();
    let (run_id, _) = h
        .run_to_end("export const meta = { name: 'x', description: 'd' };\nreturn 'é…';")
        .await;
    let stopped = json!(
        h.engine
            .stop(&run_id, None, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(stopped["alreadyTerminal"], true);
    assert_eq!(stopped["stopped"], false);
    let total = json!("é…").to_string();
    let mut offset = 0;
    let mut joined = String::new();
    loop {
        let page = json!(h.engine.result_page(&run_id, offset, 4).await.unwrap());
        joined.push_str(page["chunk"].as_str().unwrap());
        offset = page["endOffset"].as_u64().unwrap() as usize;
        if page["hasMore"] == false {
            break;
        }
    }
    assert_eq!(joined, total);
    assert!(
        h.engine.result_page(&run_id, 2, 4).await.is_err(),
        "offset inside é"
    );
}

#[tokio::test]
async fn limits_are_clamped_and_project_capacity_is_four() {
    let h = harness();
    let admission = h
        .engine
        .start(RunRequest {
            project_dir: h.project.clone(),
            script: ScriptInput::Inline(
                "export const meta = { name: 'x', description: 'd' };\nawait checkpoint('wait');"
                    .into(),
            ),
            args: json!({}),
            limits: agentprism::engine::LimitOverrides {
                max_agents: None,
                concurrency: Some(99),
                agent_retries: Some(9),
                ..Default::default()
            },
            caller: None,
            trace: None,
        })
        .await
        .unwrap();
    assert_eq!(admission.limits.concurrency, 16);
    assert_eq!(admission.limits.agent_retries, 3);
    let _ = RunStatus::Paused;
}

#[tokio::test]
async fn helpers_are_plain_agent_calls() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'codex' };\n\
        const v = await verify('the sky is blue', {reviewers: 3});\n\
        const best = await judgePanel(['a', 'b'], {judges: 2, rubric: 'short'});\n\
        const found = await loopUntilDry({round: async (i) => i < 2 ? ['item' + i] : [], consecutiveEmpty: 1});\n\
        const check = await completenessCheck({goal: 1}, found);\n\
        const r = await retry(async (i) => i, {attempts: 3, until: (v) => v === 2});\n\
        const g = await gate(async (feedback, i) => i, (v) => ({ok: v === 1, feedback: 'more'}));\n\
        const p = await pipeline([1, 2], async (x) => x * 10, async (x, original, i) => x + original + i);\n\
        return {v: [v.total, typeof v.real], judges: best.judgments.length, found, complete: typeof check.complete, r, g: [g.ok, g.attempts], p};";
    let (_, status) = h.run_to_end(script).await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({"v": [3, "boolean"], "judges": 2, "found": ["item0", "item1"], "complete": "boolean", "r": 2, "g": [true, 2], "p": [11, 23]})
    );
    // 3 verify + 4 judges + 1 completeness critic.
    assert_eq!(h.runner.prompts(), 8);
}

#[tokio::test]
async fn nested_workflows_run_a_saved_script_by_name() {
    let h = harness();
    let folder = h.project.join(".agentprism/workflows");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("child.js"),
        "export const meta = { name: 'child', description: 'd', model: 'codex' };\nreturn (await agent('child ' + args.x)) + '!';",
    )
    .unwrap();
    let (_, status) = h
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nreturn await workflow('child', {x: 5});")
        .await;
    assert_eq!(
        status["outcome"]["result"],
        json!("ECHO: child 5!"),
        "{status:#}"
    );
    let error = h
        .start("export const meta = { name: 'x', description: 'd', model: 'codex' };\nreturn await workflow('missing');")
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no workflow named \"missing\"; the names that exist"),
        "{error}"
    );
}

#[tokio::test]
async fn agent_limit_is_enforced_at_its_edge() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'codex' };\n\
        let n = 0;\n\
        try { for (;;) { await agent('p' + n); n++; } } catch (e) { return {n, code: e.code}; }";
    let admission = h
        .admit(
            script,
            agentprism::engine::LimitOverrides {
                max_agents: Some(3),
                ..Default::default()
            },
        )
        .await;
    h.engine.wait(&admission.run_id).await;
    let status = json!(
        h.engine
            .status(&admission.run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        status["outcome"]["result"],
        json!({"n": 3, "code": "AGENT_LIMIT_EXCEEDED"})
    );
}

#[tokio::test]
async fn label_glob_and_last_n_pick_the_latest_matching_calls() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'codex' };\n\
        for (let i = 0; i < 4; i++) { await agent('r' + i, {label: 'review:' + i}); await agent('w' + i, {label: 'write:' + i}); }";
    let (run_id, _) = h.run_to_end(script).await;
    let query = StatusQuery {
        last_n: 2,
        label_glob: Some("review:*".into()),
        log_lines: 0,
    };
    let status = json!(h.engine.status(&run_id, &query).await.unwrap());
    let labels: Vec<&str> = status["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, vec!["review:2", "review:3"]);
    assert_eq!(status["truncation"]["calls"]["matched"], 4);
}

#[tokio::test]
async fn secrets_are_redacted_in_status_and_events_but_exact_in_the_result() {
    let h = harness();
    let (run_id, status) = h
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nconst t = await agent('Bearer abc.def.ghi');\nlog('token ' + t);\nreturn t;")
        .await;
    let text = status.to_string();
    assert!(
        !text.contains("abc.def.ghi")
            || status["outcome"]["result"]
                .as_str()
                .unwrap()
                .contains("abc.def.ghi")
    );
    assert!(
        !status["calls"].to_string().contains("abc.def.ghi"),
        "{status:#}"
    );
    assert!(
        !status["logTail"].to_string().contains("abc.def.ghi"),
        "{status:#}"
    );
    let events = h.store.events(&run_id, 0, 1000).await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| !e.event.to_string().contains("abc.def.ghi")),
        "an event leaked the token"
    );
    assert!(events.iter().any(|e| e.redacted));
    let page = json!(h.engine.result_page(&run_id, 0, 16384).await.unwrap());
    assert_eq!(page["chunk"], json!("ECHO: Bearer abc.def.ghi").to_string());
}

#[tokio::test]
async fn script_backends_wait_for_approval() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'my-agent', args: ['--acp'] } } };\nreturn await agent('x');";
    let admission = h.admit(script, Default::default()).await;
    assert_eq!(admission.status, RunStatus::Pending);
    let setup = json!(admission.setup.clone().unwrap());
    assert_eq!(setup["request"]["kind"], "backend-approval");
    let setup_id = setup["request"]["id"].as_str().unwrap().to_owned();
    let decline = json!({"action": "decline"});
    let answer = json!(
        h.engine
            .setup_response(&admission.run_id, &setup_id, &decline)
            .await
            .unwrap()
    );
    assert_eq!(answer["status"], "aborted");
    let again = json!(
        h.engine
            .setup_response(&admission.run_id, &setup_id, &decline)
            .await
            .unwrap()
    );
    assert_eq!(
        again["accepted"], false,
        "the same answer again is idempotent"
    );
    let accept = json!({"action": "accept", "content": {"approve": true}});
    assert!(
        h.engine
            .setup_response(&admission.run_id, &setup_id, &accept)
            .await
            .is_err(),
        "a conflicting answer is refused"
    );
    assert_eq!(h.runner.prompts(), 0);
}

#[tokio::test]
async fn approved_script_backends_run() {
    let h = harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'my-agent' } } };\nreturn await agent('x');";
    let admission = h.admit(script, Default::default()).await;
    let setup_id = admission.setup.unwrap().request.id;
    let bad = json!({"action": "accept", "content": {"approve": "yes"}});
    assert!(
        h.engine
            .setup_response(&admission.run_id, &setup_id, &bad)
            .await
            .is_err(),
        "content must match the schema"
    );
    let accept = json!({"action": "accept", "content": {"approve": true}});
    h.engine
        .setup_response(&admission.run_id, &setup_id, &accept)
        .await
        .unwrap();
    h.engine.wait(&admission.run_id).await;
    let status = json!(
        h.engine
            .status(&admission.run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(status["outcome"]["result"], json!("ECHO: x"), "{status:#}");
    assert_eq!(status["calls"][0]["backendId"], "mine");
}

/// An engine whose backend `mock` is the scripted mock agent subprocess.
pub fn mock_harness() -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("state");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let mock = crate::support::context::mock_agent_binary();
    let env = agentprism::env::EnvSnapshot::from_pairs([
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), dir.path().display().to_string()),
        (
            "AGENTPRISM_BACKENDS".to_owned(),
            json!({"mock": {"command": mock}}).to_string(),
        ),
    ]);
    let store = Arc::new(SqliteStore::open(&root).expect("store"));
    let mut acp = agentprism::acp::AcpConfig::from_env(&env).expect("acp config");
    acp.cancel_grace = std::time::Duration::from_millis(300);
    let runner = Arc::new(agentprism::acp::AcpRunner::new(acp));
    let backends = agentprism::acp::lookup::Backends::from_env(&env).expect("backends");
    let engine = Engine::new(
        store.clone(),
        runner,
        Arc::new(backends),
        EngineConfig {
            home: Some(dir.path().to_path_buf()),
            probe: false,
            ..EngineConfig::default()
        },
    );
    Harness {
        _dir: dir,
        root,
        project,
        engine,
        runner: InstantRunner::new(),
        store,
    }
}
