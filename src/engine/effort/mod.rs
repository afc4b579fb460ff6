//! `agent()`'s `effort`: one portable name for how hard an agent reasons (Claude Code's
//! `low`, `medium`, `high`, `xhigh`, `max`), set on each backend through the reasoning-level
//! config option it advertises for the session. ACP tags that option with the category
//! `thought_level`; adapters built before categories existed are recognised by the option ids
//! the built-in adapters use. A level is set only when the option offers a value of exactly
//! that name: a backend or model without such an option, or without that level, is refused
//! with an error naming `effort`, the backend and what it offers, never given a neighbouring
//! level. The ACP session applies it after `session/new` (and after the model, which decides
//! the levels); preparation checks each call against its backend's probe the same way.

use serde_json::Value;

/// A portable reasoning level, in ascending order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effort {
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

/// Where an effort goes on one backend: the config option and the value to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffortSetting {
    pub config_id: String,
    pub value: String,
}

/// The ACP category of a reasoning-level config option.
pub const CATEGORY: &str = "thought_level";

/// Ids of reasoning-level options that come without a category: those the built-in
/// adapters give theirs (claude-agent-acp and opencode `effort`, codex-acp and qwen-code
/// `reasoning_effort`, pi-acp `thought_level`).
const KNOWN_IDS: [&str; 3] = ["effort", "reasoning_effort", "thought_level"];

impl Effort {
    pub const ALL: [Effort; 5] = [
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::Xhigh,
        Effort::Max,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }

    pub fn parse(text: &str) -> Option<Effort> {
        Effort::ALL.into_iter().find(|effort| effort.name() == text)
    }

    /// `"low", "medium", "high", "xhigh", "max"`, for error messages.
    pub fn listed() -> String {
        Effort::ALL
            .iter()
            .map(|effort| format!("{:?}", effort.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The option and value that set `effort` among a session's advertised `configOptions`
/// (ACP `SessionConfigOption` objects). `backend` names the backend (and model) in errors.
pub fn setting(options: &[Value], effort: Effort, backend: &str) -> Result<EffortSetting, String> {
    let Some(option) = reasoning_option(options) else {
        return Err(format!(
            "agent() option effort {:?} cannot be set: backend {backend} advertises no \
             reasoning-level config option (category {CATEGORY:?}); leave effort out for this \
             backend",
            effort.name()
        ));
    };
    let config_id = option
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let values = option_values(option);
    match values
        .iter()
        .find(|value| value.eq_ignore_ascii_case(effort.name()))
    {
        Some(value) => Ok(EffortSetting {
            config_id,
            value: (*value).to_owned(),
        }),
        None => Err(format!(
            "agent() option effort {:?} cannot be set: backend {backend}'s reasoning option \
             {config_id:?} offers {}; choose one of those levels or leave effort out",
            effort.name(),
            if values.is_empty() {
                "no values".to_owned()
            } else {
                values.join(", ")
            }
        )),
    }
}

/// [`setting`] for one call on `backend`'s session, which is on `model` when known, with the
/// call's own `configOptions`: setting the same option there too is refused, since the two
/// would race for it.
pub fn call_setting(
    options: &[Value],
    effort: Effort,
    config_options: &[(String, Value)],
    backend: &str,
    model: Option<&str>,
) -> Result<EffortSetting, String> {
    let who = match model {
        Some(model) => format!("{backend} (model {model})"),
        None => backend.to_owned(),
    };
    let setting = setting(options, effort, &who)?;
    if config_options
        .iter()
        .any(|(id, _)| *id == setting.config_id)
    {
        return Err(format!(
            "agent() options effort and configOptions.{} both set backend {who}'s reasoning \
             level; give only one of them",
            setting.config_id
        ));
    }
    Ok(setting)
}

/// The advertised reasoning-level option: the first of category `thought_level`, else the
/// first uncategorised one with a known id.
fn reasoning_option(options: &[Value]) -> Option<&Value> {
    fn category(option: &Value) -> Option<&str> {
        option.get("category").and_then(Value::as_str)
    }
    options
        .iter()
        .find(|option| category(option) == Some(CATEGORY))
        .or_else(|| {
            options.iter().find(|option| {
                category(option).is_none()
                    && option
                        .get("id")
                        .and_then(Value::as_str)
                        .is_some_and(|id| KNOWN_IDS.contains(&id))
            })
        })
}

/// A select option's values, its groups' values flattened in order.
fn option_values(option: &Value) -> Vec<&str> {
    let items = option.get("options").and_then(Value::as_array);
    items
        .into_iter()
        .flatten()
        .flat_map(|item| match item.get("options").and_then(Value::as_array) {
            Some(group) => group.iter().collect::<Vec<_>>(),
            None => vec![item],
        })
        .filter_map(|item| item.get("value").and_then(Value::as_str))
        .collect()
}

#[cfg(test)]
mod tests;
