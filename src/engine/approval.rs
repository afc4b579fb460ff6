//! The backend-approval setup: what a user is shown before a script's `meta.backends`
//! commands may run, and what a declined approval means.
//!
//! The request shows every declared backend exactly as it would be started: the command and
//! each argument quoted so the line can be pasted into a shell and means the same thing, and
//! every `env` entry. A value is masked only because of its variable's *name* (`*_KEY`,
//! `*_TOKEN`, `*SECRET*`, `*PASSWORD*`, any case), never for `LD_*`, `PATH` or
//! `NODE_OPTIONS`, which change what the command does and must be seen. Masking by value
//! would let a script hide `LD_PRELOAD=/tmp/x.so` behind something that looks like a token.
//!
//! A declined or cancelled approval is final (docs/api.md, "setup_declined"): the run stays
//! `aborted` and resume refuses it, unlike other aborted runs (engine.md Decision 5).

use std::collections::BTreeMap;

use serde_json::json;

use crate::engine::runner::BackendSpec;
use crate::model::{RunRecord, SetupKind, SetupRequest, SetupState, SetupWait, ShownBackend};

/// The `reason` of a run whose backend approval was declined or cancelled.
pub(crate) const SETUP_DECLINED: &str = "setup_declined";

/// What a masked `env` value is shown as.
pub(crate) const MASKED: &str = "<masked>";

/// The pending setup of a run whose script declares `backends`.
pub(crate) fn backend_approval_setup(declared: &BTreeMap<String, BackendSpec>) -> SetupWait {
    let backends: Vec<ShownBackend> = declared.values().map(describe_backend).collect();
    let lines: Vec<String> = backends
        .iter()
        .map(|backend| format!("  {}: {}", backend.name, backend.command_line))
        .collect();
    SetupWait {
        state: SetupState::InputRequired,
        request: SetupRequest {
            id: uuid::Uuid::new_v4().to_string(),
            kind: SetupKind::BackendApproval,
            title: "Approve the script's agent backends".to_owned(),
            message: format!(
                "The script declares backends that run these commands as you (environment first, \
                 values of secret-looking names masked):\n{}\nApprove only if you trust every one. \
                 Declining is final: the run stays aborted and cannot be resumed.",
                lines.join("\n")
            ),
            backends,
            requested_schema: json!({
                "type": "object",
                "properties": {"approve": {"type": "boolean"}},
                "required": ["approve"],
                "additionalProperties": false
            }),
        },
        answer: None,
    }
}

/// Whether `record` is a run whose backend approval was declined or cancelled.
pub(crate) fn setup_declined(record: &RunRecord) -> bool {
    record
        .setup
        .as_ref()
        .is_some_and(|setup| setup.state == SetupState::Declined)
}

/// Whether `record` has no setup, or one whose approval was given. A run whose setup was
/// never approved has not been allowed to start its script's backends, so it may not run.
pub(crate) fn setup_approved(record: &RunRecord) -> bool {
    record
        .setup
        .as_ref()
        .is_none_or(|setup| setup.state == SetupState::Approved)
}

/// Records an unanswered setup as cancelled (a `stop` of a run waiting for approval).
/// Returns whether there was one.
pub(crate) fn cancel_pending_setup(record: &mut RunRecord) -> bool {
    let Some(setup) = record.setup.as_mut() else {
        return false;
    };
    if setup.answer.is_some() {
        return false;
    }
    setup.answer_with(json!({"action": "cancel"}), false);
    true
}

/// One backend as the request shows it: `{name, command, args, env, commandLine}`.
fn describe_backend(backend: &BackendSpec) -> ShownBackend {
    let env: BTreeMap<String, String> = backend
        .env
        .iter()
        .map(|(name, value)| (name.clone(), shown_value(name, value)))
        .collect();
    let mut words: Vec<String> = Vec::new();
    if !backend.env.is_empty() {
        words.push("env".into());
        for (name, value) in &backend.env {
            words.push(assignment(name, value));
        }
    }
    words.push(shell_quote(&backend.command));
    words.extend(backend.args.iter().map(|arg| shell_quote(arg)));
    ShownBackend {
        name: backend.id.clone(),
        command: backend.command.clone(),
        args: backend.args.clone(),
        env,
        command_line: words.join(" "),
    }
}

/// `NAME=value` as one shell word, with the value masked if the name says it is a secret.
fn assignment(name: &str, value: &str) -> String {
    if is_masked(name) {
        return format!("{}={MASKED}", quote_name(name));
    }
    if is_plain_name(name) {
        format!("{name}={}", shell_quote(value))
    } else {
        shell_quote(&format!("{name}={value}"))
    }
}

fn quote_name(name: &str) -> String {
    if is_plain_name(name) {
        name.to_owned()
    } else {
        shell_quote(name)
    }
}

fn shown_value(name: &str, value: &str) -> String {
    if is_masked(name) {
        MASKED.to_owned()
    } else {
        value.to_owned()
    }
}

/// Whether an `env` value is masked: by its name only, and never for the variables that
/// change what a process loads or runs.
pub(crate) fn is_masked(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("LD_") || upper == "PATH" || upper == "NODE_OPTIONS" {
        return false;
    }
    upper.ends_with("_KEY")
        || upper.ends_with("_TOKEN")
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
}

/// A shell variable name (`[A-Za-z_][A-Za-z0-9_]*`), which needs no quoting before `=`.
fn is_plain_name(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && characters.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Quotes one word for a POSIX shell so that it reads back as exactly `word`.
///
/// Words of only safe characters stay bare; others are single-quoted (`'` becomes `'\''`).
/// A word with control characters or invisible format characters (bidi overrides,
/// zero-width spaces) is written as bash's `$'…'` with escapes instead, so nothing in it can
/// hide or reorder what is shown; bash, zsh and ksh read that form back exactly.
pub(crate) fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c))
    {
        return word.to_owned();
    }
    if word.chars().any(is_deceptive) {
        let mut out = String::from("$'");
        for c in word.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if is_deceptive(c) => out.push_str(&format!("\\U{:08x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('\'');
        return out;
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Characters that would not show as themselves in a terminal or a chat window.
fn is_deceptive(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{00AD}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runner::BackendOrigin;

    fn spec(command: &str, args: &[&str], env: &[(&str, &str)]) -> BackendSpec {
        BackendSpec {
            id: "evil".into(),
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            session_meta: None,
            structured_output_tool: true,
            file_roots: Vec::new(),
            origin: BackendOrigin::Script,
        }
    }

    /// What `sh -c 'printf "%s\0" <line>'` reads the words back as.
    fn shell_words(line: &str, shell: &str) -> Vec<String> {
        let output = std::process::Command::new(shell)
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .expect("run the shell");
        assert!(output.status.success(), "{shell} failed on {line}");
        String::from_utf8(output.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn quoting_round_trips_through_a_shell() {
        let words = [
            "plain",
            "",
            "two words",
            "it's",
            "'",
            "''",
            "a\\b",
            "$HOME",
            "`id`",
            "$(id)",
            "; rm -rf ~",
            "*",
            "~",
            "!x",
            "\"q\"",
            "tab\there",
            "line\nbreak",
            "cr\roverwrite",
            "esc\u{1b}[2Jclear",
            "bidi\u{202E}txt.exe",
            "zero\u{200B}width",
            "ünïcödé",
        ];
        let line: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
        let line = line.join(" ");
        assert_eq!(shell_words(&line, "bash"), words, "{line}");
        // Words without control characters use only POSIX quoting.
        let posix: Vec<&str> = words
            .iter()
            .copied()
            .filter(|w| !w.chars().any(is_deceptive))
            .collect();
        let posix_line: Vec<String> = posix.iter().map(|w| shell_quote(w)).collect();
        assert_eq!(shell_words(&posix_line.join(" "), "sh"), posix);
    }

    #[test]
    fn deceptive_characters_never_appear_raw() {
        for word in ["a\rb", "a\u{1b}b", "a\u{202E}b", "a\u{200B}b", "a\nb"] {
            let quoted = shell_quote(word);
            assert!(quoted.starts_with("$'"), "{quoted:?}");
            assert!(!quoted.chars().any(is_deceptive), "{quoted:?}");
        }
    }

    #[test]
    fn masks_by_name_only() {
        for name in [
            "OPENAI_API_KEY",
            "api_key",
            "GH_TOKEN",
            "my_secret",
            "CLIENT_SECRET_FILE",
            "DB_PASSWORD",
            "passwordless",
        ] {
            assert!(is_masked(name), "{name}");
        }
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_SECRET_KEY",
            "PATH",
            "NODE_OPTIONS",
            "HOME",
            "KEYS",
            "TOKENIZER",
            "BASH_ENV",
        ] {
            assert!(!is_masked(name), "{name}");
        }
    }

    #[test]
    fn the_request_shows_command_args_and_env() {
        let mut declared = BTreeMap::new();
        declared.insert(
            "evil".to_owned(),
            spec(
                "/bin/sh",
                &["-c", "id > ~/pwned; echo 'done'"],
                &[
                    ("LD_PRELOAD", "/tmp/evil.so"),
                    ("NODE_OPTIONS", "--require /tmp/x.js"),
                    ("OPENAI_API_KEY", "sk-live-1234"),
                ],
            ),
        );
        let setup = serde_json::to_value(backend_approval_setup(&declared)).unwrap();
        let request = &setup["request"];
        let expected = "env LD_PRELOAD=/tmp/evil.so NODE_OPTIONS='--require /tmp/x.js' \
                        OPENAI_API_KEY=<masked> /bin/sh -c 'id > ~/pwned; echo '\\''done'\\'''";
        assert_eq!(request["backends"][0]["commandLine"], expected);
        let message = request["message"].as_str().unwrap();
        assert!(message.contains(&format!("evil: {expected}")), "{message}");
        assert!(!message.contains("sk-live"), "{message}");
        assert_eq!(request["backends"][0]["env"]["LD_PRELOAD"], "/tmp/evil.so");
        assert_eq!(request["backends"][0]["env"]["OPENAI_API_KEY"], MASKED);
        assert_eq!(
            request["backends"][0]["args"],
            json!(["-c", "id > ~/pwned; echo 'done'"])
        );
    }

    /// The setup admission stores and the run answer shows, byte for byte as the engine
    /// has always written it (only the request id is fresh each time).
    #[test]
    fn the_setup_json_keeps_its_bytes() {
        let mut declared = BTreeMap::new();
        declared.insert(
            "evil".to_owned(),
            spec(
                "/opt/mine-acp",
                &["--flag"],
                &[("OPENAI_API_KEY", "sk"), ("LD_PRELOAD", "/tmp/x.so")],
            ),
        );
        let setup = backend_approval_setup(&declared);
        let text = serde_json::to_string(&setup).expect("serialize");
        let expected = r#"{"state":"input-required","request":{"id":"ID","kind":"backend-approval","title":"Approve the script's agent backends","message":"The script declares backends that run these commands as you (environment first, values of secret-looking names masked):\n  evil: env LD_PRELOAD=/tmp/x.so OPENAI_API_KEY=<masked> /opt/mine-acp --flag\nApprove only if you trust every one. Declining is final: the run stays aborted and cannot be resumed.","backends":[{"name":"evil","command":"/opt/mine-acp","args":["--flag"],"env":{"LD_PRELOAD":"/tmp/x.so","OPENAI_API_KEY":"<masked>"},"commandLine":"env LD_PRELOAD=/tmp/x.so OPENAI_API_KEY=<masked> /opt/mine-acp --flag"}],"requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"],"additionalProperties":false}}}"#;
        assert_eq!(
            text,
            expected.replace("\"ID\"", &json!(setup.request.id).to_string())
        );
    }
}
