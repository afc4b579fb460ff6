//! Which files an agent may touch through the client's `fs/read_text_file` and
//! `fs/write_text_file`: those inside the call's working tree (the session's `cwd`, which is
//! the worktree for an isolated call) or inside a wider root the user configured for the
//! backend. A path is judged after its symbolic links are resolved, so a link inside the tree
//! that points out of it is refused like any outside path; `..` components are refused
//! before any resolution. The read itself still goes through `util::safe_file`, which refuses
//! a link swapped in after this check.

use std::path::{Component, Path, PathBuf};

/// Checks `path` (absolute) against `roots`; `Err` is the refusal message naming the path and
/// the allowed roots. For a file that does not exist yet (a write), its nearest existing
/// ancestor is resolved and the missing tail appended.
pub(crate) fn check(path: &Path, roots: &[PathBuf]) -> Result<(), String> {
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
    if inside { Ok(()) } else { Err(refuse()) }
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
