//! The `authoringSummary` of `action:"config"`: per probed route, the few facts a script
//! author pins, drawn from the full probe reports (not the capped catalogs beside it).
//!
//! Which models a backend's entry lists depends on its catalog:
//! - a small catalog (Claude's aliases, Codex's presets) is listed whole;
//! - on pi, the models pi's own `enabledModels` setting selects among the authenticated
//!   ones, with the patterns that select none (`unmatchedPatterns`);
//! - otherwise (OpenCode, pi without `enabledModels`) the direct models are listed and the
//!   models of the aggregator providers in [`AGGREGATORS`] become browse groups, a
//!   `provider/*` selector with a count. A browse selector is not a model: passed as
//!   `modelFilter` it lists that group's models, or, for a group too large to list, selectors
//!   one path segment deeper.
//!
//! The current model has its own field, whatever the list holds. An entry for an exact model
//! (`modelSpecs`) lists the options that model offers instead of the catalog. A failed probe
//! gets its error in its own entry and leaves the others whole.

use serde_json::{Map, Value, json};

use super::{Filter, Probed, choice_text, choices, is_model_option};
use crate::engine::runner::ProbeReport;

/// Providers that resell many vendors' models, as `(provider id, display name)`: their
/// models are browsed by group, never listed unasked. OpenCode and pi name providers after
/// models.dev, so `vercel` (OpenCode) and `vercel-ai-gateway` (pi) are the same gateway.
const AGGREGATORS: [(&str, &str); 8] = [
    ("openrouter", "OpenRouter"),
    ("opencode", "OpenCode Zen"),
    ("opencode-go", "OpenCode Go"),
    ("huggingface", "Hugging Face"),
    ("amazon-bedrock", "Amazon Bedrock"),
    ("vercel", "Vercel AI Gateway"),
    ("vercel-ai-gateway", "Vercel AI Gateway"),
    ("cloudflare-ai-gateway", "Cloudflare AI Gateway"),
];

/// A filtered browse group with at most this many models is listed model by model.
const EXPAND_LIMIT: usize = 24;

/// Models shown as a browse group's sample.
const SAMPLE: usize = 3;

/// Browse selectors named in a backend's text line; the structured summary has them all.
const TEXT_SELECTORS: usize = 12;

const HOW_TO_ROUTE: &str = "Set model on agent(), a phase, or meta.model: \"<backend>\" keeps that backend's current model; \"<backend>/<model>\" picks one of the models listed here, verbatim. A browse selector (\"openrouter/*\") is not a model and cannot be routed to: pass it as modelFilter to list its models. Mode and option values must be ones listed here; probe an exact model with modelSpecs to see the options it offers.";

/// The summary of every probed route, in request order.
pub(super) fn authoring_summary(probed: &[Probed], filter: Option<&Filter>) -> Value {
    let backends: Vec<Value> = probed
        .iter()
        .map(|probe| backend_summary(probe, filter))
        .collect();
    json!({"backends": backends, "howToRoute": HOW_TO_ROUTE})
}

/// A few lines per route for the text content.
pub(super) fn summary_text(summary: &Value) -> String {
    let mut lines =
        vec!["Backends (route with model:\"<backend>\" or \"<backend>/<model>\"):".to_owned()];
    for entry in summary["backends"].as_array().into_iter().flatten() {
        lines.push(entry_line(entry));
    }
    lines.push(
        "authoringSummary lists each backend's models, browse selectors, modes and options; harnesses holds the catalogs as probed.".to_owned(),
    );
    lines.join("\n")
}

fn backend_summary(probe: &Probed, filter: Option<&Filter>) -> Value {
    let report = &probe.report;
    let backend = report.backend.as_str();
    let route = match &probe.model {
        Some(model) => format!("{backend}/{model}"),
        None => backend.to_owned(),
    };
    let mut summary = Map::new();
    summary.insert("backend".into(), json!(backend));
    summary.insert("route".into(), json!(route));
    summary.insert("probed".into(), json!(report.probed));
    if let Some(error) = &report.error {
        let (redacted, _) = crate::engine::redact::redact_text(error);
        summary.insert("error".into(), json!(redacted));
    }
    if report.auth_required {
        summary.insert("authRequired".into(), json!(true));
    }
    if !report.probed {
        return Value::Object(summary);
    }
    if let Some(current) = &report.current_model {
        summary.insert("currentModel".into(), json!(current));
    }
    let modes: Vec<&str> = report
        .modes
        .iter()
        .filter_map(|mode| mode["id"].as_str())
        .collect();
    summary.insert("modes".into(), json!(modes));
    summary.insert("options".into(), Value::Array(other_options(report)));
    if probe.model.is_none() {
        summary.extend(model_view(report, filter));
    }
    Value::Object(summary)
}

/// Select options other than the model and the mode, with their values.
fn other_options(report: &ProbeReport) -> Vec<Value> {
    report
        .config_options
        .iter()
        .filter(|option| !is_model_option(option) && option["category"] != "mode")
        .map(|option| {
            let mut shown = json!({"id": option["id"], "currentValue": option["currentValue"]});
            if let Some(category) = option["category"].as_str() {
                shown["category"] = json!(category);
            }
            if option["options"].is_array() {
                let values: Vec<Value> = choices(option)
                    .into_iter()
                    .map(|(_, choice)| choice["value"].clone())
                    .collect();
                shown["values"] = Value::Array(values);
            } else if let Some(kind) = option["type"].as_str() {
                shown["type"] = json!(kind);
            }
            shown
        })
        .collect()
}

/// `models`, `browse` and where the list comes from (`modelsFrom`), plus pi's preference
/// facts.
fn model_view(report: &ProbeReport, filter: Option<&Filter>) -> Map<String, Value> {
    let Some(option) = report.config_options.iter().find(|o| is_model_option(o)) else {
        return Map::new();
    };
    let offered: Vec<(String, String)> = choices(option)
        .into_iter()
        .filter_map(|(_, choice)| {
            let value = choice["value"].as_str()?.to_owned();
            Some((value, choice_text(&choice)))
        })
        .collect();
    let mut view = Map::new();
    view.insert("offeredModels".into(), json!(offered.len()));
    let preferred = report.preferred_models.as_ref();
    if let Some(preferred) = preferred {
        if !preferred.patterns.is_empty() {
            view.insert("unmatchedPatterns".into(), json!(preferred.unmatched));
        }
        if let Some(source) = &preferred.source {
            view.insert("enabledModelsSource".into(), json!(source));
        }
        if let Some(error) = &preferred.error {
            view.insert("enabledModelsError".into(), json!(error));
        }
    }
    let (from, models, browse) = match (filter, preferred) {
        (None, Some(preferred)) if !preferred.models.is_empty() => {
            ("enabledModels", preferred.models.clone(), Vec::new())
        }
        (None, _) => {
            let values: Vec<&str> = offered.iter().map(|(value, _)| value.as_str()).collect();
            let (direct, groups) = split_direct(&values);
            let browse = groups.iter().map(|group| group.top_level()).collect();
            ("catalog", direct, browse)
        }
        (Some(filter), _) => {
            let matched: Vec<&str> = offered
                .iter()
                .filter(|(_, text)| filter.matches(text))
                .map(|(value, _)| value.as_str())
                .collect();
            view.insert(
                "modelFilter".into(),
                json!({"filter": filter.source, "matched": matched.len()}),
            );
            let (mut models, groups) = split_direct(&matched);
            let mut browse = Vec::new();
            for group in &groups {
                group.expand(&mut models, &mut browse);
            }
            ("modelFilter", models, browse)
        }
    };
    view.insert("modelsFrom".into(), json!(from));
    view.insert("models".into(), json!(models));
    view.insert("browse".into(), Value::Array(browse));
    view
}

/// One aggregator's models, in catalog order.
struct Group<'a> {
    provider: &'a str,
    name: &'static str,
    values: Vec<&'a str>,
}

impl Group<'_> {
    /// The unfiltered view: the whole provider as one selector.
    fn top_level(&self) -> Value {
        selector(
            &format!("{}/*", self.provider),
            Some(self.name),
            &self.values,
        )
    }

    /// The filtered view: a small group is listed; a large one becomes selectors one path
    /// segment deeper, or is listed when its ids have no deeper segment.
    fn expand(&self, models: &mut Vec<String>, browse: &mut Vec<Value>) {
        if self.values.len() <= EXPAND_LIMIT {
            models.extend(self.values.iter().map(|value| (*value).to_owned()));
            return;
        }
        let mut deeper: Vec<(String, Vec<&str>)> = Vec::new();
        for value in &self.values {
            let rest = &value[self.provider.len() + 1..];
            match rest.split_once('/') {
                Some((vendor, _)) => {
                    let key = format!("{}/{vendor}/*", self.provider);
                    match deeper.iter_mut().find(|(known, _)| *known == key) {
                        Some((_, members)) => members.push(value),
                        None => deeper.push((key, vec![value])),
                    }
                }
                None => models.push((*value).to_owned()),
            }
        }
        browse.extend(
            deeper
                .iter()
                .map(|(key, members)| selector(key, None, members)),
        );
    }
}

fn selector(selector: &str, name: Option<&str>, values: &[&str]) -> Value {
    let mut group = json!({
        "selector": selector,
        "count": values.len(),
        "sample": values.iter().take(SAMPLE).collect::<Vec<_>>(),
    });
    if let Some(name) = name {
        group["name"] = json!(name);
    }
    group
}

/// Direct models (as owned strings, in catalog order) and the aggregator groups, in the
/// order each first appears.
fn split_direct<'a>(values: &[&'a str]) -> (Vec<String>, Vec<Group<'a>>) {
    let mut direct = Vec::new();
    let mut groups: Vec<Group<'a>> = Vec::new();
    for value in values {
        let Some((provider, name)) = aggregator_of(value) else {
            direct.push((*value).to_owned());
            continue;
        };
        match groups.iter_mut().find(|group| group.provider == provider) {
            Some(group) => group.values.push(value),
            None => groups.push(Group {
                provider,
                name,
                values: vec![value],
            }),
        }
    }
    (direct, groups)
}

/// The aggregator a `provider/model` value belongs to, with the provider as the value
/// spells it.
fn aggregator_of(value: &str) -> Option<(&str, &'static str)> {
    let (provider, _) = value.split_once('/')?;
    AGGREGATORS
        .iter()
        .find(|(id, _)| id.eq_ignore_ascii_case(provider))
        .map(|(_, name)| (provider, *name))
}

fn entry_line(entry: &Value) -> String {
    let route = entry["route"].as_str().unwrap_or_default();
    if entry["probed"] != true {
        let error = entry["error"].as_str().unwrap_or("probe failed");
        return format!("- {route}: not usable: {error}");
    }
    let mut parts = vec![match entry["currentModel"].as_str() {
        Some(current) => format!("ready, current model {current}"),
        None => "ready".to_owned(),
    }];
    if let Some(models) = entry["models"].as_array() {
        let from = match entry["modelsFrom"].as_str() {
            Some("enabledModels") => "from pi's enabledModels",
            Some("modelFilter") => "matching modelFilter",
            _ => "listed",
        };
        parts.push(format!("{} models {from}", models.len()));
    }
    let browse = entry["browse"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut selectors: Vec<String> = browse
        .iter()
        .take(TEXT_SELECTORS)
        .map(|group| {
            format!(
                "{} ({})",
                group["selector"].as_str().unwrap_or_default(),
                group["count"]
            )
        })
        .collect();
    if browse.len() > TEXT_SELECTORS {
        selectors.push(format!("{} more", browse.len() - TEXT_SELECTORS));
    }
    if !selectors.is_empty() {
        parts.push(format!("browse {}", selectors.join(", ")));
    }
    if let Some(unmatched) = entry["unmatchedPatterns"]
        .as_array()
        .filter(|u| !u.is_empty())
    {
        let patterns: Vec<&str> = unmatched.iter().filter_map(Value::as_str).collect();
        parts.push(format!(
            "enabledModels patterns matching nothing: {}",
            patterns.join(", ")
        ));
    }
    let modes: Vec<&str> = entry["modes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !modes.is_empty() {
        parts.push(format!("modes {}", modes.join(", ")));
    }
    format!("- {route}: {}", parts.join("; "))
}
