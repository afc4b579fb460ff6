//! One prompt per saved workflow: its name, its `meta` (description and `whenToUse`), one
//! argument per top-level property of its input schema, and a text that hands the model the
//! exact `workflow` tool call that runs it. A workflow that fails its static checks is still
//! listed, marked `[invalid: …]`, and its get says why instead of leading to a run.

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use super::{author, unknown};
use crate::engine::manager::{SavedMeta, SavedWorkflow};
use crate::engine::{Engine, schema};
use crate::mcp::handler::{McpError, McpResult};

/// The prompt entries of the saved workflows that win under their names.
pub(super) async fn definitions(
    engine: &Engine,
    project: Option<PathBuf>,
) -> McpResult<Vec<Value>> {
    Ok(winners(engine, project)
        .await?
        .iter()
        .map(definition)
        .collect())
}

/// The messages of the saved workflow `name`'s prompt, with `arguments` filled in.
pub(super) async fn get(
    engine: &Engine,
    project: Option<PathBuf>,
    name: &str,
    arguments: &Value,
) -> McpResult<Value> {
    let winners = winners(engine, project.clone()).await?;
    let Some(saved) = winners.iter().find(|saved| saved.entry.name == name) else {
        let names: Vec<String> = winners
            .iter()
            .map(|saved| saved.entry.name.clone())
            .collect();
        return Err(unknown(name, &names));
    };
    let meta = saved.meta.as_ref().map_err(|error| {
        McpError::invalid_params(format!("the workflow {name:?} cannot run: {error}"))
    })?;
    let args = assemble(name, &meta.input_schema, arguments)?;
    let engine = engine.clone();
    let entry = saved.entry.clone();
    let script_path = tokio::task::spawn_blocking(move || engine.saved_workflow_path(&entry))
        .await
        .map_err(|error| McpError::internal(error.to_string()))?
        .map_err(McpError::internal)?;
    let text = instructions(name, meta, project.as_deref(), &script_path, args);
    Ok(json!({
        "description": meta.description,
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }))
}

/// The listed workflows that run under their names: no shadowed entry, no file whose name
/// breaks the rule, and not the authoring prompt's name.
async fn winners(engine: &Engine, project: Option<PathBuf>) -> McpResult<Vec<SavedWorkflow>> {
    let engine = engine.clone();
    let all = tokio::task::spawn_blocking(move || engine.saved_workflows(project.as_deref()))
        .await
        .map_err(|error| McpError::internal(error.to_string()))?
        .map_err(McpError::internal)?;
    Ok(all
        .into_iter()
        .filter(|saved| {
            saved.entry.shadowed_by.is_none()
                && saved.entry.problem.is_none()
                && saved.entry.name != author::NAME
        })
        .collect())
}

fn definition(saved: &SavedWorkflow) -> Value {
    let entry = &saved.entry;
    let origin = json!({"origin": entry.origin.as_str(), "path": entry.path()});
    match &saved.meta {
        Ok(meta) => {
            let mut description = meta.description.clone();
            if let Some(when) = &meta.when_to_use {
                description.push_str("\n\nWhen to use: ");
                description.push_str(when);
            }
            json!({
                "name": entry.name,
                "title": meta.meta_name,
                "description": description,
                "arguments": arguments(&meta.input_schema),
                "_meta": {"agentprism/workflow": origin},
            })
        }
        Err(error) => json!({
            "name": entry.name,
            "description": format!("[invalid: {error}]"),
            "arguments": [],
            "_meta": {"agentprism/workflow": origin},
        }),
    }
}

/// One argument per top-level property; a schema without properties takes its whole input
/// as one optional `args` argument of JSON text.
fn arguments(input_schema: &Value) -> Vec<Value> {
    let Some(properties) = input_schema["properties"].as_object() else {
        return vec![json!({
            "name": "args",
            "description": "The workflow's input as a JSON object.",
            "required": false,
        })];
    };
    let required: Vec<&str> = input_schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(name, property)| {
            let mut description = property["description"].as_str().unwrap_or("").to_owned();
            if let Some(kind) = property["type"].as_str().filter(|kind| *kind != "string") {
                description = format!("{description} (JSON {kind})").trim().to_owned();
            }
            json!({"name": name, "description": description, "required": required.contains(&name.as_str())})
        })
        .collect()
}

/// The workflow's `args` from the prompt's string arguments: a string property keeps the text
/// as given, any other is read as JSON (and kept as text when it is not JSON, so the schema
/// check names it). The result is checked against the input schema.
fn assemble(name: &str, input_schema: &Value, arguments: &Value) -> McpResult<Value> {
    let given = match arguments {
        Value::Null => Map::new(),
        Value::Object(map) => map.clone(),
        _ => {
            return Err(McpError::invalid_params(format!(
                "prompt {name}: arguments must be an object"
            )));
        }
    };
    let properties = input_schema["properties"].as_object();
    let mut args = Map::new();
    for (key, value) in given {
        let Value::String(text) = value else {
            return Err(McpError::invalid_params(format!(
                "prompt {name}: argument {key} must be a string (the prompt protocol's arguments are text)"
            )));
        };
        let Some(properties) = properties else {
            if key != "args" {
                return Err(McpError::invalid_params(format!(
                    "prompt {name} has one argument, args; got {key:?}"
                )));
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(object)) => args = object,
                _ => {
                    return Err(McpError::invalid_params(format!(
                        "prompt {name}: argument args must be a JSON object"
                    )));
                }
            }
            continue;
        };
        let Some(property) = properties.get(&key) else {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            return Err(McpError::invalid_params(format!(
                "prompt {name} has no argument {key:?}; its arguments: {}",
                known.join(", ")
            )));
        };
        let value = if property["type"] == "string" {
            Value::String(text)
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        args.insert(key, value);
    }
    let args = Value::Object(args);
    schema::validate(input_schema, &args).map_err(|error| {
        McpError::invalid_params(format!(
            "prompt {name}: the arguments do not fit the workflow's input schema: {error}"
        ))
    })?;
    Ok(args)
}

/// The message: which workflow, when it fits, and the exact call that runs it.
fn instructions(
    name: &str,
    meta: &SavedMeta,
    project: Option<&std::path::Path>,
    script_path: &std::path::Path,
    args: Value,
) -> String {
    let project_dir = project.map_or_else(
        || Value::String("<the absolute path of the workspace you are working in>".into()),
        |dir| json!(dir),
    );
    let call = json!({
        "action": "run",
        "projectDir": project_dir,
        "scriptPath": script_path,
        "args": args,
    });
    let mut text = format!("Run the saved workflow \"{name}\": {}\n", meta.description);
    if let Some(when) = &meta.when_to_use {
        text.push_str(&format!("When to use it: {when}\n"));
    }
    if project.is_none() {
        text.push_str(
            "Replace projectDir below with the absolute path of the workspace you are working in.\n",
        );
    }
    text.push_str(&format!(
        "\nCall the workflow tool with exactly these arguments:\n\n```json\n{}\n```\n\n",
        serde_json::to_string_pretty(&call).unwrap_or_default()
    ));
    text.push_str(
        "Then follow the run with action \"status\" and read its output with action \"result\". \
If the run is refused because it would start more agent calls than allowed without confirmation, \
tell the user how many it would start and, if they agree, repeat the call with \"maxAgents\" set to the number the refusal names.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "model": {"type": "string", "description": "route"},
            "count": {"type": "integer"},
            "areas": {"type": "array", "items": {"type": "string"}},
        }, "required": ["model"]})
    }

    #[test]
    fn arguments_come_from_the_schema_and_are_read_by_type() {
        let listed = arguments(&schema());
        assert_eq!(
            listed[0],
            json!({"name": "model", "description": "route", "required": true})
        );
        assert_eq!(
            listed[2],
            json!({"name": "areas", "description": "(JSON array)", "required": false})
        );
        let args = assemble(
            "w",
            &schema(),
            &json!({"model": "7", "count": "3", "areas": "[\"src\"]"}),
        )
        .unwrap();
        assert_eq!(args, json!({"model": "7", "count": 3, "areas": ["src"]}));
        let bad = assemble("w", &schema(), &json!({"model": "m", "count": "three"})).unwrap_err();
        assert!(bad.message.contains("count"), "{}", bad.message);
        let missing = assemble("w", &schema(), &json!({})).unwrap_err();
        assert!(missing.message.contains("model"), "{}", missing.message);
        let unknown = assemble("w", &schema(), &json!({"other": "x"})).unwrap_err();
        assert!(unknown.message.contains("\"other\""), "{}", unknown.message);
    }

    #[test]
    fn a_schema_without_properties_takes_json_args() {
        let open = json!({"type": "object"});
        assert_eq!(arguments(&open)[0]["name"], "args");
        assert_eq!(
            assemble("w", &open, &json!({"args": "{\"a\":1}"})).unwrap(),
            json!({"a": 1})
        );
        assert!(assemble("w", &open, &json!({"args": "[1]"})).is_err());
    }
}
