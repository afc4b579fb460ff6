//! Per-backend concurrency caps through the real daemon and the mock agent: a backend's
//! `maxConcurrent` in `AGENTPRISM_BACKENDS` bounds its sessions across every run the daemon
//! executes, waiting calls are shown as waiting in status (MCP and CLI), take their slots in
//! the order they asked, open no session while they wait, and a stop ends their wait at once.
//! Every call holds its turn on a `@mock wait_file` until the test releases it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::shim::{Shim, World, eventually, run_id_of};
use crate::support::context::{DEADLINE, mock_agent_binary, prompts_in_log};

/// An MCP host on the shim, numbering its requests.
struct Host {
    shim: Shim,
    next_id: i64,
}

impl Host {
    fn start(world: &World) -> Host {
        let mut shim = world.shim();
        shim.initialize();
        Host { shim, next_id: 1 }
    }

    fn workflow(&mut self, arguments: Value) -> Value {
        self.next_id += 1;
        self.shim.call_workflow(self.next_id, arguments)
    }

    fn start_run(&mut self, world: &World, script: &str) -> String {
        let project = world.context.project();
        run_id_of(&self.workflow(json!({"action": "run", "projectDir": project, "script": script})))
    }

    /// The live calls of `run_id` in `state`, as MCP `status` shows them.
    fn calls_in(&mut self, run_id: &str, state: &str) -> Vec<Value> {
        let status = self.workflow(json!({"action": "status", "runId": run_id}));
        status["structuredContent"]["calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|call| call["status"] == state)
            .collect()
    }

    /// Polls `check`, which asks this host, until it holds.
    fn until(&mut self, what: &str, mut check: impl FnMut(&mut Host) -> bool) {
        let started = Instant::now();
        while !check(self) {
            assert!(
                started.elapsed() < DEADLINE,
                "{what} did not happen within {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A daemon world whose `mock` backend may hold `cap` sessions at once, logging to agent.log.
fn capped_world(cap: u32) -> World {
    World::with(|context| {
        let log = context.path("agent.log");
        let backends = json!({"mock": {"command": mock_agent_binary(),
            "env": {"MOCK_ACP_LOG": log}, "maxConcurrent": cap}});
        context.set("AGENTPRISM_BACKENDS", backends.to_string())
    })
}

/// A script fanning out one agent call per name, each held until `release/<name>` exists.
fn fan_out(release: &Path, names: &[&str]) -> String {
    let calls: Vec<String> = names
        .iter()
        .map(|name| {
            format!(
                "() => agent('{name}\\n@mock wait_file {}', {{label: '{name}'}})",
                release.join(name).display()
            )
        })
        .collect();
    format!(
        "export const meta = {{ name: 'fan', description: 'fan out', model: 'mock' }};\n\
         return await parallel([{}]);\n",
        calls.join(", ")
    )
}

/// The first word (the call's name) of each prompt the mock agents received, in order.
fn prompted(world: &World) -> Vec<String> {
    prompts_in_log(&world.context, "agent.log")
        .iter()
        .map(|prompt| prompt.lines().next().unwrap_or_default().to_owned())
        .collect()
}

/// How many times the client sent `method` to the mock agents.
fn sent(world: &World, method: &str) -> usize {
    std::fs::read_to_string(world.context.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == method)
        .count()
}

/// Two runs of four parallel calls each on a backend capped at 2: never more than two
/// sessions at once, the others shown waiting (with what they wait for) and holding no
/// session (each call let in opens its first), and the slots go to the calls in the order
/// they asked, run A's before run B's.
#[test]
fn two_runs_share_a_backends_cap_and_take_its_slots_in_order() {
    let world = capped_world(2);
    let release = world.context.path("release");
    std::fs::create_dir_all(&release).unwrap();
    let mut host = Host::start(&world);
    let run_a = host.start_run(&world, &fan_out(&release, &["a0", "a1", "a2", "a3"]));
    host.until("two of run A's calls wait for a slot", |host| {
        host.calls_in(&run_a, "waiting").len() == 2
    });
    let run_b = host.start_run(&world, &fan_out(&release, &["b0", "b1", "b2", "b3"]));
    host.until("all of run B's calls wait for a slot", |host| {
        host.calls_in(&run_b, "waiting").len() == 4
    });
    let waiting = host.calls_in(&run_b, "waiting");
    assert_eq!(
        waiting[0]["waitingFor"], "a mock slot (2 in use)",
        "{waiting:?}"
    );
    assert_eq!(host.calls_in(&run_a, "running").len(), 2);
    assert_eq!(prompted(&world).len(), 2, "{:?}", prompted(&world));
    // The probes of preparation open sessions too; from here on only calls do.
    let sessions = sent(&world, "session/new");
    let cli = world.context.status(&run_b);
    let shown: Vec<&Value> = cli["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter(|call| call["status"] == "waiting")
        .collect();
    assert_eq!(shown.len(), 4, "{cli}");
    assert_eq!(shown[0]["waitingFor"], "a mock slot (2 in use)", "{cli}");
    let text = world.context.run(&["status", &run_b]);
    assert!(
        text.stdout.contains("waiting for a mock slot (2 in use)"),
        "{}",
        text.stdout
    );

    // Release the earliest call holding a slot, one at a time: each release lets exactly
    // one waiting call in.
    for released in 1..=8 {
        let order = prompted(&world);
        let next = &order[released - 1];
        std::fs::write(release.join(next), "").unwrap();
        let expected = (released + 2).min(8);
        eventually("the next waiting call takes the freed slot", || {
            prompted(&world).len() >= expected
        });
        let order = prompted(&world);
        assert_eq!(
            order.len(),
            expected,
            "more than 2 calls held a slot: {order:?}"
        );
        assert_eq!(
            sent(&world, "session/new"),
            sessions + released.min(6),
            "a call let in opens one session; a waiting call had opened none"
        );
    }
    let order = prompted(&world);
    let (first, then) = order.split_at(4);
    assert!(
        first.iter().all(|name| name.starts_with('a')) && then.iter().all(|n| n.starts_with('b')),
        "run A's calls asked first and must get the slots first: {order:?}"
    );
    for run_id in [&run_a, &run_b] {
        eventually("the run completes", || {
            world.context.status(run_id)["status"] == "completed"
        });
    }
}

/// A stop of a run whose calls wait for a slot ends it at once (`stop` answers settled, 0),
/// while the call holding the slot (another run's) is still running; the waiting calls never
/// reach the agent.
#[test]
fn stopping_a_run_that_waits_for_a_slot_ends_it_at_once() {
    let world = capped_world(1);
    let release = world.context.path("release");
    std::fs::create_dir_all(&release).unwrap();
    let mut host = Host::start(&world);
    let holder = host.start_run(&world, &fan_out(&release, &["held"]));
    eventually("the first run's call holds the slot", || {
        prompted(&world) == ["held"]
    });
    let waiter = host.start_run(&world, &fan_out(&release, &["w0", "w1"]));
    host.until("the second run's calls wait", |host| {
        host.calls_in(&waiter, "waiting").len() == 2
    });
    let waiting = host.calls_in(&waiter, "waiting");
    assert_eq!(waiting[0]["waitingFor"], "a mock slot (1 in use)");
    let stopped = world.context.run(&["stop", &waiter]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert_eq!(world.context.status(&waiter)["status"], "aborted");
    assert_eq!(world.context.status(&holder)["status"], "running");
    std::fs::write(release.join("held"), "").unwrap();
    eventually("the first run completes", || {
        world.context.status(&holder)["status"] == "completed"
    });
    assert_eq!(
        prompted(&world),
        ["held"],
        "a stopped call reached the agent"
    );
}

/// A call's `timeoutMs` bounds its turn, not its wait for a slot: a call that waited longer
/// than its timeout still gets its answer once it holds the slot.
#[test]
fn the_wait_for_a_slot_does_not_count_against_the_calls_timeout() {
    let world = capped_world(1);
    let release = world.context.path("release");
    std::fs::create_dir_all(&release).unwrap();
    let mut host = Host::start(&world);
    let holder = host.start_run(&world, &fan_out(&release, &["held"]));
    eventually("the first run's call holds the slot", || {
        prompted(&world) == ["held"]
    });
    let script = "export const meta = { name: 'patient', description: 'd', model: 'mock' };\n\
                  return await agent('patient', {timeoutMs: 1000});\n";
    let patient = host.start_run(&world, script);
    host.until("the call waits for the slot", |host| {
        host.calls_in(&patient, "waiting").len() == 1
    });
    // What is under test is time passing: the wait outlasts the call's timeout.
    let waited_from = Instant::now();
    while waited_from.elapsed() < Duration::from_millis(1500) {
        assert_eq!(host.calls_in(&patient, "waiting").len(), 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(release.join("held"), "").unwrap();
    eventually("the patient run completes", || {
        world.context.status(&patient)["status"] == "completed"
    });
    let status = world.context.status(&patient);
    assert_eq!(status["calls"][0]["errorCode"], Value::Null, "{status}");
    assert!(status["calls"][0]["resultPreview"].is_string(), "{status}");
    eventually("the first run completes", || {
        world.context.status(&holder)["status"] == "completed"
    });
}
