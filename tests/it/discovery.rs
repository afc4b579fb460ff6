//! Discovery against real processes: a spawn lock held by a child killed with SIGKILL is
//! released by the kernel, liveness tells dead, zombie and reused pids apart, and the process
//! table finds a daemon-shaped process, reconciles it with records and signals only verified
//! identities.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentprism::discovery::liveness::{DeadReason, ReuseReason, identity_liveness, proc_stat};
use agentprism::discovery::process_table::{PruneReason, SignalError, Signalled, signal_target};
use agentprism::discovery::record::{RecordRead, read_instance_records, write_own_record};
use agentprism::discovery::{
    DaemonRecord, DiscoveryError, Liveness, Paths, ProcessScan, Role, SpawnLock, process_alive_as,
    reconcile, signal_verified,
};
use nix::sys::signal::Signal;

/// Polls `condition` every 20 ms until it holds or `deadline` passes.
fn eventually(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// Kills and reaps a child when dropped, so a failing test leaves no process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn record_for(pid: u32, proc_start: u64, instance_id: &str) -> DaemonRecord {
    let mut record = DaemonRecord::for_this_process("0.1.0", instance_id, 0, "fp", "unix:/nowhere");
    record.pid = pid;
    record.proc_start = proc_start;
    record
}

fn sleeper() -> Reaped {
    Reaped(
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep"),
    )
}

#[test]
fn spawn_lock_held_by_a_killed_child_is_released() {
    if Command::new("flock").arg("--version").output().is_err() {
        eprintln!("skipped: no flock utility");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let paths = Paths::new(temp.path());
    paths.ensure_dirs().unwrap();
    // `exec sleep` keeps fd 9 in the same process, so killing that pid drops the lock.
    let mut holder = Reaped(
        Command::new("sh")
            .args(["-c", "exec 9>\"$0\"; flock 9; echo locked; exec sleep 30"])
            .arg(paths.spawn_lock("fp"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(holder.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let error = SpawnLock::acquire(&paths, "fp", Duration::from_millis(300)).unwrap_err();
    assert!(
        matches!(error, DiscoveryError::LockTimeout { .. }),
        "{error}"
    );
    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let started = Instant::now();
    let _lock = SpawnLock::acquire(&paths, "fp", Duration::from_secs(5)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn spawn_lock_is_not_inherited_by_children() {
    if Command::new("flock").arg("--version").output().is_err() {
        eprintln!("skipped: no flock utility");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let paths = Paths::new(temp.path());
    let lock = SpawnLock::acquire(&paths, "fp", Duration::from_secs(1)).unwrap();
    // A child spawned while we hold the lock (the daemon) must not keep it alive.
    let _child = sleeper();
    drop(lock);
    // A process another test forks in these threads holds a copy of the descriptor until
    // it execs (the file is close-on-exec), so the probe waits a few seconds for those;
    // the sleeper, were it to inherit the lock, would hold it for its whole 30 s.
    let status = Command::new("flock")
        .args(["--timeout", "5", "--exclusive"])
        .arg(paths.spawn_lock("fp"))
        .arg("true")
        .status()
        .unwrap();
    assert!(status.success(), "lock still held after drop");
}

#[test]
fn liveness_of_own_dead_zombie_and_reused_pids() {
    let own = DaemonRecord::for_this_process("0.1.0", "me", 0, "fp", "unix:/nowhere");
    assert_eq!(process_alive_as(&own), Liveness::Alive);

    // Exited and reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    let gone_start = proc_stat(gone_pid).map(|s| s.start_time).unwrap_or(0);
    gone.wait().unwrap();
    assert!(!identity_liveness(gone_pid, gone_start, None).is_alive());

    // Exited, not yet reaped.
    let zombie = Reaped(Command::new("true").spawn().unwrap());
    let zombie_pid = zombie.0.id();
    assert!(eventually(Duration::from_secs(5), || proc_stat(zombie_pid)
        .is_some_and(|s| s.zombie)));
    assert_eq!(
        identity_liveness(zombie_pid, 0, None),
        Liveness::Dead(DeadReason::Zombie)
    );
    drop(zombie);

    // Alive, but not the process the record describes.
    let mut sleep = sleeper();
    let pid = sleep.0.id();
    let actual = proc_stat(pid).unwrap().start_time;
    let stale = record_for(pid, actual + 1, "stale");
    assert!(matches!(
        process_alive_as(&stale),
        Liveness::Reused(ReuseReason::StartTime { .. })
    ));
    let target = agentprism::discovery::process_table::SignalTarget {
        pid,
        start_time: actual + 1,
    };
    assert!(matches!(
        signal_target(target, Signal::SIGTERM),
        Err(SignalError::Reused { .. })
    ));
    assert!(
        sleep.0.try_wait().unwrap().is_none(),
        "a reused pid was signalled"
    );
    let right = record_for(pid, actual, "right");
    assert_eq!(process_alive_as(&right), Liveness::Alive);
}

/// A copy of the system shell named `agentprism-fake`, so `/proc/<pid>/exe` has an agentprism
/// name, blocked on `read` until its stdin closes.
fn fake_daemon(dir: &Path, instance_id: &str) -> Reaped {
    let exe = dir.join("agentprism-fake");
    std::fs::copy(std::fs::canonicalize("/bin/sh").unwrap(), &exe).unwrap();
    Reaped(
        Command::new(&exe)
            .args([
                "-c",
                "read line",
                "agentprism-fake",
                "daemon",
                "run",
                "--instance-id",
                instance_id,
            ])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn process_table_reconciles_and_signals_verified_daemons() {
    let temp = tempfile::tempdir().unwrap();
    let paths = Paths::new(temp.path().join("root"));
    let tracked = fake_daemon(temp.path(), "tracked-id");
    let untracked_dir = temp.path().join("second");
    std::fs::create_dir(&untracked_dir).unwrap();
    let mut untracked = fake_daemon(&untracked_dir, "lost-id");
    let sleep = sleeper();
    let scan = ProcessScan::new();
    let (tracked_pid, untracked_pid) = (tracked.0.id(), untracked.0.id());
    assert!(eventually(Duration::from_secs(5), || {
        let found = scan.scan().unwrap();
        [tracked_pid, untracked_pid]
            .iter()
            .all(|pid| found.iter().any(|p| p.pid == *pid))
    }));
    let processes = scan.scan().unwrap();
    let fake = processes.iter().find(|p| p.pid == tracked_pid).unwrap();
    assert_eq!(fake.instance_id.as_deref(), Some("tracked-id"));
    assert!(
        fake.exe.ends_with("agentprism-fake"),
        "{}",
        fake.exe.display()
    );
    assert!(
        !processes
            .iter()
            .any(|p| p.pid == sleep.0.id() || p.pid == std::process::id())
    );

    // Records: the fake daemon, a daemon that is gone, and a stale record on the sleep's pid.
    write_own_record(
        &paths,
        &record_for(tracked_pid, fake.start_time, "tracked-id"),
    )
    .unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    write_own_record(&paths, &record_for(gone_pid, 1, "gone-id")).unwrap();
    let sleep_start = proc_stat(sleep.0.id()).unwrap().start_time;
    write_own_record(
        &paths,
        &record_for(sleep.0.id(), sleep_start + 1, "reused-id"),
    )
    .unwrap();
    std::fs::write(paths.instance_record(1), b"{broken").unwrap();

    let records = read_instance_records(&paths).unwrap();
    let entries = reconcile(&records, &processes, process_alive_as);
    let role_of = |pid: u32| {
        entries
            .iter()
            .find(|e| {
                e.own_record().map(|r| r.pid) == Some(pid)
                    || (e.record.is_none() && e.process.as_ref().map(|p| p.pid) == Some(pid))
            })
            .map(|e| e.role.clone())
    };
    assert_eq!(role_of(tracked_pid), Some(Role::Tracked));
    assert_eq!(role_of(untracked_pid), Some(Role::Untracked));
    assert!(matches!(
        role_of(gone_pid),
        Some(Role::Pruned(PruneReason::Dead(_)))
    ));
    assert!(matches!(
        role_of(sleep.0.id()),
        Some(Role::Pruned(PruneReason::Reused(_)))
    ));
    let malformed = entries
        .iter()
        .find(|e| matches!(e.role, Role::Malformed { .. }))
        .unwrap();
    assert_eq!(
        malformed.record.as_ref().unwrap().path,
        paths.instance_record(1)
    );

    // Pruning deletes the stale records and never touches their pids.
    let removed = agentprism::discovery::process_table::prune(&entries).unwrap();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(!paths.instance_record(gone_pid).exists());
    assert!(paths.instance_record(tracked_pid).exists());
    let left = read_instance_records(&paths).unwrap();
    assert!(
        left.iter()
            .any(|f| matches!(f.read, RecordRead::Malformed { .. }))
    );

    // Signals reach verified daemons through a pidfd (or kill where there is none).
    for pid in [tracked_pid, untracked_pid] {
        let entry = entries
            .iter()
            .find(|e| e.process.as_ref().map(|p| p.pid) == Some(pid))
            .unwrap();
        let how = signal_verified(entry, Signal::SIGTERM).unwrap();
        assert!(
            matches!(how, Signalled::ViaPidfd | Signalled::ViaKill),
            "{how:?}"
        );
    }
    let status = untracked.0.wait().unwrap();
    assert_eq!(
        nix::sys::signal::Signal::try_from(
            std::os::unix::process::ExitStatusExt::signal(&status).unwrap()
        )
        .unwrap(),
        Signal::SIGTERM
    );
    let mut sleep = sleep;
    assert!(
        sleep.0.try_wait().unwrap().is_none(),
        "the reused pid was signalled"
    );
    // Once reaped, a signal to the old identity reports it gone.
    let mut tracked = tracked;
    tracked.0.wait().unwrap();
    let entry = entries
        .iter()
        .find(|e| e.role == Role::Tracked && e.own_record().map(|r| r.pid) == Some(tracked_pid))
        .unwrap();
    assert!(matches!(
        signal_verified(entry, Signal::SIGTERM),
        Ok(Signalled::AlreadyGone) | Err(SignalError::Reused { .. })
    ));
}
