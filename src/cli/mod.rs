//! The `agentprism` command line: argument types (clap) and the commands that drive the
//! engine in the foreground (`validate`, `run`, `status`, `resume`, `runs`, `stop`, `setup`).
//!
//! Exit codes of `run`, `resume` and `setup`: 0 completed, 1 failed or stopped, 2 rejected
//! (bad input, nothing persisted), 3 paused or waiting for setup, 130 interrupted by Ctrl-C,
//! 143 by SIGTERM, 129 by SIGHUP (the run is left paused/interrupted and resumable, and the
//! resume command is printed).

/// `println!` that never panics on a closed stdout (`cli/output.rs`).
macro_rules! say {
    ($($arg:tt)*) => { $crate::cli::output::stdout(format_args!($($arg)*), true) };
}

/// `print!` that never panics on a closed stdout.
macro_rules! say_partial {
    ($($arg:tt)*) => { $crate::cli::output::stdout(format_args!($($arg)*), false) };
}

/// `eprintln!` that never panics on a closed stderr.
macro_rules! note {
    ($($arg:tt)*) => { $crate::cli::output::stderr(format_args!($($arg)*), true) };
}

/// `eprint!` that never panics on a closed stderr.
macro_rules! note_partial {
    ($($arg:tt)*) => { $crate::cli::output::stderr(format_args!($($arg)*), false) };
}

pub mod daemon;
pub mod output;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};

use crate::acp::lookup::Backends;
use crate::acp::{AcpConfig, AcpRunner};
use crate::engine::events::RunNotice;
use crate::engine::runner::PermissionOutcome;
use crate::engine::{
    Engine, EngineConfig, EngineError, LimitOverrides, ResumeRequest, RunRequest, ScriptInput,
    StatusQuery,
};
use crate::env::{self, EnvSnapshot};
use crate::model::{RunId, RunStatus};
use crate::store::SqliteStore;

/// Exit code of a completed run.
pub const EXIT_COMPLETED: u8 = 0;
/// A failed or stopped run, or an operational error.
pub const EXIT_FAILED: u8 = 1;
/// Rejected before anything was persisted.
pub const EXIT_REJECTED: u8 = 2;
/// Paused, or waiting for a setup answer.
pub const EXIT_PAUSED: u8 = 3;
/// Interrupted by Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Interrupted by SIGTERM (128 + 15).
pub const EXIT_TERMINATED: u8 = 143;
/// Interrupted by SIGHUP (128 + 1).
pub const EXIT_HANGUP: u8 = 129;
/// How often a foreground run looks for stop requests made by other processes.
const FOREGROUND_INTENT_POLL: Duration = Duration::from_secs(1);

#[derive(Debug, Parser)]
#[command(
    name = "agentprism",
    version,
    about = "Durable multi-agent workflow runs for MCP hosts"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a workflow script without running agents (zero tokens).
    Validate(ValidateArgs),
    /// Run a workflow script in the foreground and print its result as JSON.
    Run(RunArgs),
    /// Show a run's status.
    Status(StatusArgs),
    /// Continue a paused, stopped or failed run under the same id.
    Resume(ResumeArgs),
    /// List runs, or delete one (`runs rm <runId>`).
    Runs(RunsArgs),
    /// Stop a run (or one agent call with --call).
    Stop(StopArgs),
    /// Answer a run's pending backend-approval setup, then execute it in the foreground.
    Setup(SetupArgs),
    /// Print a completed run's exact result JSON.
    Result(ResultArgs),
    /// Serve the `workflow` MCP server over stdio or loopback HTTP.
    Serve(ServeArgs),
    /// Manage the per-user workflow daemon: run, start, stop, status, url, logs.
    Daemon(daemon::DaemonArgs),
    /// Print a shell completion script (bash, zsh or fish); the packages ship its output.
    #[command(hide = true)]
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Internal: leads one agent's process group and ends it with its owner
    /// (`src/acp/reaper.rs`); started by agentprism itself, never by hand.
    #[command(name = "agent-reaper", hide = true)]
    AgentReaper(ReaperArgs),
}

#[derive(Debug, Args)]
pub struct ReaperArgs {
    /// The pid of the process that owns the agent.
    #[arg(long)]
    pub owner: u32,
    /// The agent's command and arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// The shells `completions` writes scripts for: the ones the packages ship.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Speak MCP on stdin/stdout (what a host launches; the default).
    #[arg(long, conflicts_with = "http")]
    pub stdio: bool,
    /// Serve Streamable HTTP on 127.0.0.1; prints the URL on stdout once listening.
    #[arg(long)]
    pub http: bool,
    /// The HTTP port (0 picks a free one).
    #[arg(long, default_value_t = 0, requires = "http")]
    pub port: u16,
    /// The project `run` and `config` use when a request leaves out `projectDir`.
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The workflow script file.
    pub script: PathBuf,
    /// The project directory the run belongs to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Script input as a JSON value.
    #[arg(long, value_name = "JSON", conflicts_with = "args_file")]
    pub args: Option<String>,
    /// Script input read from a JSON file.
    #[arg(long, value_name = "FILE")]
    pub args_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most agent calls the run may make (1..10000, default 1000).
    #[arg(long)]
    pub max_agents: Option<i64>,
    /// Agent calls running at once (1..16, default 8).
    #[arg(long)]
    pub concurrency: Option<i64>,
    /// Retries of a failed agent call (0..3, default 0).
    #[arg(long)]
    pub agent_retries: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ForegroundArgs {
    /// How to answer agents' permission requests: ask (on a terminal), allow, or reject.
    #[arg(long, value_name = "POLICY")]
    pub permissions: Option<String>,
    /// Print the final status document instead of only the result.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub script: ScriptArgs,
    /// Skip the zero-token backend probes.
    #[arg(long)]
    pub no_probe: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub script: ScriptArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub foreground: ForegroundArgs,
    /// Approve the script's own `meta.backends` without asking.
    #[arg(long)]
    pub approve_backends: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub run_id: String,
    /// Latest calls to show (1..50).
    #[arg(long, default_value_t = 20)]
    pub last: usize,
    /// Log lines to show (0..50).
    #[arg(long, default_value_t = 20)]
    pub logs: usize,
    /// Only calls whose label matches this glob.
    #[arg(long)]
    pub label: Option<String>,
    /// Print the whole status document as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    pub run_id: String,
    /// A checkpoint answer `INDEX=VALUE`; VALUE is JSON (`true`, `"text"`) or plain text.
    #[arg(long = "reply", value_name = "INDEX=VALUE")]
    pub replies: Vec<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub foreground: ForegroundArgs,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub action: Option<RunsAction>,
    /// Only runs of this project (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Runs of every project.
    #[arg(long)]
    pub all: bool,
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Delete a run record and its stored script copy (never a caller's own script file).
    Rm { run_id: String },
}

#[derive(Debug, Args)]
pub struct StopArgs {
    pub run_id: String,
    /// Cancel only this live agent call.
    #[arg(long = "call")]
    pub call_index: Option<u32>,
    /// Also end the run's owner if it is a superseded daemon that still holds the run
    /// (SIGTERM, then SIGKILL); whole-run stops only.
    #[arg(long, conflicts_with = "call_index")]
    pub force_owner: bool,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    pub run_id: String,
    /// Approve the declared backends.
    #[arg(long, conflicts_with = "decline")]
    pub approve: bool,
    /// Decline them (the run is kept as aborted).
    #[arg(long)]
    pub decline: bool,
    #[command(flatten)]
    pub foreground: ForegroundArgs,
}

#[derive(Debug, Args)]
pub struct ResultArgs {
    pub run_id: String,
}

/// Runs the command line and maps the outcome to an exit code.
pub fn run(cli: Cli) -> ExitCode {
    // A reaper must not start a runtime, threads or anything else: it only forks its agent.
    if let Command::AgentReaper(args) = &cli.command {
        crate::acp::reaper::run(args.owner, &args.command);
    }
    // Before the runtime starts any thread: the sd-notify variables are read once, here.
    let early = match daemon::Early::capture(&cli.command) {
        Ok(early) => early,
        Err(error) => {
            note!("agentprism: {error:#}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            note!("agentprism: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = runtime.block_on(async {
        match dispatch(cli, early).await {
            Ok(code) => code,
            Err(error) => {
                note!("agentprism: {error:#}");
                EXIT_FAILED
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    ExitCode::from(code)
}

async fn dispatch(cli: Cli, early: daemon::Early) -> Result<u8> {
    let env = EnvSnapshot::capture();
    match cli.command {
        Command::Validate(args) => validate(&env, args).await,
        Command::Run(args) => run_command(&env, args).await,
        Command::Status(args) => status(&env, args).await,
        Command::Resume(args) => resume(&env, args).await,
        Command::Runs(args) => runs(&env, args).await,
        Command::Stop(args) => stop(&env, args).await,
        Command::Setup(args) => setup(&env, args).await,
        Command::Result(args) => result(&env, args).await,
        Command::Serve(args) => serve(&env, args).await,
        Command::Daemon(args) => daemon::daemon(&env, args, early).await,
        Command::Completions { shell } => completions(shell),
        Command::AgentReaper(_) => unreachable!("handled before the runtime starts"),
    }
}

/// `completions <shell>`: the script goes to stdout. It is generated into memory first, so a
/// closed stdout cannot panic inside the generator.
fn completions(shell: CompletionShell) -> Result<u8> {
    use clap::CommandFactory;
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "agentprism", &mut script);
    say_partial!("{}", String::from_utf8_lossy(&script));
    Ok(EXIT_COMPLETED)
}

/// The persistence root: `AGENTPRISM_PERSISTENCE_ROOT` (absolute) or `~/.agentprism/workflows`.
pub fn persistence_root(env: &EnvSnapshot) -> Result<PathBuf> {
    if let Some(root) = env.non_empty(env::PERSISTENCE_ROOT) {
        let root = PathBuf::from(root);
        if !root.is_absolute() {
            return Err(anyhow!(
                "{} must be an absolute path, got {}",
                env::PERSISTENCE_ROOT,
                root.display()
            ));
        }
        return Ok(root);
    }
    let home = env.home().ok_or_else(|| {
        anyhow!(
            "HOME is not set; set {} to choose where runs are stored",
            env::PERSISTENCE_ROOT
        )
    })?;
    Ok(Path::new(home).join(".agentprism").join("workflows"))
}

/// A problem with the user's input: exit code 2, nothing persisted.
#[derive(Debug)]
struct InputError(String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

fn input_error(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(message.into()))
}

/// Builds the engine from the environment, under a fresh lease owner id.
pub async fn build_engine(env: &EnvSnapshot, probe: bool) -> Result<Engine> {
    build_engine_as(env, probe, None).await
}

/// Builds the engine from the environment. `owner_id` names its leases (a daemon passes its
/// `instanceId`, daemon.md 1.10 step 3); `None` picks a fresh one. The engine reaches runs
/// held by other processes through their daemons' control sockets.
pub async fn build_engine_as(
    env: &EnvSnapshot,
    probe: bool,
    owner_id: Option<String>,
) -> Result<Engine> {
    let root = persistence_root(env)?;
    let backends = Backends::from_env(env).map_err(input_error)?;
    let mut acp_config = AcpConfig::from_env(env).map_err(input_error)?;
    let store = SqliteStore::open(&root)
        .with_context(|| format!("opening the run store under {}", root.display()))?;
    acp_config.supervision = crate::acp::process::Supervision::for_owner(&root)
        .context("finding the agentprism binary to run as the agent reaper")?;
    // Groups whose owners died without their reaper acting (docs/security.md).
    let groups = root.join(crate::acp::groups::FOLDER);
    let _ = tokio::task::spawn_blocking(move || crate::acp::groups::sweep(&groups)).await;
    let runner = Arc::new(AcpRunner::new(acp_config));
    let mut config = engine_config(env, probe)?;
    config.owner_id = owner_id;
    let engine = Engine::new(Arc::new(store), runner, Arc::new(backends), config);
    let paths = crate::discovery::Paths::new(root);
    engine.set_owner_route(Arc::new(crate::daemon::control::LeaseRoute::new(
        paths,
        &engine.owner().owner_id,
    )));
    Ok(engine)
}

/// Engine settings from the environment.
pub fn engine_config(env: &EnvSnapshot, probe: bool) -> Result<EngineConfig> {
    let mut config = EngineConfig {
        allow_script_backends: env.flag(env::ALLOW_SCRIPT_BACKENDS),
        home: env.home().map(PathBuf::from),
        probe,
        ..EngineConfig::default()
    };
    config.agent_timeout = Duration::from_millis(
        env.u64_or(env::AGENT_TIMEOUT_MS, 30 * 60 * 1000)
            .map_err(input_error)?
            .max(1),
    );
    config.probe_limit = Duration::from_millis(
        env.u64_or(
            env::PROBE_TIMEOUT_MS,
            crate::engine::prepare::PROBE_LIMIT.as_millis() as u64,
        )
        .map_err(input_error)?
        .max(1),
    );
    config.vm_limits.slice_limit = Duration::from_millis(
        env.u64_or(env::SCRIPT_SLICE_MS, 10_000)
            .map_err(input_error)?
            .max(1),
    );
    config.vm_limits.memory_limit = (env
        .u64_or(env::SCRIPT_MEMORY_MIB, 64)
        .map_err(input_error)?
        .max(1) as usize)
        << 20;
    config.max_runs = match env.non_empty(env::DAEMON_MAX_RUNS) {
        Some(_) => env
            .u64_or(env::DAEMON_MAX_RUNS, 0)
            .map_err(input_error)?
            .clamp(1, usize::MAX as u64) as usize,
        None => crate::engine::manager::default_max_runs(config.vm_limits.memory_limit),
    };
    Ok(config)
}

fn project_dir(given: Option<&Path>) -> Result<PathBuf> {
    let dir = match given {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let dir = if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    };
    std::fs::canonicalize(&dir)
        .map_err(|e| input_error(format!("--project-dir {}: {e}", dir.display())))
}

fn parse_args(args: &ScriptArgs) -> Result<Value> {
    let text = match (&args.args, &args.args_file) {
        (Some(text), _) => text.clone(),
        (None, Some(file)) => std::fs::read_to_string(file)
            .map_err(|e| input_error(format!("--args-file {}: {e}", file.display())))?,
        (None, None) => return Ok(Value::Object(Default::default())),
    };
    serde_json::from_str(&text).map_err(|e| input_error(format!("--args must be strict JSON: {e}")))
}

fn script_input(path: &Path) -> Result<ScriptInput> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(ScriptInput::Path(absolute))
}

fn parse_run_id(text: &str) -> Result<RunId> {
    RunId::parse(text).map_err(input_error)
}

fn limits(args: &LimitArgs) -> LimitOverrides {
    LimitOverrides {
        max_agents: args.max_agents,
        concurrency: args.concurrency,
        agent_retries: args.agent_retries,
    }
}

/// Maps engine errors to exit codes: rejections are input errors (2).
fn engine_error(error: EngineError) -> anyhow::Error {
    match error {
        EngineError::Rejected(message) => input_error(cli_wording(&message.to_string())),
        EngineError::UnknownRun(run_id) => {
            input_error(format!("No workflow run found for runId \"{run_id}\""))
        }
        other => anyhow!(other),
    }
}

/// Engine messages name the `workflow` tool's actions and fields, which mean nothing on the
/// command line: they become the commands and flags that do the same.
fn cli_wording(message: &str) -> String {
    let mut text = message.to_owned();
    if text.contains("answer it with setup-response") {
        let run_id = text
            .strip_prefix("run ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("<runId>")
            .to_owned();
        text = text.replace(
            "answer it with setup-response",
            &format!("answer it with `agentprism setup {run_id} --approve` (or --decline)"),
        );
    }
    for (tool, cli) in [
        ("callIndex ", "--call "),
        ("forceOwner", "--force-owner"),
        ("checkpointReplies", "--reply INDEX=VALUE"),
    ] {
        text = text.replace(tool, cli);
    }
    text
}

/// Runs a command body, turning input errors into exit code 2.
async fn guarded(body: impl std::future::Future<Output = Result<u8>>) -> Result<u8> {
    match body.await {
        Ok(code) => Ok(code),
        Err(error) if error.downcast_ref::<InputError>().is_some() => {
            note!("agentprism: {error}");
            Ok(EXIT_REJECTED)
        }
        Err(error) => Err(error),
    }
}

async fn validate(env: &EnvSnapshot, args: ValidateArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, !args.no_probe).await?;
        let project = project_dir(args.script.project_dir.as_deref())?;
        let script = script_input(&args.script.script)?;
        let input = parse_args(&args.script)?;
        let prepared = engine
            .validate(&project, &script, input)
            .await
            .map_err(engine_error)?;
        let report = json!({
            "valid": true,
            "name": prepared.analyzed.name,
            "description": prepared.analyzed.description,
            "dryRunCalls": prepared.dry_calls,
            "warnings": prepared.warnings,
            "probes": prepared.probes,
            "declaredBackends": prepared.declared_backends.keys().collect::<Vec<_>>(),
        });
        say!("{}", serde_json::to_string_pretty(&report)?);
        engine.runner().shutdown(Duration::from_secs(5)).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

async fn run_command(env: &EnvSnapshot, args: RunArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, true).await?;
        let project = project_dir(args.script.project_dir.as_deref())?;
        let script = script_input(&args.script.script)?;
        let input = parse_args(&args.script)?;
        let mut notices = engine.subscribe();
        let admission = engine
            .start(RunRequest {
                project_dir: project,
                script,
                args: input,
                limits: limits(&args.limits),
            })
            .await
            .map_err(engine_error)?;
        for warning in &admission.warnings {
            note!("warning: {warning}");
        }
        note!("run {} admitted", admission.run_id);
        if admission.status == RunStatus::Pending {
            let setup_id = admission
                .setup
                .as_ref()
                .and_then(|s| s.pointer("/request/id"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !args.approve_backends {
                let message = admission
                    .setup
                    .as_ref()
                    .and_then(|s| s.pointer("/request/message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                note!("{message}");
                note!(
                    "The run waits for approval. Continue with:\n  agentprism setup {} --approve",
                    admission.run_id
                );
                engine.runner().shutdown(Duration::from_secs(5)).await;
                return Ok(EXIT_PAUSED);
            }
            engine
                .setup_response(
                    &admission.run_id,
                    &setup_id,
                    &json!({"action": "accept", "content": {"approve": true}}),
                )
                .await
                .map_err(engine_error)?;
        }
        follow(&engine, &admission.run_id, &mut notices, &args.foreground).await
    })
    .await
}

async fn resume(env: &EnvSnapshot, args: ResumeArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, true).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let mut replies = Vec::new();
        for reply in &args.replies {
            let (index, value) = reply
                .split_once('=')
                .ok_or_else(|| input_error(format!("--reply {reply:?} must be INDEX=VALUE")))?;
            let index: u32 = index.trim().parse().map_err(|_| {
                input_error(format!("--reply {reply:?}: INDEX must be a call index"))
            })?;
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
            replies.push((index, value));
        }
        let mut notices = engine.subscribe();
        let admission = engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: replies,
                limits: limits(&args.limits),
                operation_id: None,
            })
            .await
            .map_err(engine_error)?;
        if let Some(continuation) = &admission.continuation
            && continuation.get("scriptRevised") == Some(&Value::Bool(true))
        {
            note!("the script file changed: continuing with the revised script");
        }
        note!("run {run_id} resumed");
        follow(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
}

async fn setup(env: &EnvSnapshot, args: SetupArgs) -> Result<u8> {
    guarded(async {
        if !args.approve && !args.decline {
            return Err(input_error("say --approve or --decline"));
        }
        let engine = build_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let record = engine
            .load_reconciled(&run_id)
            .await
            .map_err(engine_error)?;
        let setup_id = record
            .setup
            .as_ref()
            .and_then(|s| s.pointer("/request/id"))
            .and_then(Value::as_str)
            .ok_or_else(|| input_error(format!("run {run_id} has no setup request")))?
            .to_owned();
        let response = if args.approve {
            json!({"action": "accept", "content": {"approve": true}})
        } else {
            json!({"action": "decline"})
        };
        let mut notices = engine.subscribe();
        let answer = json!(
            engine
                .setup_response(&run_id, &setup_id, &response)
                .await
                .map_err(engine_error)?
        );
        if !args.approve {
            note!(
                "declined; run {run_id} is aborted (setup_declined) and cannot be resumed: a declined approval is final"
            );
            return Ok(EXIT_FAILED);
        }
        if answer.get("status").and_then(Value::as_str) != Some("running") {
            note!("{answer}");
            return Ok(EXIT_COMPLETED);
        }
        follow(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
}

/// Follows a run executing in this process until it settles, showing progress on stderr and
/// answering permission requests; then prints the result and maps the status to an exit code.
async fn follow(
    engine: &Engine,
    run_id: &RunId,
    notices: &mut tokio::sync::broadcast::Receiver<RunNotice>,
    options: &ForegroundArgs,
) -> Result<u8> {
    let interactive = std::io::stderr().is_terminal();
    let policy = match options.permissions.as_deref() {
        Some("allow") => Policy::Allow,
        Some("reject") => Policy::Reject,
        Some("ask") => Policy::Ask,
        None if std::io::stdin().is_terminal() => Policy::Ask,
        None => Policy::Reject,
        Some(other) => {
            return Err(input_error(format!(
                "--permissions must be ask, allow or reject, got {other:?}"
            )));
        }
    };
    let mut display = Progress::new(interactive);
    // The signal that interrupted the run: Ctrl-C, SIGTERM and SIGHUP all pause it the same
    // way, and the exit code is 128 + its number.
    let mut interrupted: Option<(&str, u8)> = None;
    let wait = engine.wait(run_id);
    tokio::pin!(wait);
    let mut signals = Interruptions::new()?;
    // This process has no control socket: a stop asked for elsewhere reaches it as a durable
    // intent, which it looks for here (daemon.md 1.10 step 8).
    let mut intents = tokio::time::interval(FOREGROUND_INTENT_POLL);
    intents.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut wait => break,
            _ = intents.tick() => {
                engine.complete_stop_intents().await;
            }
            signal = signals.next(), if interrupted.is_none() => {
                interrupted = Some(signal);
                display.clear();
                note!("interrupted by {}: pausing run {run_id} (resume it with `agentprism resume {run_id}`)", signal.0);
                engine.interrupt_all(Duration::from_secs(10)).await;
            }
            notice = notices.recv() => match notice {
                Ok(RunNotice::Event { run_id: id, record }) if &id == run_id => display.event(&record.event),
                Ok(RunNotice::Permission { run_id: id, permission_id, request }) if &id == run_id => {
                    display.clear();
                    let outcome = answer_permission(&policy, &request);
                    if let Err(error) = engine.respond_permission(run_id, &permission_id, outcome).await {
                        note!("permission answer refused: {error}");
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    display.clear();
    // Acknowledges a stop intent this run has just carried out.
    engine.complete_stop_intents().await;
    engine.runner().shutdown(Duration::from_secs(5)).await;
    let status = json!(
        engine
            .status(run_id, &StatusQuery::default())
            .await
            .map_err(engine_error)?
    );
    let state = status
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    if options.json {
        say!("{}", serde_json::to_string_pretty(&status)?);
    }
    report_failed_calls(engine, run_id).await;
    let outcome = status.get("outcome").cloned().unwrap_or(Value::Null);
    let code = match state.as_str() {
        "completed" => {
            if !options.json {
                match outcome.get("result") {
                    Some(result) => say!("{}", serde_json::to_string_pretty(result)?),
                    None => say!("null"),
                }
            }
            EXIT_COMPLETED
        }
        "paused" => {
            let reason = status
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("requested");
            note!("run {run_id} paused: {reason}");
            if let Some(context) = outcome.get("checkpointContext") {
                let index = context
                    .get("callIndex")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                note!(
                    "checkpoint {index}: {}",
                    context
                        .get("prompt")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                );
                let example = match context.get("kind").and_then(Value::as_str) {
                    Some("input") => "'\"your answer\"'".to_owned(),
                    Some("select") => format!(
                        "'{}'",
                        context
                            .pointer("/choices/0")
                            .cloned()
                            .unwrap_or(Value::Null)
                    ),
                    _ => "true".to_owned(),
                };
                note!("continue with:\n  agentprism resume {run_id} --reply {index}={example}");
            } else {
                if let Some(auth) = outcome.get("authContext") {
                    note!("the backend needs credentials: {auth}");
                }
                if let Some(hint) = outcome.get("resetHint") {
                    note!("usage limit; resets: {hint}");
                }
                note!("continue with:\n  agentprism resume {run_id}");
            }
            match interrupted {
                Some((_, code)) => code,
                None => EXIT_PAUSED,
            }
        }
        "failed" => {
            let message = outcome
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the run failed");
            let code = status
                .get("errorCode")
                .and_then(Value::as_str)
                .unwrap_or("SCRIPT_ERROR");
            note!("run {run_id} failed: {code}: {message}");
            EXIT_FAILED
        }
        other => {
            note!("run {run_id} ended {other}");
            match interrupted {
                Some((_, code)) => code,
                None => EXIT_FAILED,
            }
        }
    };
    Ok(code)
}

/// How many failed calls [`report_failed_calls`] lists one by one.
const FAILED_CALLS_LISTED: usize = 10;

/// "N of M agent calls failed" on stderr, with the first failures' codes and messages, when
/// any agent call of the run's latest journal failed.
async fn report_failed_calls(engine: &Engine, run_id: &RunId) {
    let Ok(calls) = engine.store().latest_calls(run_id).await else {
        return;
    };
    let agents: Vec<_> = calls
        .iter()
        .filter(|call| call.kind == crate::model::CallKind::Agent)
        .collect();
    let failed: Vec<_> = agents.iter().filter(|call| call.error.is_some()).collect();
    if failed.is_empty() {
        return;
    }
    note!("{} of {} agent calls failed:", failed.len(), agents.len());
    for call in failed.iter().take(FAILED_CALLS_LISTED) {
        let error = call.error.as_ref().expect("filtered on error");
        note!(
            "  #{} {}: {}: {}",
            call.index,
            call.label.as_deref().unwrap_or("agent"),
            error.code,
            crate::engine::status::error_message(&error.message)
        );
    }
    if failed.len() > FAILED_CALLS_LISTED {
        note!(
            "  … and {} more (`agentprism status {run_id} --json` lists them)",
            failed.len() - FAILED_CALLS_LISTED
        );
    }
}

enum Policy {
    Allow,
    Reject,
    Ask,
}

fn answer_permission(policy: &Policy, request: &Value) -> PermissionOutcome {
    let options: Vec<(String, String, String)> = request
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.get("optionId")?.as_str()?.to_owned(),
                o.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                o.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ))
        })
        .collect();
    let pick = |prefix: &str| {
        options
            .iter()
            .find(|(_, _, kind)| kind.starts_with(prefix))
            .map(|(id, _, _)| id.clone())
    };
    match policy {
        Policy::Allow => pick("allow")
            .map(|option_id| PermissionOutcome::Selected { option_id })
            .unwrap_or(PermissionOutcome::Cancelled),
        Policy::Reject => pick("reject")
            .map(|option_id| PermissionOutcome::Selected { option_id })
            .unwrap_or(PermissionOutcome::Cancelled),
        Policy::Ask => {
            let label = request
                .get("label")
                .and_then(Value::as_str)
                .unwrap_or("agent");
            let title = request
                .pointer("/toolCall/title")
                .and_then(Value::as_str)
                .unwrap_or("a tool call");
            note!("{label} asks permission for: {title}");
            for (position, (_, name, kind)) in options.iter().enumerate() {
                note!("  {}) {name} ({kind})", position + 1);
            }
            note_partial!("choose 1-{} (anything else cancels): ", options.len());
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            match line.trim().parse::<usize>() {
                Ok(choice) if choice >= 1 && choice <= options.len() => {
                    PermissionOutcome::Selected {
                        option_id: options[choice - 1].0.clone(),
                    }
                }
                _ => PermissionOutcome::Cancelled,
            }
        }
    }
}

/// The live progress display: a redrawn line on a terminal, plain lines otherwise.
struct Progress {
    interactive: bool,
    phase: Option<String>,
    running: u64,
    done: u64,
    failed: u64,
    tokens: u64,
    drawn: bool,
}

impl Progress {
    fn new(interactive: bool) -> Progress {
        Progress {
            interactive,
            phase: None,
            running: 0,
            done: 0,
            failed: 0,
            tokens: 0,
            drawn: false,
        }
    }

    fn event(&mut self, event: &Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let line = match kind {
            "log" => event
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            "phase" => {
                self.phase = event
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.phase.as_ref().map(|p| format!("phase: {p}"))
            }
            "agentStart" => {
                self.running += 1;
                let replay = event.get("replay") == Some(&Value::Bool(true));
                Some(format!(
                    "{} {}",
                    if replay { "replayed" } else { "started" },
                    event
                        .get("label")
                        .and_then(Value::as_str)
                        .unwrap_or("agent")
                ))
            }
            "agentEnd" => {
                self.running = self.running.saturating_sub(1);
                if let Some(code) = event.get("errorCode").and_then(Value::as_str) {
                    self.failed += 1;
                    Some(format!(
                        "{} failed: {code}{}",
                        event
                            .get("label")
                            .and_then(Value::as_str)
                            .unwrap_or("agent"),
                        event
                            .get("errorMessage")
                            .and_then(Value::as_str)
                            .map(|message| format!(": {message}"))
                            .unwrap_or_default()
                    ))
                } else {
                    self.done += 1;
                    Some(format!(
                        "finished {}",
                        event
                            .get("label")
                            .and_then(Value::as_str)
                            .unwrap_or("agent")
                    ))
                }
            }
            "tokenUsage" => {
                self.tokens = event
                    .pointer("/usage/totalTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.tokens);
                None
            }
            "error" => event
                .pointer("/errorRecord/message")
                .and_then(Value::as_str)
                .map(|m| format!("error: {m}")),
            _ => None,
        };
        if self.interactive {
            if kind == "log"
                && let Some(line) = line
            {
                self.clear();
                note!("{line}");
            }
            self.draw();
        } else if let Some(line) = line {
            note!("{line}");
        }
    }

    fn draw(&mut self) {
        let phase = self.phase.as_deref().unwrap_or("-");
        note_partial!(
            "\r\x1b[2K[{phase}] running {} · done {} · failed {} · {} tokens",
            self.running,
            self.done,
            self.failed,
            self.tokens
        );
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.interactive && self.drawn {
            note_partial!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
            self.drawn = false;
        }
    }
}

async fn status(env: &EnvSnapshot, args: StatusArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        if !(1..=50).contains(&args.last) {
            return Err(input_error("--last must be 1 to 50"));
        }
        if args.logs > 50 {
            return Err(input_error("--logs must be 0 to 50"));
        }
        if let Some(pattern) = &args.label {
            crate::engine::glob::check_glob(pattern).map_err(input_error)?;
        }
        let query = StatusQuery {
            last_n: args.last,
            label_glob: args.label.clone(),
            log_lines: args.logs,
        };
        let status = json!(engine.status(&run_id, &query).await.map_err(engine_error)?);
        if args.json {
            say!("{}", serde_json::to_string_pretty(&status)?);
            return Ok(EXIT_COMPLETED);
        }
        let get = |key: &str| {
            status
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_owned()
        };
        say!(
            "run {}  {}  ({})",
            get("runId"),
            get("status"),
            get("workflowName")
        );
        if let Some(reason) = status.get("reason").and_then(Value::as_str) {
            say!("reason: {reason}");
        }
        if let Some(phase) = status.get("currentPhase").and_then(Value::as_str) {
            say!("phase: {phase}");
        }
        say!(
            "tokens: {}",
            status
                .pointer("/tokenUsage/totalTokens")
                .and_then(Value::as_u64)
                .unwrap_or(0)
        );
        for call in status
            .get("calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let state = call
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    let code = call.get("errorCode").and_then(Value::as_str)?;
                    Some(match call.get("errorMessage").and_then(Value::as_str) {
                        Some(message) => format!("{code}: {message}"),
                        None => code.to_owned(),
                    })
                })
                .unwrap_or_else(|| "done".to_owned());
            say!(
                "  #{:<4} {:<40} {}",
                call.get("index").and_then(Value::as_u64).unwrap_or(0),
                call.get("label").and_then(Value::as_str).unwrap_or("-"),
                state
            );
        }
        for line in status
            .pointer("/logTail/lines")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            say!("  | {}", line.as_str().unwrap_or_default());
        }
        if let Some(context) = status.pointer("/outcome/checkpointContext") {
            say!(
                "waiting on checkpoint {}: {}",
                context.get("callIndex").unwrap_or(&Value::Null),
                context
                    .get("prompt")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
        }
        if let Some(error) = status
            .pointer("/outcome/error/message")
            .and_then(Value::as_str)
        {
            say!("error: {error}");
        }
        report_failed_calls(&engine, &run_id).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

async fn runs(env: &EnvSnapshot, args: RunsArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, false).await?;
        if let Some(RunsAction::Rm { run_id }) = &args.action {
            let run_id = parse_run_id(run_id)?;
            // A running daemon deletes it, so that its MCP sessions hear of it.
            let paths = crate::discovery::Paths::new(persistence_root(env)?);
            let owner = engine.owner().owner_id.clone();
            match crate::daemon::control::delete_through_daemon(&paths, &owner, &run_id).await {
                crate::daemon::control::DaemonDelete::Deleted { pid } => {
                    note!("deleted run {run_id} (through the daemon, pid {pid})");
                }
                crate::daemon::control::DaemonDelete::Refused(message) => {
                    return Err(input_error(message));
                }
                crate::daemon::control::DaemonDelete::UnknownRun => {
                    return Err(engine_error(EngineError::UnknownRun(run_id)));
                }
                crate::daemon::control::DaemonDelete::NoDaemon => {
                    engine.delete(&run_id).await.map_err(engine_error)?;
                    note!("deleted run {run_id}");
                }
            }
            return Ok(EXIT_COMPLETED);
        }
        let project = if args.all {
            None
        } else {
            Some(project_dir(args.project_dir.as_deref())?)
        };
        let list = engine
            .list(project.as_deref(), args.limit)
            .await
            .map_err(engine_error)?;
        if args.json {
            say!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(EXIT_COMPLETED);
        }
        for run in list {
            say!(
                "{:<24} {:<10} {:<24} {}",
                run.run_id.as_str(),
                run.status.as_str(),
                crate::util::iso_time(run.started_at),
                run.workflow_name
            );
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

async fn stop(env: &EnvSnapshot, args: StopArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let status = json!(
            engine
                .stop_with(
                    &run_id,
                    args.call_index,
                    args.force_owner,
                    &StatusQuery::default(),
                )
                .await
                .map_err(engine_error)?
        );
        let state = status.get("status").and_then(Value::as_str).unwrap_or("-");
        let control = status.get("control");
        if let Some(control) = control.filter(|c| c["state"] == "pending") {
            say!(
                "{}",
                serde_json::to_string_pretty(&json!({"control": control}))?
            );
            note!(
                "run {run_id}: stop pending (operation {}): {}; the owner carries it out when it can, and `agentprism stop {run_id}` again reuses the operation",
                control["operationId"].as_str().unwrap_or("-"),
                control["reason"].as_str().unwrap_or("the owner did not answer"),
            );
            return Ok(EXIT_FAILED);
        }
        if let Some(cancelled) = status.get("cancelled") {
            note!("run {run_id}: cancelled call {}", cancelled["callIndex"]);
        } else if status.get("alreadyTerminal") == Some(&Value::Bool(true)) {
            note!("run {run_id} had already ended ({state})");
        } else if let Some(pid) = control
            .filter(|c| c.get("cold").is_none())
            .and_then(|c| c.pointer("/owner/pid"))
        {
            note!("run {run_id}: {state} (stopped by daemon pid {pid})");
        } else {
            note!("run {run_id}: {state}");
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

async fn result(env: &EnvSnapshot, args: ResultArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let record = engine
            .load_reconciled(&run_id)
            .await
            .map_err(engine_error)?;
        let text = crate::engine::manager::exact_result(&record).map_err(engine_error)?;
        say!("{text}");
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// Serves the workflow MCP server until stdin closes (stdio) or a signal (HTTP).
async fn serve(env: &EnvSnapshot, args: ServeArgs) -> Result<u8> {
    guarded(async {
        let engine = build_engine(env, true).await?;
        let default_project_dir = match &args.project_dir {
            Some(dir) => Some(project_dir(Some(dir))?),
            None => None,
        };
        let options = crate::tools::WorkflowServerOptions {
            default_project_dir,
            ..crate::tools::WorkflowServerOptions::default()
        };
        let handler = crate::tools::WorkflowServer::new(engine.clone(), options);
        let server = Arc::new(crate::mcp::server::McpServer::new(
            handler.clone(),
            crate::mcp::server::ServerOptions::default(),
        ));
        if args.http {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
                .await
                .with_context(|| format!("binding 127.0.0.1:{}", args.port))?;
            let address = listener.local_addr()?;
            say!("http://{address}/mcp");
            let http_options = crate::transport::http::HttpOptions {
                allowed_origins: env
                    .get(env::DAEMON_ALLOWED_ORIGINS)
                    .map(|list| {
                        list.split(',')
                            .map(|o| o.trim().to_owned())
                            .filter(|o| !o.is_empty())
                            .collect()
                    })
                    .unwrap_or_default(),
                access: crate::daemon::http_access(env, &crate::discovery::Paths::from_env(env)?),
                ..Default::default()
            };
            crate::transport::http::serve(
                listener,
                server.clone(),
                http_options,
                shutdown_signal(),
            )
            .await?;
        } else {
            crate::transport::stdio::serve_stdio(
                server.clone(),
                tokio::io::stdin(),
                tokio::io::stdout(),
            )
            .await?;
        }
        server.shutdown();
        handler.shutdown().await;
        engine.shutdown(Duration::from_secs(5)).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// The signals that interrupt a foreground run: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the
/// terminal closing). Each pauses the run so that it can be resumed.
struct Interruptions {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Interruptions {
    fn new() -> Result<Interruptions> {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("listening for {name}"))
        };
        Ok(Interruptions {
            interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
            terminate: listen(SignalKind::terminate(), "SIGTERM")?,
            hangup: listen(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal's name and the exit code it gives.
    async fn next(&mut self) -> (&'static str, u8) {
        tokio::select! {
            _ = self.interrupt.recv() => ("Ctrl-C", EXIT_INTERRUPTED),
            _ = self.terminate.recv() => ("SIGTERM", EXIT_TERMINATED),
            _ = self.hangup.recv() => ("SIGHUP", EXIT_HANGUP),
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
