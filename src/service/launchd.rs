//! The macOS LaunchAgent (daemon.md 2, Decision 3): the plist rendered from
//! `launchd/dev.agentprism.daemon.plist`, and the `launchctl` commands that load and unload it.
//!
//! Two traps shape this file. The program path must be stable: a Homebrew `Cellar/<version>/`
//! path disappears on upgrade and the job then fails forever (Watchman #357/#358), so such
//! paths are refused. And only `bootstrap`/`bootout` report failure through their exit code;
//! the legacy `load`/`unload` exit 0 whatever happened, so they are never used.

use std::path::{Path, PathBuf};

use super::{Result, ServiceError};

/// The job label, also the plist's file name without `.plist`.
pub(crate) const LABEL: &str = "dev.agentprism.daemon";
/// `launchd/dev.agentprism.daemon.plist` as shipped, with `@...@` placeholders.
pub(crate) const TEMPLATE: &str = include_str!("../../launchd/dev.agentprism.daemon.plist");
/// PATH given to the daemon when the installing shell had none: launchd's own is minimal
/// and agents (node, codex, claude) are found through PATH.
pub(crate) const DEFAULT_PATH: &str = "/usr/bin:/bin:/usr/sbin:/sbin";
/// `launchctl bootout` exit codes meaning "was not loaded" (ESRCH, and launchd's "could not
/// find service"): fine when installing over nothing or uninstalling twice.
pub(crate) const NOT_LOADED_EXIT_CODES: [i32; 2] = [3, 113];

/// `~/Library/LaunchAgents/dev.agentprism.daemon.plist`.
pub(crate) fn plist_path(home: &Path) -> PathBuf {
    home.join("Library")
        .join("LaunchAgents")
        .join(format!("{LABEL}.plist"))
}

/// `gui/<uid>`: the per-login-session domain LaunchAgents live in.
pub(crate) fn domain(uid: u32) -> String {
    format!("gui/{uid}")
}

/// `gui/<uid>/dev.agentprism.daemon`.
pub(crate) fn service_target(uid: u32) -> String {
    format!("gui/{uid}/{LABEL}")
}

/// Unloads the job. By service target rather than plist path, so it works whatever the plist
/// on disk now says, or when it is already gone.
pub(crate) fn bootout_args(uid: u32) -> Vec<String> {
    vec!["bootout".into(), service_target(uid)]
}

/// Clears a `launchctl disable` left from before, which would make bootstrap fail: the user
/// asked to install, so the job is meant to be enabled.
pub(crate) fn enable_args(uid: u32) -> Vec<String> {
    vec!["enable".into(), service_target(uid)]
}

/// Loads (and, through `RunAtLoad`, starts) the job from its plist.
pub(crate) fn bootstrap_args(uid: u32, plist: &Path) -> Vec<String> {
    vec![
        "bootstrap".into(),
        domain(uid),
        plist.to_string_lossy().into_owned(),
    ]
}

/// Starts the job now if loaded but not running (the shim's managed cold start).
pub(crate) fn kickstart_args(uid: u32) -> Vec<String> {
    vec!["kickstart".into(), service_target(uid)]
}

/// Whether a path names one version of a package, so it would vanish on upgrade: Homebrew's
/// `Cellar/<name>/<version>/` and Nix store paths.
pub(crate) fn is_versioned_path(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text.contains("/Cellar/") || text.starts_with("/nix/store/")
}

/// The plist for a daemon at `binary` (a stable path), logging to `log`, started in `home`,
/// with `environment` (which must hold PATH; the others follow it sorted by name).
pub(crate) fn render_plist(
    binary: &Path,
    home: &Path,
    log: &Path,
    environment: &[(String, String)],
) -> Result<String> {
    if is_versioned_path(binary) {
        return Err(ServiceError::Refused(format!(
            "{} is a versioned path that disappears on upgrade; point the LaunchAgent at a \
             stable one (~/.local/bin/agentprism or the package manager's bin symlink)",
            binary.display()
        )));
    }
    if !binary.is_absolute() {
        return Err(ServiceError::Refused(format!(
            "{} is not an absolute path; launchd needs one",
            binary.display()
        )));
    }
    let path = environment
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str())
        .unwrap_or(DEFAULT_PATH);
    let mut others: Vec<&(String, String)> = environment
        .iter()
        .filter(|(name, _)| name != "PATH")
        .collect();
    others.sort();
    let extra: Vec<String> = others
        .iter()
        .map(|(name, value)| {
            format!(
                "<key>{}</key>\n\t\t<string>{}</string>",
                xml_escape(name),
                xml_escape(value)
            )
        })
        .collect();
    let environment_block = if extra.is_empty() {
        String::new()
    } else {
        extra.join("\n\t\t")
    };
    let rendered = TEMPLATE
        .replace("@BINARY@", &xml_escape(&binary.to_string_lossy()))
        .replace("@PATH@", &xml_escape(path))
        .replace("@HOME@", &xml_escape(&home.to_string_lossy()))
        .replace("@LOG@", &xml_escape(&log.to_string_lossy()))
        .replace("<!-- @ENVIRONMENT@ -->", &environment_block);
    // The template's comment names the placeholders; drop blank lines a missing environment
    // left behind so the output stays tidy.
    Ok(rendered
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n")
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A property-list value, as far as our plist uses them.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Value {
        Dict(BTreeMap<String, Value>),
        Array(Vec<Value>),
        String(String),
        Integer(i64),
        Bool(bool),
    }

    impl Value {
        pub(crate) fn get(&self, key: &str) -> &Value {
            match self {
                Value::Dict(map) => map.get(key).unwrap_or_else(|| panic!("no key {key}")),
                other => panic!("not a dict: {other:?}"),
            }
        }
        pub(crate) fn has(&self, key: &str) -> bool {
            matches!(self, Value::Dict(map) if map.contains_key(key))
        }
        pub(crate) fn string(&self) -> &str {
            match self {
                Value::String(text) => text,
                other => panic!("not a string: {other:?}"),
            }
        }
    }

    /// A small XML plist reader for the tests: the prolog, comments, `<plist>`, and
    /// dict/array/string/integer/true/false elements. It rejects anything else, so a
    /// malformed template fails here rather than on a Mac.
    pub(crate) fn parse_plist(text: &str) -> Value {
        let mut reader = Reader { text, at: 0 };
        reader.skip_misc();
        reader.expect("<plist version=\"1.0\">");
        let value = reader.value();
        reader.skip_misc();
        reader.expect("</plist>");
        reader.skip_misc();
        assert_eq!(reader.at, text.len(), "trailing content");
        value
    }

    struct Reader<'a> {
        text: &'a str,
        at: usize,
    }

    impl<'a> Reader<'a> {
        fn rest(&self) -> &'a str {
            &self.text[self.at..]
        }

        /// Whitespace, `<?xml ...?>`, `<!DOCTYPE ...>` and comments.
        fn skip_misc(&mut self) {
            loop {
                let trimmed = self.rest().trim_start();
                self.at = self.text.len() - trimmed.len();
                let end = if trimmed.starts_with("<?") {
                    "?>"
                } else if trimmed.starts_with("<!--") {
                    "-->"
                } else if trimmed.starts_with("<!DOCTYPE") {
                    ">"
                } else {
                    return;
                };
                let close = trimmed.find(end).expect("unclosed markup") + end.len();
                self.at += close;
            }
        }

        fn expect(&mut self, token: &str) {
            assert!(
                self.rest().starts_with(token),
                "expected {token:?} at {:?}",
                &self.rest()[..self.rest().len().min(40)]
            );
            self.at += token.len();
        }

        fn text_until(&mut self, close: &str) -> String {
            let end = self.rest().find(close).expect("unclosed element");
            let raw = &self.rest()[..end];
            assert!(!raw.contains('<'), "markup inside text: {raw:?}");
            let value = raw
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&");
            self.at += end + close.len();
            value
        }

        fn value(&mut self) -> Value {
            self.skip_misc();
            if self.rest().starts_with("<dict>") {
                self.expect("<dict>");
                let mut map = BTreeMap::new();
                loop {
                    self.skip_misc();
                    if self.rest().starts_with("</dict>") {
                        self.expect("</dict>");
                        return Value::Dict(map);
                    }
                    self.expect("<key>");
                    let key = self.text_until("</key>");
                    let value = self.value();
                    assert!(map.insert(key.clone(), value).is_none(), "duplicate {key}");
                }
            } else if self.rest().starts_with("<array>") {
                self.expect("<array>");
                let mut items = Vec::new();
                loop {
                    self.skip_misc();
                    if self.rest().starts_with("</array>") {
                        self.expect("</array>");
                        return Value::Array(items);
                    }
                    items.push(self.value());
                }
            } else if self.rest().starts_with("<string>") {
                self.expect("<string>");
                Value::String(self.text_until("</string>"))
            } else if self.rest().starts_with("<integer>") {
                self.expect("<integer>");
                Value::Integer(self.text_until("</integer>").parse().expect("integer"))
            } else if self.rest().starts_with("<true/>") {
                self.expect("<true/>");
                Value::Bool(true)
            } else if self.rest().starts_with("<false/>") {
                self.expect("<false/>");
                Value::Bool(false)
            } else {
                panic!(
                    "unexpected plist content {:?}",
                    &self.rest()[..self.rest().len().min(40)]
                )
            }
        }
    }

    fn render() -> String {
        render_plist(
            Path::new("/Users/ada/.local/bin/agentprism"),
            Path::new("/Users/ada"),
            Path::new("/Users/ada/.agentprism/workflows/logs/daemon.log"),
            &[
                ("PATH".into(), "/opt/homebrew/bin:/usr/bin:/bin".into()),
                (
                    "AGENTPRISM_BACKENDS".into(),
                    r#"{"a":{"command":"x<y"}}"#.into(),
                ),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_shipped_template_is_a_well_formed_plist() {
        let plist = parse_plist(TEMPLATE);
        assert_eq!(plist.get("Label").string(), LABEL);
    }

    #[test]
    fn the_rendered_plist_holds_the_decided_keys() {
        let plist = parse_plist(&render());
        assert_eq!(plist.get("Label").string(), LABEL);
        assert_eq!(
            plist.get("ProgramArguments"),
            &Value::Array(
                [
                    "/Users/ada/.local/bin/agentprism",
                    "daemon",
                    "run",
                    "--managed=launchd"
                ]
                .map(|s| Value::String(s.into()))
                .to_vec()
            )
        );
        let environment = plist.get("EnvironmentVariables");
        assert_eq!(
            environment.get("PATH").string(),
            "/opt/homebrew/bin:/usr/bin:/bin"
        );
        assert_eq!(
            environment.get("AGENTPRISM_BACKENDS").string(),
            r#"{"a":{"command":"x<y"}}"#
        );
        let keep_alive = plist.get("KeepAlive");
        assert_eq!(keep_alive.get("SuccessfulExit"), &Value::Bool(false));
        assert_eq!(plist.get("RunAtLoad"), &Value::Bool(true));
        assert_eq!(plist.get("ThrottleInterval"), &Value::Integer(10));
        assert_eq!(plist.get("ExitTimeOut"), &Value::Integer(20));
        assert_eq!(plist.get("ProcessType").string(), "Standard");
        assert_eq!(plist.get("Umask"), &Value::Integer(0o077));
        assert_eq!(plist.get("AbandonProcessGroup"), &Value::Bool(false));
        let log = "/Users/ada/.agentprism/workflows/logs/daemon.log";
        assert_eq!(plist.get("StandardOutPath").string(), log);
        assert_eq!(plist.get("StandardErrorPath").string(), log);
        assert_eq!(plist.get("WorkingDirectory").string(), "/Users/ada");
        // launchd must not be told to daemonize or to keep a crash loop going.
        assert!(!plist.has("OnDemand"));
        assert!(!render().contains('@'), "placeholder left:\n{}", render());
    }

    #[test]
    fn without_a_path_the_minimal_default_is_used() {
        let text = render_plist(
            Path::new("/usr/local/bin/agentprism"),
            Path::new("/Users/ada"),
            Path::new("/tmp/daemon.log"),
            &[],
        )
        .unwrap();
        let plist = parse_plist(&text);
        let environment = plist.get("EnvironmentVariables");
        assert_eq!(environment.get("PATH").string(), DEFAULT_PATH);
        assert_eq!(environment, &{
            let mut map = BTreeMap::new();
            map.insert("PATH".to_string(), Value::String(DEFAULT_PATH.into()));
            Value::Dict(map)
        });
    }

    #[test]
    fn versioned_and_relative_program_paths_are_refused() {
        for binary in [
            "/opt/homebrew/Cellar/agentprism/0.1.0/bin/agentprism",
            "/nix/store/abc-agentprism-0.1.0/bin/agentprism",
            "bin/agentprism",
        ] {
            let result = render_plist(Path::new(binary), Path::new("/h"), Path::new("/l"), &[]);
            assert!(matches!(result, Err(ServiceError::Refused(_))), "{binary}");
        }
    }

    #[test]
    fn launchctl_plans_use_bootstrap_and_bootout_only() {
        let plist = plist_path(Path::new("/Users/ada"));
        assert_eq!(
            plist,
            Path::new("/Users/ada/Library/LaunchAgents/dev.agentprism.daemon.plist")
        );
        assert_eq!(
            bootout_args(501),
            ["bootout", "gui/501/dev.agentprism.daemon"]
        );
        assert_eq!(
            bootstrap_args(501, &plist),
            [
                "bootstrap",
                "gui/501",
                "/Users/ada/Library/LaunchAgents/dev.agentprism.daemon.plist"
            ]
        );
    }
}
