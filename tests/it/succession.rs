//! Succession end to end (daemon.md 1.8 and section 3, scenarios 14 to 17 and the half of 21
//! about supersession): real shims of two versions driving real daemons. The version a process
//! claims comes from `AGENTPRISM_TEST_VERSION`, which debug builds honour and which is left out
//! of the family fingerprint, so an "old" and a "new" shim share one family. A run is held on
//! the old daemon by the mock agent's `@mock wait_file`, so the test decides when it ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentprism::discovery::record::{DaemonState, read_own_record, write_record};
use agentprism::discovery::{DaemonRecord, RunControlKey, healthz_proof};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{healthz, mcp_post, wait_for};
use crate::shim::{Shim, World, initialize_params, run_id_of};
use crate::support::context::{DEADLINE, process_gone};

const V1: &str = "1.0.0";
const V2: &str = "2.0.0";
const V3: &str = "3.0.0";

fn shim_of(world: &World, version: &str) -> Shim {
    Shim::start_with(
        &world.context,
        &[
            ("AGENTPRISM_TEST_VERSION", version),
            ("AGENTPRISM_LOG", "1"),
        ],
    )
}

/// A workflow whose one agent call lasts until `release` exists.
fn held_script(release: &Path) -> String {
    format!(
        "export const meta = {{ name: 'held', description: 'd', model: 'mock' }};\nconst a = \
         await agent('hold\\n@mock wait_file {}');\nreturn {{ done: true }};\n",
        release.display()
    )
}

/// The family pointer as a record.
fn pointer(world: &World) -> Option<DaemonRecord> {
    serde_json::from_value(world.pointer()?).ok()
}

fn instance_record(world: &World, pid: u32) -> Option<DaemonRecord> {
    read_own_record(&world.daemons_dir().join(format!("instances/{pid}.json")))
}

/// Starts a held run through `shim`; returns its id.
fn start_held_run(world: &World, shim: &mut Shim, release: &Path) -> String {
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(),
               "script": held_script(release)}),
    );
    run_id_of(&ack)
}

fn run_status(world: &World, run_id: &str) -> Value {
    world.context.status(run_id)
}

fn initialize_message() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params()})
}

/// Scenario 14: a shim older than the running daemon adopts it; nothing is spawned.
#[test]
fn an_older_shim_adopts_a_newer_daemon() {
    let world = World::new();
    let mut newer = shim_of(&world, V2);
    newer.initialize();
    let daemon = pointer(&world).expect("a pointer");
    assert_eq!(daemon.version, V2);

    let mut older = shim_of(&world, V1);
    older.initialize();
    let tools = older.request(1, "tools/list", json!({}));
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(pointer(&world).expect("a pointer").pid, daemon.pid);
    assert_eq!(world.daemon_processes(), vec![daemon.pid as i32]);
    assert_eq!(healthz(daemon.port, "n").json()["sessions"], 2);
}

/// Scenarios 15 and 16: a newer shim supersedes the running daemon, which turns lame duck
/// (503 to new sessions, its idle session handed over), finishes its run and exits at once;
/// once superseded it never serves new work again, even after its successor is gone.
#[test]
fn a_newer_shim_supersedes_and_the_lame_duck_drains() {
    let world = World::new();
    let release = world.context.path("release");
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let run_id = start_held_run(&world, &mut old_shim, &release);
    let v1 = pointer(&world).expect("a pointer");
    assert_eq!(v1.version, V1);
    assert_eq!(healthz(v1.port, "n").json()["activeRuns"], 1);

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let tools = new_shim.request(2, "tools/list", json!({}));
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    let v2 = pointer(&world).expect("a pointer");
    assert_eq!(v2.version, V2);
    assert_ne!(v2.pid, v1.pid);
    assert_ne!(v2.port, v1.port, "the successor must not take the old port");

    // v1 is a lame duck: it says so, records it, and refuses new sessions and stateless work.
    let health = wait_for("v1 to turn lame duck", DEADLINE, || {
        let health = healthz(v1.port, "n").json();
        (health["lameDuck"] == true).then_some(health)
    });
    assert_eq!(health["state"], "lame-duck");
    assert_eq!(health["supersededBy"], v2.instance_id.as_str());
    // The record follows within a turn of v1's main loop (the lame-duck flag is set first, by
    // the control handler, so new work is refused at once).
    let record = wait_for("v1's record to say superseded", DEADLINE, || {
        instance_record(&world, v1.pid).filter(|r| r.state == DaemonState::Superseded)
    });
    assert_eq!(
        record.superseded_by.as_deref(),
        Some(v2.instance_id.as_str())
    );
    let refused = mcp_post(v1.port, None, &initialize_message());
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("agentprism-lame-duck"), Some("1"));
    let stateless = mcp_post(
        v1.port,
        None,
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
    );
    assert_eq!(stateless.status, 503);

    // The old shim's idle session was closed; its next request is served by v2.
    wait_for("v1 to hand its session over", DEADLINE, || {
        (healthz(v1.port, "n").json()["sessions"] == 0).then_some(())
    });
    let answer = old_shim.request(3, "tools/list", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        old_shim
            .stderr()
            .contains(&format!("recovered on daemon pid {}", v2.pid)),
        "{}",
        old_shim.stderr()
    );
    // `daemon status` shows v1 draining, since when, for whom and what it still runs.
    let status = world.context.run(&["daemon", "status", "--json"]);
    let listed = status.json();
    let draining = listed["daemons"]
        .as_array()
        .and_then(|daemons| daemons.iter().find(|d| d["pid"] == v1.pid))
        .unwrap_or_else(|| panic!("v1 not listed: {listed:#}"));
    assert_eq!(draining["role"], "draining", "{draining:#}");
    assert_eq!(draining["drain"]["successor"], v2.instance_id.as_str());
    assert_eq!(draining["drain"]["ownedRuns"], json!([run_id]));
    assert!(draining["drain"]["since"].is_string());
    // The run is still v1's.
    assert_eq!(run_status(&world, &run_id)["status"], "running");
    assert_eq!(healthz(v1.port, "n").json()["activeRuns"], 1);

    // Scenario 16: the successor goes away; v1 stays a lame duck and never repoints.
    drop(old_shim);
    drop(new_shim);
    kill(Pid::from_raw(v2.pid as i32), Signal::SIGTERM).expect("SIGTERM v2");
    wait_for("v2 to exit", DEADLINE, || {
        process_gone(v2.pid as i32).then_some(())
    });
    assert!(pointer(&world).is_none(), "v2 clears the pointer it owns");
    let health = healthz(v1.port, "n").json();
    assert_eq!(health["lameDuck"], true, "{health}");
    assert_eq!(mcp_post(v1.port, None, &initialize_message()).status, 503);
    assert!(
        pointer(&world).is_none(),
        "a lame duck never writes the pointer"
    );

    // The next shim starts a new daemon rather than going back to v1.
    let mut third = shim_of(&world, V3);
    third.initialize();
    let v3 = pointer(&world).expect("a pointer");
    assert_eq!(v3.version, V3);
    assert!(v3.pid != v1.pid && v3.pid != v2.pid);
    assert_eq!(healthz(v1.port, "n").json()["lameDuck"], true);

    // The run ends on v1, which then exits at once (its idle TTL is the default 15 min).
    std::fs::write(&release, "go").expect("release the run");
    wait_for("v1 to exit after its run", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
    assert_eq!(run_status(&world, &run_id)["status"], "completed");
    assert!(
        instance_record(&world, v1.pid).is_none(),
        "v1 removed its record"
    );
    assert_eq!(pointer(&world).expect("v3 still current").pid, v3.pid);
}

/// A successor killed during the drain never takes its predecessor down: the lame duck
/// finishes its run, and the next shim starts a fresh daemon.
#[test]
fn a_successor_killed_during_the_drain_leaves_the_predecessor_finishing() {
    let (world, run_id, v1, new_shim) = run_held_by_a_lame_duck();
    let release = world.context.path("release");
    let v2 = pointer(&world).expect("a pointer");
    assert_eq!(v2.version, V2);
    drop(new_shim);
    kill(Pid::from_raw(v2.pid as i32), Signal::SIGKILL).expect("SIGKILL v2");
    wait_for("v2 to die", DEADLINE, || {
        process_gone(v2.pid as i32).then_some(())
    });
    assert!(
        !process_gone(v1.pid as i32),
        "v1 survives its successor's crash"
    );
    assert_eq!(run_status(&world, &run_id)["status"], "running");

    let mut next = shim_of(&world, V2);
    next.initialize();
    let fresh = pointer(&world).expect("a pointer");
    assert!(fresh.pid != v1.pid && fresh.pid != v2.pid);

    std::fs::write(&release, "go").expect("release the run");
    wait_for("v1 to exit after its run", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
    assert_eq!(run_status(&world, &run_id)["status"], "completed");
}

/// Scenario 21, second half: with an unusable run-control key nothing can prove a successor,
/// so a newer shim adopts the older daemon instead of superseding it.
#[test]
fn a_corrupt_key_means_no_supersession() {
    let world = World::new();
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let v1 = pointer(&world).expect("a pointer");
    std::fs::write(
        world.daemons_dir().join("run-control-key.json"),
        "{not json",
    )
    .expect("corrupt the key");

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let answer = new_shim.request(1, "tools/list", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(pointer(&world).expect("a pointer").pid, v1.pid);
    assert_eq!(world.daemon_processes(), vec![v1.pid as i32]);
    assert_eq!(healthz(v1.port, "n").json()["lameDuck"], false);
    assert!(
        new_shim.stderr().contains("cannot be superseded"),
        "{}",
        new_shim.stderr()
    );
}

/// A stand-in for an older daemon of ours without a control plane (no `controlUrl`): it
/// answers `/healthz` with a valid proof and the counters the test sets, and takes MCP
/// sessions. Its record and pointer name the test process itself, so it is "alive" exactly
/// as long as the test; both files are removed when it is dropped.
struct OldDaemon {
    record: DaemonRecord,
    active_runs: Arc<AtomicU64>,
    sessions: Arc<AtomicU64>,
    files: Vec<PathBuf>,
}

impl OldDaemon {
    fn start(world: &World, version: &str) -> OldDaemon {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let fingerprint = agentprism::discovery::fingerprint_of(
            world.context.env.iter().map(|(k, v)| (k.into(), v.into())),
        );
        let mut record = DaemonRecord::for_this_process(
            version,
            &uuid::Uuid::new_v4().to_string(),
            port,
            &fingerprint,
            "",
        );
        record.control_protocol = 0;
        let dir = world.daemons_dir();
        std::fs::create_dir_all(dir.join("instances")).expect("daemons dir");
        let key = RunControlKey::load_or_create(&agentprism::discovery::Paths::new(
            world.context.state(),
        ))
        .expect("key");
        let files = vec![
            dir.join(format!("instances/{}.json", record.pid)),
            dir.join(format!("{fingerprint}.json")),
        ];
        for file in &files {
            write_record(file, &record).expect("write record");
        }
        let active_runs = Arc::new(AtomicU64::new(0));
        let sessions = Arc::new(AtomicU64::new(0));
        let (counters, identity) = ((active_runs.clone(), sessions.clone()), record.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve_old(stream, &identity, &key, &counters.0, &counters.1);
            }
        });
        OldDaemon {
            record,
            active_runs,
            sessions,
            files,
        }
    }
}

impl Drop for OldDaemon {
    fn drop(&mut self) {
        for file in &self.files {
            if read_own_record(file).is_some_and(|r| r.instance_id == self.record.instance_id) {
                let _ = std::fs::remove_file(file);
            }
        }
    }
}

/// One HTTP/1.1 exchange of the stand-in daemon.
fn serve_old(
    mut stream: TcpStream,
    record: &DaemonRecord,
    key: &RunControlKey,
    active_runs: &AtomicU64,
    sessions: &AtomicU64,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (status, headers, answer) = if let Some(query) = target.strip_prefix("/healthz?") {
        let nonce = query.strip_prefix("challenge=").unwrap_or_default();
        let health = json!({
            "name": "agentprism-daemon", "implementation": "agentprism-rs",
            "version": record.version, "pid": record.pid, "instanceId": record.instance_id,
            "envFingerprint": record.env_fingerprint,
            "proof": healthz_proof(key, &record.instance_id, nonce),
            "port": record.port, "state": "current", "lameDuck": false,
            "sessions": sessions.load(Ordering::SeqCst),
            "activeRuns": active_runs.load(Ordering::SeqCst), "inflightRequests": 0,
            "controlProtocol": 0,
        });
        ("200 OK", String::new(), health.to_string())
    } else {
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            (Some("initialize"), Some(id)) => {
                sessions.fetch_add(1, Ordering::SeqCst);
                let result = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "old", "version": record.version}}});
                (
                    "200 OK",
                    "Mcp-Session-Id: old-session\r\n".to_owned(),
                    result.to_string(),
                )
            }
            (_, Some(id)) => {
                let result = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}});
                ("200 OK", String::new(), result.to_string())
            }
            (Some(_), None) if request_line.starts_with("POST") => {
                ("202 Accepted", String::new(), String::new())
            }
            _ => ("405 Method Not Allowed", String::new(), String::new()),
        }
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{answer}",
        answer.len()
    );
}

/// Scenario 17: an older daemon that cannot be told to step aside is adopted while it has a
/// run, and superseded once it is idle; one with sessions alone is superseded at once.
#[test]
fn the_bootstrap_exception_defers_only_while_the_old_daemon_works() {
    let world = World::new();
    let old = OldDaemon::start(&world, V1);
    old.active_runs.store(1, Ordering::SeqCst);
    let mut shim = shim_of(&world, V2);
    shim.initialize();
    assert_eq!(pointer(&world).expect("a pointer").pid, old.record.pid);
    // The shim's stderr is read by a thread of the test: the line may land just after the
    // initialize answer.
    let said = wait_for("the shim to say the old daemon has work", DEADLINE, || {
        Some(shim.stderr()).filter(|text| text.contains("still has work"))
    });
    assert!(said.contains("still has work"), "{said}");

    let idle_at = Instant::now();
    old.active_runs.store(0, Ordering::SeqCst);
    let v2 = wait_for("a successor", DEADLINE, || {
        pointer(&world).filter(|record| record.version == V2)
    });
    let moved_after = idle_at.elapsed();
    assert!(
        moved_after < Duration::from_secs(5),
        "the shim moved {moved_after:?} after the old daemon became idle"
    );
    assert_ne!(v2.pid, old.record.pid);
    let answer = shim.request(1, "tools/list", json!({}));
    assert!(
        answer["result"]["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty()),
        "served by the successor: {answer}"
    );
}

#[test]
fn an_old_daemon_with_sessions_only_is_superseded_at_once() {
    let world = World::new();
    let old = OldDaemon::start(&world, V1);
    old.sessions.store(3, Ordering::SeqCst);
    let mut shim = shim_of(&world, V2);
    shim.initialize();
    let current = pointer(&world).expect("a pointer");
    assert_eq!(current.version, V2);
    assert_ne!(current.pid, old.record.pid);
}

/// Daemon.md 1.5: the successor finds the configured port held by its predecessor and takes
/// an ephemeral one; it does not mistake the older daemon for "already running".
#[test]
fn a_successor_moves_off_the_port_its_predecessor_holds() {
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let world = World::with(|context| context.set("AGENTPRISM_DAEMON_PORT", port.to_string()));
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let v1 = pointer(&world).expect("a pointer");
    assert_eq!(v1.port, port);

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let v2 = pointer(&world).expect("a pointer");
    assert_eq!(v2.version, V2);
    assert_ne!(v2.port, port);
    // With nothing to drain, the superseded v1 hands its session over and exits.
    wait_for("v1 to drain and exit", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
    let answer = old_shim.request(1, "tools/list", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(pointer(&world).expect("a pointer").pid, v2.pid);
}

/// Installs a fake `systemctl` first on the world's PATH and a `managed.json` for the world's
/// family, as `daemon install` would. The fake logs its arguments; with `works`, a `start
/// agentprism@<V>.service` starts the daemon the way the template unit does, else it fails.
fn managed_world(works: bool) -> (World, PathBuf) {
    let world = World::with(|context| {
        let path = format!(
            "{}:{}",
            context.path("fakebin").display(),
            context.env["PATH"]
        );
        context.set("PATH", path)
    });
    let bin = world.context.path("fakebin");
    std::fs::create_dir_all(&bin).expect("fake bin dir");
    let log = world.context.path("systemctl.log");
    let start = if works {
        format!(
            "case \"$3\" in agentprism@*.service)\n  v=${{3#agentprism@}}; v=${{v%.service}}\n  \
             AGENTPRISM_TEST_VERSION=\"$v\" setsid {} daemon run --managed=systemd --supersede \
             --expect-version=\"$v\" </dev/null >>{} 2>&1 &\nesac\nexit 0\n",
            crate::support::context::agentprism_binary().display(),
            world.context.path("managed-daemon.log").display()
        )
    } else {
        "echo 'Failed to connect to bus: No medium found' >&2\nexit 1\n".to_owned()
    };
    let script = bin.join("systemctl");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$*\" >> {}\n{start}", log.display()),
    )
    .expect("write the fake systemctl");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let fingerprint = agentprism::discovery::fingerprint_of(
        world.context.env.iter().map(|(k, v)| (k.into(), v.into())),
    );
    let config = Path::new(&world.context.env["HOME"]).join(".config/agentprism");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(
        config.join("managed.json"),
        json!({"version": 1, "manager": "systemd", "unit": "agentprism@.service",
               "fingerprint": fingerprint,
               "binary": crate::support::context::agentprism_binary()})
        .to_string(),
    )
    .expect("write managed.json");
    (world, log)
}

fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
}

/// Daemon.md 2: in a family `daemon install` put under systemd, shims ask systemd for each
/// generation (`agentprism@<version>.service`), so successors are supervised too.
#[test]
fn a_managed_family_starts_each_generation_through_systemd() {
    let (world, log) = managed_world(true);
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let v1 = pointer(&world).expect("a pointer");
    assert!(
        cmdline(v1.pid).contains("--managed=systemd"),
        "{}",
        cmdline(v1.pid)
    );

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let v2 = pointer(&world).expect("a pointer");
    assert_eq!(v2.version, V2);
    assert!(
        cmdline(v2.pid).contains("--expect-version=2.0.0"),
        "{}",
        cmdline(v2.pid)
    );
    let calls = std::fs::read_to_string(&log).expect("systemctl was called");
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "--user start agentprism@1.0.0.service",
            "--user start agentprism@2.0.0.service"
        ]
    );
    wait_for("v1 to drain and exit", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
}

/// Without a working user manager the shim starts the daemon itself, as if nothing were
/// installed.
#[test]
fn a_failing_manager_falls_back_to_self_spawn() {
    let (world, log) = managed_world(false);
    let mut shim = shim_of(&world, V1);
    shim.initialize();
    let daemon = pointer(&world).expect("a pointer");
    assert!(
        cmdline(daemon.pid).contains("--instance-id"),
        "{}",
        cmdline(daemon.pid)
    );
    assert!(!cmdline(daemon.pid).contains("--managed"));
    assert!(
        std::fs::read_to_string(&log)
            .expect("called")
            .contains("start agentprism@1.0.0")
    );
    assert!(
        shim.stderr()
            .contains("could not start the daemon through systemd"),
        "{}",
        shim.stderr()
    );
}

/// A v1 daemon executing a run held until the world's `release` file exists, superseded
/// (its record says so) by a v2 daemon, with a v2 shim connected to it.
fn run_held_by_a_lame_duck() -> (World, String, DaemonRecord, Shim) {
    let world = World::new();
    let release = world.context.path("release");
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let run_id = start_held_run(&world, &mut old_shim, &release);
    let v1 = pointer(&world).expect("a pointer");
    drop(old_shim);
    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    wait_for("v1's record to say superseded", DEADLINE, || {
        instance_record(&world, v1.pid).filter(|record| record.state == DaemonState::Superseded)
    });
    (world, run_id, v1, new_shim)
}

/// Scenario 18: a run still executing on the lame duck is stopped through the successor: the
/// successor forwards the stop to the run's owner, which settles it with one `stopped` event
/// and an acknowledgement, and then exits, drained.
#[test]
fn a_run_on_the_lame_duck_is_stopped_through_the_successor() {
    let (world, run_id, v1, mut new_shim) = run_held_by_a_lame_duck();
    let stopped = new_shim.call_workflow(2, json!({"action": "stop", "runId": run_id}));
    let content = &stopped["structuredContent"];
    assert_eq!(content["control"]["state"], "settled", "{stopped:#}");
    assert_eq!(content["status"], "aborted", "{stopped:#}");
    assert_eq!(run_status(&world, &run_id)["status"], "aborted");
    let state = world.context.state();
    assert_eq!(crate::run_control::stopped_events(&state, &run_id), 1);
    assert_eq!(crate::run_control::acks(&state, &run_id).len(), 1);
    wait_for("the drained lame duck to exit", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
}

/// `forceOwner` ends a superseded owner that still holds the run, then stops the run cold.
#[test]
fn force_owner_ends_a_lame_duck_holding_the_run() {
    let (world, run_id, v1, mut new_shim) = run_held_by_a_lame_duck();
    let answer = new_shim.request(
        2,
        "tools/call",
        json!({"name": "workflow", "arguments": {"action": "stop", "runId": run_id,
               "forceOwner": true}}),
    );
    assert!(answer["result"].is_object(), "{answer}");
    assert!(
        process_gone(v1.pid as i32),
        "the superseded owner was ended"
    );
    assert_eq!(run_status(&world, &run_id)["status"], "aborted");
    assert_eq!(
        crate::run_control::stopped_events(&world.context.state(), &run_id),
        1
    );
}

/// Version drift (daemon.md pitfall 1): a shim newer than the `agentprism` binary it starts
/// cannot get a successor (the daemon it spawns is no newer than the running one and exits
/// "already running"); it keeps the running daemon rather than failing.
#[test]
fn a_shim_newer_than_its_daemon_binary_keeps_the_running_daemon() {
    let world = World::with(|context| {
        let wrapper = context.path("old-agentprism");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nAGENTPRISM_TEST_VERSION={V1} exec {} \"$@\"\n",
                crate::support::context::agentprism_binary().display()
            ),
        )
        .expect("write the wrapper");
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let wrapper = wrapper.display().to_string();
        context.set("AGENTPRISM_DAEMON_BIN", wrapper)
    });
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let v1 = pointer(&world).expect("a pointer");

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let answer = new_shim.request(1, "tools/list", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(pointer(&world).expect("a pointer").pid, v1.pid);
    assert_eq!(healthz(v1.port, "n").json()["lameDuck"], false);
    assert!(
        new_shim
            .stderr()
            .contains("could not start a daemon of version 2.0.0"),
        "{}",
        new_shim.stderr()
    );
}

/// Hosts configured with the daemon's URL rather than the shim: once the lame duck that held
/// the configured port has exited, the successor serves that port too and publishes it.
#[test]
fn the_successor_takes_the_configured_port_back_after_the_drain() {
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let world = World::with(|context| {
        context
            .set("AGENTPRISM_DAEMON_PORT", port.to_string())
            .set("AGENTPRISM_DAEMON_TICK_MS", "50")
    });
    let release = world.context.path("release");
    let mut old_shim = shim_of(&world, V1);
    old_shim.initialize();
    let run_id = start_held_run(&world, &mut old_shim, &release);
    let v1 = pointer(&world).expect("a pointer");
    assert_eq!(v1.port, port);
    drop(old_shim);

    let mut new_shim = shim_of(&world, V2);
    new_shim.initialize();
    let v2 = pointer(&world).expect("a pointer");
    assert_ne!(v2.port, port);
    assert_eq!(
        healthz(port, "n").json()["pid"],
        v1.pid,
        "v1 still holds the port"
    );

    std::fs::write(&release, "go").expect("release the run");
    wait_for("v1 to exit", DEADLINE, || {
        process_gone(v1.pid as i32).then_some(())
    });
    let moved = wait_for("the pointer to name the configured port", DEADLINE, || {
        pointer(&world).filter(|record| record.port == port)
    });
    assert_eq!(moved.pid, v2.pid);
    assert_eq!(moved.url, format!("http://127.0.0.1:{port}/mcp"));
    assert_eq!(healthz(port, "n").json()["pid"], v2.pid);
    assert_eq!(
        healthz(v2.port, "n").json()["pid"],
        v2.pid,
        "the first port stays"
    );
    assert_eq!(
        instance_record(&world, v2.pid).expect("v2's record").port,
        port
    );
    let answer = new_shim.request(5, "tools/list", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(run_status(&world, &run_id)["status"], "completed");
}
