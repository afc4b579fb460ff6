//! Workspaces: a git worktree of its own for each isolated agent call. This is the port the
//! engine will drive isolated calls through (`agent(prompt, {isolation: "worktree"})` and an
//! agent definition's `isolation: worktree`); `GitWorkspaces` (`git.rs`) implements it over
//! the `git` command line, and the composition root will choose it. Nothing calls this port
//! yet: no isolated call runs in a worktree, and an engine without an implementation has no
//! workspaces to offer.
//!
//! The life of a workspace, as the engine will call it:
//! 1. At admission, `Workspaces::base` records where every isolated call of the run starts
//!    from: the repository, the base commit, the project folder's place inside the
//!    repository, and whether the user's tree had uncommitted changes (they are not in the
//!    base). The engine stores the base with the run, so a resumed run isolates from the same
//!    commit.
//! 2. When an isolated call starts live, `Workspaces::open` makes its worktree; the agent's
//!    session `cwd` is `Workspace::cwd`.
//! 3. When the call ends, `Workspaces::finish` commits what the agent changed (tracked and
//!    untracked, not ignored) on the call's own branch, removes the worktree, and reports the
//!    `Changes` the call's record carries; a call that changed nothing leaves no branch.
//!    A stopped or failed call's worktree goes through `Workspaces::discard`.
//! 4. At start-up, `Workspaces::sweep` removes the worktrees of calls that no longer run:
//!    those of every run listed by `Workspaces::runs` but the ones another live process
//!    executes.
//! 5. The command line lists a run's branches and brings one onto the project's current branch
//!    (`Workspaces::apply`); a script reads a bounded diff (`Workspaces::diff`).
//!
//! Invariants the implementation keeps:
//! - Worktrees live under the state directory, never inside the user's tree, and no two calls
//!   share one.
//! - A replayed call touches no git state: the engine never opens a workspace for it.
//! - After any mix of runs, stops and crashes, `git worktree list` names only the user's own
//!   trees once a sweep has run, and nothing of ours stays under the state directory except
//!   what a live call uses.
//! - Branch names say run and call; labels are untrusted and are sanitized before they reach
//!   a ref name.
//! - A folder that is not in a git repository, a bare repository, one with no commit, a
//!   detached HEAD or an unreadable `.git` is an error naming the folder and what is needed;
//!   an isolated call never falls back to the shared tree.
//! - Many calls may open workspaces at once; git's own locks never make one of them fail.
//! - `Workspaces::apply` reports conflicts without leaving a half-applied tree.
//!
//! This module imports nothing from the engine, the store or any server: it knows folders,
//! commits and branches, and the engine maps its answers onto the run model.

use std::path::PathBuf;

use async_trait::async_trait;

mod apply;
mod base;
mod command;
mod commit;
mod git;
mod names;
#[cfg(test)]
mod tests;

pub use git::GitWorkspaces;

/// Where every isolated call of one run starts from, recorded once at admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    /// The repository's top folder.
    pub repository: PathBuf,
    /// The commit every worktree of the run is made from, 40 hex digits.
    pub commit: String,
    /// The project folder relative to `repository` (empty at the top), so a call's `cwd` is
    /// the same subfolder of its worktree.
    pub subfolder: PathBuf,
    /// Whether the user's tree had uncommitted changes at admission: they are not in `commit`,
    /// and admission warns about them.
    pub dirty: bool,
}

/// Which call a workspace serves; the branch name is made from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRef {
    pub run_id: String,
    pub call_index: u32,
    /// The call's label, untrusted: sanitized before it reaches a branch name.
    pub label: String,
}

/// One open worktree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    pub call: CallRef,
    /// The worktree's top folder, under the state directory.
    pub root: PathBuf,
    /// The agent's session `cwd`: `root` joined with the base's subfolder.
    pub cwd: PathBuf,
}

/// What an isolated call changed, as its record carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    /// The call's branch; `None` when the call changed nothing.
    pub branch: Option<String>,
    pub base_commit: String,
    /// The branch's commit; the base's when nothing changed.
    pub head_commit: String,
    pub files_changed: u32,
    pub insertions: u32,
    pub deletions: u32,
}

/// What bringing a call's branch onto the project's current branch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The change is on the current branch.
    Clean,
    /// Nothing was changed; these files conflict.
    Conflicts(Vec<PathBuf>),
}

/// Why a workspace operation failed; every message names the folder and what is needed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The project folder cannot be isolated: not in a repository, a bare repository, no
    /// commit, a detached HEAD, an unreadable `.git`.
    #[error("{folder}: {needed}")]
    Unusable { folder: PathBuf, needed: String },
    /// A git command failed.
    #[error("git {command} in {folder}: {message}")]
    Git {
        command: String,
        folder: PathBuf,
        message: String,
    },
    /// This process has no workspace implementation.
    #[error("worktree isolation is not available in this build")]
    Unsupported,
}

/// The port the engine drives isolated calls through. Object safe, used as
/// `Arc<dyn Workspaces>`; every method may run git and so is async.
#[async_trait]
pub trait Workspaces: Send + Sync + 'static {
    /// The base of a run whose project folder is `project_dir`, checked for everything an
    /// isolated call will need, so admission refuses what a call would fail on.
    async fn base(&self, project_dir: &std::path::Path) -> Result<Base, WorkspaceError>;

    /// A fresh worktree for `call` at `base.commit`. A stale worktree of the same call (left
    /// by a crash or a stop) is removed first, so a re-run starts clean.
    async fn open(&self, base: &Base, call: CallRef) -> Result<Workspace, WorkspaceError>;

    /// Commits the worktree's changes on the call's branch, removes the worktree and says
    /// what changed. Commits the agent made itself in the worktree count too. On an error the
    /// worktree stays, for `discard` or `sweep` to remove.
    async fn finish(&self, base: &Base, workspace: Workspace) -> Result<Changes, WorkspaceError>;

    /// Removes the worktree without committing (a stopped call, a failed one).
    async fn discard(&self, workspace: Workspace) -> Result<(), WorkspaceError>;

    /// The runs that have worktrees of ours, by id (asked when a process starts; an
    /// implementation may fix what it keeps on the way, as `GitWorkspaces` narrows its folders).
    async fn runs(&self) -> Vec<String>;

    /// Removes every worktree of the runs `runs` names (as [`Workspaces::runs`] lists
    /// them), whose calls no longer run; answers how many went.
    async fn sweep(&self, runs: &[String]) -> Result<usize, WorkspaceError>;

    /// The diff of a finished call's branch against its base, cut to at most `max_bytes`
    /// (a cut diff ends with a note of its full size); empty when the call changed nothing.
    async fn diff(
        &self,
        base: &Base,
        changes: &Changes,
        max_bytes: usize,
    ) -> Result<String, WorkspaceError>;

    /// Brings `changes`' branch onto the current branch of the tree at `project_dir`, or
    /// changes nothing and names the conflicts.
    async fn apply(
        &self,
        project_dir: &std::path::Path,
        changes: &Changes,
    ) -> Result<Applied, WorkspaceError>;
}
