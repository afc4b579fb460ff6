//! Checking a project folder for worktree isolation and recording its base: everything an
//! isolated call will need is checked here, so admission refuses what a call would fail on.
//! Each refusal names the folder and what it needs.

use std::path::{Path, PathBuf};

use super::command::{Git, failed};
use super::{Base, WorkspaceError};

/// The base of `project_dir`, or why it cannot be isolated. `worktrees` is where the
/// worktrees will live; it must not be inside the repository.
pub(crate) async fn check(
    git: &Git,
    worktrees: &Path,
    project_dir: &Path,
) -> Result<Base, WorkspaceError> {
    let unusable = |needed: String| WorkspaceError::Unusable {
        folder: project_dir.to_path_buf(),
        needed,
    };
    if !project_dir.is_dir() {
        return Err(unusable(
            "is not a folder; worktree isolation needs an existing project folder".to_owned(),
        ));
    }
    let kind = git
        .run(
            project_dir,
            &["rev-parse", "--is-bare-repository", "--is-inside-work-tree"],
        )
        .await?;
    if !kind.success {
        return Err(unusable(match dot_git_above(project_dir) {
            Some(dot_git) => format!(
                "has a git directory git cannot read ({}: {}); worktree isolation needs a readable git repository",
                dot_git.display(),
                kind.stderr
            ),
            None => "is not in a git repository; worktree isolation needs the project folder inside a git repository with at least one commit".to_owned(),
        }));
    }
    let text = kind.text();
    let mut answers = text.lines();
    if answers.next() == Some("true") {
        return Err(unusable(
            "is a bare git repository; worktree isolation needs a repository with a working tree"
                .to_owned(),
        ));
    }
    if answers.next() != Some("true") {
        return Err(unusable(
            "is inside a git directory, not a working tree; worktree isolation needs the project folder in a repository's working tree".to_owned(),
        ));
    }
    let places = git
        .ok(
            project_dir,
            &["rev-parse", "--show-toplevel", "--show-prefix"],
        )
        .await?;
    let mut places = places.lines();
    let repository = PathBuf::from(places.next().unwrap_or_default());
    let subfolder = PathBuf::from(places.next().unwrap_or_default().trim_end_matches('/'));
    let head = git
        .run(
            project_dir,
            &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        )
        .await?;
    if !head.success {
        return Err(unusable(
            "is in a git repository with no commit yet; worktree isolation needs at least one commit to start from".to_owned(),
        ));
    }
    let commit = head.text();
    let branch = git
        .run(project_dir, &["symbolic-ref", "--quiet", "HEAD"])
        .await?;
    if !branch.success {
        return Err(unusable(
            "has a detached HEAD; worktree isolation needs a branch checked out (git switch <branch>), the one changes are brought onto".to_owned(),
        ));
    }
    if !subfolder.as_os_str().is_empty() {
        let object = format!("{commit}:{}", subfolder.to_string_lossy());
        let present = git.run(project_dir, &["cat-file", "-e", &object]).await?;
        if !present.success {
            return Err(unusable(format!(
                "is not in the commit {commit} at HEAD; worktree isolation needs the project folder committed"
            )));
        }
    }
    keep_worktrees_outside(worktrees, &repository, &unusable)?;
    let status_args = ["status", "--porcelain", "--untracked-files=normal"];
    let status = git.run(&repository, &status_args).await?;
    if !status.success {
        return Err(failed(&repository, &status_args, &status));
    }
    Ok(Base {
        repository,
        commit,
        subfolder,
        dirty: !status.stdout.is_empty(),
    })
}

/// Makes the worktrees folder (0700: it holds checkouts of the user's code) and refuses one inside `repository`: the user's tree would then
/// hold our worktrees.
fn keep_worktrees_outside(
    worktrees: &Path,
    repository: &Path,
    unusable: &impl Fn(String) -> WorkspaceError,
) -> Result<(), WorkspaceError> {
    crate::util::private_dir::ensure(worktrees).map_err(|error| WorkspaceError::Git {
        command: "worktree add".to_owned(),
        folder: worktrees.to_path_buf(),
        message: format!("cannot create the worktrees folder: {error}"),
    })?;
    let inside = match (worktrees.canonicalize(), repository.canonicalize()) {
        (Ok(worktrees), Ok(repository)) => worktrees.starts_with(repository),
        _ => false,
    };
    if inside {
        return Err(unusable(format!(
            "is in the repository {} that holds the state directory's worktrees ({}); worktree isolation needs the state directory outside the project's repository",
            repository.display(),
            worktrees.display()
        )));
    }
    Ok(())
}

/// The nearest `.git` at or above `folder`, if any: its presence means git failed to read a
/// repository rather than found none.
fn dot_git_above(folder: &Path) -> Option<PathBuf> {
    folder
        .ancestors()
        .map(|folder| folder.join(".git"))
        .find(|dot_git| dot_git.symlink_metadata().is_ok())
}
