//! `agentprism`: parses the command line and maps the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    agentprism::logging::init_stderr();
    agentprism::cli::run(agentprism::cli::Cli::parse())
}
