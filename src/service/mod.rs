//! Running the daemon under a service manager (daemon.md 2): the sd-notify channel to systemd,
//! socket activation (a listener passed as fd 3), the systemd unit files and the LaunchAgent plist, and `agentprism daemon install` /
//! `uninstall`, which write them and hand them to `systemctl --user` or `launchctl`.
//! Self-spawn stays the default; everything here is opt-in and only changes who starts and
//! restarts the daemon, never how it runs. The daemon and the CLI call into this module; it
//! calls neither of them.

pub(crate) mod activation;
pub(crate) mod install;
pub(crate) mod launchd;
pub(crate) mod notify;
pub(crate) mod systemd;
mod tools;

use std::path::{Path, PathBuf};

pub(crate) use install::{InstallPaths, InstallReport};
pub(crate) use notify::Notifier;

/// Which service manager, if any, runs this daemon: the value of `daemon run --managed=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manager {
    /// `--managed=systemd`: a systemd user unit started us (`Type=notify`).
    Systemd,
    /// `--managed=launchd`: a LaunchAgent started us.
    Launchd,
}

impl Manager {
    /// The manager for this platform's `daemon install`.
    pub(crate) fn native() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    /// Parses the `--managed=` value.
    pub(crate) fn parse(text: &str) -> Option<Manager> {
        match text {
            "systemd" => Some(Manager::Systemd),
            "launchd" => Some(Manager::Launchd),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }
}

/// What went wrong installing, uninstalling or talking to a service manager. The CLI maps
/// every kind to exit 1; the kinds exist so tests and the fallback logic can tell a missing
/// manager (fall back to self-spawn) from a manager that refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    #[error("could not {doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{tool}` was not found on PATH; {hint}")]
    ToolMissing { tool: String, hint: &'static str },
    #[error("`{command}` exited with {status}: {output}")]
    CommandFailed {
        command: String,
        status: String,
        output: String,
    },
    #[error("{0}")]
    Refused(String),
}

impl ServiceError {
    pub(crate) fn io(doing: &'static str, path: &Path, source: std::io::Error) -> ServiceError {
        ServiceError::Io {
            doing,
            path: path.to_path_buf(),
            source,
        }
    }
}

pub(crate) type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// A variable lookup over `pairs`, standing in for the process environment in tests.
#[cfg(test)]
pub(crate) fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + use<> {
    let map: std::collections::HashMap<String, std::ffi::OsString> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), std::ffi::OsString::from(v)))
        .collect();
    move |name| map.get(name).cloned()
}
