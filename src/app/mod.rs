//! The composition root: the one place that knows which implementation each part of the
//! house gets. Settings come in (read once from the environment, [`Settings::from_env`]); an
//! engine with its store and agent runner, the MCP server over it ([`Services`]) and the
//! options of the HTTP transport ([`http_options`]) come out. `agentprism daemon run`
//! ([`daemon`]), `agentprism serve` ([`services`]) and the CLI's foreground commands
//! ([`foreground_engine`]) all build through here, so the wiring is written once.
//!
//! Dependencies point one way: `cli` → `app` → `daemon` and the parts. The daemon never
//! builds an engine itself: [`daemon`] hands it an assembler that runs once the port is bound.
//! The settings name the store and the server ([`StoreChoice`], [`ServerChoice`]); today each
//! has one choice, and a later PostgreSQL store or folder-of-workflows server is one more
//! variant here, not another copy of the wiring.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::acp::lookup::Backends;
use crate::acp::{AcpConfig, AcpRunner};
use crate::daemon::control::LeaseRoute;
use crate::discovery::Paths;
use crate::engine::sources::{DiskSources, PackSources, Sources};
use crate::engine::{Engine, EngineConfig};
use crate::env::{self, EnvSnapshot};
use crate::logging::notice;
use crate::mcp::server::{McpServer, ServerOptions};
use crate::serve::replica::{ReplicaOptions, StoreLocation};
use crate::serve::{Folder, FolderOptions, FolderServer};
use crate::store::postgres::{PgOptions, PostgresStore};
use crate::store::{LeasePolicy, SqliteStore, Store, StoreSync};
use crate::telemetry::{OtelTelemetry, TelemetryConfig};
use crate::timers::AutoResumePolicy;
use crate::tools::{WorkflowServer, WorkflowServerOptions};
use crate::transport::http::HttpOptions;
use crate::transport::peer::Access;

/// What the root assembles for `daemon run` and `serve`: an engine and the MCP server over it.
/// Defined beside the daemon, which consumes it and must not import this module.
pub(crate) use crate::daemon::Services;

/// A setting the house cannot use. Callers branch on the kind: the command line treats
/// [`SettingsError::Invalid`] as bad input (exit 2, nothing persisted).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// An environment variable holds a value out of its range or format; the message names
    /// the variable and what was expected.
    #[error("{0}")]
    Invalid(String),
    /// There is no usable persistence root (relative `AGENTPRISM_PERSISTENCE_ROOT`, no `HOME`).
    #[error("{0}")]
    Root(String),
}

impl SettingsError {
    /// Whether the user's input is at fault (as opposed to the machine's setup).
    pub(crate) fn is_input(&self) -> bool {
        matches!(self, SettingsError::Invalid(_))
    }
}

/// Which store keeps runs, calls and events.
#[derive(Clone, Debug)]
pub enum StoreChoice {
    /// SQLite files under the persistence root (`src/store/`), their commits as durable as
    /// `AGENTPRISM_STORE_SYNC` says.
    Sqlite(StoreSync),
    /// A store opened before the engine: the one `serve --store` shares with other replicas
    /// ([`open_replica_store`]).
    Opened(OpenedStore),
}

/// A store handle for [`StoreChoice::Opened`].
#[derive(Clone)]
pub struct OpenedStore(pub Arc<dyn Store>);

impl std::fmt::Debug for OpenedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedStore")
            .field("capabilities", &self.0.capabilities())
            .finish()
    }
}

/// Which MCP server the root puts in front of the engine.
#[derive(Clone, Debug)]
pub enum ServerChoice {
    /// The `workflow` tool, run resources, prompt and skill (`src/tools/`).
    Workflow(WorkflowServerOptions),
}

impl Default for ServerChoice {
    fn default() -> Self {
        ServerChoice::Workflow(WorkflowServerOptions::default())
    }
}

/// Who may reach an HTTP listener and from which pages.
#[derive(Clone, Debug, Default)]
pub struct HttpSettings {
    /// Origins accepted besides loopback ones (`AGENTPRISM_DAEMON_ALLOWED_ORIGINS`).
    pub allowed_origins: Vec<String>,
    /// `AGENTPRISM_DAEMON_ALLOW_OTHER_USERS`: every local user may connect.
    pub allow_other_users: bool,
    /// The test hook `AGENTPRISM_TEST_NO_PEER_LOOKUP`: behave as if the kernel could not name
    /// a connection's user, so the bearer token is required.
    pub no_peer_lookup: bool,
}

impl HttpSettings {
    pub(crate) fn from_env(env: &EnvSnapshot) -> HttpSettings {
        HttpSettings {
            allowed_origins: allowed_origins(env),
            allow_other_users: env.flag(env::DAEMON_ALLOW_OTHER_USERS),
            no_peer_lookup: no_peer_lookup(env),
        }
    }
}

/// Everything the root needs, resolved from the environment once.
pub struct Settings {
    /// The persistence root: the store's files, daemon records, agent-group records.
    pub root: PathBuf,
    pub store: StoreChoice,
    pub server: ServerChoice,
    /// Limits, timeouts and the lease owner id of the engine.
    pub engine: EngineConfig,
    /// The backend registry routing resolves agents against.
    pub backends: Backends,
    /// How the ACP runner treats agent processes.
    pub acp: AcpConfig,
    pub http: HttpSettings,
    /// The OpenTelemetry exporters the standard variables ask for; `None` reports nothing.
    pub telemetry: Option<TelemetryConfig>,
}

impl Settings {
    /// Reads every setting; `probe` turns on the zero-token backend probes at preparation.
    /// Errors name the variable and what it must hold.
    pub fn from_env(env: &EnvSnapshot, probe: bool) -> Result<Settings, SettingsError> {
        let root = persistence_root(env)?;
        let backends = Backends::from_env(env).map_err(SettingsError::Invalid)?;
        let acp = AcpConfig::from_env(env).map_err(SettingsError::Invalid)?;
        Ok(Settings {
            root,
            store: StoreChoice::Sqlite(StoreSync::from_env(env).map_err(SettingsError::Invalid)?),
            server: ServerChoice::default(),
            engine: engine_config(env, probe)?,
            backends,
            acp,
            http: HttpSettings::from_env(env),
            telemetry: TelemetryConfig::from_env(env).map_err(SettingsError::Invalid)?,
        })
    }

    /// Discovery's layout under the persistence root (records, pointer, key, token).
    pub fn paths(&self) -> Paths {
        Paths::new(self.root.clone())
    }
}

/// The persistence root: `AGENTPRISM_PERSISTENCE_ROOT` (absolute) or `~/.agentprism/workflows`.
pub(crate) fn persistence_root(env: &EnvSnapshot) -> Result<PathBuf, SettingsError> {
    if let Some(root) = env.non_empty(env::PERSISTENCE_ROOT) {
        let root = PathBuf::from(root);
        if !root.is_absolute() {
            return Err(SettingsError::Root(format!(
                "{} must be an absolute path, got {}",
                env::PERSISTENCE_ROOT,
                root.display()
            )));
        }
        return Ok(root);
    }
    let home = env.home().ok_or_else(|| {
        SettingsError::Root(format!(
            "HOME is not set; set {} to choose where runs are stored",
            env::PERSISTENCE_ROOT
        ))
    })?;
    Ok(Path::new(home).join(".agentprism").join("workflows"))
}

/// Engine settings from the environment.
pub(crate) fn engine_config(env: &EnvSnapshot, probe: bool) -> Result<EngineConfig, SettingsError> {
    let millis = |key: &str, default: u64| -> Result<Duration, SettingsError> {
        let value = env.u64_or(key, default).map_err(SettingsError::Invalid)?;
        Ok(Duration::from_millis(value.max(1)))
    };
    crate::library::check_env(env).map_err(SettingsError::Invalid)?;
    let mut config = EngineConfig {
        allow_script_backends: env.flag(env::ALLOW_SCRIPT_BACKENDS),
        home: env.home().map(PathBuf::from),
        user_workflows: crate::library::user_folder(env),
        probe,
        ..EngineConfig::default()
    };
    config.agent_timeout = millis(env::AGENT_TIMEOUT_MS, 30 * 60 * 1000)?;
    config.prompt_cache_hold = crate::prompt_cache::hold_from(
        env.non_empty(env::PROMPT_CACHE_HOLD_MS),
        env::PROMPT_CACHE_HOLD_MS,
    )
    .map_err(SettingsError::Invalid)?;
    config.confirm_agents =
        crate::engine::estimate::threshold_from(env.non_empty(env::CONFIRM_AGENTS))
            .map_err(SettingsError::Invalid)?;
    config.auto_resume = AutoResumePolicy::parse(env.get(env::AUTO_RESUME))
        .map_err(|problem| SettingsError::Invalid(format!("{}: {problem}", env::AUTO_RESUME)))?;
    config.probe_limit = millis(
        env::PROBE_TIMEOUT_MS,
        crate::engine::prepare::PROBE_LIMIT.as_millis() as u64,
    )?;
    config.vm_limits.slice_limit = millis(env::SCRIPT_SLICE_MS, 10_000)?;
    config.vm_limits.memory_limit = (env
        .u64_or(env::SCRIPT_MEMORY_MIB, 64)
        .map_err(SettingsError::Invalid)?
        .max(1) as usize)
        << 20;
    config.max_runs = match env.non_empty(env::DAEMON_MAX_RUNS) {
        Some(_) => env
            .u64_or(env::DAEMON_MAX_RUNS, 0)
            .map_err(SettingsError::Invalid)?
            .clamp(1, usize::MAX as u64) as usize,
        None => crate::engine::manager::default_max_runs(config.vm_limits.memory_limit),
    };
    Ok(config)
}

/// `AGENTPRISM_DAEMON_ALLOWED_ORIGINS`: comma-separated, blanks dropped.
pub fn allowed_origins(env: &EnvSnapshot) -> Vec<String> {
    env.get(env::DAEMON_ALLOWED_ORIGINS)
        .map(|list| {
            list.split(',')
                .map(|origin| origin.trim().to_owned())
                .filter(|origin| !origin.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the test hook that pretends the kernel cannot name a connection's user is on (it
/// exists only in debug builds and with the `test-hooks` feature).
pub(crate) fn no_peer_lookup(env: &EnvSnapshot) -> bool {
    env::TEST_HOOKS_BUILT_IN && env.flag(env::TEST_NO_PEER_LOOKUP)
}

/// The engine of a foreground command, from the environment, under a fresh lease owner id.
pub async fn foreground_engine(env: &EnvSnapshot, probe: bool) -> Result<Engine> {
    engine(Settings::from_env(env, probe)?).await
}

/// Builds the store, the ACP runner and the engine over them. The lease owner id is
/// `settings.engine.owner_id` (a daemon sets its `instanceId`, daemon.md 1.10 step 3; `None`
/// picks a fresh one). The engine reaches runs held by other processes through their daemons'
/// control sockets ([`LeaseRoute`]).
pub async fn engine(settings: Settings) -> Result<Engine> {
    engine_with_sources(settings, DiskSources::shared()).await
}

/// [`engine`] reading scripts and their files through `sources` (a workflows pack's
/// [`PackSources`] for `serve --workflows-pack`) instead of the disk.
pub(crate) async fn engine_with_sources(
    settings: Settings,
    sources: Arc<dyn Sources>,
) -> Result<Engine> {
    let Settings {
        root,
        store,
        engine: mut config,
        backends,
        mut acp,
        telemetry,
        ..
    } = settings;
    // The engine reads the model tiers under the root the store lives in, without asking
    // the store for a path.
    config.persistence_root = Some(root.clone());
    let store: Arc<dyn Store> = match store {
        StoreChoice::Sqlite(sync) => Arc::new(
            SqliteStore::open_with_sync(&root, sync)
                .with_context(|| format!("opening the run store under {}", root.display()))?,
        ),
        StoreChoice::Opened(opened) => opened.0,
    };
    acp.supervision = crate::acp::process::Supervision::for_owner(&root)
        .context("finding the agentprism binary to run as the agent reaper")?;
    // Groups whose owners died without their reaper acting (docs/security.md).
    let groups = root.join(crate::acp::groups::FOLDER);
    let _ = tokio::task::spawn_blocking(move || crate::acp::groups::sweep(&groups)).await;
    let runner = Arc::new(AcpRunner::new(acp));
    let workspaces = Arc::new(crate::workspace::GitWorkspaces::new(&root));
    let engine = Engine::with_sources(store, runner, Arc::new(backends), sources, config);
    engine.set_workspaces(workspaces);
    if let Some(config) = &telemetry {
        let exporter = OtelTelemetry::new(config, tokio::runtime::Handle::current())
            .map_err(SettingsError::Invalid)?;
        engine.set_telemetry(Arc::new(exporter));
    }
    engine.set_owner_route(Arc::new(LeaseRoute::new(
        Paths::new(root),
        &engine.owner().owner_id,
    )));
    Ok(engine)
}

/// Builds the engine and the chosen MCP server over it: what `serve` and `daemon run` serve.
pub(crate) async fn services(mut settings: Settings) -> Result<Services> {
    let server_choice = std::mem::take(&mut settings.server);
    let engine = engine(settings).await?;
    // Before anything is admitted or resumed: the worktrees a crash or a kill left behind.
    let swept = engine.sweep_workspaces().await;
    if swept > 0 {
        tracing::info!("removed {swept} worktrees of calls that no longer run");
    }
    // Runs paused on a usage limit resume by themselves at the reset, also those whose moment
    // came while no process served them.
    engine.start_timers();
    let workflow = match server_choice {
        ServerChoice::Workflow(options) => WorkflowServer::new(engine.clone(), options),
    };
    let server = Arc::new(McpServer::new(workflow.clone(), ServerOptions::default()));
    Ok(Services {
        engine,
        workflow,
        server,
    })
}

/// What `agentprism serve <dir>` serves: the folder server over an engine whose store lives in
/// the state folder.
pub(crate) struct FolderServices {
    /// The handler: its shutdown interrupts the runs still going.
    pub folder: Arc<FolderServer>,
    /// The MCP core over it, for a transport.
    pub server: Arc<McpServer>,
    /// Where the runs are kept; a temporary one is removed when this is dropped.
    #[expect(
        dead_code,
        reason = "held for its Drop, which removes a temporary folder"
    )]
    pub state: StateFolder,
}

impl FolderServices {
    /// Stops taking requests, then interrupts the runs still going within `deadline`.
    pub(crate) async fn shutdown(&self, deadline: Duration) {
        self.server.shutdown();
        self.folder.shutdown(deadline).await;
    }
}

/// The folder server's state: `--state-dir`, or a private temporary folder removed at exit
/// (run state then lives as long as the process).
pub(crate) struct StateFolder {
    pub path: PathBuf,
    /// Removed on drop (the temporary folder only).
    temporary: bool,
}

impl StateFolder {
    /// `--state-dir`, created (mode 0700) if missing, narrowed to 0700 if wider.
    pub(crate) fn kept(path: &Path) -> Result<StateFolder> {
        create_private_dir(path)
            .with_context(|| format!("creating the state folder {}", path.display()))?;
        let path = std::fs::canonicalize(path)
            .with_context(|| format!("resolving the state folder {}", path.display()))?;
        Ok(StateFolder {
            path,
            temporary: false,
        })
    }

    /// A new private folder under the system's temporary folder.
    pub(crate) fn temporary() -> Result<StateFolder> {
        let path = std::env::temp_dir().join(format!("agentprism-serve-{}", uuid::Uuid::new_v4()));
        create_private_dir(&path)
            .with_context(|| format!("creating the temporary state folder {}", path.display()))?;
        Ok(StateFolder {
            path,
            temporary: true,
        })
    }
}

impl Drop for StateFolder {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn create_private_dir(path: &Path) -> std::io::Result<()> {
    crate::util::private_dir::ensure(path)
}

/// Builds the folder server: an engine whose persistence root is the state folder (served
/// scripts' `meta.backends` count as approved by the operator who put them there, and every
/// run shares the folder as its project, so the per-project cap is the engine's own), and
/// the handler over `folder`.
pub(crate) async fn folder_services(
    settings: Settings,
    folder: Folder,
    state: StateFolder,
    options: FolderOptions,
) -> Result<FolderServices> {
    folder_services_over(settings, folder, DiskSources::shared(), state, options).await
}

/// [`folder_services`] for a workflows pack (`serve --workflows-pack`): `folder` was loaded
/// from the pack's entries and every script and companion file is read from `pack`, never
/// from the disk; the engine stores only their digests.
pub(crate) async fn pack_folder_services(
    settings: Settings,
    folder: Folder,
    pack: PackSources,
    state: StateFolder,
    options: FolderOptions,
) -> Result<FolderServices> {
    folder_services_over(settings, folder, Arc::new(pack), state, options).await
}

async fn folder_services_over(
    mut settings: Settings,
    folder: Folder,
    sources: Arc<dyn Sources>,
    state: StateFolder,
    options: FolderOptions,
) -> Result<FolderServices> {
    settings.root = state.path.clone();
    settings.engine.allow_script_backends = true;
    // Every run shares the folder as its project, and replicas share its runs in the store:
    // the cap is each process's own (`max_runs`), not the project's across replicas.
    settings.engine.max_active_per_project = usize::MAX;
    // A served folder's workflows are the deployer's decision, and its callers (tools with the
    // workflows' own input schemas, the run API, A2A) have no way to confirm a size: they run
    // as `meta` and `maxAgents` allow, without the question (docs/serve.md).
    settings.engine.confirm_agents = 0;
    let engine = engine_with_sources(settings, sources).await?;
    identify_replica(engine.owner());
    let folder = FolderServer::new(engine.clone(), folder, options)?;
    engine.start_timers();
    let server = Arc::new(McpServer::new(folder.clone(), ServerOptions::default()));
    folder.reap_sessions_of(&server);
    Ok(FolderServices {
        folder,
        server,
        state,
    })
}

/// Names this folder server as a lease holder, in `/metrics` and in the log: the identity
/// its leases carry (docs/serve.md, "Replicas").
fn identify_replica(owner: &crate::engine::manager::Owner) {
    let host = crate::util::process::host_name().unwrap_or_default();
    let boot = crate::util::process::current_boot_id().unwrap_or_default();
    tracing::info!(
        host = %host,
        instance = %owner.owner_id,
        pid = owner.pid,
        boot = %boot,
        "serving as this replica; its run leases name it so"
    );
    crate::metrics::global().identify(crate::metrics::ReplicaLabels {
        host,
        instance: owner.owner_id.clone(),
        pid: owner.pid.to_string(),
        boot,
    });
}

/// Opens the store `serve --store` names for a replicated deployment, refusing one that
/// cannot keep replicas apart (no `cas`) unless `--single-replica` vouches for one writer,
/// and puts `settings` under it: the store, the state folder as the persistence root of
/// this process's other files, and run leases that lapse after the TTL
/// ([`LeasePolicy::Ttl`]).
pub(crate) async fn replicate(
    settings: &mut Settings,
    replica: &ReplicaOptions,
    state: &StateFolder,
) -> Result<()> {
    let root = &state.path;
    let sync = match settings.store {
        StoreChoice::Sqlite(sync) => sync,
        StoreChoice::Opened(_) => StoreSync::default(),
    };
    let opened = || {
        SqliteStore::open_with_sync(root, sync)
            .with_context(|| format!("opening the run store under {}", root.display()))
    };
    let store: Arc<dyn Store> = match &replica.location {
        StoreLocation::Postgres(url) => {
            let mut options = PgOptions::new(root.join("script-copies"));
            options.call_deadline = replica.call_deadline();
            options.environment = crate::store::PgEnvironment::from_pairs(
                replica
                    .pg_environment
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str())),
            );
            let store = PostgresStore::connect(url, options)
                .await
                .with_context(|| {
                    format!(
                        "opening the run store at {}",
                        crate::store::postgres::redacted(url)
                    )
                })?;
            Arc::new(store)
        }
        StoreLocation::Sqlite(_) => Arc::new(opened()?),
        #[cfg(any(debug_assertions, feature = "test-hooks"))]
        StoreLocation::WithoutCas(_) => Arc::new(crate::store::CheckThenWrite::without_cas(
            Arc::new(opened()?),
        )),
        #[cfg(not(any(debug_assertions, feature = "test-hooks")))]
        StoreLocation::WithoutCas(_) => {
            anyhow::bail!(
                "the test-only store location exists only where the test hooks are built in"
            )
        }
    };
    replica.check(store.capabilities().cas)?;
    // Without a fence in the store, the racy second best: check the lease, then write.
    let store: Arc<dyn Store> = if store.capabilities().fence {
        store
    } else {
        Arc::new(crate::store::CheckThenWrite::new(store))
    };
    settings.store = StoreChoice::Opened(OpenedStore(store));
    settings.engine.lease_policy = LeasePolicy::Ttl(replica.lock_ttl);
    Ok(())
}

/// `agentprism daemon run`: the daemon's lifecycle (`crate::daemon::run`) with an assembler
/// that builds the services under the daemon's `instanceId`, and their HTTP options, once
/// its port is bound.
pub async fn daemon(env: &EnvSnapshot, options: crate::daemon::RunOptions) -> Result<u8> {
    crate::daemon::run(env, options, |instance_id| async move {
        let mut settings = Settings::from_env(env, true)?;
        settings.engine.owner_id = Some(instance_id);
        let (http, paths) = (settings.http.clone(), settings.paths());
        let services = services(settings).await?;
        Ok((services, http_options(&http, &paths)))
    })
    .await
}

/// The HTTP options every listener serving the `workflow` tool shares: allowed origins and
/// [`http_access`]. The daemon adds its `/healthz` hooks and front runtime. Called only by a
/// process that listens on HTTP: it may create the bearer token.
pub(crate) fn http_options(settings: &HttpSettings, paths: &Paths) -> HttpOptions {
    HttpOptions {
        allowed_origins: settings.allowed_origins.clone(),
        access: http_access(settings, paths),
        ..HttpOptions::default()
    }
}

/// Whom a listener serving the `workflow` tool lets in: this user only (the kernel names
/// each connection's user; where it cannot, the bearer token of `R/daemons/http-token.json`
/// is required), unless `AGENTPRISM_DAEMON_ALLOW_OTHER_USERS` opens it to everyone.
pub(crate) fn http_access(settings: &HttpSettings, paths: &Paths) -> Access {
    if settings.allow_other_users {
        notice(format_args!(
            "{} is set: every local user can reach this endpoint and run commands as you",
            env::DAEMON_ALLOW_OTHER_USERS
        ));
        return Access::Open;
    }
    let needs_token = crate::daemon::lookup_needs_token(settings.no_peer_lookup);
    // The token exists only where it is asked for (this process creates it then, and sends
    // it too); a lookup that fails for one connection on a system where it works is then a
    // refusal, with no token to fall back on.
    crate::discovery::token::remember(paths, needs_token);
    let token = crate::discovery::token::sent().map(str::to_owned);
    if needs_token && token.is_none() {
        notice(format_args!(
            "the HTTP bearer token {} is unusable and this system cannot name a connection's \
             user, so no request gets in",
            paths.http_token().display()
        ));
    }
    Access::Owner {
        uid: nix::unistd::geteuid().as_raw(),
        token: token.map(Arc::from),
        lookup: !settings.no_peer_lookup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_origins_drop_blanks() {
        let env = EnvSnapshot::from_pairs([(
            env::DAEMON_ALLOWED_ORIGINS,
            "https://a.example, ,https://b.example",
        )]);
        assert_eq!(
            allowed_origins(&env),
            ["https://a.example", "https://b.example"]
        );
        assert!(allowed_origins(&EnvSnapshot::default()).is_empty());
    }

    #[test]
    fn the_persistence_root_must_be_absolute() {
        let relative = EnvSnapshot::from_pairs([(env::PERSISTENCE_ROOT, "runs")]);
        let error = persistence_root(&relative).unwrap_err();
        assert!(!error.is_input());
        assert_eq!(
            error.to_string(),
            "AGENTPRISM_PERSISTENCE_ROOT must be an absolute path, got runs"
        );
        let home = EnvSnapshot::from_pairs([("HOME", "/home/someone")]);
        assert_eq!(
            persistence_root(&home).unwrap(),
            Path::new("/home/someone/.agentprism/workflows")
        );
        assert!(persistence_root(&EnvSnapshot::default()).is_err());
    }

    #[test]
    fn the_store_sync_mode_is_read_and_a_bad_one_refused_naming_the_variable() {
        // Only read, never created: settings name the root, the store opens it later.
        let root = (env::PERSISTENCE_ROOT, "/tmp/agentprism-settings-test");
        let chosen = |value: &str| {
            let env = EnvSnapshot::from_pairs([root, (env::STORE_SYNC, value)]);
            Settings::from_env(&env, false).map(|settings| settings.store)
        };
        assert!(matches!(
            Settings::from_env(&EnvSnapshot::from_pairs([root]), false).map(|s| s.store),
            Ok(StoreChoice::Sqlite(StoreSync::Full))
        ));
        assert!(matches!(
            chosen("normal"),
            Ok(StoreChoice::Sqlite(StoreSync::Normal))
        ));
        let Err(error) = chosen("fast") else {
            panic!("AGENTPRISM_STORE_SYNC=fast was accepted");
        };
        assert!(error.is_input());
        assert!(error.to_string().contains(env::STORE_SYNC), "{error}");
    }

    #[test]
    fn a_bad_engine_setting_is_input_naming_the_variable() {
        let env = EnvSnapshot::from_pairs([(env::AGENT_TIMEOUT_MS, "soon")]);
        let error = engine_config(&env, false).unwrap_err();
        assert!(error.is_input());
        assert!(error.to_string().contains(env::AGENT_TIMEOUT_MS), "{error}");
        let config = engine_config(
            &EnvSnapshot::from_pairs([(env::DAEMON_MAX_RUNS, "0"), (env::SCRIPT_SLICE_MS, "0")]),
            true,
        )
        .unwrap();
        assert_eq!(config.max_runs, 1);
        assert_eq!(config.vm_limits.slice_limit, Duration::from_millis(1));
        assert!(config.probe);
    }
}
