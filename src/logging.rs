//! Diagnostics go to stderr through `tracing`; `AGENTPRISM_LOG` (an env-filter directive,
//! default `warn`) chooses how much. Stdout stays reserved for results and protocol.
//!
//! A self-spawned daemon has no terminal: it sends the same diagnostics to
//! `R/logs/daemon.log` instead ([`log_to_file`]), rotated by size so a daemon that lives for
//! weeks cannot fill the disk. Its lifecycle lines ([`notice`]) are written whatever the
//! filter says, so the log always tells when and why a daemon started and stopped.

use crate::util::sync::Lock;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Installs the stderr subscriber once; later calls do nothing.
pub fn init_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(crate::env::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_target(false)
        .try_init();
}

/// Sends every later diagnostic to `path`, rotated at `max_bytes` keeping `keep` old files
/// (`daemon.log.1` is the newest). With `redirect_std`, stdout and stderr are pointed at the
/// current file too (now and after each rotation), so a panic message lands in the log.
/// Only the first call takes effect.
pub(crate) fn log_to_file(
    path: &Path,
    max_bytes: u64,
    keep: usize,
    redirect_std: bool,
) -> io::Result<()> {
    let file = RotatingFile::open(path, max_bytes, keep, redirect_std)?;
    let _ = FILE_SINK.set(Mutex::new(file));
    Ok(())
}

/// Writes one timestamped lifecycle line to the log (or stderr), whatever `AGENTPRISM_LOG`
/// filters.
pub fn notice(message: impl std::fmt::Display) {
    let line = format!(
        "{} NOTICE {message}\n",
        crate::util::iso_time(crate::util::now_ms())
    );
    let _ = LogWriter.write_all(line.as_bytes());
}

/// The log file once [`log_to_file`] was called.
static FILE_SINK: OnceLock<Mutex<RotatingFile>> = OnceLock::new();

/// Writes to the log file when there is one, else to stderr.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match FILE_SINK.get() {
            Some(sink) => sink.locked().write(buf),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match FILE_SINK.get() {
            Some(_) => Ok(()),
            None => io::stderr().flush(),
        }
    }
}

/// An append-only log file that moves itself aside once it reaches a size: `log` becomes
/// `log.1`, `log.1` becomes `log.2`, and so on up to `keep`; the oldest is deleted.
#[derive(Debug)]
pub(crate) struct RotatingFile {
    path: PathBuf,
    file: File,
    /// Bytes in the current file, so a rotation needs no `stat` per write.
    written: u64,
    max_bytes: u64,
    keep: usize,
    /// Whether fds 1 and 2 follow the current file.
    redirect_std: bool,
}

impl RotatingFile {
    /// Opens (creating 0600) `path` for appending.
    pub(crate) fn open(
        path: &Path,
        max_bytes: u64,
        keep: usize,
        redirect_std: bool,
    ) -> io::Result<RotatingFile> {
        let file = open_append(path)?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        let rotating = RotatingFile {
            path: path.to_path_buf(),
            file,
            written,
            max_bytes: max_bytes.max(1),
            keep,
            redirect_std,
        };
        rotating.redirect()?;
        Ok(rotating)
    }

    /// The numbered name of the `index`-th older file.
    pub(crate) fn rotated_path(path: &Path, index: usize) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{index}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.keep == 0 {
            std::fs::remove_file(&self.path).or_else(ignore_missing)?;
        } else {
            std::fs::remove_file(Self::rotated_path(&self.path, self.keep))
                .or_else(ignore_missing)?;
            for index in (1..self.keep).rev() {
                std::fs::rename(
                    Self::rotated_path(&self.path, index),
                    Self::rotated_path(&self.path, index + 1),
                )
                .or_else(ignore_missing)?;
            }
            std::fs::rename(&self.path, Self::rotated_path(&self.path, 1))
                .or_else(ignore_missing)?;
        }
        self.file = open_append(&self.path)?;
        self.written = 0;
        self.redirect()
    }

    fn redirect(&self) -> io::Result<()> {
        if self.redirect_std {
            nix::unistd::dup2_stdout(&self.file).map_err(io::Error::from)?;
            nix::unistd::dup2_stderr(&self.file).map_err(io::Error::from)?;
        }
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written > 0 && self.written + buf.len() as u64 > self.max_bytes {
            // A failed rotation must not lose the line: keep appending to the old file.
            if let Err(error) = self.rotate() {
                let _ = writeln!(
                    self.file,
                    "log rotation of {} failed: {error}",
                    self.path.display()
                );
            }
        }
        let written = self.file.write(buf)?;
        self.written += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| crate::util::annotate(e, "open log file", path))
}

fn ignore_missing(error: io::Error) -> io::Result<()> {
    if error.kind() == io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_size_edge_and_keeps_a_bounded_number_of_files() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("daemon.log");
        let mut log = RotatingFile::open(&path, 10, 2, false).unwrap();
        // Exactly at the limit: no rotation yet.
        log.write_all(b"0123456789").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");
        assert!(!RotatingFile::rotated_path(&path, 1).exists());
        // One byte over: the full file moves to .1 and the line starts a new file.
        log.write_all(b"a").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a");
        assert_eq!(
            std::fs::read(RotatingFile::rotated_path(&path, 1)).unwrap(),
            b"0123456789"
        );
        log.write_all(b"bcdefghijk").unwrap();
        log.write_all(b"second").unwrap();
        log.write_all(b"third-file").unwrap();
        log.write_all(b"4").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"4");
        assert_eq!(
            std::fs::read(RotatingFile::rotated_path(&path, 1)).unwrap(),
            b"third-file"
        );
        assert_eq!(
            std::fs::read(RotatingFile::rotated_path(&path, 2)).unwrap(),
            b"second"
        );
        assert!(!RotatingFile::rotated_path(&path, 3).exists());
        // A reopened log continues counting from the file's size.
        drop(log);
        let mut log = RotatingFile::open(&path, 10, 2, false).unwrap();
        log.write_all(b"123456789").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"4123456789");
        log.write_all(b"x").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
    }

    #[test]
    fn log_file_is_private() {
        use std::os::unix::fs::MetadataExt;
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("daemon.log");
        RotatingFile::open(&path, 10, 2, false).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }
}
