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
pub const PASSED_THROUGH: [&str; 20] = [
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
pub const MANAGED_RECORD_VERSION: u32 = 1;

/// `~/.config/agentprism/managed.json`: tells shims that a service manager runs this family's
/// daemon. Durable: read by shims of later versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedRecord {
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
pub struct InstallPaths {
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
pub struct InstallReport {
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
    pub fn from_env(env: &EnvSnapshot, current_exe: &Path) -> Result<InstallPaths> {
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
    pub fn config_dir(&self) -> PathBuf {
        self.home.join(".config").join("agentprism")
    }

    /// `~/.config/agentprism/daemon.env` (0600).
    pub fn daemon_env(&self) -> PathBuf {
        self.config_dir().join("daemon.env")
    }

    /// `~/.config/agentprism/managed.json` (0600).
    pub fn managed_record(&self) -> PathBuf {
        self.config_dir().join("managed.json")
    }

    /// `~/.config/systemd/user/`.
    pub fn systemd_user_dir(&self) -> PathBuf {
        self.home.join(".config").join("systemd").join("user")
    }

    /// `~/Library/LaunchAgents/dev.agentprism.daemon.plist`.
    pub fn plist(&self) -> PathBuf {
        launchd::plist_path(&self.home)
    }
}

/// The program path to write into a unit or plist: `~/.local/bin/agentprism` if it exists,
/// else the first `agentprism` on PATH that is the running binary under a non-versioned name
/// (Homebrew's `bin/` symlink into `Cellar/`), else the running binary itself when its path is
/// not versioned. A path that would vanish on upgrade is refused with a hint.
pub fn stable_binary(home: &Path, current_exe: &Path, search_path: &OsStr) -> Result<PathBuf> {
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
pub fn daemon_environment(env: &EnvSnapshot) -> Vec<(String, String)> {
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
pub fn render_env_file(environment: &[(String, String)]) -> String {
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
pub fn install(manager: Manager, paths: &InstallPaths, env: &EnvSnapshot) -> Result<InstallReport> {
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
            if let Err(unreachable) = reach_user_manager(&tools, &systemctl, &mut report) {
                return Err(ServiceError::Refused(format!(
                    "{unreachable}, so nothing was installed. {}",
                    no_user_manager_hint(paths.uid)
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
pub fn uninstall(manager: Manager, paths: &InstallPaths) -> Result<InstallReport> {
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
                    match reach_user_manager(&tools, &systemctl, &mut report) {
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
                remove_enablement_link(&unit_dir, &mut report)?;
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
pub fn read_managed(paths: &InstallPaths) -> Option<ManagedRecord> {
    let bytes = std::fs::read(paths.managed_record()).ok()?;
    let record: ManagedRecord = serde_json::from_slice(&bytes).ok()?;
    (record.version == MANAGED_RECORD_VERSION).then_some(record)
}

/// Asks the manager in `record` for a daemon of `version` (the shim's managed start): systemd
/// starts `agentprism@<version>.service` and returns once it is ready; launchd kickstarts the
/// job. On an error the shim self-spawns, as if nothing were installed.
pub fn start_managed(record: &ManagedRecord, paths: &InstallPaths, version: &str) -> Result<()> {
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

/// Asks the user's systemd manager for its version: `Err` (saying what systemctl answered)
/// when there is no manager to talk to, typically no user bus outside a login session.
fn reach_user_manager(
    tools: &Tools,
    systemctl: &Path,
    report: &mut InstallReport,
) -> Result<(), String> {
    match tools.run(
        systemctl,
        &["--user", "show", "--property=Version"],
        &[],
        report,
    ) {
        Ok(_) => Ok(()),
        Err(ServiceError::CommandFailed {
            command, output, ..
        }) => Err(format!(
            "the systemd user manager cannot be reached (`{command}`: {output})"
        )),
        Err(other) => Err(format!(
            "the systemd user manager cannot be reached ({other})"
        )),
    }
}

/// What to do without a reachable user manager.
fn no_user_manager_hint(uid: u32) -> String {
    format!(
        "systemd runs a user's manager during a login session (a console, ssh or desktop \
         login; not `su` or `sudo`), whose XDG_RUNTIME_DIR is /run/user/{uid}, and from boot \
         on after `loginctl enable-linger $USER`: log in that way (after enabling lingering, \
         log in again) and run `agentprism daemon install` again. Without a service manager \
         nothing needs installing: the agentprism-workflow shim an MCP host starts spawns the \
         daemon itself, and `agentprism daemon run` runs it in the foreground"
    )
}

/// Removes `default.target.wants/agentprism.service` when it is the link `enable` made to
/// our unit (a symlink whose target is named like it); anything else there is left alone.
fn remove_enablement_link(unit_dir: &Path, report: &mut InstallReport) -> Result<()> {
    let link = unit_dir.join(systemd::WANTED_BY).join(systemd::ENTRY_UNIT);
    let ours = std::fs::read_link(&link)
        .is_ok_and(|target| target.file_name() == Some(OsStr::new(systemd::ENTRY_UNIT)));
    if ours {
        remove_file(&link, report)?;
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

fn remove_file(path: &Path, report: &mut InstallReport) -> Result<()> {
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
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A temporary HOME with a `bin/` of fake tools that append their arguments to a log
    /// and exit with the code chosen for the first matching argument pattern.
    struct Fixture {
        _temp: tempfile::TempDir,
        paths: InstallPaths,
        log: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let temp = tempfile::tempdir().unwrap();
            let home = temp.path().join("home");
            std::fs::create_dir_all(&home).unwrap();
            let bin = temp.path().join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            let binary = home.join(".local/bin/agentprism");
            std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
            std::fs::write(&binary, b"").unwrap();
            let log = temp.path().join("calls.log");
            let paths = InstallPaths {
                log: home.join(".agentprism/workflows/logs/daemon.log"),
                home,
                binary,
                uid: 501,
                tool_path: bin.into_os_string(),
            };
            Fixture {
                _temp: temp,
                paths,
                log,
            }
        }

        /// Writes a fake `tool`; `rules` are (shell `case` pattern over "$*", exit code).
        fn fake(&self, tool: &str, rules: &[(&str, i32)]) {
            let mut script = format!(
                "#!/bin/sh\nprintf '%s\\n' \"{tool} $*\" >> '{}'\ncase \"$*\" in\n",
                self.log.display()
            );
            for (pattern, code) in rules {
                script.push_str(&format!(
                    "  {pattern}) echo '{tool} says no' >&2; exit {code};;\n"
                ));
            }
            script.push_str("esac\nexit 0\n");
            let path = Path::new(&self.paths.tool_path).join(tool);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }

        fn calls(&self) -> Vec<String> {
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    fn env() -> EnvSnapshot {
        EnvSnapshot::from_pairs([
            ("HOME", "/ignored"),
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("AGENTPRISM_BACKENDS", r#"{"a":{"command":"$HOME/x"}}"#),
            ("AGENTPRISM_DAEMON_IDLE_TTL_MS", "60000"),
            ("CODEX_ACP_MODEL", "o3"),
            ("ANTHROPIC_API_KEY", "sk-test"),
            ("UNRELATED_SECRET", "nope"),
            ("TERM", "xterm"),
        ])
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn systemd_install_writes_units_env_and_record_then_enables() {
        let fixture = Fixture::new();
        fixture.fake("systemctl", &[]);
        let report = install(Manager::Systemd, &fixture.paths, &env()).unwrap();
        assert_eq!(
            fixture.calls(),
            [
                "systemctl --user show --property=Version",
                "systemctl --user daemon-reload",
                "systemctl --user enable --now agentprism.service"
            ]
        );
        let paths = &fixture.paths;
        let unit_dir = paths.systemd_user_dir();
        let entry = std::fs::read_to_string(unit_dir.join("agentprism.service")).unwrap();
        assert!(entry.contains(&format!(
            "ExecStart={} daemon run --managed=systemd --supersede\n",
            paths.binary.display()
        )));
        assert!(entry.contains(&format!(
            "EnvironmentFile=-{}\n",
            paths.daemon_env().display()
        )));
        assert!(unit_dir.join("agentprism@.service").exists());

        let env_file = std::fs::read_to_string(paths.daemon_env()).unwrap();
        assert_eq!(mode(&paths.daemon_env()), 0o600);
        assert_eq!(mode(&paths.config_dir()), 0o700);
        assert!(
            env_file.contains(
                "AGENTPRISM_BACKENDS=\"{\\\"a\\\":{\\\"command\\\":\\\"\\$HOME/x\\\"}}\"\n"
            )
        );
        assert!(env_file.contains("ANTHROPIC_API_KEY=\"sk-test\"\n"));
        assert!(env_file.contains("PATH=\"/usr/local/bin:/usr/bin:/bin\"\n"));
        assert!(!env_file.contains("UNRELATED_SECRET") && !env_file.contains("TERM"));
        assert_eq!(
            report.environment,
            [
                "AGENTPRISM_BACKENDS",
                "AGENTPRISM_DAEMON_IDLE_TTL_MS",
                "ANTHROPIC_API_KEY",
                "CODEX_ACP_MODEL",
                "PATH"
            ]
        );

        let record = read_managed(paths).unwrap();
        assert_eq!(mode(&paths.managed_record()), 0o600);
        assert_eq!(record.manager, "systemd");
        assert_eq!(record.unit, "agentprism@.service");
        // The family of a shim with the same relevant environment.
        assert_eq!(
            record.fingerprint,
            fingerprint::fingerprint_of_snapshot(&env())
        );
        assert_eq!(
            report.fingerprint.as_deref(),
            Some(record.fingerprint.as_str())
        );
    }

    #[test]
    fn a_failing_enable_is_reported_and_leaves_no_managed_record() {
        let fixture = Fixture::new();
        fixture.fake("systemctl", &[("*enable*", 1)]);
        let error = install(Manager::Systemd, &fixture.paths, &env()).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("systemctl --user enable --now agentprism.service")
                && text.contains("systemctl says no"),
            "{text}"
        );
        assert!(read_managed(&fixture.paths).is_none());
    }

    #[test]
    fn without_systemctl_install_explains_self_spawn() {
        let fixture = Fixture::new();
        let error = install(Manager::Systemd, &fixture.paths, &env()).unwrap_err();
        assert!(matches!(error, ServiceError::ToolMissing { .. }), "{error}");
        assert!(!fixture.paths.systemd_user_dir().exists());
    }

    /// No user bus (outside a login session): install refuses before it writes anything,
    /// saying what to do, and uninstall still removes every file it owns and says what it
    /// could not do.
    #[test]
    fn without_a_user_manager_install_writes_nothing_and_uninstall_still_cleans_up() {
        let fixture = Fixture::new();
        fixture.fake("systemctl", &[("*show*", 1)]);
        let error = install(Manager::Systemd, &fixture.paths, &env()).unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, ServiceError::Refused(_)), "{text}");
        for needed in [
            "systemctl says no",
            "nothing was installed",
            "loginctl enable-linger",
            "agentprism daemon run",
        ] {
            assert!(text.contains(needed), "{needed}: {text}");
        }
        assert_eq!(
            fixture.calls(),
            ["systemctl --user show --property=Version"]
        );
        assert!(!fixture.paths.home.join(".config").exists());

        // What an install that could reach the manager left, then the manager went away.
        fixture.fake("systemctl", &[]);
        install(Manager::Systemd, &fixture.paths, &env()).unwrap();
        let unit_dir = fixture.paths.systemd_user_dir();
        let wants = unit_dir.join(systemd::WANTED_BY);
        std::fs::create_dir_all(&wants).unwrap();
        std::os::unix::fs::symlink(
            unit_dir.join(systemd::ENTRY_UNIT),
            wants.join(systemd::ENTRY_UNIT),
        )
        .unwrap();
        fixture.fake("systemctl", &[("*show*", 1)]);
        let before = fixture.calls().len();
        let report = uninstall(Manager::Systemd, &fixture.paths).unwrap();
        assert_eq!(
            fixture.calls()[before..],
            ["systemctl --user show --property=Version"]
        );
        assert_eq!(report.files_removed.len(), 5, "{report:?}");
        for gone in [
            fixture.paths.managed_record(),
            unit_dir.join(systemd::ENTRY_UNIT),
            unit_dir.join(systemd::TEMPLATE_UNIT),
            wants.join(systemd::ENTRY_UNIT),
            fixture.paths.daemon_env(),
        ] {
            assert!(
                std::fs::symlink_metadata(&gone).is_err(),
                "{}",
                gone.display()
            );
        }
        let [undone] = report.not_done.as_slice() else {
            panic!("{report:?}");
        };
        assert!(
            undone.contains("systemctl says no") && undone.contains("daemon stop --all"),
            "{undone}"
        );
    }

    #[test]
    fn systemd_uninstall_stops_every_generation_and_is_idempotent() {
        let fixture = Fixture::new();
        fixture.fake("systemctl", &[]);
        install(Manager::Systemd, &fixture.paths, &env()).unwrap();
        let report = uninstall(Manager::Systemd, &fixture.paths).unwrap();
        assert_eq!(
            fixture.calls()[3..],
            [
                "systemctl --user show --property=Version",
                "systemctl --user disable --now agentprism.service",
                "systemctl --user stop agentprism.service agentprism@*.service",
                "systemctl --user daemon-reload"
            ]
        );
        assert_eq!(report.files_removed.len(), 4);
        assert!(report.not_done.is_empty());
        assert!(!fixture.paths.daemon_env().exists());
        assert!(read_managed(&fixture.paths).is_none());
        let again = uninstall(Manager::Systemd, &fixture.paths).unwrap();
        assert!(again.commands.is_empty() && again.files_removed.is_empty());
    }

    #[test]
    fn launchd_install_boots_out_then_bootstraps_with_codes_checked() {
        let fixture = Fixture::new();
        // Not loaded yet: bootout says "no such process" (3), which install accepts.
        fixture.fake("launchctl", &[("bootout*", 3)]);
        install(Manager::Launchd, &fixture.paths, &env()).unwrap();
        let plist = fixture.paths.plist();
        assert_eq!(
            fixture.calls(),
            [
                "launchctl bootout gui/501/dev.agentprism.daemon".to_string(),
                "launchctl enable gui/501/dev.agentprism.daemon".to_string(),
                format!("launchctl bootstrap gui/501 {}", plist.display()),
            ]
        );
        assert_eq!(mode(&plist), 0o600);
        let parsed = launchd::tests::parse_plist(&std::fs::read_to_string(&plist).unwrap());
        assert_eq!(
            parsed
                .get("EnvironmentVariables")
                .get("ANTHROPIC_API_KEY")
                .string(),
            "sk-test"
        );
        let record = read_managed(&fixture.paths).unwrap();
        assert_eq!(
            (record.manager.as_str(), record.unit.as_str()),
            ("launchd", launchd::LABEL)
        );
    }

    #[test]
    fn launchd_failures_are_not_swallowed() {
        for (rule, expected) in [("bootout*", "bootout"), ("bootstrap*", "bootstrap")] {
            let fixture = Fixture::new();
            fixture.fake("launchctl", &[(rule, 5)]);
            let error = install(Manager::Launchd, &fixture.paths, &env()).unwrap_err();
            match error {
                ServiceError::CommandFailed {
                    command, status, ..
                } => {
                    assert!(command.starts_with(&format!("launchctl {expected}")));
                    assert!(status.contains('5'), "{status}");
                }
                other => panic!("{other}"),
            }
            assert!(read_managed(&fixture.paths).is_none());
        }
    }

    #[test]
    fn launchd_uninstall_boots_out_and_removes_the_plist() {
        let fixture = Fixture::new();
        fixture.fake("launchctl", &[]);
        install(Manager::Launchd, &fixture.paths, &env()).unwrap();
        uninstall(Manager::Launchd, &fixture.paths).unwrap();
        assert_eq!(
            fixture.calls().last().unwrap(),
            "launchctl bootout gui/501/dev.agentprism.daemon"
        );
        assert!(!fixture.paths.plist().exists());
        assert!(read_managed(&fixture.paths).is_none());
        // Not loaded any more (113): still fine.
        fixture.fake("launchctl", &[("bootout*", 113)]);
        uninstall(Manager::Launchd, &fixture.paths).unwrap();
    }

    #[test]
    fn stable_binary_prefers_local_bin_then_a_plain_symlink() {
        let temp = tempfile::tempdir().unwrap();
        let home = temp.path().join("home");
        let cellar = temp.path().join("Cellar/agentprism/0.1.0/bin");
        std::fs::create_dir_all(&cellar).unwrap();
        let real = cellar.join("agentprism");
        std::fs::write(&real, b"").unwrap();
        let brew_bin = temp.path().join("brew/bin");
        std::fs::create_dir_all(&brew_bin).unwrap();
        std::os::unix::fs::symlink(&real, brew_bin.join("agentprism")).unwrap();
        let search = std::env::join_paths([Path::new("/nonexistent"), &brew_bin]).unwrap();
        assert_eq!(
            stable_binary(&home, &real, &search).unwrap(),
            brew_bin.join("agentprism")
        );
        assert!(stable_binary(&home, &real, OsStr::new("/nonexistent")).is_err());
        let local = home.join(".local/bin/agentprism");
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(&local, b"").unwrap();
        assert_eq!(stable_binary(&home, &real, &search).unwrap(), local);
    }

    #[test]
    fn managed_start_asks_for_the_shims_generation() {
        let fixture = Fixture::new();
        fixture.fake("systemctl", &[("*0.3.0*", 1)]);
        install(Manager::Systemd, &fixture.paths, &env()).unwrap();
        let record = read_managed(&fixture.paths).unwrap();
        start_managed(&record, &fixture.paths, "0.2.0+build").unwrap();
        assert_eq!(
            fixture.calls().last().unwrap(),
            "systemctl --user start agentprism@0.2.0.service"
        );
        assert!(matches!(
            start_managed(&record, &fixture.paths, "0.3.0"),
            Err(ServiceError::CommandFailed { .. })
        ));
    }

    #[test]
    fn env_file_escapes_what_systemd_unescapes() {
        let text = render_env_file(&[("A".into(), "x\"y\\z`$w".into())]);
        assert!(text.ends_with("A=\"x\\\"y\\\\z\\`\\$w\"\n"), "{text}");
    }

    #[test]
    fn frozen_managed_record_still_reads() {
        let sample = r#"{
  "version": 1,
  "manager": "systemd",
  "unit": "agentprism@.service",
  "fingerprint": "0123456789abcdef",
  "binary": "/home/u/.local/bin/agentprism"
}"#;
        let record: ManagedRecord = serde_json::from_str(sample).unwrap();
        assert_eq!(record.fingerprint, "0123456789abcdef");
        assert_eq!(
            serde_json::to_string_pretty(&record).unwrap(),
            sample,
            "managed.json's format changed: bump MANAGED_RECORD_VERSION"
        );
    }
}
