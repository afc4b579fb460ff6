//! Loading a served folder: every workflow script under `<dir>` becomes one tool.
//!
//! A workflow is a `*.js` file whose first statement is `export const meta` (comments, blank
//! lines and a `#!` line may come first); other `.js` files (helpers, nested scripts) are
//! left alone. Hidden files and folders (a name starting with `.`) are skipped, and symbolic
//! links are never followed, so the folder's tools are exactly the files under it. Each
//! workflow must pass the engine's static checks (the same analyzer preparation uses) and
//! parse as the script VM would run it, so a script that lists is a script that starts; a broken one, two scripts with one name, a name
//! MCP does not allow or one in the `mhl_run_` namespace stops the server at start-up with
//! every offending file named.
//!
//! The files come from the disk ([`load`]) or from the entries of a workflows pack
//! ([`load_files`]); both go through one loader, so a packed folder serves exactly the
//! tools the folder itself would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::engine::script;
use crate::util::safe_file::{self, Links};

/// The reserved prefix of the async run tools.
pub(crate) const RUN_TOOL_PREFIX: &str = "mhl_run_";
/// Workflows one folder may hold.
pub(crate) const MAX_WORKFLOWS: usize = 1_000;
/// Folders deep a workflow may sit under `<dir>`.
const MAX_DEPTH: usize = 16;

/// One served workflow, as loaded at start-up.
#[derive(Clone, Debug)]
pub struct Workflow {
    /// `meta.name`: the tool's name.
    pub name: String,
    pub description: String,
    /// `meta.inputSchema`, or `{type:"object"}`.
    pub input_schema: Value,
    /// The script's absolute path (what runs execute).
    pub path: PathBuf,
    /// The path under the folder, `/`-separated (error messages, the manifest).
    pub relative: String,
    /// `meta` as written, for the workflow's manifest resource.
    pub meta: Value,
    /// The titles of `meta.phases`: the steps a live run's status counts.
    pub phases: Vec<String>,
}

impl Workflow {
    /// The `tools/list` entry: name, description, input schema, and the hint that
    /// `mhl_run_start` drives it asynchronously.
    pub(crate) fn tool_definition(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "_meta": {"mhl": {"run": {"tool": "mhl_run_start"}}},
        })
    }
}

/// The workflows of a folder, by name.
#[derive(Clone, Debug, Default)]
pub struct Folder {
    /// The served folder, absolute and resolved: runs execute with it as `cwd`.
    pub root: PathBuf,
    pub workflows: BTreeMap<String, Workflow>,
}

impl Folder {
    pub fn get(&self, name: &str) -> Option<&Workflow> {
        self.workflows.get(name)
    }

    /// `message` with the folder's absolute path cut out (preparation names
    /// files by absolute path; a client only needs the path under the folder).
    pub fn scrub(&self, message: &str) -> String {
        message.replace(&format!("{}/", self.root.display()), "")
    }
}

/// Why a folder cannot be served. The message names the folder or every offending file.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("the workflows folder {0} cannot be read: {1}")]
    Unreadable(PathBuf, String),
    #[error(
        "the workflows folder {0} holds no workflow (a *.js file starting with `export const meta`)"
    )]
    Empty(PathBuf),
    #[error("the workflows folder cannot be served:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// Loads every workflow under `dir` (which must be a folder) from the disk.
pub fn load(dir: &Path) -> Result<Folder, FolderError> {
    let root = served_root(dir)?;
    let mut files = Vec::new();
    walk(&root, 0, &mut files).map_err(|error| FolderError::Unreadable(root.clone(), error))?;
    files.sort();
    let base = root.clone();
    let scripts = files.into_iter().map(move |path| {
        let relative = relative_name(&base, &path);
        let bytes = safe_file::read_blocking(
            &path,
            crate::engine::script::MAX_SCRIPT_BYTES as u64,
            Links::Refuse,
        )
        .map(|contents| contents.bytes)
        .map_err(|error| format!("{relative}: {error}"));
        (relative, bytes)
    });
    assemble(root, scripts)
}

/// Loads the workflows among `files` (`(path under the folder, bytes)`, the entries of a
/// workflows pack) as if they lay under `dir`, by the same rules as [`load`]: the folder
/// must exist (runs execute in it), but nothing under it is read.
pub(crate) fn load_files<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Folder, FolderError> {
    let root = served_root(dir)?;
    let scripts = files
        .into_iter()
        .filter(|(path, _)| {
            let depth = path.matches('/').count();
            path.ends_with(".js")
                && depth <= MAX_DEPTH
                && !path.split('/').any(|part| part.starts_with('.'))
        })
        .map(|(path, bytes)| (path.to_owned(), Ok(bytes.to_vec())));
    assemble(root, scripts)
}

/// `dir` absolute and resolved, if it is a folder.
fn served_root(dir: &Path) -> Result<PathBuf, FolderError> {
    let root = std::fs::canonicalize(dir)
        .map_err(|error| FolderError::Unreadable(dir.to_path_buf(), error.to_string()))?;
    if !root.is_dir() {
        return Err(FolderError::Unreadable(
            root,
            "it is not a folder".to_owned(),
        ));
    }
    Ok(root)
}

/// The one loader: every `*.js` file (path under `root`, its bytes or why they could not be
/// read), in path order, becomes a workflow or a problem; problems stop it, naming each file.
fn assemble(
    root: PathBuf,
    scripts: impl Iterator<Item = (String, Result<Vec<u8>, String>)>,
) -> Result<Folder, FolderError> {
    let mut problems = Vec::new();
    let mut workflows: BTreeMap<String, Workflow> = BTreeMap::new();
    for (relative, bytes) in scripts {
        let path = root.join(&relative);
        match bytes.and_then(|bytes| read_workflow(&bytes, &path, &relative)) {
            Ok(None) => {}
            Ok(Some(workflow)) => {
                if let Some(problem) = name_problem(&workflow) {
                    problems.push(problem);
                } else if let Some(first) = workflows.get(&workflow.name) {
                    problems.push(format!(
                        "{} and {}: both are named {:?}; tool names must be unique",
                        first.relative, workflow.relative, workflow.name
                    ));
                } else {
                    workflows.insert(workflow.name.clone(), workflow);
                }
            }
            Err(problem) => problems.push(problem),
        }
    }
    if workflows.len() > MAX_WORKFLOWS {
        problems.push(format!(
            "{} workflows found; one folder serves at most {MAX_WORKFLOWS}",
            workflows.len()
        ));
    }
    if !problems.is_empty() {
        return Err(FolderError::Invalid(problems));
    }
    if workflows.is_empty() {
        return Err(FolderError::Empty(root));
    }
    Ok(Folder { root, workflows })
}

/// Collects the `*.js` regular files under `dir`, skipping hidden names and links.
fn walk(dir: &Path, depth: usize, files: &mut Vec<PathBuf>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|error| format!("{}: {error}", dir.display()))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // `file_type` does not follow links: a link is neither a file nor a folder here.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            walk(&path, depth + 1, files)?;
        } else if kind.is_file() && path.extension().and_then(|e| e.to_str()) == Some("js") {
            files.push(path);
        }
    }
    Ok(())
}

/// `path` under `root`, `/`-separated: how workflows and packed files are named.
pub(crate) fn relative_name(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// `Ok(None)` for a `.js` file that is not a workflow; `Err` names the file and the fault.
fn read_workflow(bytes: &[u8], path: &Path, relative: &str) -> Result<Option<Workflow>, String> {
    if !starts_with_meta(&String::from_utf8_lossy(bytes)) {
        return Ok(None);
    }
    let analyzed = script::analyze(bytes).map_err(|error| format!("{relative}: {error}"))?;
    crate::engine::vm::check_syntax(&analyzed.body, crate::engine::vm::VmLimits::default())
        .map_err(|error| format!("{relative}: {error}"))?;
    let input_schema = analyzed
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    if input_schema
        .get("type")
        .is_some_and(|kind| kind != "object")
    {
        return Err(format!(
            "{relative}: meta.inputSchema must describe an object (\"type\": \"object\"), because \
             tool arguments are an object"
        ));
    }
    Ok(Some(Workflow {
        name: analyzed.name,
        description: analyzed.description,
        input_schema,
        path: path.to_path_buf(),
        relative: relative.to_owned(),
        meta: analyzed.meta,
        phases: analyzed
            .phases
            .into_iter()
            .map(|phase| phase.title)
            .collect(),
    }))
}

/// Whether the first statement, past comments and a `#!` line, is `export const meta`.
fn starts_with_meta(text: &str) -> bool {
    let mut rest = text.strip_prefix('\u{feff}').unwrap_or(text);
    if rest.starts_with("#!") {
        rest = rest.find('\n').map_or("", |end| &rest[end..]);
    }
    loop {
        rest = rest.trim_start();
        if let Some(comment) = rest.strip_prefix("//") {
            rest = comment.find('\n').map_or("", |end| &comment[end..]);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            match comment.find("*/") {
                Some(end) => rest = &comment[end + 2..],
                None => return false,
            }
        } else {
            break;
        }
    }
    let mut words = rest.split_whitespace();
    words.next() == Some("export")
        && words.next() == Some("const")
        && words
            .next()
            .is_some_and(|word| word == "meta" || word.starts_with("meta="))
}

/// A tool name MCP refuses, or one in the reserved namespace.
fn name_problem(workflow: &Workflow) -> Option<String> {
    let name = &workflow.name;
    if name.starts_with(RUN_TOOL_PREFIX) {
        return Some(format!(
            "{}: the name {name:?} is reserved: names starting with {RUN_TOOL_PREFIX} are the \
             async run tools",
            workflow.relative
        ));
    }
    let valid = !name.is_empty()
        && name.chars().count() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (!valid).then(|| {
        format!(
            "{}: meta.name {name:?} is not a valid MCP tool name (1 to 128 characters from A-Z, \
             a-z, 0-9, '_', '-' and '.')",
            workflow.relative
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, relative: &str, text: &str) {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn workflow(name: &str) -> String {
        format!("export const meta = {{ name: {name:?}, description: \"d\" }};\nreturn 1;\n")
    }

    #[test]
    fn meta_first_is_what_makes_a_workflow() {
        assert!(starts_with_meta("export const meta = {}"));
        assert!(starts_with_meta(
            "#!/usr/bin/env agentprism\n// a comment\n/* block */\n  export const meta={}"
        ));
        assert!(!starts_with_meta("const x = 1;\nexport const meta = {}"));
        assert!(!starts_with_meta("export const metadata = {}"));
        assert!(!starts_with_meta("/* never closed"));
    }

    #[test]
    fn a_folder_lists_its_workflows_and_skips_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.js", &workflow("alpha"));
        write(dir.path(), "nested/b.js", &workflow("beta"));
        write(dir.path(), "helper.js", "export function help() {}\n");
        write(dir.path(), ".hidden/c.js", &workflow("gamma"));
        write(dir.path(), "notes.md", "not a script");
        std::os::unix::fs::symlink(dir.path().join("a.js"), dir.path().join("link.js")).unwrap();
        let folder = load(dir.path()).unwrap();
        let names: Vec<_> = folder.workflows.keys().cloned().collect();
        assert_eq!(names, ["alpha", "beta"]);
        let beta = folder.get("beta").unwrap();
        assert_eq!(beta.relative, "nested/b.js");
        assert_eq!(beta.input_schema, json!({"type": "object"}));
        assert_eq!(
            beta.tool_definition()["_meta"]["mhl"]["run"]["tool"],
            "mhl_run_start"
        );
    }

    #[test]
    fn bad_folders_name_every_offending_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "one.js", &workflow("same"));
        write(dir.path(), "two.js", &workflow("same"));
        write(dir.path(), "run.js", &workflow("mhl_run_start"));
        write(dir.path(), "space.js", &workflow("has space"));
        write(dir.path(), "broken.js", "export const meta = { name: 1 };");
        write(
            dir.path(),
            "body.js",
            "export const meta = { name: \"body\", description: \"d\" };\nreturn {;\n",
        );
        let message = load(dir.path()).unwrap_err().to_string();
        for needle in [
            "one.js and two.js: both are named \"same\"",
            "run.js: the name \"mhl_run_start\" is reserved",
            "space.js: meta.name \"has space\" is not a valid MCP tool name",
            "broken.js:",
            "body.js: SyntaxError",
        ] {
            assert!(message.contains(needle), "{needle} missing from {message}");
        }
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(load(empty.path()), Err(FolderError::Empty(_))));
        assert!(matches!(
            load(&empty.path().join("missing")),
            Err(FolderError::Unreadable(..))
        ));
    }

    #[test]
    fn packed_files_load_by_the_same_rules_without_reading_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        // On disk: a workflow the pack does not hold; it must not be served.
        write(dir.path(), "disk.js", &workflow("disk"));
        let alpha = workflow("alpha");
        let beta = workflow("beta");
        let files: Vec<(&str, &[u8])> = vec![
            ("a.js", alpha.as_bytes()),
            ("nested/b.js", beta.as_bytes()),
            ("helper.js", b"export function help() {}\n"),
            ("prompts/review.md", b"not a script"),
        ];
        let folder = load_files(dir.path(), files).unwrap();
        let names: Vec<_> = folder.workflows.keys().cloned().collect();
        assert_eq!(names, ["alpha", "beta"]);
        let beta = folder.get("beta").unwrap();
        assert_eq!(beta.path, folder.root.join("nested/b.js"));
        let same = workflow("same");
        let message = load_files(
            dir.path(),
            [("one.js", same.as_bytes()), ("two.js", same.as_bytes())],
        )
        .unwrap_err()
        .to_string();
        assert!(
            message.contains("one.js and two.js: both are named \"same\""),
            "{message}"
        );
        assert!(matches!(
            load_files(dir.path(), [("notes.md", b"x".as_slice())]),
            Err(FolderError::Empty(_))
        ));
    }

    #[test]
    fn a_schema_that_is_not_an_object_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "s.js",
            "export const meta = { name: \"s\", description: \"d\", inputSchema: { type: \"string\" } };\nreturn 1;\n",
        );
        let message = load(dir.path()).unwrap_err().to_string();
        assert!(
            message.contains("s.js: meta.inputSchema must describe an object"),
            "{message}"
        );
    }
}
