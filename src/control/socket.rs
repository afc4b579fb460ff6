//! Where a daemon's control socket lives: `$XDG_RUNTIME_DIR/agentprism/ctl-<id12>.sock` when
//! the runtime folder is ours and private (0700), else `R/daemons/ctl/ctl-<id12>.sock`, where
//! `<id12>` is the first 12 characters of the instance id. Both folders are 0700, so the
//! filesystem already keeps other users out; the server still checks the peer's uid. A Unix
//! socket path must fit `sun_path` (104 bytes on macOS, 108 on Linux), so a candidate longer
//! than [`MAX_SOCKET_PATH`] bytes is skipped for the next one. Records publish the path as
//! `controlUrl: "unix:<path>"`.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::discovery::paths::{FOLDER_MODE, ensure_private_dir};
use crate::discovery::{DiscoveryError, Paths};
use crate::env::EnvSnapshot;

/// Longest socket path we bind, in bytes: under macOS's 104-byte `sun_path` with room for the
/// terminating NUL and a margin.
pub(crate) const MAX_SOCKET_PATH: usize = 100;
/// The environment variable naming the per-user runtime folder (systemd, pam_systemd).
pub(crate) const RUNTIME_DIR_VAR: &str = "XDG_RUNTIME_DIR";
/// The scheme prefix of a record's `controlUrl`.
pub(crate) const URL_PREFIX: &str = "unix:";

/// Why no socket path could be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "no control socket path fits in {MAX_SOCKET_PATH} bytes (tried {}); use a shorter \
         AGENTPRISM_PERSISTENCE_ROOT or XDG_RUNTIME_DIR",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    TooLong { tried: Vec<PathBuf> },
    #[error("instance id {0:?} cannot name a socket: expected letters, digits and dashes")]
    BadInstanceId(String),
    #[error("{} exists and is not a stale socket of ours: {reason}", path.display())]
    Occupied { path: PathBuf, reason: String },
    #[error(transparent)]
    Folder(#[from] DiscoveryError),
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `XDG_RUNTIME_DIR` from a snapshot, if set and absolute.
pub(crate) fn runtime_dir_from(env: &EnvSnapshot) -> Option<PathBuf> {
    env.non_empty(RUNTIME_DIR_VAR)
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
}

/// The socket path for `instance_id`, with its folder created (0700) and a stale socket file
/// of ours removed, ready to bind. Candidates in order: the runtime folder (only if it is a
/// folder we own with mode 0700), then `R/daemons/ctl/`; the first whose path fits wins.
pub fn socket_path(
    paths: &Paths,
    runtime_dir: Option<&Path>,
    instance_id: &str,
) -> Result<PathBuf, SocketError> {
    let name = socket_file_name(instance_id)?;
    let mut tried = Vec::new();
    if let Some(runtime) = runtime_dir.filter(|dir| runtime_dir_is_private(dir)) {
        let folder = runtime.join("agentprism");
        let path = folder.join(&name);
        if fits(&path) {
            ensure_private_dir(&folder)?;
            remove_stale(&path)?;
            sweep_dead(&folder);
            return Ok(path);
        }
        tried.push(path);
    }
    let folder = paths.daemons_dir().join("ctl");
    let path = folder.join(&name);
    if fits(&path) {
        paths.ensure_dirs()?;
        ensure_private_dir(&folder)?;
        remove_stale(&path)?;
        sweep_dead(&folder);
        return Ok(path);
    }
    tried.push(path);
    Err(SocketError::TooLong { tried })
}

/// `ctl-<first 12 characters of the instance id>.sock`.
pub(crate) fn socket_file_name(instance_id: &str) -> Result<String, SocketError> {
    let well_formed = !instance_id.is_empty()
        && instance_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !well_formed {
        return Err(SocketError::BadInstanceId(instance_id.to_owned()));
    }
    let short = &instance_id[..instance_id.len().min(12)];
    Ok(format!("ctl-{short}.sock"))
}

/// `unix:<path>`, the record's `controlUrl`.
pub fn control_url(path: &Path) -> String {
    format!("{URL_PREFIX}{}", path.display())
}

/// The path in a `unix:<path>` control URL; `None` for any other scheme.
pub fn socket_path_from_url(url: &str) -> Option<PathBuf> {
    url.strip_prefix(URL_PREFIX)
        .filter(|path| path.starts_with('/'))
        .map(PathBuf::from)
}

fn fits(path: &Path) -> bool {
    path.as_os_str().as_bytes().len() <= MAX_SOCKET_PATH
}

/// The runtime folder qualifies only when it is a real folder we own with mode 0700: one that
/// another user could write into would let them plant or swap our socket.
fn runtime_dir_is_private(dir: &Path) -> bool {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            meta.is_dir()
                && meta.uid() == nix::unistd::getuid().as_raw()
                && meta.mode() & 0o7777 == FOLDER_MODE
        }
        Err(_) => false,
    }
}

/// How long a socket file must have existed before a sweep may take it for dead: a daemon
/// starting at this moment may have bound its socket and not yet listened on it, and
/// connecting in that gap is refused as it is for a dead one.
const SWEEP_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(10);

/// Removes the control sockets in `folder` that instances which died without cleaning up left
/// behind (a SIGKILL, a power cut): ours (`ctl-*.sock`, our uid, older than
/// [`SWEEP_MIN_AGE`]) that nothing listens on any more, which a connect tells. A live
/// daemon's socket answers the connect and stays; so does anything not ours. Best effort: a
/// folder that cannot be read leaves everything in place.
pub(crate) fn sweep_dead(folder: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let uid = nix::unistd::getuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("ctl-") && name.ends_with(".sock")) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let old_enough = meta
            .modified()
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age >= SWEEP_MIN_AGE);
        if !meta.file_type().is_socket() || meta.uid() != uid || !old_enough {
            continue;
        }
        let refused = matches!(
            std::os::unix::net::UnixStream::connect(&path),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if refused {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Removes a socket file left at `path` by a crashed instance. Anything else there (another
/// user's file, a regular file, a folder) is not ours to delete.
fn remove_stale(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(SocketError::Io {
                doing: "inspect",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let occupied = |reason: &str| SocketError::Occupied {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    if !meta.file_type().is_socket() {
        return Err(occupied("not a socket"));
    }
    if meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(occupied(&format!("owned by uid {}", meta.uid())));
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SocketError::Io {
            doing: "remove stale socket",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const ID: &str = "0123456789ab-cdef-4000-8000-000000000000";

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    fn private_dir(parent: &Path, name: &str) -> PathBuf {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn prefers_a_private_runtime_folder() {
        let temp = tempfile::tempdir().unwrap();
        let runtime = private_dir(temp.path(), "run");
        let paths = Paths::new(temp.path().join("r"));
        let path = socket_path(&paths, Some(&runtime), ID).unwrap();
        assert_eq!(
            path,
            runtime.join("agentprism").join("ctl-0123456789ab.sock")
        );
        assert_eq!(mode(&runtime.join("agentprism")), 0o700);
    }

    #[test]
    fn falls_back_when_the_runtime_folder_is_not_private() {
        let temp = tempfile::tempdir().unwrap();
        let runtime = private_dir(temp.path(), "run");
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        let paths = Paths::new(temp.path().join("r"));
        let expected = paths
            .daemons_dir()
            .join("ctl")
            .join("ctl-0123456789ab.sock");
        assert_eq!(socket_path(&paths, Some(&runtime), ID).unwrap(), expected);
        assert_eq!(mode(&paths.daemons_dir().join("ctl")), 0o700);
        assert_eq!(
            socket_path(&paths, Some(&temp.path().join("missing")), ID).unwrap(),
            expected
        );
        assert_eq!(socket_path(&paths, None, ID).unwrap(), expected);
    }

    #[test]
    fn falls_back_when_too_long_and_errors_when_nothing_fits() {
        let temp = tempfile::tempdir().unwrap();
        let deep = temp.path().join("d".repeat(90));
        std::fs::create_dir(&deep).unwrap();
        let runtime = private_dir(&deep, "run");
        let paths = Paths::new(temp.path().join("r"));
        let path = socket_path(&paths, Some(&runtime), ID).unwrap();
        assert!(path.starts_with(paths.daemons_dir()), "{}", path.display());

        let long_root = Paths::new(deep.join("root"));
        let error = socket_path(&long_root, Some(&runtime), ID).unwrap_err();
        assert!(matches!(error, SocketError::TooLong { ref tried } if tried.len() == 2));
        assert!(error.to_string().contains("100 bytes"), "{error}");
    }

    #[test]
    fn stale_sockets_of_ours_are_removed_other_files_are_not() {
        let temp = tempfile::tempdir().unwrap();
        let runtime = private_dir(temp.path(), "run");
        let paths = Paths::new(temp.path().join("r"));
        let path = socket_path(&paths, Some(&runtime), ID).unwrap();
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        assert_eq!(socket_path(&paths, Some(&runtime), ID).unwrap(), path);
        assert!(!path.exists());

        std::fs::write(&path, b"not a socket").unwrap();
        let error = socket_path(&paths, Some(&runtime), ID).unwrap_err();
        assert!(matches!(error, SocketError::Occupied { .. }), "{error}");
        assert!(path.exists());
    }

    #[test]
    fn dead_sockets_are_swept_live_and_young_ones_and_other_files_stay() {
        let temp = tempfile::tempdir().unwrap();
        let folder = private_dir(temp.path(), "ctl");
        let dead = folder.join("ctl-dead00000000.sock");
        drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
        let live = folder.join("ctl-live00000000.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let young = folder.join("ctl-young0000000.sock");
        drop(std::os::unix::net::UnixListener::bind(&young).unwrap());
        let other = folder.join("ctl-file00000000.sock");
        std::fs::write(&other, b"not a socket").unwrap();
        let unrelated = folder.join("other.sock");
        drop(std::os::unix::net::UnixListener::bind(&unrelated).unwrap());
        let long_ago = std::time::SystemTime::now() - 2 * SWEEP_MIN_AGE;
        let long_ago =
            nix::sys::time::TimeSpec::from(long_ago.duration_since(std::time::UNIX_EPOCH).unwrap());
        // An absolute path makes utimensat ignore the folder it is given.
        let at = std::fs::File::open(&folder).unwrap();
        for path in [&dead, &live, &other, &unrelated] {
            let flag = nix::sys::stat::UtimensatFlags::NoFollowSymlink;
            nix::sys::stat::utimensat(&at, path.as_path(), &long_ago, &long_ago, flag).unwrap();
        }
        sweep_dead(&folder);
        assert!(!dead.exists(), "a dead instance's socket is removed");
        assert!(live.exists(), "a socket something listens on stays");
        assert!(young.exists(), "a socket bound a moment ago stays");
        assert!(
            other.exists() && unrelated.exists(),
            "what is not ours stays"
        );
    }

    #[test]
    fn names_and_urls() {
        assert_eq!(socket_file_name(ID).unwrap(), "ctl-0123456789ab.sock");
        assert_eq!(socket_file_name("abc").unwrap(), "ctl-abc.sock");
        for bad in ["", "../../etc", "a/b", "id with space"] {
            assert!(socket_file_name(bad).is_err(), "{bad}");
        }
        let path = Path::new("/run/user/1000/agentprism/ctl-0123456789ab.sock");
        assert_eq!(
            control_url(path),
            "unix:/run/user/1000/agentprism/ctl-0123456789ab.sock"
        );
        assert_eq!(socket_path_from_url(&control_url(path)).unwrap(), path);
        assert_eq!(socket_path_from_url("http://127.0.0.1:1/"), None);
        assert_eq!(socket_path_from_url("unix:relative"), None);
        let env = EnvSnapshot::from_pairs([(RUNTIME_DIR_VAR, "/run/user/1000")]);
        assert_eq!(runtime_dir_from(&env).unwrap(), Path::new("/run/user/1000"));
        let env = EnvSnapshot::from_pairs([(RUNTIME_DIR_VAR, "relative")]);
        assert_eq!(runtime_dir_from(&env), None);
    }
}
