//! `agentprism-workflow`: the stdio entry MCP hosts launch. Parses the arguments and runs the
//! shim (`agentprism::shim`), nothing else.

use std::process::ExitCode;

fn main() -> ExitCode {
    match agentprism::shim::Args::parse(std::env::args_os().skip(1)) {
        Ok(args) => agentprism::shim::run(args),
        Err(message) => {
            eprintln!("agentprism-workflow: {message}");
            ExitCode::from(2)
        }
    }
}
