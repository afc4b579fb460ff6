//! `agentprism completions <shell>`: the shell completion scripts the packages ship. They
//! offer what a person may type: the command line without its hidden parts. The generator
//! (`clap_complete`) lists hidden subcommands and flags like the others, so the scripts are
//! generated from [`public_command`], a copy of the command line with them left out; the
//! internal `agent-reaper` command and `daemon run --log-file` are never offered.

use anyhow::Result;
use clap::{ArgGroup, Command, CommandFactory};

use super::EXIT_COMPLETED;
use super::args::{Cli, CompletionShell};

/// The command line as `--help` shows it: every subcommand and flag that is not hidden,
/// recursively, with the names, help texts, value hints and relations of each.
pub fn public_command() -> Command {
    without_hidden(&Cli::command())
}

/// Prints the completion script for `shell`. It is generated into memory first, so a closed
/// stdout cannot panic inside the generator.
pub(super) fn completions(shell: CompletionShell) -> Result<u8> {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut public_command(), "agentprism", &mut script);
    say_partial!("{}", String::from_utf8_lossy(&script));
    Ok(EXIT_COMPLETED)
}

/// A copy of `command` without its hidden arguments and subcommands. clap cannot remove
/// either from a command, so the copy is built anew: the command's own texts and the
/// settings that shape parsing, its visible arguments, its argument groups (minus the hidden
/// members) and its visible subcommands, each copied the same way.
fn without_hidden(command: &Command) -> Command {
    let mut copy = Command::new(command.get_name().to_owned())
        .subcommand_required(command.is_subcommand_required_set())
        .arg_required_else_help(command.is_arg_required_else_help_set())
        .args_conflicts_with_subcommands(command.is_args_conflicts_with_subcommands_set());
    if let Some(about) = command.get_about() {
        copy = copy.about(about.clone());
    }
    if let Some(about) = command.get_long_about() {
        copy = copy.long_about(about.clone());
    }
    if let Some(version) = command.get_version() {
        copy = copy.version(version.to_owned());
    }
    let hidden: Vec<_> = command
        .get_arguments()
        .filter(|arg| arg.is_hide_set())
        .map(|arg| arg.get_id().clone())
        .collect();
    for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
        copy = copy.arg(arg.clone());
    }
    for group in command.get_groups() {
        let members = group.get_args().filter(|id| !hidden.contains(id)).cloned();
        copy = copy.group(
            ArgGroup::new(group.get_id().clone())
                .args(members)
                .multiple(group.clone().is_multiple())
                .required(group.is_required_set()),
        );
    }
    for subcommand in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        copy = copy.subcommand(without_hidden(subcommand));
    }
    copy
}
