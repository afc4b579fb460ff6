//! `agentprism workflows`: the saved workflows a name can run (the project's folder, the
//! user's folder, the bundled library), listed with what their `meta` says or why they are
//! broken; `new` writes a starting point, `show` prints (or `--copy` copies) the one a name
//! runs, and `save` keeps the script a run executed under a name. Listing and lookup go
//! through the engine, so the command line and the MCP prompts agree on what exists and on
//! which of two same-named workflows wins; writing goes through `library::save`, which
//! refuses symbolic links.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};

use super::args::{SavePlace, WorkflowsAction, WorkflowsArgs, WorkflowsListArgs};
use super::input::{engine_error, guarded, input_error, parse_run_id, project_dir};
use super::{EXIT_COMPLETED, EXIT_FAILED};
use crate::app::foreground_engine;
use crate::engine::Engine;
use crate::engine::manager::SavedWorkflow;
use crate::env::EnvSnapshot;
use crate::library::save::{SaveError, Target, save};
use crate::model::ScriptSource;

/// Runs `workflows` and its subcommands. Exit codes: 0 done; 1 a listed workflow is broken,
/// or an operational failure; 2 bad input (an unknown name, a bad name, an existing file
/// without `--force`, a symbolic link in the way), with nothing written.
pub(super) async fn workflows(env: &EnvSnapshot, args: WorkflowsArgs) -> Result<u8> {
    guarded(async {
        match args.action {
            None => list(env, &args.list).await,
            Some(WorkflowsAction::List(list_args)) => list(env, &list_args).await,
            Some(WorkflowsAction::New {
                name,
                place,
                project_dir,
            }) => new(env, &name, &place, project_dir.as_deref()).await,
            Some(WorkflowsAction::Show {
                name,
                copy,
                user,
                force,
                project_dir,
            }) => {
                let place = copy.then_some(SavePlace { user, force });
                show(env, &name, place.as_ref(), project_dir.as_deref()).await
            }
            Some(WorkflowsAction::Save {
                run_id,
                name,
                place,
            }) => save_run(env, &run_id, &name, &place).await,
        }
    })
    .await
}

async fn list(env: &EnvSnapshot, args: &WorkflowsListArgs) -> Result<u8> {
    let engine = foreground_engine(env, false).await?;
    let project = project_dir(args.project_dir.as_deref())?;
    let listed = blocking(&engine, move |engine| {
        engine.saved_workflows(Some(&project))
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    let broken = listed.iter().filter(|saved| saved.meta.is_err()).count();
    if args.json {
        let items: Vec<Value> = listed.iter().map(listing_json).collect();
        say!("{}", serde_json::to_string_pretty(&items)?);
    } else if listed.is_empty() {
        say!("no saved workflows (docs/workflows.md says where they live)");
    } else {
        for saved in &listed {
            print_saved(saved);
        }
    }
    if broken > 0 {
        note!(
            "agentprism: {broken} saved workflow{} cannot run (its error is in the listing)",
            if broken == 1 { "" } else { "s" }
        );
        return Ok(EXIT_FAILED);
    }
    Ok(EXIT_COMPLETED)
}

/// One workflow of the listing as JSON; absent parts are `null`.
fn listing_json(saved: &SavedWorkflow) -> Value {
    let entry = &saved.entry;
    let meta = saved.meta.as_ref().ok();
    json!({
        "name": entry.name,
        "origin": entry.origin.as_str(),
        "path": entry.path(),
        "description": meta.map(|meta| &meta.description),
        "whenToUse": meta.and_then(|meta| meta.when_to_use.as_ref()),
        "inputSchema": meta.map(|meta| &meta.input_schema),
        "phases": meta.map(|meta| &meta.phases),
        "shadowedBy": entry.shadowed_by.map(|origin| origin.as_str()),
        "error": saved.meta.as_ref().err(),
    })
}

fn print_saved(saved: &SavedWorkflow) {
    let entry = &saved.entry;
    let headline = match (&saved.meta, entry.shadowed_by) {
        (Err(error), _) => format!("[invalid: {error}]"),
        (Ok(_), Some(winner)) => format!("shadowed by {winner}"),
        (Ok(meta), None) => meta.description.clone(),
    };
    say!("{} ({})  {headline}", entry.name, entry.origin);
    if let Ok(meta) = &saved.meta {
        if entry.shadowed_by.is_some() {
            say!("  {}", meta.description);
        }
        say!("  args: {}", args_line(&meta.input_schema));
        if let Some(when) = &meta.when_to_use {
            say!("  when: {when}");
        }
        if meta.meta_name != entry.name {
            say!(
                "  note: meta.name is {:?}; it runs by its file name {:?}",
                meta.meta_name,
                entry.name
            );
        }
    }
    if let Some(path) = entry.path() {
        say!("  path: {}", path.display());
    }
}

/// The input schema's properties, the required ones marked: `model (required), question`.
fn args_line(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let words: Vec<String> = properties
        .into_iter()
        .flat_map(|properties| properties.keys())
        .map(|name| {
            if required.contains(&name.as_str()) {
                format!("{name} (required)")
            } else {
                name.clone()
            }
        })
        .collect();
    if words.is_empty() {
        "none".to_owned()
    } else {
        words.join(", ")
    }
}

async fn new(
    env: &EnvSnapshot,
    name: &str,
    place: &SavePlace,
    project: Option<&Path>,
) -> Result<u8> {
    crate::library::names::check(name).map_err(input_error)?;
    let engine = foreground_engine(env, false).await?;
    let target = target(&engine, place.user, || project_dir(project))?;
    let text = crate::library::template::starter(name);
    let path = write(target, name, text, place.force).await?;
    say!("{}", path.display());
    Ok(EXIT_COMPLETED)
}

async fn show(
    env: &EnvSnapshot,
    name: &str,
    copy: Option<&SavePlace>,
    project: Option<&Path>,
) -> Result<u8> {
    let engine = foreground_engine(env, false).await?;
    let project = project_dir(project)?;
    let lookup = (project.clone(), name.to_owned());
    let source = blocking(&engine, move |engine| {
        engine.saved_workflow(Some(&lookup.0), &lookup.1)
    })
    .await?
    .map_err(input_error)?;
    let Some(place) = copy else {
        say_partial!("{}", source.text);
        return Ok(EXIT_COMPLETED);
    };
    let target = target(&engine, place.user, || Ok(project.clone()))?;
    let path = write(target, name, source.text, place.force).await?;
    say!("{}", path.display());
    Ok(EXIT_COMPLETED)
}

async fn save_run(env: &EnvSnapshot, run_id: &str, name: &str, place: &SavePlace) -> Result<u8> {
    crate::library::names::check(name).map_err(input_error)?;
    let engine = foreground_engine(env, false).await?;
    let run_id = parse_run_id(run_id)?;
    let record = engine
        .load_reconciled(&run_id)
        .await
        .map_err(engine_error)?;
    if record.script_source == ScriptSource::Pack {
        return Err(input_error(format!(
            "run {run_id} executed a script of an encrypted workflows pack, whose text is not \
             stored; it cannot be saved"
        )));
    }
    let target = target(&engine, place.user, || Ok(record.project_dir.clone()))?;
    let path = write(target, name, record.script.clone(), place.force).await?;
    if !record.files.is_empty() {
        let files: Vec<&str> = record.files.keys().map(String::as_str).collect();
        note!(
            "warning: the companion files meta.files names were not copied ({}): a run of the \
             saved workflow reads them from its own project directory",
            files.join(", ")
        );
    }
    say!("{}", path.display());
    Ok(EXIT_COMPLETED)
}

/// The folder a workflow is written to: the user's with `user`, else the project's.
fn target(
    engine: &Engine,
    user: bool,
    project: impl FnOnce() -> Result<PathBuf>,
) -> Result<Target> {
    if !user {
        return Ok(Target::project(&project()?));
    }
    let folder = engine.workflow_folders(None).user.ok_or_else(|| {
        input_error(format!(
            "--user: there is no user folder for workflows: set HOME or {}",
            crate::env::WORKFLOWS_DIR
        ))
    })?;
    Target::user(&folder).map_err(input_error)
}

/// [`save`] on the blocking pool, its refusals as input errors naming `--force` where it
/// helps.
async fn write(target: Target, name: &str, text: String, force: bool) -> Result<PathBuf> {
    let name = name.to_owned();
    let written = tokio::task::spawn_blocking(move || save(&target, &name, &text, force)).await?;
    written.map_err(|error| match error {
        SaveError::Exists(path) => input_error(format!(
            "{} already exists; --force replaces it",
            path.display()
        )),
        SaveError::Refused(message) => input_error(message),
    })
}

/// Runs `work` with a clone of `engine` on the blocking pool: the engine's saved-workflow
/// doors read files.
async fn blocking<T: Send + 'static>(
    engine: &Engine,
    work: impl FnOnce(&Engine) -> T + Send + 'static,
) -> Result<T> {
    let engine = engine.clone();
    Ok(tokio::task::spawn_blocking(move || work(&engine)).await?)
}

#[cfg(test)]
mod tests {
    use super::args_line;
    use serde_json::json;

    #[test]
    fn the_args_line_marks_required_properties() {
        let schema = json!({
            "type": "object",
            "properties": {"model": {"type": "string"}, "question": {"type": "string"}},
            "required": ["model"],
        });
        assert_eq!(args_line(&schema), "model (required), question");
        assert_eq!(args_line(&json!({"type": "object"})), "none");
    }
}
