//! Inline script copies, the same for every backend: real files at
//! `<root>/projects/<slug>/runs/{runId}.script.js` ([`script_copy_path`]), so that the
//! editable `file://` script resource keeps working. The run row holds the text durably; the
//! file is what the resource serves and what a resume reads back for revisions, so it is
//! written without an fsync of its own. For a shared store (PostgreSQL) `root` is a folder of
//! the replica that admitted the run; another replica resuming it reads the text from the
//! database, never this file.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::model::RunId;
use crate::store::{StoreError, StoreResult, script_copy_path};

/// What a backend's `delete_run` learned of the run's script before deleting its rows.
pub(crate) struct DeletedRun {
    pub(crate) project_dir: PathBuf,
    /// Whether the run's script was inline, so a copy of it was made.
    pub(crate) inline: bool,
    /// The script file the run recorded (the copy's resolved path when inline).
    pub(crate) script_file: PathBuf,
}

/// Where a store's copies go: its root folder, and that folder with its links followed,
/// found when the first copy is placed and kept (the root of a running store does not move).
pub(crate) struct CopyRoot {
    root: PathBuf,
    resolved: OnceLock<PathBuf>,
}

impl CopyRoot {
    pub(crate) fn new(root: impl Into<PathBuf>) -> CopyRoot {
        CopyRoot {
            root: root.into(),
            resolved: OnceLock::new(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    /// The root with its links followed; `None` while it cannot be resolved (not kept).
    fn resolved(&self) -> Option<&Path> {
        if let Some(resolved) = self.resolved.get() {
            return Some(resolved);
        }
        let resolved = std::fs::canonicalize(&self.root).ok()?;
        Some(self.resolved.get_or_init(|| resolved))
    }
}

/// Makes the copy's folders (each private) and returns where the copy goes, resolved: the
/// root may sit behind a link (`/home` -> `/var/home`), and later reads refuse links. Writes
/// no file, so an admission can record the path before the copy is written.
///
/// Every admission of an inline script places its copy, so the common case is cheap: when
/// `projects/`, the project's folder and its `runs/` are already private folders of this
/// user and none is a link (one `lstat` each), nothing is created and the resolved path is
/// the resolved root joined with the rest. Otherwise each folder is made or narrowed, and
/// the `runs/` folder resolved.
pub(super) fn place(root: &CopyRoot, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf> {
    let path = script_copy_path(root.path(), project_dir, run_id);
    let runs = path.parent().expect("a script copy has a folder");
    let project = runs.parent().expect("a project's runs folder has a parent");
    let projects = project.parent().expect("a project folder has a parent");
    let folders = [projects, project, runs];
    if folders
        .iter()
        .all(|folder| crate::util::private_dir::is_private(folder))
        && let Some(resolved) = root.resolved()
        && let Ok(below) = path.strip_prefix(root.path())
    {
        return Ok(resolved.join(below));
    }
    // `projects/`, the project's folder and its `runs/`, each private (narrowed if older).
    for folder in folders {
        crate::util::private_dir::ensure(folder).map_err(|error| {
            StoreError::Io(format!("store the script of run {run_id}: {error}"))
        })?;
    }
    let name = path.file_name().expect("a script copy has a name");
    Ok(std::fs::canonicalize(runs).map_or(path.clone(), |real| real.join(name)))
}

/// Writes the copy (mode 0600, replacing any earlier one) at its [`place`] and returns that.
pub(super) fn create(
    root: &CopyRoot,
    project_dir: &Path,
    run_id: &RunId,
    text: &str,
) -> StoreResult<PathBuf> {
    let path = place(root, project_dir, run_id)?;
    crate::util::write_replace(&path, text.as_bytes(), 0o600).map_err(|error| {
        StoreError::Io(format!("write the script copy of run {run_id}: {error}"))
    })?;
    Ok(path)
}

/// Narrows the folders of copies an older version left wider than 0700: `projects/`, each
/// project's folder and its `runs/`, when they exist. Run when a store opens, so a daemon's
/// start fixes the tree before any run writes into it; one `read_dir` of `projects/`.
pub(crate) fn narrow_existing(root: &Path) -> StoreResult<()> {
    let projects = root.join("projects");
    let Ok(entries) = std::fs::read_dir(&projects) else {
        return Ok(());
    };
    let mut folders = vec![projects];
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let runs = entry.path().join("runs");
            folders.push(entry.path());
            if runs.is_dir() {
                folders.push(runs);
            }
        }
    }
    for folder in folders {
        crate::util::private_dir::ensure(&folder)
            .map_err(|error| StoreError::Io(error.to_string()))?;
    }
    Ok(())
}

/// Removes the copy; a copy that is not there is already removed.
pub(super) fn delete(root: &Path, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
    let path = script_copy_path(root, project_dir, run_id);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(StoreError::Io(format!(
            "remove the script copy {}: {error}",
            path.display()
        ))),
    }
}

/// After the rows of a deleted run: removes its copy if the run was inline and recorded the
/// copy this store names (never a file the run merely pointed at). The rows are gone by now,
/// so a copy that cannot be removed is logged, not an error of the delete.
pub(super) fn delete_with_run(root: &Path, run_id: &RunId, deleted: &DeletedRun) {
    if !deleted.inline {
        return;
    }
    let expected = script_copy_path(root, &deleted.project_dir, run_id);
    let recorded = deleted.script_file == expected
        || std::fs::canonicalize(&expected).is_ok_and(|real| real == deleted.script_file);
    if !recorded {
        return;
    }
    if let Err(error) = std::fs::remove_file(&expected)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(run = %run_id, "cannot remove the script copy {}: {error}", expected.display());
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn the_folders_of_a_script_copy_are_private_even_under_an_older_wider_tree() {
        let root = tempfile::tempdir().expect("temp dir");
        let project = tempfile::tempdir().expect("temp dir");
        let run_id = RunId::parse("abc123-def456").expect("run id");
        let runs = script_copy_path(root.path(), project.path(), &run_id)
            .parent()
            .expect("runs")
            .to_path_buf();
        // An older version left `projects/<slug>/` at 0755.
        std::fs::create_dir_all(runs.parent().expect("project folder")).expect("old folders");
        for folder in [
            runs.parent().unwrap().parent().unwrap(),
            runs.parent().unwrap(),
        ] {
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let copies = CopyRoot::new(root.path());
        create(&copies, project.path(), &run_id, "export default 1").expect("create");
        let project_folder = runs.parent().unwrap();
        assert_eq!(
            [
                project_folder.parent().unwrap(),
                project_folder,
                runs.as_path()
            ]
            .map(mode),
            [0o700; 3]
        );
    }

    /// Once placed, a copy's folders are found private with no change; a folder widened since
    /// is narrowed again by the next placing, and a link among them is followed, so the path
    /// given is the one reads (which refuse links) accept.
    #[test]
    fn placing_again_narrows_a_widened_folder_and_follows_links() {
        let base = tempfile::tempdir().expect("temp dir");
        let real_root = base.path().join("real");
        std::fs::create_dir(&real_root).expect("root");
        let linked_root = base.path().join("linked");
        std::os::unix::fs::symlink(&real_root, &linked_root).expect("link");
        let project = tempfile::tempdir().expect("temp dir");
        let run_id = RunId::parse("abc123-def456").expect("run id");
        let copies = CopyRoot::new(&linked_root);

        let first = place(&copies, project.path(), &run_id).expect("place");
        let below = script_copy_path(&linked_root, project.path(), &run_id);
        let below = below.strip_prefix(&linked_root).expect("under the root");
        let resolved = real_root.canonicalize().expect("resolve").join(below);
        assert_eq!(first, resolved);
        let runs = first.parent().expect("runs").to_path_buf();
        assert_eq!(
            place(&copies, project.path(), &run_id).expect("again"),
            resolved
        );

        std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(
            place(&copies, project.path(), &run_id).expect("widened"),
            resolved
        );
        assert_eq!(mode(&runs), 0o700, "the widened runs folder is narrowed");

        // The project's folder replaced by a link to a private folder elsewhere.
        let project_folder = runs.parent().expect("project folder").to_path_buf();
        let elsewhere = base.path().join("elsewhere");
        std::fs::rename(&project_folder, &elsewhere).expect("move");
        std::os::unix::fs::symlink(&elsewhere, &project_folder).expect("link");
        let through_link = place(&copies, project.path(), &run_id).expect("through a link");
        assert_eq!(
            through_link,
            elsewhere
                .canonicalize()
                .expect("resolve")
                .join("runs")
                .join(resolved.file_name().unwrap())
        );
    }
}
