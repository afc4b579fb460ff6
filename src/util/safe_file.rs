//! Reading a file that a caller named (a script, a nested workflow, an agent definition, the
//! tiers file) so that the file can neither leak what it points at nor hurt the daemon.
//!
//! Every such read goes through [`read`] (or [`read_blocking`] on a thread of its own, such as
//! a script's VM thread), which:
//!
//! - opens the path without following a symbolic link in any component: `openat2` with
//!   `RESOLVE_NO_SYMLINKS` on Linux, else (no `openat2`: `ENOSYS`, a seccomp filter's `EPERM`,
//!   or another OS) a walk from `/` that opens each component with `O_NOFOLLOW`. A path given
//!   at admission is first resolved ([`Links::ResolveFirst`]); the resolved path is the one a
//!   run records, and later reads ([`Links::Refuse`]) refuse a symlink swapped in since;
//! - opens with `O_NONBLOCK`, so opening a FIFO that no writer holds returns at once;
//! - accepts regular files only, judged by `fstat` on the open handle (not on the path, which
//!   could change between the two);
//! - checks the size on the handle before reading and then reads at most `limit + 1` bytes,
//!   so a file that grows while it is read, or a `/proc` file that reports size 0, can never
//!   make the read exceed the limit;
//! - runs on tokio's blocking pool, never on an async worker, under [`READ_DEADLINE`], so a
//!   slow or stuck file system stalls only the caller that asked for the file.
//!
//! Errors name the path and say what it is ([`FileError`]); they never carry its contents.

use std::fmt;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one read may take, open to last byte. A local file of a few MiB takes
/// milliseconds; only a stuck (network or FUSE) file system comes near this.
pub(crate) const READ_DEADLINE: Duration = Duration::from_secs(10);

/// What to do with symbolic links in the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Links {
    /// The path was resolved before (a run's recorded script): a symlink in any component
    /// now is refused, so a file swapped for a link after admission is never followed.
    Refuse,
    /// The path comes from a caller right now (a `scriptPath` at admission, a file under the
    /// project or home): it is resolved first, and the resolved path is opened as with
    /// [`Links::Refuse`], so a link swapped in between the two steps is refused too.
    ResolveFirst,
}

/// A file read in full.
#[derive(Debug)]
pub struct Contents {
    /// The path that was opened: the given one, or its resolution under
    /// [`Links::ResolveFirst`].
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// What kind of file a refused path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Fifo,
    Socket,
    CharacterDevice,
    BlockDevice,
    Other,
}

/// Why a file was not read. Every message names the path and never quotes the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path} must be an absolute path without `..`")]
    NotAbsolute { path: PathBuf },
    #[error("{}", symlink_message(path, link))]
    Symlink {
        path: PathBuf,
        /// The component that is a link (the path itself, or one of its folders).
        link: PathBuf,
    },
    #[error("{}{} is {}, not a regular file", path.display(), resolved_note(resolved), kind)]
    NotRegular {
        path: PathBuf,
        resolved: Option<PathBuf>,
        kind: FileKind,
    },
    #[error("{}{} is too large: {}, over the limit of {limit} bytes", path.display(), resolved_note(resolved), size_text(*size, *limit))]
    TooLarge {
        path: PathBuf,
        resolved: Option<PathBuf>,
        /// The size `fstat` reported, when that was already over the limit; `None` when the
        /// file only showed its size while being read (it grew, or reports 0 like `/proc`).
        size: Option<u64>,
        limit: u64,
    },
    #[error("{} was not read within {} s", path.display(), READ_DEADLINE.as_secs())]
    Timeout { path: PathBuf },
    #[error("{} cannot be read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl FileError {
    /// Whether the file (or a folder on its path) does not exist.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharacterDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "not a file",
        })
    }
}

/// Reads the file at `path`, at most `limit` bytes, off the async workers and within
/// [`READ_DEADLINE`]. See the module comment for what is refused.
pub(crate) async fn read(path: &Path, limit: u64, links: Links) -> Result<Contents, FileError> {
    let owned = path.to_path_buf();
    let task = tokio::task::spawn_blocking(move || read_blocking(&owned, limit, links));
    match tokio::time::timeout(READ_DEADLINE, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join_error)) => Err(FileError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("the read task failed: {join_error}")),
        }),
        // The blocking thread finishes (or stays stuck in the kernel) on its own; the caller
        // and every async worker carry on.
        Err(_) => Err(FileError::Timeout {
            path: path.to_path_buf(),
        }),
    }
}

/// [`read`] on the calling thread, for callers that already run on a thread of their own
/// (never call it from an async task). The deadline is checked between chunks.
pub(crate) fn read_blocking(path: &Path, limit: u64, links: Links) -> Result<Contents, FileError> {
    let started = Instant::now();
    let given = path.to_path_buf();
    let opened = match links {
        Links::Refuse => given.clone(),
        Links::ResolveFirst => {
            if !given.is_absolute() {
                return Err(FileError::NotAbsolute { path: given });
            }
            std::fs::canonicalize(&given).map_err(|source| FileError::Io {
                path: given.clone(),
                source,
            })?
        }
    };
    let resolved = (opened != given).then(|| opened.clone());
    let fd = open_no_symlinks(&opened).map_err(|error| match error {
        // Name the path the caller gave; the link found is on the resolved one.
        FileError::Symlink { link, .. } if resolved.is_some() => FileError::Symlink {
            path: given.clone(),
            link,
        },
        other => other,
    })?;
    let mut file = std::fs::File::from(fd);
    let metadata = file.metadata().map_err(|source| FileError::Io {
        path: given.clone(),
        source,
    })?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        return Err(FileError::NotRegular {
            path: given,
            resolved,
            kind: kind_of(&file_type),
        });
    }
    if metadata.len() > limit {
        return Err(FileError::TooLarge {
            path: given,
            resolved,
            size: Some(metadata.len()),
            limit,
        });
    }
    let capacity = usize::try_from(metadata.len().min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity.saturating_add(1));
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if started.elapsed() > READ_DEADLINE {
            return Err(FileError::Timeout { path: given });
        }
        let room = (limit + 1).saturating_sub(bytes.len() as u64);
        if room == 0 {
            break;
        }
        let want = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        match file.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(count) => bytes.extend_from_slice(&chunk[..count]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(FileError::Io {
                    path: given,
                    source,
                });
            }
        }
    }
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: given,
            resolved,
            size: None,
            limit,
        });
    }
    Ok(Contents {
        path: opened,
        bytes,
    })
}

fn symlink_message(path: &Path, link: &Path) -> String {
    if link == path {
        format!(
            "{} is a symbolic link; links are not followed here",
            path.display()
        )
    } else {
        format!(
            "{} is not read: {} on its path is a symbolic link, and links are not followed here",
            path.display(),
            link.display()
        )
    }
}

fn resolved_note(resolved: &Option<PathBuf>) -> String {
    resolved
        .as_ref()
        .map(|target| format!(" (which resolves to {})", target.display()))
        .unwrap_or_default()
}

fn size_text(size: Option<u64>, limit: u64) -> String {
    match size {
        Some(size) => format!("{size} bytes"),
        None => format!("more than {limit} bytes"),
    }
}

fn kind_of(file_type: &std::fs::FileType) -> FileKind {
    if file_type.is_dir() {
        FileKind::Directory
    } else if file_type.is_fifo() {
        FileKind::Fifo
    } else if file_type.is_socket() {
        FileKind::Socket
    } else if file_type.is_char_device() {
        FileKind::CharacterDevice
    } else if file_type.is_block_device() {
        FileKind::BlockDevice
    } else {
        FileKind::Other
    }
}

fn check_absolute(path: &Path) -> Result<(), FileError> {
    let plain = path.is_absolute()
        && path
            .components()
            .all(|component| matches!(component, Component::RootDir | Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(FileError::NotAbsolute {
            path: path.to_path_buf(),
        })
    }
}

/// The flags the file itself is opened with: read only, never blocking on a FIFO, never
/// becoming our controlling terminal, never inherited by a child.
fn file_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW
}

/// Opens `path` (absolute, no `..`) so that no component may be a symbolic link.
fn open_no_symlinks(path: &Path) -> Result<OwnedFd, FileError> {
    check_absolute(path)?;
    #[cfg(target_os = "linux")]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Set once openat2 turned out to be missing (old kernel, seccomp): later reads go
        // straight to the walk.
        static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            use nix::fcntl::{OpenHow, ResolveFlag, openat2};
            let how = OpenHow::new()
                .flags(file_flags())
                .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
            match openat2(nix::fcntl::AT_FDCWD, path, how) {
                Ok(fd) => return Ok(fd),
                Err(nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                Err(errno) => return Err(describe_open_error(path, errno)),
            }
        }
    }
    open_walking(path)
}

/// The portable fallback: opens `/`, then each folder with `O_DIRECTORY | O_NOFOLLOW`
/// relative to the one before, then the file with `O_NOFOLLOW`, so a link anywhere fails
/// the open of that component rather than being followed.
fn open_walking(path: &Path) -> Result<OwnedFd, FileError> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    check_absolute(path)?;
    #[cfg(target_os = "linux")]
    let folder_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let folder_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let names = path_names(path);
    let Some((last, folders)) = names.split_last() else {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            resolved: None,
            kind: FileKind::Directory,
        });
    };
    let mut current = openat(nix::fcntl::AT_FDCWD, "/", folder_flags, Mode::empty())
        .map_err(|errno| describe_open_error(path, errno))?;
    for name in folders {
        current = openat(&current, *name, folder_flags, Mode::empty())
            .map_err(|errno| describe_open_error(path, errno))?;
    }
    openat(&current, *last, file_flags(), Mode::empty())
        .map_err(|errno| describe_open_error(path, errno))
}

/// The names of `path`'s components, `/` and `.` left out: what a walk from `/` opens one
/// by one.
pub(crate) fn path_names(path: &Path) -> Vec<&std::ffi::OsStr> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// Turns a failed open into an error that says which component is a link, if one is.
fn describe_open_error(path: &Path, errno: nix::errno::Errno) -> FileError {
    if let Some(link) = first_symlink(path) {
        return FileError::Symlink {
            path: path.to_path_buf(),
            link,
        };
    }
    FileError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(errno),
    }
}

/// The first component of `path` that is a symbolic link now (for the error message only;
/// the open itself already refused it).
fn first_symlink(path: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if std::fs::symlink_metadata(&prefix).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(prefix);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u64 = 1024;

    fn folder() -> tempfile::TempDir {
        tempfile::tempdir().expect("temp dir")
    }

    /// A temp folder's canonical path, so a test's own paths hold no link.
    fn root(dir: &tempfile::TempDir) -> PathBuf {
        std::fs::canonicalize(dir.path()).expect("canonical temp dir")
    }

    /// Checks the refusal of `path` by the read and, separately, by the fallback walk, which
    /// must hold the same line on a kernel where openat2 exists.
    fn both_ways(path: &Path, check: impl Fn(FileError)) {
        check(read_blocking(path, LIMIT, Links::Refuse).expect_err("the read refuses"));
        check(open_walking(path).expect_err("the walk refuses"));
    }

    #[test]
    fn a_regular_file_is_read() {
        let dir = folder();
        let file = root(&dir).join("script.js");
        std::fs::write(&file, "hello").unwrap();
        let contents = read_blocking(&file, LIMIT, Links::Refuse).unwrap();
        assert_eq!(contents.bytes, b"hello");
        assert_eq!(contents.path, file);
        assert!(open_walking(&file).is_ok());
    }

    #[test]
    fn a_symlink_as_the_last_component_is_refused() {
        let dir = folder();
        let target = root(&dir).join("secret");
        std::fs::write(&target, "ghp_secret").unwrap();
        let link = root(&dir).join("script.js");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        both_ways(&link, |error| match error {
            FileError::Symlink { path, link: found } => {
                assert_eq!(path, link);
                assert_eq!(found, link);
            }
            other => panic!("expected a symlink error, got {other:?}"),
        });
        let message = read_blocking(&link, LIMIT, Links::Refuse)
            .unwrap_err()
            .to_string();
        assert!(message.contains("is a symbolic link"), "{message}");
        assert!(message.contains(&link.display().to_string()), "{message}");
        assert!(!message.contains("ghp_"), "{message}");
    }

    #[test]
    fn a_symlink_as_a_folder_is_refused() {
        let dir = folder();
        let real = root(&dir).join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("script.js"), "x").unwrap();
        let linked = root(&dir).join("linked");
        std::os::unix::fs::symlink(&real, &linked).unwrap();
        let path = linked.join("script.js");
        both_ways(&path, |error| match error {
            FileError::Symlink { path: named, link } => {
                assert_eq!(named, path);
                assert_eq!(link, linked);
            }
            other => panic!("expected a symlink error, got {other:?}"),
        });
        let message = read_blocking(&path, LIMIT, Links::Refuse)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(&format!(
                "{} on its path is a symbolic link",
                linked.display()
            )),
            "{message}"
        );
        // Resolved first, the same path is read from its real place.
        let contents = read_blocking(&path, LIMIT, Links::ResolveFirst).unwrap();
        assert_eq!(contents.path, real.join("script.js"));
        assert!(open_walking(&real.join("script.js")).is_ok());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = folder();
        let fifo = root(&dir).join("script.js");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // No writer ever opens it: a blocking open would hang this test.
        for links in [Links::Refuse, Links::ResolveFirst] {
            match read_blocking(&fifo, LIMIT, links) {
                Err(FileError::NotRegular { kind, .. }) => assert_eq!(kind, FileKind::Fifo),
                other => panic!("expected a FIFO error, got {other:?}"),
            }
        }
        assert!(
            open_walking(&fifo).is_ok(),
            "the fallback opens it without blocking too"
        );
        let message = read_blocking(&fifo, LIMIT, Links::Refuse)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            format!(
                "{} is a FIFO (named pipe), not a regular file",
                fifo.display()
            )
        );
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = folder();
        let path = root(&dir);
        match read_blocking(&path, LIMIT, Links::Refuse) {
            Err(FileError::NotRegular { kind, .. }) => assert_eq!(kind, FileKind::Directory),
            other => panic!("expected a directory error, got {other:?}"),
        }
    }

    #[test]
    fn dev_zero_is_refused_directly_and_through_a_link() {
        match read_blocking(Path::new("/dev/zero"), LIMIT, Links::Refuse) {
            Err(FileError::NotRegular { kind, .. }) => {
                assert_eq!(kind, FileKind::CharacterDevice)
            }
            other => panic!("expected a device error, got {other:?}"),
        }
        let dir = folder();
        let link = root(&dir).join("script.js");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_blocking(&link, LIMIT, Links::Refuse),
            Err(FileError::Symlink { .. })
        ));
        let message = read_blocking(&link, LIMIT, Links::ResolveFirst)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            format!(
                "{} (which resolves to /dev/zero) is a character device, not a regular file",
                link.display()
            )
        );
    }

    #[test]
    fn the_size_limit_is_exact() {
        let dir = folder();
        let at = root(&dir).join("at.js");
        std::fs::write(&at, vec![b'a'; LIMIT as usize]).unwrap();
        assert_eq!(
            read_blocking(&at, LIMIT, Links::Refuse)
                .unwrap()
                .bytes
                .len(),
            LIMIT as usize
        );
        let over = root(&dir).join("over.js");
        std::fs::write(&over, vec![b'a'; LIMIT as usize + 1]).unwrap();
        let error = read_blocking(&over, LIMIT, Links::Refuse).unwrap_err();
        assert!(
            matches!(error, FileError::TooLarge { size: Some(size), limit: LIMIT, .. } if size == LIMIT + 1),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "{} is too large: 1025 bytes, over the limit of 1024 bytes",
                over.display()
            )
        );
    }

    #[test]
    fn a_file_that_hides_its_size_is_cut_at_the_limit() {
        // /proc files report size 0 and may hold more than the limit (`/proc/self` is a link).
        let maps = Path::new("/proc/self/maps");
        match read_blocking(maps, 16, Links::ResolveFirst) {
            Err(FileError::TooLarge {
                size: None,
                limit: 16,
                ..
            }) => {}
            other => panic!("expected a too-large error, got {other:?}"),
        }
    }

    #[test]
    fn relative_paths_and_dot_dot_are_refused() {
        for path in ["relative.js", "/tmp/../etc/passwd"] {
            assert!(matches!(
                read_blocking(Path::new(path), LIMIT, Links::Refuse),
                Err(FileError::NotAbsolute { .. })
            ));
        }
    }

    #[test]
    fn a_missing_file_is_not_found() {
        let dir = folder();
        let error = read_blocking(&root(&dir).join("gone.js"), LIMIT, Links::Refuse).unwrap_err();
        assert!(error.is_not_found(), "{error:?}");
        let error =
            read_blocking(&root(&dir).join("gone.js"), LIMIT, Links::ResolveFirst).unwrap_err();
        assert!(error.is_not_found(), "{error:?}");
    }

    /// The invariant in ARCHITECTURE.md: the engine and the tools read no file except through
    /// this module. No file of theirs is exempt (the engine's intent files moved into the
    /// store).
    #[test]
    fn the_engine_and_the_tools_read_files_only_through_this_module() {
        const OWN_FILES: &[&str] = &[];
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut offenders = Vec::new();
        let mut folders = vec![root.join("src/engine"), root.join("src/tools")];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    folders.push(path);
                    continue;
                }
                let relative = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                // Unit tests, a module's tests file or folder, are exempt.
                if OWN_FILES.contains(&relative.as_str())
                    || relative.ends_with("/tests.rs")
                    || relative.contains("/tests/")
                {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Only the code before the unit tests counts.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for needle in [
                    "fs::read(",
                    "fs::read_to_string(",
                    "File::open(",
                    "OpenOptions",
                    "tokio::fs::",
                ] {
                    if code.contains(needle) {
                        offenders.push(format!("{relative}: {needle}"));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "read through util::safe_file: {offenders:?}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_of_fifos_do_not_hold_the_runtime() {
        let dir = folder();
        let fifo = root(&dir).join("fifo.js");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // A blocking open would hold a blocking thread until the deadline and end in Timeout.
        let started = Instant::now();
        for _ in 0..4 {
            let result = read(&fifo, LIMIT, Links::Refuse).await;
            assert!(
                matches!(
                    result,
                    Err(FileError::NotRegular {
                        kind: FileKind::Fifo,
                        ..
                    })
                ),
                "{result:?}"
            );
        }
        assert!(started.elapsed() < READ_DEADLINE);
    }
}
