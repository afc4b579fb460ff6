//! Isolated calls through the engine with real git: each call runs in a worktree of its own
//! under the state folder, what it wrote lands on its own branch and nowhere in the user's
//! tree, `isolated()` answers with the changes and a bounded diff, a replay touches no git
//! state, a folder git cannot isolate is refused at admission, and the start-up sweep
//! removes what ended runs left. The runner writes the file a prompt names into its
//! session's `cwd`, as a coding agent edits its tree.

use std::process::Command;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, ProbeReport, SessionSpec, StopReason,
    TurnOutput, TurnRequest,
};
use crate::model::{BackendSpec, CallChanges, Usage};
use crate::util::sync::Lock;
use crate::workspace::GitWorkspaces;

/// Answers `write NAME TEXT` by writing TEXT to NAME in its session's cwd, and anything
/// else by echoing; keeps every session's cwd and the session it was asked to reopen. A
/// prompt line `limit once` fails the first turn that sees it with a usage limit.
#[derive(Default)]
struct EditingRunner {
    cwds: std::sync::Mutex<Vec<PathBuf>>,
    reopened: std::sync::Mutex<Vec<Option<String>>>,
    limited: Arc<std::sync::atomic::AtomicBool>,
}

struct EditingSession {
    cwd: PathBuf,
    limited: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl AgentRunner for EditingRunner {
    async fn open_session(
        &self,
        spec: SessionSpec,
        _observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        self.cwds.locked().push(spec.cwd.clone());
        self.reopened.locked().push(spec.resume_session.clone());
        Ok(Box::new(EditingSession {
            cwd: spec.cwd,
            limited: self.limited.clone(),
        }))
    }

    async fn probe(&self, backend: &BackendSpec, _model: Option<&str>, _cwd: &Path) -> ProbeReport {
        ProbeReport {
            backend: backend.id.clone(),
            started: true,
            probed: true,
            ..ProbeReport::default()
        }
    }

    async fn shutdown(&self, _deadline: std::time::Duration) {}
}

#[async_trait]
impl AgentSession for EditingSession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        _cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        let text = turn.prompt[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text.lines().any(|line| line == "limit once")
            && !self.limited.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(AgentFailure::new(
                crate::engine::runner::FailureKind::UsageLimit,
                "usage limit reached",
            ));
        }
        // The last line: a definition's role prompt comes before the call's prompt.
        let line = text.lines().last().unwrap_or_default();
        let mut words = line.splitn(3, ' ');
        let reply = match (words.next(), words.next(), words.next()) {
            (Some("write"), Some(name), Some(content)) => {
                std::fs::write(self.cwd.join(name), format!("{content}\n")).unwrap();
                format!("wrote {name}")
            }
            _ => format!("ECHO: {text}"),
        };
        Ok(TurnOutput {
            text: reply,
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 2,
                total_tokens: 5,
                cost_usd: None,
            },
        })
    }

    fn session_ref(&self) -> Option<Value> {
        Some(json!({"backendId": "editing", "sessionId": "editing-1"}))
    }

    async fn close(self: Box<Self>) {}
}

/// An engine over `EditingRunner` whose project is a git repository with one commit (a
/// README) unless `git` is false.
fn isolation_world(git: bool) -> (World, Arc<EditingRunner>) {
    let folder = tempfile::tempdir().expect("temp dir");
    let project = folder.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    if git {
        run_git(&project, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(project.join("README.md"), "hello\n").unwrap();
        run_git(&project, &["add", "README.md"]);
        run_git(&project, &["commit", "--quiet", "-m", "start"]);
    }
    let state = folder.path().join("state");
    let store = Arc::new(SqliteStore::open(&state).expect("open store"));
    let runner = Arc::new(EditingRunner::default());
    let config = EngineConfig {
        home: Some(folder.path().to_path_buf()),
        probe: false,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        runner.clone(),
        Arc::new(NamedBackends::new(["claude"])),
        config,
    );
    engine.set_workspaces(Arc::new(GitWorkspaces::new(&state)));
    let world = World {
        _folder: folder,
        project,
        store,
        engine,
    };
    (world, runner)
}

fn run_git(folder: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(folder)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

fn script(body: &str) -> String {
    format!("export const meta = {{ name: 'iso', description: 'd', model: 'claude' }};\n{body}")
}

impl World {
    fn state(&self) -> PathBuf {
        self._folder.path().join("state")
    }

    /// Our branches, sorted.
    fn branches(&self) -> Vec<String> {
        let listed = run_git(
            &self.project,
            &[
                "branch",
                "--list",
                "agentprism/*",
                "--format=%(refname:short)",
            ],
        );
        let mut branches: Vec<String> = listed.lines().map(str::to_owned).collect();
        branches.sort();
        branches
    }

    fn worktrees(&self) -> usize {
        run_git(&self.project, &["worktree", "list", "--porcelain"])
            .lines()
            .filter(|line| line.starts_with("worktree "))
            .count()
    }

    /// Whatever is left under the state folder's worktrees.
    fn leftovers(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.state().join("worktrees")) {
            Ok(entries) => entries.flatten().map(|entry| entry.path()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Four isolated calls at once: each ran in its own worktree under the state folder, each
/// branch holds exactly its call's file, the user's tree is untouched, and nothing of ours
/// is left in `git worktree list` or under the state folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_isolated_calls_each_commit_on_a_branch_of_their_own() {
    let (world, runner) = isolation_world(true);
    let run_id = world
        .settled(&script(
            "return await parallel([0, 1, 2, 3].map((i) => () => \
               agent('write file' + i + '.txt from call ' + i, \
                     {isolation: 'worktree', label: 'edit ' + i})));",
        ))
        .await;
    let status = json!(
        world
            .engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(status["status"], "completed", "{status}");

    let cwds = runner.cwds.locked().clone();
    assert_eq!(cwds.len(), 4);
    let mut distinct = cwds.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "no two calls share a tree: {cwds:?}");
    for cwd in &cwds {
        assert!(cwd.starts_with(world.state().join("worktrees")), "{cwd:?}");
    }
    for i in 0..4 {
        assert!(!world.project.join(format!("file{i}.txt")).exists());
    }
    assert_eq!(run_git(&world.project, &["status", "--porcelain"]), "");

    let branches = world.branches();
    assert_eq!(branches.len(), 4, "{branches:?}");
    let calls = world.store.calls(&run_id).await.unwrap();
    for call in &calls {
        let changes: &CallChanges = call.changes.as_ref().expect("an isolated call's changes");
        let branch = changes.branch.as_ref().expect("a branch");
        assert!(branches.contains(branch));
        assert!(branch.starts_with(&format!("agentprism/{run_id}/{}-edit-", call.index)));
        assert_eq!(
            (changes.files_changed, changes.insertions, changes.deletions),
            (1, 1, 0)
        );
        let files = run_git(
            &world.project,
            &[
                "diff",
                "--name-only",
                &changes.base_commit,
                &changes.head_commit,
            ],
        );
        let i = call.label.as_deref().unwrap().trim_start_matches("edit ");
        assert_eq!(files, format!("file{i}.txt\n"));
        assert!(call.resolved_cwd.is_some());
    }
    assert_eq!(world.worktrees(), 1);
    assert!(world.leftovers().is_empty(), "{:?}", world.leftovers());

    let events = world
        .engine
        .events()
        .events(&run_id, 0, 1000)
        .await
        .unwrap();
    let ends: Vec<Value> = events
        .iter()
        .map(|record| record.event.value())
        .filter(|event| event["type"] == "agentEnd")
        .collect();
    assert_eq!(ends.len(), 4);
    for end in ends {
        assert_eq!(end["changes"]["filesChanged"], 1, "{end}");
    }
}

/// Sixteen isolated calls started at once all succeed, each on a branch of its own: git's
/// own locks make none of them fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_isolated_calls_at_once_all_succeed() {
    let (world, runner) = isolation_world(true);
    let sixteen = LimitOverrides {
        concurrency: Some(16),
        ..LimitOverrides::default()
    };
    let admission = world
        .admit(
            &script(
                "return await parallel(Array.from({length: 16}, (_, i) => () => \
                   agent('write f' + i + '.txt ' + i, {isolation: 'worktree', label: 'f' + i})));",
            ),
            sixteen,
        )
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let record = world.store.load_run(&admission.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed, "{record:?}");
    let calls = world.store.calls(&admission.run_id).await.unwrap();
    assert_eq!(calls.len(), 16);
    assert!(calls.iter().all(|call| call.error.is_none()), "{calls:?}");
    assert_eq!(world.branches().len(), 16);
    assert_eq!(runner.cwds.locked().len(), 16);
    assert_eq!(world.worktrees(), 1);
    assert!(world.leftovers().is_empty());
}

/// `isolated()` answers with the agent's answer, the changes and a diff cut to its bound;
/// a call that changes nothing leaves no branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_answers_with_its_changes_and_a_bounded_diff() {
    let (world, _runner) = isolation_world(true);
    let run_id = world
        .settled(&script(
            "const wrote = await isolated('write notes.txt ' + 'x'.repeat(500), {diffBytes: 200});\n\
             const idle = await isolated('look around', {label: 'idle'});\n\
             return {wrote, idle};",
        ))
        .await;
    let record = world.store.load_run(&run_id).await.unwrap();
    let result = record.result.expect("a result");
    let wrote = &result["wrote"];
    assert_eq!(wrote["result"], "wrote notes.txt");
    assert_eq!(wrote["changes"]["filesChanged"], 1);
    let diff = wrote["changes"]["diff"].as_str().unwrap();
    assert!(diff.len() <= 200, "{}", diff.len());
    assert!(diff.contains("notes.txt"), "{diff}");
    assert!(diff.contains("[diff cut:"), "{diff}");
    let idle = &result["idle"];
    assert_eq!(idle["changes"]["branch"], Value::Null);
    assert_eq!(idle["changes"]["diff"], "");
    assert_eq!(world.branches().len(), 1);
}

/// A replayed isolated call answers from the journal and touches no git state: the branch
/// deleted after the first generation stays deleted, and no agent runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_isolated_call_touches_no_git_state() {
    let (world, runner) = isolation_world(true);
    let admission = world
        .admit(
            &script(
                "const first = await isolated('write a.txt one');\n\
             const go = await checkpoint('go on?');\n\
             return first.changes.branch;",
            ),
            Default::default(),
        )
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let branch = world.branches().pop().expect("the first call's branch");
    run_git(&world.project, &["branch", "-D", &branch]);
    world
        .engine
        .resume(World::resume_request(
            &admission.run_id,
            vec![(1, json!(true))],
        ))
        .await
        .expect("resumed");
    world.engine.wait(&admission.run_id).await;
    let record = world.store.load_run(&admission.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed, "{record:?}");
    assert_eq!(record.result, Some(json!(branch)));
    assert_eq!(runner.cwds.locked().len(), 1, "the agent ran once");
    assert!(world.branches().is_empty());
    assert_eq!(world.worktrees(), 1);
}

/// A folder outside any git repository cannot isolate: the run is refused at admission,
/// naming the folder and what is needed, and nothing runs or is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_outside_a_repository_is_refused_at_admission() {
    let (world, runner) = isolation_world(false);
    let refused = world
        .admit(
            &script("return await agent('write a.txt x', {isolation: 'worktree'});"),
            Default::default(),
        )
        .await
        .expect_err("refused");
    let message = refused.to_string();
    assert!(
        message.contains(&world.project.display().to_string()),
        "{message}"
    );
    assert!(message.contains("git"), "{message}");
    assert!(runner.cwds.locked().is_empty());
    assert!(
        world.store.list_runs(None, 10).await.unwrap().is_empty(),
        "a refusal stores nothing"
    );
    assert!(
        world.script_copies().is_empty(),
        "{:?}",
        world.script_copies()
    );
}

/// An agent definition's `isolation: worktree` isolates every call through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_with_isolation_worktree_isolates_its_calls() {
    let (world, runner) = isolation_world(true);
    let agents = world.project.join(".agentprism").join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("fixer.md"),
        "---\nisolation: worktree\n---\nYou fix.\n",
    )
    .unwrap();
    let run_id = world
        .settled(&script(
            "return await agent('write fixed.txt yes', {agentType: 'fixer'});",
        ))
        .await;
    let calls = world.store.calls(&run_id).await.unwrap();
    assert!(
        calls[0]
            .changes
            .as_ref()
            .and_then(|c| c.branch.as_ref())
            .is_some(),
        "{calls:?}"
    );
    assert!(!world.project.join("fixed.txt").exists());
    assert!(runner.cwds.locked()[0].starts_with(world.state().join("worktrees")));
}

/// Calls without isolation run in the project folder and make no git state at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_isolation_touch_no_git_state() {
    let (world, runner) = isolation_world(true);
    let run_id = world
        .settled(&script("return await agent('write plain.txt z');"))
        .await;
    let calls = world.store.calls(&run_id).await.unwrap();
    assert_eq!(calls[0].changes, None);
    assert_eq!(runner.cwds.locked()[0], world.project);
    assert!(world.project.join("plain.txt").exists());
    assert!(world.branches().is_empty());
    assert!(!world.state().join("worktrees").exists());
    let record = world.store.load_run(&run_id).await.unwrap();
    assert_eq!(
        record.workspace, None,
        "no base is recorded for a run that isolates nothing"
    );
}

/// The start-up sweep removes the worktrees of runs that are not running (a crash left
/// them), and keeps nothing of ours in `git worktree list`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_removes_worktrees_of_runs_no_longer_running() {
    let (world, _runner) = isolation_world(true);
    let run_id = world
        .settled(&script("return await isolated('write a.txt one');"))
        .await;
    // What a killed daemon leaves: a worktree of a call of that (now settled) run.
    let workspaces = GitWorkspaces::new(&world.state());
    let base = crate::workspace::Workspaces::base(&workspaces, &world.project)
        .await
        .unwrap();
    let stale = crate::workspace::Workspaces::open(
        &workspaces,
        &base,
        crate::workspace::CallRef {
            run_id: run_id.to_string(),
            call_index: 7,
            label: "stale".into(),
        },
    )
    .await
    .unwrap();
    assert!(stale.root.is_dir());
    assert_eq!(world.worktrees(), 2);

    assert_eq!(world.engine.sweep_workspaces().await, 1);

    assert!(!stale.root.exists());
    assert_eq!(world.worktrees(), 1);
    assert!(world.leftovers().is_empty(), "{:?}", world.leftovers());
}

/// An isolated call paused on a usage limit runs again cold when the run resumes: the
/// session it had worked in a worktree that is gone, so it is not asked to reopen, and the
/// call's change lands on its branch from a fresh worktree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_isolated_call_runs_again_cold_in_a_fresh_worktree() {
    let (world, runner) = isolation_world(true);
    let admission = world
        .admit(
            &script("return await isolated('limit once\\nwrite again.txt yes');"),
            Default::default(),
        )
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let record = world.store.load_run(&admission.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Paused, "{record:?}");
    assert!(
        world.leftovers().is_empty(),
        "the paused call's worktree is gone"
    );
    world
        .engine
        .resume(World::resume_request(&admission.run_id, vec![]))
        .await
        .expect("resumed");
    world.engine.wait(&admission.run_id).await;
    let record = world.store.load_run(&admission.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed, "{record:?}");
    assert_eq!(
        *runner.reopened.locked(),
        [None, None],
        "never asked to reopen"
    );
    assert_eq!(world.branches().len(), 1);
    assert_eq!(world.worktrees(), 1);
}
