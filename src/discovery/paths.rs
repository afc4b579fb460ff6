//! Where discovery state lives. `R` is `$AGENTPRISM_PERSISTENCE_ROOT` or
//! `~/.agentprism/workflows`; everything a daemon publishes about itself is under `R/daemons/`
//! (mode 0700, files 0600), so another local user can neither read the run-control key nor
//! plant a record.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{DiscoveryError, Result};
use crate::env::{self, EnvSnapshot};

/// Mode of every folder discovery creates.
pub(crate) const FOLDER_MODE: u32 = 0o700;
/// Mode of every file discovery creates.
pub(crate) const FILE_MODE: u32 = 0o600;

/// The discovery layout under one persistence root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    root: PathBuf,
}

impl Paths {
    /// The layout under an explicit root (tests, `--persistence-root`).
    pub fn new(root: impl Into<PathBuf>) -> Paths {
        Paths { root: root.into() }
    }

    /// `AGENTPRISM_PERSISTENCE_ROOT`, else `$HOME/.agentprism/workflows`.
    pub fn from_env(env: &EnvSnapshot) -> Result<Paths> {
        if let Some(root) = env.non_empty(env::PERSISTENCE_ROOT) {
            return Ok(Paths::new(root));
        }
        let home = env.home().ok_or(DiscoveryError::NoRoot)?;
        Ok(Paths::new(
            Path::new(home).join(".agentprism").join("workflows"),
        ))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `R/daemons/`: pointers, locks, the key.
    pub fn daemons_dir(&self) -> PathBuf {
        self.root.join("daemons")
    }

    /// `R/daemons/instances/`: one record per live daemon.
    pub(crate) fn instances_dir(&self) -> PathBuf {
        self.daemons_dir().join("instances")
    }

    /// `R/daemons/<fp>.json`: the family pointer, a copy of the current daemon's record.
    pub fn pointer(&self, fingerprint: &str) -> PathBuf {
        self.daemons_dir().join(format!("{fingerprint}.json"))
    }

    /// `R/daemons/instances/<pid>.json`.
    pub fn instance_record(&self, pid: u32) -> PathBuf {
        self.instances_dir().join(format!("{pid}.json"))
    }

    /// `R/daemons/<fp>.spawn.lock`: held by a shim while it decides whether to spawn.
    pub fn spawn_lock(&self, fingerprint: &str) -> PathBuf {
        self.daemons_dir().join(format!("{fingerprint}.spawn.lock"))
    }

    /// `R/daemons/<fp>.pointer.lock`: held by a daemon around a pointer CAS or clear.
    pub(crate) fn pointer_lock(&self, fingerprint: &str) -> PathBuf {
        self.daemons_dir()
            .join(format!("{fingerprint}.pointer.lock"))
    }

    /// `R/daemons/run-control-key.json`.
    pub(crate) fn run_control_key(&self) -> PathBuf {
        self.daemons_dir().join("run-control-key.json")
    }

    /// `R/daemons/http-token.json`: the HTTP bearer token, in the run-control key's format.
    pub(crate) fn http_token(&self) -> PathBuf {
        self.daemons_dir().join("http-token.json")
    }

    /// `R/logs/`.
    pub(crate) fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `R/logs/daemon.log`.
    pub fn daemon_log(&self) -> PathBuf {
        self.logs_dir().join("daemon.log")
    }

    /// Creates `R/daemons/`, `R/daemons/instances/` and `R/logs/` with mode 0700, and brings
    /// an existing one we own back to 0700. A folder owned by another user, or a path that is
    /// not a folder, is refused.
    pub fn ensure_dirs(&self) -> Result<()> {
        // The persistence root too: 0700, narrowed if an older version left it wider.
        crate::util::private_dir::ensure(&self.root)
            .map_err(|e| DiscoveryError::io("create folder", &self.root, e))?;
        for dir in [self.daemons_dir(), self.instances_dir(), self.logs_dir()] {
            ensure_private_dir(&dir)?;
        }
        Ok(())
    }
}

/// Creates `dir` with mode 0700 (its parent must exist), or checks an existing one: it must
/// be a folder owned by us; a wider mode is narrowed to 0700.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(FOLDER_MODE).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DiscoveryError::io("create folder", dir, e)),
    }
    let meta = std::fs::metadata(dir).map_err(|e| DiscoveryError::io("inspect", dir, e))?;
    if !meta.is_dir() {
        return Err(DiscoveryError::UnsafeFolder {
            path: dir.to_path_buf(),
            reason: "not a folder".into(),
        });
    }
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() != uid {
        return Err(DiscoveryError::UnsafeFolder {
            path: dir.to_path_buf(),
            reason: format!("owned by uid {}, not by us (uid {uid})", meta.uid()),
        });
    }
    // Also corrects a folder the umask narrowed below 0700 at creation.
    if meta.mode() & 0o7777 != FOLDER_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(FOLDER_MODE))
            .map_err(|e| DiscoveryError::io("set mode 0700 on", dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn layout_names() {
        let paths = Paths::new("/r");
        assert_eq!(paths.pointer("abc"), Path::new("/r/daemons/abc.json"));
        assert_eq!(
            paths.instance_record(42),
            Path::new("/r/daemons/instances/42.json")
        );
        assert_eq!(
            paths.spawn_lock("abc"),
            Path::new("/r/daemons/abc.spawn.lock")
        );
        assert_eq!(
            paths.pointer_lock("abc"),
            Path::new("/r/daemons/abc.pointer.lock")
        );
        assert_eq!(
            paths.run_control_key(),
            Path::new("/r/daemons/run-control-key.json")
        );
        assert_eq!(paths.daemon_log(), Path::new("/r/logs/daemon.log"));
    }

    #[test]
    fn root_from_env() {
        let env = EnvSnapshot::from_pairs([("HOME", "/home/u")]);
        assert_eq!(
            Paths::from_env(&env).unwrap().root(),
            Path::new("/home/u/.agentprism/workflows")
        );
        let env = EnvSnapshot::from_pairs([("HOME", "/home/u"), (env::PERSISTENCE_ROOT, "/data")]);
        assert_eq!(Paths::from_env(&env).unwrap().root(), Path::new("/data"));
        assert!(matches!(
            Paths::from_env(&EnvSnapshot::default()),
            Err(DiscoveryError::NoRoot)
        ));
    }

    #[test]
    fn folders_are_created_private_and_fixed() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path().join("root"));
        paths.ensure_dirs().unwrap();
        for dir in [paths.daemons_dir(), paths.instances_dir(), paths.logs_dir()] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        for dir in [paths.root().to_path_buf(), paths.daemons_dir()] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        paths.ensure_dirs().unwrap();
        assert_eq!(mode(paths.root()), 0o700);
        assert_eq!(mode(&paths.daemons_dir()), 0o700);
    }

    #[test]
    fn a_file_in_place_of_a_folder_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        std::fs::write(paths.daemons_dir(), b"").unwrap();
        let error = paths.ensure_dirs().unwrap_err();
        assert!(error.to_string().contains("not a folder"), "{error}");
    }
}
