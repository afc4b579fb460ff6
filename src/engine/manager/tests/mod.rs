//! Tests of the engine's answers and errors through its API, on the instant runner and a
//! real store: the JSON the answers serialise to, and stored records that do not parse.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::resume::resume_digest;
use super::*;
use crate::engine::instant::InstantRunner;
use crate::engine::routing::NamedBackends;
use crate::engine::{ScriptInput, StatusQuery};
use crate::model::{Lease, OperationReceipt, RunRecord, RunStatus};
use crate::store::sqlite::DATABASE_FILE;
use crate::store::{
    Answers, Calls, Fence, LeaseReads, Leases, Runs, ScriptChange, SqliteStore, StoreError,
};

mod budget;
mod dsl;
mod generations;
mod isolation;
mod notices;
mod retry;
mod starting;

struct World {
    _folder: tempfile::TempDir,
    project: PathBuf,
    store: Arc<SqliteStore>,
    engine: Engine,
}

fn world() -> World {
    world_with(InstantRunner::new())
}

/// A world whose agent calls go to `runner`.
fn world_with(runner: Arc<dyn AgentRunner>) -> World {
    let folder = tempfile::tempdir().expect("temp dir");
    let project = folder.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store = Arc::new(SqliteStore::open(&folder.path().join("state")).expect("open store"));
    let config = EngineConfig {
        home: Some(folder.path().to_path_buf()),
        probe: false,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        runner,
        Arc::new(NamedBackends::new(["claude"])),
        config,
    );
    World {
        _folder: folder,
        project,
        store,
        engine,
    }
}

const CHECKPOINT: &str = "export const meta = { name: 'c', description: 'd', model: 'claude' };\nconst ok = await checkpoint('go?');\nreturn await agent('after ' + ok);";
const ONE_CALL: &str = "export const meta = { name: 'a', description: 'd', model: 'claude' };\nreturn await agent('hi');";

impl World {
    /// Runs `script` until it settles.
    async fn settled(&self, script: &str) -> RunId {
        let admission = self
            .admit(script, Default::default())
            .await
            .expect("admitted");
        self.engine.wait(&admission.run_id).await;
        admission.run_id
    }

    /// Starts `script` in the world's project under `limits`.
    async fn admit(&self, script: &str, limits: LimitOverrides) -> EngineResult<Admission> {
        self.engine
            .start(RunRequest {
                project_dir: self.project.clone(),
                script: ScriptInput::Inline(script.into()),
                args: json!({}),
                limits,
                caller: None,
                trace: None,
            })
            .await
    }

    /// The database file under the world's state folder, for what the typed store cannot
    /// write: a stored value that does not fit the run model.
    fn database(&self) -> rusqlite::Connection {
        let database = self._folder.path().join("state").join(DATABASE_FILE);
        rusqlite::Connection::open(database).expect("open the database")
    }

    /// Rewrites one JSON column of the run's row through `change` of its parsed value, as a
    /// damaged database or a foreign writer would leave it.
    fn tamper_column(&self, run_id: &RunId, column: &str, change: impl FnOnce(&mut Value)) {
        let connection = self.database();
        let select = format!("SELECT {column} FROM runs WHERE run_id = ?1");
        let text: String = connection
            .query_row(&select, [run_id.as_str()], |row| row.get(0))
            .expect("read the column");
        let mut value: Value = serde_json::from_str(&text).expect("stored JSON");
        change(&mut value);
        let update = format!("UPDATE runs SET {column} = ?1 WHERE run_id = ?2");
        let changed = connection
            .execute(&update, [value.to_string().as_str(), run_id.as_str()])
            .expect("write the column");
        assert_eq!(changed, 1, "one row tampered");
    }

    /// Rewrites the stored run row through `change`, under a lease of its own.
    async fn tamper(&self, run_id: &RunId, change: impl FnOnce(&mut RunRecord)) {
        let previous = self.store.lease(run_id).await.expect("lease");
        let lease = Lease {
            owner_id: "tamper".into(),
            pid: std::process::id(),
            proc_start: 0,
            boot_id: None,
            host: None,
            token: "tamper".into(),
            acquired_at: 0,
            expires_at: None,
        };
        let expected = previous.as_ref().map(|l| l.token.as_str());
        assert!(
            self.store
                .acquire_lease(run_id, expected, &lease)
                .await
                .expect("acquire")
        );
        let mut record = self.store.load_run(run_id).await.expect("load");
        change(&mut record);
        self.store
            .update_run(&record, ScriptChange::Unchanged, Fence("tamper"))
            .await
            .expect("update");
        self.store
            .release_lease(run_id, "tamper")
            .await
            .expect("release");
    }

    fn resume_request(run_id: &RunId, replies: Vec<(u32, Value)>) -> ResumeRequest {
        ResumeRequest {
            run_id: Some(run_id.clone()),
            checkpoint_replies: replies,
            ..ResumeRequest::default()
        }
    }
}

fn corrupt_message(error: EngineError) -> String {
    match error {
        EngineError::Store(StoreError::Corrupt(message)) => message,
        other => panic!("expected a corrupt record, got {other:?}"),
    }
}

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// A stored routing snapshot that is not one fails the resume as a corrupt row naming its
/// column, never an empty snapshot routing the run anew; nothing is written.
#[tokio::test]
async fn a_corrupt_routing_snapshot_fails_the_resume_instead_of_routing_anew() {
    let world = world();
    let run_id = world.settled(CHECKPOINT).await;
    world.tamper_column(&run_id, "routing", |routing| {
        *routing = json!("not a snapshot");
    });
    let error = world
        .engine
        .resume(World::resume_request(&run_id, vec![(0, json!(true))]))
        .await
        .expect_err("a corrupt snapshot is an error");
    let message = corrupt_message(error);
    assert!(
        message.starts_with(&format!("run {run_id}: column runs.routing: ")),
        "{message}"
    );
    let (status, generation): (String, u32) = world
        .database()
        .query_row(
            "SELECT status, generation FROM runs WHERE run_id = ?1",
            [run_id.as_str()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("read the row");
    assert_eq!((status.as_str(), generation), ("paused", 1));
}

/// The checkpoint a run waits on is stored with its hash; one without is a corrupt row
/// naming the column and the missing key, not an answer matched to nothing.
#[tokio::test]
async fn a_waiting_checkpoint_without_its_hash_is_a_corrupt_record() {
    let world = world();
    let run_id = world.settled(CHECKPOINT).await;
    world.tamper_column(&run_id, "checkpoint_context", |context| {
        context.as_object_mut().expect("an object").remove("hash");
    });
    let error = world
        .engine
        .resume(World::resume_request(&run_id, vec![(0, json!(true))]))
        .await
        .expect_err("no hash to match the answer to");
    let message = corrupt_message(error);
    assert!(
        message.starts_with(&format!("run {run_id}: column runs.checkpoint_context: "))
            && message.contains("missing field `hash`"),
        "{message}"
    );
}

/// A stored checkpoint of a kind the engine does not have is corrupt, not a `confirm`.
#[tokio::test]
async fn a_waiting_checkpoint_of_an_unknown_kind_is_a_corrupt_record() {
    let world = world();
    let run_id = world.settled(CHECKPOINT).await;
    world.tamper_column(&run_id, "checkpoint_context", |context| {
        context["kind"] = json!("pick");
    });
    let error = world
        .engine
        .status(&run_id, &StatusQuery::default())
        .await
        .expect_err("an unknown kind");
    let message = corrupt_message(error);
    assert!(
        message.starts_with(&format!("run {run_id}: column runs.checkpoint_context: "))
            && message.contains("pick"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unreadable_receipt_is_a_corrupt_record() {
    let world = world();
    let run_id = world.settled(ONE_CALL).await;
    let request = ResumeRequest {
        operation_id: Some("op-1".into()),
        ..World::resume_request(&run_id, Vec::new())
    };
    let receipt = OperationReceipt {
        operation_id: "op-1".into(),
        generation: 1,
        input_digest: resume_digest(&request),
        response: json!({"runId": 7}),
        created_at: 0,
    };
    // Receipts are written under a lease, as a resume writes them.
    let lease = crate::store::contract::lease("receipt-writer");
    let store = &world.store;
    assert!(
        store
            .acquire_lease(&run_id, None, &lease)
            .await
            .expect("lease")
    );
    store
        .put_receipt(&run_id, &receipt, crate::store::Fence(&lease.token))
        .await
        .expect("receipt");
    store
        .release_lease(&run_id, &lease.token)
        .await
        .expect("release");
    let error = world.engine.resume(request).await.expect_err("unreadable");
    assert_eq!(
        corrupt_message(error),
        format!("run {run_id}: the receipt of operation op-1: it does not parse as an admission")
    );
}

#[tokio::test]
async fn refusals_carry_their_kind_and_the_field_they_name() {
    let world = world();
    let run_id = world.settled(ONE_CALL).await;
    let kind = |error: EngineError| match error {
        EngineError::Rejected(rejected) => rejected,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let completed = kind(
        world
            .engine
            .resume(World::resume_request(&run_id, Vec::new()))
            .await
            .expect_err("completed"),
    );
    assert!(matches!(completed, Rejected::Conflict(_)), "{completed:?}");
    let offset = kind(
        world
            .engine
            .result_page(&run_id, 99, 10)
            .await
            .expect_err("past the end"),
    );
    assert_eq!(offset.field(), Some("offset"));
    let no_run_id = kind(
        world
            .engine
            .resume(ResumeRequest::default())
            .await
            .expect_err("no id"),
    );
    assert_eq!(no_run_id.field(), Some("runId"));
    let forced = world
        .engine
        .stop_with(&run_id, Some(0), true, &StatusQuery::default())
        .await
        .expect_err("forceOwner with callIndex");
    assert_eq!(kind(forced).field(), Some("forceOwner"));
    let no_route = world
        .engine
        .start(RunRequest {
            project_dir: world.project.clone(),
            script: ScriptInput::Inline(
                "export const meta = { name: 'x', description: 'd' };\nreturn await agent('x');"
                    .into(),
            ),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect_err("no route");
    let no_route = kind(no_route);
    assert!(matches!(no_route, Rejected::Routing(_)), "{no_route:?}");
    assert!(
        no_route
            .to_string()
            .starts_with("missing routing: agent call has no route: agent 0@0 (")
    );
}

#[tokio::test]
async fn the_answers_serialise_in_the_documented_order() {
    let world = world();
    let run_id = world.settled(ONE_CALL).await;
    let query = StatusQuery::default();
    let status = json!(world.engine.status(&run_id, &query).await.expect("status"));
    let head = [
        "runId",
        "status",
        "workflowName",
        "limits",
        "scriptUri",
        "scriptPath",
        "eventsUri",
        "generation",
        "startedAt",
        "updatedAt",
        "tokenUsage",
        "summary",
        "resultUri",
        "filter",
        "calls",
        "phases",
        "logTail",
        "truncation",
        "outcome",
    ];
    assert_eq!(keys(&status), head);
    assert_eq!(
        keys(&status["calls"][0]),
        [
            "index",
            "kind",
            "label",
            "phase",
            "model",
            "backendId",
            "resultPreview",
            "resultRedacted",
            "resultTruncated",
            "attempts"
        ]
    );
    assert_eq!(keys(&status["outcome"]), ["result", "logs"]);
    let stopped = json!(
        world
            .engine
            .stop(&run_id, None, &query)
            .await
            .expect("stop")
    );
    let mut stop_keys = head.to_vec();
    stop_keys.extend(["stopped", "alreadyTerminal"]);
    assert_eq!(keys(&stopped), stop_keys);
    let paused = json!(world.engine.pause(&run_id, &query).await.expect("pause"));
    let mut pause_keys = head.to_vec();
    pause_keys.extend(["pauseRequested", "paused"]);
    assert_eq!(keys(&paused), pause_keys);
    let page = json!(world.engine.result_page(&run_id, 0, 4).await.expect("page"));
    assert_eq!(
        keys(&page),
        [
            "action",
            "runId",
            "status",
            "resultUri",
            "eventsUri",
            "mimeType",
            "encoding",
            "totalBytes",
            "offset",
            "endOffset",
            "hasMore",
            "chunk"
        ]
    );
    assert_eq!(page["chunk"], "\"ECH");
}

/// Sources held in memory: files no disk holds, so a run that finds them read them here.
#[derive(Default)]
struct MemorySources {
    files: std::collections::BTreeMap<PathBuf, String>,
    reads: std::sync::Mutex<Vec<PathBuf>>,
}

impl MemorySources {
    fn get(&self, path: &Path) -> Result<crate::engine::sources::Contents, FileError> {
        self.reads.locked().push(path.to_path_buf());
        match self.files.get(path) {
            Some(text) => Ok(crate::engine::sources::Contents {
                path: path.to_path_buf(),
                bytes: text.clone().into_bytes(),
            }),
            None => Err(FileError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Sources for MemorySources {
    async fn read_script(
        &self,
        path: &Path,
    ) -> Result<crate::engine::sources::Contents, FileError> {
        self.get(path)
    }

    async fn reread_script(
        &self,
        path: &Path,
    ) -> Result<crate::engine::sources::Contents, FileError> {
        self.get(path)
    }

    fn read_companion(
        &self,
        path: &Path,
        _limit: u64,
    ) -> Result<crate::engine::sources::Contents, FileError> {
        self.get(path)
    }

    fn companions(&self, folder: &Path, extension: &str) -> Vec<PathBuf> {
        self.files
            .keys()
            .filter(|path| path.parent() == Some(folder))
            .filter(|path| path.extension().and_then(|e| e.to_str()) == Some(extension))
            .cloned()
            .collect()
    }
    fn read_project_file(
        &self,
        project_dir: &Path,
        relative: &str,
        _limit: u64,
    ) -> Result<crate::engine::sources::Contents, crate::engine::sources::SourceError> {
        Ok(self.get(&project_dir.join(relative))?)
    }
}

use crate::engine::sources::{FileError, Sources};
use crate::util::sync::Lock;

#[tokio::test]
async fn scripts_saved_workflows_and_agent_definitions_come_through_the_sources_port() {
    let world = world();
    let script = PathBuf::from("/nowhere/flow.js");
    let helper = world.project.join(".agentprism/workflows/helper.js");
    let reviewer = world.project.join(".agentprism/agents/reviewer.md");
    let mut sources = MemorySources::default();
    sources.files.insert(
        script.clone(),
        "export const meta = { name: 'flow', description: 'd' };\nawait checkpoint('go?');\nreturn await workflow('helper');"
            .into(),
    );
    sources.files.insert(
        helper.clone(),
        "export const meta = { name: 'helper', description: 'd' };\nreturn await agent('look', {agentType: 'reviewer'});".into(),
    );
    sources.files.insert(
        reviewer.clone(),
        "---\nmodel: claude\n---\nYou review.\n".into(),
    );
    let sources = Arc::new(sources);
    let engine = Engine::with_sources(
        world.store.clone(),
        InstantRunner::new(),
        Arc::new(NamedBackends::new(["claude"])),
        sources.clone(),
        EngineConfig {
            probe: false,
            ..EngineConfig::default()
        },
    );
    let admission = engine
        .start(RunRequest {
            project_dir: world.project.clone(),
            script: ScriptInput::Path(script.clone()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted from memory");
    assert_eq!(admission.script_file, script);
    engine.wait(&admission.run_id).await;
    // The resume reads the recorded script back through the port to look for a revision.
    engine
        .resume(World::resume_request(
            &admission.run_id,
            vec![(0, json!(true))],
        ))
        .await
        .expect("resumed");
    engine.wait(&admission.run_id).await;
    let status = json!(
        engine
            .status(&admission.run_id, &StatusQuery::default())
            .await
            .expect("status")
    );
    assert_eq!(
        status["outcome"]["result"], "ECHO: You review.\n\nlook",
        "{status:#}"
    );
    let reads = sources.reads.locked().clone();
    let script_reads = reads.iter().filter(|path| **path == script).count();
    assert_eq!(script_reads, 2, "admission and resume: {reads:?}");
    for path in [&helper, &reviewer] {
        assert!(
            reads.contains(path),
            "{path:?} not read through the port: {reads:?}"
        );
    }
}

/// A stored setup request is matched to its answer by id; one without is a corrupt row
/// naming the column and the missing key.
#[tokio::test]
async fn a_setup_request_without_its_id_is_a_corrupt_record() {
    let world = world();
    let run_id = world
        .settled("export const meta = { name: 's', description: 'd', model: 'mine', backends: {mine: {command: 'mine-acp'}} };\nreturn await agent('x');")
        .await;
    world.tamper_column(&run_id, "setup", |setup| {
        setup["request"]
            .as_object_mut()
            .expect("a request")
            .remove("id");
    });
    let error = world
        .engine
        .setup_response(&run_id, "any", &json!({"action": "decline"}))
        .await
        .expect_err("no id to match");
    let message = corrupt_message(error);
    assert!(
        message.starts_with(&format!("run {run_id}: column runs.setup: "))
            && message.contains("missing field `id`"),
        "{message}"
    );
}

/// Without `labelGlob` status reads only the tail of the run's calls; the counts still say
/// how many there are, and a glob still sees every row of the generation.
#[tokio::test]
async fn status_counts_every_call_but_shows_the_last_ones() {
    let world = world();
    let script = "export const meta = { name: 'many', description: 'd', model: 'claude' };\n\
                  for (let i = 0; i < 30; i++) { await agent('p' + i, { label: (i < 10 ? 'early-' : 'late-') + i }); }\n\
                  return 'done';";
    let run_id = world.settled(script).await;
    let shown = |document: &Value| -> Vec<u64> {
        document["calls"]
            .as_array()
            .expect("calls")
            .iter()
            .map(|call| call["index"].as_u64().expect("index"))
            .collect()
    };
    let tail = StatusQuery {
        last_n: 5,
        ..StatusQuery::default()
    };
    let document = json!(world.engine.status(&run_id, &tail).await.expect("status"));
    assert_eq!(shown(&document), vec![25, 26, 27, 28, 29]);
    assert_eq!(
        document["truncation"]["calls"],
        json!({"total": 30, "matched": 30, "returned": 5, "shortenedResults": 0, "redactedResults": 0})
    );
    let early = StatusQuery {
        last_n: 3,
        label_glob: Some("early-*".into()),
        ..StatusQuery::default()
    };
    let document = json!(world.engine.status(&run_id, &early).await.expect("status"));
    assert_eq!(shown(&document), vec![7, 8, 9]);
    assert_eq!(document["truncation"]["calls"]["total"], 30);
    assert_eq!(document["truncation"]["calls"]["matched"], 10);
}

/// 60 calls with 512-byte results and 60 long log lines: asking for 50 and 50 shows 50
/// calls (their previews shortened to fit), never fewer than the default 20 and 20 shows.
#[tokio::test]
async fn asking_status_for_more_calls_and_lines_never_shows_fewer_calls() {
    let world = world();
    let script = "export const meta = { name: 'many', description: 'd', model: 'claude' };\n\
                  for (let i = 0; i < 60; i++) {\n\
                    await agent('answer ' + i + ' ' + 'x'.repeat(600));\n\
                    log('line ' + i + ' ' + 'l'.repeat(600));\n\
                  }\n\
                  return 'done';";
    let run_id = world.settled(script).await;
    let status = |last_n, log_lines| {
        let query = StatusQuery {
            last_n,
            log_lines,
            label_glob: None,
        };
        let engine = &world.engine;
        let run_id = &run_id;
        async move { json!(engine.status(run_id, &query).await.expect("status")) }
    };
    let default = status(20, 20).await;
    let most = status(50, 50).await;
    for document in [&default, &most] {
        let mut structured = document.clone();
        structured
            .as_object_mut()
            .expect("object")
            .remove("outcome");
        let bytes = serde_json::to_vec(&structured).expect("json").len();
        assert!(
            bytes <= crate::engine::status::MAX_STRUCTURED_BYTES,
            "{bytes}"
        );
    }
    let calls = |document: &Value| document["calls"].as_array().expect("calls").len();
    let lines = |document: &Value| {
        document["logTail"]["lines"]
            .as_array()
            .expect("lines")
            .len()
    };
    assert_eq!(calls(&default), 20, "{:#}", default["truncation"]);
    assert_eq!(calls(&most), 50, "{:#}", most["truncation"]);
    assert!(lines(&most) > 0, "{:#}", most["truncation"]);
    assert_eq!(most["truncation"]["byteCapApplied"], true);
    assert!(most["truncation"]["calls"]["shortenedResults"].as_u64() > Some(0));
    assert_eq!(most["calls"][49]["index"], 59, "the newest calls are shown");
}

/// A run whose execution died without recording its call count gets it recorded when the
/// run is found and paused as interrupted, so status need not count its rows afterwards.
#[tokio::test]
async fn an_interrupted_run_gets_its_call_count_recorded() {
    let world = world();
    let run_id = world.settled(ONE_CALL).await;
    let recorded = || {
        let database = world._folder.path().join("state").join(DATABASE_FILE);
        let connection = rusqlite::Connection::open(database).expect("open the database");
        let count: Option<i64> = rusqlite::OptionalExtension::optional(connection.query_row(
            "SELECT calls FROM call_tallies",
            [],
            |row| row.get(0),
        ))
        .expect("read call_tallies");
        count
    };
    assert_eq!(recorded(), Some(1), "the generation recorded its count");
    // As a generation that died mid-way leaves it: running, one more row, no count.
    world
        .tamper(&run_id, |record| record.status = RunStatus::Running)
        .await;
    let lease = Lease {
        owner_id: "gone".into(),
        pid: std::process::id(),
        proc_start: 0,
        boot_id: None,
        host: None,
        token: "gone".into(),
        acquired_at: 0,
        expires_at: None,
    };
    assert!(
        world
            .store
            .acquire_lease(&run_id, None, &lease)
            .await
            .expect("acquire")
    );
    let mut row = world.store.calls(&run_id).await.expect("calls")[0].clone();
    row.index = 1;
    row.settlement_ordinal = 1;
    let write = crate::store::CallWrite {
        record: &row,
        supersedes: &[],
        events: &[],
    };
    world
        .store
        .append_call(&run_id, write, Fence("gone"))
        .await
        .expect("append");
    world
        .store
        .release_lease(&run_id, "gone")
        .await
        .expect("release");
    assert_eq!(recorded(), None, "the new row dropped the count");
    let status = world
        .engine
        .status(&run_id, &StatusQuery::default())
        .await
        .expect("status");
    assert_eq!(status.status, RunStatus::Paused);
    assert_eq!(recorded(), Some(2));
}

/// A script that asks its host nothing settles with its dry run's result (no second VM);
/// one that logs, enters a phase, calls or nests is executed again. Both kinds end the same
/// way in the store: the result, `completed`, and a closing `complete` event.
#[tokio::test]
async fn only_a_script_that_asks_its_host_nothing_reuses_its_dry_run() {
    let world = world();
    let head = "export const meta = { name: 'q', description: 'd', model: 'claude' };\n";
    let known = |body: &str| {
        let script = ScriptInput::Inline(format!("{head}{body}"));
        let engine = world.engine.clone();
        let project = world.project.clone();
        async move {
            let prepared = engine
                .validate(&project, &script, json!({}))
                .await
                .expect("valid");
            prepared.known_result
        }
    };
    assert_eq!(
        known("return [1 + 1, args, file === undefined];").await,
        Some(Some(json!([2, {}, false])))
    );
    assert_eq!(known("const x = 1;").await, Some(None));
    for asks in [
        "log('hi'); return 1;",
        "phase('Read'); return 1;",
        "return await agent('hi');",
        "return await checkpoint('go?');",
        "try { await workflow('missing'); } catch (e) {} return 1;",
    ] {
        assert_eq!(known(asks).await, None, "{asks}");
    }
    for (body, expected) in [("return 6 * 7;", 42), ("log('x'); return 6 * 7;", 42)] {
        let run_id = world.settled(&format!("{head}{body}")).await;
        let record = world.store.load_run(&run_id).await.expect("load");
        assert_eq!(record.status, RunStatus::Completed, "{body}");
        assert_eq!(record.result, Some(json!(expected)), "{body}");
        let events = world.store.events(&run_id, 0, 100).await.expect("events");
        let kinds: Vec<_> = events.iter().filter_map(|e| e.event.event_type()).collect();
        let (last, logs) = (kinds.last().map(|k| &**k), kinds.contains(&"log".into()));
        assert_eq!(last, Some("complete"), "{body}: {kinds:?}");
        assert_eq!(logs, body.contains("log("), "{kinds:?}");
        // The known result's generation starts its sequence at 0 without reading it back,
        // exactly where an executed one that reads it starts: 1, 2, ... with no gap.
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let expected_seqs: Vec<u64> = (1..=events.len() as u64).collect();
        assert_eq!(seqs, expected_seqs, "{body}");
    }
}
