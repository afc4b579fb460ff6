//! `agentprism config`: the `workflow` tool's `config` action from a shell. The same
//! zero-token probes (a session opened, nothing prompted) of the backends a script can route
//! to, run by the same code (`crate::tools::probe_backends`); printed as a summary per
//! backend, or with `--json` as the whole document the action answers with.
//!
//! Exit codes: 0 every backend asked about was probed, 1 at least one could not be (unknown,
//! did not start, needs credentials, did not answer in time; the document is printed all the
//! same), 2 rejected (a malformed flag, a project folder that is not there).

use anyhow::{Result, anyhow};
use serde_json::Value;

use super::args::ConfigArgs;
use super::input::{guarded, input_error, project_dir};
use super::{EXIT_COMPLETED, EXIT_FAILED};
use crate::app::foreground_engine;
use crate::env::EnvSnapshot;
use crate::tools::{ConfigInput, probe_backends};

pub(super) async fn config(env: &EnvSnapshot, args: ConfigArgs) -> Result<u8> {
    guarded(async {
        let input = config_input(&args)?;
        let engine = foreground_engine(env, false).await?;
        let answer = probe_backends(&engine, input)
            .await
            .map_err(|error| anyhow!("probing the backends: {error}"))?;
        engine
            .runner()
            .shutdown(std::time::Duration::from_secs(5))
            .await;
        if answer.get("isError") == Some(&Value::Bool(true)) {
            return Err(input_error(first_text(&answer)));
        }
        let document = answer.get("structuredContent").cloned().unwrap_or_default();
        if args.json {
            say!("{}", serde_json::to_string_pretty(&document)?);
        } else {
            print_summary(&document);
        }
        let backends = document
            .pointer("/authoringSummary/backends")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let unusable = backends
            .iter()
            .filter(|backend| backend.get("probed") != Some(&Value::Bool(true)))
            .count();
        if unusable > 0 {
            note!(
                "{unusable} of {} backends could not be probed",
                backends.len()
            );
            return Ok(EXIT_FAILED);
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// The flags as the action's request, checked as the action checks its fields.
fn config_input(args: &ConfigArgs) -> Result<ConfigInput> {
    if let Some(name) = args.harnesses.iter().find(|name| name.trim().is_empty()) {
        return Err(input_error(format!(
            "--harness {name:?} must name a backend"
        )));
    }
    for spec in &args.model_specs {
        match spec.split_once('/') {
            Some((backend, model)) if !backend.is_empty() && !model.is_empty() => {}
            _ => {
                return Err(input_error(format!(
                    "--model-spec {spec:?} must be a BACKEND/MODEL route, such as codex/gpt-5"
                )));
            }
        }
    }
    if args.model_filter.as_deref() == Some("") {
        return Err(input_error("--model-filter must not be empty"));
    }
    let listed = |names: &Vec<String>| (!names.is_empty()).then(|| names.clone());
    Ok(ConfigInput {
        project_dir: project_dir(args.project_dir.as_deref())?,
        harnesses: listed(&args.harnesses),
        model_specs: listed(&args.model_specs),
        model_filter: args.model_filter.clone(),
    })
}

/// One block per backend: whether it is ready, how to route to it, and its modes and models.
fn print_summary(document: &Value) {
    let summary = &document["authoringSummary"];
    for backend in summary["backends"].as_array().into_iter().flatten() {
        let name = backend["backend"].as_str().unwrap_or("-");
        let route = backend["route"].as_str().unwrap_or(name);
        if backend["probed"] != true {
            let error = backend["error"].as_str().unwrap_or("the probe failed");
            say!("{route}: not usable: {error}");
            continue;
        }
        match backend["currentModel"].as_str() {
            Some(model) => say!("{route}: ready, default model {model}"),
            None => say!("{route}: ready"),
        }
        let modes = words(&backend["modes"]);
        if !modes.is_empty() {
            say!("  modes: {}", modes.join(", "));
        }
        let models = words(&backend["models"]);
        if !models.is_empty() {
            say!("  models: {}", models.join(", "));
        }
        let groups: Vec<String> = backend["modelGroups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|group| {
                format!(
                    "{} ({})",
                    group["name"].as_str().unwrap_or("-"),
                    group["count"]
                )
            })
            .collect();
        if !groups.is_empty() {
            say!(
                "  models by group: {} (narrow them with --model-filter)",
                groups.join(", ")
            );
        }
    }
    say!(
        "Route a call with model: \"<backend>\" (its default model) or \"<backend>/<model>\"; --json prints every option."
    );
}

/// The strings of a JSON array.
fn words(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The first text content of a tool answer.
fn first_text(answer: &Value) -> String {
    answer
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or("the config request was refused")
        .to_owned()
}
