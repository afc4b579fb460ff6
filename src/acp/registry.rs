//! The backend registry: the four built-ins resolved from their command variables and the
//! snapshot's `PATH`, custom backends from `AGENTPRISM_BACKENDS`, and approved script
//! backends from `meta.backends`. Names are looked up ASCII case-insensitively; built-in and
//! host names are reserved so a script can never shadow a command the operator chose. An
//! `AGENTPRISM_BACKENDS` entry may also set a backend's `maxConcurrent` (`slots`), and an entry
//! naming a built-in may set only that.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::acp::slots;
use crate::engine::runner::{BackendOrigin, BackendSpec};
use crate::env::{self, EnvSnapshot};

/// The built-in backend names, in the order they are listed.
pub(crate) const BUILTIN_NAMES: [&str; 4] = ["claude", "codex", "opencode", "pi"];

/// The npm packages the built-ins run through `npx` when their adapter is not on `PATH`
/// (README "Backends"; `scripts/install-test-deps` pins the same ones for the tests).
pub(crate) const CLAUDE_PACKAGE: &str = "@agentclientprotocol/claude-agent-acp";
pub(crate) const CODEX_PACKAGE: &str = "@zed-industries/codex-acp";
pub(crate) const OPENCODE_PACKAGE: &str = "opencode-ai";
pub(crate) const PI_ACP_PACKAGE: &str = "pi-acp";
/// The `pi` CLI that pi-acp drives.
pub(crate) const PI_PACKAGE: &str = "@earendil-works/pi-coding-agent";

/// Every backend a run may route to, in registration order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendRegistry {
    backends: Vec<BackendSpec>,
}

/// The variable that overrides a built-in's command, for hints in spawn errors.
pub(crate) fn override_variable(id: &str) -> Option<&'static str> {
    match id.to_ascii_lowercase().as_str() {
        "claude" => Some(env::CLAUDE_ACP_CMD),
        "codex" => Some(env::CODEX_ACP_CMD),
        "opencode" => Some(env::OPENCODE_ACP_CMD),
        "pi" => Some(env::PI_ACP_CMD),
        _ => None,
    }
}

impl BackendRegistry {
    /// Built-ins plus `AGENTPRISM_BACKENDS`. Errors name the variable, the backend and the
    /// field at fault.
    pub(crate) fn from_env(env: &EnvSnapshot) -> Result<BackendRegistry, String> {
        let mut backends = builtins(env);
        if let Some(text) = env.non_empty(env::BACKENDS) {
            let declared: Value = serde_json::from_str(text)
                .map_err(|error| format!("{} is not valid JSON: {error}", env::BACKENDS))?;
            let object = declared.as_object().ok_or_else(|| {
                format!(
                    "{} must be a JSON object of {{name: {{command, args?, env?, sessionMeta?, maxConcurrent?}}}}",
                    env::BACKENDS
                )
            })?;
            for (name, entry) in object {
                slots::cap_of(env::BACKENDS, name, entry)?;
                if is_builtin(name) {
                    if only_a_cap(entry) {
                        continue;
                    }
                    return Err(format!(
                        "{}: backend name {name:?} is reserved for the built-in backend \
                         (an entry for it may set only `{}`)",
                        env::BACKENDS,
                        slots::KEY
                    ));
                }
                if backends.iter().any(|b| b.id.eq_ignore_ascii_case(name)) {
                    return Err(format!(
                        "{}: backend {name:?} is declared twice (names ignore case)",
                        env::BACKENDS
                    ));
                }
                backends.push(parse_entry(
                    env::BACKENDS,
                    name,
                    entry,
                    BackendOrigin::Host,
                )?);
            }
        }
        Ok(BackendRegistry { backends })
    }

    /// A copy with approved script backends (`meta.backends`) added. A declared name equal to
    /// a built-in or host backend is ignored: the host's choice always wins.
    #[cfg(test)]
    pub(crate) fn with_script_backends(&self, declared: &Value) -> Result<BackendRegistry, String> {
        const SOURCE: &str = "meta.backends";
        let mut registry = self.clone();
        if declared.is_null() {
            return Ok(registry);
        }
        let object = declared.as_object().ok_or_else(|| {
            format!(
                "{SOURCE} must be an object of {{name: {{command, args?, env?, sessionMeta?}}}}"
            )
        })?;
        for (name, entry) in object {
            if registry.get(name).is_some() {
                tracing::debug!(backend = %name, "script backend ignored: the name is already registered");
                continue;
            }
            registry
                .backends
                .push(parse_entry(SOURCE, name, entry, BackendOrigin::Script)?);
        }
        Ok(registry)
    }

    /// The backend registered under `name`, ignoring ASCII case.
    pub(crate) fn get(&self, name: &str) -> Option<&BackendSpec> {
        self.backends
            .iter()
            .find(|backend| backend.id.eq_ignore_ascii_case(name))
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &BackendSpec> {
        self.backends.iter()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.backends
            .iter()
            .map(|backend| backend.id.clone())
            .collect()
    }

    /// `AGENTPRISM_DEFAULT_BACKEND`: `None` when unset. When it is present but empty or names
    /// no registered backend, the historical behaviour is Claude (seed, Configuration).
    pub(crate) fn default_backend(&self, env: &EnvSnapshot) -> Option<&BackendSpec> {
        let value = env.get(env::DEFAULT_BACKEND)?;
        self.get(value.trim()).or_else(|| self.get("claude"))
    }
}

/// An entry that sets nothing but a built-in's concurrency cap.
fn only_a_cap(entry: &Value) -> bool {
    entry
        .as_object()
        .is_some_and(|fields| !fields.is_empty() && fields.keys().all(|key| key == slots::KEY))
}

fn is_builtin(name: &str) -> bool {
    BUILTIN_NAMES
        .iter()
        .any(|builtin| builtin.eq_ignore_ascii_case(name))
}

fn builtin(id: &str, command: impl Into<String>, args: Vec<String>) -> BackendSpec {
    BackendSpec {
        id: id.to_owned(),
        command: command.into(),
        args,
        env: BTreeMap::new(),
        session_meta: None,
        structured_output_tool: true,
        file_roots: Vec::new(),
        origin: BackendOrigin::Builtin,
    }
}

fn split_args(env: &EnvSnapshot, variable: &str) -> Vec<String> {
    env.get(variable)
        .map(|text| text.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn npx(package: &str) -> Vec<String> {
    vec!["-y".to_owned(), package.to_owned()]
}

/// Resolves the four built-ins (seed, Configuration): an explicit command variable wins, then
/// the adapter's own binary on `PATH`, then `npx`.
fn builtins(env: &EnvSnapshot) -> Vec<BackendSpec> {
    let claude = match env.non_empty(env::CLAUDE_ACP_CMD) {
        Some(command) => builtin(
            "claude",
            command.trim(),
            split_args(env, env::CLAUDE_ACP_ARGS),
        ),
        None if on_path(env, "claude-agent-acp") => builtin("claude", "claude-agent-acp", vec![]),
        None => builtin("claude", "npx", npx(CLAUDE_PACKAGE)),
    };
    let codex = match (
        env.non_empty(env::CODEX_ACP_CMD),
        env.non_empty(env::CODEX_ACP_BIN),
    ) {
        (Some(command), _) => builtin(
            "codex",
            command.trim(),
            split_args(env, env::CODEX_ACP_ARGS),
        ),
        (None, Some(bin)) => builtin("codex", bin.trim(), vec![]),
        (None, None) if on_path(env, "codex-acp") => builtin("codex", "codex-acp", vec![]),
        (None, None) => builtin("codex", "npx", npx(CODEX_PACKAGE)),
    };
    let opencode = match env.non_empty(env::OPENCODE_ACP_CMD) {
        // An override receives only the arguments given with it.
        Some(command) => builtin(
            "opencode",
            command.trim(),
            split_args(env, env::OPENCODE_ACP_ARGS),
        ),
        None if on_path(env, "opencode") => builtin("opencode", "opencode", vec!["acp".to_owned()]),
        // `opencode-ai` ships the native binary in per-platform npm packages.
        None => {
            let mut args = npx(OPENCODE_PACKAGE);
            args.push("acp".to_owned());
            builtin("opencode", "npx", args)
        }
    };
    let pi = match env.non_empty(env::PI_ACP_CMD) {
        Some(command) => builtin("pi", command.trim(), split_args(env, env::PI_ACP_ARGS)),
        None if on_path(env, "pi-acp") => builtin("pi", "pi-acp", vec![]),
        // pi-acp runs the `pi` CLI, which comes from a package of its own; npx puts both
        // packages' bins on the adapter's PATH.
        None => builtin(
            "pi",
            "npx",
            [
                "-y".to_owned(),
                format!("--package={PI_ACP_PACKAGE}"),
                format!("--package={PI_PACKAGE}"),
                "pi-acp".to_owned(),
            ]
            .into(),
        ),
    };
    vec![claude, codex, opencode, pi]
}

/// Whether `program` is an executable file in one of the snapshot's `PATH` folders.
fn on_path(env: &EnvSnapshot, program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = env.path() else {
        return false;
    };
    path.split(':')
        .filter(|folder| !folder.is_empty())
        .map(|folder| Path::new(folder).join(program))
        .any(|candidate| {
            std::fs::metadata(&candidate)
                .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// One `{command, args?, env?, sessionMeta?, structuredOutputTool?}` entry from `source`.
fn parse_entry(
    source: &str,
    name: &str,
    entry: &Value,
    origin: BackendOrigin,
) -> Result<BackendSpec, String> {
    if name.trim().is_empty() {
        return Err(format!("{source}: a backend name is blank"));
    }
    let field_error = |field: &str, expected: &str| {
        format!("{source}: backend {name:?}: field `{field}` must be {expected}")
    };
    let object = entry.as_object().ok_or_else(|| {
        format!(
            "{source}: backend {name:?} must be an object {{command, args?, env?, sessionMeta?}}"
        )
    })?;
    let command = match object.get("command") {
        None | Some(Value::Null) => {
            return Err(format!(
                "{source}: backend {name:?}: field `command` is missing"
            ));
        }
        Some(Value::String(command)) if !command.trim().is_empty() => command.trim().to_owned(),
        Some(_) => return Err(field_error("command", "a non-blank string")),
    };
    let args = match object.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| field_error("args", "an array of strings"))?,
        Some(_) => return Err(field_error("args", "an array of strings")),
    };
    let env = match object.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(key, value)| value.as_str().map(|value| (key.clone(), value.to_owned())))
            .collect::<Option<BTreeMap<_, _>>>()
            .ok_or_else(|| field_error("env", "an object of string values"))?,
        Some(_) => return Err(field_error("env", "an object of string values")),
    };
    let session_meta = match object.get("sessionMeta") {
        None | Some(Value::Null) => None,
        Some(meta @ Value::Object(_)) => Some(meta.clone()),
        Some(_) => return Err(field_error("sessionMeta", "an object")),
    };
    let structured_output_tool = match object.get("structuredOutputTool") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Err(field_error("structuredOutputTool", "true or false")),
    };
    let file_roots = parse_file_roots(object.get("fileRoots"), origin)
        .map_err(|expected| field_error("fileRoots", expected))?;
    Ok(BackendSpec {
        id: name.to_owned(),
        command,
        args,
        env,
        session_meta,
        structured_output_tool,
        file_roots,
        origin,
    })
}

/// `fileRoots`: absolute folders the backend's agent may reach through `fs/*` requests
/// beyond the call's working tree. Only the user's own AGENTPRISM_BACKENDS may widen them: a
/// script naming its own roots would grant itself access.
fn parse_file_roots(
    value: Option<&Value>,
    origin: BackendOrigin,
) -> Result<Vec<std::path::PathBuf>, &'static str> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(_) if origin == BackendOrigin::Script => {
            return Err("set in AGENTPRISM_BACKENDS, not in a script's meta.backends");
        }
        Some(Value::Array(items)) => items,
        Some(_) => return Err("an array of absolute folder paths"),
    };
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(text) if Path::new(text).is_absolute() => Ok(std::path::PathBuf::from(text)),
            _ => Err("an array of absolute folder paths"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_with(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::from_pairs(pairs.iter().copied())
    }

    fn error_of(backends: &str) -> String {
        match BackendRegistry::from_env(&env_with(&[("PATH", ""), (env::BACKENDS, backends)])) {
            Ok(registry) => panic!("expected an error for {backends}, got {registry:?}"),
            Err(error) => error,
        }
    }

    fn fake_executables(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let folder = tempfile::tempdir().expect("temp dir");
        for name in names {
            let path = folder.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").expect("write fake executable");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("chmod fake executable");
        }
        folder
    }

    fn command_of(registry: &BackendRegistry, name: &str) -> (String, Vec<String>) {
        let backend = registry.get(name).expect("backend registered");
        (backend.command.clone(), backend.args.clone())
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    /// An entry naming a built-in that sets only its cap leaves the built-in as it is.
    #[test]
    fn a_built_in_entry_with_only_a_cap_keeps_the_built_in() {
        let plain = BackendRegistry::from_env(&env_with(&[("PATH", "")])).expect("registry");
        let capped = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (env::BACKENDS, r#"{"Claude": {"maxConcurrent": 4}}"#),
        ]))
        .expect("registry");
        assert_eq!(capped, plain);
    }

    #[test]
    fn builtins_fall_back_to_npx_and_opencode_acp_with_empty_path() {
        let registry = BackendRegistry::from_env(&env_with(&[("PATH", "")])).expect("registry");
        assert_eq!(registry.names(), strings(&BUILTIN_NAMES));
        assert_eq!(
            command_of(&registry, "claude"),
            (
                "npx".into(),
                strings(&["-y", "@agentclientprotocol/claude-agent-acp"])
            )
        );
        assert_eq!(
            command_of(&registry, "codex"),
            ("npx".into(), strings(&["-y", "@zed-industries/codex-acp"]))
        );
        assert_eq!(
            command_of(&registry, "opencode"),
            ("npx".into(), strings(&["-y", "opencode-ai", "acp"]))
        );
        assert_eq!(
            command_of(&registry, "pi"),
            (
                "npx".into(),
                strings(&[
                    "-y",
                    "--package=pi-acp",
                    "--package=@earendil-works/pi-coding-agent",
                    "pi-acp"
                ])
            )
        );
        assert!(registry.iter().all(|b| b.origin == BackendOrigin::Builtin));
    }

    #[test]
    fn builtins_prefer_adapters_on_path() {
        let folder = fake_executables(&["claude-agent-acp", "codex-acp", "opencode", "pi-acp"]);
        let path = format!("/nonexistent:{}", folder.path().display());
        let registry = BackendRegistry::from_env(&env_with(&[("PATH", &path)])).expect("registry");
        assert_eq!(
            command_of(&registry, "claude"),
            ("claude-agent-acp".into(), vec![])
        );
        assert_eq!(command_of(&registry, "codex"), ("codex-acp".into(), vec![]));
        assert_eq!(
            command_of(&registry, "opencode"),
            ("opencode".into(), strings(&["acp"]))
        );
        assert_eq!(command_of(&registry, "pi"), ("pi-acp".into(), vec![]));
    }

    #[test]
    fn non_executable_files_on_path_do_not_count() {
        let folder = tempfile::tempdir().expect("temp dir");
        std::fs::write(folder.path().join("claude-agent-acp"), "").expect("write");
        let path = folder.path().display().to_string();
        let registry = BackendRegistry::from_env(&env_with(&[("PATH", &path)])).expect("registry");
        assert_eq!(command_of(&registry, "claude").0, "npx");
    }

    #[test]
    fn command_variables_win_over_path() {
        let folder = fake_executables(&["claude-agent-acp", "codex-acp", "pi-acp"]);
        let path = folder.path().display().to_string();
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", &path),
            (env::CLAUDE_ACP_CMD, "/opt/claude"),
            (env::CLAUDE_ACP_ARGS, "  --one   --two "),
            (env::CODEX_ACP_CMD, "/opt/codex"),
            (env::CODEX_ACP_ARGS, "-c x=1"),
            (env::CODEX_ACP_BIN, "/opt/ignored"),
            (env::OPENCODE_ACP_CMD, "/opt/opencode"),
            (env::PI_ACP_CMD, "/opt/pi"),
            (env::PI_ACP_ARGS, "--offline"),
        ]))
        .expect("registry");
        assert_eq!(
            command_of(&registry, "claude"),
            ("/opt/claude".into(), strings(&["--one", "--two"]))
        );
        assert_eq!(
            command_of(&registry, "codex"),
            ("/opt/codex".into(), strings(&["-c", "x=1"]))
        );
        // An opencode override gets only the args given with it, not `acp`.
        assert_eq!(
            command_of(&registry, "opencode"),
            ("/opt/opencode".into(), vec![])
        );
        assert_eq!(
            command_of(&registry, "pi"),
            ("/opt/pi".into(), strings(&["--offline"]))
        );
    }

    #[test]
    fn codex_bin_is_used_when_no_command_is_set() {
        let folder = fake_executables(&["codex-acp"]);
        let path = folder.path().display().to_string();
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", &path),
            (env::CODEX_ACP_BIN, "/opt/codex-acp/bin.js"),
            (env::CODEX_ACP_ARGS, "--ignored"),
        ]))
        .expect("registry");
        assert_eq!(
            command_of(&registry, "codex"),
            ("/opt/codex-acp/bin.js".into(), vec![])
        );
    }

    #[test]
    fn custom_backends_parse_and_look_up_ignoring_case() {
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (
                env::BACKENDS,
                r#"{"Gemini": {"command": "gemini", "args": ["--acp"], "env": {"K": "v"}, "sessionMeta": {"a": 1}}}"#,
            ),
        ]))
        .expect("registry");
        let gemini = registry.get("gemini").expect("case-insensitive lookup");
        assert_eq!(gemini.id, "Gemini");
        assert_eq!(gemini.command, "gemini");
        assert_eq!(gemini.args, strings(&["--acp"]));
        assert_eq!(gemini.env.get("K").map(String::as_str), Some("v"));
        assert_eq!(gemini.session_meta, Some(json!({"a": 1})));
        assert_eq!(gemini.origin, BackendOrigin::Host);
        assert!(gemini.structured_output_tool, "offered unless turned off");
        assert!(registry.get("CLAUDE").is_some());
        let off = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (
                env::BACKENDS,
                r#"{"plain": {"command": "p", "structuredOutputTool": false}}"#,
            ),
        ]))
        .expect("registry");
        assert!(!off.get("plain").expect("plain").structured_output_tool);
    }

    #[test]
    fn custom_backend_errors_name_variable_backend_and_field() {
        let cases = [
            ("{not json", vec!["AGENTPRISM_BACKENDS", "not valid JSON"]),
            ("[1]", vec!["AGENTPRISM_BACKENDS", "must be a JSON object"]),
            (
                r#"{"x": 3}"#,
                vec!["AGENTPRISM_BACKENDS", "\"x\"", "must be an object"],
            ),
            (
                r#"{"x": {}}"#,
                vec!["AGENTPRISM_BACKENDS", "\"x\"", "`command`", "missing"],
            ),
            (
                r#"{"x": {"command": "  "}}"#,
                vec!["AGENTPRISM_BACKENDS", "\"x\"", "`command`"],
            ),
            (
                r#"{"x": {"command": 5}}"#,
                vec!["AGENTPRISM_BACKENDS", "\"x\"", "`command`"],
            ),
            (
                r#"{"x": {"command": "c", "args": "a b"}}"#,
                vec!["\"x\"", "`args`"],
            ),
            (
                r#"{"x": {"command": "c", "args": [1]}}"#,
                vec!["\"x\"", "`args`"],
            ),
            (
                r#"{"x": {"command": "c", "env": {"A": 1}}}"#,
                vec!["\"x\"", "`env`"],
            ),
            (
                r#"{"x": {"command": "c", "env": []}}"#,
                vec!["\"x\"", "`env`"],
            ),
            (
                r#"{"x": {"command": "c", "sessionMeta": 1}}"#,
                vec!["\"x\"", "`sessionMeta`"],
            ),
            (
                r#"{"x": {"command": "c", "fileRoots": ["relative/dir"]}}"#,
                vec!["\"x\"", "`fileRoots`", "absolute"],
            ),
            (
                r#"{"x": {"command": "c", "fileRoots": "/abs"}}"#,
                vec!["\"x\"", "`fileRoots`", "absolute"],
            ),
            (
                r#"{"x": {"command": "c", "structuredOutputTool": "no"}}"#,
                vec!["\"x\"", "`structuredOutputTool`", "true or false"],
            ),
            (
                r#"{"Codex": {"command": "c"}}"#,
                vec!["AGENTPRISM_BACKENDS", "\"Codex\"", "reserved"],
            ),
            (r#"{"PI": {"command": "c"}}"#, vec!["\"PI\"", "reserved"]),
            (
                r#"{"claude": {"command": "c", "maxConcurrent": 2}}"#,
                vec!["\"claude\"", "reserved", "`maxConcurrent`"],
            ),
            (r#"{"claude": {}}"#, vec!["\"claude\"", "reserved"]),
            (
                r#"{"claude": {"maxConcurrent": 0}}"#,
                vec!["AGENTPRISM_BACKENDS", "\"claude\"", "`maxConcurrent`"],
            ),
            (
                r#"{"x": {"command": "c", "maxConcurrent": -2}}"#,
                vec!["\"x\"", "`maxConcurrent`", "-2"],
            ),
            (
                r#"{"x": {"command": "c", "maxConcurrent": 2.5}}"#,
                vec!["\"x\"", "`maxConcurrent`", "2.5"],
            ),
            (
                r#"{"a": {"command": "c"}, "A": {"command": "d"}}"#,
                vec!["\"A\"", "twice"],
            ),
            (
                r#"{" ": {"command": "c"}}"#,
                vec!["AGENTPRISM_BACKENDS", "blank"],
            ),
        ];
        for (input, needles) in cases {
            let error = error_of(input);
            for needle in needles {
                assert!(
                    error.contains(needle),
                    "{input}: {error:?} should mention {needle}"
                );
            }
        }
    }

    #[test]
    fn script_backends_never_shadow_registered_names() {
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (env::BACKENDS, r#"{"mine": {"command": "host-mine"}}"#),
        ]))
        .expect("registry");
        let declared = json!({
            "MINE": {"command": "script-mine"},
            "claude": {"command": "evil"},
            "extra": {"command": "script-extra", "args": ["x"]},
        });
        let merged = registry.with_script_backends(&declared).expect("merged");
        assert_eq!(
            merged.get("mine").map(|b| b.command.as_str()),
            Some("host-mine")
        );
        assert_eq!(
            merged.get("claude").map(|b| b.command.as_str()),
            Some("npx")
        );
        let extra = merged.get("EXTRA").expect("script backend added");
        assert_eq!(extra.origin, BackendOrigin::Script);
        assert_eq!(extra.args, strings(&["x"]));
        // The original registry is untouched.
        assert!(registry.get("extra").is_none());
        assert_eq!(
            registry.with_script_backends(&Value::Null).expect("null"),
            registry
        );
    }

    #[test]
    fn script_backend_errors_name_meta_backends() {
        let registry = BackendRegistry::from_env(&env_with(&[("PATH", "")])).expect("registry");
        let error = registry
            .with_script_backends(&json!({"s": {"args": []}}))
            .expect_err("missing command");
        assert!(
            error.contains("meta.backends")
                && error.contains("\"s\"")
                && error.contains("`command`"),
            "{error}"
        );
        let error = registry
            .with_script_backends(&json!([]))
            .expect_err("not an object");
        assert!(error.contains("meta.backends"), "{error}");
        // A script may not widen what its own agent may read and write.
        let error = registry
            .with_script_backends(&json!({"s": {"command": "c", "fileRoots": ["/"]}}))
            .expect_err("fileRoots from a script");
        assert!(
            error.contains("\"s\"") && error.contains("`fileRoots`"),
            "{error}"
        );
    }

    #[test]
    fn file_roots_parse_as_absolute_folders() {
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (
                env::BACKENDS,
                r#"{"mine": {"command": "m", "fileRoots": ["/srv/shared"]}}"#,
            ),
        ]))
        .expect("registry");
        let backend = registry.get("mine").expect("registered");
        assert_eq!(
            backend.file_roots,
            vec![std::path::PathBuf::from("/srv/shared")]
        );
    }

    #[test]
    fn default_backend_follows_the_variable() {
        let registry = BackendRegistry::from_env(&env_with(&[
            ("PATH", ""),
            (env::BACKENDS, r#"{"mine": {"command": "m"}}"#),
        ]))
        .expect("registry");
        assert!(registry.default_backend(&env_with(&[])).is_none());
        let pick = |value: &str| {
            registry
                .default_backend(&env_with(&[(env::DEFAULT_BACKEND, value)]))
                .map(|b| b.id.clone())
        };
        assert_eq!(pick("MINE").as_deref(), Some("mine"));
        assert_eq!(pick("codex").as_deref(), Some("codex"));
        assert_eq!(pick("").as_deref(), Some("claude"));
        assert_eq!(pick("nope").as_deref(), Some("claude"));
    }
}
