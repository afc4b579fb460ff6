//! Inline script copies of a shared store: the database keeps the script text, and the
//! editable `file://` copy is a file of the replica that admitted the run, under its local
//! `PgOptions::script_copy_root`, at the same place in that folder as the SQLite store puts
//! it (`projects/<slug>/runs/{runId}.script.js`). Another replica resuming the run reads the
//! text from the database, never this file.

use std::path::{Path, PathBuf};

use super::runs::Deleted;
use crate::model::RunId;
use crate::store::{StoreError, StoreResult, script_copy_path};

/// Writes the copy (mode 0600, replacing any earlier one) and returns its resolved path.
pub(super) fn create(
    root: &Path,
    project_dir: &Path,
    run_id: &RunId,
    text: &str,
) -> StoreResult<PathBuf> {
    let path = script_copy_path(root, project_dir, run_id);
    crate::util::write_replace(&path, text.as_bytes(), 0o600).map_err(|error| {
        StoreError::Io(format!("write the script copy of run {run_id}: {error}"))
    })?;
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
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

/// After the rows of a deleted run: removes this replica's copy if the run was inline and
/// recorded the copy this folder holds. The rows are gone by now, so a copy that cannot be
/// removed is logged, not an error of the delete.
pub(super) fn delete_with_run(root: &Path, run_id: &RunId, deleted: &Deleted) {
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
