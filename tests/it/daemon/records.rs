//! The daemon's records and control: environment families, stale and missing records, a
//! stopped daemon never replaced, sessions of dead clients, the unit's version check and the
//! control socket.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use agentprism::discovery::record::{read_own_record, write_record};
use agentprism::discovery::{DaemonRecord, RunControlKey};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::{
    HEADER, World, family_of, healthz, http, mcp_post, open_session, start_run_over_http, wait_for,
    wait_ready,
};
use crate::support::context::{DEADLINE, process_gone};

/// Scenario 13: a different `AGENTPRISM_BACKENDS` is another family with its own daemon and
/// pointer; a different idle TTL is the same family.
#[test]
fn env_families_split_on_backends_but_not_on_idle_ttl() {
    let world = World::new();
    let first = world.start();
    let other_backends = json!({"other": {"command": "/bin/false"}}).to_string();
    let second = world.run_with(
        &[("AGENTPRISM_BACKENDS", &other_backends)],
        &["daemon", "start"],
    );
    assert_eq!(second.code(), 0, "{}", second.stderr);
    assert_ne!(second.stdout.trim(), first.url);
    let mut other_env = world.ctx.env.clone();
    other_env.insert("AGENTPRISM_BACKENDS".into(), other_backends.clone());
    let other_family = family_of(&other_env);
    assert_ne!(other_family, first.env_fingerprint);
    let other = read_own_record(&world.pointer_path(&other_family)).expect("second pointer");
    assert_eq!(other.url, second.stdout.trim());
    assert_eq!(world.daemon_pids().len(), 2);

    let ttl_only = world.run_with(
        &[("AGENTPRISM_DAEMON_IDLE_TTL_MS", "1234")],
        &["daemon", "start"],
    );
    assert_eq!(ttl_only.code(), 0, "{}", ttl_only.stderr);
    assert_eq!(ttl_only.stdout.trim(), first.url);
    assert_eq!(world.daemon_pids().len(), 2);

    // `status` from the first family sees the second as another family.
    let status = world.run(&["daemon", "status", "--json"]).json();
    let roles: Vec<&str> = status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["role"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"current") && roles.contains(&"other family"),
        "{status:#}"
    );
    // `stop` ends only this family's daemon.
    assert_eq!(world.run(&["daemon", "stop"]).code(), 0);
    assert!(process_gone(first.pid as i32));
    assert!(!process_gone(other.pid as i32));
}

/// Scenario 22: a record naming a live process that is not the daemon (start time differs,
/// or written during another boot) is pruned, and the process is never signalled.
#[test]
fn stale_records_are_pruned_and_their_pids_never_signalled() {
    let world = World::new();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let pid = sleeper.id();
    let template = DaemonRecord::for_this_process(
        "0.1.0",
        "00000000-0000-4000-8000-000000000001",
        1,
        &world.fingerprint(),
        "",
    );
    let instances = world.ctx.state().join("daemons/instances");
    std::fs::create_dir_all(&instances).unwrap();
    let reused = DaemonRecord {
        pid,
        proc_start: 1,
        ..template.clone()
    };
    write_record(&instances.join(format!("{pid}.json")), &reused).unwrap();
    let other_boot = DaemonRecord {
        pid: std::process::id(),
        instance_id: "00000000-0000-4000-8000-000000000002".into(),
        boot_id: Some("not-this-boot".into()),
        ..template
    };
    write_record(
        &instances.join(format!("{}.json", std::process::id())),
        &other_boot,
    )
    .unwrap();

    let status = world.run(&["daemon", "status", "--json"]);
    assert_ne!(status.code(), 0, "no current daemon: {}", status.stdout);
    let document = status.json();
    let pruned = document["pruned"].as_array().unwrap();
    assert_eq!(pruned.len(), 2, "{document:#}");
    assert!(world.instances().is_empty());
    assert!(
        document["daemons"].as_array().unwrap().is_empty(),
        "{document:#}"
    );
    // `stop --all` finds nothing to stop either; the sleeper lives on.
    assert_eq!(world.run(&["daemon", "stop", "--all"]).code(), 0);
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the unrelated process was signalled"
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// Scenario 23: a live daemon whose records were deleted is listed as untracked, and
/// `stop --all` stops it.
#[test]
fn a_daemon_without_records_is_untracked_and_stop_all_stops_it() {
    let world = World::new();
    let record = world.start();
    std::fs::remove_file(world.pointer_path(&record.env_fingerprint)).unwrap();
    for file in world.instances() {
        std::fs::remove_file(file).unwrap();
    }
    let status = world.run(&["daemon", "status", "--json"]);
    assert_ne!(status.code(), 0);
    let document = status.json();
    let daemons = document["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), 1, "{document:#}");
    assert_eq!(daemons[0]["role"], "untracked");
    assert_eq!(daemons[0]["pid"], record.pid);
    assert_eq!(daemons[0]["instanceId"], record.instance_id.as_str());

    let stop = world.run(&["daemon", "stop", "--all"]);
    assert_eq!(stop.code(), 0, "{}", stop.stderr);
    assert!(process_gone(record.pid as i32));
}

/// Scenario 24: a stopped (SIGSTOP) daemon is alive but silent: `daemon start` does not
/// spawn a second daemon over the store and fails with a hint after its bound; after
/// SIGCONT the same daemon is adopted.
#[test]
fn a_stopped_daemon_is_never_replaced() {
    let world = World::new();
    let record = world.start();
    let pid = Pid::from_raw(record.pid as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let started = Instant::now();
    let blocked = world.run(&["daemon", "start"]);
    let took = started.elapsed();
    kill(pid, Signal::SIGCONT).unwrap();
    assert_ne!(blocked.code(), 0);
    assert!(
        blocked.stderr.contains("did not answer /healthz"),
        "{}",
        blocked.stderr
    );
    assert!(
        blocked.stderr.contains("agentprism daemon status"),
        "{}",
        blocked.stderr
    );
    assert!(took >= Duration::from_secs(9), "gave up after {took:?}");
    assert_eq!(world.daemon_pids(), vec![record.pid as i32]);
    assert_eq!(world.instances().len(), 1);
    assert_eq!(world.start().instance_id, record.instance_id);
}

/// Dead-client eviction: a session with no connection is evicted after the session TTL, and
/// the test hook evicts on demand; either way the client gets 404 and re-initializes.
#[test]
fn sessions_of_dead_clients_are_evicted() {
    let world = World::with(|ctx| {
        ctx.set("AGENTPRISM_SESSION_TTL_MS", "200")
            .set("AGENTPRISM_DAEMON_TICK_MS", "50")
            .set("AGENTPRISM_TEST_HOOKS", "1")
    });
    let _daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let session = open_session(record.port);
    assert_eq!(healthz(record.port, "n").json()["sessions"], 1);
    wait_for("the session TTL eviction", DEADLINE, || {
        (healthz(record.port, "n").json()["sessions"] == 0).then_some(())
    });
    let gone = mcp_post(
        record.port,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert_eq!(gone.status, 404);

    // The hook evicts at once, well inside the TTL of a fresh session.
    let world_hook = World::with(|ctx| ctx.set("AGENTPRISM_TEST_HOOKS", "1"));
    let _daemon = world_hook.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world_hook);
    let session = open_session(record.port);
    let evict = http(
        record.port,
        "POST",
        &format!("/debug/evict?session={session}"),
        &[],
        "",
    );
    assert_eq!(evict.status, 202);
    wait_for("the hook eviction", DEADLINE, || {
        let reply = mcp_post(
            record.port,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        );
        (reply.status == 404).then_some(())
    });
}

/// A unit instance whose binary is another version exits 3, which the unit's
/// `RestartPreventExitStatus=3` keeps from restarting.
#[test]
fn a_daemon_of_another_version_than_its_unit_exits_3() {
    let world = World::new();
    let finished = world.run(&[
        "daemon",
        "run",
        "--managed=systemd",
        "--expect-version=0.0.0-other",
    ]);
    assert_eq!(finished.code(), 3, "{}", finished.stderr);
    assert!(world.pointer().is_none());
    assert!(
        world
            .run(&["daemon", "run", "--managed=upstart"])
            .stderr
            .contains("expected systemd or launchd")
    );
}

/// A daemon's control socket (daemon.md 1.9): its record names it, it answers `identify` to
/// a client signing with the user's key and refuses forged and unsigned frames; the CLI's
/// `stop` of a run the daemon executes is forwarded there (1.10 step 5); `run-control` for
/// a run it does not execute is `NOT_OWNER`; a signed `shutdown` ends the daemon.
#[test]
fn the_control_socket_identifies_stops_forwarded_runs_and_shuts_down() {
    use agentprism::control::{ControlClient, ControlClientError, ControlError, Identity};

    let world = World::new();
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    assert_eq!(record.control_protocol, 1);
    let socket = agentprism::control::socket_path_from_url(&record.control_url)
        .unwrap_or_else(|| panic!("no control socket in {record:?}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let identity = Identity {
        instance_id: uuid::Uuid::new_v4().to_string(),
        pid: std::process::id(),
        version: "test".into(),
    };
    let client = ControlClient::new(world.key(), identity.clone());
    let call = |client: &ControlClient, kind: &str, body: Value| {
        runtime.block_on(client.call(
            &socket,
            &record.instance_id,
            kind,
            &uuid::Uuid::new_v4().to_string(),
            &body,
        ))
    };

    let identified = call(&client, "identify", json!({})).expect("identify");
    assert_eq!(identified["instanceId"], record.instance_id.as_str());
    assert_eq!(identified["pid"], record.pid);
    assert_eq!(identified["state"], "current");

    let forged = ControlClient::new(RunControlKey::from_bytes([9; 32]), identity);
    assert!(matches!(
        call(&forged, "identify", json!({})),
        Err(ControlClientError::Refused { .. })
    ));
    let unsigned = br#"{"v":1,"kind":"shutdown","to":"x","body":"{}"}"#;
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream
        .write_all(&(unsigned.len() as u32).to_be_bytes())
        .unwrap();
    stream.write_all(unsigned).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let refusal: Value = serde_json::from_slice(&answer[4..]).unwrap();
    assert_eq!(refusal, json!({"ok": false, "code": "UNAUTHENTICATED"}));

    // A run executing in the daemon, stopped from a separate CLI process.
    let session = open_session(record.port);
    let script =
        format!("{HEADER}const a = await agent('slow\\n@mock delay 30000');\nreturn {{a}};\n");
    let run_id = start_run_over_http(record.port, &session, &world.ctx.project(), &script);
    assert_eq!(world.ctx.status(&run_id)["status"], "running");
    let stopped = world.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains(&format!("stopped by daemon pid {}", record.pid)),
        "{}",
        stopped.stderr
    );
    assert_eq!(world.ctx.status(&run_id)["status"], "aborted");
    match call(
        &client,
        "run-control",
        json!({"action": "stop", "runId": run_id}),
    ) {
        Err(ControlClientError::Rejected(ControlError::NotOwner(_))) => {}
        other => panic!("expected NOT_OWNER, got {other:?}"),
    }

    call(&client, "shutdown", json!({})).expect("shutdown");
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("exiting: shutdown requested by"),
        "{}",
        finished.stderr
    );
    assert!(!socket.exists(), "the socket outlived its daemon");
    assert!(world.pointer().is_none());
}
