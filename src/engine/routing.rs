//! Model routing (engine.md 4): which backend and which model string an `agent()` call uses.
//!
//! The effective spec is the first of: the call's `model`, its agent definition's `model`, its
//! tier (from `model-tiers.json`), the current phase's `model`, and `meta.model`. No fallback
//! fills a missing route: such a call is rejected at preparation, or fails live with
//! `ROUTING_REQUIRED` if only an unreached branch had it. Tiers, agent definitions and
//! approved script backends are captured at admission in a [`RoutingSnapshot`], which every
//! resume reuses, so a run's routing never drifts with files on disk.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::engine::runner::BackendSpec;
use crate::engine::sources::Sources;
use crate::model::Phase;
use crate::util::sha256_hex;

/// Limits on what admission reads from disk.
const MAX_AGENT_DEFINITIONS: usize = 256;
const MAX_DEFINITION_BYTES: u64 = 256 * 1024;
const MAX_TIERS_BYTES: u64 = 256 * 1024;

/// Looks backends up by routing name. Implemented by the ACP backend registry.
pub trait BackendLookup: Send + Sync {
    /// ASCII case-insensitive lookup.
    fn backend(&self, name: &str) -> Option<BackendSpec>;
    /// `AGENTPRISM_DEFAULT_BACKEND` when it names a known backend.
    fn default_backend(&self) -> Option<String>;
    /// Every routable name, for error messages and catalogs.
    fn names(&self) -> Vec<String>;
}

/// The snapshot's durable shape lives in the run model; capturing and sealing it is here.
pub use crate::model::routing::{AgentDefinition, RoutingSnapshot};

/// Reads `<root>/model-tiers.json` into `snapshot.tiers`; a missing file means no tiers.
fn read_tiers(
    sources: &dyn Sources,
    root: &Path,
    snapshot: &mut RoutingSnapshot,
) -> Result<(), String> {
    let tiers_path = root.join("model-tiers.json");
    let contents = match sources.read_companion(&tiers_path, MAX_TIERS_BYTES) {
        Ok(contents) => contents,
        Err(error) if error.is_not_found() => return Ok(()),
        Err(error) => return Err(format!("the tiers file {error}")),
    };
    let parsed: Value = serde_json::from_slice(&contents.bytes)
        .map_err(|e| format!("{}: not valid JSON: {e}", tiers_path.display()))?;
    let tiers = parsed
        .get("tiers")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            format!(
                "{}: expected {{\"tiers\": {{\"<name>\": \"<model spec>\"}}}}",
                tiers_path.display()
            )
        })?;
    for (name, spec) in tiers {
        let spec = spec
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                // The name is the file's text: shown short and redacted.
                let (name, _) =
                    crate::engine::redact::redact_text(crate::util::truncate_utf8(name, 40));
                format!(
                    "{}: tiers.{name} must be a non-empty model spec string",
                    tiers_path.display()
                )
            })?;
        snapshot.tiers.insert(name.clone(), spec.to_owned());
    }
    Ok(())
}

impl RoutingSnapshot {
    /// Reads tiers from `<root>/model-tiers.json` (none without a root) and agent definitions from
    /// `<project>/.agentprism/agents` then `~/.agentprism/agents` (project wins). Each file is
    /// read through `sources` (on disk: links resolved, regular files only, size bounded),
    /// and errors name the file and a line, never its text. Blocking: call it off the async
    /// workers.
    pub fn capture(
        sources: &dyn Sources,
        root: Option<&Path>,
        project_dir: &Path,
        home: Option<&Path>,
    ) -> Result<RoutingSnapshot, String> {
        let mut snapshot = RoutingSnapshot::default();
        if let Some(root) = root {
            read_tiers(sources, root, &mut snapshot)?;
        }
        let mut folders = vec![project_dir.join(".agentprism").join("agents")];
        if let Some(home) = home {
            folders.push(home.join(".agentprism").join("agents"));
        }
        for folder in folders {
            for path in sources.companions(&folder, "md") {
                let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned)
                else {
                    continue;
                };
                if snapshot.agents.contains_key(&name) {
                    continue;
                }
                if snapshot.agents.len() >= MAX_AGENT_DEFINITIONS {
                    return Err(format!(
                        "{}: more than {MAX_AGENT_DEFINITIONS} agent definitions",
                        folder.display()
                    ));
                }
                let contents = sources
                    .read_companion(&path, MAX_DEFINITION_BYTES)
                    .map_err(|error| format!("agent definition {error}"))?;
                let text = String::from_utf8(contents.bytes).map_err(|_| {
                    format!("agent definition {} is not UTF-8 text", path.display())
                })?;
                let definition = parse_agent_definition(&text)
                    .map_err(|e| format!("agent definition {}: {e}", path.display()))?;
                snapshot.agents.insert(name, definition);
            }
        }
        snapshot.seal();
        Ok(snapshot)
    }

    /// Recomputes the integrity hash after a change.
    pub(crate) fn seal(&mut self) {
        let body = serde_json::json!({
            "tiers": self.tiers,
            "agents": self.agents,
            "scriptBackends": self.script_backends,
        });
        self.integrity = sha256_hex(crate::engine::journal::canonical_json(&body).as_bytes());
    }

    /// Whether the stored snapshot is intact.
    pub fn verify(&self) -> bool {
        let mut copy = self.clone();
        copy.seal();
        copy.integrity == self.integrity
    }
}

/// Parses `---\nkey: value\n---\nbody`. Frontmatter keys: model, tools, disallowedTools
/// (comma-separated or `[a, b]`), isolation.
pub(crate) fn parse_agent_definition(text: &str) -> Result<AgentDefinition, String> {
    let digest = sha256_hex(text.as_bytes());
    let mut definition = AgentDefinition {
        model: None,
        tools: Vec::new(),
        disallowed_tools: Vec::new(),
        isolation: None,
        role_prompt: text.trim().to_owned(),
        digest,
    };
    let trimmed = text.trim_start_matches('\u{feff}');
    let Some(rest) = trimmed.strip_prefix("---") else {
        return Ok(definition);
    };
    let Some(end) = rest.find("\n---") else {
        return Err("frontmatter starts with --- but has no closing ---".into());
    };
    let front = &rest[..end];
    let body = rest[end + 4..].trim_start_matches(['-']).trim();
    definition.role_prompt = body.to_owned();
    let list = |value: &str| -> Vec<String> {
        value
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|item| item.trim().trim_matches(['"', '\'']).to_owned())
            .filter(|item| !item.is_empty())
            .collect()
    };
    for (number, line) in front.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            // The file's 1st line is the opening `---`; no text of it is quoted.
            return Err(format!(
                "frontmatter line {} is not `key: value`",
                number + 1
            ));
        };
        let value = value.trim().trim_matches(['"', '\'']);
        match key.trim() {
            "model" if !value.is_empty() => definition.model = Some(value.to_owned()),
            "tools" => definition.tools = list(value),
            "disallowedTools" => definition.disallowed_tools = list(value),
            "isolation" if !value.is_empty() => definition.isolation = Some(value.to_owned()),
            _ => {}
        }
    }
    Ok(definition)
}

/// Whether a call through the agent definition `name` is isolated: a definition's
/// `isolation: worktree` is honoured like the `agent()` option; any other value is refused,
/// naming the file, rather than run in the shared checkout. A name without a definition
/// passes here (`false`); routing reports it.
pub(crate) fn definition_isolation(name: &str, snapshot: &RoutingSnapshot) -> Result<bool, String> {
    let Some(definition) = snapshot.agents.get(name) else {
        return Ok(false);
    };
    match definition.isolation.as_deref().map(str::trim) {
        None => Ok(false),
        Some(value) if value.eq_ignore_ascii_case("worktree") => Ok(true),
        // The value is the file's text, which messages never quote.
        Some(_) => Err(format!(
            "agent definition {name:?} (.agentprism/agents/{name}.md, project or home) sets \
             isolation to a value other than worktree; isolation: worktree is the one \
             supported value"
        )),
    }
}

/// Where a call's route came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRequest<'a> {
    pub model: Option<&'a str>,
    pub agent_type: Option<&'a str>,
    pub tier: Option<&'a str>,
    pub phase: Option<&'a str>,
    pub meta_model: Option<&'a str>,
}

/// A resolved route.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The effective model spec (part of the call's identity).
    pub spec: String,
    pub backend: BackendSpec,
    /// Sent as the model config value; `None` keeps the backend's default.
    pub model: Option<String>,
}

/// Resolves a call's route. `Err` is a missing route, with the reason.
pub fn resolve(
    request: &RouteRequest<'_>,
    phases: &[Phase],
    snapshot: &RoutingSnapshot,
    backends: &dyn BackendLookup,
) -> Result<Route, String> {
    let definition = match request.agent_type {
        Some(name) => Some(snapshot.agents.get(name).ok_or_else(|| {
            format!("agentType {name:?} has no definition in .agentprism/agents/{name}.md (project or home)")
        })?),
        None => None,
    };
    let tier_spec = match request.tier {
        Some(tier) => Some(
            snapshot
                .tiers
                .get(tier)
                .map(String::as_str)
                .ok_or_else(|| format!("tier {tier:?} is not configured in model-tiers.json"))?,
        ),
        None => None,
    };
    let phase_model = request
        .phase
        .and_then(|title| phases.iter().find(|phase| phase.title == title))
        .and_then(|phase| phase.model.as_deref());
    let spec = request
        .model
        .or(definition.and_then(|d| d.model.as_deref()))
        .or(tier_spec)
        .or(phase_model)
        .or(request.meta_model)
        .map(str::trim)
        .filter(|spec| !spec.is_empty())
        .ok_or_else(|| {
            "no model: set agent(p, {model}), a tier, a phase model, or meta.model".to_owned()
        })?;
    route_spec(spec, snapshot, backends)
}

/// Maps a model spec to its backend (engine.md 4's table). Script backends count as
/// registered, but host and built-in names win.
pub(crate) fn route_spec(
    spec: &str,
    snapshot: &RoutingSnapshot,
    backends: &dyn BackendLookup,
) -> Result<Route, String> {
    let lookup = |name: &str| {
        backends.backend(name).or_else(|| {
            snapshot
                .script_backends
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, spec)| spec.clone())
        })
    };
    if let Some(backend) = lookup(spec) {
        return Ok(Route {
            spec: spec.to_owned(),
            backend,
            model: None,
        });
    }
    if let Some((head, rest)) = spec.split_once('/')
        && let Some(backend) = lookup(head)
    {
        if rest.is_empty() {
            return Err(format!(
                "model spec {spec:?} names backend {head:?} with an empty model"
            ));
        }
        if is_browse_selector(rest) {
            return Err(browse_selector(spec, rest));
        }
        return Ok(Route {
            spec: spec.to_owned(),
            backend,
            model: Some(rest.to_owned()),
        });
    }
    let Some(fallback) = backends.default_backend() else {
        return Err(unknown_backend(spec, snapshot, backends));
    };
    if is_browse_selector(spec) {
        return Err(browse_selector(spec, spec));
    }
    let backend = lookup(&fallback).ok_or_else(|| {
        format!("model spec {spec:?} names no backend and the default backend {fallback:?} is not available")
    })?;
    Ok(Route {
        spec: spec.to_owned(),
        backend,
        model: Some(spec.to_owned()),
    })
}

/// Whether a model is one of `config`'s browse selectors (`openrouter/*`): a group of
/// models to list with `modelFilter`, which no agent can run.
pub(crate) fn is_browse_selector(model: &str) -> bool {
    model.contains('*')
}

fn browse_selector(spec: &str, model: &str) -> String {
    format!(
        "model spec {spec:?} is a browse selector, not a model: pass {model:?} to config as modelFilter to list its models, then route to one of them"
    )
}

/// The routing error for a spec that names no registered backend while
/// `AGENTPRISM_DEFAULT_BACKEND` is unset: without a default there is nobody to send it to
/// verbatim, and a typo (`mokc`, `cluade/opus`) must not reach some provider as a model name.
fn unknown_backend(spec: &str, snapshot: &RoutingSnapshot, backends: &dyn BackendLookup) -> String {
    let mut names = backends.names();
    names.extend(snapshot.script_backends.keys().cloned());
    let named = match spec.split_once('/') {
        Some((head, _)) => format!("names backend {head:?}, which is not registered"),
        None => "is not a registered backend".to_owned(),
    };
    format!(
        "model spec {spec:?} {named} (registered: {}); use a backend name or \"<backend>/<model>\" with one of them, or set AGENTPRISM_DEFAULT_BACKEND to send other specs verbatim to that backend",
        names.join(", ")
    )
}

/// Backends that exist by name only, with no default: for tests, benchmarks and embedding
/// hosts whose runner does not spawn commands (e.g. the instant runner).
#[derive(Clone, Debug, Default)]
pub struct NamedBackends(Vec<String>);

impl NamedBackends {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> NamedBackends {
        NamedBackends(names.into_iter().map(str::to_owned).collect())
    }
}

impl BackendLookup for NamedBackends {
    fn backend(&self, name: &str) -> Option<BackendSpec> {
        let id = self.0.iter().find(|n| n.eq_ignore_ascii_case(name))?;
        Some(BackendSpec {
            id: id.clone(),
            command: format!("{id}-acp"),
            args: Vec::new(),
            env: BTreeMap::new(),
            session_meta: None,
            structured_output_tool: true,
            file_roots: Vec::new(),
            origin: crate::engine::runner::BackendOrigin::Builtin,
        })
    }

    fn default_backend(&self) -> Option<String> {
        None
    }

    fn names(&self) -> Vec<String> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_of_engine_md_4() {
        let backends = NamedBackends::new(["claude", "codex", "pi"]);
        let snapshot = RoutingSnapshot::default();
        let route = route_spec("codex", &snapshot, &backends).unwrap();
        assert_eq!((route.backend.id.as_str(), route.model), ("codex", None));
        let route = route_spec("pi/openrouter/v/m", &snapshot, &backends).unwrap();
        assert_eq!(
            (route.backend.id.as_str(), route.model.as_deref()),
            ("pi", Some("openrouter/v/m"))
        );
        let route = route_spec("PI/x", &snapshot, &backends).unwrap();
        assert_eq!(route.backend.id, "pi");
        // With no AGENTPRISM_DEFAULT_BACKEND a spec naming no backend is a routing error
        // that lists the backends, slash or not.
        let error = route_spec("sonnet", &snapshot, &backends).unwrap_err();
        assert!(
            error.contains("\"sonnet\" is not a registered backend")
                && error.contains("registered: claude, codex, pi"),
            "{error}"
        );
        let error = route_spec("nosuch/model", &snapshot, &backends).unwrap_err();
        assert!(
            error.contains("\"nosuch\", which is not registered"),
            "{error}"
        );
    }

    /// `config`'s browse selectors list models; a route to one is refused with the way to
    /// expand it, on a named backend and on the default one alike.
    #[test]
    fn browse_selectors_cannot_dispatch() {
        let snapshot = RoutingSnapshot::default();
        let named = NamedBackends::new(["opencode", "pi"]);
        for spec in ["opencode/openrouter/*", "pi/openrouter/anthropic/*"] {
            let error = route_spec(spec, &snapshot, &named).unwrap_err();
            assert!(
                error.contains("is a browse selector, not a model")
                    && error.contains("modelFilter"),
                "{error}"
            );
        }
        let error = route_spec(
            "openrouter/*",
            &snapshot,
            &WithDefault(NamedBackends::new(["opencode"]), "opencode"),
        )
        .unwrap_err();
        assert!(error.contains("is a browse selector"), "{error}");
        let route = route_spec(
            "opencode/openrouter/anthropic/claude-sonnet-4.6",
            &snapshot,
            &named,
        );
        assert!(route.is_ok(), "an exact model still routes");
    }

    /// A lookup with `AGENTPRISM_DEFAULT_BACKEND` set: other specs go to it verbatim.
    struct WithDefault(NamedBackends, &'static str);

    impl BackendLookup for WithDefault {
        fn backend(&self, name: &str) -> Option<BackendSpec> {
            self.0.backend(name)
        }
        fn default_backend(&self) -> Option<String> {
            Some(self.1.to_owned())
        }
        fn names(&self) -> Vec<String> {
            self.0.names()
        }
    }

    #[test]
    fn a_configured_default_takes_other_specs_verbatim() {
        let backends = WithDefault(NamedBackends::new(["claude", "codex"]), "codex");
        let snapshot = RoutingSnapshot::default();
        let route = route_spec("sonnet", &snapshot, &backends).unwrap();
        assert_eq!(
            (route.backend.id.as_str(), route.model.as_deref()),
            ("codex", Some("sonnet"))
        );
        let route = route_spec("vendor/model", &snapshot, &backends).unwrap();
        assert_eq!(route.model.as_deref(), Some("vendor/model"));
    }

    #[test]
    fn precedence_and_missing_routes() {
        let backends = NamedBackends::new(["claude", "codex"]);
        let mut snapshot = RoutingSnapshot::default();
        snapshot.tiers.insert("small".into(), "codex/mini".into());
        let phases = vec![Phase {
            title: "Review".into(),
            detail: None,
            model: Some("claude".into()),
        }];
        let base = RouteRequest {
            model: None,
            agent_type: None,
            tier: None,
            phase: Some("Review"),
            meta_model: Some("codex"),
        };
        assert_eq!(
            resolve(&base, &phases, &snapshot, &backends).unwrap().spec,
            "claude"
        );
        let tiered = RouteRequest {
            tier: Some("small"),
            ..base.clone()
        };
        assert_eq!(
            resolve(&tiered, &phases, &snapshot, &backends)
                .unwrap()
                .spec,
            "codex/mini"
        );
        let explicit = RouteRequest {
            model: Some("codex"),
            ..tiered.clone()
        };
        assert_eq!(
            resolve(&explicit, &phases, &snapshot, &backends)
                .unwrap()
                .spec,
            "codex"
        );
        let unknown_tier = RouteRequest {
            tier: Some("huge"),
            ..base.clone()
        };
        assert!(
            resolve(&unknown_tier, &phases, &snapshot, &backends)
                .unwrap_err()
                .contains("tier \"huge\"")
        );
        let nothing = RouteRequest {
            model: None,
            agent_type: None,
            tier: None,
            phase: None,
            meta_model: None,
        };
        assert!(
            resolve(&nothing, &phases, &snapshot, &backends)
                .unwrap_err()
                .contains("no model")
        );
    }

    #[test]
    fn agent_definitions_parse() {
        let definition = parse_agent_definition(
            "---\nmodel: codex\ntools: [Read, Grep]\n---\nYou review code.\n",
        )
        .unwrap();
        assert_eq!(definition.model.as_deref(), Some("codex"));
        assert_eq!(definition.tools, vec!["Read", "Grep"]);
        assert_eq!(definition.role_prompt, "You review code.");
        assert!(parse_agent_definition("---\nmodel: x\n").is_err());
    }
}
