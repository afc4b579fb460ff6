//! A bundled workflow as a file: the `workflow` tool's `scriptPath` names a file on the
//! server's disk, so a prompt that leads a client to run a bundled workflow needs one. Each
//! text is published once under `<root>/library/<digest>/<name>.js` (folders 0700, file 0600),
//! so one version of the binary keeps one path per workflow, and the file is checked against
//! the compiled text on every use: a file changed or swapped since is refused, never run.

use std::path::{Path, PathBuf};

use super::bundled::Bundled;
use crate::util::safe_file::{self, Links};

/// The file holding `bundled`'s text under `root` (the persistence root), written when
/// missing. An error names the path: a symbolic link on the way, or a file whose text is not
/// the compiled one.
pub fn materialize(root: &Path, bundled: &Bundled) -> Result<PathBuf, String> {
    let digest = crate::util::sha256_hex(bundled.source.as_bytes());
    let folder = root.join("library").join(&digest[..16]);
    crate::util::private_dir::ensure(&folder).map_err(|error| error.to_string())?;
    let path = folder.join(format!("{}.js", bundled.name));
    crate::util::publish_once(&path, bundled.source.as_bytes(), 0o600)
        .map_err(|error| error.to_string())?;
    let limit = bundled.source.len() as u64 + 1;
    let contents =
        safe_file::read_blocking(&path, limit, Links::Refuse).map_err(|error| error.to_string())?;
    if contents.bytes != bundled.source.as_bytes() {
        return Err(format!(
            "{} is not the bundled workflow {:?} of this binary; remove it and ask again",
            path.display(),
            bundled.name
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const SAMPLE: Bundled = Bundled {
        name: "sample",
        source: "export const meta = { name: 'sample', description: 'd' };\nreturn 1;\n",
    };

    #[test]
    fn a_bundled_text_lands_once_privately_and_a_changed_file_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let first = materialize(root.path(), &SAMPLE).unwrap();
        assert_eq!(materialize(root.path(), &SAMPLE).unwrap(), first);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), SAMPLE.source);
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&first), 0o600);
        assert_eq!(mode(first.parent().unwrap()), 0o700);
        assert_eq!(mode(&root.path().join("library")), 0o700);

        std::fs::write(&first, "return 2;").unwrap();
        let error = materialize(root.path(), &SAMPLE).unwrap_err();
        assert!(error.contains(&first.display().to_string()), "{error}");

        std::fs::remove_file(&first).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &first).unwrap();
        assert!(materialize(root.path(), &SAMPLE).is_err());
    }
}
