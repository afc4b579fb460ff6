//! `agentprism changes <runId>`: what a run's isolated agent calls changed, one line per call
//! with its branch and diff size, and `--apply <INDEX>`, which merges one call's branch into
//! the current branch of the run's project through the workspace room
//! (`Workspaces::apply`). The list is read from the call records alone; applying also reads
//! the project's repository, and refuses before touching it whatever would keep a
//! conflicting merge from being undone exactly: a tree with uncommitted changes, a merge
//! already under way, a detached HEAD. The same list closes a foreground run's summary
//! ([`report_changes`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use super::args::ChangesArgs;
use super::input::{engine_error, guarded, input_error, parse_run_id};
use super::{EXIT_COMPLETED, EXIT_FAILED};
use crate::app::foreground_engine;
use crate::engine::Engine;
use crate::env::EnvSnapshot;
use crate::model::{CallChanges, CallKind, CallRecord, RunId, WorkspaceBase, short_commit};
use crate::workspace::{Applied, Changes, GitWorkspaces, Workspaces};

/// `changes <runId>`: the list (text or `--json`), or with `--apply` one call's branch merged.
pub(super) async fn changes(env: &EnvSnapshot, args: ChangesArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let record = engine
            .load_reconciled(&run_id)
            .await
            .map_err(engine_error)?;
        let calls = current_calls(&engine, &run_id).await?;
        if let Some(index) = args.apply {
            let root = crate::app::persistence_root(env)?;
            return apply(&root, &record.project_dir, &run_id, &calls, index).await;
        }
        let isolated: Vec<&CallRecord> = calls.iter().filter(|c| c.changes.is_some()).collect();
        if args.json {
            say!(
                "{}",
                serde_json::to_string_pretty(&listing_json(
                    &run_id,
                    record.workspace.as_ref(),
                    &isolated
                ))?
            );
        } else {
            for line in listing_lines(&isolated) {
                say!("{line}");
            }
        }
        match (isolated.is_empty(), &record.workspace) {
            (true, _) => note!(
                "run {run_id} has no isolated calls (an `agent()` call runs isolated with `isolation: \"worktree\"`)"
            ),
            (false, Some(base)) => note!("{}", base_line(base)),
            (false, None) => {}
        }
        if isolated.iter().any(|c| has_branch(c)) && !args.json {
            note!(
                "apply one with `agentprism changes {run_id} --apply <INDEX>`, or merge its branch with git"
            );
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// How many isolated calls a foreground run's summary lists one by one.
const SUMMARY_CALLS_LISTED: usize = 20;

/// On stderr at the end of a foreground run: each isolated call's branch and diff size (the
/// first [`SUMMARY_CALLS_LISTED`]), and how to take one. Nothing when the run isolated no
/// call.
pub(super) async fn report_changes(engine: &Engine, run_id: &RunId) {
    let Ok(calls) = current_calls(engine, run_id).await else {
        return;
    };
    let isolated: Vec<&CallRecord> = calls.iter().filter(|c| c.changes.is_some()).collect();
    for line in summary_lines(run_id, &isolated) {
        note!("{line}");
    }
}

/// [`report_changes`]'s lines.
fn summary_lines(run_id: &RunId, isolated: &[&CallRecord]) -> Vec<String> {
    if isolated.is_empty() {
        return Vec::new();
    }
    let changed = isolated.iter().filter(|c| has_branch(c)).count();
    let mut lines = vec![format!(
        "{changed} of {} isolated agent calls changed files:",
        isolated.len()
    )];
    let shown = &isolated[..isolated.len().min(SUMMARY_CALLS_LISTED)];
    lines.extend(listing_lines(shown));
    if isolated.len() > shown.len() {
        lines.push(format!(
            "  … and {} more (`agentprism changes {run_id}` lists them all)",
            isolated.len() - shown.len()
        ));
    }
    if changed > 0 {
        lines.push(format!(
            "apply one with `agentprism changes {run_id} --apply <INDEX>`"
        ));
    }
    lines
}

/// The run's agent calls as they stand: the rows no later generation replaced, one per
/// index (the latest generation's when two remain), ascending by index.
async fn current_calls(engine: &Engine, run_id: &RunId) -> Result<Vec<CallRecord>> {
    let pool = engine
        .calls()
        .replay_pool(run_id)
        .await
        .with_context(|| format!("reading the calls of run {run_id}"))?;
    Ok(current(pool))
}

/// [`current_calls`] of the rows not superseded.
fn current(pool: Vec<CallRecord>) -> Vec<CallRecord> {
    let mut calls: Vec<CallRecord> = pool
        .into_iter()
        .filter(|call| call.kind == CallKind::Agent)
        .collect();
    calls.sort_by_key(|call| (call.index, std::cmp::Reverse(call.generation)));
    calls.dedup_by_key(|call| call.index);
    calls
}

fn has_branch(call: &CallRecord) -> bool {
    call.changes.as_ref().is_some_and(|c| c.branch.is_some())
}

/// One line per isolated call: `  #<index> <label>  <branch>  <stat>  <base>..<head>`, or
/// `no changes` for a call that changed nothing.
fn listing_lines(calls: &[&CallRecord]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|call| {
            let changes = call.changes.as_ref()?;
            Some(format!(
                "  #{:<4} {:<24} {}",
                call.index,
                call.label.as_deref().unwrap_or("agent"),
                changes.summary()
            ))
        })
        .collect()
}

/// Where the calls started from: the base commit, its repository, and whether the user's
/// tree had changes the base does not hold.
fn base_line(base: &WorkspaceBase) -> String {
    let dirty = if base.dirty {
        " (the tree had uncommitted changes then; they are not in the base)"
    } else {
        ""
    };
    format!(
        "isolated from commit {} of {}{dirty}",
        short_commit(&base.commit),
        base.repository
    )
}

/// `--json`: `{runId, workspace, calls: [{index, label, changes}]}`.
fn listing_json(run_id: &RunId, base: Option<&WorkspaceBase>, calls: &[&CallRecord]) -> Value {
    json!({
        "runId": run_id,
        "workspace": base,
        "calls": calls
            .iter()
            .map(|call| json!({
                "index": call.index,
                "label": call.label,
                "changes": call.changes,
            }))
            .collect::<Vec<_>>(),
    })
}

/// `--apply <index>`: merges the call's branch into the project's current branch. 0 when it
/// is applied (or already was), 1 when it conflicts (nothing changed), refusals are input
/// errors (2).
async fn apply(
    root: &Path,
    project_dir: &Path,
    run_id: &RunId,
    calls: &[CallRecord],
    index: u32,
) -> Result<u8> {
    let changes = applicable(run_id, calls, index)?;
    let branch = changes.branch.clone().expect("applicable has a branch");
    let target = Target::check(project_dir).await?;
    target.check_branch(&branch, changes).await?;
    if target.contains(&branch).await? {
        note!(
            "call {index}'s branch {branch} is already in {} of {}; nothing to apply",
            target.branch,
            target.repository.display()
        );
        return Ok(EXIT_COMPLETED);
    }
    let workspaces = GitWorkspaces::new(root);
    let applied = workspaces
        .apply(&target.repository, &port_changes(changes))
        .await
        .map_err(|error| anyhow!("applying call {index}'s branch {branch}: {error}"))?;
    match applied {
        Applied::Clean => {
            say!(
                "applied call {index}'s branch {branch} to {} of {}: {}",
                target.branch,
                target.repository.display(),
                changes.stat()
            );
            Ok(EXIT_COMPLETED)
        }
        Applied::Conflicts(files) => {
            note!(
                "call {index}'s branch {branch} conflicts with {} of {}; nothing was changed. Conflicting files:",
                target.branch,
                target.repository.display()
            );
            for file in files {
                note!("  {}", file.display());
            }
            note!(
                "merge it yourself to resolve them: `git merge {branch}` in {}",
                target.repository.display()
            );
            Ok(EXIT_FAILED)
        }
    }
}

/// The changes of call `index`, refused unless it ran isolated and left a branch.
fn applicable<'a>(run_id: &RunId, calls: &'a [CallRecord], index: u32) -> Result<&'a CallChanges> {
    let Some(call) = calls.iter().find(|call| call.index == index) else {
        return Err(input_error(format!(
            "--apply {index}: run {run_id} has no agent call {index} (`agentprism changes {run_id}` lists its isolated calls)"
        )));
    };
    let Some(changes) = &call.changes else {
        return Err(input_error(format!(
            "--apply {index}: call {index} of run {run_id} did not run isolated, so it has no branch to apply (only calls with `isolation: \"worktree\"` have one)"
        )));
    };
    if changes.branch.is_none() {
        return Err(input_error(format!(
            "--apply {index}: call {index} of run {run_id} changed nothing; there is no branch to apply"
        )));
    }
    Ok(changes)
}

/// The run model's record of a call's changes, as the workspace port takes it.
fn port_changes(changes: &CallChanges) -> Changes {
    Changes {
        branch: changes.branch.clone(),
        base_commit: changes.base_commit.clone(),
        head_commit: changes.head_commit.clone(),
        files_changed: changes.files_changed,
        insertions: changes.insertions,
        deletions: changes.deletions,
    }
}

/// The repository and current branch an apply merges into, checked to be one a conflicting
/// merge can be undone in exactly.
struct Target {
    repository: PathBuf,
    branch: String,
}

impl Target {
    async fn check(project_dir: &Path) -> Result<Target> {
        if !project_dir.is_dir() {
            return Err(input_error(format!(
                "the run's project folder {} does not exist; the branch can only be applied to the repository it belongs to",
                project_dir.display()
            )));
        }
        let top = git(project_dir, &["rev-parse", "--show-toplevel"]).await?;
        if !top.success {
            return Err(input_error(format!(
                "the run's project folder {} is not in a git work tree ({}); the branch can only be applied to the repository it belongs to",
                project_dir.display(),
                top.stderr.trim()
            )));
        }
        let repository = PathBuf::from(top.stdout.trim_end_matches('\n'));
        let head = git(&repository, &["symbolic-ref", "--quiet", "--short", "HEAD"]).await?;
        if !head.success {
            return Err(input_error(format!(
                "HEAD of {} is detached: check out the branch to apply onto first",
                repository.display()
            )));
        }
        let target = Target {
            branch: head.stdout.trim().to_owned(),
            repository,
        };
        target.check_clean().await?;
        Ok(target)
    }

    /// Refuses a merge under way and uncommitted changes to tracked files: `git merge
    /// --abort` cannot always give those back, and an apply must leave the tree as it was.
    async fn check_clean(&self) -> Result<()> {
        let merging = git(
            &self.repository,
            &["rev-parse", "--quiet", "--verify", "MERGE_HEAD"],
        )
        .await?;
        if merging.success {
            return Err(input_error(format!(
                "{} is in the middle of a merge: conclude or abort it (`git merge --abort`) first",
                self.repository.display()
            )));
        }
        let status = git(
            &self.repository,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .await?;
        if !status.success {
            return Err(anyhow!(
                "git status in {}: {}",
                self.repository.display(),
                status.stderr.trim()
            ));
        }
        let dirty: Vec<&str> = status
            .stdout
            .lines()
            .map(|line| line.get(3..).unwrap_or(line))
            .collect();
        if let Some(first) = dirty.first() {
            return Err(input_error(format!(
                "{} has uncommitted changes to {} tracked file(s) ({first}{}): commit or stash them first, so that a conflicting apply can leave the tree exactly as it is",
                self.repository.display(),
                dirty.len(),
                if dirty.len() > 1 { ", …" } else { "" }
            )));
        }
        Ok(())
    }

    /// Refuses a branch the user deleted, naming the commit that restores it.
    async fn check_branch(&self, branch: &str, changes: &CallChanges) -> Result<()> {
        let reference = format!("refs/heads/{branch}");
        let found = git(
            &self.repository,
            &["rev-parse", "--quiet", "--verify", &reference],
        )
        .await?;
        if !found.success {
            return Err(input_error(format!(
                "branch {branch} no longer exists in {}; it held commit {}, and `git branch {branch} {}` brings it back while that commit is still in the repository",
                self.repository.display(),
                changes.head_commit,
                changes.head_commit
            )));
        }
        Ok(())
    }

    /// Whether the current branch already holds everything on `branch`.
    async fn contains(&self, branch: &str) -> Result<bool> {
        let reference = format!("refs/heads/{branch}");
        let ancestor = git(
            &self.repository,
            &["merge-base", "--is-ancestor", &reference, "HEAD"],
        )
        .await?;
        Ok(ancestor.success)
    }
}

/// What one git command answered.
struct GitOutput {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `git` in `dir`; only a git that cannot be started is an error.
async fn git(dir: &Path, args: &[&str]) -> Result<GitOutput> {
    let output = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running git {} in {}", args.join(" "), dir.display()))?;
    Ok(GitOutput {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::{RUN, call, checkpoint_call, run_id};

    fn isolated(index: u32, label: &str, branch: Option<&str>) -> CallRecord {
        let mut row = call(1, index, u64::from(index));
        row.label = Some(label.to_owned());
        if let Some(changes) = row.changes.as_mut() {
            changes.branch = branch.map(str::to_owned);
        }
        row
    }

    fn shared(index: u32) -> CallRecord {
        CallRecord {
            changes: None,
            ..call(1, index, u64::from(index))
        }
    }

    #[test]
    fn the_list_has_a_line_per_isolated_call_with_branch_stat_and_commits() {
        let rows = [
            isolated(0, "fix", Some("agentprism/r/0-fix")),
            isolated(2, "idle", None),
        ];
        let refs: Vec<&CallRecord> = rows.iter().collect();
        assert_eq!(
            listing_lines(&refs),
            [
                "  #0    fix                      agentprism/r/0-fix  2 files changed, +10 -1  4b825dc..9d1f0c2",
                "  #2    idle                     no changes (base 4b825dc)",
            ]
        );
    }

    #[test]
    fn the_json_list_carries_the_base_and_each_calls_changes_as_stored() {
        let rows = [isolated(0, "fix", Some("agentprism/r/0-fix"))];
        let base = WorkspaceBase {
            repository: "/repo".to_owned(),
            commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".to_owned(),
            subfolder: String::new(),
            dirty: true,
        };
        let refs: Vec<&CallRecord> = rows.iter().collect();
        let listed = listing_json(&run_id(RUN), Some(&base), &refs);
        assert_eq!(listed["runId"], RUN);
        assert_eq!(listed["workspace"]["dirty"], true);
        assert_eq!(listed["calls"][0]["index"], 0);
        assert_eq!(listed["calls"][0]["label"], "fix");
        assert_eq!(
            listed["calls"][0]["changes"],
            serde_json::to_value(&rows[0].changes).unwrap()
        );
        assert_eq!(
            listing_json(&run_id(RUN), None, &[])["workspace"],
            Value::Null
        );
        assert!(base_line(&base).contains("4b825dc of /repo (the tree had uncommitted"));
    }

    #[test]
    fn the_current_calls_are_agent_rows_one_per_index_the_latest_generation_first() {
        let mut older = isolated(1, "old", Some("agentprism/r/1-old"));
        older.generation = 1;
        let mut newer = isolated(1, "new", Some("agentprism/r/1-new"));
        newer.generation = 2;
        let pool = vec![
            isolated(0, "a", None),
            older,
            checkpoint_call(1, 2, 2),
            newer,
        ];
        let calls = current(pool);
        let seen: Vec<(u32, Option<&str>)> = calls
            .iter()
            .map(|c| (c.index, c.label.as_deref()))
            .collect();
        assert_eq!(seen, [(0, Some("a")), (1, Some("new"))]);
    }

    #[test]
    fn applying_names_what_is_missing_for_each_call_that_has_no_branch() {
        let id = run_id(RUN);
        let rows = [
            isolated(0, "fix", Some("agentprism/r/0-fix")),
            shared(1),
            isolated(2, "idle", None),
        ];
        assert!(applicable(&id, &rows, 0).is_ok());
        let message = |index| format!("{:#}", applicable(&id, &rows, index).unwrap_err());
        assert!(
            message(1).contains("did not run isolated"),
            "{}",
            message(1)
        );
        assert!(message(2).contains("changed nothing"), "{}", message(2));
        assert!(message(7).contains("has no agent call 7"), "{}", message(7));
        assert!(message(7).starts_with("--apply 7: "), "{}", message(7));
    }

    #[test]
    fn the_summary_counts_the_calls_that_changed_files_and_lists_the_first_twenty() {
        let id = run_id(RUN);
        assert!(
            summary_lines(&id, &[]).is_empty(),
            "no isolated call, no summary"
        );
        let rows: Vec<CallRecord> = (0..25)
            .map(|index| {
                let branch = format!("agentprism/r/{index}-c");
                isolated(index, "c", (index % 5 != 0).then_some(branch.as_str()))
            })
            .collect();
        let refs: Vec<&CallRecord> = rows.iter().collect();
        let lines = summary_lines(&id, &refs);
        assert_eq!(lines[0], "20 of 25 isolated agent calls changed files:");
        assert_eq!(lines.len(), 1 + 20 + 2, "{lines:#?}");
        assert!(lines[20].starts_with("  #19 "), "{}", lines[20]);
        assert_eq!(
            lines[21],
            format!("  … and 5 more (`agentprism changes {RUN}` lists them all)")
        );
        assert_eq!(
            lines[22],
            format!("apply one with `agentprism changes {RUN} --apply <INDEX>`")
        );
        let idle = [isolated(0, "c", None)];
        let idle: Vec<&CallRecord> = idle.iter().collect();
        assert_eq!(
            summary_lines(&id, &idle),
            [
                "0 of 1 isolated agent calls changed files:".to_owned(),
                "  #0    c                        no changes (base 4b825dc)".to_owned(),
            ],
            "nothing to apply, no advice to"
        );
    }

    #[test]
    fn the_port_gets_the_record_as_it_is() {
        let row = isolated(0, "fix", Some("b"));
        let recorded = row.changes.as_ref().unwrap();
        let port = port_changes(recorded);
        assert_eq!(port.branch.as_deref(), Some("b"));
        assert_eq!(port.base_commit, recorded.base_commit);
        assert_eq!(port.head_commit, recorded.head_commit);
        assert_eq!(
            (port.files_changed, port.insertions, port.deletions),
            (2, 10, 1)
        );
    }
}
