//! The Agent Card served at `/.well-known/agent-card.json`: who this server is and one skill
//! per workflow, readable by A2A 1.0 and 0.3 clients alike.
//!
//! The 1.0 form lists the JSON-RPC interface twice on the one endpoint (`/a2a`), as
//! `protocolVersion` 1.0 (first: the preferred one) and 0.3; the 0.3 form's top-level `url`,
//! `preferredTransport`, `protocolVersion` and `security` are there too, and 1.0 readers
//! ignore them. A skill has no field for an input schema in either version, so the schemas
//! travel in a capability extension ([`INPUT_SCHEMA_EXTENSION`]) whose `params` map each
//! skill id to its workflow's `inputSchema`. Streaming is offered (`SendStreamingMessage`,
//! `SubscribeToTask` and their 0.3 names); push notifications are not: a client without a
//! stream polls `GetTask`/`tasks/get`.

use serde_json::{Map, Value, json};

use crate::serve::folder::Folder;

/// Where the card is served.
pub(crate) const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The JSON-RPC endpoint, behind the token.
pub(crate) const ENDPOINT_PATH: &str = "/a2a";
/// The extension whose `params` hold each skill's input schema.
pub(crate) const INPUT_SCHEMA_EXTENSION: &str = "urn:agentprism:a2a:skill-input-schemas:v1";

/// The card for `folder`'s workflows, with the endpoint at `base_url` (`http://host:port`);
/// `bearer` declares the token scheme the endpoint requires.
/// The card; `push_notifications` when the operator allowed webhooks.
pub(crate) fn card(
    folder: &Folder,
    name: &str,
    base_url: &str,
    bearer: bool,
    push_notifications: bool,
) -> Value {
    let url = format!("{}{ENDPOINT_PATH}", base_url.trim_end_matches('/'));
    let skills: Vec<Value> = folder
        .workflows
        .values()
        .map(|workflow| {
            json!({
                "id": workflow.name,
                "name": workflow.name,
                "description": workflow.description,
                "tags": ["workflow"],
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
            })
        })
        .collect();
    let schemas: Map<String, Value> = folder
        .workflows
        .values()
        .map(|workflow| (workflow.name.clone(), workflow.input_schema.clone()))
        .collect();
    let mut card = json!({
        "name": name,
        "description": "Workflows served by agentprism: one skill per workflow. Send a message \
                        whose metadata is {\"skill\": <skill id>, \"input\": <the workflow's \
                        arguments>}; the task is the run, its artifact the result JSON.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "capabilities": {
            "streaming": true,
            "pushNotifications": push_notifications,
            "extensions": [{
                "uri": INPUT_SCHEMA_EXTENSION,
                "description": "params maps each skill id to the JSON Schema its \
                                metadata.input must satisfy",
                "required": false,
                "params": schemas,
            }],
        },
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
        // The 0.3 card's own fields; 1.0 readers ignore them.
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
    });
    if bearer {
        // One object both versions read: 0.3's `type`/`scheme`, 1.0's wrapper.
        card["securitySchemes"] = json!({"bearer": {
            "type": "http",
            "scheme": "bearer",
            "httpAuthSecurityScheme": {"scheme": "bearer"},
        }});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
        card["security"] = json!([{"bearer": []}]);
    }
    card
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::serve::folder::Workflow;

    fn folder() -> Folder {
        let workflow = Workflow {
            name: "echo".into(),
            description: "Return the text".into(),
            input_schema: json!({"type": "object", "required": ["text"]}),
            path: PathBuf::from("/srv/echo.js"),
            relative: "echo.js".into(),
            meta: json!({}),
            phases: Vec::new(),
        };
        Folder {
            root: PathBuf::from("/srv"),
            workflows: BTreeMap::from([("echo".to_owned(), workflow)]),
        }
    }

    #[test]
    fn one_skill_per_workflow_and_the_endpoint_in_both_versions() {
        let card = card(
            &folder(),
            "agentprism-serve",
            "http://127.0.0.1:8080/",
            false,
            false,
        );
        assert_eq!(card["skills"][0]["id"], "echo");
        assert_eq!(card["skills"][0]["description"], "Return the text");
        let interfaces = card["supportedInterfaces"].as_array().unwrap();
        assert_eq!(interfaces[0]["protocolVersion"], "1.0");
        assert_eq!(interfaces[1]["protocolVersion"], "0.3");
        assert_eq!(interfaces[0]["url"], "http://127.0.0.1:8080/a2a");
        assert_eq!(card["url"], "http://127.0.0.1:8080/a2a");
        assert_eq!(
            card["capabilities"]["extensions"][0]["params"]["echo"]["required"],
            json!(["text"])
        );
        assert_eq!(card["capabilities"]["streaming"], true);
        assert_eq!(card["capabilities"]["pushNotifications"], false);
        assert!(card.get("securitySchemes").is_none());
        assert!(!card.to_string().contains("/srv"), "no server path leaks");
    }

    #[test]
    fn a_token_is_declared_as_a_bearer_scheme() {
        let card = card(&folder(), "n", "http://h", true, false);
        assert_eq!(card["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(card["security"], json!([{"bearer": []}]));
        assert!(card["securityRequirements"][0]["schemes"]["bearer"].is_object());
    }
}
