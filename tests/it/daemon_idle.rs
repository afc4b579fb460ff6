//! The daemon's idle exit (daemon.md scenarios 5 and 6): it exits one idle lifetime after
//! its last session, request or run ended, whatever its tick, any activity meanwhile starts
//! the lifetime again, a running run keeps it up, a run waiting for its automatic resume at a
//! usage reset keeps it up until that resume ran, and a lifetime of 0 keeps it up for good.
//! Waits are on the process's exit with a deadline; the only sleeps make time pass where the
//! scenario needs it to.

use std::time::{Duration, Instant};

use crate::daemon::{HEADER, World, healthz, http, open_session, start_run_over_http, wait_ready};
use crate::support::context::{DEADLINE, process_gone};

/// Scenario 5: with a 500 ms idle TTL and a fast tick the daemon exits 0 on its own.
#[test]
fn an_idle_daemon_exits_and_removes_its_pointer_and_record() {
    let world = World::with(|ctx| {
        ctx.set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "500")
            .set("AGENTPRISM_DAEMON_TICK_MS", "50")
    });
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    wait_ready(&world);
    let ready_at = Instant::now();
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        ready_at.elapsed() >= Duration::from_millis(450),
        "exited before its TTL"
    );
    assert!(
        finished.stderr.contains("idle for 500ms"),
        "{}",
        finished.stderr
    );
    assert!(world.pointer().is_none());
    assert!(!world.pointer_path(&world.fingerprint()).exists());
    assert!(world.instances().is_empty());
}

/// Scenario 6 and the seed's promise: a run started over HTTP keeps executing after its
/// client is gone, keeps the daemon from idling out, and completes.
#[test]
fn an_executing_run_outlives_its_client_and_keeps_the_daemon_alive() {
    let world = World::with(|ctx| {
        ctx.set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "300")
            .set("AGENTPRISM_DAEMON_TICK_MS", "50")
    });
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let session = open_session(record.port);
    let script =
        format!("{HEADER}const a = await agent('slow\\n@mock delay 2000');\nreturn {{a}};\n");
    let run_id = start_run_over_http(record.port, &session, &world.ctx.project(), &script);
    // The client goes away: its session ends; only the run keeps the daemon busy.
    let deleted = http(
        record.port,
        "DELETE",
        "/mcp",
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    );
    assert!(deleted.status < 300, "DELETE answered {}", deleted.status);
    let health = healthz(record.port, "n").json();
    assert_eq!(health["sessions"], 0);
    assert_eq!(health["activeRuns"], 1, "{health}");

    // The daemon only exits once the run is over, so the run must have completed.
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let status = world.ctx.status(&run_id);
    assert_eq!(status["status"], "completed", "{status:#}");
    assert!(world.pointer().is_none());
}

/// A run paused on a usage limit that lifts in a few seconds keeps an otherwise idle daemon
/// up (its idle lifetime is far shorter) until the daemon resumed it and it completed.
#[test]
fn a_run_waiting_for_its_automatic_resume_keeps_the_daemon_alive() {
    let world = World::with(|ctx| {
        ctx.set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "300")
            .set("AGENTPRISM_DAEMON_TICK_MS", "50")
    });
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let session = open_session(record.port);
    let marker = world.ctx.path("failed-once");
    let script = format!(
        "{HEADER}return await agent('work\\n@mock once {} usage_limit try again in 2 seconds');\n",
        marker.display()
    );
    let run_id = start_run_over_http(record.port, &session, &world.ctx.project(), &script);
    let deleted = http(
        record.port,
        "DELETE",
        "/mcp",
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    );
    assert!(deleted.status < 300, "DELETE answered {}", deleted.status);

    // Exiting at its idle lifetime would leave the run paused: it completes, so the daemon
    // stayed up until its timer fired.
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let status = world.ctx.status(&run_id);
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(status["generation"], 2, "{status:#}");
    assert!(marker.exists(), "the call failed once first");
}

/// Scenario 6, second half: TTL 0 disables idle exit (observed over many ticks).
#[test]
fn an_idle_ttl_of_zero_never_exits() {
    let world = World::with(|ctx| {
        ctx.set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "0")
            .set("AGENTPRISM_DAEMON_TICK_MS", "10")
    });
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let observed = Instant::now();
    // 100+ ticks: an idle exit would have happened many times over.
    while observed.elapsed() < Duration::from_millis(1200) {
        assert_eq!(healthz(record.port, "n").status, 200);
        assert!(!process_gone(daemon.pid() as i32));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The idle lifetime is timed from the moment the daemon went idle, not found by a tick:
/// with the default 60 s tick and a 1.5 s lifetime, the daemon exits about 1.5 s after its
/// last session ended; a session that came and went meanwhile starts the lifetime again.
#[test]
fn the_idle_exit_comes_one_lifetime_after_the_last_activity_whatever_the_tick() {
    let ttl = Duration::from_millis(1500);
    let world = World::with(|ctx| ctx.set("AGENTPRISM_DAEMON_IDLE_TTL_MS", "1500"));
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let close = |session: &str| {
        let deleted = http(
            record.port,
            "DELETE",
            "/mcp",
            &[
                ("Mcp-Session-Id", session),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            "",
        );
        assert!(deleted.status < 300, "DELETE answered {}", deleted.status);
    };
    let first = open_session(record.port);
    close(&first);
    // A third of the lifetime later, a client comes and goes: the lifetime starts again.
    std::thread::sleep(ttl / 3);
    let second = open_session(record.port);
    let last_activity = Instant::now();
    close(&second);
    let idle_at = Instant::now();
    let finished = daemon.finish(ttl + Duration::from_secs(1));
    let exited_after = idle_at.elapsed();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("idle for 1.5s"),
        "{}",
        finished.stderr
    );
    assert!(
        last_activity.elapsed() >= ttl,
        "exited {exited_after:?} after going idle, before its idle lifetime of {ttl:?}"
    );
    assert!(
        exited_after <= ttl + Duration::from_secs(1),
        "exited {exited_after:?} after going idle"
    );
}
