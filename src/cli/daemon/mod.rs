//! `agentprism daemon run|start|stop|status|url|logs`: the per-user daemon from the command
//! line. `run` is the daemon itself (foreground, built by `crate::app::daemon`); `start`
//! ensures one is running for this shell's env family; `status` and `stop --all` reconcile
//! the records under `R/daemons/` with the process table (`survey.rs`, `status.rs`), so a
//! daemon that lost its record is still listed and stoppable, and a record whose pid was
//! reused is pruned, never signalled (daemon.md 1.11).
//! `install` and `uninstall` hand the daemon to the platform's service manager
//! (`docs/service.md`).

mod status;
mod survey;

use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};

use crate::daemon::spawn::{EnsureOptions, daemon_binary, ensure_daemon};
use crate::daemon::{RunOptions, configured_port, probe_family};
use crate::discovery::{Paths, RunControlKey, current_fingerprint};
use crate::env::{self, EnvSnapshot};
use crate::service::{self, Manager, Notifier};

/// How long `stop` waits for signalled daemons to exit.
pub(crate) const STOP_DEADLINE: Duration = Duration::from_secs(7);

#[derive(Debug, Args)]
pub struct DaemonArgs {
    #[command(subcommand)]
    pub command: DaemonCommand,
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Run the daemon in the foreground (what `start` and the stdio shim spawn).
    Run(DaemonRunArgs),
    /// Start this environment's daemon unless it is running; prints its MCP URL.
    Start,
    /// Stop this environment's daemon (`--all`: every agentprism daemon of this user and
    /// persistence root).
    Stop {
        /// Stop every agentprism daemon of this user and persistence root, whatever its
        /// environment.
        #[arg(long)]
        all: bool,
    },
    /// List daemons (current, draining, other family, untracked, unresponsive); exit 0 iff
    /// this environment's daemon is running.
    Status {
        /// Print the listing as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print ready-to-paste registrations of the daemon's MCP endpoint for MCP hosts.
    Url,
    /// Print the daemon log (`-f` follows it).
    Logs {
        /// Keep printing lines as the daemon writes them, until Ctrl-C.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Run the daemon as a user service: a systemd user unit (Linux) or a LaunchAgent
    /// (macOS), started now and at every login.
    Install,
    /// Remove what `install` wrote and stop the managed daemons.
    Uninstall,
}

#[derive(Debug, Args)]
pub struct DaemonRunArgs {
    /// The port to bind on 127.0.0.1 (default `AGENTPRISM_DAEMON_PORT` or 29888; 0 picks a
    /// free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// This daemon's instance id (a spawner passes one to recognise it).
    #[arg(long, value_name = "UUID")]
    pub instance_id: Option<String>,
    /// Take over the family pointer from a live daemon of a strictly lower version.
    #[arg(long)]
    pub supersede: bool,
    /// Write diagnostics to this file, rotated by size, instead of stderr (self-spawn).
    #[arg(long, value_name = "PATH", hide = true)]
    pub log_file: Option<PathBuf>,
    /// The service manager that started this daemon (`systemd` or `launchd`); set by the
    /// unit files and the LaunchAgent.
    #[arg(long, value_name = "MANAGER", value_parser = parse_manager)]
    pub managed: Option<Manager>,
    /// Exit 3 unless this binary's version is V (the systemd instance name, `%i`).
    #[arg(long, value_name = "V")]
    pub expect_version: Option<String>,
}

fn parse_manager(text: &str) -> Result<Manager, String> {
    Manager::parse(text).ok_or_else(|| format!("expected systemd or launchd, got {text:?}"))
}

/// What must be read before the async runtime starts any thread (daemon.md 2, "Read ... once,
/// before threads"): the sd-notify channel of `daemon run --managed=systemd`, and a listening
/// socket passed by socket activation to `daemon run`.
#[derive(Debug)]
pub(crate) struct Early {
    notifier: Arc<Notifier>,
    /// fd 3 when `LISTEN_PID` names us (scenario 26). Independent of `--managed`:
    /// `systemd-socket-activate` passes a socket without being our service manager.
    activated: Option<std::net::TcpListener>,
}

impl Early {
    /// Reads the service manager's variables for `daemon run`; a silent notifier and no
    /// socket otherwise (other commands never take fd 3, whatever the environment says).
    pub(crate) fn capture(command: &super::Command) -> Result<Early> {
        let super::Command::Daemon(DaemonArgs {
            command: DaemonCommand::Run(run),
        }) = command
        else {
            return Ok(Early {
                notifier: Arc::new(Notifier::disabled()),
                activated: None,
            });
        };
        let notifier = match run.managed {
            Some(manager) => Notifier::from_process(manager == Manager::Systemd)
                .context("opening the sd-notify socket")?,
            None => Notifier::disabled(),
        };
        let activated = service::activation::from_process()
            .context("refusing the socket passed by socket activation")?;
        Ok(Early {
            notifier: Arc::new(notifier),
            activated,
        })
    }
}

/// Runs one `daemon` subcommand.
pub(crate) async fn daemon(env: &EnvSnapshot, args: DaemonArgs, early: Early) -> Result<u8> {
    match args.command {
        DaemonCommand::Run(run) => {
            if let Some(id) = &run.instance_id {
                uuid::Uuid::parse_str(id)
                    .map_err(|e| anyhow!("--instance-id must be a UUID: {e}"))?;
            }
            if let Some(expected) = &run.expect_version
                && !service::systemd::version_matches_instance(crate::daemon::version(), expected)
            {
                note!(
                    "agentprism: this binary is version {}, not {expected}; exiting with {} so \
                     the service manager does not restart it",
                    crate::daemon::version(),
                    service::systemd::EXIT_WRONG_VERSION
                );
                return Ok(service::systemd::EXIT_WRONG_VERSION);
            }
            crate::app::daemon(
                env,
                RunOptions {
                    port: run.port,
                    instance_id: run.instance_id,
                    supersede: run.supersede,
                    log_file: run.log_file,
                    managed: run.managed,
                    notifier: early.notifier,
                    activated: early.activated,
                },
            )
            .await
        }
        DaemonCommand::Install => install(env, true),
        DaemonCommand::Uninstall => install(env, false),
        DaemonCommand::Start => start(env).await,
        DaemonCommand::Stop { all } => status::stop(env, all).await,
        DaemonCommand::Status { json } => status::status(env, json).await,
        DaemonCommand::Url => url(env).await,
        DaemonCommand::Logs { follow } => logs(env, follow).await,
    }
}

/// `daemon install` (`installing`) or `daemon uninstall`: prints what was done; any refusal
/// or failed manager command exits 1 with its output, and so does an uninstall that removed
/// its files but could not reach the manager (saying what is left to do).
fn install(env: &EnvSnapshot, installing: bool) -> Result<u8> {
    let exe = std::env::current_exe().context("finding the running agentprism binary")?;
    let paths = service::InstallPaths::from_env(env, &exe)?;
    let manager = Manager::native();
    let report = if installing {
        service::install::install(manager, &paths, env)
    } else {
        service::install::uninstall(manager, &paths)
    };
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            note!(
                "agentprism: daemon {} failed: {error}",
                if installing { "install" } else { "uninstall" }
            );
            return Ok(1);
        }
    };
    for file in &report.files_written {
        say!("wrote   {}", file.display());
    }
    for file in &report.files_removed {
        say!("removed {}", file.display());
    }
    for command in &report.commands {
        say!("ran     {command}");
    }
    if !report.environment.is_empty() {
        say!("captured environment: {}", report.environment.join(", "));
    }
    if let Some(fingerprint) = &report.fingerprint {
        say!(
            "env family {fingerprint} now uses the {} service",
            manager.as_str()
        );
    }
    for undone in &report.not_done {
        note!(
            "agentprism: daemon {}: {undone}",
            if installing { "install" } else { "uninstall" }
        );
    }
    Ok(if report.not_done.is_empty() { 0 } else { 1 })
}

async fn start(env: &EnvSnapshot) -> Result<u8> {
    let paths = Paths::from_env(env)?;
    crate::daemon::remember_token(env, &paths);
    let fingerprint = current_fingerprint();
    let options = EnsureOptions::new(daemon_binary(env));
    let ready = ensure_daemon(&paths, &fingerprint, &options).await?;
    note!(
        "agentprism daemon pid {} {} (log: {})",
        ready.record.pid,
        if ready.spawned.is_some() {
            "started"
        } else {
            "already running"
        },
        paths.daemon_log().display()
    );
    say!("{}", ready.record.url);
    Ok(0)
}

async fn url(env: &EnvSnapshot) -> Result<u8> {
    let paths = Paths::from_env(env)?;
    crate::daemon::remember_token(env, &paths);
    let fingerprint = current_fingerprint();
    let key = RunControlKey::load(&paths.run_control_key()).ok();
    let url = match probe_family(&paths, &fingerprint, key.as_ref()).await {
        Some((record, probe)) if probe.qualifies() => record.url,
        _ => {
            let port = configured_port(env)?;
            if port == 0 {
                return Err(anyhow!(
                    "no daemon is running for this environment and {} is 0 (ephemeral), so its \
                     URL is not known yet: run `agentprism daemon start` first",
                    env::DAEMON_PORT
                ));
            }
            note!(
                "agentprism: no daemon is running for this environment; run `agentprism daemon \
                 start` before an HTTP host connects (if port {port} is taken it will pick \
                 another: check `agentprism daemon status`)"
            );
            crate::discovery::record::mcp_url(port)
        }
    };
    if let Some(token) = crate::discovery::token::sent() {
        note!(
            "agentprism: this system cannot tell which user opened a connection, so HTTP hosts \
             must send the bearer token below; keep these snippets private"
        );
        say_partial!("{}", registration_snippets(&url, Some(token)));
    } else {
        say_partial!("{}", registration_snippets(&url, None));
    }
    Ok(0)
}

/// Registration snippets for `daemon url`: for each host the suite drives, the HTTP
/// registration `docs/hosts.md` shows (for the port of the running daemon), then the stdio one
/// every `mcpServers` host reads. `token` is the bearer token, given only where the daemon
/// requires it (no kernel lookup of a connection's user): the HTTP snippets then carry it as a
/// header.
pub(crate) fn registration_snippets(url: &str, token: Option<&str>) -> String {
    let header = |format: &dyn Fn(&str) -> String| token.map(format).unwrap_or_default();
    let claude_header = header(&|token| format!(" --header \"Authorization: Bearer {token}\""));
    let codex_header =
        header(&|token| format!("http_headers = {{ \"Authorization\" = \"Bearer {token}\" }}\n"));
    let json_header =
        header(&|token| format!(", \"headers\": {{ \"Authorization\": \"Bearer {token}\" }}"));
    format!(
        "# Claude Code\n\
         claude mcp add --transport http agentprism-workflow {url}{claude_header}\n\
         \n\
         # Codex (~/.codex/config.toml)\n\
         [mcp_servers.agentprism-workflow]\n\
         url = \"{url}\"\n\
         {codex_header}\
         tool_timeout_sec = 180\n\
         default_tools_approval_mode = \"approve\"\n\
         \n\
         # Gemini CLI (~/.gemini/settings.json; trust the project folder in ~/.gemini/trustedFolders.json)\n\
         {{ \"mcpServers\": {{ \"agentprism-workflow\": {{ \"httpUrl\": \"{url}\", \"trust\": true{json_header} }} }} }}\n\
         \n\
         # Qwen Code (~/.qwen/settings.json; trust the project folder in ~/.qwen/trustedFolders.json)\n\
         {{ \"mcpServers\": {{ \"agentprism-workflow\": {{ \"httpUrl\": \"{url}\", \"trust\": true{json_header} }} }} }}\n\
         \n\
         # opencode (~/.config/opencode/opencode.json)\n\
         {{ \"mcp\": {{ \"agentprism-workflow\": {{ \"type\": \"remote\", \"url\": \"{url}\"{json_header} }} }} }}\n\
         \n\
         # Any mcpServers host, through the stdio shim (starts the daemon on demand; docs/hosts.md has each host's form)\n\
         {{ \"mcpServers\": {{ \"agentprism-workflow\": {{ \"type\": \"stdio\", \"command\": \"agentprism-workflow\", \"args\": [] }} }} }}\n"
    )
}

async fn logs(env: &EnvSnapshot, follow: bool) -> Result<u8> {
    let paths = Paths::from_env(env)?;
    let log = paths.daemon_log();
    let mut stdout = std::io::stdout().lock();
    let mut file = match std::fs::File::open(&log) {
        Ok(file) => Some(file),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && follow => None,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            note!("agentprism: no daemon log yet at {}", log.display());
            return Ok(0);
        }
        Err(error) => return Err(error).with_context(|| format!("opening {}", log.display())),
    };
    let mut copy = |file: &mut std::fs::File| -> Result<()> {
        let mut buffer = Vec::new();
        file.read_to_end(&mut buffer)
            .with_context(|| format!("reading {}", log.display()))?;
        stdout.write_all(&buffer)?;
        stdout.flush()?;
        Ok(())
    };
    if let Some(file) = &mut file {
        copy(file)?;
    }
    if !follow {
        return Ok(0);
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            _ = &mut interrupted => return Ok(0),
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        // A rotation replaces the file: follow the new one from its start.
        let current = std::fs::metadata(&log).ok();
        let rotated = match (&file, &current) {
            (Some(open), Some(now)) => open
                .metadata()
                .map(|m| m.ino() != now.ino())
                .unwrap_or(true),
            (None, Some(_)) => true,
            _ => false,
        };
        if rotated {
            if let Some(open) = &mut file {
                copy(open)?;
            }
            file = std::fs::File::open(&log).ok();
        } else if let (Some(open), Some(now)) = (&mut file, &current)
            && now.len() < open.stream_position().unwrap_or(0)
        {
            open.rewind()?;
        }
        if let Some(open) = &mut file {
            copy(open)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn snippets_carry_the_token_where_it_is_needed() {
        let text = registration_snippets("http://127.0.0.1:4242/mcp", Some("tok_en"));
        assert!(text.contains(
            "claude mcp add --transport http agentprism-workflow http://127.0.0.1:4242/mcp \
             --header \"Authorization: Bearer tok_en\"\n"
        ));
        assert!(text.contains(
            "url = \"http://127.0.0.1:4242/mcp\"\nhttp_headers = { \"Authorization\" = \"Bearer tok_en\" }\n"
        ));
    }

    #[test]
    fn snippets_name_the_url_for_every_host() {
        let text = registration_snippets("http://127.0.0.1:4242/mcp", None);
        assert!(text.contains(
            "claude mcp add --transport http agentprism-workflow http://127.0.0.1:4242/mcp\n"
        ));
        assert!(
            text.contains(
                "[mcp_servers.agentprism-workflow]\nurl = \"http://127.0.0.1:4242/mcp\"\n"
            )
        );
        assert!(!text.contains("Authorization"));
        // Every JSON line parses, and the last is the stdio shim's entry.
        let objects: Vec<Value> = text
            .lines()
            .filter(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str(line).expect(line))
            .collect();
        assert_eq!(objects.len(), 4, "{text}");
        let shim = objects.last().unwrap();
        assert_eq!(shim["mcpServers"]["agentprism-workflow"]["type"], "stdio");
        assert_eq!(
            shim["mcpServers"]["agentprism-workflow"]["command"],
            "agentprism-workflow"
        );
    }

    /// `daemon url` prints exactly what `docs/hosts.md` shows: each snippet, for the default
    /// port, is a block or line of that page.
    #[test]
    fn every_snippet_is_the_one_the_hosts_doc_shows() {
        let text = registration_snippets("http://127.0.0.1:29888/mcp", None);
        let doc = include_str!("../../../docs/hosts.md");
        for snippet in text.split("\n\n") {
            let body: String = snippet
                .lines()
                .filter(|line| !line.starts_with('#'))
                .map(|line| format!("{line}\n"))
                .collect();
            assert!(
                doc.contains(&body),
                "docs/hosts.md does not show this snippet of `daemon url`:\n{body}"
            );
        }
    }

    #[test]
    fn json_snippets_carry_the_token_as_a_header() {
        let text = registration_snippets("http://127.0.0.1:4242/mcp", Some("tok_en"));
        let with_header = text
            .lines()
            .filter(|line| line.starts_with('{') && line.contains("Bearer tok_en"))
            .count();
        assert_eq!(with_header, 3, "Gemini CLI, Qwen Code and opencode: {text}");
        for line in text.lines().filter(|line| line.starts_with('{')) {
            serde_json::from_str::<Value>(line).expect(line);
        }
    }
}
