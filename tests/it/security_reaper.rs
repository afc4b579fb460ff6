//! No agent process survives its owner (docs/security.md). Every agent here is
//! the mock agent as real adapters behave at their worst: it ignores stdin EOF
//! (`MOCK_ACP_EXIT_ON_EOF=0`) and keeps a `sleep 300` child in its process group
//! (`MOCK_ACP_SPAWN_CHILD=1`). The owners are the real binaries: a foreground `agentprism run`,
//! or the daemon a real shim starts. Owners die by SIGKILL, so no destructor of theirs runs;
//! only the reaper that leads each agent's group (`src/acp/reaper.rs`) and the group records
//! (`src/acp/groups.rs`) stand between a dead owner and leaked agents.
//!
//! The last test is the fault-injection acceptance test: 40 runs of 10 to 20 calls, each hit
//! by a SIGKILL of the daemon, an agent, the shim or a foreground run at a moment drawn from a
//! seeded PRNG (printed; `AGENTPRISM_FAULT_SEED=<n>` replays it).
//!
//! Every wait polls an observable condition (a prompt in the agent's log, a pid gone, a record
//! file gone) against a deadline.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::shim::{Shim, World, eventually, run_id_of};
use crate::support::context::{DEADLINE, TestContext, pids_in, process_gone, wait_gone};

const HEADER: &str =
    "export const meta = { name: 'reaper', description: 'reaper tests', model: 'mock' };\n";

/// The persistence root's folder of group records (`src/acp/groups.rs`).
const GROUPS: &str = "agent-groups";

/// How long processes may take to go after their owner died, in the fault-injection test
/// (which counts leftovers instead of failing at the first one).
const GONE_WITHIN: Duration = Duration::from_secs(15);

/// The mock agent at its worst, logging what it is sent and where its processes are.
fn stubborn(context: TestContext) -> TestContext {
    let pids = context.path("pids");
    let log = context.path("agent.log");
    context.with_mock_backend(json!({
        "MOCK_ACP_EXIT_ON_EOF": "0",
        "MOCK_ACP_SPAWN_CHILD": "1",
        "MOCK_ACP_PID_FILE": pids,
        "MOCK_ACP_LOG": log,
    }))
}

/// The prompts the mock agents of this context were sent, in order.
fn prompts(context: &TestContext) -> Vec<String> {
    crate::support::context::prompts_in_log(context, "agent.log")
}

fn wait_prompts(context: &TestContext, count: usize) {
    let started = Instant::now();
    while prompts(context).len() < count {
        assert!(
            started.elapsed() < DEADLINE,
            "fewer than {count} prompts within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// `(pgrp, state)` of a live process.
fn group_and_state(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_owned();
    let _ppid = fields.next()?;
    Some((fields.next()?.parse().ok()?, state))
}

fn argv(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&byte| byte == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| !process_gone(pid))
        .collect()
}

/// What a process of this test's agent side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Reaper,
    Agent,
    AgentChild,
}

/// The live processes on the agent side of `context` (reapers, mock agents, their `sleep`
/// children), found by the persistence root in their environment, which every one of them
/// inherits from its owner.
fn agent_side(context: &TestContext) -> Vec<(i32, Role)> {
    let marker = format!("AGENTPRISM_PERSISTENCE_ROOT={}", context.state().display());
    all_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .unwrap_or_default()
                .split(|&byte| byte == 0)
                .any(|var| var == marker.as_bytes())
        })
        .filter_map(|pid| {
            let args = argv(pid);
            let role = if args.get(1).is_some_and(|arg| arg == "agent-reaper") {
                Role::Reaper
            } else if args
                .first()
                .is_some_and(|arg| arg.ends_with("mock_acp_agent"))
            {
                Role::Agent
            } else if args.first().is_some_and(|arg| arg == "sleep") {
                Role::AgentChild
            } else {
                return None;
            };
            Some((pid, role))
        })
        .collect()
}

fn agent_side_pids(context: &TestContext) -> Vec<i32> {
    agent_side(context)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// The live members of process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&pid| group_and_state(pid).is_some_and(|(group, _)| group == pgid))
        .collect()
}

/// The pids of `pids` still alive after `within`.
fn remaining_after(pids: &[i32], within: Duration) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let alive: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|&pid| !process_gone(pid))
            .collect();
        if alive.is_empty() || started.elapsed() > within {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The group record files under the persistence root.
fn records(context: &TestContext) -> Vec<PathBuf> {
    std::fs::read_dir(context.state().join(GROUPS))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default()
}

fn start_time(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("start time")
}

/// A `workflow` tool call through `shim` that tolerates one lost session: the daemon it was
/// talking to may just have been killed.
fn tool_call(shim: &mut Shim, id: &mut i64, arguments: Value) -> Value {
    for _ in 0..3 {
        *id += 1;
        let answer = shim.request(
            *id,
            "tools/call",
            json!({"name": "workflow", "arguments": arguments}),
        );
        if answer["error"]["code"] == -32603 {
            continue;
        }
        assert!(answer.get("result").is_some(), "{answer}");
        return answer["result"].clone();
    }
    panic!("three lost sessions in a row; stderr:\n{}", shim.stderr());
}

/// Polls the run's status through `shim` until it is completed.
fn wait_completed(shim: &mut Shim, id: &mut i64, run_id: &str) {
    let started = Instant::now();
    loop {
        let status = tool_call(shim, id, json!({"action": "status", "runId": run_id}));
        let state = status["structuredContent"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if state == "completed" {
            return;
        }
        assert!(
            !matches!(state.as_str(), "failed" | "aborted"),
            "run {run_id} ended {state}: {status:#}"
        );
        assert!(
            started.elapsed() < DEADLINE,
            "run {run_id} not completed: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn start_run(shim: &mut Shim, id: &mut i64, context: &TestContext, script: &str) -> String {
    let ack = tool_call(
        shim,
        id,
        json!({"action": "run", "projectDir": context.project(), "script": script}),
    );
    run_id_of(&ack)
}

/// A foreground run SIGKILLed mid-call takes its agent, the agent's child and their reaper
/// with it, although the agent ignores EOF and nothing of the owner's runs after the signal.
#[test]
fn a_sigkilled_foreground_run_leaves_no_agent_process() {
    let context = stubborn(TestContext::new());
    let script = context.write(
        "wf.js",
        &format!("{HEADER}return await agent('wait\\n@mock hang');\n"),
    );
    let running = context.spawn(&["run", script.to_str().unwrap()]);
    wait_prompts(&context, 1);
    let agents = agent_side(&context);
    let roles: Vec<Role> = agents.iter().map(|(_, role)| *role).collect();
    for role in [Role::Reaper, Role::Agent, Role::AgentChild] {
        assert!(roles.contains(&role), "no {role:?} in {agents:?}");
    }
    // The ACP pipes go straight to the agent: the reaper keeps no copy of stdin or stdout,
    // and the agent holds no end of the reaper's owner socket.
    for (pid, role) in &agents {
        let target = |fd: u32| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|path| path.display().to_string())
                .unwrap_or_default()
        };
        match role {
            Role::Reaper => {
                assert_eq!(target(0), "/dev/null");
                assert_eq!(target(1), "/dev/null");
                assert!(target(3).starts_with("socket:"), "{}", target(3));
            }
            Role::Agent => {
                assert!(target(0).starts_with("pipe:"), "{}", target(0));
                assert!(target(1).starts_with("pipe:"), "{}", target(1));
                let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .unwrap()
                    .filter_map(Result::ok)
                    .filter(|fd| {
                        std::fs::read_link(fd.path())
                            .is_ok_and(|path| path.display().to_string().starts_with("socket:"))
                    })
                    .count();
                assert_eq!(sockets, 0, "the agent holds a socket");
            }
            Role::AgentChild => {}
        }
    }
    running.signal(Signal::SIGKILL);
    let killed = running.finish(DEADLINE);
    assert!(killed.status.code().is_none(), "killed by a signal");
    wait_gone(&agent_side_pids(&context));
    wait_gone(&pids_in(&context.path("pids")));
    assert!(agent_side(&context).is_empty());
}

/// The same for the daemon: SIGKILLed while a run it executes is mid-call.
#[test]
fn a_sigkilled_daemon_leaves_no_agent_process() {
    let world = World::with(stubborn);
    let context = &world.context;
    let mut shim = world.shim();
    shim.initialize();
    let mut id = 0;
    start_run(
        &mut shim,
        &mut id,
        context,
        &format!("{HEADER}return await agent('wait\\n@mock hang');\n"),
    );
    wait_prompts(context, 1);
    let agents = agent_side_pids(context);
    assert!(agents.len() >= 3, "reaper, agent and child: {agents:?}");
    let daemon = world.pointer_pid();
    kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
    wait_gone(&[daemon]);
    wait_gone(&agents);
    wait_gone(&pids_in(&context.path("pids")));
}

/// Who starts after the owner died.
#[derive(Clone, Copy, Debug)]
enum NextOwner {
    ForegroundRun,
    Daemon,
}

/// A reaper that cannot act (stopped here) leaves a live group whose record names a dead
/// owner. The next foreground run kills that group after checking its identity, and removes
/// the record. Records whose leader is not the recorded process (another start time, or not
/// a reaper) are removed without any signal.
#[test]
fn the_next_run_kills_a_dead_owners_group_and_never_a_mismatched_one() {
    next_owner_sweeps(NextOwner::ForegroundRun);
}

/// The same when the next owner is a daemon, started by a shim.
#[test]
fn the_next_daemon_kills_a_dead_owners_group_and_never_a_mismatched_one() {
    next_owner_sweeps(NextOwner::Daemon);
}

fn next_owner_sweeps(next_owner: NextOwner) {
    let world = World::with(stubborn);
    let context = &world.context;
    let script = context.write(
        "wf.js",
        &format!("{HEADER}return await agent('wait\\n@mock hang');\n"),
    );
    let running = context.spawn(&["run", script.to_str().unwrap()]);
    wait_prompts(context, 1);
    let files = records(context);
    assert_eq!(files.len(), 1, "one group, one record: {files:?}");
    let record: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let pgid = record["pgid"].as_i64().expect("pgid") as i32;
    let orphans = group_members(pgid);
    assert_eq!(orphans.len(), 3, "reaper, agent and child: {orphans:?}");
    assert_eq!(argv(pgid).get(1).map(String::as_str), Some("agent-reaper"));

    // A stopped reaper in an orphaned group would get SIGHUP and SIGCONT from the kernel
    // when its owner dies (POSIX job control) and do its job after all. A member whose
    // parent (this test) is in the session keeps the group from being orphaned.
    let mut anchor = Command::new("sleep");
    anchor.arg("300").stdin(Stdio::null());
    // SAFETY: between fork and exec the closure makes one raw syscall (setpgid).
    unsafe {
        anchor.pre_exec(move || {
            nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(pgid))?;
            Ok(())
        });
    }
    let mut anchor = anchor.spawn().expect("spawn the anchor");
    let orphans = group_members(pgid);
    assert_eq!(orphans.len(), 4, "with the anchor: {orphans:?}");
    kill(Pid::from_raw(pgid), Signal::SIGSTOP).unwrap();
    eventually("the reaper to stop", || {
        group_and_state(pgid).is_some_and(|(_, state)| state == "T")
    });
    running.signal(Signal::SIGKILL);
    running.finish(DEADLINE);
    // The owner is gone, and with its reaper unable to act the group lives on: the reaper
    // and the agent's child at least (the agent itself may have died writing to the dead
    // owner's stderr pipe; its stopped parent cannot reap it).
    let alive: Vec<i32> = orphans
        .iter()
        .copied()
        .filter(|&pid| !process_gone(pid))
        .collect();
    assert!(
        alive.contains(&pgid) && alive.len() >= 3,
        "{:?}",
        orphans
            .iter()
            .map(|&pid| (pid, group_and_state(pid), argv(pid)))
            .collect::<Vec<_>>()
    );

    // Two groups of our own, recorded as if that dead owner had started them.
    let decoys: Vec<Child> = (0..2)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "sleep 300 & wait"])
                .process_group(0)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sh")
        })
        .collect();
    let decoy_pids: Vec<i32> = decoys.iter().map(|child| child.id() as i32).collect();
    for &decoy in &decoy_pids {
        eventually("the decoy's child", || group_members(decoy).len() == 2);
    }
    let mut decoy_records = Vec::new();
    for (index, &decoy) in decoy_pids.iter().enumerate() {
        // The first has the wrong start time; the second the right one, but it is no reaper.
        let leader_start = start_time(decoy) + u64::from(index == 0);
        let mut fake = record.clone();
        fake["pgid"] = json!(decoy);
        fake["leaderStart"] = json!(leader_start);
        fake["backend"] = json!("decoy");
        let path = context
            .state()
            .join(GROUPS)
            .join(format!("{decoy}-{leader_start}.json"));
        std::fs::write(&path, fake.to_string()).unwrap();
        decoy_records.push(path);
    }

    // The next owner sweeps before it does anything else.
    let _shim = match next_owner {
        NextOwner::ForegroundRun => {
            let quick = context.write("quick.js", &format!("{HEADER}return 1;\n"));
            let next = context.run(&["run", quick.to_str().unwrap()]);
            assert_eq!(next.code(), 0, "{}", next.stderr);
            None
        }
        NextOwner::Daemon => {
            let mut shim = world.shim();
            shim.initialize();
            Some(shim)
        }
    };
    wait_gone(&orphans);
    let _ = anchor.wait();
    assert!(!files[0].exists(), "the orphan's record is removed");
    for path in &decoy_records {
        assert!(!path.exists(), "{} is removed", path.display());
    }
    for &decoy in &decoy_pids {
        assert_eq!(group_members(decoy).len(), 2, "decoy {decoy} was signalled");
    }
    for mut decoy in decoys {
        let _ = killpg(Pid::from_raw(decoy.id() as i32), Signal::SIGKILL);
        let _ = decoy.wait();
    }
}

/// An idle pooled agent (its run is done, the daemon keeps the process) whose agent process
/// dies leaves no group member; the same when its reaper (the group leader) is killed. The
/// daemon then runs the next call on a fresh agent.
#[test]
fn an_idle_pooled_agents_group_dies_with_its_leader() {
    let world = World::with(stubborn);
    let context = &world.context;
    let mut shim = world.shim();
    shim.initialize();
    let mut id = 0;
    for victim in [Role::Agent, Role::Reaper] {
        let run_id = start_run(
            &mut shim,
            &mut id,
            context,
            &format!("{HEADER}return await agent('hello');\n"),
        );
        wait_completed(&mut shim, &mut id, &run_id);
        let idle = agent_side(context);
        let Some(&(pid, _)) = idle.iter().find(|(_, role)| *role == victim) else {
            panic!("no idle {victim:?} in {idle:?}");
        };
        let (pgid, _) = group_and_state(pid).expect("stat");
        let members = group_members(pgid);
        assert_eq!(members.len(), 3, "reaper, agent and child: {members:?}");
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        wait_gone(&members);
    }
    // The daemon is still fine: the next run gets a new agent.
    let run_id = start_run(
        &mut shim,
        &mut id,
        context,
        &format!("{HEADER}return await agent('again');\n"),
    );
    wait_completed(&mut shim, &mut id, &run_id);
}

/// What the fault-injection test kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Daemon,
    Agent,
    Shim,
    Foreground,
}

const FAULTS: [Fault; 4] = [Fault::Daemon, Fault::Agent, Fault::Shim, Fault::Foreground];
/// How long each mock call takes.
const CALL_MS: u64 = 15;

/// SplitMix64: small, seedable, good enough to pick kill moments.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// What one iteration found.
#[derive(Debug, Default)]
struct Outcome {
    /// Calls journaled (or certainly answered) before the kill that were prompted again.
    reprompted: usize,
    /// Processes of the test's agents alive after their owner died, or after the end.
    leftovers: Vec<i32>,
}

/// The acceptance test: each iteration runs 10 to 20 sequential calls on agents that ignore
/// EOF and keep a child, SIGKILLs the daemon, an agent, the shim or the foreground run at a
/// random moment, recovers (resume of the same run id, a retried call, a new shim), and then
/// checks: the exact result, no journaled call prompted again, no agent process left, and an
/// intact store.
#[test]
fn fault_injection_loses_no_call_and_leaks_no_agent() {
    let seed = std::env::var("AGENTPRISM_FAULT_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|time| time.as_nanos() as u64)
                .unwrap_or(1)
        });
    let iterations: usize = std::env::var("AGENTPRISM_FAULT_ITERATIONS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(40);
    println!("fault injection: seed {seed} (AGENTPRISM_FAULT_SEED={seed} replays it)");
    let mut prng = Prng(seed);
    let started = Instant::now();
    let mut per_fault: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut reprompted = 0;
    let mut leftovers = Vec::new();
    for iteration in 0..iterations {
        let fault = FAULTS[iteration % FAULTS.len()];
        let calls = 10 + prng.below(11) as usize;
        // The kill comes while call `kill_after - 1` is with the agent, or just after.
        let kill_after = 1 + prng.below(calls as u64 - 1) as usize;
        let jitter = Duration::from_millis(prng.below(CALL_MS));
        let what = format!(
            "seed {seed}, iteration {iteration}: {fault:?} killed after prompt {kill_after} of {calls} (+{jitter:?})"
        );
        let outcome = inject(iteration, fault, calls, kill_after, jitter, &what);
        println!(
            "{what}: {} re-prompted, {} left over",
            outcome.reprompted,
            outcome.leftovers.len()
        );
        *per_fault.entry(fault).or_default() += 1;
        reprompted += outcome.reprompted;
        leftovers.extend(outcome.leftovers);
    }
    println!(
        "fault injection: seed {seed}, {iterations} iterations {per_fault:?} in {:?}; completed calls prompted again: {reprompted}; agent processes left: {}",
        started.elapsed(),
        leftovers.len()
    );
    assert_eq!(reprompted, 0, "seed {seed}: completed calls prompted again");
    assert!(
        leftovers.is_empty(),
        "seed {seed}: agent processes left: {leftovers:?}"
    );
}

/// One iteration in a world of its own (HOME, store, daemon family).
fn inject(
    iteration: usize,
    fault: Fault,
    calls: usize,
    kill_after: usize,
    jitter: Duration,
    what: &str,
) -> Outcome {
    let world = World::with(stubborn);
    let context = &world.context;
    let tag = format!("it{iteration}");
    let script = format!(
        "{HEADER}const out = [];\nfor (let i = 0; i < {calls}; i++) out.push(await agent('{tag} p' + i + '\\n@mock delay {CALL_MS}', {{ retries: 2 }}));\nreturn out;\n"
    );
    let prompt = |index: usize| format!("{tag} p{index}\n@mock delay {CALL_MS}");
    let expected: Vec<String> = (0..calls).map(|i| format!("ECHO: {tag} p{i}")).collect();
    let mut outcome = Outcome::default();
    // Calls settled before the kill: from the journal where the owner died, else those the
    // agent certainly answered (calls are sequential: prompt n is sent after call n-2 settled).
    let answered: Vec<usize> = (0..kill_after.saturating_sub(1)).collect();
    let (run_id, completed) = match fault {
        Fault::Foreground | Fault::Agent => {
            let path = context.write("wf.js", &script);
            let running = context.spawn(&["run", path.to_str().unwrap()]);
            wait_prompts(context, kill_after);
            std::thread::sleep(jitter);
            if fault == Fault::Foreground {
                let doomed = agent_side_pids(context);
                running.signal(Signal::SIGKILL);
                let killed = running.finish(DEADLINE);
                outcome
                    .leftovers
                    .extend(remaining_after(&doomed, GONE_WITHIN));
                let run_id = killed.run_id();
                let completed = journaled_calls(context, &run_id);
                let done = context.run(&["resume", &run_id]);
                assert_eq!(done.code(), 0, "{what}: resume failed: {}", done.stderr);
                assert_eq!(done.json(), json!(expected), "{what}");
                (run_id, completed)
            } else {
                let agents = agent_side(context);
                let Some(&(agent, _)) = agents
                    .iter()
                    .filter(|(_, role)| *role == Role::Agent)
                    .max_by_key(|(pid, _)| start_time(*pid))
                else {
                    panic!("{what}: no agent in {agents:?}");
                };
                let group = group_and_state(agent).map(|(pgid, _)| group_members(pgid));
                let _ = kill(Pid::from_raw(agent), Signal::SIGKILL);
                outcome
                    .leftovers
                    .extend(remaining_after(&group.unwrap_or_default(), GONE_WITHIN));
                let done = running.finish(DEADLINE);
                assert_eq!(done.code(), 0, "{what}: the run failed: {}", done.stderr);
                assert_eq!(done.json(), json!(expected), "{what}");
                (done.run_id(), answered)
            }
        }
        Fault::Daemon | Fault::Shim => {
            let mut shim = world.shim();
            shim.initialize();
            let mut id = 0;
            let run_id = start_run(&mut shim, &mut id, context, &script);
            wait_prompts(context, kill_after);
            std::thread::sleep(jitter);
            let completed = if fault == Fault::Daemon {
                let doomed = agent_side_pids(context);
                let daemon = world.pointer_pid();
                kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
                outcome
                    .leftovers
                    .extend(remaining_after(&doomed, GONE_WITHIN));
                let completed = journaled_calls(context, &run_id);
                tool_call(
                    &mut shim,
                    &mut id,
                    json!({"action": "resume", "runId": run_id}),
                );
                completed
            } else {
                let _ = killpg(Pid::from_raw(shim.pid()), Signal::SIGKILL);
                drop(shim);
                shim = world.shim();
                shim.initialize();
                // The daemon never died: no call at all may be prompted twice.
                (0..calls).collect()
            };
            wait_completed(&mut shim, &mut id, &run_id);
            let result = context.run(&["result", &run_id]);
            assert_eq!(result.code(), 0, "{what}: {}", result.stderr);
            assert_eq!(result.json(), json!(expected), "{what}");
            (run_id, completed)
        }
    };
    let sent = prompts(context);
    for index in 0..calls {
        let times = sent.iter().filter(|text| **text == prompt(index)).count();
        assert!(
            times >= 1,
            "{what}: call {index} of {run_id} never prompted"
        );
        if completed.contains(&index) {
            outcome.reprompted += times - 1;
        }
    }
    // The end of every owner: SIGKILL to every daemon; then nothing of the agents may remain.
    let mut daemons = world.daemon_pids();
    daemons.extend(world.daemon_processes());
    for daemon in daemons {
        let _ = kill(Pid::from_raw(daemon), Signal::SIGKILL);
    }
    let mut everything = agent_side_pids(context);
    everything.extend(pids_in(&context.path("pids")));
    everything.sort_unstable();
    everything.dedup();
    for pid in remaining_after(&everything, GONE_WITHIN) {
        if !outcome.leftovers.contains(&pid) {
            outcome.leftovers.push(pid);
        }
    }
    assert_eq!(
        integrity(&context.state().join("store.db")),
        "ok",
        "{what}: the store is damaged"
    );
    outcome
}

/// Indexes of the run's calls that the journal holds as settled without an error.
fn journaled_calls(context: &TestContext, run_id: &str) -> Vec<usize> {
    let status = context.status(run_id);
    assert_eq!(status["status"], "paused", "{status:#}");
    status["calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .filter(|call| {
                    call["kind"] == "agent"
                        && call.get("status").is_none()
                        && call.get("errorCode").is_none()
                })
                .filter_map(|call| call["index"].as_u64().map(|index| index as usize))
                .collect()
        })
        .unwrap_or_default()
}

fn integrity(database: &Path) -> String {
    let connection = rusqlite::Connection::open(database).expect("open the store");
    connection
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check")
}
