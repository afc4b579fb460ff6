//! Inline script copies, the same for every backend: real files at
//! `<root>/projects/<slug>/runs/{runId}.script.js` ([`script_copy_path`]), so that the
//! editable `file://` script resource keeps working. The run row holds the text durably; the
//! file is what the resource serves and what a resume reads back for revisions, so it is
//! written without an fsync of its own. For a shared store (PostgreSQL) `root` is a folder of
//! the replica that admitted the run; another replica resuming it reads the text from the
//! database, never this file.

use std::path::{Path, PathBuf};

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

/// Makes the copy's folders (each private) and returns where the copy goes, resolved: the
/// root may sit behind a link (`/home` -> `/var/home`), and later reads refuse links. Writes
/// no file, so an admission can record the path before the copy is written.
pub(super) fn place(root: &Path, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf> {
    let path = script_copy_path(root, project_dir, run_id);
    // `projects/`, the project's folder and its `runs/`, each private (narrowed if older).
    let runs = path.parent().expect("a script copy has a folder");
    for folder in [
        runs.parent().and_then(Path::parent),
        runs.parent(),
        Some(runs),
    ]
    .into_iter()
    .flatten()
    {
        crate::util::private_dir::ensure(folder).map_err(|error| {
            StoreError::Io(format!("store the script of run {run_id}: {error}"))
        })?;
    }
    let name = path.file_name().expect("a script copy has a name");
    Ok(std::fs::canonicalize(runs).map_or(path.clone(), |real| real.join(name)))
}

/// Writes the copy (mode 0600, replacing any earlier one) at its [`place`] and returns that.
pub(super) fn create(
    root: &Path,
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
        create(root.path(), project.path(), &run_id, "export default 1").expect("create");
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
}
