//! The leader of every agent's process group: `agentprism agent-reaper --owner <pid> --
//! <command> [args…]`, started by [`crate::acp::process`] in a new process group. It exists
//! because an agent that ignores stdin EOF (codex, claude once a session exists) and its
//! children would otherwise outlive an owner that dies without running its destructors
//! (SIGKILL, OOM kill, panic abort). `PR_SET_PDEATHSIG` alone cannot cover that: it reaches
//! only a direct child, and it fires when the spawning *thread* exits, not the process.
//!
//! So the owner spawns this small program (the agentprism binary itself, re-executed) from a
//! spawner thread that lives as long as the owner, and the reaper forks and execs the agent
//! inside its own group with the inherited stdin/stdout/stderr: the ACP pipes go straight to
//! the agent, the reaper copies nothing. Then it waits for one of four things:
//!
//! - the death signal ([`DEATH_SIGNAL`], armed with `PR_SET_PDEATHSIG` on Linux): the owner's
//!   spawner thread, hence the owner, is gone: SIGKILL to the whole group, itself included;
//! - EOF (or an error) on [`OWNER_FD`], its end of a socket pair whose other end only the
//!   owner holds: the owner died or dropped the agent: the same. This is the only mechanism
//!   on macOS, which has no death signal;
//! - the agent's exit: every other member of the group gets SIGKILL (found by a `/proc`
//!   scan, so the reaper survives to report the agent's status), then the reaper exits the
//!   way the agent did, so the owner's exit description is the agent's;
//! - SIGTERM, SIGINT or SIGHUP: forwarded to the agent (the owner's orderly shutdown signals
//!   the whole group; the reaper stays to sweep what the agent leaves behind).
//!
//! Before anything else it tells the owner, in one line on [`OWNER_FD`], whether the agent
//! started (`ok <pid>`) or why not (`error <kind> <message>`), so "command not found" keeps
//! its precise message.
//!
//! The code between `fork` and `exec` of the agent, and the signal handler, make raw
//! async-signal-safe calls only.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::libc;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, killpg, sigaction};
use nix::unistd::{Pid, getpgrp, getpid, getppid};

/// The hidden subcommand that runs [`run`].
pub(crate) const SUBCOMMAND: &str = "agent-reaper";
/// Where the reaper finds its end of the owner's socket pair.
pub(crate) const OWNER_FD: RawFd = 3;
/// Sent by the kernel when the owner's spawner thread exits (Linux `PR_SET_PDEATHSIG`).
/// Not SIGTERM or SIGKILL: those the owner's orderly shutdown sends to the whole group.
pub(crate) const DEATH_SIGNAL: Signal = Signal::SIGUSR1;
/// Exit code when the agent could not be started (the shell's "command not found").
const EXIT_NOT_STARTED: i32 = 127;
/// Exit code when the reaper was started wrongly (not a group leader, no owner socket).
const EXIT_MISUSE: i32 = 125;
/// How long the sweep after the agent's exit may take before the reaper kills the group
/// with itself in it.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SWEEP_DEADLINE: Duration = Duration::from_secs(2);

/// The write end of the self-pipe the signal handler wakes the loop with.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static OWNER_DIED: AtomicBool = AtomicBool::new(false);
/// A signal to pass on to the agent, or 0.
static FORWARD: AtomicI32 = AtomicI32::new(0);

/// Runs the reaper for `command` (program first) on behalf of the owner `owner_pid`; never
/// returns. Messages go to stderr, which is the agent's stderr pipe: the owner keeps its tail.
pub(crate) fn run(owner_pid: u32, command: &[OsString]) -> ! {
    let Some((program, args)) = command.split_first() else {
        fail(EXIT_MISUSE, "no agent command given");
    };
    // SIGKILL to our group must never reach whoever started us by hand.
    if getpgrp() != getpid() {
        fail(EXIT_MISUSE, "must lead its own process group");
    }
    // SAFETY: fcntl(F_GETFD) on a plain fd number touches no memory.
    if unsafe { libc::fcntl(OWNER_FD, libc::F_GETFD) } < 0 {
        fail(EXIT_MISUSE, "no owner socket on fd 3");
    }
    // SAFETY: fd 3 is open (checked above) and nothing in this process ever closes it.
    let owner = unsafe { BorrowedFd::borrow_raw(OWNER_FD) };
    // The agent must not hold our end: the owner's end then sees EOF only when we are gone.
    let _ = fcntl(owner, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));

    let (wake_read, wake_write) = match wake_pipe() {
        Ok(pair) => pair,
        Err(error) => fail(
            EXIT_MISUSE,
            &format!("cannot create the wake pipe: {error}"),
        ),
    };
    WAKE_FD.store(wake_write.as_raw_fd(), Ordering::SeqCst);
    install_handlers();

    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(error) = nix::sys::prctl::set_pdeathsig(DEATH_SIGNAL) {
        fail(
            EXIT_MISUSE,
            &format!("cannot arm the death signal: {error}"),
        );
    }
    // The owner may have died before the death signal was armed.
    if i64::from(getppid().as_raw()) != i64::from(owner_pid) {
        kill_group();
    }

    let mut agent = match start_agent(program, args) {
        Ok(agent) => agent,
        Err(error) => {
            let kind = if error.kind() == std::io::ErrorKind::NotFound {
                "not-found"
            } else {
                "other"
            };
            report(owner, &format!("error {kind} {error}"));
            fail(
                EXIT_NOT_STARTED,
                &format!("cannot start the agent: {error}"),
            );
        }
    };
    report(owner, &format!("ok {}", agent.id()));
    // Our copies of the ACP pipes: the agent alone holds them from now on, so the owner sees
    // EOF on stdout when the agent closes it, as if there were no reaper.
    detach_stdio();

    supervise(&mut agent, owner, &wake_read)
}

/// The reaper's life once the agent runs: passes on forwarded signals, kills the group when
/// the owner dies (its death signal or EOF on its socket), and exits like the agent once it
/// has ended and the rest of its group is swept.
fn supervise(agent: &mut Child, owner: BorrowedFd<'_>, wake_read: &std::os::fd::OwnedFd) -> ! {
    let mut buffer = [0u8; 64];
    loop {
        if OWNER_DIED.load(Ordering::SeqCst) {
            kill_group();
        }
        let forward = FORWARD.swap(0, Ordering::SeqCst);
        if forward != 0
            && let Ok(signal) = Signal::try_from(forward)
        {
            let _ = kill(agent_pid(agent), signal);
        }
        match agent.try_wait() {
            Ok(Some(status)) => {
                sweep_rest_of_group();
                exit_like(status);
            }
            Ok(None) => {}
            Err(_) => {
                sweep_rest_of_group();
                std::process::exit(1);
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: OWNER_FD,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake_read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries, length matches, no timeout.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            continue; // EINTR: the flags are checked at the top.
        }
        if fds[0].revents != 0 {
            match nix::unistd::read(owner, &mut buffer) {
                Ok(0) => kill_group(),
                Ok(_) => {} // The owner never writes; ignore anything it might.
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                Err(_) => kill_group(),
            }
        }
        if fds[1].revents != 0 {
            while matches!(nix::unistd::read(wake_read, &mut buffer), Ok(n) if n > 0) {}
        }
    }
}

/// A non-blocking, close-on-exec pipe (`pipe2` does not exist on macOS; nothing else runs
/// in this process yet, so setting the flags afterwards races with nothing).
fn wake_pipe() -> nix::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let (read, write) = nix::unistd::pipe()?;
    for fd in [&read, &write] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    Ok((read, write))
}

fn agent_pid(agent: &Child) -> Pid {
    Pid::from_raw(i32::try_from(agent.id()).unwrap_or(i32::MAX))
}

extern "C" fn on_signal(signal: libc::c_int) {
    let saved = Errno::last_raw();
    // SIGCHLD only needs the wake-up: the loop polls the agent's status on every one.
    if signal == DEATH_SIGNAL as libc::c_int {
        OWNER_DIED.store(true, Ordering::SeqCst);
    } else if signal != libc::SIGCHLD {
        FORWARD.store(signal, Ordering::SeqCst);
    }
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, and a full pipe
        // loses nothing because the loop re-reads the flags on every wake-up.
        unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
    }
    Errno::set_raw(saved);
}

fn install_handlers() {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [
        DEATH_SIGNAL,
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        // SAFETY: the handler only touches atomics and calls write(2).
        if let Err(error) = unsafe { sigaction(signal, &action) } {
            fail(EXIT_MISUSE, &format!("cannot handle {signal}: {error}"));
        }
    }
}

/// Forks and execs the agent in our group with our stdio and environment. Caught signals
/// return to their defaults at exec, and std resets the signal mask and SIGPIPE.
fn start_agent(program: &OsString, args: &[OsString]) -> std::io::Result<Child> {
    let mut command = Command::new(program);
    command.args(args);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let reaper = getpid();
        // SAFETY: between fork and exec the closure makes two raw syscalls (prctl, getppid),
        // both async-signal-safe; it allocates nothing and takes no locks.
        unsafe {
            command.pre_exec(move || {
                // Should the reaper itself be SIGKILLed, the agent follows it (its own
                // children then stay in the group, which the owner's drop still kills).
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                if getppid() != reaper {
                    return Err(std::io::Error::other("the agent reaper is gone"));
                }
                Ok(())
            });
        }
    }
    command.spawn()
}

/// One status line to the owner. Nobody to tell means the owner is gone.
fn report(owner: BorrowedFd<'_>, line: &str) {
    let mut text = line.replace('\n', " ");
    text.push('\n');
    let mut written = 0;
    let bytes = text.as_bytes();
    while written < bytes.len() {
        match nix::unistd::write(owner, &bytes[written..]) {
            Ok(n) => written += n,
            Err(Errno::EINTR) => {}
            Err(_) => kill_group(),
        }
    }
}

/// Points fds 0 and 1 at `/dev/null`.
fn detach_stdio() {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    for target in [0, 1] {
        // SAFETY: dup2 onto a standard fd we own; no Rust object owns fds 0 and 1 here.
        unsafe { libc::dup2(null.as_fd().as_raw_fd(), target) };
    }
}

/// SIGKILL to the whole group, the reaper included.
fn kill_group() -> ! {
    let _ = killpg(getpgrp(), Signal::SIGKILL);
    // Unreachable unless killpg failed; a plain exit still closes our pipes.
    std::process::exit(137);
}

/// SIGKILL to every other member of our group until none is left. Linux finds them in
/// `/proc`; elsewhere, and if members keep appearing past the deadline, the whole group goes,
/// the reaper included (the owner then sees "killed by SIGKILL" instead of the agent's exit).
fn sweep_rest_of_group() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let started = Instant::now();
        let group = getpgrp();
        let me = getpid();
        while started.elapsed() < SWEEP_DEADLINE {
            let members = live_members(group, me);
            if members.is_empty() {
                return;
            }
            for member in members {
                let _ = kill(member, Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    kill_group();
}

/// The processes of `group` other than `me` that are not zombies.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn live_members(group: Pid, me: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me.as_raw())
        .filter(|&pid| {
            u32::try_from(pid)
                .ok()
                .and_then(crate::util::process::proc_stat)
                .is_some_and(|stat| stat.pgrp == group.as_raw() && !stat.zombie)
        })
        .map(Pid::from_raw)
        .collect()
}

/// Exits the way the agent did: its exit code, or death by its signal when that signal
/// leaves no core dump (other signals become the shell's `128 + n`).
fn exit_like(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let Some(number) = status.signal() else {
        std::process::exit(1);
    };
    if let Ok(signal) = Signal::try_from(number)
        && matches!(
            signal,
            Signal::SIGKILL
                | Signal::SIGTERM
                | Signal::SIGINT
                | Signal::SIGHUP
                | Signal::SIGPIPE
                | Signal::SIGALRM
                | Signal::SIGUSR1
                | Signal::SIGUSR2
        )
    {
        if signal != Signal::SIGKILL {
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            // SAFETY: restoring the default disposition installs no handler.
            let _ = unsafe { sigaction(signal, &default) };
            let mut unblock = SigSet::empty();
            unblock.add(signal);
            let _ = unblock.thread_unblock();
        }
        let _ = kill(getpid(), signal);
    }
    std::process::exit(128 + number);
}

/// Tells stderr (the agent's stderr pipe, whose tail the owner keeps) and exits.
fn fail(code: i32, message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "agentprism {SUBCOMMAND}: {message}");
    std::process::exit(code);
}
