//! What a probe reports about the session it opened, in one shape whatever the adapter: the
//! raw config options and current model; the modes, which are the ACP modes or, from an
//! agent that offers none (opencode sends its `build`/`plan` agents only as a config option
//! of category `mode`), that option's choices under the ACP mode keys; and on pi-acp the
//! models pi's own `enabledModels` setting prefers (`pi_scope`), which pi-acp never sends.

use std::path::Path;

use serde_json::{Map, Value};

use crate::acp::pi_scope::{self, Offered};
use crate::acp::session::SessionInfo;
use crate::engine::runner::ProbeReport;

/// Fills `report` from an opened session. `pi_agent_dir` is set when the agent is pi-acp;
/// `cwd` is the session's folder, where pi looks for project settings.
pub(crate) async fn record_session(
    report: &mut ProbeReport,
    info: SessionInfo,
    pi_agent_dir: Option<&Path>,
    cwd: &Path,
) {
    report.probed = true;
    report.modes = modes(&info);
    if let Some(agent_dir) = pi_agent_dir {
        let offered = offered_models(&info.config_options);
        report.preferred_models = pi_scope::preferred_models(agent_dir, cwd, &offered).await;
    }
    report.current_model = info.current_model;
    report.config_options = info.config_options;
}

/// The ACP modes, else the choices of the `category:"mode"` option as
/// `{id, name, description?, _meta?}`.
pub(crate) fn modes(info: &SessionInfo) -> Vec<Value> {
    if !info.modes.is_empty() {
        return info.modes.clone();
    }
    let Some(option) = info
        .config_options
        .iter()
        .find(|option| option.get("category").and_then(Value::as_str) == Some("mode"))
    else {
        return Vec::new();
    };
    choices(option)
        .into_iter()
        .filter_map(|choice| {
            let mut mode = Map::new();
            mode.insert("id".into(), choice.get("value")?.clone());
            for key in ["name", "description", "_meta"] {
                if let Some(value) = choice.get(key) {
                    mode.insert(key.into(), value.clone());
                }
            }
            Some(Value::Object(mode))
        })
        .collect()
}

/// The choices of the `category:"model"` option that name a provider (`provider/id`).
fn offered_models(config_options: &[Value]) -> Vec<Offered> {
    config_options
        .iter()
        .filter(|option| option.get("category").and_then(Value::as_str) == Some("model"))
        .flat_map(choices)
        .filter_map(|choice| {
            let value = choice.get("value")?.as_str()?;
            let name = choice.get("name").and_then(Value::as_str).unwrap_or(value);
            Offered::new(value, name)
        })
        .collect()
}

/// A select's choices, flat: ACP allows `[{value, name}]` or groups `[{group, name, options}]`.
fn choices(option: &Value) -> Vec<&Value> {
    let mut flat = Vec::new();
    for item in option
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("options").and_then(Value::as_array) {
            Some(group) => flat.extend(group),
            None => flat.push(item),
        }
    }
    flat
}

/// The session facts a probe gets from an agent's `session/new` answer and, when it chose a
/// model, its `session/set_config_option` answer: the same functions the probe runs on the
/// live answers, for tests that replay recorded ones.
#[cfg(test)]
pub(crate) fn recorded_session(
    new_session: &Value,
    chosen_model: Option<(&str, &Value)>,
) -> SessionInfo {
    let mut info = crate::acp::session::session_info(&mut new_session.clone());
    if let Some((model, answer)) = chosen_model {
        crate::acp::session::refresh_options(&mut info, answer);
        info.current_model = Some(model.to_owned());
    }
    info
}
