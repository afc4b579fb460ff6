//! The engine at the limit (area `limit` of `docs/performance.md`): big fan-outs, admission
//! rates, live status and the daemon's memory growth, in one program, with the command and
//! the load average printed beside them.
//!
//! Two settings. The per-call CPU with the instant runner and the replay of
//! a 10,000-call journal are measured in this process (the engine bench's figures 1 and 3).
//! Everything else is a real `agentprism daemon run` (own HOME, persistence root, ephemeral
//! port) driven over keep-alive HTTP, with the release mock agent answering each prompt at
//! once at concurrency 16; the daemon's CPU, bytes written (`/proc/<pid>/io` `write_bytes`:
//! WAL frames and checkpoints), RSS and peak RSS (`VmHWM`, reset through `clear_refs`
//! before each run) are read from the kernel. "Admission" is the `run` tool call's round
//! trip (preparation and the dry run included); "end-to-end" runs until a `status` poll
//! sees the run completed (polled every 20 ms, which costs the daemon a few per cent of one
//! core).
//!
//! `cargo bench --bench limit` (build the mock agent first: `cargo build --release
//! --examples`); `-- --quick` divides the big sizes by ten for a short run.
//! `AGENTPRISM_BENCH_BINARY=<path>` runs another build's `agentprism` as the daemon (the
//! in-process figures stay this build's), to compare two commits under the same harness.
//! `AGENTPRISM_BENCH_ONLY=admission` measures the three admission rows only; with
//! `AGENTPRISM_BENCH_HOOK=<program>` it also makes [`PROFILED`] admissions first, running
//! `<program> on <daemon pid>` before and `<program> off <daemon pid>` after them (for
//! example a script calling `callgrind_control -i on|off` on a daemon started through
//! valgrind), so a profile covers admissions and nothing else.
//! `AGENTPRISM_BENCH_ONLY=fanout` measures the two fan-outs only; with the hook it first
//! makes one fan-out of [`PROFILED_CALLS`] calls whose script waits at a checkpoint before
//! it starts, and runs the hook's `on` before answering the checkpoint and its `off` once
//! the run completed, so the profile holds the fan-out's execution and nothing before it.

use std::process::ExitCode;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentprism::engine::ResumeRequest;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

mod support;

use support::World;
use support::http::{Client, Daemon, pid_cpu};
use support::measure::*;

/// Sequential instant-runner calls for the per-call CPU figure.
const INSTANT_CALLS: u32 = 10_000;
/// The fan-out sizes.
const FAN_OUTS: [u32; 2] = [1_000, 10_000];
const CONCURRENCY: u32 = 16;
/// Sequential 0-agent admissions for the p50.
const ADMISSIONS: usize = 100;
/// Clients (and projects) of the parallel figures, and how long each runs.
const CLIENTS: usize = 8;
const PARALLEL_WINDOW: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(20);

const ZERO_AGENT: &str = "export const meta = {name:'z', description:'d'};\nreturn 42;\n";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench limit: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    ensure!(
        cfg!(all(target_os = "linux", target_pointer_width = "64")),
        "this benchmark reads /proc and calls getrusage with the 64-bit Linux layout"
    );
    let quick = std::env::args().any(|arg| arg == "--quick");
    let scale = if quick { 10 } else { 1 };
    let binaries = Binaries::locate()?;
    let command: Vec<String> = std::env::args().collect();
    println!("command: {}", command.join(" "));
    println!("load average at start: {}", load_average());
    print_machine();
    let mut table = Table::default();

    instant_per_call(INSTANT_CALLS / scale, &mut table)?;
    replay(INSTANT_CALLS / scale, &mut table)?;

    let temp = tempfile::tempdir().context("creating a temporary folder")?;
    let mut world = World::new(temp.path(), "limit");
    let backends = json!({"mock": {"command": binaries.mock_agent.display().to_string()}});
    world
        .env
        .push(("AGENTPRISM_BACKENDS".into(), backends.to_string()));
    let daemon = Daemon::start(&world);
    let mut client = Client::connect(daemon.port);
    let project = world.project.display().to_string();
    if std::env::var("AGENTPRISM_BENCH_ONLY").as_deref() == Ok("admission") {
        if let Some(hook) = std::env::var_os("AGENTPRISM_BENCH_HOOK") {
            profiled_admissions(&daemon, &world, &mut client, &hook)?;
        }
        zero_agent_p50(&mut client, &project, &mut table)?;
        admission_with_history(&mut client, &world, scale, &mut table)?;
        admissions_per_second(&daemon, &world, &mut table)?;
        drop(daemon);
        print_table(&table);
        return Ok(());
    }

    if std::env::var("AGENTPRISM_BENCH_ONLY").as_deref() == Ok("fanout") {
        if let Some(hook) = std::env::var_os("AGENTPRISM_BENCH_HOOK") {
            profiled_fan_out(&daemon, &mut client, &project, &hook)?;
        }
        for size in FAN_OUTS {
            fan_out(&daemon, &mut client, &project, size / scale, &mut table)?;
        }
        drop(daemon);
        print_table(&table);
        return Ok(());
    }

    rss_growth(&daemon, &mut client, &project, &mut table)?;
    for size in FAN_OUTS {
        fan_out(&daemon, &mut client, &project, size / scale, &mut table)?;
    }
    zero_agent_p50(&mut client, &project, &mut table)?;
    admission_with_history(&mut client, &world, scale, &mut table)?;
    admissions_per_second(&daemon, &world, &mut table)?;
    live_status_per_second(&daemon, &mut client, &project, &mut table)?;
    drop(daemon);
    print_table(&table);
    Ok(())
}

fn print_table(table: &Table) {
    println!();
    println!("| figure | measured | goal |");
    println!("|---|---|---|");
    for (figure, measured, goal) in &table.rows {
        println!("| {figure} | {measured} | {goal} |");
    }
    println!("load average at end: {}", load_average());
}

/// The rows of the printed table: figure, measured value, goal.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String, &'static str)>,
}

impl Table {
    fn add(&mut self, figure: impl Into<String>, measured: String, goal: &'static str) {
        let figure = figure.into();
        println!("{figure}: {measured} (goal {goal})");
        support::figure("limit", &figure, &measured, goal);
        self.rows.push((figure, measured, goal));
    }
}

fn instant_per_call(calls: u32, table: &mut Table) -> Result<()> {
    runtime()?.block_on(async {
        let bench = InstantBench::new()?;
        let before = Sample::take();
        let run_id = bench.start(&sequential_script(calls, false)).await?;
        let admitted = Sample::take();
        wait_settled(&bench.engine, &run_id).await?;
        let settled = Sample::take();
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == u64::from(calls),
            "not every call prompted"
        );
        let execution = settled.since(&admitted);
        print_breakdown("instant admission (dry run)", &admitted.since(&before));
        print_breakdown("instant execution", &execution);
        table.add(
            format!("engine CPU per `agent()` call, instant runner ({calls} sequential calls)"),
            format!(
                "{:.0} µs ({:.1} KiB written per call)",
                micros(execution.cpu().as_secs_f64() / f64::from(calls)),
                execution.write_bytes as f64 / 1024.0 / f64::from(calls)
            ),
            "≤ 20 µs",
        );
        bench.engine.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

fn replay(calls: u32, table: &mut Table) -> Result<()> {
    runtime()?.block_on(async {
        let bench = InstantBench::new()?;
        let run_id = bench.start(&sequential_script(calls - 1, true)).await?;
        wait_settled(&bench.engine, &run_id).await?;
        let status = expect_status(&bench.engine, &run_id, "paused").await?;
        let checkpoint = status["outcome"]["checkpointContext"]["callIndex"]
            .as_u64()
            .context("the paused run names no waiting checkpoint")?;
        let prompts = bench.runner.prompts();
        let before = Sample::take();
        bench
            .engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: vec![(u32::try_from(checkpoint)?, json!(true))],
                ..ResumeRequest::default()
            })
            .await
            .context("resuming the paused run")?;
        wait_settled(&bench.engine, &run_id).await?;
        let total = Sample::take().since(&before);
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == prompts,
            "resume prompted an agent"
        );
        print_breakdown("replay", &total);
        table.add(
            format!("resume replaying a {calls}-call journal"),
            format!(
                "{:.2} s wall, {:.2} s CPU, {:.1} MiB written",
                total.wall.as_secs_f64(),
                total.cpu().as_secs_f64(),
                total.write_bytes as f64 / MIB
            ),
            "< 0.5 s",
        );
        bench.engine.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

/// Daemon RSS before and after 5 fan-outs of 100 calls and 50 small runs.
fn rss_growth(
    daemon: &Daemon,
    client: &mut Client,
    project: &str,
    table: &mut Table,
) -> Result<()> {
    // One of each first, so the agent pool, caches and arenas exist before the baseline.
    run_to_end(client, project, &concurrent_script(100, CONCURRENCY), 100)?;
    run_to_end(client, project, ZERO_AGENT, 0)?;
    support::settle();
    // Two rounds of the same work: a leak grows in each, a warm-up only in the first.
    let mut rounds = Vec::new();
    let mut before = support::rss_kib(daemon.pid);
    let start = before;
    for _ in 0..2 {
        for _ in 0..5 {
            run_to_end(client, project, &concurrent_script(100, CONCURRENCY), 100)?;
        }
        for _ in 0..50 {
            run_to_end(client, project, ZERO_AGENT, 0)?;
        }
        support::settle();
        let after = support::rss_kib(daemon.pid);
        rounds.push((after as f64 - before as f64) / 1024.0);
        before = after;
    }
    table.add(
        "daemon RSS growth after 5 fan-outs of 100 and 50 small runs, first round / second round",
        format!(
            "{:+.1} / {:+.1} MiB ({:.1} → {:.1} MiB)",
            rounds[0],
            rounds[1],
            start as f64 / 1024.0,
            before as f64 / 1024.0
        ),
        "< +2 MiB",
    );
    Ok(())
}

fn fan_out(
    daemon: &Daemon,
    client: &mut Client,
    project: &str,
    size: u32,
    table: &mut Table,
) -> Result<()> {
    let _ = std::fs::write(format!("/proc/{}/clear_refs", daemon.pid), "5");
    for child in descendants(daemon.pid) {
        let _ = std::fs::write(format!("/proc/{child}/clear_refs"), "5");
    }
    let children_cpu = children_cpu(daemon.pid);
    let cpu = pid_cpu(daemon.pid);
    let written = pid_write_bytes(daemon.pid);
    let started = Instant::now();
    let (run_id, admission) =
        start_run(client, project, &concurrent_script(size, CONCURRENCY), size)?;
    wait_for_end(client, &run_id)?;
    let end_to_end = started.elapsed();
    let cpu = pid_cpu(daemon.pid).saturating_sub(cpu);
    let written = pid_write_bytes(daemon.pid).saturating_sub(written);
    let peak = peak_kib(daemon.pid);
    let children_cpu = self::children_cpu(daemon.pid).saturating_sub(children_cpu);
    let children: Vec<i32> = descendants(daemon.pid);
    let children_peak: u64 = children.iter().map(|&child| peak_kib(child)).sum();
    table.add(
        format!("{size}-agent run: the daemon's children (the pooled mock agents): CPU / peak RSS, summed"),
        format!(
            "{:.2} s / {:.0} MiB ({} processes)",
            children_cpu.as_secs_f64(),
            children_peak as f64 / 1024.0,
            children.len()
        ),
        "",
    );
    table.add(
        format!("{size}-agent run: admission / end-to-end / daemon CPU / written / peak RSS"),
        format!(
            "{:.0} ms / {:.2} s / {:.2} s / {:.1} MiB / {:.0} MiB",
            millis(admission.as_secs_f64()),
            end_to_end.as_secs_f64(),
            cpu.as_secs_f64(),
            written as f64 / MIB,
            peak as f64 / 1024.0
        ),
        if size >= 10_000 {
            "< 150 ms / < 2 s / < 1 s / < 10 MiB / < 40 MiB"
        } else {
            "< 20 ms / < 0.3 s / < 0.1 s"
        },
    );
    table.add(
        format!("bytes written per settled call ({size}-call fan-out)"),
        format!("{:.2} KiB", written as f64 / 1024.0 / f64::from(size)),
        "≤ 1 KiB",
    );
    Ok(())
}

fn zero_agent_p50(client: &mut Client, project: &str, table: &mut Table) -> Result<()> {
    let p50 = admission_p50(client, project, ZERO_AGENT, ADMISSIONS)?;
    table.add(
        format!("0-agent run admission p50 ({ADMISSIONS} runs)"),
        format!("{:.2} ms", millis(p50.as_secs_f64())),
        "< 1 ms",
    );
    Ok(())
}

/// The median admission of `count` runs of the 0-agent `script`, each run waited for before
/// the next starts.
fn admission_p50(
    client: &mut Client,
    project: &str,
    script: &str,
    count: usize,
) -> Result<Duration> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let (run_id, admission) = start_run(client, project, script, 0)?;
        samples.push(admission);
        wait_for_end(client, &run_id)?;
    }
    Ok(support::percentile(&mut samples, 50))
}

/// Earlier runs of one workflow before [`admission_with_history`] times its admissions, and
/// their calls each.
const HISTORY: u32 = 10;
const HISTORY_CALLS: u32 = 1_000;
/// Admissions timed after them: fewer than the 30 newest runs the estimate looks at, since
/// each admitted run joins the workflow's history.
const HISTORY_ADMISSIONS: usize = 20;

/// The admission p50 of a 0-agent script whose project holds [`HISTORY`] earlier runs of the
/// same `meta.name` (`b`, the fan-outs' name) of [`HISTORY_CALLS`] calls each: what the size
/// estimate reads of a workflow's history at each admission. A project of its own, so the
/// other rows' runs do not count.
fn admission_with_history(
    client: &mut Client,
    world: &World,
    scale: u32,
    table: &mut Table,
) -> Result<()> {
    let dir = world.project.with_file_name("history");
    std::fs::create_dir_all(&dir).context("creating the history project")?;
    let project = dir.display().to_string();
    let calls = HISTORY_CALLS / scale;
    for _ in 0..HISTORY {
        run_to_end(
            client,
            &project,
            &concurrent_script(calls, CONCURRENCY),
            calls,
        )?;
    }
    let same_name = ZERO_AGENT.replace("name:'z'", "name:'b'");
    let p50 = admission_p50(client, &project, &same_name, HISTORY_ADMISSIONS)?;
    table.add(
        format!(
            "0-agent run admission p50 after {HISTORY} runs of {calls} calls of the same workflow ({HISTORY_ADMISSIONS} runs)"
        ),
        format!("{:.2} ms", millis(p50.as_secs_f64())),
        "< 1 ms",
    );
    Ok(())
}

/// Admissions made between the profiling hook's `on` and `off`.
const PROFILED: usize = 100;
/// Projects the profiled admissions rotate over: two runs each, so neither the per-project
/// cap nor the daemon-wide one refuses while executions lag under a profiler.
const PROFILED_PROJECTS: usize = PROFILED / 2;

/// [`PROFILED`] back-to-back admissions (no status polls between them), bracketed by the
/// hook, then a wait for every run to end outside the bracket.
fn profiled_admissions(
    daemon: &Daemon,
    world: &World,
    client: &mut Client,
    hook: &std::ffi::OsStr,
) -> Result<()> {
    let projects: Vec<String> = (0..PROFILED_PROJECTS)
        .map(|index| {
            let dir = world.project.with_file_name(format!("profiled{index}"));
            std::fs::create_dir_all(&dir).map(|()| dir.display().to_string())
        })
        .collect::<std::io::Result<_>>()
        .context("creating the profiled projects")?;
    run_hook(hook, "on", daemon.pid)?;
    let mut runs = Vec::with_capacity(PROFILED);
    for index in 0..PROFILED {
        let project = &projects[index % PROFILED_PROJECTS];
        runs.push(start_run(client, project, ZERO_AGENT, 0)?.0);
    }
    run_hook(hook, "off", daemon.pid)?;
    for run_id in &runs {
        wait_for_end(client, run_id)?;
    }
    println!("profiled {PROFILED} admissions between the hook's on and off");
    Ok(())
}

/// Calls of the fan-out [`profiled_fan_out`] brackets with the hook.
const PROFILED_CALLS: u32 = 5_000;

/// One fan-out of [`PROFILED_CALLS`] whose execution, and nothing else, runs between the
/// hook's `on` and `off`: its script waits at a checkpoint first, answered once `on` ran.
fn profiled_fan_out(
    daemon: &Daemon,
    client: &mut Client,
    project: &str,
    hook: &std::ffi::OsStr,
) -> Result<()> {
    let script = concurrent_script(PROFILED_CALLS, CONCURRENCY).replacen(
        "\n",
        "\nawait checkpoint('go?');\n",
        1,
    );
    let (run_id, _) = start_run(client, project, &script, PROFILED_CALLS + 1)?;
    wait_for_status(client, &run_id, "paused")?;
    run_hook(hook, "on", daemon.pid)?;
    let answer = tool_call(
        client,
        json!({"action": "resume", "runId": run_id, "checkpointReplies": {"0": true}}),
    );
    ensure!(
        answer["result"]["structuredContent"]["accepted"] == json!(true),
        "the checkpoint's answer was refused: {answer}"
    );
    wait_for_end(client, &run_id)?;
    run_hook(hook, "off", daemon.pid)?;
    println!(
        "profiled the execution of a {PROFILED_CALLS}-call fan-out between the hook's on and off"
    );
    Ok(())
}

fn run_hook(hook: &std::ffi::OsStr, phase: &str, pid: i32) -> Result<()> {
    support::run_hook(hook, phase, pid).map_err(anyhow::Error::msg)
}

fn wait_for_status(client: &mut Client, run_id: &str, wanted: &str) -> Result<()> {
    let deadline = Instant::now() + RUN_DEADLINE;
    while status_of(client, run_id)?["status"] != json!(wanted) {
        ensure!(
            Instant::now() < deadline,
            "run {run_id} never became {wanted}"
        );
        std::thread::sleep(POLL);
    }
    Ok(())
}

fn admissions_per_second(daemon: &Daemon, world: &World, table: &mut Table) -> Result<()> {
    let projects: Vec<String> = (0..CLIENTS)
        .map(|index| {
            let dir = world.project.with_file_name(format!("project{index}"));
            std::fs::create_dir_all(&dir).map(|()| dir.display().to_string())
        })
        .collect::<std::io::Result<_>>()
        .context("creating the clients' projects")?;
    // The first refusal's answer, printed: a refusal is not an admission, and the count alone
    // does not say whether a cap or an error refused it.
    let first_refusal = std::sync::Mutex::new(None::<String>);
    let cpu = pid_cpu(daemon.pid);
    let (admitted, failed) = in_parallel(daemon.port, |client, index, stop| {
        let (mut ok, mut failed) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            match start_run(client, &projects[index], ZERO_AGENT, 0) {
                Ok(_) => ok += 1,
                Err(error) => {
                    failed += 1;
                    if let Ok(mut first) = first_refusal.lock() {
                        first.get_or_insert_with(|| format!("{error:#}"));
                    }
                }
            }
        }
        (ok, failed)
    });
    let cpu = pid_cpu(daemon.pid).saturating_sub(cpu);
    if let Some(refusal) = first_refusal.into_inner().ok().flatten() {
        println!("first refused admission: {refusal}");
    }
    table.add(
        format!("0-agent admissions per second, {CLIENTS} clients in {CLIENTS} projects"),
        format!(
            "{:.0}/s ({failed} refused; daemon CPU {:.0} µs per admission)",
            admitted as f64 / PARALLEL_WINDOW.as_secs_f64(),
            micros(cpu.as_secs_f64() / admitted.max(1) as f64)
        ),
        "> 2,000/s",
    );
    Ok(())
}

fn live_status_per_second(
    daemon: &Daemon,
    client: &mut Client,
    project: &str,
    table: &mut Table,
) -> Result<()> {
    let script = "export const meta = {name:'h', description:'d', model:'mock'};\nawait agent('@mock hang');\nreturn 1;\n";
    let (run_id, _) = start_run(client, project, script, 1)?;
    let deadline = Instant::now() + RUN_DEADLINE;
    while status_of(client, &run_id)?["calls"]
        .as_array()
        .is_none_or(|calls| calls.is_empty())
    {
        ensure!(Instant::now() < deadline, "the held call never started");
        std::thread::sleep(POLL);
    }
    let cpu = pid_cpu(daemon.pid);
    let (answered, failed) = in_parallel(daemon.port, |client, _, stop| {
        let (mut ok, mut failed) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            match status_of(client, &run_id) {
                Ok(status) if status["status"] == "running" => ok += 1,
                _ => failed += 1,
            }
        }
        (ok, failed)
    });
    let cpu = pid_cpu(daemon.pid).saturating_sub(cpu);
    ensure!(failed == 0, "{failed} status calls did not answer running");
    table.add(
        format!("`status` calls per second on a live run, {CLIENTS} clients"),
        format!(
            "{:.0}/s (daemon CPU {:.0} µs per call)",
            answered as f64 / PARALLEL_WINDOW.as_secs_f64(),
            micros(cpu.as_secs_f64() / answered.max(1) as f64)
        ),
        "> 20,000/s",
    );
    Ok(())
}

/// Runs `work` on [`CLIENTS`] threads, each with its own connection, for
/// [`PARALLEL_WINDOW`]; the sums of what they return.
fn in_parallel(
    port: u16,
    work: impl Fn(&mut Client, usize, &AtomicBool) -> (u64, u64) + Sync,
) -> (u64, u64) {
    let stop = AtomicBool::new(false);
    let (ok, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let barrier = Barrier::new(CLIENTS + 1);
    std::thread::scope(|scope| {
        for index in 0..CLIENTS {
            let (work, stop, ok, failed, barrier) = (&work, &stop, &ok, &failed, &barrier);
            scope.spawn(move || {
                let mut client = Client::connect(port);
                barrier.wait();
                let (good, bad) = work(&mut client, index, stop);
                ok.fetch_add(good, Ordering::Relaxed);
                failed.fetch_add(bad, Ordering::Relaxed);
            });
        }
        barrier.wait();
        std::thread::sleep(PARALLEL_WINDOW);
        stop.store(true, Ordering::Relaxed);
    });
    (ok.into_inner(), failed.into_inner())
}

/// The `run` tool call: the run id and the call's round trip.
fn start_run(
    client: &mut Client,
    project: &str,
    script: &str,
    agents: u32,
) -> Result<(String, Duration)> {
    let mut arguments = json!({"action": "run", "projectDir": project, "script": script});
    if agents > 0 {
        arguments["maxAgents"] = json!(agents.max(1));
        arguments["concurrency"] = json!(CONCURRENCY);
    }
    let started = Instant::now();
    let answer = tool_call(client, arguments);
    let elapsed = started.elapsed();
    let run_id = answer["result"]["structuredContent"]["runId"]
        .as_str()
        .with_context(|| format!("the run was not admitted: {answer}"))?;
    Ok((run_id.to_owned(), elapsed))
}

fn run_to_end(client: &mut Client, project: &str, script: &str, agents: u32) -> Result<()> {
    let (run_id, _) = start_run(client, project, script, agents)?;
    wait_for_end(client, &run_id)
}

fn wait_for_end(client: &mut Client, run_id: &str) -> Result<()> {
    let deadline = Instant::now() + RUN_DEADLINE;
    loop {
        let status = status_of(client, run_id)?;
        match status["status"].as_str() {
            Some("completed") => return Ok(()),
            Some("running" | "pending") => {}
            _ => anyhow::bail!("run {run_id} ended other than completed: {status}"),
        }
        ensure!(
            Instant::now() < deadline,
            "run {run_id} did not end in time"
        );
        std::thread::sleep(POLL);
    }
}

fn status_of(client: &mut Client, run_id: &str) -> Result<Value> {
    let answer = tool_call(client, json!({"action": "status", "runId": run_id}));
    let status = &answer["result"]["structuredContent"];
    ensure!(status.is_object(), "no status document: {answer}");
    Ok(status.clone())
}

/// Request ids: a legacy session answers a repeated id with its first answer.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn tool_call(client: &mut Client, arguments: Value) -> Value {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    client.request(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "workflow", "arguments": arguments}}))
}

/// Every process below `pid` (children, theirs, …), from `/proc/*/stat`'s parent field.
fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let parent = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        index += 1;
    }
    found.remove(0);
    found
}

/// The CPU of `pid`'s live descendants plus what its reaped children used.
fn children_cpu(pid: i32) -> Duration {
    let live: Duration = descendants(pid)
        .into_iter()
        .map(|child| stat_ticks(child, &[14, 15]))
        .sum();
    // cutime and cstime: the children it waited for.
    live + stat_ticks(pid, &[16, 17])
}

/// The sum of `/proc/<pid>/stat`'s clock-tick fields `numbers` (1-based, proc(5)), as time;
/// zero for a process that is gone.
fn stat_ticks(pid: i32, numbers: &[usize]) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = numbers
        .iter()
        .filter_map(|&n| fields.get(n - 3)?.parse::<u64>().ok())
        .sum();
    Duration::from_secs_f64(ticks as f64 / support::http::clock_ticks_per_second() as f64)
}

fn pid_write_bytes(pid: i32) -> u64 {
    proc_field(&format!("/proc/{pid}/io"), "write_bytes:")
}

fn peak_kib(pid: i32) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), "VmHWM:")
}

fn proc_field(path: &str, name: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
