//! Runs that resume by themselves at a provider's usage reset, through the real daemon, its
//! `workflow` tool over HTTP, and the mock agent. The mock fails a call once with "try again
//! in N seconds" (`@mock once`), so the call succeeds whenever it runs again: the run pauses
//! `usage_limit` with `resetAt` and `resumeAt`, and completes with no client call after that
//! moment; the same with the daemon SIGKILLed right after the pause and started again; a run
//! that opted out (`meta.autoResume: false`, `--no-auto-resume`) stays paused and says why.
//! Engine-level cases over the same mock: two engines over one store resume the run once, an
//! owner's resume or stop takes the timer, and automatic resumes in a row stop at the cap.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use agentprism::timers::AutoResumePolicy;

use crate::budget::kill_daemons;
use crate::daemon::{World, mcp_post, open_session, wait_for};
use crate::support::context::DEADLINE;

/// The `workflow` tool's run of `script`; returns the run id.
fn start(world: &World, port: u16, session: &str, id: u64, script: &str) -> String {
    let reply = mcp_post(
        port,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "workflow", "arguments": {
                "action": "run", "projectDir": world.ctx.project(), "script": script}}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let result = reply.json()["result"].clone();
    result["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {result}"))
        .to_owned()
}

/// A script whose one call hits a usage limit that lifts in `seconds`, the first time only.
fn script(world: &World, name: &str, seconds: u64, meta_extra: &str) -> String {
    let marker = world.ctx.path(&format!("{name}.failed-once"));
    format!(
        "export const meta = {{ name: '{name}', description: 'd', model: 'mock'{meta_extra} }};\n\
         return await agent('work\\n@mock once {} usage_limit try again in {seconds} seconds');",
        marker.display()
    )
}

/// Waits until the stored run has the status `wanted`, and returns its status.
fn status_becomes(world: &World, run_id: &str, wanted: &str) -> Value {
    wait_for(&format!("run {run_id} to be {wanted}"), DEADLINE, || {
        let status = world.ctx.status(run_id);
        (status["status"] == wanted).then_some(status)
    })
}

fn time(status: &Value, field: &str) -> SystemTime {
    let text = status["outcome"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no outcome.{field}: {status:#}"));
    humantime::parse_rfc3339(text).expect("an RFC 3339 time")
}

/// The pause says when the limit lifts and when the run resumes: a few seconds after.
fn assert_scheduled(status: &Value) -> SystemTime {
    assert_eq!(status["reason"], "usage_limit", "{status:#}");
    let reset_at = time(status, "resetAt");
    let resume_at = time(status, "resumeAt");
    let wait = resume_at
        .duration_since(reset_at)
        .expect("resumes after the reset");
    assert!(
        (Duration::from_secs(1)..=Duration::from_secs(4)).contains(&wait),
        "{wait:?}: {status:#}"
    );
    let said = status["outcome"]["autoResume"].as_str().unwrap_or_default();
    assert!(said.contains("resumes by itself at"), "{status:#}");
    resume_at
}

/// Starts, through a daemon of `world`, a run whose call hits a limit that lifts in `seconds`;
/// waits for its pause and checks its timer. Returns the run id and its resume moment.
fn paused_with_a_timer(world: &World, name: &str, seconds: u64) -> (String, SystemTime) {
    let record = world.start();
    let session = open_session(record.port);
    let script = script(world, name, seconds, "");
    let run_id = start(world, record.port, &session, 1, &script);
    let paused = status_becomes(world, &run_id, "paused");
    let resume_at = assert_scheduled(&paused);
    (run_id, resume_at)
}

#[test]
fn a_usage_paused_run_resumes_by_itself_at_the_reset() {
    let world = World::new();
    let (run_id, resume_at) = paused_with_a_timer(&world, "reset", 3);

    // No client call from here on.
    let done = status_becomes(&world, &run_id, "completed");
    assert!(
        SystemTime::now() >= resume_at,
        "completed before its resume moment: {done:#}"
    );
    // The same mock process still holds the session: the call reopens it and gets the
    // continuation prompt.
    let result = done["outcome"]["result"].as_str().unwrap_or_default();
    assert!(
        result.starts_with("ECHO: You were interrupted."),
        "{done:#}"
    );
    assert_eq!(done["generation"], 2, "{done:#}");
    let events = world.ctx.run(&["status", &run_id, "--json"]).json();
    assert!(events["outcome"].get("resumeAt").is_none(), "{events:#}");
}

#[test]
fn the_timer_survives_a_sigkill_of_the_daemon() {
    let world = World::new();
    let (run_id, resume_at) = paused_with_a_timer(&world, "killed", 2);
    kill_daemons(&world);
    // The moment passes with no process serving the run.
    wait_for("the resume moment to pass", DEADLINE, || {
        (SystemTime::now() > resume_at).then_some(())
    });
    assert_eq!(world.ctx.status(&run_id)["status"], "paused");

    world.start();
    let done = status_becomes(&world, &run_id, "completed");
    assert_eq!(done["outcome"]["result"], "ECHO: work", "{done:#}");
    assert_eq!(done["generation"], 2, "it resumed once: {done:#}");
}

#[test]
fn a_run_that_opted_out_stays_paused_and_says_why() {
    let world = World::new();
    let record = world.start();
    let session = open_session(record.port);
    // The opted-out run's limit lifts first: had it been scheduled, it would be due before the
    // other run's resume, which the loop takes in due order.
    let out = start(
        &world,
        record.port,
        &session,
        1,
        &script(&world, "optout", 1, ", autoResume: false"),
    );
    let paused_out = status_becomes(&world, &out, "paused");
    assert_eq!(paused_out["reason"], "usage_limit");
    assert!(
        paused_out["outcome"].get("resumeAt").is_none(),
        "{paused_out:#}"
    );
    let said = paused_out["outcome"]["autoResume"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("meta.autoResume: false"), "{paused_out:#}");

    let other = start(
        &world,
        record.port,
        &session,
        2,
        &script(&world, "later", 6, ""),
    );
    let paused_other = status_becomes(&world, &other, "paused");
    let other_resume = assert_scheduled(&paused_other);
    assert!(time(&paused_out, "resetAt") + Duration::from_secs(4) < other_resume);
    status_becomes(&world, &other, "completed");
    let still = world.ctx.status(&out);
    assert_eq!(still["status"], "paused", "{still:#}");
    assert_eq!(still["generation"], 1, "{still:#}");

    // The command line's opt-out, on a run the CLI executes.
    let path = world.ctx.write("flag.js", &script(&world, "flag", 1, ""));
    let cli = world.run(&["run", "--no-auto-resume", path.to_str().unwrap()]);
    assert_eq!(cli.code(), 3, "{}", cli.stderr);
    assert!(cli.stderr.contains("--no-auto-resume"), "{}", cli.stderr);
    let status = world.ctx.status(&cli.run_id());
    assert_eq!(status["limits"]["autoResume"], false, "{status:#}");
    assert!(status["outcome"].get("resumeAt").is_none(), "{status:#}");
}

#[test]
fn a_bad_auto_resume_setting_is_refused_by_name() {
    let world = World::new();
    let bad_meta = world.ctx.write(
        "bad.js",
        "export const meta = { name: 'bad', description: 'd', model: 'mock', autoResume: 'sometimes' };\nreturn 1;",
    );
    let refused = world.run(&["run", bad_meta.to_str().unwrap()]);
    assert_ne!(refused.code(), 0);
    assert!(
        refused.stderr.contains("meta.autoResume"),
        "{}",
        refused.stderr
    );
    let listed = world.run(&["runs", "--json"]);
    assert!(
        !listed.stdout.contains("\"bad\""),
        "nothing stored: {}",
        listed.stdout
    );

    let ok = world.ctx.write(
        "ok.js",
        "export const meta = { name: 'ok', description: 'd', model: 'mock' };\nreturn 1;",
    );
    let env_refused = world.run_with(
        &[("AGENTPRISM_AUTO_RESUME", "sometimes")],
        &["run", ok.to_str().unwrap()],
    );
    assert_ne!(env_refused.code(), 0);
    assert!(
        env_refused.stderr.contains("AGENTPRISM_AUTO_RESUME"),
        "{}",
        env_refused.stderr
    );
}

/// Two engines over one store (a daemon and its successor, two replicas) both see the moment
/// come: the run resumes once, whichever of them takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_over_one_store_resume_the_run_once() {
    use agentprism::model::RunStatus;
    use agentprism::store::RunReads;

    let h = crate::engine::mock_harness();
    let second = engine_over(&h.root, json!({}), AutoResumePolicy::default());
    h.engine.start_timers();
    second.start_timers();
    let marker = h.root.with_file_name("failed-once");
    let script = format!(
        "export const meta = {{ name: 'twice', description: 'd', model: 'mock' }};\n\
         return await agent('work\\n@mock once {} usage_limit try again in 1 seconds');",
        marker.display()
    );
    let (run_id, paused) = h.run_to_end(&script).await;
    assert_eq!(paused["reason"], "usage_limit", "{paused:#}");
    assert!(paused["outcome"]["resumeAt"].is_string(), "{paused:#}");

    let deadline = std::time::Instant::now() + DEADLINE;
    let done = loop {
        let record = h.store.load_run(&run_id).await.expect("load");
        if record.status == RunStatus::Completed {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not completed: {:?}",
            record.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.generation, 2, "resumed exactly once");
    assert_eq!(done.auto_resume.count, 1);
    assert_eq!(done.auto_resume.due_at, None);
    h.engine.shutdown(Duration::from_secs(5)).await;
    second.shutdown(Duration::from_secs(5)).await;
}

/// A resume by the owner takes the timer and starts the count again; a stop takes it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_resuming_or_stopping_takes_the_timer() {
    use agentprism::engine::{ResumeRequest, StatusQuery};

    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    // The agent cannot reopen its session, so the owner's resume hits the limit again. No
    // timer loop runs here, and the moment is far anyway.
    let engine = engine_over(
        &dir.path().join("state"),
        json!({"MOCK_ACP_LOAD_SESSION": "0"}),
        AutoResumePolicy::default(),
    );
    let script = "export const meta = { name: 'owner', description: 'd', model: 'mock' };\n\
                  return await agent('work\\n@mock usage_limit try again in 600 seconds');";
    let run_id = start_to_end(&engine, &project, script).await;
    let store = engine.runs();
    let paused = serde_json::json!(
        engine
            .status(&run_id, &StatusQuery::default())
            .await
            .expect("status")
    );
    assert!(paused["outcome"]["resumeAt"].is_string(), "{paused:#}");
    let record = store.load_run(&run_id).await.expect("load");
    let first_due = record.auto_resume.due_at.expect("scheduled");
    assert_eq!(record.auto_resume.count, 0);

    engine
        .resume(ResumeRequest {
            run_id: Some(run_id.clone()),
            ..Default::default()
        })
        .await
        .expect("resumed by its owner");
    engine.wait(&run_id).await;
    let again = store.load_run(&run_id).await.expect("load");
    assert_eq!(again.generation, 2);
    assert_eq!(
        again.auto_resume.count, 0,
        "an owner's resume counts nothing"
    );
    let second_due = again
        .auto_resume
        .due_at
        .expect("paused again, scheduled again");
    assert_ne!(
        second_due, first_due,
        "a new moment, from the second failure"
    );

    let stopped = engine
        .stop(&run_id, None, &StatusQuery::default())
        .await
        .expect("stopped");
    assert_eq!(stopped.stopped, Some(true));
    let record = store.load_run(&run_id).await.expect("load");
    assert_eq!(record.auto_resume.due_at, None, "a stop takes the timer");
    let status = serde_json::json!(
        engine
            .status(&run_id, &StatusQuery::default())
            .await
            .expect("status")
    );
    assert!(status["outcome"].get("resumeAt").is_none(), "{status:#}");
    assert!(status["outcome"].get("autoResume").is_none(), "{status:#}");
    engine.shutdown(Duration::from_secs(5)).await;
}

/// An engine over the store at `root` whose `mock` backend has `mock_env`, with `policy`.
fn engine_over(
    root: &std::path::Path,
    mock_env: Value,
    policy: AutoResumePolicy,
) -> agentprism::engine::Engine {
    use std::sync::Arc;
    let mock = crate::support::context::mock_agent_binary();
    let env = agentprism::env::EnvSnapshot::from_pairs([
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        (
            "AGENTPRISM_BACKENDS".to_owned(),
            json!({"mock": {"command": mock, "env": mock_env}}).to_string(),
        ),
    ]);
    agentprism::engine::Engine::new(
        Arc::new(agentprism::store::SqliteStore::open(root).expect("a handle on the store")),
        Arc::new(agentprism::acp::AcpRunner::new(
            agentprism::acp::AcpConfig::from_env(&env).expect("acp config"),
        )),
        Arc::new(agentprism::acp::lookup::Backends::from_env(&env).expect("backends")),
        agentprism::engine::EngineConfig {
            probe: false,
            auto_resume: policy,
            ..agentprism::engine::EngineConfig::default()
        },
    )
}

/// A limit that lifts and comes back at once each time: the run resumes by itself as often
/// in a row as the process allows, then waits for its owner and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_resumes_in_a_row_are_capped() {
    use agentprism::engine::{RunRequest, ScriptInput, StatusQuery};
    use agentprism::model::RunStatus;

    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("state");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    // The agent cannot reopen its session: every run of the call sends the prompt that fails.
    let engine = engine_over(
        &root,
        json!({"MOCK_ACP_LOAD_SESSION": "0"}),
        AutoResumePolicy { max_resumes: 2 },
    );
    engine.start_timers();
    let script = "export const meta = { name: 'cap', description: 'd', model: 'mock' };\n\
                  return await agent('work\\n@mock usage_limit try again in 1 seconds');";
    let admission = engine
        .start(RunRequest {
            project_dir: project,
            script: ScriptInput::Inline(script.to_owned()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted");
    let run_id = admission.run_id;
    let store = engine.runs();
    let deadline = std::time::Instant::now() + DEADLINE;
    let record = loop {
        let record = store.load_run(&run_id).await.expect("load");
        if record.status == RunStatus::Paused && record.auto_resume.count == 2 {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "{record:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        record.generation, 3,
        "two automatic resumes after the first pause"
    );
    assert_eq!(
        record.auto_resume.due_at, None,
        "nothing scheduled past the cap"
    );
    let status = serde_json::json!(
        engine
            .status(&run_id, &StatusQuery::default())
            .await
            .expect("status")
    );
    let said = status["outcome"]["autoResume"].as_str().unwrap_or_default();
    assert!(said.contains("2 times in a row"), "{status:#}");
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Starts `script` on `engine` in `project` and waits for its generation to settle.
async fn start_to_end(
    engine: &agentprism::engine::Engine,
    project: &std::path::Path,
    script: &str,
) -> agentprism::model::RunId {
    let admission = engine
        .start(agentprism::engine::RunRequest {
            project_dir: project.to_path_buf(),
            script: agentprism::engine::ScriptInput::Inline(script.to_owned()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted");
    engine.wait(&admission.run_id).await;
    admission.run_id
}
