//! The command line's clap types: every command, flag and help text of `agentprism` (the
//! `daemon` subcommands are in `cli/daemon/`). Nothing here runs anything.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::daemon;

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
    /// Check a workflow script or saved workflow without running agents (zero tokens).
    Validate(ValidateArgs),
    /// Run a workflow script or saved workflow in the foreground and print its result as JSON.
    Run(RunArgs),
    /// Show a run's status.
    Status(StatusArgs),
    /// Pause a run a daemon executes; it stays resumable (`resume`).
    Pause(PauseArgs),
    /// Continue a paused, stopped or failed run under the same id.
    Resume(ResumeArgs),
    /// List runs, or delete one (`runs rm <RUN_ID>`).
    Runs(RunsArgs),
    /// Stop a run (or one agent call with --call).
    Stop(StopArgs),
    /// Answer a run's pending backend-approval setup, then execute it in the foreground.
    Setup(SetupArgs),
    /// Print a completed run's exact result JSON.
    Result(ResultArgs),
    /// List the branches a run's isolated agent calls left, or merge one into the project's
    /// current branch (`--apply`).
    Changes(ChangesArgs),
    /// Probe the backends a script can route to: their models, modes and options (zero
    /// tokens).
    Config(ConfigArgs),
    /// Serve the `workflow` MCP server over stdio or loopback HTTP.
    Serve(ServeArgs),
    /// List the saved workflows (project, user, bundled), or write, show or save one
    /// (docs/workflows.md).
    Workflows(WorkflowsArgs),
    /// Pack a folder of workflows into an encrypted workflows pack (docs/pack.md).
    Pack(PackArgs),
    /// Manage the per-user workflow daemon: run, start, stop, status, url, logs.
    Daemon(daemon::DaemonArgs),
    /// Print the URL of the run monitor panel on the daemon (starting it if needed).
    Monitor(super::monitor::MonitorArgs),
    /// Print a shell completion script (bash, zsh or fish); the packages ship its output.
    Completions(CompletionsArgs),
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

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: CompletionShell,
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
    /// A folder of workflow scripts to serve as tools of their own (docs/serve.md). Without
    /// it, the `workflow` tool is served.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Speak MCP on stdin/stdout (what a host launches; the default).
    #[arg(long, conflicts_with = "http")]
    pub stdio: bool,
    /// Serve Streamable HTTP; prints the URL on stdout once listening. Without a value it
    /// binds 127.0.0.1 (on `--port`); a folder server may name `HOST:PORT`.
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = "")]
    pub http: Option<String>,
    /// The HTTP port when `--http` names no address (0 picks a free one).
    #[arg(long, default_value_t = 0, requires = "http")]
    pub port: u16,
    /// The project `run` and `config` use when a request leaves out `projectDir`.
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    pub project_dir: Option<PathBuf>,
    /// Folder server: keep run state here, so a later process can continue its runs
    /// (default: a temporary folder removed at exit).
    #[arg(long, value_name = "DIR", env = "MHL_SERVE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Folder server: the run store several serve replicas share (docs/serve.md,
    /// "Replicas"): a PostgreSQL URL or a SQLite persistence root (a folder); also from
    /// `MHL_SERVE_STORE_FILE` or the systemd credential MHL_SERVE_STORE. Runs then hold
    /// leases that lapse after `MHL_SERVE_RUN_LOCK_TTL` (default 45s). Not with
    /// `--state-dir`.
    #[arg(
        long,
        value_name = "LOCATION",
        env = "MHL_SERVE_STORE",
        hide_env_values = true,
        conflicts_with = "state_dir"
    )]
    pub store: Option<String>,
    /// Folder server with `--store`: acknowledge that this is the only process writing to
    /// the store, so a store without atomic compare-and-swap is accepted (ignored without
    /// `--store`).
    #[arg(long, env = "MHL_SERVE_SINGLE_REPLICA")]
    pub single_replica: bool,
    /// Folder server over HTTP: require `Authorization: Bearer <token>` on every request.
    /// Prefer a file (`MHL_SERVE_TOKEN_FILE`, or the systemd credential MHL_SERVE_TOKEN) or
    /// the variable: a command line is visible to other users.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "MHL_SERVE_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Folder server over HTTP: the header an authenticated gateway puts the caller's
    /// identity in; runs then belong to that identity. Needs `--token`.
    #[arg(long, value_name = "HEADER", env = "MHL_SERVE_PRINCIPAL_HEADER")]
    pub principal_header: Option<String>,
    /// Folder server: how long a finished run stays pollable before it is deleted, such as
    /// `1h` (the default) or `90s`.
    #[arg(
        long,
        value_name = "DURATION",
        env = "MHL_SERVE_TERMINAL_RUN_TTL",
        value_parser = humantime::parse_duration
    )]
    pub terminal_run_ttl: Option<std::time::Duration>,
    /// Folder server: runs prepared or executing at once (0: the engine's default,
    /// `AGENTPRISM_DAEMON_MAX_RUNS`); a start beyond it waits in the queue.
    #[arg(long, value_name = "N", env = "MHL_SERVE_MAX_CONCURRENT_RUNS")]
    pub max_concurrent_runs: Option<usize>,
    /// Folder server: starts that may wait in the queue for a slot, across replicas
    /// (default 1000, at most 100000); past it a start is refused, saying so. 0 turns the
    /// queue off: a start beyond capacity is refused.
    #[arg(
        long,
        value_name = "N",
        env = "MHL_SERVE_MAX_QUEUED_RUNS",
        value_parser = clap::value_parser!(u64).range(0..=100_000)
    )]
    pub max_queued_runs: Option<u64>,
    /// Folder server over HTTP: a URL prefix (`https://hooks.example.com/a2a/`) A2A push
    /// notifications may be sent under; repeat it, or separate prefixes with commas in the
    /// variable. Without one, push notifications are off.
    #[arg(
        long,
        value_name = "URL",
        env = "MHL_SERVE_A2A_PUSH_ALLOW",
        value_delimiter = ','
    )]
    pub a2a_push_allow: Vec<String>,
    /// Folder server over HTTP: serve the workflows of this encrypted pack, its key in
    /// `MHL_SERVE_WORKFLOWS_KEY`; `DIR` is then only the folder runs execute in, and
    /// nothing is read from it (docs/pack.md).
    #[arg(long, value_name = "FILE", requires = "dir")]
    pub workflows_pack: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PackArgs {
    /// The folder to pack: every non-hidden regular file under it.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The pack file to write (mode 0600, replacing any earlier one).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Draw a fresh key and print it (64 hex characters, nothing else) on stdout, instead of
    /// taking the key from `MHL_SERVE_WORKFLOWS_KEY`.
    #[arg(long)]
    pub new_key: bool,
}

#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The workflow script file, or a saved workflow's name. A path when it contains `/`,
    /// ends in `.js`, `.mjs` or `.cjs`, or names an existing file; else a name, looked up in
    /// the project's folder, the user's folder and the bundled library, in that order.
    #[arg(value_name = "SCRIPT_OR_NAME")]
    pub script: PathBuf,
    /// The project directory the run belongs to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Script input (the `args` global) as a JSON value.
    #[arg(long, value_name = "JSON", conflicts_with = "args_file")]
    pub args: Option<String>,
    /// Script input read from a JSON file.
    #[arg(long, value_name = "FILE")]
    pub args_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most agent calls the run may make (1..10000, default 1000).
    #[arg(long, value_name = "N")]
    pub max_agents: Option<i64>,
    /// Agent calls running at once (1..16, default 8).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<i64>,
    /// Retries of a failed agent call (0..3, default 0).
    #[arg(long, value_name = "N")]
    pub agent_retries: Option<i64>,
    /// Total tokens the run may spend; at the limit it pauses with reason budget (default
    /// meta.tokenBudget, else none; on resume, a new limit above the spend).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub token_budget: Option<i64>,
    /// US dollars the run may spend, only over backends that report cost (built-in claude);
    /// at the limit it pauses with reason budget (default meta.costBudgetUsd, else none).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub cost_budget_usd: Option<f64>,
    /// Do not resume the run by itself when a provider's usage limit resets (by default it
    /// does, up to 3 times in a row; docs/api.md, "Usage limits").
    #[arg(long)]
    pub no_auto_resume: bool,
}

#[derive(Debug, Args)]
pub struct ForegroundArgs {
    /// How to answer agents' permission requests: ask (on a terminal), allow, or reject.
    #[arg(long, value_name = "POLICY")]
    pub permissions: Option<String>,
    /// Print the final status document as JSON instead of only the result.
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
    /// Scripted dry-run answers: a JSON object of label globs to answers, merged over the
    /// made-up ones (`{"refute:*": {"real": false}}`; `{"$sequence": [...]}` answers in turn).
    #[arg(long, value_name = "JSON", conflicts_with = "mock_answers_file")]
    pub mock_answers: Option<String>,
    /// The same, read from a file.
    #[arg(long, value_name = "FILE")]
    pub mock_answers_file: Option<std::path::PathBuf>,
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
    /// Start a run above the confirmation threshold (`AGENTPRISM_CONFIRM_AGENTS`, default 100
    /// agent calls) without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run's id, as `run` printed it (`agentprism runs` lists them).
    pub run_id: String,
    /// Latest calls to show (1..50).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub last: usize,
    /// Log lines to show (0..50).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub logs: usize,
    /// Only calls whose label matches this glob.
    #[arg(long, value_name = "GLOB")]
    pub label: Option<String>,
    /// Print the whole status document as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The run to pause.
    pub run_id: String,
    /// Print the whole answer (the status document with `pauseRequested` and `paused`) as
    /// JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue.
    pub run_id: String,
    /// A checkpoint answer `INDEX=VALUE`; VALUE is JSON (`true`, `"text"`) or plain text.
    #[arg(long = "reply", value_name = "INDEX=VALUE")]
    pub replies: Vec<String>,
    /// Redo a call: its recorded answer is set aside and it runs live, and so does every later
    /// call whose prompt changes because of it; the rest replay. A number is a call index
    /// (as `status` lists calls), anything else a label (every call with it). Repeatable;
    /// also resumes a completed run.
    #[arg(long = "rerun", value_name = "INDEX_OR_LABEL")]
    pub rerun: Vec<String>,
    /// Redo every call with this label, even one that reads as a number. Repeatable.
    #[arg(long = "rerun-label", value_name = "LABEL")]
    pub rerun_labels: Vec<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub foreground: ForegroundArgs,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub action: Option<RunsAction>,
    /// Only runs of this project (default: the current directory).
    #[arg(long, value_name = "DIR", conflicts_with = "all")]
    pub project_dir: Option<PathBuf>,
    /// Runs of every project.
    #[arg(long)]
    pub all: bool,
    /// Most runs to list, newest first.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Print the list as JSON: each run's id, project, workflow name, status, pause reason,
    /// start and last change (ISO 8601) and whether it has a result.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Delete a run record and its stored script copy (never a caller's own script file).
    Rm {
        /// The run to delete.
        run_id: String,
    },
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// The run to stop.
    pub run_id: String,
    /// Cancel only this live agent call (its index, as `status` lists it).
    #[arg(long = "call", value_name = "INDEX")]
    pub call_index: Option<u32>,
    /// Also end the run's owner if it is a superseded daemon that still holds the run
    /// (SIGTERM, then SIGKILL); whole-run stops only.
    #[arg(long, conflicts_with = "call_index")]
    pub force_owner: bool,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The run waiting for its backends' approval.
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
    /// The completed run.
    pub run_id: String,
}

#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The run whose isolated calls to list.
    pub run_id: String,
    /// Merge this call's branch (its index, as the list shows it) into the current branch
    /// of the run's project; on a conflict nothing is changed and the files are named.
    #[arg(long = "apply", value_name = "INDEX")]
    pub apply: Option<u32>,
    /// Print the list as JSON: the run's workspace base and each isolated call's changes.
    #[arg(long, conflicts_with = "apply")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The folder the probes' sessions open in (default: the current directory); a backend
    /// may read project settings from it.
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// A backend to probe (repeatable; default: every registered backend).
    #[arg(long = "harness", value_name = "NAME")]
    pub harnesses: Vec<String>,
    /// An exact `BACKEND/MODEL` route to probe for its modes and options (repeatable).
    #[arg(long = "model-spec", value_name = "BACKEND/MODEL")]
    pub model_specs: Vec<String>,
    /// Keep only model choices containing this text (case-insensitive, `*` matches any
    /// run), or matching `/PATTERN/` (`.`, `*`, `^`, `$`).
    #[arg(long, value_name = "FILTER")]
    pub model_filter: Option<String>,
    /// Print the whole config document as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkflowsArgs {
    #[command(subcommand)]
    pub action: Option<WorkflowsAction>,
    #[command(flatten)]
    pub list: WorkflowsListArgs,
}

#[derive(Debug, Args)]
pub struct WorkflowsListArgs {
    /// The project whose `.agentprism/workflows` folder to list (default: the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Print the list as JSON: each workflow's name, origin, path, description, whenToUse,
    /// inputSchema, phases, shadowedBy and error.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WorkflowsAction {
    /// List the saved workflows (the default); exits 1 when one of them is broken.
    List(WorkflowsListArgs),
    /// Write a commented starting point, `<NAME>.js`: one agent call on the backend its
    /// `model` argument names.
    New {
        /// The new workflow's name (a-z, 0-9, `-`, `_`; at most 64).
        name: String,
        #[command(flatten)]
        place: SavePlace,
        /// The project to write into (default: the current directory); not with --user.
        #[arg(long, value_name = "DIR", conflicts_with = "user")]
        project_dir: Option<PathBuf>,
    },
    /// Print the source of the workflow a name runs, or copy it into a folder to edit.
    Show {
        /// The workflow's name.
        name: String,
        /// Write the source to the project's folder (or the user's, with --user) and print
        /// the path, instead of printing the source.
        #[arg(long)]
        copy: bool,
        /// With --copy: write to the user's folder instead of the project's.
        #[arg(long, requires = "copy")]
        user: bool,
        /// With --copy: replace a file of that name.
        #[arg(long, requires = "copy")]
        force: bool,
        /// The project to look in and copy into (default: the current directory).
        #[arg(long, value_name = "DIR")]
        project_dir: Option<PathBuf>,
    },
    /// Save the script a run executed (its latest revision) as a workflow in the run's
    /// project folder (or the user's, with --user).
    Save {
        /// The run whose script to save.
        run_id: String,
        /// The name to save it under.
        name: String,
        #[command(flatten)]
        place: SavePlace,
    },
}

#[derive(Debug, Args)]
pub struct SavePlace {
    /// Write to the user's folder instead of the project's.
    #[arg(long)]
    pub user: bool,
    /// Replace a file of that name.
    #[arg(long)]
    pub force: bool,
}
