//! The workspace port over the `git` command line. Each isolated call's worktree is a
//! detached checkout of the run's base commit at `<state>/worktrees/<run>/<call>/tree`, with a
//! `repository` file beside it naming the repository it belongs to, so a sweep after a crash
//! can unregister it without any other record. Commands that change the repository's shared
//! worktree list or its refs run one at a time per repository within this process, and git's
//! lock files held by other processes are waited out (see `command`), so many calls can open
//! workspaces at once. Commits made here carry the identity `agentprism
//! <agentprism@localhost>` and run no hooks: they record what the agent left, whatever the
//! user's identity and hook setup.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::command::{Git, failed};
use super::{Applied, Base, CallRef, Changes, Workspace, WorkspaceError, Workspaces, names};
use crate::util::sync::Lock;

/// The identity of the commits this room makes.
const IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "agentprism"),
    ("GIT_AUTHOR_EMAIL", "agentprism@localhost"),
    ("GIT_COMMITTER_NAME", "agentprism"),
    ("GIT_COMMITTER_EMAIL", "agentprism@localhost"),
];

/// Worktrees under one state directory, made and removed with `git`.
pub struct GitWorkspaces {
    /// `<state>/worktrees`.
    root: PathBuf,
    git: Git,
    /// One lock per repository top folder, held while its worktree list or refs change.
    repositories: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl GitWorkspaces {
    /// Workspaces kept under `state_dir/worktrees`.
    pub fn new(state_dir: &Path) -> Self {
        Self::with_git(state_dir, Git::default())
    }

    pub(crate) fn with_git(state_dir: &Path, git: Git) -> Self {
        Self {
            root: state_dir.join("worktrees"),
            git,
            repositories: Mutex::new(HashMap::new()),
        }
    }

    fn repository_lock(&self, repository: &Path) -> Arc<tokio::sync::Mutex<()>> {
        self.repositories
            .locked()
            .entry(repository.to_path_buf())
            .or_default()
            .clone()
    }

    fn call_folder(&self, call: &CallRef) -> PathBuf {
        self.root
            .join(names::run_folder(&call.run_id))
            .join(call.call_index.to_string())
    }

    /// The call folder holding `workspace`, refused unless it is one of ours.
    fn owned_folder(&self, workspace: &Workspace) -> Result<PathBuf, WorkspaceError> {
        let folder = self.call_folder(&workspace.call);
        if workspace.root != folder.join("tree") {
            return Err(WorkspaceError::Unusable {
                folder: workspace.root.clone(),
                needed: format!(
                    "is not the worktree of run {} call {}; only worktrees under {} are removed",
                    workspace.call.run_id,
                    workspace.call.call_index,
                    self.root.display()
                ),
            });
        }
        Ok(folder)
    }

    /// Unregisters and deletes the worktree in `folder` (a call folder), whatever state a
    /// crash left it in. The caller holds the repository's lock.
    async fn remove(&self, repository: Option<&Path>, folder: &Path) -> Result<(), WorkspaceError> {
        let tree = folder.join("tree");
        let repository = repository.filter(|repository| repository.is_dir());
        let mut unregistered = false;
        if let (Some(repository), true) = (repository, tree.exists()) {
            let tree_arg = tree.to_string_lossy().into_owned();
            // A failure here (a half-made tree) is handled by deleting and pruning below.
            unregistered = self
                .git
                .run(
                    repository,
                    &["worktree", "remove", "--force", "--force", &tree_arg],
                )
                .await?
                .success;
        }
        if folder.exists() {
            std::fs::remove_dir_all(folder).map_err(|error| WorkspaceError::Git {
                command: "worktree remove".to_owned(),
                folder: folder.to_path_buf(),
                message: format!("cannot delete the worktree folder: {error}"),
            })?;
        }
        // A removal git did itself leaves no record to prune; a tree deleted some other way
        // (a crash, a failed removal) may have left its record in the repository.
        if let (Some(repository), false) = (repository, unregistered) {
            self.git.ok(repository, &["worktree", "prune"]).await?;
        }
        if let Some(run_folder) = folder.parent() {
            // Only succeeds once the run has no worktree left, which is the point.
            let _ = std::fs::remove_dir(run_folder);
        }
        Ok(())
    }

    /// The repository named by the `repository` file of a call folder, if it is there.
    fn recorded_repository(folder: &Path) -> Option<PathBuf> {
        // Our own one-line file; a path is far shorter than this bound.
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(
                std::fs::File::open(folder.join("repository")).ok()?,
                64 * 1024,
            ),
            &mut text,
        )
        .ok()?;
        Some(PathBuf::from(text.trim_end_matches('\n')))
    }
}

#[async_trait]
impl Workspaces for GitWorkspaces {
    async fn base(&self, project_dir: &Path) -> Result<Base, WorkspaceError> {
        super::base::check(&self.git, &self.root, project_dir).await
    }

    async fn open(&self, base: &Base, call: CallRef) -> Result<Workspace, WorkspaceError> {
        let folder = self.call_folder(&call);
        let tree = folder.join("tree");
        let lock = self.repository_lock(&base.repository);
        let _held = lock.lock().await;
        if folder.exists() {
            let recorded = Self::recorded_repository(&folder);
            self.remove(recorded.as_deref().or(Some(&base.repository)), &folder)
                .await?;
        }
        let io = |error: std::io::Error| WorkspaceError::Git {
            command: "worktree add".to_owned(),
            folder: folder.clone(),
            message: format!("cannot prepare the worktree folder: {error}"),
        };
        crate::util::private_dir::ensure(&folder).map_err(io)?;
        let repository = base
            .repository
            .to_str()
            .ok_or_else(|| WorkspaceError::Unusable {
                folder: base.repository.clone(),
                needed: "worktree isolation needs a repository path that is valid UTF-8".to_owned(),
            })?;
        std::fs::write(folder.join("repository"), format!("{repository}\n")).map_err(io)?;
        let tree_arg = tree.to_string_lossy().into_owned();
        let args = [
            // The user's post-checkout hook is not ours to run in our worktree.
            "-c",
            "core.hooksPath=/dev/null",
            "worktree",
            "add",
            "--detach",
            "--quiet",
            &tree_arg,
            &base.commit,
        ];
        let ran = self.git.run(&base.repository, &args).await?;
        if !ran.success {
            let error = failed(&base.repository, &args, &ran);
            let _ = self.remove(Some(&base.repository), &folder).await;
            return Err(error);
        }
        let cwd = if base.subfolder.as_os_str().is_empty() {
            tree.clone()
        } else {
            tree.join(&base.subfolder)
        };
        if !cwd.is_dir() {
            let _ = self.remove(Some(&base.repository), &folder).await;
            return Err(WorkspaceError::Unusable {
                folder: base.repository.join(&base.subfolder),
                needed: format!(
                    "is not in the base commit {}; worktree isolation needs the project folder committed",
                    base.commit
                ),
            });
        }
        Ok(Workspace {
            call,
            root: tree,
            cwd,
        })
    }

    async fn finish(&self, base: &Base, workspace: Workspace) -> Result<Changes, WorkspaceError> {
        let folder = self.owned_folder(&workspace)?;
        let head =
            super::commit::record(&self.git, &workspace.root, &workspace.call, &IDENTITY).await?;
        let mut changes = Changes {
            branch: None,
            base_commit: base.commit.clone(),
            head_commit: head.clone(),
            files_changed: 0,
            insertions: 0,
            deletions: 0,
        };
        if head != base.commit {
            let numstat = self
                .git
                .ok(
                    &base.repository,
                    &["diff", "--numstat", &base.commit, &head],
                )
                .await?;
            for line in numstat.lines() {
                let mut fields = line.split('\t');
                changes.files_changed += 1;
                // Binary files show `-` for both counts: they change a file and no lines.
                changes.insertions += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                changes.deletions += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            }
        }
        // The lock covers what changes the repository's refs and worktree list, not the
        // reads and commits above.
        let lock = self.repository_lock(&base.repository);
        let _held = lock.lock().await;
        if head != base.commit {
            let branch = names::branch(&workspace.call);
            self.git
                .ok(&base.repository, &["branch", "--force", &branch, &head])
                .await?;
            changes.branch = Some(branch);
        }
        self.remove(Some(&base.repository), &folder).await?;
        Ok(changes)
    }

    async fn discard(&self, workspace: Workspace) -> Result<(), WorkspaceError> {
        let folder = self.owned_folder(&workspace)?;
        let repository = Self::recorded_repository(&folder);
        let lock = repository.as_deref().map(|r| self.repository_lock(r));
        let _held = match &lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        self.remove(repository.as_deref(), &folder).await
    }

    async fn runs(&self) -> Vec<String> {
        let Ok(runs) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        // Asked when a process starts: the folders an older version left wider are narrowed
        // to 0700 here (best effort; a folder that cannot be is used as it is).
        let _ = crate::util::private_dir::ensure(&self.root);
        let mut names = Vec::new();
        for run in runs.flatten() {
            if run.file_type().is_ok_and(|kind| kind.is_dir()) {
                let _ = crate::util::private_dir::ensure(&run.path());
            }
            names.extend(run.file_name().into_string().ok());
        }
        names
    }

    async fn sweep(&self, runs: &[String]) -> Result<usize, WorkspaceError> {
        let mut removed = 0;
        for run in runs {
            // The names `runs` lists are folder names already; anything else names nothing.
            if names::run_folder(run) != *run {
                continue;
            }
            let run_folder = self.root.join(run);
            let Ok(calls) = std::fs::read_dir(&run_folder) else {
                continue;
            };
            for call in calls.flatten() {
                let folder = call.path();
                let repository = Self::recorded_repository(&folder);
                let lock = repository.as_deref().map(|r| self.repository_lock(r));
                let _held = match &lock {
                    Some(lock) => Some(lock.lock().await),
                    None => None,
                };
                self.remove(repository.as_deref(), &folder).await?;
                removed += 1;
            }
            let _ = std::fs::remove_dir(&run_folder);
        }
        Ok(removed)
    }

    async fn diff(
        &self,
        base: &Base,
        changes: &Changes,
        max_bytes: usize,
    ) -> Result<String, WorkspaceError> {
        if changes.branch.is_none() {
            return Ok(String::new());
        }
        let args = [
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            &changes.base_commit,
            &changes.head_commit,
        ];
        let ran = self
            .git
            .run_capped(&base.repository, &args, max_bytes + 1)
            .await?;
        if !ran.success && !ran.cut {
            return Err(failed(&base.repository, &args, &ran));
        }
        let text = String::from_utf8_lossy(&ran.stdout);
        Ok(bounded(&text, max_bytes, (!ran.cut).then_some(text.len())))
    }

    async fn apply(
        &self,
        project_dir: &Path,
        changes: &Changes,
    ) -> Result<Applied, WorkspaceError> {
        super::apply::apply(self, project_dir, changes).await
    }
}

impl GitWorkspaces {
    pub(crate) fn git(&self) -> &Git {
        &self.git
    }

    pub(crate) async fn with_repository_lock<T>(
        &self,
        repository: &Path,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        let lock = self.repository_lock(repository);
        let _held = lock.lock().await;
        work.await
    }
}

/// `text` cut to at most `max_bytes`, on a character boundary, ending with a note of the
/// full size when it was cut (the note counts towards the limit). `whole` is the full size
/// when `text` is all of it; `None` when git was stopped after `max_bytes`.
pub(crate) fn bounded(text: &str, max_bytes: usize, whole: Option<usize>) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let note = match whole {
        Some(size) => format!("\n[diff cut: {size} bytes in all]\n"),
        None => format!("\n[diff cut: more than {max_bytes} bytes]\n"),
    };
    if note.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        return text[..end].to_owned();
    }
    let mut end = max_bytes - note.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

/// The identity for commits this room makes (merges in `apply` when the user has none).
pub(crate) const fn identity() -> [(&'static str, &'static str); 4] {
    IDENTITY
}
