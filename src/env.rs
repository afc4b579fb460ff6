//! Every environment variable agentprism reads, one documented constant each, and the
//! snapshot the process takes of them at start (the daemon resolves its backends once).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Absolute root for the run store and logs (default `~/.agentprism/workflows`).
pub(crate) const PERSISTENCE_ROOT: &str = "AGENTPRISM_PERSISTENCE_ROOT";
/// Custom ACP backends as a JSON object `{"<name>": {command, args?, env?, sessionMeta?}}`.
pub const BACKENDS: &str = "AGENTPRISM_BACKENDS";
/// Fallback backend for model strings that name no registered backend.
pub(crate) const DEFAULT_BACKEND: &str = "AGENTPRISM_DEFAULT_BACKEND";
/// `1`/`true` approves script-declared `meta.backends` without a setup answer.
pub(crate) const ALLOW_SCRIPT_BACKENDS: &str = "AGENTPRISM_ALLOW_SCRIPT_BACKENDS";
/// Deadline for a backend's ACP `initialize` handshake, in ms (default 60000).
pub(crate) const ACP_INIT_TIMEOUT_MS: &str = "AGENTPRISM_ACP_INIT_TIMEOUT_MS";
/// Long-lived ACP processes per backend (default 1, at least 1).
pub(crate) const ACP_POOL_SIZE: &str = "AGENTPRISM_ACP_POOL_SIZE";
/// How long a pooled ACP process may sit with no session before it is stopped, in ms
/// (default 60000; `0` keeps idle processes until the process exits).
pub(crate) const ACP_IDLE_TTL_MS: &str = "AGENTPRISM_ACP_IDLE_TTL_MS";
/// The prompt-cache hold's cap in ms (default 10000, at most 120000; `0` turns it off): how long
/// a call whose prompt begins like an earlier call's waits for that call's answer to begin.
pub(crate) const PROMPT_CACHE_HOLD_MS: &str = "AGENTPRISM_PROMPT_CACHE_HOLD_MS";
/// Per-attempt ceiling of one agent prompt turn, in ms (default 1800000 = 30 min).
pub(crate) const AGENT_TIMEOUT_MS: &str = "AGENTPRISM_AGENT_TIMEOUT_MS";
/// Whether a run paused on a provider's usage limit resumes by itself at the reset: `on`
/// (default: up to 3 automatic resumes in a row), `off`, or the number allowed in a row
/// (0..100).
pub(crate) const AUTO_RESUME: &str = "AGENTPRISM_AUTO_RESUME";
/// Longest synchronous stretch of script code before it is stopped as a runaway, in ms
/// (default 10000).
pub(crate) const SCRIPT_SLICE_MS: &str = "AGENTPRISM_SCRIPT_SLICE_MS";
/// Memory cap of one script's JS heap, in MiB (default 64).
pub(crate) const SCRIPT_MEMORY_MIB: &str = "AGENTPRISM_SCRIPT_MEMORY_MIB";
/// How far a SQLite store's commit is on disk when it returns: `full` (default: synced, so it
/// survives a power cut) or `normal` (survives a process crash; an OS crash or power cut may
/// drop the last commits).
pub const STORE_SYNC: &str = "AGENTPRISM_STORE_SYNC";

/// Folder of the user's saved workflows (default `$XDG_CONFIG_HOME/agentprism/workflows` when
/// that variable is an absolute path, else `~/.config/agentprism/workflows`).
pub const WORKFLOWS_DIR: &str = "AGENTPRISM_WORKFLOWS_DIR";
/// Agent calls above which a run needs a confirmation before it starts (default 100; `0`
/// never asks).
pub const CONFIRM_AGENTS: &str = "AGENTPRISM_CONFIRM_AGENTS";

/// OpenTelemetry's standard variables (docs/observability.md). `true` turns telemetry off
/// whatever else is set.
pub const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// `otlp` or `none`: whether traces are exported (`otlp` with no endpoint sends to the
/// default local collector).
pub const OTEL_TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
/// `otlp` or `none`: whether metrics are exported.
pub const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
/// The collector's base URL; `/v1/traces` and `/v1/metrics` are appended.
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The full URL traces are posted to.
pub const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The full URL metrics are posted to.
pub const OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// The OTLP transport: only `http/protobuf` is built in; anything else is refused.
pub const OTEL_EXPORTER_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// The traces' own transport, over [`OTEL_EXPORTER_OTLP_PROTOCOL`].
pub const OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// The metrics' own transport, over [`OTEL_EXPORTER_OTLP_PROTOCOL`].
pub const OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
/// Headers sent with every export, `key=value` pairs separated by commas.
pub const OTEL_EXPORTER_OTLP_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// How long one export may take, in milliseconds (default 10000).
pub const OTEL_EXPORTER_OTLP_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// The traces' own export timeout, over [`OTEL_EXPORTER_OTLP_TIMEOUT`].
pub const OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
/// The metrics' own export timeout, over [`OTEL_EXPORTER_OTLP_TIMEOUT`].
pub const OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT";
/// The exports' compression: only `none` is built in; anything else is refused.
pub const OTEL_EXPORTER_OTLP_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
/// The traces' own compression, over [`OTEL_EXPORTER_OTLP_COMPRESSION`].
pub const OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION";
/// The metrics' own compression, over [`OTEL_EXPORTER_OTLP_COMPRESSION`].
pub const OTEL_EXPORTER_OTLP_METRICS_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION";
/// The `service.name` resource attribute (default `agentprism`).
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// More resource attributes, `key=value` pairs separated by commas.
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// Diagnostics filter for stderr logs (tracing env-filter syntax, default `warn`). Not part of
/// the daemon family fingerprint: it changes what is logged, never what runs.
pub const LOG: &str = "AGENTPRISM_LOG";

/// TCP port the daemon binds on 127.0.0.1 (default 29888; `0` picks an ephemeral port).
pub const DAEMON_PORT: &str = "AGENTPRISM_DAEMON_PORT";
/// How long the daemon stays up with no sessions, executions or requests, in ms (default
/// 900000 = 15 min; `0` disables idle exit), counted from the moment the last one ended.
/// Not part of the family fingerprint.
pub(crate) const DAEMON_IDLE_TTL_MS: &str = "AGENTPRISM_DAEMON_IDLE_TTL_MS";
/// How long a session with no open connection is kept before eviction, in ms (default 300000
/// = 5 min). Not part of the family fingerprint.
pub(crate) const SESSION_TTL_MS: &str = "AGENTPRISM_SESSION_TTL_MS";
/// Extra `Origin` values the daemon accepts besides loopback http origins, comma-separated
/// exact matches.
pub(crate) const DAEMON_ALLOWED_ORIGINS: &str = "AGENTPRISM_DAEMON_ALLOWED_ORIGINS";
/// `1` lets *any* local user reach the daemon's (and `agentprism serve --http`'s) endpoint,
/// as the seed's unauthenticated loopback server did. Dangerous on a shared machine: another
/// user could start runs whose agents run as you. Default: only this user gets in.
pub(crate) const DAEMON_ALLOW_OTHER_USERS: &str = "AGENTPRISM_DAEMON_ALLOW_OTHER_USERS";
/// Path of the `agentprism` binary the shim spawns as the daemon (default: the one next to
/// the shim, then `PATH`). Also recognised by `daemon status` as a daemon binary.
pub(crate) const DAEMON_BIN: &str = "AGENTPRISM_DAEMON_BIN";
/// How often the daemon evicts dead-client sessions and re-reads stop intents, in ms (default
/// 60000; the family pointer is checked at least every 2 s). A test knob: tests shorten it to
/// see evictions sooner; the idle exit does not depend on it. Part of the family fingerprint
/// (it only ever differs in tests).
pub(crate) const DAEMON_TICK_MS: &str = "AGENTPRISM_DAEMON_TICK_MS";
/// `1` turns on test-only daemon routes (`POST /debug/evict?session=<id>`). Honoured only by
/// debug builds and builds with the `test-hooks` feature; a release build ignores it.
pub(crate) const TEST_HOOKS: &str = "AGENTPRISM_TEST_HOOKS";
/// Test-only: `1` makes listeners act as if the kernel could not name a connection's user,
/// so the bearer-token fallback can be tested on Linux. Honoured only where
/// [`TEST_HOOKS`] is.
pub(crate) const TEST_NO_PEER_LOOKUP: &str = "AGENTPRISM_TEST_NO_PEER_LOOKUP";

/// Whether this build honours the test-only variables ([`TEST_HOOKS`],
/// [`TEST_NO_PEER_LOOKUP`]): debug builds and the `test-hooks` feature only.
pub(crate) const TEST_HOOKS_BUILT_IN: bool = cfg!(any(debug_assertions, feature = "test-hooks"));
/// Test-only: the version this process claims (records, `/healthz`, the shim's succession
/// decisions), so tests and benchmarks can run an older and a newer daemon from one build.
/// Honoured only by debug builds and builds with the `version-override` feature; a release
/// build ignores it. Left out of the family fingerprint: versions differ within a family.
pub(crate) const TEST_VERSION: &str = "AGENTPRISM_TEST_VERSION";

/// Set by systemd to the pid it started; a daemon trusts the variables below only when this
/// names itself, so a host that leaks them into its children cannot make us talk to its
/// manager.
pub const SYSTEMD_EXEC_PID: &str = "SYSTEMD_EXEC_PID";
/// The service manager's notification socket (sd_notify): a path, or `@name` for the
/// abstract namespace. Never passed on to children.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
/// Watchdog period in microseconds that systemd expects `WATCHDOG=1` within.
pub const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
/// The pid the watchdog period is meant for; another pid ignores `WATCHDOG_USEC`.
pub(crate) const WATCHDOG_PID: &str = "WATCHDOG_PID";
/// Socket activation: how many listening fds start at fd 3.
pub const LISTEN_FDS: &str = "LISTEN_FDS";
/// Socket activation: the pid the fds are meant for.
pub(crate) const LISTEN_PID: &str = "LISTEN_PID";
/// Socket activation: colon-separated names of the passed fds.
pub(crate) const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";

pub(crate) const CLAUDE_ACP_CMD: &str = "AGENTPRISM_CLAUDE_ACP_CMD";
pub(crate) const CLAUDE_ACP_ARGS: &str = "AGENTPRISM_CLAUDE_ACP_ARGS";
pub(crate) const CODEX_ACP_CMD: &str = "AGENTPRISM_CODEX_ACP_CMD";
pub(crate) const CODEX_ACP_ARGS: &str = "AGENTPRISM_CODEX_ACP_ARGS";
pub(crate) const CODEX_ACP_BIN: &str = "AGENTPRISM_CODEX_ACP_BIN";
pub(crate) const OPENCODE_ACP_CMD: &str = "AGENTPRISM_OPENCODE_ACP_CMD";
pub(crate) const OPENCODE_ACP_ARGS: &str = "AGENTPRISM_OPENCODE_ACP_ARGS";
pub(crate) const PI_ACP_CMD: &str = "AGENTPRISM_PI_ACP_CMD";
pub(crate) const PI_ACP_ARGS: &str = "AGENTPRISM_PI_ACP_ARGS";

/// Variables a host sets to describe its own session, not the user's configuration: Claude
/// Code exports them to every MCP server it launches (`CLAUDECODE=1` is its nesting guard).
/// The first shim of a family fixes the daemon's environment, so passed on they would tell
/// every agent, for the daemon's whole life, that it runs inside a host session that has
/// long ended (and `claude` refuses to start nested). They never reach an agent
/// (`acp::process::spawn_agent`) and never enter the env fingerprint. Exact names, not a
/// `CLAUDE_CODE_` prefix: `CLAUDE_CODE_USE_BEDROCK`, `CLAUDE_CODE_OAUTH_TOKEN` and the other
/// `CLAUDE_CODE_*` settings are the user's and pass through (docs/api.md "Environment").
pub(crate) const HOST_SESSION_MARKERS: [&str; 9] = [
    // The nesting guard and how the host was entered (`cli`, `sdk-ts`, ...).
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    // The host session's identity, and its session-scoped access token.
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_SESSION_ID",
    "CLAUDE_CODE_SESSION_ACCESS_TOKEN",
    // The host binary and the IDE connection of that session.
    "CLAUDE_CODE_EXECPATH",
    "CLAUDE_CODE_SSE_PORT",
    // Set by the Agent SDK on the CLI it spawns: who embeds that host.
    "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_AGENT_SDK_CLIENT_APP",
];

/// Whether `name` is one of the [`HOST_SESSION_MARKERS`].
pub(crate) fn is_host_session_marker(name: &str) -> bool {
    HOST_SESSION_MARKERS.contains(&name)
}

/// The process environment as read once at start. Values that are not UTF-8 are kept out
/// of lookups (they can still be inherited by children).
#[derive(Clone, Debug, Default)]
pub struct EnvSnapshot {
    vars: BTreeMap<String, String>,
}

impl EnvSnapshot {
    /// Reads the current process environment.
    pub fn capture() -> EnvSnapshot {
        let vars = std::env::vars_os()
            .filter_map(|(key, value): (OsString, OsString)| {
                Some((key.into_string().ok()?, value.into_string().ok()?))
            })
            .collect();
        EnvSnapshot { vars }
    }

    /// A snapshot with exactly these variables (tests, embedding hosts).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> EnvSnapshot {
        EnvSnapshot {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// A non-empty value.
    pub(crate) fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|value| !value.trim().is_empty())
    }

    /// `1`, `true`, `yes` or `on` (any case).
    pub fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key)
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref(),
            Some("1" | "true" | "yes" | "on")
        )
    }

    /// A number, or an error that names the variable and the value.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.non_empty(key) {
            None => Ok(default),
            Some(text) => text
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{key} must be a whole number, got {text:?}")),
        }
    }

    pub fn home(&self) -> Option<&str> {
        self.non_empty("HOME")
    }

    pub fn path(&self) -> Option<&str> {
        self.get("PATH")
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// How long the zero-token probes of one preparation may take together, in milliseconds
/// (default 60000). A probe still unfinished then rejects the run, naming the backend.
pub(crate) const PROBE_TIMEOUT_MS: &str = "AGENTPRISM_PROBE_TIMEOUT_MS";

/// Runs the daemon prepares or executes at once across all projects (default
/// `max(2, MemTotal / (4 × AGENTPRISM_SCRIPT_MEMORY_MIB))`; at least 1). Runs waiting for a
/// setup answer do not count. The next run beyond it is refused.
pub(crate) const DAEMON_MAX_RUNS: &str = "AGENTPRISM_DAEMON_MAX_RUNS";
