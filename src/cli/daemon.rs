//! `agentprism daemon run|start|stop|status|url|logs`: the per-user daemon from the command
//! line. `run` is the daemon itself (foreground); `start` ensures one is running for this
//! shell's env family; `status` and `stop --all` reconcile the records under `R/daemons/`
//! with the process table, so a daemon that lost its record is still listed and stoppable,
//! and a record whose pid was reused is pruned, never signalled (daemon.md 1.11).
//! `install` and `uninstall` hand the daemon to the platform's service manager
//! (`docs/service.md`).

use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::daemon::probe::Probe;
use crate::daemon::spawn::{EnsureOptions, daemon_binary, ensure_daemon};
use crate::daemon::{RunOptions, configured_port, probe_family};
use crate::discovery::liveness::proc_stat;
use crate::discovery::pointer::read_pointer;
use crate::discovery::process_table::{PruneReason, SignalTarget, prune, signal_target};
use crate::discovery::record::read_instance_records;
use crate::discovery::{
    Entry, Paths, ProcessScan, Role, RunControlKey, current_fingerprint, fingerprint_of,
    process_alive_as, reconcile,
};
use crate::env::{self, EnvSnapshot};
use crate::service::{self, Manager, Notifier};

/// How long `stop` waits for signalled daemons to exit.
pub const STOP_DEADLINE: Duration = Duration::from_secs(7);

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
        #[arg(long)]
        all: bool,
    },
    /// List daemons (current, draining, other family, untracked, unresponsive); exit 0 iff
    /// this environment's daemon is running.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Print ready-to-paste registrations of the daemon's MCP endpoint for MCP hosts.
    Url,
    /// Print the daemon log (`-f` follows it).
    Logs {
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
pub struct Early {
    notifier: Arc<Notifier>,
    /// fd 3 when `LISTEN_PID` names us (scenario 26). Independent of `--managed`:
    /// `systemd-socket-activate` passes a socket without being our service manager.
    activated: Option<std::net::TcpListener>,
}

impl Early {
    /// Reads the service manager's variables for `daemon run`; a silent notifier and no
    /// socket otherwise (other commands never take fd 3, whatever the environment says).
    pub fn capture(command: &super::Command) -> Result<Early> {
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
pub async fn daemon(env: &EnvSnapshot, args: DaemonArgs, early: Early) -> Result<u8> {
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
            crate::daemon::run(
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
        DaemonCommand::Stop { all } => stop(env, all).await,
        DaemonCommand::Status { json } => status(env, json).await,
        DaemonCommand::Url => url(env).await,
        DaemonCommand::Logs { follow } => logs(env, follow).await,
    }
}

/// `daemon install` (`installing`) or `daemon uninstall`: prints what was done; any refusal
/// or failed manager command exits 1 with its output.
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
    Ok(0)
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

/// One line of `daemon status`.
#[derive(Debug)]
struct Listed {
    role: &'static str,
    pid: Option<u32>,
    entry: Entry,
    health: Option<Value>,
    /// Why the daemon is listed under its role, when that needs saying.
    note: Option<String>,
}

/// The reconciled view of this user's daemons under one persistence root.
struct Survey {
    paths: Paths,
    fingerprint: String,
    listed: Vec<Listed>,
    pruned: Vec<(PathBuf, String)>,
    key: KeyState,
}

/// What the run-control key file allows (daemon.md 1.1: a doubtful key fails closed).
#[derive(Debug)]
enum KeyState {
    Usable,
    /// No key yet: the next daemon creates it.
    Absent,
    /// The file exists but cannot be trusted: daemons run with control off, `/healthz`
    /// carries no proof, and there is no supersession until it is replaced.
    Unusable(String),
}

impl KeyState {
    fn of(loaded: &Result<RunControlKey, crate::discovery::KeyError>) -> KeyState {
        match loaded {
            Ok(_) => KeyState::Usable,
            Err(crate::discovery::KeyError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                KeyState::Absent
            }
            Err(error) => KeyState::Unusable(error.to_string()),
        }
    }

    fn json(&self, path: &Path) -> Value {
        match self {
            KeyState::Usable => json!({"key": path, "usable": true, "error": null}),
            KeyState::Absent => json!({"key": path, "usable": null, "error": null}),
            KeyState::Unusable(error) => json!({"key": path, "usable": false, "error": error}),
        }
    }
}

async fn survey(env: &EnvSnapshot) -> Result<Survey> {
    let paths = Paths::from_env(env)?;
    crate::daemon::remember_token(env, &paths);
    let fingerprint = current_fingerprint();
    let loaded = RunControlKey::load(&paths.run_control_key());
    let key_state = KeyState::of(&loaded);
    let key = loaded.ok();
    let records = read_instance_records(&paths)?;
    let mut scan = ProcessScan::new();
    if let Ok(exe) = std::env::current_exe() {
        scan = scan.with_binary(exe);
    }
    if let Some(binary) = env.non_empty(env::DAEMON_BIN) {
        scan = scan.with_binary(binary);
    }
    let processes: Vec<_> = scan
        .scan()?
        .into_iter()
        .filter(|process| serves_root(process.pid, paths.root()))
        .collect();
    let entries = reconcile(&records, &processes, process_alive_as);
    let removed = prune(&entries)?;
    let pointer = read_pointer(&paths, &fingerprint);
    let mut listed = Vec::new();
    let mut pruned = Vec::new();
    for entry in entries {
        match &entry.role {
            Role::Pruned(reason) => {
                if let Some(file) = &entry.record
                    && removed.contains(&file.path)
                {
                    pruned.push((file.path.clone(), prune_reason(reason)));
                }
            }
            Role::Tracked => {
                let record = entry
                    .own_record()
                    .cloned()
                    .expect("tracked entries have a record");
                let probe = crate::daemon::probe::probe(
                    &record,
                    key.as_ref(),
                    crate::discovery::healthz::HEALTHZ_TIMEOUT,
                )
                .await;
                let named = pointer
                    .as_ref()
                    .is_some_and(|current| current.same_instance(&record));
                let (role, health, note) = match probe {
                    Probe::Identified(health) => {
                        let role = if record.env_fingerprint != fingerprint {
                            "other family"
                        } else if named && crate::daemon::probe::body_qualifies(&health) {
                            "current"
                        } else {
                            "draining"
                        };
                        (role, Some(health), None)
                    }
                    Probe::Unresponsive => {
                        ("unresponsive", None, Some("no /healthz answer".into()))
                    }
                    Probe::Refused(why) | Probe::Mismatch(why) => ("unresponsive", None, Some(why)),
                };
                listed.push(Listed {
                    role,
                    pid: Some(record.pid),
                    entry,
                    health,
                    note,
                });
            }
            Role::Untracked => listed.push(Listed {
                role: "untracked",
                pid: entry.process.as_ref().map(|p| p.pid),
                entry,
                health: None,
                note: Some("no record; listed from the process table".into()),
            }),
            Role::Foreign => listed.push(Listed {
                role: "foreign",
                pid: entry.process.as_ref().map(|p| p.pid),
                entry,
                health: None,
                note: Some(
                    "a record of another implementation; never signalled without --all".into(),
                ),
            }),
            Role::Malformed { reason } => {
                let note = Some(format!("unreadable record: {reason}"));
                listed.push(Listed {
                    role: "malformed",
                    pid: None,
                    entry,
                    health: None,
                    note,
                })
            }
        }
    }
    Ok(Survey {
        paths,
        fingerprint,
        listed,
        pruned,
        key: key_state,
    })
}

/// Whether process `pid` serves the persistence root `root`, judged by the environment it
/// started with. An unreadable environment counts as ours: better listed than hidden.
fn serves_root(pid: u32, root: &Path) -> bool {
    let Some(env) = process_environment(pid) else {
        return true;
    };
    Paths::from_env(&env).is_ok_and(|paths| paths.root() == root)
}

fn process_environment(pid: u32) -> Option<EnvSnapshot> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(EnvSnapshot::from_pairs(
        bytes.split(|&b| b == 0).filter_map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            let (key, value) = text.split_once('=')?;
            Some((key.to_owned(), value.to_owned()))
        }),
    ))
}

/// The env family of a process without a record, from the environment it started with.
fn process_family(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    use std::os::unix::ffi::OsStrExt;
    Some(fingerprint_of(bytes.split(|&b| b == 0).filter_map(
        |pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            Some((
                std::ffi::OsStr::from_bytes(&pair[..at]).to_owned(),
                std::ffi::OsStr::from_bytes(&pair[at + 1..]).to_owned(),
            ))
        },
    )))
}

fn prune_reason(reason: &PruneReason) -> String {
    match reason {
        PruneReason::Dead(dead) => format!("{}", crate::discovery::Liveness::Dead(dead.clone())),
        PruneReason::Reused(reused) => {
            format!("{}", crate::discovery::Liveness::Reused(reused.clone()))
        }
        PruneReason::InstanceMismatch { process } => {
            format!("the process on the pid was started as instance {process}")
        }
    }
}

async fn status(env: &EnvSnapshot, as_json: bool) -> Result<u8> {
    let survey = survey(env).await?;
    let has_current = survey.listed.iter().any(|l| l.role == "current");
    if as_json {
        let daemons: Vec<Value> = survey.listed.iter().map(listed_json).collect();
        let pruned: Vec<Value> = survey
            .pruned
            .iter()
            .map(|(path, reason)| json!({"path": path, "reason": reason}))
            .collect();
        let document = json!({
            "family": survey.fingerprint,
            "root": survey.paths.root(),
            "running": has_current,
            "daemons": daemons,
            "pruned": pruned,
            "log": survey.paths.daemon_log(),
            "control": survey.key.json(&survey.paths.run_control_key()),
        });
        say!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        say!(
            "env family {} under {}",
            survey.fingerprint,
            survey.paths.root().display()
        );
        if survey.listed.is_empty() {
            say!("no daemon is running (`agentprism daemon start` starts one)");
        }
        for listed in &survey.listed {
            say!("{}", listed_line(listed));
        }
        for (path, reason) in &survey.pruned {
            say!("pruned stale record {} ({reason})", path.display());
        }
        if let KeyState::Unusable(error) = &survey.key {
            say!(
                "control off: {error}; daemons run without a control socket, /healthz \
                 carries no proof and no daemon can supersede another (to recover: `agentprism \
                 daemon stop --all`, remove {}, start again)",
                survey.paths.run_control_key().display()
            );
        }
        say!("log: {}", survey.paths.daemon_log().display());
    }
    Ok(if has_current { 0 } else { 3 })
}

fn listed_json(listed: &Listed) -> Value {
    let record = listed.entry.own_record();
    let health = listed.health.as_ref();
    let from_health = |key: &str| {
        health
            .and_then(|h| h.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    json!({
        "role": listed.role,
        "pid": listed.pid,
        "instanceId": record.map(|r| r.instance_id.clone())
            .or_else(|| listed.entry.process.as_ref().and_then(|p| p.instance_id.clone())),
        "version": record.map(|r| r.version.clone()),
        "url": record.map(|r| r.url.clone()),
        "port": record.map(|r| r.port),
        "envFingerprint": record.map(|r| r.env_fingerprint.clone()),
        "startedAt": record.map(|r| r.started_at),
        "uptimeMs": from_health("uptimeMs"),
        "sessions": from_health("sessions"),
        "activeRuns": from_health("activeRuns"),
        "inflightRequests": from_health("inflightRequests"),
        "state": from_health("state"),
        "lameDuck": from_health("lameDuck"),
        "drain": from_health("drain"),
        "controlUrl": record.map(|r| r.control_url.clone()),
        "controlAvailable": from_health("controlAvailable"),
        "record": listed.entry.record.as_ref().map(|f| f.path.clone()),
        "cmdline": listed.entry.process.as_ref().map(|p| p.cmdline.clone()),
        "note": listed.note,
    })
}

fn listed_line(listed: &Listed) -> String {
    let mut line = format!("{:<13}", listed.role);
    if let Some(pid) = listed.pid {
        line.push_str(&format!(" pid {pid}"));
    }
    if let Some(record) = listed.entry.own_record() {
        line.push_str(&format!(
            "  {}  v{}  instance {}",
            record.url,
            record.version,
            &record.instance_id[..record.instance_id.len().min(8)]
        ));
        if listed.role == "other family" {
            line.push_str(&format!("  family {}", record.env_fingerprint));
        }
    }
    if let Some(health) = &listed.health {
        let number = |key: &str| health.get(key).and_then(Value::as_u64).unwrap_or(0);
        line.push_str(&format!(
            "  up {}  sessions {}  runs {}",
            humantime::format_duration(Duration::from_secs(number("uptimeMs") / 1000)),
            number("sessions"),
            number("activeRuns")
        ));
    }
    if listed
        .entry
        .own_record()
        .is_some_and(|record| record.control_url.is_empty())
    {
        line.push_str("  control off");
    }
    if let Some(drain) = listed.health.as_ref().and_then(|h| h.get("drain"))
        && drain.is_object()
    {
        // What a lame duck still waits for (daemon.md Decision 5: every wait is visible).
        let number = |key: &str| drain.get(key).and_then(Value::as_u64).unwrap_or(0);
        line.push_str(&format!(
            "  lame duck since {} for {}: {} in-flight requests, {} unacked stop intents",
            drain.get("since").and_then(Value::as_str).unwrap_or("-"),
            drain
                .get("successor")
                .and_then(Value::as_str)
                .map_or("-", |id| &id[..id.len().min(8)]),
            number("inflightRequests"),
            number("unackedIntents"),
        ));
    }
    if let Some(process) = &listed.entry.process
        && listed.entry.own_record().is_none()
    {
        line.push_str(&format!("  {}", process.cmdline.join(" ")));
    }
    if let Some(record) = &listed.entry.record
        && listed.entry.own_record().is_none()
    {
        line.push_str(&format!("  record {}", record.path.display()));
    }
    if let Some(note) = &listed.note {
        line.push_str(&format!("  ({note})"));
    }
    line
}

async fn stop(env: &EnvSnapshot, all: bool) -> Result<u8> {
    let survey = survey(env).await?;
    let mut targets: Vec<(SignalTarget, String)> = Vec::new();
    for listed in &survey.listed {
        let Some(target) = listed.entry.signal_target() else {
            continue;
        };
        let family = match listed.entry.own_record() {
            Some(record) => Some(record.env_fingerprint.clone()),
            None => process_family(target.pid),
        };
        let ours =
            listed.role != "foreign" && family.as_deref() == Some(survey.fingerprint.as_str());
        if all || ours {
            targets.push((target, listed.role.to_owned()));
        }
    }
    if targets.is_empty() {
        note!(
            "no {}daemon is running",
            if all { "" } else { "agentprism " }
        );
        return Ok(0);
    }
    let mut signalled = Vec::new();
    for (target, role) in targets {
        match signal_target(target, Signal::SIGTERM) {
            Ok(_) => {
                note!("stopping {role} daemon pid {}", target.pid);
                signalled.push(target);
            }
            Err(error) => note!("agentprism: {error}"),
        }
    }
    let started = Instant::now();
    loop {
        let alive: Vec<u32> = signalled
            .iter()
            .filter(|target| still_running(target))
            .map(|target| target.pid)
            .collect();
        if alive.is_empty() {
            note!("stopped");
            return Ok(0);
        }
        if started.elapsed() >= STOP_DEADLINE {
            note!(
                "agentprism: still running after {STOP_DEADLINE:?}: pid {}",
                alive
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn still_running(target: &SignalTarget) -> bool {
    proc_stat(target.pid).is_some_and(|stat| !stat.zombie && stat.start_time == target.start_time)
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

/// Registration snippets for `daemon url`. `token` is the bearer token, given only where the
/// daemon requires it (no kernel lookup of a connection's user): the HTTP snippets then carry
/// it as a header.
pub fn registration_snippets(url: &str, token: Option<&str>) -> String {
    let (claude_header, codex_header) = match token {
        Some(token) => (
            format!(" --header \"Authorization: Bearer {token}\""),
            format!("http_headers = {{ \"Authorization\" = \"Bearer {token}\" }}\n"),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        "# Claude Code\n\
         claude mcp add --transport http agentprism-workflow {url}{claude_header}\n\
         \n\
         # Codex (~/.codex/config.toml)\n\
         [mcp_servers.agentprism-workflow]\n\
         url = \"{url}\"\n\
         {codex_header}\
         \n\
         # Any MCP host, through the stdio shim (starts the daemon on demand)\n\
         {{\n  \"mcpServers\": {{\n    \"agentprism-workflow\": {{\n      \"command\": \"agentprism-workflow\",\n      \"args\": []\n    }}\n  }}\n}}\n"
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
        assert!(text.contains(
            "[mcp_servers.agentprism-workflow]\nurl = \"http://127.0.0.1:4242/mcp\"\n\n"
        ));
        assert!(!text.contains("Authorization"));
        let json_start = text.find('{').unwrap();
        let shim: Value = serde_json::from_str(&text[json_start..]).unwrap();
        assert_eq!(
            shim["mcpServers"]["agentprism-workflow"]["command"],
            "agentprism-workflow"
        );
    }
}
