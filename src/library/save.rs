//! Writing a saved workflow: `<folder>/<name>.js` in the project's or the user's folder.
//!
//! The folders are walked one component at a time from a root the caller trusts (the project
//! directory, or the folder that holds the user folder), each opened relative to the one
//! before with `O_NOFOLLOW`, so a symbolic link at or under the root is refused and named
//! rather than followed: a link planted at `.agentprism` or at the target file cannot send
//! the write elsewhere. Missing folders are created on the way (the user's 0700, the
//! project's with the process's umask). The text goes to a temporary file in the same folder
//! that is then moved into place, so a reader sees the old file or the new one, never half of
//! one; without `replace` the move refuses a file that exists, even one created meanwhile.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};

use super::names;

/// Where a workflow is saved: the folder `root/below…`, whose components under `root` are
/// walked without following links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    root: PathBuf,
    below: Vec<OsString>,
    private: bool,
}

impl Target {
    /// `<project_dir>/.agentprism/workflows`, links refused from `.agentprism` down; created
    /// with the umask.
    pub fn project(project_dir: &Path) -> Target {
        Target {
            root: project_dir.to_path_buf(),
            below: vec![".agentprism".into(), "workflows".into()],
            private: false,
        }
    }

    /// The user's folder (see [`super::user_folder`]), a link refused at the folder itself
    /// and under it; the folder and any missing parent are created 0700, its files 0600.
    pub fn user(folder: &Path) -> Result<Target, String> {
        let (Some(parent), Some(last)) = (folder.parent(), folder.file_name()) else {
            return Err(format!(
                "{} cannot be the user's workflows folder",
                folder.display()
            ));
        };
        Ok(Target {
            root: parent.to_path_buf(),
            below: vec![last.to_owned()],
            private: true,
        })
    }

    /// The folder the workflow files go in.
    pub fn folder(&self) -> PathBuf {
        self.below
            .iter()
            .fold(self.root.clone(), |path, name| path.join(name))
    }

    /// The file `name` is saved as.
    pub fn file(&self, name: &str) -> PathBuf {
        self.folder().join(format!("{name}.js"))
    }
}

/// Why a workflow was not saved. Nothing was written in either case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaveError {
    /// The file exists and replacing it was not asked for.
    Exists(PathBuf),
    /// Anything else: a bad name, a link in the way, a folder that cannot be made.
    Refused(String),
}

impl std::fmt::Display for SaveError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaveError::Exists(path) => write!(formatter, "{} already exists", path.display()),
            SaveError::Refused(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for SaveError {}

/// Writes `text` as the workflow `name` in `target`'s folder and returns the file's path.
/// An existing file is replaced only with `replace`. Blocking.
pub fn save(target: &Target, name: &str, text: &str, replace: bool) -> Result<PathBuf, SaveError> {
    names::check(name).map_err(SaveError::Refused)?;
    let folder = open_folder(target)?;
    let file_name = format!("{name}.js");
    let path = target.file(name);
    match fstatat(&folder, file_name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFLNK => return Err(link_refused(&path)),
            SFlag::S_IFREG if !replace => return Err(SaveError::Exists(path)),
            SFlag::S_IFREG => {}
            _ => {
                return Err(SaveError::Refused(format!(
                    "{} exists and is not a regular file",
                    path.display()
                )));
            }
        },
        Err(Errno::ENOENT) => {}
        Err(errno) => return Err(failed(&path, errno)),
    }
    let temp = format!(
        ".{name}.js.{}.{}.tmp",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos())
    );
    let written = write_temp(&folder, &temp, text, target.private)
        .map_err(|error| SaveError::Refused(format!("{}: {error}", path.display())))
        .and_then(|()| move_into_place(&folder, &temp, &file_name, &path, replace));
    // The temporary name is gone after a rename and must go after a link or a failure.
    let _ = unlinkat(&folder, temp.as_str(), UnlinkatFlags::NoRemoveDir);
    written.map(|()| path)
}

/// Opens `target`'s folder, walking from its root without following links and creating what
/// is missing.
fn open_folder(target: &Target) -> Result<OwnedFd, SaveError> {
    let folder_mode = if target.private { 0o700 } else { 0o777 };
    if !target.root.is_dir() {
        use std::os::unix::fs::DirBuilderExt as _;
        // Above the root links are followed: the user's config folder may well be one.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(folder_mode)
            .create(&target.root)
            .map_err(|error| {
                SaveError::Refused(format!(
                    "{} cannot be created: {error}",
                    target.root.display()
                ))
            })?;
    }
    let folder_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut current = openat(
        nix::fcntl::AT_FDCWD,
        target.root.as_path(),
        folder_flags,
        Mode::empty(),
    )
    .map_err(|errno| failed(&target.root, errno))?;
    let mut path = target.root.clone();
    for name in &target.below {
        path.push(name);
        current = open_or_create(&current, name, &path, folder_mode)?;
    }
    Ok(current)
}

/// Opens the folder `name` in `parent` without following a link, creating it when missing.
fn open_or_create(
    parent: &OwnedFd,
    name: &OsStr,
    path: &Path,
    mode: u32,
) -> Result<OwnedFd, SaveError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => return Ok(fd),
        Err(Errno::ENOENT) => {}
        Err(errno) => return Err(not_a_folder(parent, name, path, errno)),
    }
    match mkdirat(parent, name, Mode::from_bits_truncate(mode)) {
        // Another process made it meanwhile: open what is there, links still refused.
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => {
            return Err(SaveError::Refused(format!(
                "{} cannot be created: {}",
                path.display(),
                errno.desc()
            )));
        }
    }
    openat(parent, name, flags, Mode::empty())
        .map_err(|errno| not_a_folder(parent, name, path, errno))
}

/// The error for a folder component that could not be opened: a link, something that is
/// not a folder, or the system's reason.
fn not_a_folder(parent: &OwnedFd, name: &OsStr, path: &Path, errno: Errno) -> SaveError {
    match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
            link_refused(path)
        }
        Ok(_) if matches!(errno, Errno::ENOTDIR | Errno::ELOOP) => {
            SaveError::Refused(format!("{} is not a folder", path.display()))
        }
        _ => failed(path, errno),
    }
}

/// Writes `text` to the new file `temp` in `folder` and flushes it to the disk.
fn write_temp(folder: &OwnedFd, temp: &str, text: &str, private: bool) -> std::io::Result<()> {
    let mode = if private { 0o600 } else { 0o666 };
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(folder, temp, flags, Mode::from_bits_truncate(mode))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// Puts `temp` at `file_name`: a rename when replacing, else a hard link, which fails on an
/// existing file (a link or a file made since the check included) instead of replacing it.
fn move_into_place(
    folder: &OwnedFd,
    temp: &str,
    file_name: &str,
    path: &Path,
    replace: bool,
) -> Result<(), SaveError> {
    let moved = if replace {
        renameat(folder, temp, folder, file_name)
    } else {
        linkat(folder, temp, folder, file_name, AtFlags::empty())
    };
    match moved {
        // The folder's entry is what makes the file exist after a crash; a folder that
        // cannot be synced still holds the file now, so that is not a failure.
        Ok(()) => {
            let _ = nix::unistd::fsync(folder);
            Ok(())
        }
        Err(Errno::EEXIST) => Err(SaveError::Exists(path.to_path_buf())),
        Err(errno) => Err(failed(path, errno)),
    }
}

fn link_refused(path: &Path) -> SaveError {
    SaveError::Refused(format!(
        "{} is a symbolic link; a workflow is never saved through a link",
        path.display()
    ))
}

fn failed(path: &Path, errno: Errno) -> SaveError {
    SaveError::Refused(format!("{}: {}", path.display(), errno.desc()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_project_save_creates_the_folders_and_refuses_to_replace_without_being_asked() {
        let root = tempfile::tempdir().unwrap();
        let target = Target::project(root.path());
        let path = save(&target, "first", "one", false).unwrap();
        assert_eq!(path, root.path().join(".agentprism/workflows/first.js"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        assert_eq!(
            save(&target, "first", "two", false),
            Err(SaveError::Exists(path.clone()))
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        save(&target, "first", "two", true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        let left: Vec<_> = std::fs::read_dir(target.folder())
            .unwrap()
            .map(|item| item.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![OsString::from("first.js")],
            "no temporary file left"
        );
        assert!(matches!(
            save(&target, "Bad/name", "x", false),
            Err(SaveError::Refused(message)) if message.contains("Bad/name")
        ));
    }

    #[test]
    fn the_user_folder_and_its_files_are_private() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().join("config/agentprism/workflows");
        let target = Target::user(&folder).unwrap();
        let path = save(&target, "mine", "text", false).unwrap();
        assert_eq!(path, folder.join("mine.js"));
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&folder), 0o700);
        assert_eq!(mode(&root.path().join("config/agentprism")), 0o700);
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn a_link_at_any_component_under_the_root_is_refused_and_named_and_nothing_is_written() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(elsewhere.join("workflows")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, project.join(".agentprism")).unwrap();
        let error = save(&Target::project(&project), "x", "text", true).unwrap_err();
        let link = project.join(".agentprism");
        assert!(
            error.to_string().contains(&link.display().to_string())
                && error.to_string().contains("symbolic link"),
            "{error}"
        );
        assert!(!elsewhere.join("workflows/x.js").exists());

        let other = root.path().join("other");
        let folder = project_folder_of(&other);
        std::fs::create_dir_all(&folder).unwrap();
        let victim = root.path().join("victim.txt");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, folder.join("y.js")).unwrap();
        let error = save(&Target::project(&other), "y", "text", true).unwrap_err();
        assert!(error.to_string().contains("y.js"), "{error}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");

        let user = root.path().join("linked-user");
        std::os::unix::fs::symlink(&elsewhere, &user).unwrap();
        let error = save(&Target::user(&user).unwrap(), "z", "text", false).unwrap_err();
        assert!(error.to_string().contains("linked-user"), "{error}");
        assert!(!elsewhere.join("z.js").exists());
    }

    fn project_folder_of(project: &Path) -> PathBuf {
        super::super::project_folder(project)
    }
}
