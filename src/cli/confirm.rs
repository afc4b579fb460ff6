//! Starting a run that needs a confirmation of its size (`AGENTPRISM_CONFIRM_AGENTS`): on a
//! terminal the command asks, listing the agent calls per phase; a yes prepares the run again
//! with the confirmation (the dry run is deterministic and costs no tokens) and starts it.
//! Off a terminal the run is refused with what to pass instead (`--yes`, `--max-agents N`).

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use super::input::{engine_error, input_error};
use crate::engine::manager::{Admission, Rejected};
use crate::engine::{Engine, EngineError, RunRequest};
use anyhow::Result;

/// Longest answer read from the terminal; the rest of a longer line is not looked at.
const MAX_ANSWER_BYTES: u64 = 256;

/// `engine.start(request)`, asking on a terminal when the run needs a confirmation.
pub(super) async fn start(engine: &Engine, mut request: RunRequest) -> Result<Admission> {
    match engine.start(request.clone()).await {
        Err(EngineError::Rejected(Rejected::NeedsConfirmation { message, agents })) => {
            let on_terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
            if !on_terminal {
                return Err(input_error(refusal(&message, agents)));
            }
            if !ask(&message, agents)? {
                return Err(input_error(format!(
                    "not started: the run's {agents} agent calls were not confirmed"
                )));
            }
            request.limits.confirmed = true;
            engine.start(request).await.map_err(engine_error)
        }
        other => other.map_err(engine_error),
    }
}

/// The refusal off a terminal, in the command line's words.
fn refusal(message: &str, agents: u32) -> String {
    let reason = message.split("; confirm with").next().unwrap_or(message);
    format!("{reason}; run again with --yes or --max-agents {agents} to start it")
}

/// Asks on stderr, reads one line from stdin: `y` or `yes` (any case) starts the run.
fn ask(message: &str, agents: u32) -> Result<bool> {
    let reason = message.split("; confirm with").next().unwrap_or(message);
    let mut stderr = std::io::stderr();
    write!(stderr, "{reason}.\nStart {agents} agent calls? [y/N] ")?;
    stderr.flush()?;
    let mut line = String::new();
    let stdin = std::io::stdin();
    std::io::BufReader::new(stdin.take(MAX_ANSWER_BYTES)).read_line(&mut line)?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
