//! The service managers' command-line tools (`systemctl`, `launchctl`), found on
//! an explicit PATH and run with every exit code checked, each command recorded in the
//! [`InstallReport`] as a shell would show it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{InstallReport, Result, ServiceError};

/// Finds and runs the manager's command-line tools on an explicit PATH.
pub(super) struct Tools {
    search_path: OsString,
}

impl Tools {
    pub(super) fn new(search_path: OsString) -> Tools {
        Tools { search_path }
    }

    pub(super) fn find(&self, tool: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        std::env::split_paths(&self.search_path)
            .map(|dir| dir.join(tool))
            .find(|candidate| {
                std::fs::metadata(candidate)
                    .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
            })
    }

    pub(super) fn require(&self, tool: &str, hint: &'static str) -> Result<PathBuf> {
        self.find(tool).ok_or_else(|| ServiceError::ToolMissing {
            tool: tool.into(),
            hint,
        })
    }

    /// Runs `program args`; exit 0 or one of `accepted` is success, anything else an error
    /// carrying the command's output.
    pub(super) fn run<S: AsRef<str>>(
        &self,
        program: &Path,
        args: &[S],
        accepted: &[i32],
        report: &mut InstallReport,
    ) -> Result<i32> {
        let shown = std::iter::once(
            program
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        )
        .chain(args.iter().map(|arg| arg.as_ref().to_string()))
        .collect::<Vec<_>>()
        .join(" ");
        report.commands.push(shown.clone());
        let mut attempts = 0;
        let output = loop {
            let result = Command::new(program)
                .args(args.iter().map(AsRef::as_ref))
                .stdin(Stdio::null())
                .output();
            match result {
                // A program written moments ago (the tests' fakes) can be briefly busy when
                // another thread forked while its write handle was open.
                Err(e)
                    if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                        && attempts < 50 =>
                {
                    attempts += 1;
                    std::thread::yield_now();
                }
                Err(e) => return Err(ServiceError::io("run", program, e)),
                Ok(output) => break output,
            }
        };
        let code = output.status.code();
        match code {
            Some(0) => Ok(0),
            Some(code) if accepted.contains(&code) => Ok(code),
            _ => {
                let mut text = String::from_utf8_lossy(&output.stderr).trim().to_string();
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !stdout.trim().is_empty() {
                    text = format!("{text}\n{}", stdout.trim());
                }
                Err(ServiceError::CommandFailed {
                    command: shown,
                    status: output.status.to_string(),
                    output: if text.is_empty() {
                        "(no output)".into()
                    } else {
                        text
                    },
                })
            }
        }
    }
}
