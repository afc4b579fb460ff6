//! The `agentprism` command line: argument types (clap, `args.rs`) and the commands that
//! drive the engine in the foreground. Each command builds what it needs through the
//! composition root (`crate::app`) and keeps only the words, flags and exit codes:
//! `foreground.rs` (`validate`, `run`, `resume`, `setup`) and `follow.rs` (watching a run
//! execute here, `progress.rs` its display), `inspect.rs` (`status`, `pause`, `runs`, `stop`,
//! `result`), `changes.rs` (`changes`: isolated calls' branches, and applying one),
//! `config.rs` (the backends' probes), `workflows.rs` (saved workflows: list, new, show,
//! save), `monitor.rs` (the run monitor's URL on the
//! daemon), `serve.rs`, `completions.rs`, `input.rs` (input errors, engine errors in CLI
//! words), `daemon/` (`agentprism daemon …`).
//!
//! Exit codes of `run`, `resume` and `setup`: 0 completed, 1 failed or stopped (or completed
//! with every agent call failed), 2 rejected (bad input, nothing persisted), 3 paused or
//! waiting for setup, 130 interrupted by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (the run is
//! left paused/interrupted and resumable, and the resume command is printed). `validate` has
//! codes of its own (`foreground::validate`); `docs/cli.md` has every command's.

/// `println!` that never panics on a closed stdout (`src/output.rs`).
macro_rules! say {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*), true) };
}

/// `print!` that never panics on a closed stdout.
macro_rules! say_partial {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*), false) };
}

/// `eprintln!` that never panics on a closed stderr.
macro_rules! note {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!($($arg)*), true) };
}

/// `eprint!` that never panics on a closed stderr.
macro_rules! note_partial {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!($($arg)*), false) };
}

mod args;
mod changes;
mod completions;
mod confirm;
mod config;
pub(crate) mod daemon;
mod follow;
mod foreground;
mod input;
mod inspect;
mod monitor;
mod pack;
mod progress;
mod serve;
mod workflows;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::env::EnvSnapshot;

pub use args::{
    ChangesArgs, Cli, Command, CompletionShell, CompletionsArgs, ConfigArgs, ForegroundArgs,
    LimitArgs, PackArgs, PauseArgs, ReaperArgs, ResultArgs, ResumeArgs, RunArgs, RunsAction,
    RunsArgs, SavePlace, ScriptArgs, ServeArgs, SetupArgs, StatusArgs, StopArgs, ValidateArgs,
    WorkflowsAction, WorkflowsArgs, WorkflowsListArgs,
};
pub use completions::public_command;

/// Exit code of a completed run.
pub(crate) const EXIT_COMPLETED: u8 = 0;
/// A failed or stopped run, or an operational error.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Rejected before anything was persisted.
pub(crate) const EXIT_REJECTED: u8 = 2;
/// Paused, or waiting for a setup answer.
pub(crate) const EXIT_PAUSED: u8 = 3;
/// Interrupted by Ctrl-C (128 + SIGINT).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;
/// Interrupted by SIGTERM (128 + 15).
pub(crate) const EXIT_TERMINATED: u8 = 143;
/// Interrupted by SIGHUP (128 + 1).
pub(crate) const EXIT_HANGUP: u8 = 129;
/// `validate`: the script fails its static checks (syntax, the `meta` literal, ...).
pub(crate) const EXIT_INVALID_SCRIPT: u8 = 1;
/// `validate`: the script's mocked dry run, or its routing, fails.
pub(crate) const EXIT_DRY_RUN_FAILED: u8 = 2;
/// `validate`: the script could not be checked (a usage error, an unreadable file, a bad
/// setting, an operational failure).
pub(crate) const EXIT_UNCHECKED: u8 = 3;

/// Parses the process's arguments. On a usage error, clap's message is printed and the
/// error is the exit code: 2, or [`EXIT_UNCHECKED`] for `validate`, whose 1 and 2 are
/// verdicts on a script; `--help` and `--version` print and exit 0.
pub fn parse() -> Result<Cli, ExitCode> {
    use clap::Parser;
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    Cli::try_parse_from(&args).map_err(|error| {
        // A closed stdout or stderr has nowhere to take the message: the code still tells.
        let _ = error.print();
        if error.exit_code() == 0 {
            return ExitCode::SUCCESS;
        }
        // agentprism has no options before its command, so the command is the first argument.
        let validating = args.get(1).is_some_and(|command| command == "validate");
        ExitCode::from(if validating {
            EXIT_UNCHECKED
        } else {
            EXIT_REJECTED
        })
    })
}

/// The main runtime's async workers (the benches build the same runtime).
pub const MAIN_WORKERS: usize = 1;

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
    // One async worker (docs/performance.md, "One async worker"): the daemon's work is many
    // short steps handed between tasks, and a second worker that the first wakes for each
    // of them cost more CPU and wall time than it saved. Scripts run on threads of their
    // own, and any wait of the store moves off the worker (`block_in_place`), which needs
    // the multi-threaded flavor.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(MAIN_WORKERS)
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
        Command::Validate(args) => foreground::validate(&env, args).await,
        Command::Run(args) => foreground::run_command(&env, args).await,
        Command::Status(args) => inspect::status(&env, args).await,
        Command::Pause(args) => inspect::pause(&env, args).await,
        Command::Resume(args) => foreground::resume(&env, args).await,
        Command::Runs(args) => inspect::runs(&env, args).await,
        Command::Stop(args) => inspect::stop(&env, args).await,
        Command::Setup(args) => foreground::setup(&env, args).await,
        Command::Result(args) => inspect::result(&env, args).await,
        Command::Changes(args) => changes::changes(&env, args).await,
        Command::Config(args) => config::config(&env, args).await,
        Command::Serve(args) => serve::serve(&env, args).await,
        Command::Workflows(args) => workflows::workflows(&env, args).await,
        Command::Pack(args) => pack::pack(&env, args).await,
        Command::Daemon(args) => daemon::daemon(&env, args, early).await,
        Command::Monitor(args) => monitor::monitor(&env, args).await,
        Command::Completions(args) => completions::completions(args.shell),
        Command::AgentReaper(_) => unreachable!("handled before the runtime starts"),
    }
}
