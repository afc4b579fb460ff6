//! The shim when what surrounds it ends: a killed daemon, an evicted session, a daemon that
//! dies after every initialize, a killed shim, a run that outlives its shim, a parent
//! process or a spawning thread that ends. Also one version reported by the shim and the
//! daemon, and the in-process mode that needs no daemon.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;

use super::{
    LOST, Shim, World, all_threads_stopped, bytes_waiting_at, connections_to, eventually,
    initialize_params, port_of, run_id_of, shim_binary, slow_script, test_daemon_binary,
};
use crate::support::context::{DEADLINE, process_gone};

/// Scenario 9: the daemon is killed while a request is on the wire: that request gets
/// -32603, never a replay or a hang, and the next request succeeds on a new daemon.
#[test]
fn a_killed_daemon_fails_the_call_in_flight_and_the_next_succeeds_on_a_new_one() {
    let world = World::new();
    let mut shim = world.shim();
    shim.initialize();
    // One answered request first: the shim sends nothing after `initialized` until that is
    // answered, so afterwards the one connection left is the session's GET stream, and the
    // next request is the only thing the shim sends.
    let warm = shim.request(6, "tools/list", json!({}));
    assert!(warm["result"]["tools"].is_array(), "{warm}");
    let first = world.pointer_pid();
    let port = port_of(&world.pointer().unwrap());
    eventually("the GET stream", || connections_to(port) == 1);
    // Freeze the daemon so the request is surely delivered, then kill it. SIGSTOP takes
    // effect thread by thread: until every thread is stopped the daemon could still answer.
    kill(Pid::from_raw(first), Signal::SIGSTOP).unwrap();
    eventually("every daemon thread stopped", || all_threads_stopped(first));
    shim.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    // The request's bytes wait in a daemon-side socket: it surely reached the daemon (a
    // count of connections alone could be some other short-lived one).
    eventually("the request's bytes at the daemon", || {
        bytes_waiting_at(port)
    });
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let lost = shim.response(&json!(7));
    assert_eq!(lost["error"]["code"], -32603, "{lost}");
    assert_eq!(lost["error"]["message"], LOST);
    let next = shim.request(8, "tools/list", json!({}));
    assert!(next["result"]["tools"].is_array(), "{next}");
    let second = world.pointer_pid();
    assert_ne!(first, second);
    assert!(process_gone(first));
}

/// Scenario 10: the daemon evicts the session (test hook): one recovery, and a resource
/// subscription made before still fires afterwards.
#[test]
fn an_evicted_session_recovers_once_and_keeps_its_subscription() {
    let world = World::with(|context| context.set("AGENTPRISM_TEST_HOOKS", "1"));
    let mut shim = Shim::start_with(&world.context, &[("AGENTPRISM_LOG", "info")]);
    shim.initialize();
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(1500)}),
    );
    let run_id = run_id_of(&ack);
    let uri = format!("workflow://runs/{run_id}/events");
    let subscribed = shim.request(2, "resources/subscribe", json!({"uri": uri}));
    assert!(subscribed["result"].is_object(), "{subscribed}");
    let pointer = world.pointer().unwrap();
    let session = current_session(&world, &shim);
    let evicted = post_hook(
        port_of(&pointer),
        &format!("/debug/evict?session={session}"),
    );
    assert!(evicted.starts_with("HTTP/1.1 2"), "{evicted}");
    // The hook only queues the eviction for the daemon's main loop: wait until it is done.
    let ping = json!({"jsonrpc": "2.0", "id": "probe", "method": "ping"});
    eventually("the daemon to forget the session", || {
        crate::daemon::mcp_post(port_of(&pointer), Some(&session), &ping).status == 404
    });
    // The next request (or the session's GET stream) meets the 404; the shim recovers once.
    let answer = shim.request(3, "ping", json!({}));
    assert!(answer["result"].is_object(), "{answer}");
    assert_eq!(
        shim.stderr().matches("recovering").count(),
        1,
        "{}",
        shim.stderr()
    );
    let updated = shim.receive("a resources/updated for the run", |m| {
        m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
    });
    assert_eq!(updated["params"]["uri"], uri);
    assert_eq!(world.pointer_pid(), pointer["pid"].as_i64().unwrap() as i32);
}

/// The shim's current session id, from its verbose stderr line.
fn current_session(_world: &World, shim: &Shim) -> String {
    let stderr = shim.stderr();
    stderr
        .lines()
        .rev()
        .find_map(|line| {
            let rest = line.strip_prefix("agentprism-workflow: session ")?;
            rest.split_whitespace().next().map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no session line in:\n{stderr}"))
}

/// A bare `POST path` to the daemon; the status line and the rest.
fn post_hook(port: u16, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut answer);
    answer
}

/// Scenario 11: a daemon that dies after every initialize makes the shim give up with exit
/// code 1 after at most 6 recoveries.
#[test]
fn a_daemon_dying_after_each_initialize_ends_the_shim_after_six_recoveries() {
    let world = World::with(|context| {
        context.set(
            "AGENTPRISM_DAEMON_BIN",
            test_daemon_binary().to_string_lossy(),
        )
    });
    let mut shim = Shim::start_with(
        &world.context,
        &[("SHIM_TEST_DAEMON_DIE_AFTER_INITIALIZED", "1")],
    );
    shim.initialize();
    shim.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let status = shim
        .wait_exit(DEADLINE)
        .unwrap_or_else(|| panic!("the shim kept going; stderr:\n{}", shim.stderr()));
    let stderr = shim.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let recoveries = stderr.matches("recovering:").count();
    assert!(
        (1..=6).contains(&recoveries),
        "{recoveries} recoveries:\n{stderr}"
    );
    assert!(stderr.contains("giving up after 6 recoveries"), "{stderr}");
}

/// Scenario 4: a shim killed with SIGKILL leaves a session without connections, which the
/// daemon evicts after the session TTL; the background run it started completes.
#[test]
fn a_killed_shims_session_is_evicted_and_its_run_completes() {
    let world = World::with(|context| {
        context
            .set("AGENTPRISM_SESSION_TTL_MS", "1000")
            .set("AGENTPRISM_DAEMON_TICK_MS", "100")
    });
    let mut shim = world.shim();
    shim.initialize();
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(800)}),
    );
    let run_id = run_id_of(&ack);
    let port = port_of(&world.pointer().unwrap());
    killpg(Pid::from_raw(shim.pid()), Signal::SIGKILL).unwrap();
    eventually("the session to be evicted", || {
        daemon_log(&world).contains("evicted session")
    });
    let _ = port;
    let mut second = world.shim();
    second.initialize();
    wait_completed(&mut second, &run_id);
}

fn daemon_log(world: &World) -> String {
    std::fs::read_to_string(world.context.state().join("logs/daemon.log")).unwrap_or_default()
}

/// Polls `status` through `shim` until the run is completed, then checks its result.
fn wait_completed(shim: &mut Shim, run_id: &str) {
    let started = Instant::now();
    let mut id = 100;
    loop {
        id += 1;
        let status = shim.call_workflow(id, json!({"action": "status", "runId": run_id}));
        let state = status["structuredContent"]["state"]
            .as_str()
            .or_else(|| status["structuredContent"]["status"].as_str())
            .unwrap_or_default()
            .to_owned();
        if state == "completed" {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "run {run_id} not completed: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    id += 1;
    let result = shim.call_workflow(id, json!({"action": "result", "runId": run_id}));
    let text = result.to_string();
    assert!(text.contains("done"), "{result:#}");
}

/// The shim's promise to a host: a workflow started through one shim that is then killed
/// with SIGKILL completes, and a second shim in a new host session reads its status and
/// result.
#[test]
fn a_run_outlives_its_shim_and_a_new_session_reads_its_result() {
    let world = World::new();
    let mut first = world.shim();
    first.initialize();
    let ack = first.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(500)}),
    );
    let run_id = run_id_of(&ack);
    let daemon = world.pointer_pid();
    killpg(Pid::from_raw(first.pid()), Signal::SIGKILL).unwrap();
    let _ = first.wait_exit(DEADLINE);
    let mut second = world.shim();
    second.initialize();
    wait_completed(&mut second, &run_id);
    assert_eq!(world.pointer_pid(), daemon, "the same daemon ran it");
}

/// `--version` prints the package version, as `agentprism --version` does.
#[test]
fn the_shim_and_agentprism_report_one_version() {
    let shim = Command::new(shim_binary())
        .arg("--version")
        .output()
        .unwrap();
    let main = Command::new(env!("CARGO_BIN_EXE_agentprism"))
        .arg("--version")
        .output()
        .unwrap();
    let version = |out: &[u8]| {
        String::from_utf8_lossy(out)
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(version(&shim.stdout), version(&main.stdout));
    assert_eq!(version(&shim.stdout), env!("CARGO_PKG_VERSION"));
}

/// `--in-process` runs a private single-process server (`agentprism serve --stdio`) instead of
/// the daemon: the workflow tool answers, runs complete, and no daemon record appears.
#[test]
fn in_process_mode_serves_without_a_daemon() {
    let world = World::new();
    let mut shim = Shim::launch(&world.context, &[], &["--in-process"]);
    let init = shim.request(1, "initialize", initialize_params());
    assert_eq!(init["result"]["serverInfo"]["name"], "agentprism", "{init}");
    shim.write(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    ));
    let script = "export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn (await agent('hi')) && 'done';";
    // No projectDir: the in-process server belongs to the project it was started in.
    let ack = shim.call_workflow(2, json!({"action": "run", "script": script}));
    let run_id = run_id_of(&ack);
    wait_completed(&mut shim, &run_id);
    assert!(
        !world.daemons_dir().join("instances").exists()
            || std::fs::read_dir(world.daemons_dir().join("instances"))
                .map(|d| d.count())
                .unwrap_or(0)
                == 0,
        "--in-process must not start a daemon"
    );
}

/// A host that spawns the shim from a worker thread and then retires that thread (Codex
/// does after about 10 s idle) keeps its shim. `PR_SET_PDEATHSIG` would fire on the thread's
/// exit and end the shim, so the next call would fail with "Transport closed".
#[test]
fn a_shim_outlives_the_thread_that_spawned_it() {
    let world = World::new();
    let mut shim = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut shim = world.shim();
                shim.initialize();
                shim
            })
            .join()
            .expect("the spawning thread")
    });
    // The spawning thread has exited. The scenario is a call made a while later, past the
    // proxy's once-a-second parent check too.
    std::thread::sleep(Duration::from_millis(1500));
    let answer = shim.request(1, "tools/list", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    assert!(
        shim.wait_exit(Duration::ZERO).is_none(),
        "the shim exited; stderr:\n{}",
        shim.stderr()
    );
}

/// The other half of the rule above: the shim still ends with its host *process*, even while the
/// host's stdin pipe stays open (here the test holds it, so EOF cannot be what ends it).
#[test]
fn a_shim_ends_when_its_parent_process_dies() {
    let world = World::new();
    // `sh` is the host: it starts the shim with the test's stdin pipe (through fd 3: dash
    // gives a background job /dev/null even for an explicit `<&0`), prints its pid and waits.
    let mut host = Command::new("sh")
        .args(["-c", "exec 3<&0; \"$0\" <&3 3<&- & echo $!; wait"])
        .arg(shim_binary())
        .env_clear()
        .envs(&world.context.env)
        .current_dir(world.context.project())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let group = Pid::from_raw(host.id() as i32);
    let _cleanup = GroupGuard(group);
    let mut stdin = host.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(host.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the shim's pid");
    let shim: i32 = line.trim().parse().expect("a pid");
    // The shim answers, so it is up and watching its parent.
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()})
    )
    .expect("write to the shim");
    line.clear();
    stdout.read_line(&mut line).expect("the initialize answer");
    assert!(line.contains("\"result\""), "{line}");

    kill(group, Signal::SIGKILL).expect("kill the host");
    let _ = host.wait();
    let started = Instant::now();
    while !process_gone(shim) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the shim outlived its parent process by 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
}

/// Kills a process group when dropped, so a failing test leaves no shim behind.
struct GroupGuard(Pid);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}
