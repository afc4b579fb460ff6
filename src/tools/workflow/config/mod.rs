//! `action:"config"`: live discovery of the backends a script can route to, by zero-token
//! probes (a session opened, nothing prompted), so an author pins only models, modes and
//! options that exist here. The answer carries each catalog as probed (`harnesses`) and the
//! compact `authoringSummary` built from the same reports (`summary`).
//!
//! Catalogs stay bounded: a select option with more than [`MAX_CHOICES`] choices is replaced
//! by a summary grouped by provider prefix, and `modelFilter` narrows model lists so a large
//! aggregator catalog can be browsed a group at a time. `modelFilter` is a case-insensitive
//! substring in which `*` matches any run of characters, or `/pattern/` with a small regular
//! expression subset (`.`, `*`, `^`, `$`, `\` escapes): enough to browse catalogs without a
//! regex engine in the binary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::engine::Engine;
use crate::engine::runner::ProbeReport;
use crate::mcp::handler::McpResult;

use super::reply::{OBSERVATION_CEILING, tool_error};
use crate::util::sync::Lock;

mod summary;

/// A select with more choices than this is summarised instead of listed.
const MAX_CHOICES: usize = 24;

/// A validated `config` request (the action's, or `agentprism config`'s).
#[derive(Debug)]
pub(crate) struct ConfigInput {
    pub project_dir: PathBuf,
    pub harnesses: Option<Vec<String>>,
    pub model_specs: Option<Vec<String>>,
    pub model_filter: Option<String>,
}

impl ConfigInput {
    /// What makes two requests the same question.
    pub(crate) fn cache_key(&self) -> String {
        json!([
            self.project_dir,
            self.harnesses,
            self.model_specs,
            self.model_filter
        ])
        .to_string()
    }
}

/// How long the `workflow` tool answers a repeated `config` request from its last answer:
/// long enough for a host that asks twice in a row, short enough that fixed credentials or a
/// new adapter show up at the next question.
pub(crate) const CONFIG_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(15);

/// Recent answers kept, newest last.
const CONFIG_CACHE_ENTRIES: usize = 8;

/// The `workflow` tool's recent `config` answers (the CLI's `config` always probes).
#[derive(Default)]
pub(crate) struct ConfigCache {
    entries: std::sync::Mutex<std::collections::VecDeque<(std::time::Instant, String, Value)>>,
}

impl ConfigCache {
    /// The answer to `key` given less than [`CONFIG_CACHE_TTL`] ago.
    pub(crate) fn get(&self, key: &str) -> Option<Value> {
        let mut entries = self.entries.locked();
        entries.retain(|(at, _, _)| at.elapsed() < CONFIG_CACHE_TTL);
        entries
            .iter()
            .find(|(_, stored, _)| stored == key)
            .map(|(_, _, answer)| answer.clone())
    }

    pub(crate) fn put(&self, key: String, answer: &Value) {
        let mut entries = self.entries.locked();
        entries.retain(|(_, stored, _)| *stored != key);
        entries.push_back((std::time::Instant::now(), key, answer.clone()));
        while entries.len() > CONFIG_CACHE_ENTRIES {
            entries.pop_front();
        }
    }
}

/// One probe to make: a backend, optionally with an exact model.
struct Target {
    backend: String,
    model: Option<String>,
}

/// Probes the backends `input` names (all registered ones by default) within
/// [`OBSERVATION_CEILING`] and summarises what a script may route to.
pub(crate) async fn config(engine: &Engine, input: ConfigInput) -> McpResult<Value> {
    if !input.project_dir.is_dir() {
        return Ok(tool_error(format!(
            "projectDir {} is not an existing directory",
            input.project_dir.display()
        )));
    }
    let lookup = engine.backends();
    let mut targets = Vec::new();
    match (&input.harnesses, &input.model_specs) {
        (None, None) => targets.extend(lookup.names().into_iter().map(|backend| Target {
            backend,
            model: None,
        })),
        (harnesses, specs) => {
            for backend in harnesses.iter().flatten() {
                targets.push(Target {
                    backend: backend.clone(),
                    model: None,
                });
            }
            for spec in specs.iter().flatten() {
                let (backend, model) = spec.split_once('/').unwrap_or((spec, ""));
                targets.push(Target {
                    backend: backend.to_owned(),
                    model: Some(model.to_owned()),
                });
            }
        }
    }
    let filter = input.model_filter.as_deref().map(Filter::new);
    let known = lookup.names();

    // Probe concurrently; the set aborts unfinished probes when dropped at the deadline.
    let mut probes = JoinSet::new();
    let mut reports: Vec<Option<ProbeReport>> = vec![None; targets.len()];
    for (slot, target) in targets.iter().enumerate() {
        let Some(spec) = lookup.backend(&target.backend) else {
            reports[slot] = Some(unprobed(
                &target.backend,
                format!(
                    "unknown backend {:?}; registered backends: {}",
                    target.backend,
                    known.join(", ")
                ),
            ));
            continue;
        };
        let runner = engine.runner().clone();
        let model = target.model.clone();
        let cwd: PathBuf = input.project_dir.clone();
        probes.spawn(async move {
            let report = runner.probe(&spec, model.as_deref(), &cwd).await;
            (slot, report)
        });
    }
    let deadline = tokio::time::sleep(OBSERVATION_CEILING);
    tokio::pin!(deadline);
    while !probes.is_empty() {
        tokio::select! {
            joined = probes.join_next() => {
                // A panicked probe leaves its slot empty; it is reported as unfinished.
                if let Some(Ok((slot, report))) = joined {
                    reports[slot] = Some(report);
                }
            }
            _ = &mut deadline => break,
        }
    }
    // Discovery is not work: the adapters it started hold memory the user is not using.
    engine.runner().release_probed().await;
    let probed: Vec<Probed> = reports
        .into_iter()
        .zip(targets)
        .map(|(report, target)| Probed {
            report: report.unwrap_or_else(|| {
                unprobed(
                    &target.backend,
                    format!(
                        "the probe did not finish within {} s",
                        OBSERVATION_CEILING.as_secs()
                    ),
                )
            }),
            model: target.model,
        })
        .collect();
    Ok(answer(&input.project_dir, &probed, filter.as_ref()))
}

/// One probe's outcome, with the exact model it was asked for.
struct Probed {
    model: Option<String>,
    report: ProbeReport,
}

/// The report of a probe that never ran.
fn unprobed(backend: &str, error: String) -> ProbeReport {
    ProbeReport {
        backend: backend.to_owned(),
        error: Some(error),
        ..ProbeReport::default()
    }
}

/// The tool answer: every catalog as probed (shaped by the filter and the choice cap), the
/// authoring summary, and a text digest.
fn answer(project_dir: &std::path::Path, probed: &[Probed], filter: Option<&Filter>) -> Value {
    let harnesses: Vec<Value> = probed
        .iter()
        .map(|probe| harness_entry(&probe.report, probe.model.as_deref(), filter))
        .collect();
    let summary = summary::authoring_summary(probed, filter);
    let text = summary::summary_text(&summary);
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {
            "action": "config",
            "projectDir": project_dir,
            "harnesses": harnesses,
            "authoringSummary": summary,
        },
    })
}

fn harness_entry(report: &ProbeReport, model: Option<&str>, filter: Option<&Filter>) -> Value {
    let mut entry = json!({
        "backend": report.backend,
        "probed": report.probed,
        "started": report.started,
        "modes": report.modes,
        "configOptions": report.config_options.iter().map(|option| shape_option(option, filter)).collect::<Vec<_>>(),
    });
    if let Some(model) = model {
        entry["model"] = Value::String(model.to_owned());
    }
    if let Some(error) = &report.error {
        entry["error"] = Value::String(crate::engine::redact::redact_text(error).0);
    }
    if let Some(current) = &report.current_model {
        entry["currentModel"] = Value::String(current.clone());
    }
    if !report.auth_methods.is_empty() {
        entry["authMethods"] = json!(report.auth_methods);
    }
    entry
}

/// Whether an ACP config option chooses the model.
fn is_model_option(option: &Value) -> bool {
    option["category"] == "model" || option["id"] == "model"
}

/// Flattens ACP select choices: plain `[{value,name}]` or grouped `[{group,name,options}]`.
fn choices(option: &Value) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    for item in option["options"].as_array().into_iter().flatten() {
        match item["options"].as_array() {
            Some(inner) => {
                let group = item["name"]
                    .as_str()
                    .or_else(|| item["group"].as_str())
                    .map(str::to_owned);
                out.extend(inner.iter().map(|choice| (group.clone(), choice.clone())));
            }
            None => out.push((None, item.clone())),
        }
    }
    out
}

fn choice_text(choice: &Value) -> String {
    let value = choice["value"].as_str().unwrap_or_default();
    let name = choice["name"].as_str().unwrap_or_default();
    format!("{value} {name}")
}

/// The provider-style prefix of a choice (`openrouter/x/y` → `openrouter`).
fn group_of(group: &Option<String>, choice: &Value) -> String {
    if let Some(group) = group {
        return group.clone();
    }
    let value = choice["value"].as_str().unwrap_or_default();
    match value.split_once('/') {
        Some((prefix, _)) => prefix.to_owned(),
        None => "(direct)".to_owned(),
    }
}

/// Applies the model filter and the choice cap to one config option.
fn shape_option(option: &Value, filter: Option<&Filter>) -> Value {
    if option["options"].as_array().is_none() {
        return option.clone();
    }
    let mut all = choices(option);
    let mut shaped = option.clone();
    if let (Some(filter), true) = (filter, is_model_option(option)) {
        all.retain(|(_, choice)| filter.matches(&choice_text(choice)));
        shaped["filtered"] = json!({"modelFilter": filter.source, "matched": all.len()});
    }
    if all.len() > MAX_CHOICES {
        let mut groups: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
        for (group, choice) in &all {
            let entry = groups.entry(group_of(group, choice)).or_default();
            entry.0 += 1;
            if entry.1.len() < 3
                && let Some(value) = choice["value"].as_str()
            {
                entry.1.push(value.to_owned());
            }
        }
        if let Some(map) = shaped.as_object_mut() {
            map.remove("options");
        }
        shaped["truncated"] = Value::Bool(true);
        shaped["choiceSummary"] = json!({
            "total": all.len(),
            "groups": groups.into_iter().map(|(name, (count, sample))| json!({"name": name, "count": count, "sample": sample})).collect::<Vec<_>>(),
        });
    } else {
        shaped["options"] = Value::Array(all.into_iter().map(|(_, choice)| choice).collect());
    }
    shaped
}

/// The `modelFilter` matcher.
struct Filter {
    source: String,
    kind: FilterKind,
}

enum FilterKind {
    /// Lowercased; `*` matches any run.
    Glob(Vec<char>),
    /// The `/pattern/` subset, lowercased.
    Pattern(Vec<char>),
}

impl Filter {
    fn new(source: &str) -> Filter {
        let lowered = source.to_lowercase();
        let kind = match lowered
            .strip_prefix('/')
            .and_then(|inner| inner.strip_suffix('/'))
        {
            Some(inner) if !inner.is_empty() => FilterKind::Pattern(inner.chars().collect()),
            _ => FilterKind::Glob(lowered.chars().collect()),
        };
        Filter {
            source: source.to_owned(),
            kind,
        }
    }

    fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.to_lowercase().chars().collect();
        match &self.kind {
            FilterKind::Glob(pattern) => glob_anywhere(pattern, &text),
            FilterKind::Pattern(pattern) => regex_search(pattern, &text),
        }
    }
}

/// Substring search where `*` matches any run of characters.
fn glob_anywhere(pattern: &[char], text: &[char]) -> bool {
    fn here(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => true,
            Some(('*', rest)) => (0..=text.len()).any(|skip| here(rest, &text[skip..])),
            Some((c, rest)) => text.first() == Some(c) && here(rest, &text[1..]),
        }
    }
    (0..=text.len()).any(|start| here(pattern, &text[start..]))
}

/// Unanchored search with `.`, `*` (after an atom), `^`, `$` and `\` escapes.
fn regex_search(pattern: &[char], text: &[char]) -> bool {
    if let Some(rest) = pattern.strip_prefix(&['^']) {
        return regex_here(rest, text);
    }
    (0..=text.len()).any(|start| regex_here(pattern, &text[start..]))
}

fn regex_here(pattern: &[char], text: &[char]) -> bool {
    if pattern.is_empty() {
        return true;
    }
    if pattern == ['$'] {
        return text.is_empty();
    }
    // One atom: an escaped character, `.`, or a literal.
    let (atom, width) = match pattern {
        ['\\', escaped, ..] => (Some(*escaped), 2),
        ['.', ..] => (None, 1),
        [literal, ..] => (Some(*literal), 1),
        [] => unreachable!(),
    };
    let atom_matches = |c: &char| atom.is_none_or(|a| a == *c);
    let rest = &pattern[width..];
    if rest.first() == Some(&'*') {
        let after = &rest[1..];
        let mut index = 0;
        loop {
            if regex_here(after, &text[index..]) {
                return true;
            }
            if index < text.len() && atom_matches(&text[index]) {
                index += 1;
            } else {
                return false;
            }
        }
    }
    match text.split_first() {
        Some((c, tail)) if atom_matches(c) => regex_here(rest, tail),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
