//! Companion files at preparation: the files a script declares in `meta.files`, read
//! through the sources port under the run's project folder and checked against the limits,
//! then frozen with the script (`RunRecord::files`) so that every generation, replay and the
//! mocked dry run see the same texts. A resume reads them again only with a revised script.
//!
//! Limits, each enforced here: [`MAX_COMPANION_FILES`] files (checked statically by the
//! analyzer), each at most [`MAX_COMPANION_BYTES`], all together at most
//! [`MAX_COMPANION_TOTAL_BYTES`]; every file must be UTF-8 text. Errors name `meta.files[i]`
//! and the path.
//!
//! [`MAX_COMPANION_FILES`]: crate::engine::script::MAX_COMPANION_FILES

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::rejection::Rejection;
use crate::engine::sources::Sources;
use crate::util::safe_file;

/// The largest companion file, in bytes (1 MiB).
pub(crate) const MAX_COMPANION_BYTES: u64 = 1 << 20;
/// The most bytes all companion files of one script may hold together (4 MiB).
pub(crate) const MAX_COMPANION_TOTAL_BYTES: u64 = 4 << 20;

/// The texts of `files` (relative to `project_dir`) by path, read on the blocking pool and
/// within the file-read deadline for them all.
pub(crate) async fn read(
    sources: Arc<dyn Sources>,
    project_dir: &Path,
    files: &[String],
) -> Result<BTreeMap<String, String>, Rejection> {
    if files.is_empty() {
        return Ok(BTreeMap::new());
    }
    let (project_dir, owned) = (project_dir.to_path_buf(), files.to_vec());
    let task =
        tokio::task::spawn_blocking(move || read_blocking(sources.as_ref(), &project_dir, &owned));
    match tokio::time::timeout(safe_file::READ_DEADLINE, task).await {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => Err(Rejection::new(format!(
            "reading the files of meta.files failed: {error}"
        ))),
        Err(_) => Err(Rejection::new(format!(
            "the files of meta.files were not read within {} s",
            safe_file::READ_DEADLINE.as_secs()
        ))),
    }
}

/// [`read`] on the calling thread (never an async worker).
pub(crate) fn read_blocking(
    sources: &dyn Sources,
    project_dir: &Path,
    files: &[String],
) -> Result<BTreeMap<String, String>, Rejection> {
    let mut texts = BTreeMap::new();
    let mut total: u64 = 0;
    for (index, path) in files.iter().enumerate() {
        let named = || format!("meta.files[{index}] {}", Value::String(path.clone()));
        let contents = sources
            .read_project_file(project_dir, path, MAX_COMPANION_BYTES)
            .map_err(|error| Rejection::new(format!("{}: {error}", named())))?;
        total += contents.bytes.len() as u64;
        if total > MAX_COMPANION_TOTAL_BYTES {
            return Err(Rejection::new(format!(
                "{} brings the companion files to {total} bytes; together they may hold at most \
                 {MAX_COMPANION_TOTAL_BYTES} bytes (4 MiB)",
                named()
            )));
        }
        let text = String::from_utf8(contents.bytes)
            .map_err(|_| Rejection::new(format!("{} is not UTF-8 text", named())))?;
        texts.insert(path.clone(), text);
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sources::DiskSources;

    fn project_with(files: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
        let folder = tempfile::tempdir().expect("temp dir");
        for (path, bytes) in files {
            let path = folder.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("folders");
            std::fs::write(path, bytes).expect("write");
        }
        folder
    }

    fn names(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|path| (*path).to_owned()).collect()
    }

    #[test]
    fn texts_are_read_by_path() {
        let project = project_with(&[
            ("prompts/review.md", b"Review.".to_vec()),
            ("schemas/out.json", b"{}".to_vec()),
        ]);
        let texts = read_blocking(
            &DiskSources,
            project.path(),
            &names(&["prompts/review.md", "schemas/out.json"]),
        )
        .expect("read");
        assert_eq!(texts["prompts/review.md"], "Review.");
        assert_eq!(texts["schemas/out.json"], "{}");
    }

    #[test]
    fn one_file_may_hold_one_mib_and_not_a_byte_more() {
        let limit = MAX_COMPANION_BYTES as usize;
        let project = project_with(&[
            ("at.md", vec![b'a'; limit]),
            ("over.md", vec![b'a'; limit + 1]),
        ]);
        let texts = read_blocking(&DiskSources, project.path(), &names(&["at.md"])).expect("1 MiB");
        assert_eq!(texts["at.md"].len(), limit);
        let error = read_blocking(&DiskSources, project.path(), &names(&["at.md", "over.md"]))
            .expect_err("1 MiB + 1");
        assert!(
            error.message.starts_with("meta.files[1] \"over.md\": ")
                && error.message.contains("too large")
                && error.message.contains(&format!("limit of {limit} bytes")),
            "{}",
            error.message
        );
    }

    #[test]
    fn all_files_may_hold_four_mib_and_not_a_byte_more() {
        let each = vec![b'a'; MAX_COMPANION_BYTES as usize];
        let project = project_with(&[
            ("a.md", each.clone()),
            ("b.md", each.clone()),
            ("c.md", each.clone()),
            ("d.md", each),
            ("e.md", b"x".to_vec()),
        ]);
        let four = names(&["a.md", "b.md", "c.md", "d.md"]);
        let texts = read_blocking(&DiskSources, project.path(), &four).expect("4 MiB together");
        assert_eq!(texts.len(), 4);
        let five = names(&["a.md", "b.md", "c.md", "d.md", "e.md"]);
        let error = read_blocking(&DiskSources, project.path(), &five).expect_err("4 MiB + 1");
        assert!(
            error
                .message
                .starts_with("meta.files[4] \"e.md\" brings the companion files to 4194305 bytes")
                && error.message.contains("at most 4194304 bytes"),
            "{}",
            error.message
        );
    }

    #[test]
    fn missing_binary_and_invalid_files_are_named() {
        let project = project_with(&[("bin.dat", vec![0xff, 0xfe])]);
        let cases = [
            ("gone.md", "meta.files[0] \"gone.md\": "),
            ("bin.dat", "meta.files[0] \"bin.dat\" is not UTF-8 text"),
            (
                "../x.md",
                "meta.files[0] \"../x.md\": the path \"../x.md\" has a `..` component",
            ),
        ];
        for (path, expected) in cases {
            let error =
                read_blocking(&DiskSources, project.path(), &names(&[path])).expect_err("refused");
            assert!(
                error.message.starts_with(expected),
                "{path}: {}",
                error.message
            );
        }
    }
}
