//! Tests of `GitWorkspaces` against real repositories made in temporary folders. Every git
//! command (ours and the tests') runs with its own HOME, an empty global config and no
//! system config, so the user's settings cannot leak in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;

use super::command::Git;
use super::*;

struct Fixture {
    dir: TempDir,
    env: Vec<(OsString, OsString)>,
    workspaces: Arc<GitWorkspaces>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("gitconfig"), "").unwrap();
        let env: Vec<(OsString, OsString)> = vec![
            ("HOME".into(), home.clone().into()),
            ("GIT_CONFIG_GLOBAL".into(), home.join("gitconfig").into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("GIT_CEILING_DIRECTORIES".into(), dir.path().into()),
        ];
        let workspaces = Arc::new(GitWorkspaces::with_git(
            &dir.path().join("state"),
            Git::with_env(env.clone()),
        ));
        Self {
            dir,
            env,
            workspaces,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs git as a user would (with an identity of its own) and answers its output.
    fn git(&self, dir: &Path, args: &[&str]) -> String {
        let output = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("GIT_AUTHOR_NAME", "user")
            .env("GIT_AUTHOR_EMAIL", "user@example.invalid")
            .env("GIT_COMMITTER_NAME", "user")
            .env("GIT_COMMITTER_EMAIL", "user@example.invalid")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned()
    }

    /// A repository with `a.txt`, `sub/b.txt` and a `.gitignore` of `ignored.txt`, committed.
    fn repository(&self) -> PathBuf {
        let repository = self.path("repo");
        std::fs::create_dir_all(repository.join("sub")).unwrap();
        self.git(&repository, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(repository.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(repository.join("sub/b.txt"), "b\n").unwrap();
        std::fs::write(repository.join(".gitignore"), "ignored.txt\n").unwrap();
        self.git(&repository, &["add", "--all"]);
        self.git(&repository, &["commit", "--quiet", "-m", "start"]);
        repository
    }

    fn worktree_count(&self, repository: &Path) -> usize {
        self.git(repository, &["worktree", "list", "--porcelain"])
            .lines()
            .filter(|line| line.starts_with("worktree "))
            .count()
    }

    fn our_branches(&self, repository: &Path) -> Vec<String> {
        let listed = self.git(
            repository,
            &[
                "branch",
                "--list",
                "agentprism/*",
                "--format=%(refname:short)",
            ],
        );
        listed.lines().map(str::to_owned).collect()
    }
}

fn call(run: &str, index: u32, label: &str) -> CallRef {
    CallRef {
        run_id: run.to_owned(),
        call_index: index,
        label: label.to_owned(),
    }
}

fn needed(error: WorkspaceError, folder: &Path) -> String {
    match error {
        WorkspaceError::Unusable {
            folder: named,
            needed,
        } => {
            assert_eq!(named, folder);
            needed
        }
        other => panic!("expected an unusable folder, got {other:?}"),
    }
}

#[tokio::test]
async fn base_refuses_a_folder_outside_any_repository() {
    let fixture = Fixture::new();
    let folder = fixture.path("plain");
    std::fs::create_dir_all(&folder).unwrap();
    let error = fixture.workspaces.base(&folder).await.unwrap_err();
    assert!(error.to_string().contains(&folder.display().to_string()));
    assert!(needed(error, &folder).contains("is not in a git repository"));
}

#[tokio::test]
async fn base_refuses_a_bare_repository() {
    let fixture = Fixture::new();
    let folder = fixture.path("bare.git");
    std::fs::create_dir_all(&folder).unwrap();
    fixture.git(&folder, &["init", "--quiet", "--bare"]);
    let error = fixture.workspaces.base(&folder).await.unwrap_err();
    assert!(needed(error, &folder).contains("bare git repository"));
}

#[tokio::test]
async fn base_refuses_a_repository_with_no_commit() {
    let fixture = Fixture::new();
    let folder = fixture.path("empty");
    std::fs::create_dir_all(&folder).unwrap();
    fixture.git(&folder, &["init", "--quiet"]);
    let error = fixture.workspaces.base(&folder).await.unwrap_err();
    assert!(needed(error, &folder).contains("no commit yet"));
}

#[tokio::test]
async fn base_refuses_a_detached_head() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    fixture.git(&repository, &["switch", "--quiet", "--detach", "HEAD"]);
    let error = fixture.workspaces.base(&repository).await.unwrap_err();
    assert!(needed(error, &repository).contains("detached HEAD"));
}

#[tokio::test]
async fn base_refuses_an_unreadable_git_directory() {
    let fixture = Fixture::new();
    let folder = fixture.path("broken");
    std::fs::create_dir_all(&folder).unwrap();
    // Tests may run as root, for whom no permission bit makes `.git` unreadable; a `.git`
    // file pointing nowhere is a `.git` git cannot read for anyone.
    std::fs::write(
        folder.join(".git"),
        "gitdir: /nonexistent/agentprism-test\n",
    )
    .unwrap();
    let error = fixture.workspaces.base(&folder).await.unwrap_err();
    let needed = needed(error, &folder);
    assert!(needed.contains("git directory git cannot read"), "{needed}");
    assert!(needed.contains(".git"), "{needed}");
}

#[tokio::test]
async fn base_records_the_commit_the_subfolder_and_a_dirty_tree() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let head = fixture.git(&repository, &["rev-parse", "HEAD"]);
    let base = fixture
        .workspaces
        .base(&repository.join("sub"))
        .await
        .unwrap();
    assert_eq!(base.commit, head);
    assert_eq!(base.subfolder, PathBuf::from("sub"));
    assert_eq!(
        base.repository.canonicalize().unwrap(),
        repository.canonicalize().unwrap()
    );
    assert!(!base.dirty);
    std::fs::write(repository.join("untracked.txt"), "x").unwrap();
    assert!(fixture.workspaces.base(&repository).await.unwrap().dirty);
}

#[tokio::test]
async fn base_refuses_a_state_directory_inside_the_repository() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let workspaces = GitWorkspaces::with_git(
        &repository.join(".state"),
        Git::with_env(fixture.env.clone()),
    );
    let error = workspaces.base(&repository).await.unwrap_err();
    assert!(needed(error, &repository).contains("outside the project's repository"));
}

#[tokio::test]
async fn finish_commits_tracked_and_untracked_changes_on_the_call_branch() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let workspace = fixture
        .workspaces
        .open(&base, call("run-1", 2, "fix: the bug/../x"))
        .await
        .unwrap();
    assert!(workspace.root.starts_with(fixture.path("state")));
    assert_eq!(workspace.cwd, workspace.root);
    assert_eq!(fixture.worktree_count(&repository), 2);
    std::fs::write(workspace.cwd.join("a.txt"), "one\nTWO\nthree\n").unwrap();
    std::fs::write(workspace.cwd.join("new.txt"), "new\n").unwrap();
    std::fs::write(workspace.cwd.join("ignored.txt"), "secret\n").unwrap();
    let root = workspace.root.clone();

    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();

    let branch = changes.branch.clone().unwrap();
    assert_eq!(branch, "agentprism/run-1/2-fix-the-bug-x");
    assert_eq!(changes.base_commit, base.commit);
    assert_eq!(
        changes.head_commit,
        fixture.git(&repository, &["rev-parse", &branch])
    );
    assert_eq!(
        (changes.files_changed, changes.insertions, changes.deletions),
        (2, 3, 1)
    );
    let files = fixture.git(&repository, &["ls-tree", "-r", "--name-only", &branch]);
    assert!(files.lines().any(|f| f == "new.txt"));
    assert!(!files.lines().any(|f| f == "ignored.txt"));
    assert!(!root.exists());
    assert_eq!(fixture.worktree_count(&repository), 1);
    // The user's own tree is untouched.
    assert_eq!(
        std::fs::read_to_string(repository.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(fixture.git(&repository, &["status", "--porcelain"]), "");

    let diff = fixture
        .workspaces
        .diff(&base, &changes, 100_000)
        .await
        .unwrap();
    assert!(diff.contains("+TWO") && diff.contains("+new"), "{diff}");
    let cut = fixture.workspaces.diff(&base, &changes, 60).await.unwrap();
    assert!(cut.len() <= 60 && cut.contains("diff cut"), "{cut}");
}

#[tokio::test]
async fn finish_without_changes_leaves_no_branch() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let workspace = fixture
        .workspaces
        .open(&base, call("run-1", 0, "idle"))
        .await
        .unwrap();
    let root = workspace.root.clone();
    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();
    assert_eq!(changes.branch, None);
    assert_eq!(changes.head_commit, base.commit);
    assert_eq!(
        (changes.files_changed, changes.insertions, changes.deletions),
        (0, 0, 0)
    );
    assert!(fixture.our_branches(&repository).is_empty());
    assert!(!root.exists());
    assert_eq!(fixture.worktree_count(&repository), 1);
    assert_eq!(
        fixture.workspaces.diff(&base, &changes, 100).await.unwrap(),
        ""
    );
}

#[tokio::test]
async fn a_project_below_the_top_gets_the_same_subfolder_as_cwd() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture
        .workspaces
        .base(&repository.join("sub"))
        .await
        .unwrap();
    let workspace = fixture
        .workspaces
        .open(&base, call("run-1", 1, ""))
        .await
        .unwrap();
    assert_eq!(workspace.cwd, workspace.root.join("sub"));
    assert_eq!(
        std::fs::read_to_string(workspace.cwd.join("b.txt")).unwrap(),
        "b\n"
    );
    fixture.workspaces.discard(workspace).await.unwrap();
    assert_eq!(fixture.worktree_count(&repository), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_workspaces_open_and_finish_at_once_on_one_repository() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = Arc::new(fixture.workspaces.base(&repository).await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..16 {
        let workspaces = fixture.workspaces.clone();
        let base = base.clone();
        tasks.spawn(async move {
            let workspace = workspaces.open(&base, call("run-16", index, "try")).await?;
            std::fs::write(workspace.cwd.join(format!("f{index}.txt")), "x\n").unwrap();
            workspaces.finish(&base, workspace).await
        });
    }
    let mut branches = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let changes = joined.unwrap().unwrap();
        assert_eq!(changes.files_changed, 1);
        branches.push(changes.branch.unwrap());
    }
    branches.sort();
    branches.dedup();
    assert_eq!(branches.len(), 16);
    assert_eq!(fixture.our_branches(&repository).len(), 16);
    assert_eq!(fixture.worktree_count(&repository), 1);
}

#[tokio::test]
async fn sweep_removes_every_worktree_of_calls_not_running() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let mut open = Vec::new();
    for (run, index) in [("run-k", 0), ("run-s", 1), ("run-s", 2)] {
        open.push(
            fixture
                .workspaces
                .open(&base, call(run, index, ""))
                .await
                .unwrap(),
        );
    }
    // A crash that took the tree's files but left git's record of it.
    std::fs::remove_dir_all(&open[2].root).unwrap();
    assert_eq!(fixture.worktree_count(&repository), 4);
    let mut runs = fixture.workspaces.runs().await;
    runs.sort();
    assert_eq!(runs, ["run-k", "run-s"]);

    let removed = fixture
        .workspaces
        .sweep(&["run-s".to_owned(), "../run-k".to_owned()])
        .await
        .unwrap();

    assert_eq!(removed, 2);
    assert!(open[0].root.is_dir());
    assert!(!open[1].root.exists());
    assert_eq!(fixture.worktree_count(&repository), 2);
    assert_eq!(fixture.workspaces.runs().await, ["run-k"]);
    assert_eq!(fixture.workspaces.sweep(&[]).await.unwrap(), 0);
    assert_eq!(
        fixture
            .workspaces
            .sweep(&["run-k".to_owned()])
            .await
            .unwrap(),
        1
    );
    assert_eq!(fixture.worktree_count(&repository), 1);
    let left: Vec<_> = std::fs::read_dir(fixture.path("state/worktrees"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn opening_a_call_again_replaces_its_stale_worktree() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let first = fixture
        .workspaces
        .open(&base, call("run-r", 4, ""))
        .await
        .unwrap();
    std::fs::write(first.cwd.join("half-done.txt"), "x").unwrap();
    let second = fixture
        .workspaces
        .open(&base, call("run-r", 4, ""))
        .await
        .unwrap();
    assert_eq!(second.root, first.root);
    assert!(!second.cwd.join("half-done.txt").exists());
    assert_eq!(fixture.worktree_count(&repository), 2);
    fixture.workspaces.discard(second).await.unwrap();
    assert_eq!(fixture.worktree_count(&repository), 1);
}

#[tokio::test]
async fn apply_merges_a_branch_or_names_conflicts_and_changes_nothing() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let mut finished = Vec::new();
    for index in 0..2 {
        let workspace = fixture
            .workspaces
            .open(&base, call("run-a", index, ""))
            .await
            .unwrap();
        std::fs::write(workspace.cwd.join("a.txt"), format!("call {index}\n")).unwrap();
        finished.push(fixture.workspaces.finish(&base, workspace).await.unwrap());
    }
    let applied = fixture
        .workspaces
        .apply(&repository, &finished[0])
        .await
        .unwrap();
    assert_eq!(applied, Applied::Clean);
    assert_eq!(
        std::fs::read_to_string(repository.join("a.txt")).unwrap(),
        "call 0\n"
    );
    let head = fixture.git(&repository, &["rev-parse", "HEAD"]);

    let applied = fixture
        .workspaces
        .apply(&repository, &finished[1])
        .await
        .unwrap();

    assert_eq!(applied, Applied::Conflicts(vec![PathBuf::from("a.txt")]));
    assert_eq!(fixture.git(&repository, &["rev-parse", "HEAD"]), head);
    assert_eq!(fixture.git(&repository, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(repository.join("a.txt")).unwrap(),
        "call 0\n"
    );
}

/// A tree with uncommitted changes to tracked files, or in the middle of a merge, is refused
/// before git merges anything: an abort could not give either back.
#[tokio::test]
async fn apply_refuses_a_dirty_tree_and_a_merge_under_way_changing_nothing() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let mut finished = Vec::new();
    for index in 0..2 {
        let workspace = fixture
            .workspaces
            .open(&base, call("run-d", index, ""))
            .await
            .unwrap();
        std::fs::write(workspace.cwd.join("d.txt"), format!("call {index}\n")).unwrap();
        finished.push(fixture.workspaces.finish(&base, workspace).await.unwrap());
    }
    let tracked = fixture.git(&repository, &["ls-files"]);
    let tracked = repository.join(tracked.lines().next().expect("a tracked file"));
    let before = std::fs::read_to_string(&tracked).unwrap();
    std::fs::write(&tracked, format!("{before}mine\n")).unwrap();
    let error = fixture
        .workspaces
        .apply(&repository, &finished[0])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("uncommitted changes"), "{error}");
    assert!(!repository.join("d.txt").exists());
    std::fs::write(&tracked, &before).unwrap();

    // The user's own conflicting merge, left unfinished.
    let mut merging = std::process::Command::new("git");
    merging
        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
        .args(["merge", "--no-edit", finished[0].branch.as_deref().unwrap()])
        .current_dir(&repository);
    assert!(merging.output().unwrap().status.success());
    fixture.git(&repository, &["reset", "--hard", "HEAD~1"]);
    std::fs::write(repository.join("d.txt"), "mine\n").unwrap();
    fixture.git(&repository, &["add", "d.txt"]);
    fixture.git(
        &repository,
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@example.invalid",
            "commit",
            "-qm",
            "mine",
        ],
    );
    let mut conflicting = std::process::Command::new("git");
    conflicting
        .args(["merge", "--no-edit", finished[1].branch.as_deref().unwrap()])
        .current_dir(&repository);
    assert!(!conflicting.output().unwrap().status.success());
    let error = fixture
        .workspaces
        .apply(&repository, &finished[0])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("middle of a merge"), "{error}");
    assert!(
        repository.join(".git").join("MERGE_HEAD").exists(),
        "the user's merge is still there"
    );
}

#[tokio::test]
async fn discard_refuses_a_folder_that_is_not_one_of_ours() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let stranger = Workspace {
        call: call("run-x", 0, ""),
        root: repository.clone(),
        cwd: repository.clone(),
    };
    let error = fixture.workspaces.discard(stranger).await.unwrap_err();
    assert!(needed(error, &repository).contains("only worktrees under"));
    assert!(repository.join("a.txt").is_file());
}

#[tokio::test]
async fn finish_runs_none_of_the_repositorys_commit_hooks() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let hooks = repository.join(".git/hooks");
    let marker = fixture.path("hook-ran");
    for hook in [
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
    ] {
        let path = hooks.join(hook);
        let script = format!("#!/bin/sh\necho {hook} >> '{}'\n", marker.display());
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let workspace = fixture
        .workspaces
        .open(&base, call("run-h", 0, ""))
        .await
        .unwrap();
    std::fs::write(workspace.cwd.join("a.txt"), "changed\n").unwrap();

    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();

    assert_eq!(changes.files_changed, 1);
    assert!(
        !marker.exists(),
        "hooks ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}

#[tokio::test]
async fn finish_keeps_the_agents_own_commits_and_commits_on_top_of_them() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();

    // The agent commits and leaves nothing else.
    let workspace = fixture
        .workspaces
        .open(&base, call("run-c", 0, ""))
        .await
        .unwrap();
    std::fs::write(workspace.cwd.join("a.txt"), "agent\n").unwrap();
    fixture.git(
        &workspace.cwd,
        &["commit", "--quiet", "-am", "by the agent"],
    );
    let agents = fixture.git(&workspace.cwd, &["rev-parse", "HEAD"]);
    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();
    assert_eq!(changes.head_commit, agents);
    assert_eq!(changes.files_changed, 1);
    assert!(changes.branch.is_some());

    // The agent commits and leaves an untracked file: ours goes on top of the agent's.
    let workspace = fixture
        .workspaces
        .open(&base, call("run-c", 1, ""))
        .await
        .unwrap();
    std::fs::write(workspace.cwd.join("a.txt"), "agent\n").unwrap();
    fixture.git(
        &workspace.cwd,
        &["commit", "--quiet", "-am", "by the agent"],
    );
    let agents = fixture.git(&workspace.cwd, &["rev-parse", "HEAD"]);
    std::fs::write(workspace.cwd.join("left.txt"), "left\n").unwrap();
    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();
    let branch = changes.branch.unwrap();
    assert_eq!(
        fixture.git(&repository, &["rev-parse", &format!("{branch}^")]),
        agents
    );
    assert_eq!(changes.files_changed, 2);
    let message = fixture.git(&repository, &["log", "-1", "--format=%an %s", &branch]);
    assert_eq!(message, "agentprism agentprism run run-c call 1");
}

#[tokio::test]
async fn finish_of_only_ignored_files_and_an_edit_undone_leaves_no_branch() {
    let fixture = Fixture::new();
    let repository = fixture.repository();
    let base = fixture.workspaces.base(&repository).await.unwrap();
    let workspace = fixture
        .workspaces
        .open(&base, call("run-i", 0, ""))
        .await
        .unwrap();
    std::fs::create_dir_all(workspace.cwd.join("build")).unwrap();
    std::fs::write(workspace.cwd.join("build/ignored.txt"), "x\n").unwrap();
    std::fs::write(workspace.cwd.join("ignored.txt"), "x\n").unwrap();
    std::fs::write(workspace.cwd.join("a.txt"), "changed\n").unwrap();
    std::fs::write(workspace.cwd.join("a.txt"), "one\ntwo\n").unwrap();

    let changes = fixture.workspaces.finish(&base, workspace).await.unwrap();

    assert_eq!(changes.branch, None);
    assert_eq!(changes.head_commit, base.commit);
    assert!(fixture.our_branches(&repository).is_empty());
}
