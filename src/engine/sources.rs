//! The sources port: where the engine reads workflow scripts and the files they name.
//!
//! Besides the store and the agent runner, this is the engine's third way to the outside
//! world. Every script a run is started from, every read-back of a run's recorded script
//! (a resume looks for a revision), every saved workflow a nested `workflow(name)` call
//! runs, and every companion file routing captures at admission (the tiers file, agent
//! definitions) comes through [`Sources`]. The engine decides what to read and what a file
//! must look like; the implementation decides where the bytes come from. [`DiskSources`]
//! reads the file system through [`safe_file`] (no symbolic link followed after
//! resolution, regular files only, size bounded, under a deadline); the serve mode adds an
//! encrypted pack.
//!
//! Errors are [`FileError`]s: they name the path and say what it is, never what it holds,
//! and `is_not_found` tells a missing file from an unreadable one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::script::MAX_SCRIPT_BYTES;
use crate::util::safe_file::{self, Links};

pub use crate::util::safe_file::{Contents, FileError};

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
}

/// Sources on the local file system, read through [`safe_file`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskSources;

impl DiskSources {
    pub fn shared() -> Arc<dyn Sources> {
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
