//! Saved workflows as the engine sees them: `workflow(name)` inside a script resolves through
//! the library's folders and bundled texts, and the front ends list them with what static
//! analysis says of each (or why it fails), so the CLI listing and the MCP prompts agree.

use std::path::Path;

use serde_json::{Value, json};

use super::Engine;
use crate::engine::vm::NestedResolver;
use crate::engine::{prepare, script, vm};
use crate::library::{Entry, Folders, Location, Origin};
use crate::model::RunId;

/// One saved workflow and what its `meta` says, or why it cannot run.
#[derive(Clone, Debug)]
pub struct SavedWorkflow {
    pub entry: Entry,
    pub meta: Result<SavedMeta, String>,
}

/// The parts of a saved workflow's `meta` a listing shows.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedMeta {
    /// `meta.name` (may differ from the file name, which is the name it runs by).
    pub meta_name: String,
    pub description: String,
    pub when_to_use: Option<String>,
    /// `meta.inputSchema`, or `{"type": "object"}` when it declares none.
    pub input_schema: Value,
    pub phases: Vec<String>,
}

/// A saved workflow's text, read by name.
#[derive(Clone, Debug)]
pub struct SavedSource {
    pub origin: Origin,
    pub location: Location,
    pub text: String,
}

impl Engine {
    /// The folders saved workflows are looked up in for `project_dir`.
    pub fn workflow_folders(&self, project_dir: Option<&Path>) -> Folders {
        Folders {
            project: project_dir.map(crate::library::project_folder),
            user: self.inner.config.user_workflows.clone(),
        }
    }

    /// Every saved workflow for `project_dir` (project, user and bundled; shadowed ones and
    /// broken ones included), each with its `meta` or the reason it cannot run. Blocking: it
    /// reads files.
    pub fn saved_workflows(
        &self,
        project_dir: Option<&Path>,
    ) -> Result<Vec<SavedWorkflow>, String> {
        let entries = self.workflow_folders(project_dir).list()?;
        Ok(entries
            .into_iter()
            .map(|entry| {
                let meta = match &entry.problem {
                    Some(problem) => Err(problem.clone()),
                    None => self
                        .read_location(&entry.location)
                        .and_then(|text| {
                            let path = entry.path().map(|path| path.display().to_string());
                            text.ok_or_else(|| format!("{} is gone", path.unwrap_or_default()))
                        })
                        .and_then(|text| saved_meta(&text)),
                };
                SavedWorkflow { entry, meta }
            })
            .collect())
    }

    /// The text of the workflow `name` means for `project_dir` (project, then user, then
    /// bundled), or an error that lists the names that exist. Blocking: it reads files.
    pub fn saved_workflow(
        &self,
        project_dir: Option<&Path>,
        name: &str,
    ) -> Result<SavedSource, String> {
        let folders = self.workflow_folders(project_dir);
        resolve(&folders, name, |location| self.read_location(location))
    }

    /// A file that runs `entry`: its own file for a project or user workflow, and for a
    /// bundled one its text published under the persistence root (`library::materialize`),
    /// so the `workflow` tool's `scriptPath` can name it. Blocking.
    pub fn saved_workflow_path(&self, entry: &Entry) -> Result<std::path::PathBuf, String> {
        match &entry.location {
            Location::File(path) => Ok(path.clone()),
            Location::Bundled(_) => {
                let bundled = crate::library::bundled::find(&entry.name)
                    .ok_or_else(|| format!("no bundled workflow named {:?}", entry.name))?;
                let root = self
                    .inner
                    .config
                    .persistence_root
                    .as_deref()
                    .ok_or_else(|| {
                        "this server keeps no files, so a bundled workflow has no path".to_owned()
                    })?;
                crate::library::materialize::materialize(root, bundled)
            }
        }
    }

    pub(super) fn nested_resolver(&self, project_dir: &Path, run_id: &RunId) -> NestedResolver {
        let folders = self.workflow_folders(Some(project_dir));
        let prefix = run_id.to_string();
        let sources = self.inner.sources.clone();
        let mut counter = 0u32;
        Box::new(move |name: &str| {
            let text = if name.contains("export const meta") {
                name.to_owned()
            } else {
                resolve(&folders, name, |location| read(sources.as_ref(), location))?.text
            };
            let analyzed = script::analyze(text.as_bytes()).map_err(|e| e.message)?;
            counter += 1;
            Ok((format!("{prefix}-nested{counter}"), analyzed.body))
        })
    }

    fn read_location(&self, location: &Location) -> Result<Option<String>, String> {
        read(self.inner.sources.as_ref(), location)
    }
}

/// The first candidate of `name` the sources have, read with `read` (`None`: no such file).
fn resolve(
    folders: &Folders,
    name: &str,
    read: impl Fn(&Location) -> Result<Option<String>, String>,
) -> Result<SavedSource, String> {
    crate::library::names::check(name)?;
    for (origin, location) in folders.candidates(name) {
        let Some(text) = read(&location)? else {
            continue;
        };
        return Ok(SavedSource {
            origin,
            location,
            text,
        });
    }
    Err(format!(
        "no workflow named {name:?}; the names that exist: {}",
        folders.known_names()
    ))
}

/// The text at `location`; `None` when the sources have no such file.
fn read(
    sources: &dyn crate::engine::sources::Sources,
    location: &Location,
) -> Result<Option<String>, String> {
    match location {
        Location::File(path) => prepare::read_nested_if_present(sources, path),
        Location::Bundled(text) => Ok(Some((*text).to_owned())),
    }
}

/// What static analysis says of `text`, as a listing shows it.
fn saved_meta(text: &str) -> Result<SavedMeta, String> {
    let analyzed = script::analyze(text.as_bytes()).map_err(|error| error.to_string())?;
    vm::check_syntax(&analyzed.body, vm::VmLimits::default())?;
    Ok(SavedMeta {
        meta_name: analyzed.name,
        description: analyzed.description,
        when_to_use: analyzed.when_to_use,
        input_schema: analyzed
            .input_schema
            .unwrap_or_else(|| json!({"type": "object"})),
        phases: analyzed
            .phases
            .into_iter()
            .map(|phase| phase.title)
            .collect(),
    })
}
