//! Snapshots of what the command line tells a person about itself: `--help` of every command
//! and subcommand a person can see (walked from the command line's own definition, so a new
//! command gets a snapshot, or a failing test until it has one), and the completion scripts
//! `agentprism completions` writes for bash, zsh and fish, which the packages ship.
//!
//! Each is the real binary's stdout. Nothing in them varies between machines or runs (no
//! paths, times or versions), so they need no filters. To accept an intended change, run the
//! tests with `INSTA_UPDATE=always` and review the diff of `tests/it/snapshots/`.

use crate::support::context::TestContext;

/// The paths (`["runs", "rm"]`) of every command a person can see, the top level first.
fn visible_commands() -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            let mut sub_path = path.clone();
            sub_path.push(sub.get_name().to_owned());
            walk(sub, sub_path, out);
        }
    }
    let mut out = Vec::new();
    walk(&agentprism::cli::public_command(), Vec::new(), &mut out);
    out
}

fn assert_output(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

#[test]
fn help_of_every_command() {
    let ctx = TestContext::new();
    let commands = visible_commands();
    assert!(commands.len() > 20, "{commands:?}");
    for path in commands {
        let mut argv: Vec<&str> = path.iter().map(String::as_str).collect();
        argv.push("--help");
        let help = ctx.run(&argv);
        assert_eq!(help.code(), 0, "{argv:?}: {}", help.stderr);
        let name = if path.is_empty() {
            "help_agentprism".to_owned()
        } else {
            format!("help_{}", path.join("_"))
        };
        assert_output(&name, &help.stdout);
    }
}

#[test]
fn completion_scripts() {
    let ctx = TestContext::new();
    for shell in ["bash", "zsh", "fish"] {
        let script = ctx.run(&["completions", shell]);
        assert_eq!(script.code(), 0, "{shell}: {}", script.stderr);
        assert_output(&format!("completions_{shell}"), &script.stdout);
    }
}
