//! The hosts' harness for `host_answers`: where the test dependencies put the hosts, a host in
//! a HOME of its own with agentprism's stdio shim, its process (batch or on a terminal), and
//! the sweep of what it leaves running.

use super::*;
pub(super) use crate::hosts::process::{HostProcess, Sweeper, create, write};

/// Where `scripts/install-test-deps` put the hosts.
pub(super) struct Deps {
    pub(super) claude: PathBuf,
    pub(super) codex: PathBuf,
    pub(super) node: PathBuf,
}

impl Deps {
    pub(super) fn find() -> Deps {
        let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
        let manifest = dir.join("interop-deps.env");
        let missing = |what: &str| -> ! {
            panic!(
                "host test dependencies are missing ({what}); run `scripts/install-test-deps` \
                 (it installs Claude Code and Codex into {} from npm)",
                dir.display()
            )
        };
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|error| missing(&format!("{}: {error}", manifest.display())));
        let field = |name: &str| {
            let path = text
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(PathBuf::from)
                .unwrap_or_else(|| missing(&format!("{} has no {name}", manifest.display())));
            if !path.is_file() {
                missing(&format!("{} does not exist", path.display()));
            }
            path
        };
        Deps {
            claude: field("claude"),
            codex: field("codex"),
            node: field("node"),
        }
    }
}

/// One host in its own HOME, using the fake model and agentprism's stdio shim.
pub(super) struct HostSetup {
    pub(super) host: Host,
    pub(super) binary: PathBuf,
    pub(super) project: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) mcp_config: PathBuf,
    pub(super) output_dir: PathBuf,
    pub(super) _sweeper: Sweeper,
}

impl HostSetup {
    pub(super) fn new(
        host: Host,
        world: &World,
        fake: &FakeHostModel,
        deps: &Deps,
        extra_env: &[(&str, &str)],
    ) -> HostSetup {
        let context = &world.context;
        let home = context.path("host-home");
        let output_dir = context.path("host-output");
        for folder in [&home, &output_dir] {
            std::fs::create_dir_all(folder)
                .unwrap_or_else(|error| panic!("create {}: {error}", folder.display()));
        }
        let agentprism_env: serde_json::Map<String, Value> = context
            .env
            .iter()
            .filter(|(key, _)| key.starts_with("AGENTPRISM_"))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        let shim = PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow"));
        let node_dir = deps.node.parent().expect("node has a folder");
        let mut env = vec![
            (
                "PATH".to_owned(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display()),
            ),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        );
        let mcp_config = home.join("mcp.json");
        let binary = match host {
            Host::ClaudeCode => {
                let server =
                    json!({"type": "stdio", "command": shim, "args": [], "env": agentprism_env});
                write(
                    &mcp_config,
                    &format!("{:#}", json!({"mcpServers": {SERVER: server}})),
                );
                env.extend(
                    [
                        ("ANTHROPIC_BASE_URL", fake.base_url().as_str()),
                        ("ANTHROPIC_API_KEY", "fake-key"),
                        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                        ("DISABLE_AUTOUPDATER", "1"),
                        ("DISABLE_TELEMETRY", "1"),
                        ("DISABLE_ERROR_REPORTING", "1"),
                        ("MCP_TIMEOUT", "60000"),
                    ]
                    .map(|(key, value)| (key.to_owned(), value.to_owned())),
                );
                if nix::unistd::geteuid().is_root() {
                    env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
                }
                deps.claude.clone()
            }
            Host::Codex => {
                let env_table: Vec<String> = agentprism_env
                    .iter()
                    .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                    .collect();
                let config = format!(
                    "model = \"fake-model\"\n\
                     model_provider = \"fake\"\n\
                     check_for_update_on_startup = false\n\
                     \n\
                     [model_providers.fake]\n\
                     name = \"fake model\"\n\
                     base_url = {base_url}\n\
                     wire_api = \"responses\"\n\
                     env_key = \"FAKE_MODEL_KEY\"\n\
                     request_max_retries = 0\n\
                     stream_max_retries = 0\n\
                     \n\
                     [mcp_servers.{SERVER}]\n\
                     command = {command}\n\
                     args = []\n\
                     env = {{ {env_table} }}\n\
                     startup_timeout_sec = 60\n\
                     tool_timeout_sec = 180\n\
                     default_tools_approval_mode = \"approve\"\n",
                    base_url = toml_string(&json!(fake.openai_base_url())),
                    command = toml_string(&json!(shim)),
                    env_table = env_table.join(", "),
                );
                write(&home.join(".codex/config.toml"), &config);
                env.push(("FAKE_MODEL_KEY".to_owned(), "fake-key".to_owned()));
                deps.codex.clone()
            }
        };
        HostSetup {
            host,
            binary,
            _sweeper: Sweeper { home },
            project: context.project(),
            env,
            mcp_config,
            output_dir,
        }
    }

    /// Starts one host session in its non-interactive mode with `prompt`.
    pub(super) fn spawn(&self, label: &str, prompt: &str, extra_args: &[&str]) -> HostProcess {
        let mut command = Command::new(&self.binary);
        match self.host {
            Host::ClaudeCode => {
                command
                    .arg("-p")
                    .arg(prompt)
                    .arg("--mcp-config")
                    .arg(&self.mcp_config)
                    .arg("--strict-mcp-config")
                    .args(["--allowedTools", &format!("mcp__{SERVER}__workflow")]);
            }
            Host::Codex => {
                command
                    .args(["exec", "--skip-git-repo-check", "--color", "never"])
                    .arg(prompt);
            }
        }
        command.args(extra_args);
        let stdout = self.output_dir.join(format!("{label}.stdout"));
        let stderr = self.output_dir.join(format!("{label}.stderr"));
        let child = command
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(create(&stdout))
            .stderr(create(&stderr))
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {}: {error}", self.binary.display()));
        HostProcess {
            child: Some(child),
            stdout,
            stderr,
        }
    }
}

impl HostSetup {
    /// Starts Claude Code's interactive mode with `prompt` as its first message, on a
    /// terminal of its own (`script` allocates it), after marking onboarding, the project's
    /// trust dialog and the API key as answered in its configuration.
    pub(super) fn spawn_interactive(
        &self,
        label: &str,
        prompt: &str,
        extra_args: &[&str],
    ) -> Interactive {
        let key = "fake-key";
        let config = json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [key], "rejected": []},
            "projects": {self.project.display().to_string(): {"hasTrustDialogAccepted": true}},
            // Claude Code's channels are behind its `tengu_harbor` feature flag, which its
            // service turns on for accounts in the research preview; offline, the test gives
            // the value in the flags cache and lets Claude Code read it
            // (`CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF`).
            "cachedGrowthBookFeatures": {"tengu_harbor": true},
        });
        let home = self
            .env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .expect("HOME");
        write(&home.join(".claude.json"), &config.to_string());
        let mut words = vec![self.binary.display().to_string(), prompt.to_owned()];
        words.extend([
            "--mcp-config".to_owned(),
            self.mcp_config.display().to_string(),
            "--strict-mcp-config".to_owned(),
            "--allowedTools".to_owned(),
            format!("mcp__{SERVER}__workflow"),
        ]);
        words.extend(extra_args.iter().map(|arg| (*arg).to_owned()));
        let command: Vec<String> = words
            .iter()
            .map(|word| format!("'{}'", word.replace('\'', "'\\''")))
            .collect();
        let stdout = self.output_dir.join(format!("{label}.screen"));
        let child = Command::new("script")
            .args(["-qfec", &format!("exec {}", command.join(" ")), "/dev/null"])
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .env("TERM", "xterm-256color")
            .env("CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF", "1")
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(create(&stdout))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("spawn script (util-linux) for Claude Code: {error}"));
        Interactive {
            child,
            screen: stdout,
        }
    }
}

/// An interactive host on a terminal; its process group is killed when it is dropped.
pub(super) struct Interactive {
    pub(super) child: Child,
    /// What the terminal was sent.
    pub(super) screen: PathBuf,
}

impl Interactive {
    /// Waits until the terminal shows `text` (compared without spaces, as cursor moves
    /// stand between the words), then types `keys`.
    pub(super) fn answer(&mut self, text: &str, keys: &str) {
        let wanted: String = text.split_whitespace().collect();
        let started = Instant::now();
        loop {
            let shown = visible(&std::fs::read(&self.screen).unwrap_or_default());
            if shown.contains(&wanted) {
                break;
            }
            assert!(
                started.elapsed() < CHANNEL_DEADLINE,
                "the terminal never showed {text:?}: {shown}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("the terminal's input");
        stdin
            .write_all(keys.as_bytes())
            .expect("type on the terminal");
        stdin.flush().expect("type on the terminal");
    }
}

/// The printable text of terminal output, without escape sequences and whitespace.
pub(super) fn visible(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut shown = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter; other escapes: ESC and one character.
            if chars.next_if_eq(&'[').is_some() {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() || c == '~' {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if !c.is_whitespace() && !c.is_control() {
            shown.push(c);
        }
    }
    shown
}

impl Drop for Interactive {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A TOML basic string: JSON string escapes are valid TOML ones for what we write.
pub(super) fn toml_string(value: &Value) -> String {
    match value {
        Value::String(text) => Value::String(text.clone()).to_string(),
        other => Value::String(other.to_string()).to_string(),
    }
}
