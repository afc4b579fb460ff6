//! Which files an agent may touch through the client's `fs/read_text_file` and
//! `fs/write_text_file`: those inside the call's working tree (the session's `cwd`, which is
//! the worktree for an isolated call) or inside a wider root the user configured for the
//! backend. A path is judged after its symbolic links are resolved, so a link inside the tree
//! that points out of it is refused like any outside path; `..` components are refused
//! before any resolution. The request is then served on the resolved path with no link
//! followed in any component (reads through `util::safe_file`, writes by [`write_no_follow`]),
//! so a link an agent swaps in after the check fails the request instead of leading out.

use std::path::{Component, Path, PathBuf};

/// Checks `path` (absolute) against `roots` and answers it resolved; `Err` is the refusal
/// message naming the path and the allowed roots. For a file that does not exist yet (a
/// write), its nearest existing ancestor is resolved and the missing tail appended.
pub(crate) fn resolve(path: &Path, roots: &[PathBuf]) -> Result<PathBuf, String> {
    let refuse = || {
        let allowed: Vec<String> = roots
            .iter()
            .map(|root| root.display().to_string())
            .collect();
        if allowed.is_empty() {
            format!(
                "{} is outside the call's working tree (no session is known for this request)",
                path.display()
            )
        } else {
            format!(
                "{} is outside the call's working tree; allowed: {}",
                path.display(),
                allowed.join(", ")
            )
        }
    };
    if path
        .components()
        .any(|component| matches!(component, Component::ParentDir))
    {
        return Err(refuse());
    }
    let resolved = resolve_existing_prefix(path).ok_or_else(refuse)?;
    let inside = roots.iter().any(|root| {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
        resolved.starts_with(&root)
    });
    if inside { Ok(resolved) } else { Err(refuse()) }
}

/// Writes `bytes` to `path` (absolute, resolved) creating missing folders (0755 less the
/// umask, as an editor would), opening `/` and then every component relative to the one
/// before with `O_NOFOLLOW`, so no symbolic link on the path is followed however the tree
/// changes meanwhile. Only a regular file is written. Blocking: call it off the async workers.
pub(crate) fn write_no_follow(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};
    use std::io::Write as _;
    let names: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((last, folders)) = names.split_last() else {
        return Err(std::io::Error::other("the path names no file"));
    };
    let folder_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = openat(nix::fcntl::AT_FDCWD, "/", folder_flags, Mode::empty())?;
    for name in folders {
        current = match openat(&current, *name, folder_flags, Mode::empty()) {
            Err(nix::errno::Errno::ENOENT) => {
                match mkdirat(&current, *name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(errno) => return Err(errno.into()),
                }
                openat(&current, *name, folder_flags, Mode::empty())?
            }
            opened => opened?,
        };
    }
    let file_flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let mut file = std::fs::File::from(openat(
        &current,
        *last,
        file_flags,
        Mode::from_bits_truncate(0o644),
    )?);
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    file.set_len(0)?;
    file.write_all(bytes)
}

/// Resolves the longest existing prefix of `path` and appends the rest unchanged.
fn resolve_existing_prefix(path: &Path) -> Option<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut tail = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(resolved) => {
                return Some(tail.iter().rev().fold(resolved, |acc, part| acc.join(part)));
            }
            Err(_) => {
                tail.push(existing.file_name()?.to_owned());
                existing = existing.parent()?.to_path_buf();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &Path, roots: &[PathBuf]) -> Result<PathBuf, String> {
        resolve(path, roots)
    }

    #[test]
    fn writes_create_folders_and_follow_no_link_on_the_path() {
        let project = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(project.path()).expect("resolve");
        write_no_follow(&root.join("new/deep/a.txt"), b"first").expect("write");
        write_no_follow(&root.join("new/deep/a.txt"), b"2").expect("rewrite");
        assert_eq!(std::fs::read(root.join("new/deep/a.txt")).unwrap(), b"2");
        let outside = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(outside.path(), root.join("swapped")).expect("link");
        assert!(write_no_follow(&root.join("swapped/b.txt"), b"x").is_err());
        std::os::unix::fs::symlink(outside.path().join("c.txt"), root.join("c.txt")).expect("link");
        assert!(write_no_follow(&root.join("c.txt"), b"x").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        assert!(write_no_follow(&root.join("fifo"), b"x").is_err());
    }

    #[test]
    fn inside_paths_pass_and_outside_ones_and_escaping_links_are_refused() {
        let project = tempfile::tempdir().expect("temp dir");
        let root = project.path().to_path_buf();
        std::fs::write(root.join("a.txt"), "a").expect("write");
        assert!(check(&root.join("a.txt"), std::slice::from_ref(&root)).is_ok());
        assert!(check(&root.join("new/b.txt"), std::slice::from_ref(&root)).is_ok());
        let error = check(Path::new("/etc/passwd"), std::slice::from_ref(&root)).unwrap_err();
        assert!(error.contains("/etc/passwd") && error.contains(&root.display().to_string()));
        assert!(check(&root.join("../x"), std::slice::from_ref(&root)).is_err());
        std::os::unix::fs::symlink("/etc", root.join("out")).expect("link");
        assert!(check(&root.join("out/passwd"), std::slice::from_ref(&root)).is_err());
        assert!(check(&root.join("out/new.txt"), std::slice::from_ref(&root)).is_err());
        assert!(check(Path::new("/etc/passwd"), &[]).is_err());
        assert!(check(Path::new("/etc/passwd"), &[root, PathBuf::from("/etc")]).is_ok());
    }
}
