//! `agentprism daemon install` and `uninstall` (daemon.md 2): write the unit files or the
//! LaunchAgent, the daemon's environment, and `managed.json`, then hand them to the service
//! manager with every exit code checked.
//!
//! A managed daemon does not inherit a shim's environment the way a self-spawned one does, so
//! install captures what the daemon needs from the installing shell: PATH, every variable with
//! a fingerprinted prefix, and a named list of credential and proxy variables
//! ([`PASSED_THROUGH`]). `managed.json` records the fingerprint of that environment; only shims
//! of the same family ask the manager for a daemon, the others keep self-spawning.
//!
//! Everything takes an [`InstallPaths`], so tests run against a temporary HOME and fake
//! `systemctl`/`launchctl` programs on a PATH of their own.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::tools::Tools;
use super::{Manager, Result, ServiceError, launchd, systemd};
use crate::discovery::fingerprint;
use crate::env::EnvSnapshot;

/// Variables outside the fingerprinted prefixes that install copies into the daemon's
/// environment when the installing shell has them: the credentials and endpoints the agent
/// backends read, and proxy settings. PATH is always copied. HOME, USER and
/// `XDG_RUNTIME_DIR` are not: the manager sets them.
pub(crate) const PASSED_THROUGH: [&str; 20] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_HOME",
    "OPENROUTER_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AWS_PROFILE",
    "AWS_REGION",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    // Claude Code's permission to run as root (docs/adapters.md, "Running as root").
    "IS_SANDBOX",
];

/// The version of `managed.json`'s format.
pub(crate) const MANAGED_RECORD_VERSION: u32 = 1;

/// `~/.config/agentprism/managed.json`: tells shims that a service manager runs this family's
/// daemon. Durable: read by shims of later versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ManagedRecord {
    pub version: u32,
    /// `systemd` or `launchd`.
    pub manager: String,
    /// What the shim starts: `agentprism@.service` (instantiated with its version) or the
    /// launchd label.
    pub unit: String,
    /// The env fingerprint of the captured environment; only shims with this fingerprint
    /// use the manager.
    pub fingerprint: String,
    /// The program path written into the unit or plist.
    pub binary: PathBuf,
}

/// Where install reads and writes; explicit so tests never touch the real home.
#[derive(Clone, Debug)]
pub(crate) struct InstallPaths {
    /// The user's home: `~/.config/...` and `~/Library/...` hang off it.
    pub home: PathBuf,
    /// The stable program path the unit or plist runs (see [`stable_binary`]).
    pub binary: PathBuf,
    /// The daemon log, for launchd's stdout/stderr.
    pub log: PathBuf,
    /// Our uid, for launchd's `gui/<uid>` domain.
    pub uid: u32,
    /// The PATH searched for `systemctl` and `launchctl`.
    pub tool_path: OsString,
}

/// What install or uninstall did, for the CLI to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InstallReport {
    pub files_written: Vec<PathBuf>,
    pub files_removed: Vec<PathBuf>,
    /// Each command run, as a shell would show it.
    pub commands: Vec<String>,
    /// Names (never values) of the variables captured into the daemon's environment.
    pub environment: Vec<String>,
    pub fingerprint: Option<String>,
    /// What uninstall could not do, each with why and what the user can do instead; the
    /// command fails when it is not empty.
    pub not_done: Vec<String>,
}

impl InstallPaths {
    /// Paths for the current user from a snapshot of the environment and the running binary.
    pub(crate) fn from_env(env: &EnvSnapshot, current_exe: &Path) -> Result<InstallPaths> {
        let home = PathBuf::from(env.home().ok_or_else(|| {
            ServiceError::Refused("HOME is not set; cannot find the user's config folder".into())
        })?);
        let tool_path = OsString::from(env.path().unwrap_or(launchd::DEFAULT_PATH));
        let binary = stable_binary(&home, current_exe, &tool_path)?;
        let log = crate::discovery::paths::Paths::from_env(env)
            .map_err(|e| ServiceError::Refused(e.to_string()))?
            .daemon_log();
        Ok(InstallPaths {
            home,
            binary,
            log,
            uid: nix::unistd::getuid().as_raw(),
            tool_path,
        })
    }

    /// `~/.config/agentprism/`: daemon.env and managed.json (0700).
    pub(crate) fn config_dir(&self) -> PathBuf {
        self.home.join(".config").join("agentprism")
    }

    /// `~/.config/agentprism/daemon.env` (0600).
    pub(crate) fn daemon_env(&self) -> PathBuf {
        self.config_dir().join("daemon.env")
    }

    /// `~/.config/agentprism/managed.json` (0600).
    pub(crate) fn managed_record(&self) -> PathBuf {
        self.config_dir().join("managed.json")
    }

    /// `~/.config/systemd/user/`.
    pub(crate) fn systemd_user_dir(&self) -> PathBuf {
        self.home.join(".config").join("systemd").join("user")
    }

    /// `~/Library/LaunchAgents/dev.agentprism.daemon.plist`.
    pub(crate) fn plist(&self) -> PathBuf {
        launchd::plist_path(&self.home)
    }
}

/// The program path to write into a unit or plist: `~/.local/bin/agentprism` if it exists,
/// else the first `agentprism` on PATH that is the running binary under a non-versioned name
/// (Homebrew's `bin/` symlink into `Cellar/`), else the running binary itself when its path is
/// not versioned. A path that would vanish on upgrade is refused with a hint.
pub(crate) fn stable_binary(
    home: &Path,
    current_exe: &Path,
    search_path: &OsStr,
) -> Result<PathBuf> {
    let local = home.join(".local").join("bin").join("agentprism");
    if local.exists() {
        return Ok(local);
    }
    let running = std::fs::canonicalize(current_exe)
        .map_err(|e| ServiceError::io("resolve", current_exe, e))?;
    for dir in std::env::split_paths(search_path) {
        let candidate = dir.join("agentprism");
        if candidate.is_absolute()
            && !launchd::is_versioned_path(&candidate)
            && std::fs::canonicalize(&candidate).is_ok_and(|target| target == running)
        {
            return Ok(candidate);
        }
    }
    if current_exe.is_absolute() && !launchd::is_versioned_path(current_exe) {
        return Ok(current_exe.to_path_buf());
    }
    Err(ServiceError::Refused(format!(
        "{} is a versioned path that disappears on upgrade; link it as {} and run install again",
        current_exe.display(),
        local.display()
    )))
}

/// The variables a managed daemon gets: PATH (or the minimal default), every variable with a
/// fingerprinted prefix (including the lifetime knobs the fingerprint ignores, which the user
/// set for a reason), and [`PASSED_THROUGH`]. Sorted by name.
pub(crate) fn daemon_environment(env: &EnvSnapshot) -> Vec<(String, String)> {
    let mut captured: Vec<(String, String)> = env
        .iter()
        .filter(|(name, _)| {
            fingerprint::PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
                || PASSED_THROUGH.contains(name)
        })
        .filter(|(name, _)| is_variable_name(name))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    captured.push((
        "PATH".into(),
        env.path()
            .filter(|path| !path.is_empty())
            .unwrap_or(launchd::DEFAULT_PATH)
            .to_string(),
    ));
    captured.sort();
    captured
}

/// The env file systemd reads (`EnvironmentFile=`): one `NAME="value"` line each, with the
/// four characters systemd unescapes inside double quotes (`"`, `\`, `` ` ``, `$`) escaped.
pub(crate) fn render_env_file(environment: &[(String, String)]) -> String {
    let mut text = String::from(
        "# Written by `agentprism daemon install`: the environment of the managed daemon.\n\
         # Edit with care: `managed.json` holds the fingerprint of these values; run the\n\
         # install again after changing them.\n",
    );
    for (name, value) in environment {
        let mut escaped = String::with_capacity(value.len());
        for ch in value.chars() {
            if matches!(ch, '"' | '\\' | '`' | '$') {
                escaped.push('\\');
            }
            escaped.push(ch);
        }
        text.push_str(&format!("{name}=\"{escaped}\"\n"));
    }
    text
}

/// Installs and starts the managed daemon with `manager`.
pub(crate) fn install(
    manager: Manager,
    paths: &InstallPaths,
    env: &EnvSnapshot,
) -> Result<InstallReport> {
    let environment = daemon_environment(env);
    let fingerprint = fingerprint::fingerprint_of(
        environment
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value))),
    );
    let mut report = InstallReport {
        environment: environment.iter().map(|(name, _)| name.clone()).collect(),
        fingerprint: Some(fingerprint.clone()),
        ..InstallReport::default()
    };
    let tools = Tools::new(paths.tool_path.clone());
    let unit = match manager {
        Manager::Systemd => {
            let systemctl = tools.require("systemctl", SYSTEMCTL_HINT)?;
            // Before anything is written, so a refusal stores nothing.
            if let Err(unreachable) = systemd::reach_user_manager(&tools, &systemctl, &mut report) {
                return Err(ServiceError::Refused(format!(
                    "{unreachable}, so nothing was installed. {}",
                    systemd::no_user_manager_hint(paths.uid)
                )));
            }
            let unit_dir = paths.systemd_user_dir();
            for unit in systemd::unit_files(&paths.binary, &paths.daemon_env())? {
                let path = unit_dir.join(unit.name);
                write_file(&path, unit.contents.as_bytes(), 0o644)?;
                report.files_written.push(path);
            }
            ensure_private_dir(&paths.config_dir())?;
            write_file(
                &paths.daemon_env(),
                render_env_file(&environment).as_bytes(),
                0o600,
            )?;
            report.files_written.push(paths.daemon_env());
            tools.run(&systemctl, &["--user", "daemon-reload"], &[], &mut report)?;
            tools.run(
                &systemctl,
                &["--user", "enable", "--now", systemd::ENTRY_UNIT],
                &[],
                &mut report,
            )?;
            systemd::TEMPLATE_UNIT.to_string()
        }
        Manager::Launchd => {
            let launchctl = tools.require("launchctl", LAUNCHCTL_HINT)?;
            let plist = paths.plist();
            let text = launchd::render_plist(&paths.binary, &paths.home, &paths.log, &environment)?;
            // 0600: the plist carries the captured credentials.
            write_file(&plist, text.as_bytes(), 0o600)?;
            report.files_written.push(plist.clone());
            tools.run(
                &launchctl,
                &launchd::bootout_args(paths.uid),
                &launchd::NOT_LOADED_EXIT_CODES,
                &mut report,
            )?;
            tools.run(
                &launchctl,
                &launchd::enable_args(paths.uid),
                &[],
                &mut report,
            )?;
            tools.run(
                &launchctl,
                &launchd::bootstrap_args(paths.uid, &plist),
                &[],
                &mut report,
            )?;
            launchd::LABEL.to_string()
        }
    };
    // Last, so shims only turn to the manager once it has accepted the daemon.
    let record = ManagedRecord {
        version: MANAGED_RECORD_VERSION,
        manager: manager.as_str().into(),
        unit,
        fingerprint,
        binary: paths.binary.clone(),
    };
    ensure_private_dir(&paths.config_dir())?;
    let mut json = serde_json::to_vec_pretty(&record).expect("a managed record serializes");
    json.push(b'\n');
    write_file(&paths.managed_record(), &json, 0o600)?;
    report.files_written.push(paths.managed_record());
    Ok(report)
}

/// Stops and removes the managed daemon. Idempotent: files already gone and jobs not loaded
/// are fine. Managed daemons are stopped (runs pause and resume later under a self-spawned
/// daemon) because a unit whose file is gone can no longer be restarted or cleanly stopped.
pub(crate) fn uninstall(manager: Manager, paths: &InstallPaths) -> Result<InstallReport> {
    let mut report = InstallReport::default();
    let tools = Tools::new(paths.tool_path.clone());
    // managed.json goes first, so no shim asks the manager while it is being taken down.
    remove_file(&paths.managed_record(), &mut report)?;
    match manager {
        Manager::Systemd => {
            let unit_dir = paths.systemd_user_dir();
            let installed = unit_dir.join(systemd::ENTRY_UNIT).exists()
                || unit_dir.join(systemd::TEMPLATE_UNIT).exists();
            let systemctl = match tools.find("systemctl") {
                Some(systemctl) if installed => {
                    match systemd::reach_user_manager(&tools, &systemctl, &mut report) {
                        Ok(()) => Some(systemctl),
                        // The files are ours to remove whether or not a manager listens.
                        Err(unreachable) => {
                            report.not_done.push(format!(
                                "could not disable {} or stop the managed daemons:                                  {unreachable}. The unit files and the link that enabled                                  them are removed all the same; a user manager of this user                                  running elsewhere (another login session) keeps the units                                  loaded until `systemctl --user daemon-reload` there, and                                  `agentprism daemon stop --all` stops every daemon of this                                  user and persistence root",
                                systemd::ENTRY_UNIT
                            ));
                            None
                        }
                    }
                }
                _ => None,
            };
            if let Some(systemctl) = &systemctl {
                tools.run(
                    systemctl,
                    &["--user", "disable", "--now", systemd::ENTRY_UNIT],
                    &[],
                    &mut report,
                )?;
                let stop = systemd::stop_all_args();
                let stop: Vec<&str> = stop.iter().map(String::as_str).collect();
                tools.run(systemctl, &stop, &[], &mut report)?;
            } else {
                // What `disable` removes, when no manager could.
                systemd::remove_enablement_link(&unit_dir, &mut report)?;
            }
            for name in [systemd::ENTRY_UNIT, systemd::TEMPLATE_UNIT] {
                remove_file(&unit_dir.join(name), &mut report)?;
            }
            remove_file(&paths.daemon_env(), &mut report)?;
            if let Some(systemctl) = &systemctl {
                tools.run(systemctl, &["--user", "daemon-reload"], &[], &mut report)?;
            }
        }
        Manager::Launchd => {
            let launchctl = tools.require("launchctl", LAUNCHCTL_HINT)?;
            tools.run(
                &launchctl,
                &launchd::bootout_args(paths.uid),
                &launchd::NOT_LOADED_EXIT_CODES,
                &mut report,
            )?;
            remove_file(&paths.plist(), &mut report)?;
        }
    }
    Ok(report)
}

/// The managed record, if install wrote one and it is readable. A malformed or foreign-version
/// record counts as absent: the shim then self-spawns, which always works.
pub(crate) fn read_managed(paths: &InstallPaths) -> Option<ManagedRecord> {
    let bytes = std::fs::read(paths.managed_record()).ok()?;
    let record: ManagedRecord = serde_json::from_slice(&bytes).ok()?;
    (record.version == MANAGED_RECORD_VERSION).then_some(record)
}

/// Asks the manager in `record` for a daemon of `version` (the shim's managed start): systemd
/// starts `agentprism@<version>.service` and returns once it is ready; launchd kickstarts the
/// job. On an error the shim self-spawns, as if nothing were installed.
pub(crate) fn start_managed(
    record: &ManagedRecord,
    paths: &InstallPaths,
    version: &str,
) -> Result<()> {
    let tools = Tools::new(paths.tool_path.clone());
    let mut report = InstallReport::default();
    match Manager::parse(&record.manager) {
        Some(Manager::Systemd) => {
            let systemctl = tools.require("systemctl", SYSTEMCTL_HINT)?;
            tools.run(
                &systemctl,
                &systemd::start_generation_args(version),
                &[],
                &mut report,
            )?;
        }
        Some(Manager::Launchd) => {
            let launchctl = tools.require("launchctl", LAUNCHCTL_HINT)?;
            tools.run(
                &launchctl,
                &launchd::kickstart_args(paths.uid),
                &[],
                &mut report,
            )?;
        }
        None => {
            return Err(ServiceError::Refused(format!(
                "managed.json names an unknown manager {:?}",
                record.manager
            )));
        }
    }
    Ok(())
}

const SYSTEMCTL_HINT: &str = "there is no systemd user manager here; the daemon keeps being \
    self-spawned by the shim, which needs no install";
const LAUNCHCTL_HINT: &str = "launchd is only on macOS; elsewhere use the systemd install";

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    crate::util::write_atomic(path, bytes, mode).map_err(|e| ServiceError::io("write", path, e))
}

pub(super) fn remove_file(path: &Path, report: &mut InstallReport) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            report.files_removed.push(path.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ServiceError::io("remove", path, e)),
    }
}

fn ensure_private_dir(dir: &Path) -> Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| ServiceError::io("create folder", parent, e))?;
    }
    crate::discovery::paths::ensure_private_dir(dir)
        .map_err(|e| ServiceError::Refused(e.to_string()))
}

#[cfg(test)]
mod tests;
