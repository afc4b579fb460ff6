//! Running the `git` command line: one place that sets the environment every call needs
//! (untranslated messages, no prompts) and that waits out git's own lock files. Another git
//! process (the user's, or a hook's) may hold `index.lock` or a ref lock for a moment; a
//! command that fails only because of such a lock is tried again for a few seconds before
//! its error is reported.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::WorkspaceError;

/// How many times a command that met a held lock is tried in all.
const LOCK_ATTEMPTS: u32 = 40;

/// The most of a command's standard output kept: a command that writes more (an agent can
/// make a tree whose listing or diff is any size) is stopped and counts as failed.
const STDOUT_CAP: usize = 64 << 20;

/// The most of a command's error output kept for its message.
const STDERR_CAP: usize = 64 << 10;

/// The `git` program with the environment this room runs it in.
#[derive(Clone, Debug, Default)]
pub(crate) struct Git {
    /// Added to every command's environment (tests point HOME and the global config away
    /// from the user's).
    env: Vec<(OsString, OsString)>,
}

/// A finished git command.
pub(crate) struct Ran {
    pub(crate) success: bool,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
    /// Whether the output passed the cap and the command was stopped there.
    pub(crate) cut: bool,
}

impl Ran {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim_end().to_owned()
    }
}

impl Git {
    #[cfg(test)]
    pub(crate) fn with_env(env: Vec<(OsString, OsString)>) -> Self {
        Self { env }
    }

    /// Runs `git -C dir args...` and reports how it ended; fails only when git cannot be
    /// started. A failure caused by a held lock file is retried.
    pub(crate) async fn run(&self, dir: &Path, args: &[&str]) -> Result<Ran, WorkspaceError> {
        self.run_with(dir, args, &[]).await
    }

    /// `run` with extra environment for this one command.
    pub(crate) async fn run_with(
        &self,
        dir: &Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> Result<Ran, WorkspaceError> {
        let mut ran = self.retried(dir, args, extra, STDOUT_CAP).await?;
        if ran.cut {
            ran.success = false;
            ran.stderr = format!("its output passed {STDOUT_CAP} bytes");
        }
        Ok(ran)
    }

    /// Runs a read-only command keeping at most `cap` bytes of its output; `Ran::cut` says
    /// whether it wrote more (the command is then stopped, not failed).
    pub(crate) async fn run_capped(
        &self,
        dir: &Path,
        args: &[&str],
        cap: usize,
    ) -> Result<Ran, WorkspaceError> {
        self.retried(dir, args, &[], cap.min(STDOUT_CAP)).await
    }

    async fn retried(
        &self,
        dir: &Path,
        args: &[&str],
        extra: &[(&str, &str)],
        cap: usize,
    ) -> Result<Ran, WorkspaceError> {
        let mut attempt = 1;
        loop {
            let ran = self.once(dir, args, extra, cap).await?;
            if ran.success || !held_lock(&ran.stderr) || attempt >= LOCK_ATTEMPTS {
                return Ok(ran);
            }
            // Back off a little more each time so a long-held lock is not hammered.
            tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt.min(10)))).await;
            attempt += 1;
        }
    }

    /// Runs the command and answers its output, or an error carrying git's message.
    pub(crate) async fn ok(&self, dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
        let ran = self.run(dir, args).await?;
        if ran.success {
            Ok(ran.text())
        } else {
            Err(failed(dir, args, &ran))
        }
    }

    async fn once(
        &self,
        dir: &Path,
        args: &[&str],
        extra: &[(&str, &str)],
        cap: usize,
    ) -> Result<Ran, WorkspaceError> {
        let mut command = tokio::process::Command::new("git");
        command
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let cannot = |error: std::io::Error| WorkspaceError::Git {
            command: args.first().copied().unwrap_or_default().to_owned(),
            folder: dir.to_path_buf(),
            message: format!("cannot run git (worktree isolation needs git installed): {error}"),
        };
        let mut child = command.spawn().map_err(cannot)?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(cannot(std::io::Error::other("no pipes")));
        };
        let (stdout, stderr) =
            tokio::try_join!(read_capped(stdout, cap), read_capped(stderr, STDERR_CAP))
                .map_err(cannot)?;
        let cut = stdout.len() > cap;
        if cut || stderr.len() > STDERR_CAP {
            // Stopped at the cap: what it would have written further is not read.
            let _ = child.start_kill();
        }
        let status = child.wait().await.map_err(cannot)?;
        let mut stdout = stdout;
        stdout.truncate(cap);
        Ok(Ran {
            success: status.success() && !cut,
            stdout,
            stderr: String::from_utf8_lossy(&stderr[..stderr.len().min(STDERR_CAP)])
                .trim()
                .to_owned(),
            cut,
        })
    }
}

/// Reads at most `cap + 1` bytes of `pipe` (one more than the cap shows it was passed).
async fn read_capped(
    pipe: impl tokio::io::AsyncRead + Unpin,
    cap: usize,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    pipe.take(cap as u64 + 1).read_to_end(&mut out).await?;
    Ok(out)
}

/// The error for a command that ended in failure.
pub(crate) fn failed(dir: &Path, args: &[&str], ran: &Ran) -> WorkspaceError {
    WorkspaceError::Git {
        command: args.join(" "),
        folder: dir.to_path_buf(),
        message: if ran.stderr.is_empty() {
            "failed without a message".to_owned()
        } else {
            ran.stderr.clone()
        },
    }
}

/// Whether git failed because another process holds one of its lock files.
fn held_lock(stderr: &str) -> bool {
    stderr.contains(".lock") && (stderr.contains("File exists") || stderr.contains("nable to"))
        || stderr.contains("cannot lock ref")
}
