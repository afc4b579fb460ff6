//! Each host configured in a HOME of its own to use the fake model and agentprism, exactly as
//! docs/hosts.md shows: Claude Code (`--mcp-config` file), Codex (`~/.codex/config.toml`),
//! Gemini CLI and Qwen Code (`settings.json` and `trustedFolders.json` in `~/.gemini` and
//! `~/.qwen`) and opencode (an `opencode.json` named by `OPENCODE_CONFIG`); and how each is
//! started headless with a prompt.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::process::{HostProcess, Sweeper, command_line, create, processes_with_home, write};
use super::{Host, SERVER};
use crate::shim::World;
use crate::support::fake_host_model::FakeHostModel;

/// Where `scripts/install-test-deps` put the hosts.
pub(super) struct Deps {
    text: String,
    manifest: PathBuf,
}

impl Deps {
    pub(super) fn find() -> Deps {
        let manifest = deps_dir().join("interop-deps.env");
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|error| missing(&format!("{}: {error}", manifest.display())));
        Deps { text, manifest }
    }

    /// The manifest's path for `name`, which must exist.
    pub(super) fn get(&self, name: &str) -> PathBuf {
        let path = self
            .text
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
            .map(PathBuf::from)
            .unwrap_or_else(|| missing(&format!("{} has no {name}", self.manifest.display())));
        if !path.exists() {
            missing(&format!("{} does not exist", path.display()));
        }
        path
    }
}

fn deps_dir() -> PathBuf {
    std::env::var_os("AGENTPRISM_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

fn missing(what: &str) -> ! {
    panic!(
        "host test dependencies are missing ({what}); run `scripts/install-test-deps` \
         (it installs the hosts into {} from npm)",
        deps_dir().display()
    )
}

/// How the host reaches agentprism.
pub(super) enum Endpoint {
    /// The host launches `agentprism-workflow`.
    Shim,
    /// The daemon's `/mcp` URL.
    Http(String),
}

/// One host, configured in its own HOME to use the fake model and agentprism.
pub(super) struct HostSetup {
    host: Host,
    /// The program and the arguments before the prompt's.
    program: PathBuf,
    leading_args: Vec<String>,
    pub(super) home: PathBuf,
    project: PathBuf,
    /// The whole environment of the host process.
    env: Vec<(String, String)>,
    /// Claude Code's `--mcp-config` file.
    mcp_config: PathBuf,
    output_dir: PathBuf,
    /// Kills what still carries this HOME when the test ends, pass or fail.
    _sweeper: Sweeper,
}

/// What every host's configuration is written from.
struct Inputs<'a> {
    endpoint: &'a Endpoint,
    /// The shim's path, for stdio.
    shim: PathBuf,
    /// The `AGENTPRISM_*` variables of the test's world, for the server's env.
    agentprism_env: Map<String, Value>,
    fake: &'a FakeHostModel,
    home: &'a Path,
    project: &'a Path,
}

impl HostSetup {
    pub(super) fn new(
        host: Host,
        endpoint: Endpoint,
        world: &World,
        fake: &FakeHostModel,
        deps: &Deps,
    ) -> HostSetup {
        let context = &world.context;
        let home = context.path("host-home");
        let output_dir = context.path("host-output");
        for folder in [&home, &output_dir] {
            std::fs::create_dir_all(folder)
                .unwrap_or_else(|error| panic!("create {}: {error}", folder.display()));
        }
        // What agentprism needs goes in the server's `env` in the host's config: Codex passes
        // only HOME and PATH to MCP servers, Gemini CLI and Qwen Code scrub what looks like a
        // secret (docs/hosts.md).
        let agentprism_env: Map<String, Value> = context
            .env
            .iter()
            .filter(|(key, _)| key.starts_with("AGENTPRISM_"))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        let node = deps.get("node");
        let node_dir = node.parent().expect("node has a folder");
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display());
        let mut env = vec![
            ("PATH".to_owned(), path),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        let project = context.project();
        let inputs = Inputs {
            endpoint: &endpoint,
            shim: PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow")),
            agentprism_env,
            fake,
            home: &home,
            project: &project,
        };
        let mcp_config = home.join("mcp.json");
        let (program, leading_args, host_env) = match host {
            Host::ClaudeCode => (deps.get("claude"), Vec::new(), claude_code(&inputs)),
            Host::Codex => (deps.get("codex"), Vec::new(), codex(&inputs)),
            // The Node hosts run as `node <entry>`, so that killing "the host" kills the host
            // and not a launcher that spawned it.
            Host::GeminiCli => (node, vec![deps.get("gemini_entry")], gemini_cli(&inputs)),
            // Qwen Code's bin script would run this one in a child Node with `--expose-gc`.
            Host::QwenCode => (
                node,
                vec!["--expose-gc".into(), deps.get("qwen_entry")],
                qwen_code(&inputs),
            ),
            Host::Opencode => (
                deps.get("opencode_bin"),
                vec!["run".into()],
                opencode(&inputs),
            ),
        };
        env.extend(host_env);
        HostSetup {
            host,
            program,
            leading_args: leading_args
                .into_iter()
                .map(|arg| arg.into_os_string().into_string().expect("a UTF-8 path"))
                .collect(),
            _sweeper: Sweeper { home: home.clone() },
            home,
            project,
            env,
            mcp_config,
            output_dir,
        }
    }

    /// Starts one host session in its non-interactive mode with `prompt`.
    pub(super) fn spawn(&self, label: &str, prompt: &str) -> HostProcess {
        let mut command = Command::new(&self.program);
        command.args(&self.leading_args);
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
            Host::GeminiCli | Host::QwenCode => {
                command.arg("-p").arg(prompt);
            }
            Host::Opencode => {
                command.arg(prompt);
            }
        }
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
            .unwrap_or_else(|error| panic!("spawn {}: {error}", self.program.display()));
        HostProcess {
            child: Some(child),
            stdout,
            stderr,
        }
    }

    /// The shim of a killed host ends by itself (its parent process is gone).
    pub(super) fn assert_no_shim_left(&self) {
        let started = Instant::now();
        loop {
            let shims: Vec<i32> = processes_with_home(&self.home)
                .into_iter()
                .filter(|pid| command_line(*pid).contains("agentprism-workflow"))
                .collect();
            if shims.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the shim outlived its killed host: {shims:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

type Env = Vec<(String, String)>;

fn pairs(list: &[(&str, &str)]) -> Env {
    list.iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn claude_code(inputs: &Inputs) -> Env {
    let server = match inputs.endpoint {
        Endpoint::Shim => json!({
            "type": "stdio", "command": inputs.shim, "args": [], "env": inputs.agentprism_env,
        }),
        Endpoint::Http(url) => json!({"type": "http", "url": url}),
    };
    let config = json!({"mcpServers": {SERVER: server}});
    write(&inputs.home.join("mcp.json"), &format!("{config:#}"));
    let base_url = inputs.fake.base_url();
    let mut env = pairs(&[
        ("ANTHROPIC_BASE_URL", &base_url),
        ("ANTHROPIC_API_KEY", "fake-key"),
        // No telemetry, error reports, update checks or other side traffic.
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("MCP_TIMEOUT", "60000"),
    ]);
    if nix::unistd::geteuid().is_root() {
        // Claude Code refuses some modes as root outside a declared sandbox.
        env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
    }
    env
}

fn codex(inputs: &Inputs) -> Env {
    let server = match inputs.endpoint {
        Endpoint::Shim => {
            let env_table: Vec<String> = inputs
                .agentprism_env
                .iter()
                .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                .collect();
            format!(
                "command = {}\nargs = []\nenv = {{ {} }}\n",
                toml_string(&json!(inputs.shim)),
                env_table.join(", ")
            )
        }
        Endpoint::Http(url) => format!("url = {}\n", toml_string(&json!(url))),
    };
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
         {server}\
         startup_timeout_sec = 60\n\
         # Above agentprism's 120 s preparation limit (the default is 60 s).\n\
         tool_timeout_sec = 180\n\
         # codex exec cannot ask; without this the workflow call is refused.\n\
         default_tools_approval_mode = \"approve\"\n",
        base_url = toml_string(&json!(inputs.fake.openai_base_url())),
    );
    write(&inputs.home.join(".codex/config.toml"), &config);
    pairs(&[("FAKE_MODEL_KEY", "fake-key")])
}

/// The `mcpServers` entry Gemini CLI and Qwen Code share: `trust` lets headless mode call the
/// tool without a confirmation it cannot ask for.
fn gemini_style_server(inputs: &Inputs) -> Value {
    match inputs.endpoint {
        Endpoint::Shim => json!({
            "command": inputs.shim, "args": [], "env": inputs.agentprism_env, "trust": true,
        }),
        Endpoint::Http(url) => json!({"httpUrl": url, "trust": true}),
    }
}

/// A trusted project folder: untrusted, Gemini CLI refuses to run headless and Qwen Code
/// connects to no MCP server.
fn trust_project(folder: &Path, project: &Path) {
    let trusted = json!({project.display().to_string(): "TRUST_FOLDER"});
    write(&folder.join("trustedFolders.json"), &format!("{trusted:#}"));
}

fn gemini_cli(inputs: &Inputs) -> Env {
    let folder = inputs.home.join(".gemini");
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "mcpServers": {SERVER: gemini_style_server(inputs)},
    });
    write(&folder.join("settings.json"), &format!("{settings:#}"));
    trust_project(&folder, inputs.project);
    let base_url = inputs.fake.base_url();
    pairs(&[
        ("GEMINI_API_KEY", "fake-key"),
        ("GOOGLE_GEMINI_BASE_URL", &base_url),
        // Else `gemini` runs the CLI in a child Node process (for a larger heap), and killing
        // the launcher would leave the host and its MCP servers running.
        ("GEMINI_CLI_NO_RELAUNCH", "true"),
    ])
}

fn qwen_code(inputs: &Inputs) -> Env {
    let folder = inputs.home.join(".qwen");
    let settings = json!({
        "security": {"auth": {"selectedType": "openai"}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "mcpServers": {SERVER: gemini_style_server(inputs)},
    });
    write(&folder.join("settings.json"), &format!("{settings:#}"));
    trust_project(&folder, inputs.project);
    let base_url = inputs.fake.openai_base_url();
    pairs(&[
        ("OPENAI_API_KEY", "fake-key"),
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_MODEL", "fake-model"),
    ])
}

fn opencode(inputs: &Inputs) -> Env {
    let server = match inputs.endpoint {
        Endpoint::Shim => json!({
            "type": "local", "command": [inputs.shim], "environment": inputs.agentprism_env,
        }),
        Endpoint::Http(url) => json!({"type": "remote", "url": url}),
    };
    // `@ai-sdk/openai-compatible` ships inside the opencode binary, so this provider loads
    // offline.
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": inputs.fake.openai_base_url(), "apiKey": "fake-key"},
            "models": {"fake-model": {"name": "Fake model", "tool_call": true}},
        }},
        "model": "fake/fake-model",
        "autoupdate": false,
        "share": "disabled",
        "mcp": {SERVER: server},
    });
    let path = inputs.home.join("opencode.json");
    write(&path, &format!("{config:#}"));
    pairs(&[
        ("OPENCODE_CONFIG", &path.display().to_string()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ])
}

/// A TOML basic string: JSON string escapes are valid TOML ones for what we write.
fn toml_string(value: &Value) -> String {
    match value {
        Value::String(text) => Value::String(text.clone()).to_string(),
        other => Value::String(other.to_string()).to_string(),
    }
}
