//! Folders under the persistence root hold run records, logs and scripts of one user, so they
//! are created 0700, and a folder we own that an older version (or the umask) left wider is
//! narrowed back to 0700 when it is next used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` and any missing parents with mode 0700; an existing `dir` owned by this
/// process's user whose mode grants anything to group or others is narrowed to 0700.
/// Errors name the folder.
pub(crate) fn ensure(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| super::annotate(e, "create folder", dir))?;
    let meta = std::fs::metadata(dir).map_err(|e| super::annotate(e, "inspect", dir))?;
    let ours = meta.uid() == nix::unistd::getuid().as_raw();
    if ours && meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| super::annotate(e, "narrow to 0700", dir))?;
    }
    Ok(())
}

/// Whether `dir` is a folder (not a link to one) owned by this process's user and closed to
/// group and others: what [`ensure`] would leave, found with one `lstat`.
pub(crate) fn is_private(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|meta| {
        meta.is_dir() && meta.uid() == nix::unistd::getuid().as_raw() && meta.mode() & 0o077 == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("metadata").mode() & 0o777
    }

    #[test]
    fn new_folders_are_private_and_a_wider_one_is_narrowed() {
        let base = tempfile::tempdir().expect("temp dir");
        let nested = base.path().join("a/b");
        ensure(&nested).expect("create");
        assert_eq!(
            (mode(&base.path().join("a")), mode(&nested)),
            (0o700, 0o700)
        );
        std::fs::set_permissions(&nested, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure(&nested).expect("again");
        assert_eq!(mode(&nested), 0o700);
    }
}
