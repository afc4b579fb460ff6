//! `agentprism`: takes the workflows-pack key out of the environment, parses the command
//! line and maps the outcome to an exit code. The key leaves the environment in the first
//! statement, before any thread exists, because removing a variable is only sound then.

use std::process::ExitCode;

fn main() -> ExitCode {
    let key = std::env::var_os(agentprism::pack::WORKFLOWS_KEY_VARIABLE);
    if key.is_some() {
        // SAFETY: `remove_var` is unsound only while another thread reads or writes the
        // environment. This is the first statement of `main`: no runtime, logger or other
        // thread exists yet (nothing before `main` starts threads in this binary), so none
        // can. Removing it here keeps the key from every child process and every later
        // reader of the environment; the value lives on in memory only, for the pack reader.
        unsafe { std::env::remove_var(agentprism::pack::WORKFLOWS_KEY_VARIABLE) };
    }
    agentprism::pack::keep_environment_key(key.map(|value| value.to_string_lossy().into_owned()));
    agentprism::logging::init_stderr();
    match agentprism::cli::parse() {
        Ok(cli) => agentprism::cli::run(cli),
        Err(code) => code,
    }
}
