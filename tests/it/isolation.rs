//! Worktree isolation through the real binaries and the mock agent, in a temporary git
//! repository: isolated calls write files into their own cwd (`@mock write_cwd`), and what
//! they wrote must be on their own branches, never in the user's tree, with nothing of ours
//! left in `git worktree list` or under the state folder; the same after a SIGKILL of the
//! process executing the run, once a daemon has started and the run is resumed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::support::context::{DEADLINE, TestContext, pids_in, run_id_in};

const HEADER: &str =
    "export const meta = { name: 'iso', description: 'isolated calls', model: 'mock' };\n";

/// A test's context whose project folder is a git repository with one commit, and a guard
/// that kills the mock agents its processes started.
struct Repo {
    ctx: TestContext,
    agent_pids: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let ctx = TestContext::new();
        let agent_pids = ctx.path("agent-pids");
        let ctx = ctx
            .with_mock_backend(json!({"MOCK_ACP_PID_FILE": agent_pids}))
            .set("AGENTPRISM_DAEMON_PORT", "0");
        git(
            &ctx.project(),
            &["init", "--quiet", "--initial-branch=main"],
        );
        std::fs::write(ctx.project().join("README.md"), "hello\n").unwrap();
        git(&ctx.project(), &["add", "README.md"]);
        git(&ctx.project(), &["commit", "--quiet", "-m", "start"]);
        Repo { ctx, agent_pids }
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.ctx.project(), args)
    }

    /// Our branches, sorted.
    fn branches(&self) -> Vec<String> {
        let mut branches: Vec<String> = self
            .git(&[
                "branch",
                "--list",
                "agentprism/*",
                "--format=%(refname:short)",
            ])
            .lines()
            .map(str::to_owned)
            .collect();
        branches.sort();
        branches
    }

    fn worktrees(&self) -> usize {
        self.git(&["worktree", "list", "--porcelain"])
            .lines()
            .filter(|line| line.starts_with("worktree "))
            .count()
    }

    /// The call folders under the state folder's worktrees.
    fn call_folders(&self) -> Vec<PathBuf> {
        let root = self.ctx.state().join("worktrees");
        let Ok(runs) = std::fs::read_dir(root) else {
            return Vec::new();
        };
        runs.flatten()
            .flat_map(|run| {
                std::fs::read_dir(run.path())
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|call| call.path())
            .collect()
    }

    /// Each branch's files changed against `main`, sorted by branch.
    fn branch_files(&self) -> Vec<(String, String)> {
        self.branches()
            .into_iter()
            .map(|branch| {
                let files = self.git(&["diff", "--name-only", "main", &branch]);
                (branch, files)
            })
            .collect()
    }

    /// The user's tree: clean, and without any of the calls' files.
    fn assert_tree_untouched(&self) {
        assert_eq!(self.git(&["status", "--porcelain"]), "");
        for i in 0..4 {
            assert!(!self.ctx.project().join(format!("file{i}.txt")).exists());
        }
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        for pid in pids_in(&self.agent_pids) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

pub(crate) fn git(folder: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(folder)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// Four isolated calls at once; each writes its own file, then waits for `gate` when given.
fn four_isolated_calls(gate: Option<&Path>) -> String {
    let wait = gate
        .map(|gate| format!("\\n@mock wait_file {}", gate.display()))
        .unwrap_or_default();
    format!(
        "{HEADER}return await parallel([0, 1, 2, 3].map((i) => () => agent(\
           '@mock write_cwd file' + i + '.txt from call ' + i + '{wait}', \
           {{isolation: 'worktree', label: 'edit ' + i}})));\n"
    )
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn four_isolated_calls_land_on_four_branches_and_leave_the_tree_untouched() {
    let repo = Repo::new();
    let script = repo.ctx.write("iso.js", &four_isolated_calls(None));
    let finished = repo.ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);

    repo.assert_tree_untouched();
    let files = repo.branch_files();
    assert_eq!(files.len(), 4, "{files:?}");
    let run_id = finished.run_id();
    for (branch, changed) in &files {
        let index: usize = branch
            .strip_prefix(&format!("agentprism/{run_id}/"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|index| index.parse().ok())
            .unwrap_or_else(|| panic!("a branch named by run and call: {branch}"));
        // The call's own file, and nothing else.
        assert_eq!(changed, &format!("file{index}.txt\n"), "{branch}");
    }
    assert_eq!(repo.worktrees(), 1);
    assert!(repo.call_folders().is_empty(), "{:?}", repo.call_folders());
}

#[test]
fn a_killed_run_leaves_worktrees_that_the_daemon_sweeps_and_a_resume_completes_cleanly() {
    let repo = Repo::new();
    let gate = repo.ctx.path("gate");
    let script = repo.ctx.write("iso.js", &four_isolated_calls(Some(&gate)));
    let running = repo.ctx.spawn(&["run", script.to_str().unwrap()]);
    // Every call has its worktree and has written its file, and waits.
    wait_for("four calls to write into their worktrees", || {
        let folders = repo.call_folders();
        let written = folders
            .iter()
            .filter(|folder| {
                std::fs::read_dir(folder.join("tree"))
                    .map(|entries| {
                        entries
                            .flatten()
                            .any(|entry| entry.file_name().to_string_lossy().starts_with("file"))
                    })
                    .unwrap_or(false)
            })
            .count();
        (written == 4).then_some(())
    });
    assert_eq!(repo.worktrees(), 5);
    running.signal(Signal::SIGKILL);
    let killed = running.finish(DEADLINE);
    assert_ne!(killed.code(), 0);
    let run_id = run_id_in(&killed.stderr).expect("the run id on stderr");
    for pid in pids_in(&repo.agent_pids) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    repo.assert_tree_untouched();

    // A daemon starting up removes the worktrees of the run nobody executes any more.
    let daemon = repo.ctx.spawn(&["daemon", "run"]);
    wait_for("the daemon's sweep", || {
        (repo.call_folders().is_empty() && repo.worktrees() == 1).then_some(())
    });
    assert!(repo.branches().is_empty(), "no call finished: no branch");
    assert_eq!(repo.ctx.status(&run_id)["status"], "paused");

    std::fs::write(&gate, "go").unwrap();
    let resumed = repo.ctx.run(&["resume", &run_id]);
    assert_eq!(resumed.code(), 0, "{}", resumed.stderr);
    wait_for("the resumed run to complete", || {
        (repo.ctx.status(&run_id)["status"] == "completed").then_some(())
    });
    daemon.signal(Signal::SIGTERM);
    let _ = daemon.finish(DEADLINE);

    repo.assert_tree_untouched();
    let mut all: Vec<String> = repo
        .branch_files()
        .into_iter()
        .map(|(_, changed)| changed.trim().to_owned())
        .collect();
    all.sort();
    assert_eq!(all, ["file0.txt", "file1.txt", "file2.txt", "file3.txt"]);
    assert_eq!(repo.worktrees(), 1);
    assert!(repo.call_folders().is_empty(), "{:?}", repo.call_folders());
}

/// A real adapter (claude-agent-acp against the fake model server) whose model runs a Bash
/// command that writes a file, in an isolated call: the file is on the call's branch, and the
/// user's tree never sees it.
#[tokio::test]
async fn a_real_adapters_edit_in_an_isolated_call_lands_on_its_branch() {
    use crate::adapters::{Backend, Context};

    let context = Context::new(Backend::Claude).await;
    git(
        &context.project,
        &["init", "--quiet", "--initial-branch=main"],
    );
    std::fs::write(context.project.join("README.md"), "hello\n").unwrap();
    git(&context.project, &["add", "README.md"]);
    git(&context.project, &["commit", "--quiet", "-m", "start"]);
    let script = "export const meta = { name: 'edit', description: 'd', model: 'claude' };\n\
         return await isolated('Edit it.\\nMOCK_BASH=echo edited > edited.txt', \
           { mode: 'default', label: 'edit' });\n";
    let path = context.dir.path().join("edit.js");
    std::fs::write(&path, script).expect("write script");
    let project = context.project.display().to_string();
    let outcome = context
        .agentprism(&[
            "run",
            &path.display().to_string(),
            "--project-dir",
            &project,
            "--permissions",
            "allow",
        ])
        .await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let status = context.status(&outcome.run_id()).await;
    let changes = &status["outcome"]["result"]["changes"];
    let branch = changes["branch"]
        .as_str()
        .unwrap_or_else(|| panic!("the edit is on a branch: {status:#}"));
    assert_eq!(changes["filesChanged"], 1, "{status:#}");
    assert!(
        !context.project.join("edited.txt").exists(),
        "the user's tree is untouched"
    );
    assert_eq!(git(&context.project, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&context.project, &["show", &format!("{branch}:edited.txt")]),
        "edited\n"
    );
    let worktrees = git(&context.project, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    context.assert_no_processes_left().await;
}
