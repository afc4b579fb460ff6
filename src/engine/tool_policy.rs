//! An agent definition's tool policy (`tools`, `disallowedTools`), applied to the agent's ACP
//! permission requests before any human, CLI flag or host sees them.
//!
//! A request names its tool in one of two ways. Adapters that know their own tool's name
//! send it (claude-agent-acp as `toolCall.name` or `toolCall._meta.claudeCode.toolName`);
//! that name is compared with the definition's entries, ignoring ASCII case. Otherwise the
//! ACP `kind` stands for the Claude Code tools of that kind (`execute` is `Bash`, `edit` is
//! `Edit`, `Write`, `MultiEdit` and `NotebookEdit`, …; [`kind_names`]). A request whose tool
//! is neither named nor of a known kind is unknown: with a `tools` list it is denied as not
//! listed, with only `disallowedTools` it goes on to the usual answer.
//!
//! Entries are tool names. `mcp__<server>` also covers every tool of that MCP server, as in
//! Claude Code. A `Name(specifier)` entry is not interpreted: in `disallowedTools` it denies
//! the whole tool `Name`, in `tools` it allows nothing, so an entry this module cannot read
//! never lets more through.

use serde_json::Value;

use crate::engine::runner::{PermissionOption, PermissionOutcome};
use crate::model::AgentDefinition;

/// The allow and deny lists of one agent definition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolPolicy {
    /// When non-empty, only these tools may be used.
    pub tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
}

/// Why a request was denied: the tool as the request named it, and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Denial {
    /// The adapter's tool name, else `kind:<kind>`, else `unknown`.
    pub tool: String,
    /// `disallowedTools: <entry>` or `tools: not listed`.
    pub rule: String,
}

/// How a permission request names its tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToolIdentity {
    /// The adapter's own name for the tool.
    Named(String),
    /// Only the ACP kind, standing for these Claude Code tool names.
    Kind {
        kind: String,
        names: &'static [&'static str],
    },
    Unknown,
}

impl ToolPolicy {
    /// The definition's policy; `None` when it sets neither list.
    pub(crate) fn of(definition: &AgentDefinition) -> Option<ToolPolicy> {
        let policy = ToolPolicy {
            tools: definition.tools.clone(),
            disallowed_tools: definition.disallowed_tools.clone(),
        };
        (!policy.tools.is_empty() || !policy.disallowed_tools.is_empty()).then_some(policy)
    }

    /// The denial of a request for `tool_call` (the ACP `toolCall` object), or `None` when the
    /// policy lets it go on to the usual answer.
    pub(crate) fn check(&self, tool_call: &Value) -> Option<Denial> {
        let identity = identify(tool_call);
        let names: Vec<&str> = match &identity {
            ToolIdentity::Named(name) => vec![name.as_str()],
            ToolIdentity::Kind { names, .. } => names.to_vec(),
            ToolIdentity::Unknown => Vec::new(),
        };
        let tool = match &identity {
            ToolIdentity::Named(name) => name.clone(),
            ToolIdentity::Kind { kind, .. } => format!("kind:{kind}"),
            ToolIdentity::Unknown => "unknown".to_owned(),
        };
        for entry in &self.disallowed_tools {
            if names.iter().any(|name| denies(entry, name)) {
                return Some(Denial {
                    tool,
                    rule: format!("disallowedTools: {entry}"),
                });
            }
        }
        let listed = self
            .tools
            .iter()
            .any(|entry| names.iter().any(|name| allows(entry, name)));
        if !self.tools.is_empty() && !listed {
            return Some(Denial {
                tool,
                rule: "tools: not listed".to_owned(),
            });
        }
        None
    }
}

/// Claude Code's built-in tool names, to pass an entry to Claude Code in the case it matches.
const CLAUDE_TOOLS: &[&str] = &[
    "Agent",
    "Bash",
    "BashOutput",
    "Edit",
    "ExitPlanMode",
    "Glob",
    "Grep",
    "KillShell",
    "LS",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Read",
    "Skill",
    "SlashCommand",
    "Task",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Write",
];

impl ToolPolicy {
    /// The call's `session/new` `_meta` with the policy added: `agentprism.{tools,
    /// disallowedTools}` for any adapter and, when `claude` (claude-agent-acp), the lists in
    /// the form it passes to Claude Code: `claudeCode.options.disallowedTools` (after any the
    /// call's own meta sets) and `claudeCode.options.tools`, the built-in tools the
    /// definition lists (narrowed further by a `tools` list the call's meta sets).
    pub(crate) fn session_meta(&self, meta: Option<Value>, claude: bool) -> Value {
        let mut meta = match meta {
            Some(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        meta.insert(
            "agentprism".to_owned(),
            serde_json::json!({"tools": self.tools, "disallowedTools": self.disallowed_tools}),
        );
        if !claude {
            return Value::Object(meta);
        }
        let claude_code = object_at(&mut meta, "claudeCode");
        let options = object_at(claude_code, "options");
        if !self.disallowed_tools.is_empty() {
            let mut disallowed: Vec<Value> = match options.remove("disallowedTools") {
                Some(Value::Array(given)) => given,
                _ => Vec::new(),
            };
            disallowed.extend(
                self.disallowed_tools
                    .iter()
                    .map(|entry| Value::String(claude_case(entry))),
            );
            options.insert("disallowedTools".to_owned(), Value::Array(disallowed));
        }
        if !self.tools.is_empty() {
            let given = match options.get("tools") {
                Some(Value::Array(given)) => Some(given.clone()),
                _ => None,
            };
            let built_in: Vec<Value> = self
                .tools
                .iter()
                .map(|entry| claude_case(entry))
                .filter(|entry| CLAUDE_TOOLS.contains(&entry.as_str()))
                .filter(|entry| {
                    given.as_ref().is_none_or(|given| {
                        given
                            .iter()
                            .filter_map(Value::as_str)
                            .any(|name| name.eq_ignore_ascii_case(entry))
                    })
                })
                .map(Value::String)
                .collect();
            options.insert("tools".to_owned(), Value::Array(built_in));
        }
        Value::Object(meta)
    }
}

/// `map[key]` as an object, replacing a value of another type.
fn object_at<'a>(
    map: &'a mut serde_json::Map<String, Value>,
    key: &str,
) -> &'a mut serde_json::Map<String, Value> {
    let slot = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(serde_json::Map::new());
    }
    slot.as_object_mut().expect("an object was just put there")
}

/// `entry` with its tool name in Claude Code's case (`bash(git:*)` → `Bash(git:*)`); names
/// Claude Code does not have built in are kept as written.
fn claude_case(entry: &str) -> String {
    let entry = entry.trim();
    let (name, rest) = entry.find('(').map_or((entry, ""), |at| entry.split_at(at));
    match CLAUDE_TOOLS
        .iter()
        .find(|tool| tool.eq_ignore_ascii_case(name.trim()))
    {
        Some(tool) => format!("{tool}{rest}"),
        None => entry.to_owned(),
    }
}

/// The answer that denies a request offering `options`: its `reject_once` option, else its
/// `reject_always` option, else `cancelled` (which every ACP agent reads as "not allowed").
pub(crate) fn deny_outcome(options: &[PermissionOption]) -> PermissionOutcome {
    ["reject_once", "reject_always"]
        .iter()
        .find_map(|kind| options.iter().find(|option| option.kind == *kind))
        .map(|option| PermissionOutcome::Selected {
            option_id: option.option_id.clone(),
        })
        .unwrap_or(PermissionOutcome::Cancelled)
}

/// How `tool_call` names its tool: the adapter's name where it gives one, else its kind.
pub(crate) fn identify(tool_call: &Value) -> ToolIdentity {
    let named = [
        tool_call.get("name"),
        tool_call.pointer("/_meta/claudeCode/toolName"),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_str)
    .map(str::trim)
    .find(|name| !name.is_empty());
    if let Some(name) = named {
        return ToolIdentity::Named(name.to_owned());
    }
    match tool_call.get("kind").and_then(Value::as_str) {
        Some(kind) => match kind_names(kind) {
            [] => ToolIdentity::Unknown,
            names => ToolIdentity::Kind {
                kind: kind.to_owned(),
                names,
            },
        },
        None => ToolIdentity::Unknown,
    }
}

/// The Claude Code tools an ACP tool kind stands for. `think` and `other` stand for none.
pub(crate) fn kind_names(kind: &str) -> &'static [&'static str] {
    match kind {
        "read" => &["Read", "NotebookRead"],
        "edit" => &["Edit", "Write", "MultiEdit", "NotebookEdit"],
        // Claude Code has no delete or move tool; agents of other families delete and move
        // files with the same file-changing tools.
        "delete" | "move" => &["Edit", "Write", "MultiEdit"],
        "search" => &["Grep", "Glob"],
        "execute" => &["Bash"],
        "fetch" => &["WebFetch", "WebSearch"],
        _ => &[],
    }
}

/// Whether the `disallowedTools` entry covers `name`: the same name, a server-wide
/// `mcp__<server>` entry, or the name part of a `Name(specifier)` entry.
fn denies(entry: &str, name: &str) -> bool {
    let entry = entry.trim();
    let bare = entry.split_once('(').map_or(entry, |(bare, _)| bare).trim();
    same_or_server(bare, name)
}

/// Whether the `tools` entry allows `name`; an entry with a specifier allows nothing.
fn allows(entry: &str, name: &str) -> bool {
    let entry = entry.trim();
    !entry.contains('(') && same_or_server(entry, name)
}

fn same_or_server(entry: &str, name: &str) -> bool {
    if entry.eq_ignore_ascii_case(name) {
        return true;
    }
    // `mcp__server` covers `mcp__server__tool`; a name's server part has no `__` of its own.
    let entry = entry.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    entry.starts_with("mcp__")
        && entry.matches("__").count() == 1
        && name
            .strip_prefix(entry.as_str())
            .is_some_and(|rest| rest.starts_with("__"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(tools: &[&str], disallowed: &[&str]) -> ToolPolicy {
        ToolPolicy {
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            disallowed_tools: disallowed.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn option(id: &str, kind: &str) -> PermissionOption {
        PermissionOption {
            option_id: id.into(),
            name: id.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn the_adapter_s_name_wins_over_the_kind() {
        let call = json!({"name": "Write", "kind": "edit", "title": "Write a.txt"});
        assert_eq!(identify(&call), ToolIdentity::Named("Write".into()));
        let call = json!({"kind": "execute", "_meta": {"claudeCode": {"toolName": "Bash"}}});
        assert_eq!(identify(&call), ToolIdentity::Named("Bash".into()));
        let call = json!({"kind": "execute", "title": "ls"});
        assert_eq!(
            identify(&call),
            ToolIdentity::Kind {
                kind: "execute".into(),
                names: &["Bash"]
            }
        );
        assert_eq!(identify(&json!({"kind": "think"})), ToolIdentity::Unknown);
        assert_eq!(identify(&json!({"title": "?"})), ToolIdentity::Unknown);
        assert_eq!(identify(&Value::Null), ToolIdentity::Unknown);
    }

    #[test]
    fn a_disallowed_tool_is_denied_by_name_ignoring_case() {
        let denial = policy(&[], &["bash"])
            .check(&json!({"name": "Bash", "kind": "execute"}))
            .expect("denied");
        assert_eq!(denial.tool, "Bash");
        assert_eq!(denial.rule, "disallowedTools: bash");
        assert_eq!(policy(&[], &["Bash"]).check(&json!({"name": "Read"})), None);
    }

    #[test]
    fn a_kind_stands_for_its_tools_when_no_name_is_given() {
        let execute = json!({"kind": "execute", "title": "touch x"});
        let denial = policy(&[], &["Bash"]).check(&execute).expect("denied");
        assert_eq!(denial.tool, "kind:execute");
        let edit = json!({"kind": "edit"});
        assert!(policy(&[], &["Write"]).check(&edit).is_some());
        assert_eq!(policy(&["Edit"], &[]).check(&edit), None);
        assert!(policy(&["Read"], &[]).check(&edit).is_some());
        assert_eq!(
            policy(&["grep"], &[]).check(&json!({"kind": "search"})),
            None
        );
    }

    #[test]
    fn with_a_tools_list_anything_unlisted_or_unknown_is_denied() {
        let read_only = policy(&["Read", "Grep"], &[]);
        assert_eq!(read_only.check(&json!({"name": "Read"})), None);
        let denial = read_only.check(&json!({"name": "Bash"})).expect("denied");
        assert_eq!(denial.rule, "tools: not listed");
        let denial = read_only
            .check(&json!({"kind": "other", "title": "?"}))
            .expect("denied");
        assert_eq!(
            (denial.tool.as_str(), denial.rule.as_str()),
            ("unknown", "tools: not listed")
        );
        // Without a tools list an unknown tool is left to the usual answer.
        assert_eq!(
            policy(&[], &["Bash"]).check(&json!({"kind": "other"})),
            None
        );
    }

    #[test]
    fn disallowed_wins_over_listed() {
        let both = policy(&["Bash"], &["Bash"]);
        assert_eq!(
            both.check(&json!({"name": "Bash"})).map(|d| d.rule),
            Some("disallowedTools: Bash".to_owned())
        );
    }

    #[test]
    fn specifiers_only_ever_narrow() {
        assert!(
            policy(&[], &["Bash(rm:*)"])
                .check(&json!({"name": "Bash"}))
                .is_some()
        );
        assert!(
            policy(&["Bash(git:*)"], &[])
                .check(&json!({"name": "Bash"}))
                .is_some()
        );
    }

    #[test]
    fn an_mcp_server_entry_covers_its_tools() {
        let call = json!({"name": "mcp__github__create_issue"});
        assert!(policy(&[], &["mcp__github"]).check(&call).is_some());
        assert!(policy(&[], &["mcp__git"]).check(&call).is_none());
        assert_eq!(policy(&["MCP__GitHub"], &[]).check(&call), None);
        assert!(
            policy(&[], &["mcp__github__create_issue"])
                .check(&call)
                .is_some()
        );
        assert!(policy(&[], &["mcp__github__list"]).check(&call).is_none());
    }

    #[test]
    fn the_denial_picks_a_reject_option_and_never_an_allow() {
        let options = [
            option("yes", "allow_once"),
            option("always", "allow_always"),
            option("never", "reject_always"),
            option("no", "reject_once"),
        ];
        assert_eq!(
            deny_outcome(&options),
            PermissionOutcome::Selected {
                option_id: "no".into()
            }
        );
        assert_eq!(
            deny_outcome(&options[..3]),
            PermissionOutcome::Selected {
                option_id: "never".into()
            }
        );
        assert_eq!(deny_outcome(&options[..2]), PermissionOutcome::Cancelled);
        assert_eq!(deny_outcome(&[]), PermissionOutcome::Cancelled);
    }

    #[test]
    fn a_definition_without_lists_has_no_policy() {
        let mut definition = AgentDefinition {
            model: None,
            tools: Vec::new(),
            disallowed_tools: Vec::new(),
            isolation: None,
            role_prompt: String::new(),
            digest: String::new(),
        };
        assert_eq!(ToolPolicy::of(&definition), None);
        definition.disallowed_tools = vec!["Bash".into()];
        assert_eq!(ToolPolicy::of(&definition), Some(policy(&[], &["Bash"])));
    }

    #[test]
    fn every_adapter_gets_the_lists_and_claude_gets_them_as_options() {
        let policy = policy(&["read", "Grep", "mcp__github", "Bash(git:*)"], &["bash"]);
        let meta = policy.session_meta(Some(json!({"x": 1})), false);
        assert_eq!(
            meta,
            json!({"x": 1, "agentprism": {
                "tools": ["read", "Grep", "mcp__github", "Bash(git:*)"], "disallowedTools": ["bash"]}})
        );
        let given = json!({"claudeCode": {"options": {"disallowedTools": ["WebFetch"],
            "tools": ["Read", "Write"], "model": "m"}}});
        let meta = policy.session_meta(Some(given), true);
        assert_eq!(
            meta["claudeCode"]["options"],
            json!({"disallowedTools": ["WebFetch", "Bash"], "tools": ["Read"], "model": "m"})
        );
        let meta = ToolPolicy {
            tools: Vec::new(),
            disallowed_tools: vec!["bash(rm:*)".into()],
        }
        .session_meta(None, true);
        assert_eq!(
            meta["claudeCode"]["options"],
            json!({"disallowedTools": ["Bash(rm:*)"]})
        );
    }
}
