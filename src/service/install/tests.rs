//! Install and uninstall against a temporary HOME and fake `systemctl`/`launchctl`
//! programs that log their arguments and exit as each test chooses.

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
        env_file
            .contains("AGENTPRISM_BACKENDS=\"{\\\"a\\\":{\\\"command\\\":\\\"\\$HOME/x\\\"}}\"\n")
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
