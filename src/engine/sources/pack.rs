//! [`PackSources`]: the sources port over an opened workflows pack (`agentprism serve
//! --workflows-pack`). Every file under the served folder comes from the pack's entries,
//! held in memory, and never from the disk: a path under `root` that the pack lacks is not
//! found, whatever the disk holds there. `root` only composes the paths runs record and
//! hand to subprocesses (`<root>/<path in the pack>`). Files outside it (the operator's
//! tiers file and agent definitions under the home folder) are read from the disk as
//! [`DiskSources`] reads them: they are configuration of the host, not pack content.
//!
//! The sources are [`Sources::confidential`]: the engine stores digests of what it reads
//! here, never the text (`ScriptSource::Pack`).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;

use super::{Contents, DiskSources, FileError, SourceError, Sources};
use crate::engine::script::{MAX_SCRIPT_BYTES, companion_path_problem};
use crate::pack::Entry;

/// The entries of one pack, by path, under the folder they are served as.
pub(crate) struct PackSources {
    /// The served folder, absolute: where the entries appear to be.
    root: PathBuf,
    /// Content by `/`-separated path under `root`, as the pack holds it.
    files: BTreeMap<String, Vec<u8>>,
}

impl PackSources {
    /// `entries` (already checked by the pack reader: relative, unique paths) served under
    /// `root`, which must be absolute.
    pub(crate) fn new(root: PathBuf, entries: Vec<Entry>) -> PackSources {
        let files = entries
            .into_iter()
            .map(|entry| (entry.path, entry.content))
            .collect();
        PackSources { root, files }
    }

    /// `path`'s place in the pack when it lies under the root: `Some` even for a path the
    /// pack lacks (which is then not found), `None` for a path outside the served folder.
    fn under_root(&self, path: &Path) -> Option<String> {
        let rest = path.strip_prefix(&self.root).ok()?;
        let mut parts = Vec::new();
        for component in rest.components() {
            match component {
                Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
                // `..` or `.` cannot name a pack entry; a path under the root is not found.
                _ => return Some(String::new()),
            }
        }
        Some(parts.join("/"))
    }

    fn get(&self, path: &Path, relative: &str, limit: u64) -> Result<Contents, FileError> {
        let Some(bytes) = self.files.get(relative) else {
            return Err(FileError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    ErrorKind::NotFound,
                    "no such file in the workflows pack",
                ),
            });
        };
        if bytes.len() as u64 > limit {
            return Err(FileError::TooLarge {
                path: path.to_path_buf(),
                resolved: None,
                size: Some(bytes.len() as u64),
                limit,
            });
        }
        Ok(Contents {
            path: path.to_path_buf(),
            bytes: bytes.clone(),
        })
    }

    fn script(&self, path: &Path) -> Result<Contents, FileError> {
        match self.under_root(path) {
            Some(relative) => self.get(path, &relative, MAX_SCRIPT_BYTES as u64),
            // A served script is always one of the pack's: nothing runs from the disk.
            None => Err(FileError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    ErrorKind::NotFound,
                    "outside the served folder: scripts come only from the workflows pack",
                ),
            }),
        }
    }
}

#[async_trait]
impl Sources for PackSources {
    async fn read_script(&self, path: &Path) -> Result<Contents, FileError> {
        self.script(path)
    }

    async fn reread_script(&self, path: &Path) -> Result<Contents, FileError> {
        self.script(path)
    }

    fn read_companion(&self, path: &Path, limit: u64) -> Result<Contents, FileError> {
        match self.under_root(path) {
            Some(relative) => self.get(path, &relative, limit),
            None => DiskSources.read_companion(path, limit),
        }
    }

    fn companions(&self, folder: &Path, extension: &str) -> Vec<PathBuf> {
        let Some(prefix) = self.under_root(folder) else {
            return DiskSources.companions(folder, extension);
        };
        let suffix = format!(".{extension}");
        self.files
            .keys()
            .filter_map(|path| {
                let name = match prefix.as_str() {
                    "" => path.as_str(),
                    prefix => path.strip_prefix(prefix)?.strip_prefix('/')?,
                };
                (!name.contains('/') && name.ends_with(&suffix) && name.len() > suffix.len())
                    .then(|| self.root.join(path))
            })
            .collect()
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
        let path = project_dir.join(relative);
        match self.under_root(&path) {
            Some(inside) => Ok(self.get(&path, &inside, limit)?),
            None => DiskSources.read_project_file(project_dir, relative, limit),
        }
    }

    fn confidential(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(root: &Path) -> PackSources {
        let entry = |path: &str, text: &str| Entry {
            path: path.to_owned(),
            content: text.as_bytes().to_vec(),
        };
        PackSources::new(
            root.to_path_buf(),
            vec![
                entry("flow.js", "export const meta = {};"),
                entry("prompts/review.md", "Review."),
                entry("prompts/deep/more.md", "More."),
                entry("agents/a.md", "A"),
            ],
        )
    }

    #[tokio::test]
    async fn files_under_the_root_come_from_the_pack_only() {
        let folder = tempfile::tempdir().unwrap();
        let root = folder.path().to_path_buf();
        // The disk holds another file at a packed path and one the pack lacks: neither is read.
        std::fs::write(root.join("flow.js"), "disk text").unwrap();
        std::fs::write(root.join("other.js"), "disk text").unwrap();
        let pack = sources(&root);
        assert!(pack.confidential());
        let read = pack.read_script(&root.join("flow.js")).await.unwrap();
        assert_eq!(read.bytes, b"export const meta = {};");
        assert_eq!(read.path, root.join("flow.js"));
        assert!(
            pack.reread_script(&root.join("other.js"))
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            pack.read_script(&root.join("../flow.js"))
                .await
                .unwrap_err()
                .is_not_found()
        );
        let outside = pack
            .read_script(Path::new("/etc/hostname"))
            .await
            .unwrap_err();
        assert!(
            outside.to_string().contains("only from the workflows pack"),
            "{outside}"
        );

        let file = pack
            .read_project_file(&root, "prompts/review.md", 64)
            .unwrap();
        assert_eq!(file.bytes, b"Review.");
        assert!(matches!(
            pack.read_project_file(&root, "prompts/review.md", 3),
            Err(SourceError::File(FileError::TooLarge { .. }))
        ));
        assert!(matches!(
            pack.read_project_file(&root, "../x.md", 64),
            Err(SourceError::InvalidPath { .. })
        ));
        assert!(matches!(
            pack.read_project_file(&root, "other.js", 64),
            Err(SourceError::File(ref error)) if error.is_not_found()
        ));
        assert_eq!(
            pack.companions(&root.join("prompts"), "md"),
            [root.join("prompts/review.md")]
        );
        assert_eq!(pack.companions(&root, "js"), [root.join("flow.js")]);
        assert_eq!(
            pack.read_companion(&root.join("agents/a.md"), 8)
                .unwrap()
                .bytes,
            b"A"
        );
    }

    #[test]
    fn files_outside_the_root_are_the_hosts_own() {
        let folder = tempfile::tempdir().unwrap();
        let root = folder.path().join("site");
        let home = folder.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("tiers.json"), "{}").unwrap();
        let pack = sources(&root);
        assert_eq!(
            pack.read_companion(&home.join("tiers.json"), 8)
                .unwrap()
                .bytes,
            b"{}"
        );
        assert_eq!(pack.companions(&home, "json"), [home.join("tiers.json")]);
    }
}
