//! The files that comments and the maps name: a comment in `src/`, or a document at the
//! repository's root, that names a file or folder of the repository which is not there.
//!
//! What counts as a name: a word ending in `.rs` (`foo.rs`, `dir/bar.rs`) or starting with
//! one of the repository's folders (`src/…`, `tests/…`, `benches/…`, `examples/…`, `docs/…`,
//! `scripts/…`). A comment's name is looked up from the comment's folder, each folder above it,
//! and the repository root; a document's from the root, `src/`, and the folder its paragraph
//! or bullet names first. What is not checked, on purpose: a bare `mod.rs` (always the
//! convention, never one file), placeholders (`<name>.rs`,
//! `*.rs`, `{a,b}.rs`), absolute paths, and a file of another project, written with the
//! project's name and a colon before it (`hyper:src/proto/h1/role.rs`).

use std::path::{Path, PathBuf};

use super::lex::lex_with_comments;
use super::rust_files;

/// The folders of the repository a name may start with.
const PREFIXES: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "examples/",
    "docs/",
    "scripts/",
];
/// Characters around a word that make it a placeholder, a path of another project or an
/// absolute path rather than a name of ours.
const SKIP_BEFORE: &[char] = &['<', '{', '*', '$', ':', '/', '~'];
const SKIP_AFTER: &[char] = &['>', '}', '*'];

/// The words of `text` that name a file or folder of the repository, in order.
pub(super) fn named_paths(text: &str) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-');
    let chars: Vec<char> = text.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_word(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_word(chars[i]) {
            i += 1;
        }
        let before = start.checked_sub(1).map(|at| chars[at]);
        let after = chars.get(i).copied();
        if before.is_some_and(|c| SKIP_BEFORE.contains(&c))
            || after.is_some_and(|c| SKIP_AFTER.contains(&c))
        {
            continue;
        }
        let word: String = chars[start..i].iter().collect();
        let word = word.trim_end_matches('.');
        let word = word.strip_prefix("./").unwrap_or(word);
        if names_a_file(word) {
            names.push(word.to_owned());
        }
    }
    names
}

fn names_a_file(word: &str) -> bool {
    let rust = word.strip_suffix(".rs").is_some_and(|stem| {
        stem.chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    let ours = PREFIXES.iter().any(|prefix| word.starts_with(prefix));
    (rust || ours) && !word.starts_with(['/', '.', '-']) && word != "mod.rs"
}

/// Whether `name` is a file or folder below one of `bases` (folders relative to `root`).
fn found(root: &Path, bases: &[PathBuf], name: &str) -> bool {
    bases.iter().any(|base| root.join(base).join(name).exists())
}

/// `folder` and every folder above it, up to and including the repository root (`""`).
fn folder_and_above(folder: &Path) -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = folder.ancestors().map(Path::to_path_buf).collect();
    if bases.last().is_none_or(|last| !last.as_os_str().is_empty()) {
        bases.push(PathBuf::new());
    }
    bases
}

fn shown(bases: &[PathBuf]) -> String {
    let names: Vec<String> = bases
        .iter()
        .map(|base| match base.to_str() {
            Some("") => "the repository root".to_owned(),
            _ => format!("{}/", base.display()),
        })
        .collect();
    names.join(", ")
}

/// Every comment of a `.rs` file under `src/` that names a file which is not there, one line
/// each: file, line, name.
pub(super) fn missing_in_comments(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut out = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("under the root");
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let bases = folder_and_above(relative.parent().unwrap_or(Path::new("")));
        for comment in lex_with_comments(&source).1 {
            for (offset, line) in comment.text.lines().enumerate() {
                for name in named_paths(line) {
                    if !found(root, &bases, &name) {
                        out.push(format!(
                            "{}:{}: names `{name}`, which is not in {}",
                            relative.display(),
                            comment.line + offset,
                            shown(&bases)
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Every name in the document `file` (relative to `root`) that is not there. A paragraph or
/// bullet may name its folder first (`` - `src/engine/` — … ``); its other names are looked
/// up from that folder too.
pub(super) fn missing_in_document(root: &Path, file: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let mut out = Vec::new();
    let mut block_folder: Option<PathBuf> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let starts_block = trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with("- ")
            || trimmed.starts_with("```");
        if starts_block {
            block_folder = None;
        }
        for name in named_paths(line) {
            let mut bases = vec![PathBuf::new(), PathBuf::from("src")];
            bases.extend(block_folder.clone());
            if !found(root, &bases, &name) {
                out.push(format!(
                    "{file}:{}: names `{name}`, which is not in {}",
                    index + 1,
                    shown(&bases)
                ));
                continue;
            }
            if block_folder.is_none() {
                block_folder = bases
                    .iter()
                    .map(|base| base.join(&name).components().collect::<PathBuf>())
                    .find(|path| root.join(path).is_dir());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_rust_files_and_paths_of_the_repository() {
        let text = "see `driver/live.rs` and src/engine/status/, `tests/it/`. Also foo.rs.";
        assert_eq!(
            named_paths(text),
            [
                "driver/live.rs",
                "src/engine/status/",
                "tests/it/",
                "foo.rs"
            ]
        );
        // Placeholders, absolute paths, other projects' files, other extensions and words
        // that only end like a file are not names of ours.
        let skipped = "`<name>.rs`, `*.rs`, `{a,b}.rs`, /proc/self/stat, hyper:src/proto.rs, \
                       https://example.org/src/x.rs, notes.md, .rs, ~/src/x.rs, `$dir/x.rs`, a `mod.rs`";
        assert_eq!(named_paths(skipped), Vec::<String>::new());
    }

    #[test]
    fn a_missing_name_fails_and_one_that_resolves_from_a_folder_passes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/engine/status")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "//! the crate\n").unwrap();
        std::fs::write(root.join("src/engine/driver.rs"), "//! x\n").unwrap();
        std::fs::write(
            root.join("src/engine/status/mod.rs"),
            "//! Written by `driver.rs` (`engine/driver.rs`), fitted by `fit.rs`.\n\
             /// See `src/lib.rs`.\nfn f() { let _ = \"gone.rs\"; }\n/* and `old.rs` */\n",
        )
        .unwrap();
        assert_eq!(
            missing_in_comments(root),
            [
                "src/engine/status/mod.rs:1: names `fit.rs`, which is not in src/engine/status/, src/engine/, src/, the repository root",
                "src/engine/status/mod.rs:4: names `old.rs`, which is not in src/engine/status/, src/engine/, src/, the repository root",
            ]
        );

        std::fs::write(
            root.join("MAP.md"),
            "# Map\n- `src/engine/` — `driver.rs` and `status/`;\n  `vm.rs` is not here.\n\n`driver.rs` alone is not found.\n",
        )
        .unwrap();
        assert_eq!(
            missing_in_document(root, "MAP.md"),
            [
                "MAP.md:3: names `vm.rs`, which is not in the repository root, src/, src/engine/",
                "MAP.md:5: names `driver.rs`, which is not in the repository root, src/",
            ]
        );
    }
}
