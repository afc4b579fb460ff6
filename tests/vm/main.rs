//! The systemd VM test (daemon.md scenario 27): the package's user units, under a
//! real systemd user manager, in a Debian VM booted with qemu under software emulation.
//!
//! The shell scripts beside this file do the work: `build-image` makes the image once into
//! `target/vm/`, `run` packages the binaries this test was built with into a `.deb`, boots the
//! image with them on a 9p share, and the guest's `guest/checks.sh` runs the eight checks as a
//! lingering user. This test drives the two scripts under deadlines, kills the VM when one
//! passes, and asserts the guest's exit code, printing the guest's log and the serial console
//! on failure. It fails, never skips, when something the scripts need is missing.
//!
//! It is a test binary of its own with `test = false` (Cargo.toml), so plain `cargo test`
//! leaves it out: an emulated VM takes both cores, and beside the parallel threads of the
//! main suite its timings would mean nothing. `scripts/test` runs it last, after the build and
//! every other test: `cargo test --test systemd_vm`.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long the VM may run: boot, package install, the eight checks and power-off. A run
/// took 170 s under emulation on a loaded two-core machine.
const VM_DEADLINE: Duration = Duration::from_secs(300);
/// How long building the image may take: debootstrap downloads and configures about 200
/// packages (about 100 s here). Zero when the image is already built.
const IMAGE_DEADLINE: Duration = Duration::from_secs(900);
/// Time the `run` script gets beyond the VM's own deadline: packaging, the share, the copies.
const RUN_SLACK: Duration = Duration::from_secs(60);
/// How long a script killed at its deadline gets to clean up before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);

#[test]
fn the_package_is_supervised_by_a_real_systemd_user_manager() {
    let agentprism = PathBuf::from(env!("CARGO_BIN_EXE_agentprism"));
    let workflow = PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow"));
    let profile_dir = agentprism.parent().expect("the binary's folder");
    let target = profile_dir
        .parent()
        .expect("the target folder")
        .to_path_buf();
    let mock = profile_dir.join("examples/mock_acp_agent");
    assert!(
        mock.exists(),
        "{} is missing: run `cargo build --examples` (or the main suite, `cargo test`) first",
        mock.display()
    );
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm");
    let out = target.join("vm/last-run");
    std::fs::create_dir_all(&out).expect("create target/vm/last-run");

    let build_log = out.join("build-image.txt");
    let mut build = Command::new(scripts.join("build-image"));
    build.arg(&target);
    let (status, _) = run_with_deadline(build, &build_log, IMAGE_DEADLINE);
    assert!(
        status.is_some_and(|status| status.success()),
        "building the VM image failed ({}):\n{}",
        describe(status, IMAGE_DEADLINE),
        read(&build_log)
    );

    let run_log = out.join("run.txt");
    let mut run = Command::new(scripts.join("run"));
    run.env("AGENTPRISM_BIN", &agentprism)
        .env("AGENTPRISM_WORKFLOW_BIN", &workflow)
        .env("MOCK_ACP_AGENT", &mock)
        .env("VM_TARGET_DIR", &target)
        .env("VM_OUT", &out)
        .env("VM_DEADLINE_SECS", VM_DEADLINE.as_secs().to_string());
    let (status, took) = run_with_deadline(run, &run_log, VM_DEADLINE + RUN_SLACK);
    let log = read(&out.join("log"));
    eprintln!("{}", read(&run_log).trim_end());
    eprintln!("systemd VM test: {took:.0?} for packaging, boot and checks");
    if status.is_some_and(|status| status.success()) {
        eprintln!("{}", summary(&log));
        return;
    }
    panic!(
        "the systemd VM test failed ({}).\n\n--- guest log ({}) ---\n{}\n\n--- serial console ({}) ---\n{}\n\nThe guest's journal is in {}.",
        describe(status, VM_DEADLINE + RUN_SLACK),
        out.join("log").display(),
        log,
        out.join("console.log").display(),
        read(&out.join("console.log")),
        out.join("journal.txt").display(),
    );
}

/// Runs `command` in a process group of its own with stdout and stderr to `log`; past
/// `deadline` the whole group (the VM included) is killed. Returns the exit status (`None`
/// when killed at the deadline) and the time taken.
fn run_with_deadline(
    mut command: Command,
    log: &Path,
    deadline: Duration,
) -> (Option<ExitStatus>, Duration) {
    let file = File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let started = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone the log handle"))
        .stderr(file)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
    let group = Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
    let (sender, receiver) = mpsc::channel();
    let waiter = std::thread::spawn(move || wait_and_send(child, sender));
    let status = match receiver.recv_timeout(deadline) {
        Ok(status) => Some(status),
        Err(_) => {
            // SIGTERM first: qemu exits, and the script's trap removes its share folder.
            let _ = killpg(group, Signal::SIGTERM);
            if receiver.recv_timeout(TERM_GRACE).is_err() {
                let _ = killpg(group, Signal::SIGKILL);
            }
            None
        }
    };
    waiter.join().expect("the waiting thread");
    (status, started.elapsed())
}

fn wait_and_send(mut child: Child, sender: mpsc::Sender<ExitStatus>) {
    let status = child.wait().expect("wait for the script");
    let _ = sender.send(status);
}

fn describe(status: Option<ExitStatus>, deadline: Duration) -> String {
    match status {
        Some(status) => format!("{status}"),
        None => format!("killed at its deadline of {deadline:?}"),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

/// The guest's per-check lines and its closing count.
fn summary(log: &str) -> String {
    log.lines()
        .filter(|line| {
            line.starts_with("PASS ") || line.starts_with("FAIL ") || line.ends_with(" failed")
        })
        .collect::<Vec<_>>()
        .join("\n")
}
