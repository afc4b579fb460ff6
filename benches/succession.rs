//! Succession figures (area `succession` of `docs/performance.md`): the time from a newer
//! shim's first request to its successor daemon answering it, with an older daemon executing
//! one workflow; and the time from the last run finishing on the lame duck to its exit.
//!
//! Two versions from one build need `AGENTPRISM_TEST_VERSION`, which only debug builds and the
//! `version-override` feature honour, so this bench requires that feature:
//!
//! ```sh
//! cargo build --release --bins --examples --features version-override
//! cargo bench --features version-override --bench succession
//! ```

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

mod support;

use support::{World, figure, initialize_params, ms, percentile, process_gone, report};

const ROUNDS: usize = 8;

fn main() {
    let mock = Path::new(env!("CARGO_BIN_EXE_agentprism"))
        .parent()
        .expect("bin dir")
        .join("examples/mock_acp_agent");
    assert!(
        mock.exists(),
        "{} is missing: cargo build --release --bins --examples --features version-override",
        mock.display()
    );
    let temp = tempfile::tempdir().expect("temp dir");
    let mut takeover = Vec::new();
    let mut release_to_exit = Vec::new();
    let mut run_end_to_exit = Vec::new();
    let mut daemons = Vec::new();
    for round in 0..ROUNDS {
        let mut world = World::new(temp.path(), &format!("round{round}"));
        world.env.push((
            "AGENTPRISM_BACKENDS".into(),
            json!({"mock": {"command": mock}}).to_string(),
        ));
        let release = world.project.join("release");

        let mut old_shim = world.shim_with(&[("AGENTPRISM_TEST_VERSION", "1.0.0")]);
        old_shim.request(0, "initialize", initialize_params());
        old_shim.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let script = format!(
            "export const meta = {{ name: 'held', description: 'd', model: 'mock' }};\n\
             await agent('hold\\n@mock wait_file {}');\nreturn 1;\n",
            release.display()
        );
        let answer = old_shim.request(
            1,
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "run",
                   "projectDir": world.project, "script": script}}),
        );
        let run_id = answer["result"]["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no run id: {answer}"))
            .to_owned();
        let old = world.pointer();
        assert_eq!(
            old["version"], "1.0.0",
            "the binary ignores AGENTPRISM_TEST_VERSION: build it with --features version-override"
        );
        let old_pid = old["pid"].as_i64().unwrap() as i32;
        daemons.push(old_pid);

        let started = Instant::now();
        let mut new_shim = world.shim_with(&[("AGENTPRISM_TEST_VERSION", "2.0.0")]);
        let answer = new_shim.request(0, "initialize", initialize_params());
        takeover.push(started.elapsed());
        assert!(answer.get("result").is_some(), "{answer}");
        let new = world.pointer();
        assert_eq!(new["version"], "2.0.0");
        daemons.push(new["pid"].as_i64().unwrap() as i32);

        // The old shim's host goes away; only the run keeps the lame duck alive.
        old_shim.close();
        let released = Instant::now();
        std::fs::write(&release, "go").expect("release the run");
        while !process_gone(old_pid) {
            assert!(
                released.elapsed() < Duration::from_secs(30),
                "the lame duck did not exit"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let exited_at = SystemTime::now();
        release_to_exit.push(released.elapsed());
        new_shim.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let status = new_shim.request(
            2,
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "status", "runId": run_id}}),
        );
        run_end_to_exit.push(run_end_to_exit_of(&status, exited_at));
        new_shim.close();
    }
    report(
        "newer shim's first request answered by its successor (older daemon running a workflow)",
        &mut takeover,
    );
    report(
        "lame duck: the held call released to the daemon's exit",
        &mut release_to_exit,
    );
    report(
        "lame duck: the run's last update (store) to the daemon's exit",
        &mut run_end_to_exit,
    );
    for (name, samples, goal) in [
        (
            "newer shim started to its `initialize` answered by the successor: p50",
            &mut takeover,
            "< 150 ms",
        ),
        (
            "the held call released to the lame duck's exit: p50",
            &mut release_to_exit,
            "-",
        ),
        (
            "the run's last store update to the lame duck's exit: p50",
            &mut run_end_to_exit,
            "< 1 s",
        ),
    ] {
        let p50 = ms(percentile(samples, 50));
        figure("succession", name, format!("{p50:.1} ms"), goal);
    }
    for pid in daemons {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The time between the run's final `updatedAt` and the lame duck's exit.
fn run_end_to_exit_of(status: &Value, exited_at: SystemTime) -> Duration {
    let content = &status["result"]["structuredContent"];
    assert_eq!(content["status"], "completed", "{status}");
    let updated = content["updatedAt"].as_str().expect("updatedAt");
    let updated = humantime::parse_rfc3339(updated).expect("an RFC 3339 time");
    exited_at.duration_since(updated).unwrap_or_default()
}
