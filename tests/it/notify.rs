//! The daemon under a service manager's protocols, with real processes and sockets
//! (daemon.md 2, scenarios 25 and 26): the sd-notify datagrams a `--managed=systemd` daemon
//! sends to a harness socket standing in for systemd, the silence of daemons that are not
//! managed, and socket activation through the real `systemd-socket-activate`, which listens,
//! then execs the daemon on its own pid with the socket as fd 3. Waits poll with deadlines or
//! block on a socket with a timeout; nothing sleeps to synchronise.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentprism::discovery::healthz::{Challenge, verify_identity};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;

use crate::daemon::{
    HEADER, World, healthz, mcp_post, open_session, start_run_over_http, wait_for,
};
use crate::support::context::{DEADLINE, mock_agent_binary, process_gone};

/// The harness end of `NOTIFY_SOCKET`: a datagram socket in the test's temporary folder.
struct NotifyHarness {
    path: PathBuf,
    socket: std::os::unix::net::UnixDatagram,
}

impl NotifyHarness {
    fn new(world: &World, name: &str) -> NotifyHarness {
        let path = world.ctx.path(name);
        let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("bind notify socket");
        NotifyHarness { path, socket }
    }

    /// The next datagram, waiting at most `deadline` (a blocking receive, not a sleep).
    fn next(&self, deadline: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(deadline)).unwrap();
        let mut buffer = [0u8; 4096];
        match self.socket.recv(&mut buffer) {
            Ok(n) => Some(String::from_utf8_lossy(&buffer[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("recv on the notify socket: {e}"),
        }
    }

    /// Everything already queued: a datagram is queued by the time its `send` returns, so
    /// after the sender exited this is all it ever sent.
    fn queued(&self) -> Vec<String> {
        self.socket.set_nonblocking(true).unwrap();
        let mut messages = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buffer) {
            messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
        self.socket.set_nonblocking(false).unwrap();
        messages
    }
}

/// `agentprism daemon run --managed=systemd <extra>` as systemd would start it: through a
/// shell that sets `SYSTEMD_EXEC_PID` to its own pid and then execs the daemon on that pid.
fn spawn_managed(
    world: &World,
    harness: &NotifyHarness,
    watchdog_usec: Option<u64>,
    extra: &[&str],
) -> std::process::Child {
    let mut args = vec!["--managed=systemd"];
    args.extend_from_slice(extra);
    spawn_with_notify_socket(world, harness, watchdog_usec, ExecPid::Daemon, &args)
}

/// What `SYSTEMD_EXEC_PID` names in [`spawn_with_notify_socket`].
#[derive(Clone, Copy, Debug)]
enum ExecPid {
    /// The daemon itself, as when systemd started it.
    Daemon,
    /// pid 1: systemd started some other process, which passed its environment on to us.
    Other,
}

/// `agentprism daemon run <args>` with `NOTIFY_SOCKET` (and `WATCHDOG_USEC`) aimed at the
/// harness, through a shell that sets `SYSTEMD_EXEC_PID` and then execs the daemon on its
/// own pid.
fn spawn_with_notify_socket(
    world: &World,
    harness: &NotifyHarness,
    watchdog_usec: Option<u64>,
    exec_pid: ExecPid,
    args: &[&str],
) -> std::process::Child {
    let exec_pid = match exec_pid {
        ExecPid::Daemon => "$$",
        ExecPid::Other => "1",
    };
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "export SYSTEMD_EXEC_PID={exec_pid}; exec \"$0\" daemon run \"$@\""
        ))
        .arg(crate::support::context::agentprism_binary())
        .args(args)
        .env_clear()
        .envs(&world.ctx.env)
        .env("NOTIFY_SOCKET", &harness.path)
        .current_dir(world.ctx.project())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(world.ctx.path("managed-daemon.log"))
                .unwrap(),
        );
    if let Some(usec) = watchdog_usec {
        command.env("WATCHDOG_USEC", usec.to_string());
    }
    command.spawn().expect("spawn the managed daemon")
}

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    wait_for("the daemon to exit", DEADLINE, || child.try_wait().unwrap())
}

/// Scenario 25: READY only once the pointer names the daemon (read the moment the datagram
/// arrives), WATCHDOG pings at most WATCHDOG_USEC/2 apart on average and never a whole period
/// apart, STOPPING on SIGTERM and nothing after it; a managed daemon that finds one running
/// still reports ready; and a daemon self-spawned by `daemon start` from an environment that
/// leaked `NOTIFY_SOCKET` sends nothing.
#[test]
fn a_systemd_managed_daemon_notifies_ready_watchdog_and_stopping() {
    const WATCHDOG_USEC: u64 = 1_000_000;
    const PINGS: u32 = 5;
    let world = World::new();
    let harness = NotifyHarness::new(&world, "notify.sock");
    let mut daemon = spawn_managed(&world, &harness, Some(WATCHDOG_USEC), &[]);
    let pid = daemon.id();

    let ready = harness
        .next(DEADLINE)
        .expect("READY=1 from the managed daemon");
    // Read at once: the pointer must already name the daemon when READY arrives (the daemon
    // sends READY only after its pointer CAS, and nothing removes the pointer before exit).
    let record = world.pointer().expect("a pointer before READY=1");
    assert_eq!(record.pid, pid);
    assert_eq!(
        ready,
        format!("READY=1\nSTATUS=current: 127.0.0.1:{}\n", record.port)
    );

    // The pings come every WATCHDOG_USEC/2 (each after a /healthz self-probe). Judged on the
    // average so one late tick on a loaded machine does not fail the test, while a daemon
    // pinging at the full period (twice the allowed interval) always does; no single gap may
    // reach the period, after which systemd would kill the service.
    let period = Duration::from_micros(WATCHDOG_USEC);
    let first = harness
        .next(period)
        .expect("a first WATCHDOG=1 within WATCHDOG_USEC");
    assert_eq!(first, "WATCHDOG=1\n");
    let started = Instant::now();
    let mut last = started;
    for _ in 0..PINGS {
        let ping = harness
            .next(period)
            .expect("a WATCHDOG=1 within WATCHDOG_USEC");
        assert_eq!(ping, "WATCHDOG=1\n");
        assert!(
            last.elapsed() < period,
            "pings {:?} apart, WATCHDOG_USEC is {period:?}",
            last.elapsed()
        );
        last = Instant::now();
    }
    let average = started.elapsed() / PINGS;
    assert!(
        average <= period / 2 + period / 4,
        "pings {average:?} apart on average; WATCHDOG_USEC/2 is {:?}",
        period / 2
    );

    // A second managed start of the same family finds this daemon and still says READY, so
    // `systemctl start` succeeds; then it exits 0.
    let second_harness = NotifyHarness::new(&world, "notify-2.sock");
    let mut second = spawn_managed(&world, &second_harness, None, &[]);
    assert!(wait_exit(&mut second).success());
    assert_eq!(
        second_harness.queued(),
        [format!(
            "READY=1\nSTATUS=already running: pid {pid} at 127.0.0.1:{}\n",
            record.port
        )]
    );

    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    assert!(wait_exit(&mut daemon).success());
    let after: Vec<String> = harness
        .queued()
        .into_iter()
        .filter(|message| message != "WATCHDOG=1\n")
        .collect();
    assert_eq!(after, ["STOPPING=1\n"]);
    assert!(world.pointer().is_none());

    // Self-spawned through `daemon start` from a shell whose environment leaked the
    // variables: the daemon is not managed and must stay silent.
    let leaked = NotifyHarness::new(&world, "leaked.sock");
    let started = world.run_with(
        &[
            ("NOTIFY_SOCKET", leaked.path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
        &["daemon", "start"],
    );
    assert_eq!(started.code(), 0, "{}", started.stderr);
    let spawned = world.pointer().expect("a self-spawned daemon");
    let stopped = world.run(&["daemon", "stop"]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert!(process_gone(spawned.pid as i32));
    assert!(leaked.queued().is_empty());
}

/// Scenario 25, the silent half, without the spawner's help (`daemon start` strips the
/// variables itself): a daemon that sees `NOTIFY_SOCKET` and `WATCHDOG_USEC` meant for it but
/// was not started with `--managed=systemd`, and a `--managed=systemd` daemon whose
/// `SYSTEMD_EXEC_PID` names another process, both run, serve and stop without a datagram.
#[test]
fn daemons_not_started_by_systemd_send_nothing_to_a_leaked_notify_socket() {
    let cases: [(&str, ExecPid, &[&str]); 2] = [
        ("unmanaged", ExecPid::Daemon, &[]),
        ("another exec pid", ExecPid::Other, &["--managed=systemd"]),
    ];
    for (case, exec_pid, args) in cases {
        let world = World::new();
        let harness = NotifyHarness::new(&world, "notify.sock");
        let mut daemon = spawn_with_notify_socket(&world, &harness, Some(200_000), exec_pid, args);
        let record = crate::daemon::wait_ready(&world);
        assert_eq!(record.pid, daemon.id(), "{case}");
        // Past several watchdog periods of serving, proven by answered requests rather than
        // by waiting: open a session and list the tools.
        let session = open_session(record.port);
        let tools = mcp_post(
            record.port,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        );
        assert_eq!(tools.status, 200, "{case}");
        kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
        assert!(wait_exit(&mut daemon).success(), "{case}");
        // Every datagram the daemon ever sent is queued by now.
        assert_eq!(harness.queued(), Vec::<String>::new(), "{case}");
    }
}

/// `systemd-socket-activate` from PATH or /usr/bin. Missing is a failure, never a skip:
/// scenario 26 must run wherever the suite runs (`.ci/run` checks for it).
fn socket_activate_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("systemd-socket-activate"))
        .find(|candidate| candidate.is_file());
    on_path.unwrap_or_else(|| {
        panic!(
            "systemd-socket-activate is not installed, so socket activation (daemon.md \
             scenario 26) cannot be tested: install the Debian package `systemd`"
        )
    })
}

/// A process group started by a test, killed when the test is done with it.
struct Group {
    child: std::process::Child,
}

impl Group {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        wait_exit(&mut self.child)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// `systemd-socket-activate -l <listen> [-E NAME]... agentprism daemon run`, with the world's
/// environment (the tool passes on only PATH, HOME, TERM and the `-E` names) plus `extra`.
/// Returns once the tool listens; the daemon is exec'd on the first connection, on the same
/// pid. Its stderr (the tool's, then the daemon's) goes to `<name>.log`.
fn socket_activate(
    world: &World,
    name: &str,
    listen: &str,
    extra: &[(&str, &str)],
) -> Result<Group, String> {
    let log = world.ctx.path(&format!("{name}.log"));
    let mut command = std::process::Command::new(socket_activate_binary());
    command.arg(format!("--listen={listen}"));
    for key in world
        .ctx
        .env
        .keys()
        .map(String::as_str)
        .chain(extra.iter().map(|(k, _)| *k))
    {
        command.arg(format!("--setenv={key}"));
    }
    command
        .arg(crate::support::context::agentprism_binary())
        .args(["daemon", "run"])
        .env_clear()
        .envs(&world.ctx.env)
        .envs(extra.iter().copied())
        .current_dir(world.ctx.project())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut group = Group {
        child: command.spawn().expect("spawn systemd-socket-activate"),
    };
    let listening = format!("Listening on {listen} as 3.");
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&listening) {
            return Ok(group);
        }
        if let Some(status) = group.child.try_wait().unwrap() {
            return Err(format!(
                "systemd-socket-activate exited with {status}:\n{text}"
            ));
        }
        assert!(
            started.elapsed() < DEADLINE,
            "systemd-socket-activate never listened on {listen}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port. systemd 252's `systemd-socket-activate` rejects port 0, so the test
/// picks one; if another process takes it before the tool binds it, the caller retries.
fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

/// Whether fd `fd` of process `pid` is a socket marked close-on-exec (`/proc/<pid>/fdinfo`
/// shows the open flags in octal; O_CLOEXEC is 0o2000000).
fn socket_fd_is_cloexec(pid: u32, fd: u32) -> bool {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
    assert!(link.to_string_lossy().starts_with("socket:"), "{link:?}");
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
    let flags = info
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .map(|flags| u32::from_str_radix(flags.trim(), 8).unwrap())
        .unwrap_or_else(|| panic!("no flags in {info}"));
    flags & 0o2000000 != 0
}

/// Scenario 26: under `systemd-socket-activate` (no systemd as PID 1) the daemon serves the
/// socket it was passed: /healthz with a valid proof and an MCP session on that port, the
/// pointer naming that port, fd 3 close-on-exec; its agents see none of `LISTEN_*`,
/// `NOTIFY_SOCKET`, `WATCHDOG_*`; it is not managed, so a leaked notify socket hears nothing;
/// SIGTERM removes its pointer and record and closes the port.
#[test]
fn a_socket_activated_daemon_serves_the_passed_listener() {
    // The mock agent, behind a shell that records the environment it was started with.
    let world = World::with(|ctx| {
        let backends = json!({"mock": {
            "command": "sh",
            "args": ["-c", "env > \"$0\"; exec \"$1\"", ctx.path("agent-env.txt"),
                     mock_agent_binary()],
        }});
        ctx.set("AGENTPRISM_BACKENDS", backends.to_string())
    });
    let agent_env = world.ctx.path("agent-env.txt");
    let harness = NotifyHarness::new(&world, "leaked.sock");
    let leaked = [
        ("NOTIFY_SOCKET", harness.path.to_str().unwrap()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let (mut group, port) = (0..5)
        .find_map(|_| {
            let port = free_loopback_port();
            socket_activate(&world, "activate", &format!("127.0.0.1:{port}"), &leaked)
                .ok()
                .map(|group| (group, port))
        })
        .expect("systemd-socket-activate could not listen on a free port in 5 tries");

    // The first connection makes the tool exec the daemon, which answers it.
    let challenge = Challenge::new(port);
    let reply = healthz(port, &challenge.nonce);
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["pid"], group.pid(), "{body}");
    assert_eq!(body["port"], port, "{body}");
    let record = wait_for("the activated daemon's pointer", DEADLINE, || {
        world.pointer().filter(|record| record.pid == group.pid())
    });
    assert_eq!(record.port, port);
    assert_eq!(record.url, format!("http://127.0.0.1:{port}/mcp"));
    verify_identity(&record, &body, &world.key(), &challenge.nonce).expect("a valid proof");
    assert!(
        socket_fd_is_cloexec(group.pid(), 3),
        "the passed socket is inheritable"
    );

    // MCP on the passed port, and a run whose agent records its environment.
    let session = open_session(port);
    let script = format!("{HEADER}const a = await agent('hello');\nreturn {{a}};\n");
    let run_id = start_run_over_http(port, &session, &world.ctx.project(), &script);
    let done = wait_for("the run to finish", DEADLINE, || {
        let status = world.ctx.status(&run_id);
        (status["status"] != "running").then_some(status)
    });
    assert_eq!(done["status"], "completed", "{done:#}");
    let seen = std::fs::read_to_string(&agent_env).expect("the agent recorded its environment");
    assert!(
        seen.lines()
            .any(|line| line.starts_with("AGENTPRISM_PERSISTENCE_ROOT=")),
        "{seen}"
    );
    for line in seen.lines() {
        let name = line.split('=').next().unwrap_or_default();
        assert!(
            !(name == "NOTIFY_SOCKET"
                || name.starts_with("LISTEN_")
                || name.starts_with("WATCHDOG_")),
            "the agent inherited {line}"
        );
    }

    kill(Pid::from_raw(group.pid() as i32), Signal::SIGTERM).unwrap();
    let status = group.wait_exit();
    assert!(
        status.success(),
        "{status}: {}",
        read_log(&world, "activate")
    );
    assert!(world.pointer().is_none());
    assert!(world.instances().is_empty());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the port still accepts connections"
    );
    assert_eq!(harness.queued(), Vec::<String>::new());
}

/// Scenario 26, refused: a passed socket that is not a loopback TCP listener (here a Unix
/// stream socket) stops the daemon with an error naming `LISTEN_FDS`, before it writes any
/// record or pointer.
#[test]
fn a_socket_activated_daemon_refuses_a_socket_that_is_not_loopback_tcp() {
    let world = World::new();
    let socket = world.ctx.path("activated.sock");
    let mut group = socket_activate(&world, "activate", socket.to_str().unwrap(), &[])
        .unwrap_or_else(|error| panic!("{error}"));
    // The connection execs the daemon, which refuses fd 3 and exits 1.
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let status = group.wait_exit();
    let log = read_log(&world, "activate");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("refusing the socket passed by socket activation: LISTEN_FDS names fd 3"),
        "{log}"
    );
    assert!(log.contains("not a TCP socket"), "{log}");
    assert!(world.pointer().is_none());
    assert!(world.instances().is_empty());
}

fn read_log(world: &World, name: &str) -> String {
    std::fs::read_to_string(world.ctx.path(&format!("{name}.log"))).unwrap_or_default()
}

/// Scenario 25, the lame-duck half: a managed daemon that is superseded reports its drain on
/// `STATUS=` and sends no `STOPPING=1` while it drains (systemd would start its stop timer);
/// `STOPPING=1` comes only when it really exits, 0, once its run is done.
#[test]
fn a_superseded_managed_daemon_reports_its_drain_and_stops_only_at_exit() {
    let world = World::with(|ctx| ctx.set("AGENTPRISM_TEST_VERSION", "1.0.0"));
    let harness = NotifyHarness::new(&world, "notify.sock");
    let mut old = spawn_managed(&world, &harness, None, &[]);
    let ready = harness.next(DEADLINE).expect("READY=1");
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    let v1 = world.pointer().expect("a pointer");

    let release = world.ctx.path("release");
    let session = open_session(v1.port);
    let script = format!(
        "{HEADER}const a = await agent('hold\\n@mock wait_file {}');\nreturn {{a}};\n",
        release.display()
    );
    start_run_over_http(v1.port, &session, &world.ctx.project(), &script);

    let mut successor = world.ctx.command(&["daemon", "run", "--supersede"]);
    successor
        .env("AGENTPRISM_TEST_VERSION", "2.0.0")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut successor = successor.spawn().expect("spawn the successor");
    let drain = harness.next(DEADLINE).expect("a STATUS while draining");
    assert_eq!(drain, "STATUS=lame duck: 1 runs\n");
    assert_ne!(world.pointer().expect("a pointer").pid, v1.pid);
    assert!(harness.queued().is_empty(), "nothing else while draining");

    std::fs::write(&release, "go").expect("release the run");
    let status = wait_exit(&mut old);
    assert!(status.success(), "{status:?}");
    assert_eq!(
        harness.queued(),
        ["STATUS=lame duck: 0 runs\n", "STOPPING=1\n"]
    );
    let _ = killpg(Pid::from_raw(successor.id() as i32), Signal::SIGKILL);
    let _ = successor.wait();
}
