//! The sources port: where the engine reads workflow scripts and the files they name.
//!
//! Besides the store and the agent runner, this is the engine's third way to the outside
//! world. Every script a run is started from, every read-back of a run's recorded script
//! (a resume looks for a revision), every saved workflow a nested `workflow(name)` call
//! runs, every companion file routing captures at admission (the tiers file, agent
//! definitions) and every file a script declares in `meta.files` comes through [`Sources`]. The engine decides what to read and what a file
//! must look like; the implementation decides where the bytes come from. [`DiskSources`]
//! reads the file system through [`safe_file`] (no symbolic link followed after
//! resolution, regular files only, size bounded, under a deadline); [`PackSources`]
//! (`sources/pack.rs`) serves the entries of an encrypted workflows pack.
//!
//! Errors are [`FileError`]s: they name the path and say what it is, never what it holds,
//! and `is_not_found` tells a missing file from an unreadable one. A project file named by a
//! relative path can also be refused for the path itself ([`SourceError::InvalidPath`]).
//!
//! A source that is confidential ([`Sources::confidential`], a pack) makes its runs
//! `ScriptSource::Pack`: the manager (`manager/confidential.rs`) hands the store digests in
//! place of the script and companion texts and reads the texts from the pack again before a
//! resume or a setup answer executes, refusing a changed digest. So a pack run's texts never
//! reach the store, and a pack run has no script copy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::script::{MAX_SCRIPT_BYTES, companion_path_problem};
use crate::util::safe_file::{self, Links};

pub(crate) use crate::util::safe_file::{Contents, FileError};

mod pack;
pub(crate) use pack::PackSources;

/// Where scripts and their companion files come from.
#[async_trait]
pub trait Sources: Send + Sync {
    /// A script named by a caller for a new run (`scriptPath`), at most
    /// [`MAX_SCRIPT_BYTES`]. Its `path` is the resolved one, which the run records.
    async fn read_script(&self, path: &Path) -> Result<Contents, FileError>;

    /// A run's recorded script again, at the path it recorded: nothing on the way may have
    /// become a link since.
    async fn reread_script(&self, path: &Path) -> Result<Contents, FileError>;

    /// A companion file of at most `limit` bytes: a saved workflow, an agent definition,
    /// the tiers file. Blocking: called from the script's VM thread and from the blocking
    /// pool, never from an async worker.
    fn read_companion(&self, path: &Path, limit: u64) -> Result<Contents, FileError>;

    /// The files in `folder` whose name ends in `.{extension}`, sorted; none when the
    /// folder does not exist or cannot be listed. Blocking, like [`Sources::read_companion`].
    fn companions(&self, folder: &Path, extension: &str) -> Vec<PathBuf>;

    /// A file a script declares in `meta.files`, of at most `limit` bytes: `relative` (which
    /// must pass [`companion_path_problem`]) under `project_dir`. On disk the project folder
    /// is resolved once and nothing below it may be a symbolic link. Blocking, like
    /// [`Sources::read_companion`].
    fn read_project_file(
        &self,
        project_dir: &Path,
        relative: &str,
        limit: u64,
    ) -> Result<Contents, SourceError>;

    /// Whether what these sources hold is confidential (an encrypted pack): the engine then
    /// stores SHA-256 digests of the script and its companion files, never their text, and
    /// reads them here again (refusing a changed digest) before each generation.
    fn confidential(&self) -> bool {
        false
    }
}

/// Why a project file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The relative path breaks the companion path rule; `problem` completes "the path ...".
    #[error("the path {path:?} {problem}")]
    InvalidPath { path: String, problem: String },
    #[error(transparent)]
    File(#[from] FileError),
}

/// Sources on the local file system, read through [`safe_file`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DiskSources;

impl DiskSources {
    pub(crate) fn shared() -> Arc<dyn Sources> {
        Arc::new(DiskSources)
    }
}

#[async_trait]
impl Sources for DiskSources {
    async fn read_script(&self, path: &Path) -> Result<Contents, FileError> {
        safe_file::read(path, MAX_SCRIPT_BYTES as u64, Links::ResolveFirst).await
    }

    async fn reread_script(&self, path: &Path) -> Result<Contents, FileError> {
        safe_file::read(path, MAX_SCRIPT_BYTES as u64, Links::Refuse).await
    }

    fn read_companion(&self, path: &Path, limit: u64) -> Result<Contents, FileError> {
        safe_file::read_blocking(path, limit, Links::ResolveFirst)
    }

    fn companions(&self, folder: &Path, extension: &str) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(folder) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().and_then(|e| e.to_str()) == Some(extension))
            .collect();
        paths.sort();
        paths
    }

    fn read_project_file(
        &self,
        project_dir: &Path,
        relative: &str,
        limit: u64,
    ) -> Result<Contents, SourceError> {
        if let Some(problem) = companion_path_problem(relative) {
            return Err(SourceError::InvalidPath {
                path: relative.to_owned(),
                problem,
            });
        }
        // The project folder is the operator's choice and may sit behind a link; below it,
        // a link (swapped in or not) is refused like a FIFO or a folder.
        let root = std::fs::canonicalize(project_dir).map_err(|source| FileError::Io {
            path: project_dir.to_path_buf(),
            source,
        })?;
        Ok(safe_file::read_blocking(
            &root.join(relative),
            limit,
            Links::Refuse,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_are_the_files_with_the_extension_in_name_order() {
        let folder = tempfile::tempdir().expect("temp dir");
        for name in ["b.md", "a.md", "notes.txt", "c.md.bak"] {
            std::fs::write(folder.path().join(name), "x").expect("write");
        }
        let names: Vec<String> = DiskSources
            .companions(folder.path(), "md")
            .iter()
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.md", "b.md"]);
        assert!(
            DiskSources
                .companions(&folder.path().join("absent"), "md")
                .is_empty()
        );
    }

    #[test]
    fn project_files_are_read_below_the_project_without_links_or_fifos() {
        let folder = tempfile::tempdir().expect("temp dir");
        let project = folder.path().join("project");
        std::fs::create_dir_all(project.join("prompts")).expect("folders");
        std::fs::write(project.join("prompts/review.md"), "Review.").expect("write");
        std::fs::write(folder.path().join("outside.md"), "secret").expect("write");
        let read = DiskSources
            .read_project_file(&project, "prompts/review.md", 64)
            .expect("a plain file is read");
        assert_eq!(read.bytes, b"Review.");

        std::os::unix::fs::symlink(folder.path().join("outside.md"), project.join("link.md"))
            .expect("link");
        std::os::unix::fs::symlink(project.join("prompts"), project.join("linked"))
            .expect("folder link");
        for linked in ["link.md", "linked/review.md"] {
            let error = DiskSources
                .read_project_file(&project, linked, 64)
                .expect_err("a link below the project is refused");
            assert!(
                matches!(error, SourceError::File(FileError::Symlink { .. })),
                "{linked}: {error}"
            );
        }
        let fifo = project.join("pipe.md");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let error = DiskSources
            .read_project_file(&project, "pipe.md", 64)
            .expect_err("a FIFO is refused without blocking");
        assert!(error.to_string().contains("FIFO"), "{error}");
        let error = DiskSources
            .read_project_file(&project, "prompts", 64)
            .expect_err("a folder is refused");
        assert!(error.to_string().contains("a directory"), "{error}");
        let error = DiskSources
            .read_project_file(&project, "prompts/review.md", 6)
            .expect_err("over the limit");
        assert!(error.to_string().contains("too large"), "{error}");
        for bad in [
            "/etc/passwd",
            "../outside.md",
            "prompts/../../outside.md",
            ".env",
        ] {
            let error = DiskSources
                .read_project_file(&project, bad, 64)
                .expect_err("an invalid path is refused before any open");
            assert!(
                matches!(error, SourceError::InvalidPath { .. }),
                "{bad}: {error}"
            );
        }
        let missing = DiskSources
            .read_project_file(&project, "gone.md", 64)
            .expect_err("missing");
        assert!(
            matches!(missing, SourceError::File(ref e) if e.is_not_found()),
            "{missing}"
        );
    }

    #[tokio::test]
    async fn a_recorded_script_is_read_again_without_following_links() {
        let folder = tempfile::tempdir().expect("temp dir");
        let real = std::fs::canonicalize(folder.path()).expect("canonical");
        std::fs::write(real.join("flow.js"), "text").expect("write");
        std::os::unix::fs::symlink(real.join("flow.js"), real.join("link.js")).expect("link");
        let first = DiskSources
            .read_script(&real.join("link.js"))
            .await
            .expect("resolved once");
        assert_eq!(first.path, real.join("flow.js"));
        assert!(
            DiskSources
                .reread_script(&real.join("link.js"))
                .await
                .is_err()
        );
        let missing = DiskSources
            .reread_script(&real.join("gone.js"))
            .await
            .expect_err("gone");
        assert!(missing.is_not_found());
    }
}
