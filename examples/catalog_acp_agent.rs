//! An ACP agent that replays one recorded adapter catalog (`tests/fixtures/catalogs/*.json`,
//! the path its only argument), so the tests can run `action:"config"` against what
//! claude-agent-acp, codex-acp, opencode and pi-acp really answer without installing them.
//!
//! `initialize` and `session/new` get the recorded answers; `session/set_config_option` gets
//! the recorded answer when it asks for the recorded choice, and an invalid-params error
//! otherwise, as an adapter refuses a value it does not offer. `session/close` and
//! `authenticate` succeed; notifications are ignored and every other method is unknown.
//! The agent ends at stdin EOF. Only std and serde_json.

use std::io::{self, BufRead, Write};

use serde_json::{Value, json};

const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("catalog-acp-agent: usage: catalog_acp_agent <recorded catalog .json>");
        std::process::exit(2);
    };
    let fixture: Value = match std::fs::read_to_string(&path)
        .map_err(|error| error.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|error| error.to_string()))
    {
        Ok(fixture) => fixture,
        Err(error) => {
            eprintln!("catalog-acp-agent: cannot read the catalog {path}: {error}");
            std::process::exit(2);
        }
    };
    let stdout = io::stdout();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = request.get("id").cloned() else {
            continue;
        };
        let method = request["method"].as_str().unwrap_or_default();
        let reply = match answer(&fixture, method, &request["params"]) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        let mut out = stdout.lock();
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}

fn answer(fixture: &Value, method: &str, params: &Value) -> Result<Value, (i64, String)> {
    match method {
        "initialize" => Ok(fixture["initialize"].clone()),
        "authenticate" | "session/close" => Ok(json!({})),
        "session/new" => Ok(fixture["session/new"].clone()),
        "session/set_config_option" => {
            let recorded = &fixture["session/set_config_option"];
            let asked = (&params["configId"], &params["value"]);
            if asked
                == (
                    &recorded["params"]["configId"],
                    &recorded["params"]["value"],
                )
            {
                Ok(recorded["result"].clone())
            } else {
                Err((
                    INVALID_PARAMS,
                    format!("no recorded answer for {} = {}", asked.0, asked.1),
                ))
            }
        }
        _ => Err((METHOD_NOT_FOUND, format!("method not found: {method}"))),
    }
}
