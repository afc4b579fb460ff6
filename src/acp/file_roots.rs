//! Which files an agent may touch through the client's `fs/read_text_file` and
//! `fs/write_text_file`: those inside the call's working tree (the session's `cwd`, which is
//! the worktree for an isolated call) or inside a wider root the user configured for the
//! backend. A path is judged after its symbolic links are resolved, so a link inside the tree
//! that points out of it is refused like any outside path; `..` components are refused
//! before any resolution. The request is then served on the resolved path with no link
//! followed in any component (reads through `util::safe_file`, writes by [`write_no_follow`]),
//! so a link an agent swaps in after the check fails the request instead of leading out.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::acp::connection::codes;

/// Answers `fs/read_text_file` or `fs/write_text_file` (`method`) for a session whose
/// working tree and configured roots are `roots`: the path is checked and resolved
/// ([`resolve`]), then served with no link followed.
pub(crate) async fn answer(
    method: &str,
    params: &Value,
    roots: &[PathBuf],
) -> Result<Value, (i64, String)> {
    let path = absolute_path(params)?;
    let resolved = resolve(path, roots).map_err(|message| (codes::INVALID_PARAMS, message))?;
    if method == "fs/read_text_file" {
        read_text_file(params, &resolved).await
    } else {
        write_text_file(params, resolved).await
    }
}

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
    let names = crate::util::safe_file::path_names(path);
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

fn absolute_path(params: &Value) -> Result<&Path, (i64, String)> {
    let path = params.get("path").and_then(Value::as_str).ok_or((
        codes::INVALID_PARAMS,
        "missing string field `path`".to_owned(),
    ))?;
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err((
            codes::INVALID_PARAMS,
            format!("path must be absolute: {}", path.display()),
        ));
    }
    Ok(path)
}

/// Largest file an agent may read through `fs/read_text_file`.
const MAX_AGENT_READ_BYTES: u64 = 16 << 20;

/// `fs/read_text_file {path, line?, limit?}`: `line` is 1-based, `limit` counts lines. Read
/// through `util::safe_file` at the `resolved` path with no link followed (regular files
/// only, bounded, off the async workers), so an agent asking for a FIFO or `/dev/zero` gets
/// an error, not a stuck thread or an exhausted heap.
async fn read_text_file(params: &Value, resolved: &Path) -> Result<Value, (i64, String)> {
    use crate::util::safe_file::{self, Links};
    let path = absolute_path(params)?;
    let contents = safe_file::read(resolved, MAX_AGENT_READ_BYTES, Links::Refuse)
        .await
        .map_err(|error| {
            let code = if error.is_not_found() {
                codes::RESOURCE_NOT_FOUND
            } else {
                codes::INTERNAL_ERROR
            };
            (code, error.to_string())
        })?;
    let content = String::from_utf8(contents.bytes).map_err(|_| {
        (
            codes::INTERNAL_ERROR,
            format!("{} is not UTF-8 text", path.display()),
        )
    })?;
    let line = params.get("line").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    let content = if line.is_none() && limit.is_none() {
        content
    } else {
        let skip = line.unwrap_or(1).saturating_sub(1) as usize;
        let take = limit.map_or(usize::MAX, |limit| limit as usize);
        content
            .split_inclusive('\n')
            .skip(skip)
            .take(take)
            .collect()
    };
    Ok(json!({"content": content}))
}

/// `fs/write_text_file {path, content}`: creates missing parent folders like an editor would,
/// at the `resolved` path with no link followed ([`write_no_follow`]).
async fn write_text_file(params: &Value, resolved: PathBuf) -> Result<Value, (i64, String)> {
    let path = absolute_path(params)?.to_path_buf();
    let content = params.get("content").and_then(Value::as_str).ok_or((
        codes::INVALID_PARAMS,
        "missing string field `content`".to_owned(),
    ))?;
    let content = content.to_owned();
    let written =
        tokio::task::spawn_blocking(move || write_no_follow(&resolved, content.as_bytes()))
            .await
            .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())));
    written.map_err(|error| {
        (
            codes::INTERNAL_ERROR,
            format!("cannot write {}: {error}", path.display()),
        )
    })?;
    Ok(Value::Null)
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
