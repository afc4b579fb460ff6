//! The systemd user units and the `systemctl --user` commands around them (daemon.md 2,
//! Decision 2). The unit texts live in `systemd/` so packages ship exactly what the tests
//! verify; `daemon install` renders them with the binary and env-file paths of this machine.
//!
//! Generations: `agentprism.service` is the unit a user enables and runs the daemon started at
//! login. A shim that needs a successor starts `agentprism@<its version>.service`, an instance
//! of the template, so each generation is its own unit with its own cgroup: a successor that
//! crashes is restarted on its own without touching its draining predecessor, and a lame duck
//! that exits 0 stays down (`Restart=on-failure`). The design and the alternatives are in
//! `docs/service.md`.
//!
//! Install and uninstall first ask whether the user's manager can be reached at all (there is
//! none without a login session or lingering), so install refuses before writing and
//! uninstall can remove its files without one.

use std::path::Path;

use super::tools::Tools;
use super::{InstallReport, Result, ServiceError};

/// The unit a user enables (`systemctl --user enable --now agentprism`).
pub(crate) const ENTRY_UNIT: &str = "agentprism.service";
/// The template a successor generation runs under, one instance per version.
pub(crate) const TEMPLATE_UNIT: &str = "agentprism@.service";
/// Glob matching every generation instance (for `systemctl --user stop`).
pub(crate) const INSTANCE_GLOB: &str = "agentprism@*.service";
/// The folder `systemctl --user enable` links [`ENTRY_UNIT`] into (its `WantedBy=`).
pub(crate) const WANTED_BY: &str = "default.target.wants";

/// `systemd/agentprism.service` as shipped.
pub(crate) const ENTRY_UNIT_TEXT: &str = include_str!("../../systemd/agentprism.service");
/// `systemd/agentprism@.service` as shipped.
pub(crate) const TEMPLATE_UNIT_TEXT: &str = include_str!("../../systemd/agentprism@.service");

/// The program path the shipped units run; `daemon install` and the packages replace it.
pub(crate) const SHIPPED_BINARY: &str = "%h/.local/bin/agentprism";
/// The environment file the shipped units read (optional: a leading `-` in the unit).
pub(crate) const SHIPPED_ENV_FILE: &str = "%h/.config/agentprism/daemon.env";

/// Exit code of `daemon run --expect-version=V` when the binary's version is not `V`. The
/// units list it in `RestartPreventExitStatus`, so a stale instance is not restarted in a loop;
/// the shim then self-spawns.
pub(crate) const EXIT_WRONG_VERSION: u8 = 3;

/// One unit file to write under `~/.config/systemd/user/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnitFile {
    pub name: &'static str,
    pub contents: String,
}

/// Both units, rendered to run `binary` with environment file `env_file`.
pub(crate) fn unit_files(binary: &Path, env_file: &Path) -> Result<Vec<UnitFile>> {
    Ok(vec![
        UnitFile {
            name: ENTRY_UNIT,
            contents: render_unit(ENTRY_UNIT_TEXT, binary, env_file)?,
        },
        UnitFile {
            name: TEMPLATE_UNIT,
            contents: render_unit(TEMPLATE_UNIT_TEXT, binary, env_file)?,
        },
    ])
}

/// Replaces the shipped program and environment-file paths in a unit text.
pub(crate) fn render_unit(text: &str, binary: &Path, env_file: &Path) -> Result<String> {
    Ok(text
        .replace(SHIPPED_BINARY, &command_word(binary)?)
        .replace(SHIPPED_ENV_FILE, &unit_path(env_file)?))
}

/// The instance name of a version: build metadata dropped (it takes no part in the
/// succession order, and `+` is not allowed in unit names), any other character outside
/// systemd's unit-name alphabet escaped as `\xNN` the way `systemd-escape` does.
pub(crate) fn instance_name(version: &str) -> String {
    let core = version.split('+').next().unwrap_or(version);
    let mut name = String::with_capacity(core.len());
    for byte in core.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_' | b':') {
            name.push(byte as char);
        } else {
            name.push_str(&format!("\\x{byte:02x}"));
        }
    }
    name
}

/// `agentprism@<instance>.service` for a version.
pub(crate) fn instance_unit(version: &str) -> String {
    format!("agentprism@{}.service", instance_name(version))
}

/// Whether `daemon run --expect-version=<expected>` may go on with a binary of `version`.
/// The unit passes the raw instance (`%i`), so compare in instance form.
pub(crate) fn version_matches_instance(version: &str, expected: &str) -> bool {
    instance_name(version) == expected
}

/// `systemctl` arguments that start (or join) the generation of `version`. systemctl returns
/// once the daemon sent `READY=1`, or with an error when it failed or `TimeoutStartSec`
/// passed; systemd serialises starts, so shims of one version share one instance.
pub(crate) fn start_generation_args(version: &str) -> Vec<String> {
    vec!["--user".into(), "start".into(), instance_unit(version)]
}

/// `systemctl` arguments that stop every managed daemon of this user: the entry unit and all
/// generation instances.
pub(crate) fn stop_all_args() -> Vec<String> {
    vec![
        "--user".into(),
        "stop".into(),
        ENTRY_UNIT.into(),
        INSTANCE_GLOB.into(),
    ]
}

/// A path as the first word of `ExecStart=`: quoted when it holds whitespace, since systemd
/// splits command lines into words.
fn command_word(path: &Path) -> Result<String> {
    let escaped = unit_path(path)?;
    if escaped.contains(char::is_whitespace) {
        Ok(format!("\"{escaped}\""))
    } else {
        Ok(escaped)
    }
}

/// A path as a unit-file value: `%` doubled so systemd does not read a specifier. Paths that
/// cannot be written safely (quotes, backslashes, line breaks, not absolute) are refused.
fn unit_path(path: &Path) -> Result<String> {
    let text = path.to_str().ok_or_else(|| {
        ServiceError::Refused(format!(
            "{} is not UTF-8 and cannot be written into a unit file",
            path.display()
        ))
    })?;
    if !path.is_absolute() {
        return Err(ServiceError::Refused(format!(
            "{text} is not an absolute path; unit files need one"
        )));
    }
    if text.contains(['"', '\\', '\'', '\n']) {
        return Err(ServiceError::Refused(format!(
            "{text:?} holds a quote, backslash or line break; install the binary under a \
             plainer path (for example ~/.local/bin)"
        )));
    }
    Ok(text.replace('%', "%%"))
}

/// Asks the user's systemd manager for its version: `Err` (saying what systemctl answered)
/// when there is no manager to talk to, typically no user bus outside a login session.
pub(super) fn reach_user_manager(
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
pub(super) fn no_user_manager_hint(uid: u32) -> String {
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
pub(super) fn remove_enablement_link(unit_dir: &Path, report: &mut InstallReport) -> Result<()> {
    let link = unit_dir.join(WANTED_BY).join(ENTRY_UNIT);
    let ours = std::fs::read_link(&link)
        .is_ok_and(|target| target.file_name() == Some(std::ffi::OsStr::new(ENTRY_UNIT)));
    if ours {
        super::install::remove_file(&link, report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
        unit.lines()
            .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .collect()
    }

    #[test]
    fn both_units_carry_the_supervision_contract() {
        for text in [ENTRY_UNIT_TEXT, TEMPLATE_UNIT_TEXT] {
            for (key, value) in [
                ("Type", "notify"),
                ("NotifyAccess", "main"),
                ("Restart", "on-failure"),
                ("SuccessExitStatus", "130 143"),
                ("RestartPreventExitStatus", "3"),
                ("KillMode", "mixed"),
                ("UMask", "0077"),
                ("WatchdogSec", "120"),
                ("EnvironmentFile", "-%h/.config/agentprism/daemon.env"),
            ] {
                assert_eq!(setting(text, key), [value], "{key} in\n{text}");
            }
            let exec = setting(text, "ExecStart");
            assert_eq!(exec.len(), 1);
            assert!(exec[0].starts_with("%h/.local/bin/agentprism daemon run --managed=systemd"));
            // Nothing ties one generation's lifetime to another's.
            for key in ["BindsTo", "PartOf", "Requires", "Requisite"] {
                assert!(setting(text, key).is_empty(), "{key} present");
            }
        }
        assert!(setting(TEMPLATE_UNIT_TEXT, "ExecStart")[0].ends_with("--expect-version=%i"));
        assert_eq!(setting(ENTRY_UNIT_TEXT, "WantedBy"), ["default.target"]);
        assert_eq!(WANTED_BY, "default.target.wants");
    }

    #[test]
    fn instance_names_follow_the_unit_alphabet() {
        assert_eq!(instance_unit("0.2.0"), "agentprism@0.2.0.service");
        assert_eq!(instance_name("1.0.0-rc.1+build.7"), "1.0.0-rc.1");
        assert_eq!(instance_name("1.0 beta"), "1.0\\x20beta");
        assert!(version_matches_instance("0.2.0+abc", "0.2.0"));
        assert!(!version_matches_instance("0.2.1", "0.2.0"));
        assert_eq!(
            start_generation_args("0.3.0"),
            ["--user", "start", "agentprism@0.3.0.service"]
        );
    }

    #[test]
    fn rendering_replaces_paths_and_escapes_them() {
        let units = unit_files(
            Path::new("/home/a b/bin/agent%prism"),
            Path::new("/home/a b/.config/agentprism/daemon.env"),
        )
        .unwrap();
        let entry = &units[0].contents;
        assert_eq!(
            setting(entry, "ExecStart"),
            ["\"/home/a b/bin/agent%%prism\" daemon run --managed=systemd --supersede"]
        );
        assert_eq!(
            setting(entry, "EnvironmentFile"),
            ["-/home/a b/.config/agentprism/daemon.env"]
        );
        assert!(unit_files(Path::new("bin/agentprism"), Path::new("/e")).is_err());
        assert!(unit_files(Path::new("/x\"y"), Path::new("/e")).is_err());
    }
}
