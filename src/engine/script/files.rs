//! `meta.files`: the companion files a script declares, as a plain array literal of relative
//! paths (`files: ["prompts/review.md", "schemas/out.json"]`). The shape and the path rules
//! are checked here, statically; preparation reads the files (`engine::prepare::companions`).
//!
//! A path is relative to the run's project folder and stays inside it: not absolute, `/`
//! between folders, no empty, `.` or `..` component, no hidden component (one that starts
//! with `.`), no backslash or control character, at most [`MAX_COMPANION_PATH_BYTES`]. The
//! same rule is the sources port's ([`companion_path_problem`]), so a pack or the disk never
//! sees a path the analyzer would have refused.

use std::collections::HashMap;

use serde_json::Value;

use super::literal::LiteralValue;
use super::{Literal, MetaChecker, ScriptError};

/// The most companion files one script may declare.
pub(crate) const MAX_COMPANION_FILES: usize = 64;
/// The longest companion path, in bytes (the usual `PATH_MAX`).
pub(crate) const MAX_COMPANION_PATH_BYTES: usize = 4096;

/// What is wrong with `path` as a companion path, or `None` when it is fine. The text
/// completes "the path ...".
pub(crate) fn companion_path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("is empty".to_owned());
    }
    if path.len() > MAX_COMPANION_PATH_BYTES {
        return Some(format!(
            "is {} bytes long; the limit is {MAX_COMPANION_PATH_BYTES} bytes",
            path.len()
        ));
    }
    if path.starts_with('/') {
        return Some(
            "is absolute; companion files are named relative to the project folder".to_owned(),
        );
    }
    if path.contains('\\') {
        return Some("contains `\\`; separate folders with `/`".to_owned());
    }
    if path.chars().any(char::is_control) {
        return Some("contains a control character".to_owned());
    }
    for component in path.split('/') {
        match component {
            "" => return Some("has an empty component (`//` or a trailing `/`)".to_owned()),
            "." | ".." => {
                return Some(format!(
                    "has a `{component}` component; companion files stay inside the project folder"
                ));
            }
            hidden if hidden.starts_with('.') => {
                return Some(format!(
                    "has the hidden component {}; hidden files and folders cannot be companions",
                    Value::String(hidden.to_owned())
                ));
            }
            _ => {}
        }
    }
    None
}

impl MetaChecker<'_> {
    /// `meta.files`: an array of at most [`MAX_COMPANION_FILES`] distinct strings, each a
    /// valid companion path.
    pub(super) fn files(&self, files: &Literal) -> Result<Vec<String>, ScriptError> {
        let LiteralValue::Array(items) = &files.value else {
            return Err(self.error(
                files,
                "meta.files must be an array of relative paths, e.g. [\"prompts/review.md\"]",
            ));
        };
        if items.len() > MAX_COMPANION_FILES {
            return Err(self.error(
                files,
                format!(
                    "meta.files lists {} files; the limit is {MAX_COMPANION_FILES}",
                    items.len()
                ),
            ));
        }
        let mut paths = Vec::with_capacity(items.len());
        let mut index_by_path: HashMap<&str, usize> = HashMap::new();
        for (index, item) in items.iter().enumerate() {
            let Some(path) = item.as_str() else {
                return Err(self.error(
                    item,
                    format!("meta.files[{index}] must be a string (a relative path)"),
                ));
            };
            let shown = Value::String(path.chars().take(200).collect());
            if let Some(problem) = companion_path_problem(path) {
                return Err(self.error(item, format!("meta.files[{index}] {shown} {problem}")));
            }
            if let Some(earlier) = index_by_path.insert(path, index) {
                return Err(self.error(
                    item,
                    format!("meta.files[{index}] {shown} repeats meta.files[{earlier}]"),
                ));
            }
            paths.push(path.to_owned());
        }
        Ok(paths)
    }
}

#[cfg(test)]
mod tests {
    use super::super::analyze;
    use super::*;

    fn script(files: &str) -> String {
        format!(
            "export const meta = {{ name: 'n', description: 'd', files: {files} }};\nreturn 1;\n"
        )
    }

    fn rejected(files: &str) -> ScriptError {
        match analyze(script(files).as_bytes()) {
            Ok(_) => panic!("expected files: {files} to be rejected"),
            Err(error) => error,
        }
    }

    fn quoted_list(paths: &[String]) -> String {
        let quoted: Vec<String> = paths.iter().map(|path| format!("{path:?}")).collect();
        format!("[{}]", quoted.join(", "))
    }

    #[test]
    fn declared_files_are_kept_in_order_and_are_no_unknown_key() {
        let analyzed =
            analyze(script("['prompts/review.md', \"schemas/out.json\", `a b.txt`]").as_bytes())
                .expect("valid");
        assert_eq!(
            analyzed.files,
            ["prompts/review.md", "schemas/out.json", "a b.txt"]
        );
        assert!(analyzed.unknown_meta_keys.is_empty());
        let none =
            analyze(b"export const meta = { name: 'n', description: 'd' };\n").expect("valid");
        assert!(none.files.is_empty());
        assert!(
            analyze(script("[]").as_bytes())
                .expect("empty list")
                .files
                .is_empty()
        );
    }

    #[test]
    fn sixty_four_files_pass_and_sixty_five_do_not() {
        let paths: Vec<String> = (0..=MAX_COMPANION_FILES)
            .map(|i| format!("f{i}.md"))
            .collect();
        let at_limit = quoted_list(&paths[..MAX_COMPANION_FILES]);
        assert_eq!(
            analyze(script(&at_limit).as_bytes())
                .expect("64 files")
                .files
                .len(),
            MAX_COMPANION_FILES
        );
        let error = rejected(&quoted_list(&paths));
        assert!(
            error
                .message
                .starts_with("meta.files lists 65 files; the limit is 64 at line 1, column "),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_path_may_be_4096_bytes_long_and_not_one_more() {
        let at_limit = format!("a/{}", "b".repeat(MAX_COMPANION_PATH_BYTES - 2));
        assert!(analyze(script(&format!("['{at_limit}']")).as_bytes()).is_ok());
        let error = rejected(&format!("['{at_limit}b']"));
        assert!(
            error.message.contains("meta.files[0] ")
                && error
                    .message
                    .contains("is 4097 bytes long; the limit is 4096 bytes"),
            "{}",
            error.message
        );
    }

    #[test]
    fn each_broken_rule_names_the_entry_and_its_position() {
        let cases = [
            ("'prompts'", "meta.files must be an array of relative paths"),
            ("['a.md', 3]", "meta.files[1] must be a string"),
            ("['']", "meta.files[0] \"\" is empty"),
            (
                "['/etc/passwd']",
                "meta.files[0] \"/etc/passwd\" is absolute",
            ),
            (
                "['../x.md']",
                "meta.files[0] \"../x.md\" has a `..` component",
            ),
            (
                "['a/./x.md']",
                "meta.files[0] \"a/./x.md\" has a `.` component",
            ),
            ("['a//x.md']", "has an empty component"),
            ("['a/']", "has an empty component"),
            (
                "['.env']",
                "meta.files[0] \".env\" has the hidden component \".env\"",
            ),
            ("['a/.git/config']", "has the hidden component \".git\""),
            ("['a\\\\b.md']", "contains `\\`"),
            ("['a\\u0001.md']", "contains a control character"),
            (
                "['a.md', 'b.md', 'a.md']",
                "meta.files[2] \"a.md\" repeats meta.files[0]",
            ),
        ];
        for (files, expected) in cases {
            let error = rejected(files);
            assert!(
                error.message.contains(expected) && error.line == Some(1) && error.column.is_some(),
                "files: {files}: {:?}",
                error
            );
        }
    }

    #[test]
    fn the_path_rule_is_the_sources_rule() {
        assert_eq!(companion_path_problem("prompts/review.md"), None);
        assert_eq!(companion_path_problem("ünï/ok.md"), None);
        for bad in ["", "/x", "..", "a/..", ".x", "a\\b", "a\0b", "a//b"] {
            assert!(companion_path_problem(bad).is_some(), "{bad:?}");
        }
    }
}
