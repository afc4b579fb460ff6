//! A host process under test: started in its own process group with its output in files,
//! killed with SIGKILL alone (as when its terminal dies) or waited for with a deadline; and the
//! sweeper that kills whatever still carries a test's HOME when the test ends.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::support::fake_host_model::FakeHostModel;

/// One host process; its process group is killed if it is dropped unfinished.
pub(crate) struct HostProcess {
    pub(crate) child: Option<Child>,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
}

/// What a finished host session left.
pub(crate) struct Finished {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl HostProcess {
    /// SIGKILL to the host alone, as when its terminal is closed under it: what it started
    /// must notice by itself.
    pub(super) fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
        self.child = Some(child);
    }

    pub(crate) fn finish(mut self, deadline: Duration, fake: &FakeHostModel) -> Finished {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the host") {
                break status;
            }
            if started.elapsed() > deadline {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                panic!(
                    "the host did not finish within {deadline:?}\n{}\nsteps: {:#?}",
                    self.output(None).describe(),
                    fake.steps()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        self.output(status.code())
    }

    pub(crate) fn output(&self, code: Option<i32>) -> Finished {
        Finished {
            code,
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Finished {
    pub(crate) fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Kills every process still carrying `home` when dropped.
pub(crate) struct Sweeper {
    pub(crate) home: PathBuf,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        for pid in processes_with_home(&self.home) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Processes whose environment has `HOME=<home>`; the home is this test's, so only its
/// processes match (zombies show an empty environment and do not).
pub(crate) fn processes_with_home(home: &Path) -> Vec<i32> {
    let wanted = format!("HOME={}", home.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        })
        .collect()
}

pub(super) fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

pub(crate) fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|error| panic!("create {}: {error}", parent.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

pub(crate) fn create(path: &Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|error| panic!("create {}: {error}", path.display()))
}
