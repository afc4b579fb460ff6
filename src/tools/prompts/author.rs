//! The `author-workflow` prompt: a compact, user-invoked start for writing a workflow. It
//! frames the task and points at the skill and at `action:"config"`; it never embeds the
//! skill, so the host's own skill-loading (and approval) path stays the way guidance enters.

use serde_json::{Value, json};

use crate::mcp::handler::{McpError, McpResult};

use crate::tools::skills::SKILL_URI;

pub(super) const NAME: &str = "author-workflow";

pub(super) fn definition() -> Value {
    json!({
        "name": NAME,
        "title": "Author a workflow",
        "description": "Write and run a durable multi-agent workflow script with the workflow tool.",
        "arguments": [{
            "name": "task",
            "description": "What the workflow should accomplish.",
            "required": false
        }]
    })
}

pub(super) fn get(name: &str, arguments: &Value) -> McpResult<Value> {
    if name != NAME {
        return Err(McpError::invalid_params(format!(
            "unknown prompt {name:?}; this server has {NAME:?}"
        )));
    }
    let task = match arguments {
        Value::Null => None,
        Value::Object(map) => {
            if let Some(other) = map.keys().find(|key| *key != "task") {
                return Err(McpError::invalid_params(format!(
                    "prompt {NAME} has one argument, task; got {other:?}"
                )));
            }
            match map.get("task") {
                None | Some(Value::Null) => None,
                Some(Value::String(task)) => Some(task.trim().to_owned()).filter(|t| !t.is_empty()),
                Some(_) => {
                    return Err(McpError::invalid_params(format!(
                        "prompt {NAME}: argument task must be a string"
                    )));
                }
            }
        }
        _ => {
            return Err(McpError::invalid_params(format!(
                "prompt {NAME}: arguments must be an object"
            )));
        }
    };
    let framing = match &task {
        Some(task) => format!("Write a workflow script for this task:\n\n{task}\n\n"),
        None => {
            "Help me write a workflow script. Ask what it should accomplish if that is unclear.\n\n"
                .to_owned()
        }
    };
    let text = format!(
        "{framing}Activate the skill {SKILL_URI} through your skill-loading path and read only the references you need. \
Then call the workflow tool with action \"config\" to discover the backends, models and modes that exist here, \
and route every agent() call to one of them (a backend name alone keeps its default model). \
Start the script with action \"run\": preparation validates it (static checks, a mocked dry run, routing probes) before anything executes, \
and errors name the line or call to fix. Follow the run with action \"status\" and read the output with action \"result\"."
    );
    Ok(json!({
        "description": "Author and run a workflow script",
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}]
    }))
}
