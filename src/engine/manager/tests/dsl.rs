//! Scripts run through the engine that pin the DSL's edges: rejections a script floats and
//! never handles, `checkpoint()` and helper options, `verify`'s lenses and `gate`'s
//! feedback, image attachments as content blocks, the `structuredOutputTool` flag, and
//! the agent timeout ceiling the limits echo. The runner answers at once and keeps every
//! turn's content blocks.

use std::time::Duration;

use super::*;

/// The ceiling these engines run under, so the echo is seen to be the configured one.
const CEILING: Duration = Duration::from_millis(123_456);

/// An engine on the recording instant runner, and that runner.
fn recording_world() -> (World, Arc<InstantRunner>) {
    let folder = tempfile::tempdir().expect("temp dir");
    let project = folder.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store = Arc::new(SqliteStore::open(&folder.path().join("state")).expect("open store"));
    let runner = InstantRunner::recording();
    let config = EngineConfig {
        home: Some(folder.path().to_path_buf()),
        probe: false,
        agent_timeout: CEILING,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        runner.clone(),
        Arc::new(NamedBackends::new(["claude"])),
        config,
    );
    let world = World {
        _folder: folder,
        project,
        store,
        engine,
    };
    (world, runner)
}

impl World {
    /// Starts `script`; the refusal's message when preparation refuses it.
    async fn refusal(&self, script: &str) -> String {
        let refused = self
            .engine
            .start(RunRequest {
                project_dir: self.project.clone(),
                script: ScriptInput::Inline(script.into()),
                args: json!({}),
                limits: Default::default(),
                caller: None,
                trace: None,
            })
            .await
            .expect_err("preparation refuses the script");
        refused.to_string()
    }

    /// The status document of a settled run.
    async fn document(&self, run_id: &RunId) -> Value {
        json!(
            self.engine
                .status(run_id, &StatusQuery::default())
                .await
                .expect("status")
        )
    }
}

/// A script with `body` after its meta.
fn script(body: &str) -> String {
    format!("export const meta = {{ name: 'dsl', description: 'd', model: 'claude' }};\n{body}")
}

/// The text blocks of every turn, one string per turn.
fn prompts(runner: &InstantRunner) -> Vec<String> {
    runner
        .turns()
        .iter()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

#[tokio::test]
async fn a_rejection_floated_before_the_first_await_fails_the_script() {
    let (world, _) = recording_world();
    let message = world
        .refusal(&script(
            "Promise.reject(new Error('floated early'));\nreturn await agent('hi');",
        ))
        .await;
    assert!(
        message.contains("unhandled promise rejection: floated early"),
        "{message}"
    );
    // Nothing awaited at all: the script returns in the same slice it floated in.
    let message = world
        .refusal(&script(
            "Promise.reject(new Error('never awaited'));\nreturn 1;",
        ))
        .await;
    assert!(
        message.contains("unhandled promise rejection: never awaited"),
        "{message}"
    );
}

/// The dry run's agents answer differently from the live ones, so these scripts pass
/// preparation and float their rejection only when they run.
#[tokio::test]
async fn a_rejection_floated_after_an_await_fails_the_run() {
    let (world, _) = recording_world();
    let float = "if (a.startsWith('ECHO')) Promise.reject(new Error('floated late'));";
    for body in [
        format!("const a = await agent('one');\n{float}\nreturn a;"),
        format!("const a = await agent('one');\nawait null;\n{float}\nreturn {{a}};"),
        format!("const a = await agent('one');\n{float}\nreturn await agent('two');"),
    ] {
        let run_id = world.settled(&script(&body)).await;
        let document = world.document(&run_id).await;
        assert_eq!(document["status"], "failed", "{body}: {document:#}");
        assert_eq!(document["errorCode"], "SCRIPT_ERROR", "{body}");
        let message = document["outcome"]["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains("unhandled promise rejection: floated late"),
            "{body}: {message}"
        );
    }
    // A script that ends with its own error fails with that one.
    let own = format!(
        "const a = await agent('one');\n{float}\nif (a.startsWith('ECHO')) throw new Error('own');\nreturn a;"
    );
    let run_id = world.settled(&script(&own)).await;
    let message = world.document(&run_id).await["outcome"]["error"]["message"].clone();
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.contains("own") && !m.contains("floated")),
        "{message}"
    );
    // A handler added only after the script waited for an agent comes too late; one added
    // before it waits is in time.
    let handled = "const p = Promise.reject(new Error('x'));\nconst a = await agent('one');\n\
                   p.catch(() => {});\nreturn a;";
    let message = world.refusal(&script(handled)).await;
    assert!(
        message.contains("unhandled promise rejection: x"),
        "{message}"
    );
    let caught = "const p = Promise.reject(new Error('x'));\np.catch(() => {});\n\
                  return await agent('one');";
    let run_id = world.settled(&script(caught)).await;
    assert_eq!(world.document(&run_id).await["status"], "completed");
}

#[tokio::test]
async fn unknown_checkpoint_options_are_refused_by_name() {
    let (world, _) = recording_world();
    let message = world
        .refusal(&script(
            "return await checkpoint('ship it?', {headless: true});",
        ))
        .await;
    assert!(
        message.contains(
            "checkpoint() option \"headless\" is not known: there is no `headless` or `default` checkpoint option"
        ),
        "{message}"
    );
    assert!(
        message.contains("Known options: kind, choices"),
        "{message}"
    );
    let message = world
        .refusal(&script(
            "return await checkpoint('ship it?', {kidn: 'input'});",
        ))
        .await;
    assert!(
        message.contains("checkpoint() option \"kidn\" is not known; known options: kind, choices"),
        "{message}"
    );
}

/// `structuredOutputTool: false` reaches the routed backend, so its calls are offered no
/// `StructuredOutput` tool; `true` and leaving it out both offer it.
#[test]
fn a_backends_structured_output_tool_flag_reaches_its_spec() {
    let script = crate::engine::script::analyze(
        b"export const meta = { name: 'dsl', description: 'd', model: 'off', backends: { \
          off: { command: 'a', structuredOutputTool: false }, \
          on: { command: 'b', structuredOutputTool: true }, bare: { command: 'c' } } };\n\
          return await agent('hi');",
    )
    .expect("the script is accepted");
    let backends = crate::engine::prepare::declared_backends(&script);
    assert!(!backends["off"].structured_output_tool);
    assert!(backends["on"].structured_output_tool);
    assert!(backends["bare"].structured_output_tool);
}

#[tokio::test]
async fn verify_gives_each_reviewer_the_next_lens() {
    let (world, runner) = recording_world();
    let run_id = world
        .settled(&script(
            "return await verify('the cache is safe', {reviewers: 3, lens: ['security', 'speed']});",
        ))
        .await;
    assert_eq!(world.document(&run_id).await["status"], "completed");
    let mut lenses: Vec<String> = prompts(&runner)
        .iter()
        .map(|prompt| {
            let line = prompt
                .lines()
                .find(|line| line.starts_with("Focus on: "))
                .unwrap_or_else(|| panic!("no lens in {prompt}"));
            line.trim_start_matches("Focus on: ").to_owned()
        })
        .collect();
    lenses.sort();
    assert_eq!(lenses, ["security", "security", "speed"]);
}

#[tokio::test]
async fn helper_options_are_checked_by_name_and_value() {
    let (world, _) = recording_world();
    for (body, expected) in [
        (
            "return await verify('x', {reviewer: 3});",
            "verify() option \"reviewer\" is not known; known options: reviewers, threshold, lens",
        ),
        (
            "return await verify('x', {lens: ['a', 2]});",
            "verify() option lens must be a non-empty string or a non-empty array of them",
        ),
        (
            "return await verify('x', {threshold: 2});",
            "verify() option threshold must be a number from 0 to 1, got 2",
        ),
        (
            "return await judgePanel(['a'], {judges: 0});",
            "judgePanel() option judges must be a whole number of at least 1, got 0",
        ),
        (
            "return await gate(async () => 1, () => true, {attempts: 0});",
            "gate() option attempts must be a whole number of at least 1, got 0",
        ),
        (
            "return await retry(async () => 1, {tries: 2});",
            "retry() option \"tries\" is not known; known options: attempts, until",
        ),
    ] {
        let message = world.refusal(&script(body)).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
}

/// `gate` hands the next attempt the failed verdict's `feedback`, nothing else: not the
/// `false` of a boolean verdict, not a verdict object without `feedback`.
#[tokio::test]
async fn gate_passes_on_only_a_verdicts_feedback() {
    let (world, _) = recording_world();
    let body = "const seen = [];\n\
        const verdicts = [false, {ok: false}, {ok: false, feedback: 'shorter'}, undefined, true];\n\
        const result = await gate(async (feedback, i) => { seen.push(feedback === undefined ? 'none' : feedback); return i; },\n\
                                  (value) => verdicts[value], {attempts: 5});\n\
        const last = await gate(async () => 1, () => undefined, {attempts: 1});\n\
        return {seen, result, last};";
    let run_id = world.settled(&script(body)).await;
    let document = world.document(&run_id).await;
    assert_eq!(
        document["outcome"]["result"],
        json!({
            "seen": ["none", "none", "none", "shorter", "none"],
            "result": {"ok": true, "value": 4, "verdict": true, "attempts": 5},
            "last": {"ok": false, "value": 1, "verdict": null, "attempts": 1}
        }),
        "{document:#}"
    );
}

#[tokio::test]
async fn images_go_to_the_agent_as_acp_image_blocks() {
    let (world, runner) = recording_world();
    let run_id = world
        .settled(&script(
            "return await agent('describe', {images: [{data: 'iVBORw0KGgo=', mimeType: 'image/png'}, \
             {data: 'R0lGOD==', mimeType: 'image/gif', uri: 'file:///shot.gif'}]});",
        ))
        .await;
    assert_eq!(world.document(&run_id).await["status"], "completed");
    let turns = runner.turns();
    assert_eq!(turns.len(), 1);
    assert_eq!(
        turns[0][1..],
        [
            json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
            json!({"type": "image", "data": "R0lGOD==", "mimeType": "image/gif", "uri": "file:///shot.gif"}),
        ]
    );
    let message = world
        .refusal(&script(
            "return await agent('describe', {images: [{data: 'iVBORw0KGgo=', mimeType: 'image/png'}, {path: '/shot.png'}]});",
        ))
        .await;
    assert!(
        message.contains("agent() option images[1] has an unknown field \"path\""),
        "{message}"
    );
}

/// The limits echo the per-attempt ceiling every call runs under, at admission, in status
/// and after a resume.
#[tokio::test]
async fn the_limits_show_the_agent_timeout_in_force() {
    let (world, _) = recording_world();
    let admission = world
        .engine
        .start(RunRequest {
            project_dir: world.project.clone(),
            script: ScriptInput::Inline(CHECKPOINT.into()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted");
    let ceiling = CEILING.as_millis() as u64;
    assert_eq!(admission.limits.to_json()["agentTimeoutMs"], ceiling);
    world.engine.wait(&admission.run_id).await;
    let document = world.document(&admission.run_id).await;
    assert_eq!(document["status"], "paused");
    assert_eq!(document["limits"]["agentTimeoutMs"], ceiling);
    let resumed = world
        .engine
        .resume(World::resume_request(
            &admission.run_id,
            vec![(0, json!(true))],
        ))
        .await
        .expect("resumed");
    assert_eq!(resumed.limits.to_json()["agentTimeoutMs"], ceiling);
    world.engine.wait(&admission.run_id).await;
    let document = world.document(&admission.run_id).await;
    assert_eq!(document["status"], "completed");
    assert_eq!(document["limits"]["agentTimeoutMs"], ceiling);
}

/// `keepSession: false`, a null `isolation` and a definition without
/// isolation run as before, and a call's inputs hash still covers both keys as null/false.
#[tokio::test]
async fn calls_without_isolation_or_kept_sessions_run_as_before() {
    let (world, runner) = recording_world();
    let agents = world.project.join(".agentprism").join("agents");
    std::fs::create_dir_all(&agents).expect("agents dir");
    std::fs::write(agents.join("plain.md"), "---\ntools: Read\n---\nYou fix.\n")
        .expect("write definition");
    let run_id = world
        .settled(&script(
            "return await agent('fix it', {keepSession: false, isolation: null, \
             agentType: 'plain', label: 'fixer'});",
        ))
        .await;
    assert_eq!(world.document(&run_id).await["status"], "completed");
    assert_eq!(runner.turns().len(), 1);
    let calls = world.store.calls(&run_id).await.expect("calls");
    let inputs = json!({
        "cwd": world.project.to_string_lossy(),
        "isolation": null,
        "keepSession": false,
        "images": null,
        "mcpServers": null,
        "meta": null,
        "promptMeta": null,
        "label": "fixer",
        "backends": null,
    });
    assert_eq!(
        calls[0].inputs_hash.as_deref(),
        Some(crate::engine::journal::inputs_hash(&inputs).as_str())
    );
}
