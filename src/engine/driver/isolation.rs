//! Isolated calls from the driver's side: the run's workspace port and base as a generation
//! holds them, the plan an isolated agent task carries, and what the task hands back (the
//! call's changes, the worktree it ran in, and for `isolated()` a bounded diff).
//!
//! The task opens its worktree once it holds a concurrency permit and runs every attempt
//! there. When the call settles with an answer, a `null` or an error, what the agent left is
//! committed on the call's branch; a call that is cancelled, stopped, interrupted or paused
//! (it runs again later) has its worktree discarded. A replayed call never gets here, so it
//! touches no git state.

use std::path::PathBuf;
use std::sync::Arc;

use crate::model::{CallChanges, WorkspaceBase};
use crate::workspace::{Base, CallRef, Changes, Workspace, WorkspaceError, Workspaces};

/// What a generation needs to isolate calls.
#[derive(Clone, Default)]
pub(crate) struct IsolationSetup {
    /// The port worktrees are made through; `None` where this process offers none.
    pub workspaces: Option<Arc<dyn Workspaces>>,
    /// The base the run recorded at admission; `None` when it recorded none.
    pub base: Option<WorkspaceBase>,
    /// The run's project folder, named in errors.
    pub project_dir: PathBuf,
}

/// One isolated call's plan, carried by its agent task.
pub(super) struct CallIsolation {
    setup: IsolationSetup,
    call: CallRef,
    /// `isolated()`'s bound on the diff it answers with.
    diff_bytes: Option<usize>,
}

/// What an isolated call hands back with its result.
pub(crate) struct Isolated {
    pub changes: CallChanges,
    /// The session's `cwd` inside the worktree.
    pub cwd: PathBuf,
    /// For `isolated()`: the diff against the base, bounded.
    pub diff: Option<String>,
}

/// Why a call's worktree could not be used: the call fails with `WORKTREE_ERROR`.
pub(super) struct WorktreeFailure(pub String);

impl IsolationSetup {
    /// The plan of call `index` labelled `label`.
    pub(super) fn plan(
        &self,
        run_id: &str,
        index: u32,
        label: &str,
        diff_bytes: Option<usize>,
    ) -> CallIsolation {
        CallIsolation {
            setup: self.clone(),
            call: CallRef {
                run_id: run_id.to_owned(),
                call_index: index,
                label: label.to_owned(),
            },
            diff_bytes,
        }
    }
}

impl CallIsolation {
    /// Makes the call's worktree (a stale one of the same call is removed first).
    pub(super) async fn open(&self) -> Result<Workspace, WorktreeFailure> {
        let workspaces = self.workspaces()?;
        let base = self.base(workspaces.as_ref()).await?;
        workspaces
            .open(&base, self.call.clone())
            .await
            .map_err(|error| self.failure("cannot make the call's worktree", error))
    }

    /// Commits what the agent left on the call's branch and removes the worktree.
    pub(super) async fn finish(&self, workspace: Workspace) -> Result<Isolated, WorktreeFailure> {
        let workspaces = self.workspaces()?;
        let base = self.base(workspaces.as_ref()).await?;
        let cwd = workspace.cwd.clone();
        let kept = workspace.clone();
        let changes = match workspaces.finish(&base, workspace).await {
            Ok(changes) => changes,
            Err(error) => {
                let failure = self.failure("cannot commit the call's changes", error);
                self.discard(kept).await;
                return Err(failure);
            }
        };
        let diff = match self.diff_bytes {
            Some(bytes) => Some(
                workspaces
                    .diff(&base, &changes, bytes)
                    .await
                    .map_err(|error| self.failure("cannot read the call's diff", error))?,
            ),
            None => None,
        };
        Ok(Isolated {
            changes: model_changes(changes),
            cwd,
            diff,
        })
    }

    /// Removes the worktree without committing; a failure is logged (the start-up sweep
    /// removes what is left).
    pub(super) async fn discard(&self, workspace: Workspace) {
        let Some(workspaces) = &self.setup.workspaces else {
            return;
        };
        if let Err(error) = workspaces.discard(workspace).await {
            tracing::warn!(
                run = %self.call.run_id,
                call = self.call.call_index,
                "cannot remove the call's worktree: {error}"
            );
        }
    }

    fn workspaces(&self) -> Result<Arc<dyn Workspaces>, WorktreeFailure> {
        self.setup.workspaces.clone().ok_or_else(|| {
            WorktreeFailure(format!(
                "{}: worktree isolation is not available in this process",
                self.setup.project_dir.display()
            ))
        })
    }

    /// The run's base; without one, the reason the project folder cannot give one, or why
    /// the run recorded none.
    async fn base(&self, workspaces: &dyn Workspaces) -> Result<Base, WorktreeFailure> {
        if let Some(base) = &self.setup.base {
            return Ok(workspace_base(base));
        }
        Err(match workspaces.base(&self.setup.project_dir).await {
            Err(error) => self.failure("worktree isolation needs a git repository", error),
            Ok(_) => WorktreeFailure(format!(
                "{}: the run recorded no base commit for isolated calls when it was admitted \
                 (its script did not ask for isolation then, e.g. the isolated call is in a \
                 nested workflow); ask for isolation in the run's own script",
                self.setup.project_dir.display()
            )),
        })
    }

    fn failure(&self, doing: &str, error: WorkspaceError) -> WorktreeFailure {
        WorktreeFailure(format!("{doing}: {error}"))
    }
}

/// The port's base for a recorded one.
pub(crate) fn workspace_base(base: &WorkspaceBase) -> Base {
    Base {
        repository: PathBuf::from(&base.repository),
        commit: base.commit.clone(),
        subfolder: PathBuf::from(&base.subfolder),
        dirty: base.dirty,
    }
}

/// The record of a base the port reported.
pub(crate) fn recorded_base(base: &Base) -> WorkspaceBase {
    WorkspaceBase {
        repository: base.repository.to_string_lossy().into_owned(),
        commit: base.commit.clone(),
        subfolder: base.subfolder.to_string_lossy().into_owned(),
        dirty: base.dirty,
    }
}

fn model_changes(changes: Changes) -> CallChanges {
    CallChanges {
        branch: changes.branch,
        base_commit: changes.base_commit,
        head_commit: changes.head_commit,
        files_changed: changes.files_changed,
        insertions: changes.insertions,
        deletions: changes.deletions,
    }
}
