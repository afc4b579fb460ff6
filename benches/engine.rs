//! The engine's own figures (area `engine` of `docs/performance.md`): per-call overhead with
//! the in-process instant runner (sequential, and a 1,000-call fan-out), runs through the
//! mock ACP agent subprocess, replay of a 10,000-call journal on resume, and the
//! start-to-exit time of `agentprism run`. The store runs with the durability
//! `AGENTPRISM_STORE_SYNC` names, as the product would, so one build measures both modes.
//!
//! Run it with `cargo bench --bench engine` (add figure names such as `overhead floor fanout mock
//! replay cli` after `--` to run only some), or through `scripts/measure engine`. It is a
//! plain program, not a statistical harness: each
//! figure is one measured run in a fresh temporary store, read from the kernel's own
//! accounting (`getrusage` for CPU, `/proc/self/io` for bytes, `VmHWM` for peak RSS), so the
//! numbers mean the same thing as they would for a user's process. It needs the release
//! builds of `agentprism` (which `cargo bench` builds) and of the mock agent example (which it
//! does not), and says how to build what is missing.

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::acp::lookup::Backends;
use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::{Engine, EngineConfig, ResumeRequest};
use agentprism::env::EnvSnapshot;
use agentprism::store::SqliteStore;
use anyhow::{Context, Result, ensure};
use serde_json::json;

mod support;

use support::figure;
use support::measure::*;

/// Calls in the overhead run, and journal entries in the replay run. The engine clamps
/// `maxAgents` to 10,000 and counts a checkpoint as a call, so the replay run makes one
/// agent call fewer and ends on its checkpoint. `AGENTPRISM_BENCH_CALLS` sets another count
/// for both runs (a few hundred under callgrind, whose slowdown would otherwise push
/// the dry run past its fixed limit).
const OVERHEAD_CALLS: u32 = 10_000;
/// Under `valgrind --tool=callgrind --instr-atstart=no`, setting this variable makes the
/// overhead run switch instrumentation on (`callgrind_control -i on`) once the run is
/// admitted and off once it settles, so the profile holds the execution phase only; the
/// replay run switches it on for the resume and off once the resumed run settles.
const CALLGRIND_VARIABLE: &str = "AGENTPRISM_BENCH_CALLGRIND";
/// Call counts of the mock-agent runs.
const MOCK_CALLS: [u32; 2] = [100, 1_000];
/// Concurrency of the mock-agent runs, which is also the engine's upper clamp.
const MOCK_CONCURRENCY: u32 = 16;
/// Timed `agentprism run` invocations (after one untimed run that creates the store).
const CLI_RUNS: usize = 30;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench engine: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    ensure!(
        cfg!(all(target_os = "linux", target_pointer_width = "64")),
        "this benchmark reads /proc and calls getrusage with the 64-bit Linux layout; it runs on 64-bit Linux only"
    );
    // `cargo bench` passes `--bench`; every other word picks a figure.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let selected = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    // Only the subprocess figures need the binaries, so `overhead` and `replay` run without.
    let binaries = if selected("mock") || selected("cli") {
        Some(Binaries::locate()?)
    } else {
        None
    };

    print_machine();
    if selected("overhead") {
        overhead()?;
    }
    if selected("floor") {
        floor()?;
    }
    if selected("fanout") {
        fan_out()?;
    }
    if selected("telemetry") {
        telemetry_overhead()?;
    }
    if let (true, Some(binaries)) = (selected("mock"), &binaries) {
        for calls in MOCK_CALLS {
            mock_agent_run(binaries, calls)?;
        }
    }
    if selected("replay") {
        replay()?;
    }
    if let (true, Some(binaries)) = (selected("cli"), &binaries) {
        cli_start_to_exit(binaries)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figure 1: engine overhead per agent() call with the instant runner.
// ---------------------------------------------------------------------------------------

/// The overhead run's call count: `AGENTPRISM_BENCH_CALLS`, or [`OVERHEAD_CALLS`].
fn overhead_calls() -> Result<u32> {
    match std::env::var("AGENTPRISM_BENCH_CALLS") {
        Err(_) => Ok(OVERHEAD_CALLS),
        Ok(text) => {
            let calls: u32 = text.parse().with_context(|| {
                format!("AGENTPRISM_BENCH_CALLS is {text:?}, expected a call count from 1 to {OVERHEAD_CALLS}")
            })?;
            ensure!(
                (1..=OVERHEAD_CALLS).contains(&calls),
                "AGENTPRISM_BENCH_CALLS is {calls}, expected a call count from 1 to {OVERHEAD_CALLS}"
            );
            Ok(calls)
        }
    }
}

/// Switches callgrind's instrumentation of this process on or off when
/// [`CALLGRIND_VARIABLE`] is set; `callgrind_control` returns once callgrind has applied it.
fn callgrind_instrumentation(on: bool) -> Result<()> {
    if std::env::var_os(CALLGRIND_VARIABLE).is_none() {
        return Ok(());
    }
    let output = Command::new("callgrind_control")
        .arg("-i")
        .arg(if on { "on" } else { "off" })
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .output()
        .context("running callgrind_control (valgrind's tools must be on PATH)")?;
    ensure!(
        output.status.success(),
        "callgrind_control failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn overhead() -> Result<()> {
    let runtime = runtime()?;
    let overhead_calls = overhead_calls()?;
    runtime.block_on(async {
        let bench = InstantBench::new()?;
        let script = sequential_script(overhead_calls, false);
        reset_peak_rss();
        let before = Sample::take();
        let run_id = bench.start(&script).await?;
        let admitted = Sample::take();
        callgrind_instrumentation(true)?;
        // The run starts executing at admission, so a few calls may settle before
        // instrumentation is on; the profile's per-call figures divide by this count instead.
        let prompts_at_instrumentation = bench.runner.prompts();
        wait_settled(&bench.engine, &run_id).await?;
        let settled = Sample::take();
        callgrind_instrumentation(false)?;
        if std::env::var_os(CALLGRIND_VARIABLE).is_some() {
            println!(
                "callgrind: instrumented {} of {overhead_calls} calls",
                u64::from(overhead_calls) - prompts_at_instrumentation
            );
        }
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == u64::from(overhead_calls),
            "the instant runner answered {} prompts, expected {overhead_calls}",
            bench.runner.prompts()
        );

        let admission = admitted.since(&before);
        let execution = settled.since(&admitted);
        let calls = f64::from(overhead_calls);
        let per_call_cpu = execution.cpu().as_secs_f64() / calls;
        println!();
        println!(
            "[1] overhead: instant runner, {overhead_calls} sequential agent() calls: {:.1} µs CPU per call, {:.1} µs wall per call (goal ≤ 20 µs per call: {})",
            micros(per_call_cpu),
            micros(execution.wall.as_secs_f64() / calls),
            verdict(per_call_cpu <= 20e-6)
        );
        print_breakdown("admission (preparation incl. dry run)", &admission);
        print_breakdown("execution", &execution);
        println!(
            "    admission + execution per call: {:.1} µs CPU, {:.1} µs wall",
            micros((admission.cpu() + execution.cpu()).as_secs_f64() / calls),
            micros((admission.wall + execution.wall).as_secs_f64() / calls)
        );
        println!("    peak RSS: {:.1} MiB", peak_rss_mib());
        figure(
            "engine",
            &format!("CPU per `agent()` call, instant runner, {overhead_calls} sequential calls"),
            format!("{:.0} µs", micros(per_call_cpu)),
            "≤ 20 µs",
        );
        figure(
            "engine",
            "written per sequential call, instant runner",
            format!(
                "{:.1} KiB",
                execution.write_bytes as f64 / 1024.0 / calls
            ),
            "-",
        );
        figure(
            "engine",
            &format!("admission (dry run) of {overhead_calls} sequential calls: CPU"),
            format!("{:.0} ms", millis(admission.cpu().as_secs_f64())),
            "-",
        );
        bench.engine.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Figure 1b: the floor of a call's shape, without the engine.
// ---------------------------------------------------------------------------------------

/// Commits and round trips in each half of the floor figure.
const FLOOR_ROUNDS: u32 = 10_000;

/// What any sequential call of this design costs before the engine does anything of its
/// own: one write transaction holding a call row and an event block, on a SQLite file with
/// the store's settings and durability, and one round trip between a plain thread (the
/// script's) and a task on the product's runtime (the driver's), the message sent on a
/// tokio channel and the answer on a std one, as the VM and its driver exchange them.
fn floor() -> Result<()> {
    let sync = store_sync()?;
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let commit = floor_commits(&dir.path().join("floor.db"), store_sync_name(sync))?;
    let hop = floor_round_trips(Duration::ZERO)?;
    let lingering = floor_round_trips(FLOOR_LINGER)?;
    let per_commit = commit.cpu().as_secs_f64() / f64::from(FLOOR_ROUNDS);
    let per_hop = hop.cpu().as_secs_f64() / f64::from(FLOOR_ROUNDS);
    println!();
    println!(
        "[1b] floor: {FLOOR_ROUNDS} write transactions of a call row and a block (store at {}): {:.1} µs CPU ({:.1} user, {:.1} system), {:.2} KiB written each; {FLOOR_ROUNDS} thread-to-task round trips: {:.1} µs CPU ({:.1} user, {:.1} system), {:.1} µs wall each",
        store_sync_name(sync),
        micros(per_commit),
        micros(commit.user.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
        micros(commit.system.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
        commit.write_bytes as f64 / 1024.0 / f64::from(FLOOR_ROUNDS),
        micros(per_hop),
        micros(hop.user.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
        micros(hop.system.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
        micros(hop.wall.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
    );
    figure(
        "engine",
        "floor: CPU of a write transaction of a call row and a block",
        format!("{:.0} µs", micros(per_commit)),
        "-",
    );
    figure(
        "engine",
        "floor: CPU of a round trip between the script's thread and a task",
        format!("{:.0} µs", micros(per_hop)),
        "-",
    );
    let per_lingering = lingering.cpu().as_secs_f64() / f64::from(FLOOR_ROUNDS);
    println!(
        "    the same round trips with the task spinning up to {} µs for the next message: {:.1} µs CPU, {:.1} µs wall each",
        FLOOR_LINGER.as_micros(),
        micros(per_lingering),
        micros(lingering.wall.as_secs_f64() / f64::from(FLOOR_ROUNDS)),
    );
    figure(
        "engine",
        "floor: CPU of the same round trip, the task lingering",
        format!("{:.1} µs", micros(per_lingering)),
        "-",
    );
    Ok(())
}

/// [`FLOOR_ROUNDS`] transactions, each inserting a 220-byte row and a 160-byte block (the
/// sizes of an instant call's row and compressed event block) under the store's pragmas.
fn floor_commits(path: &std::path::Path, synchronous: &str) -> Result<Delta> {
    let connection = rusqlite::Connection::open(path).context("opening the floor's database")?;
    connection.pragma_update(None, "page_size", 1024)?;
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "the floor's database stayed in {mode} mode"
    );
    connection.pragma_update(None, "synchronous", synchronous)?;
    connection.execute_batch(
        "CREATE TABLE calls (key INTEGER PRIMARY KEY, body BLOB NOT NULL);
         CREATE TABLE blocks (key INTEGER PRIMARY KEY, body BLOB NOT NULL);",
    )?;
    let row: Vec<u8> = (0..220u32).map(|i| (i * 37 % 251) as u8).collect();
    let block: Vec<u8> = (0..160u32).map(|i| (i * 91 % 241) as u8).collect();
    let before = Sample::take();
    for key in 0..i64::from(FLOOR_ROUNDS) {
        connection.execute_batch("BEGIN IMMEDIATE")?;
        connection
            .prepare_cached("INSERT INTO calls (key, body) VALUES (?1, ?2)")?
            .execute(rusqlite::params![key, row])?;
        connection
            .prepare_cached("INSERT INTO blocks (key, body) VALUES (?1, ?2)")?
            .execute(rusqlite::params![key, block])?;
        connection.execute_batch("COMMIT")?;
    }
    Ok(Sample::take().since(&before))
}

/// How long the floor's task spins for the thread's next message after an answer, in the
/// lingering half: the driver's own linger (`LINGER` in `engine/driver`).
const FLOOR_LINGER: Duration = Duration::from_micros(50);

/// [`FLOOR_ROUNDS`] round trips: a plain thread sends on a tokio channel (as the script's
/// queue to its driver is) to a task on the product's runtime and blocks on a std channel
/// until the task answers. With `linger` above zero the task spins that long for the next
/// message before it waits.
fn floor_round_trips(linger: Duration) -> Result<Delta> {
    let runtime = runtime()?;
    // One round is outstanding at a time: a place for one message each way is enough.
    let (to_task, mut task_inbox) = tokio::sync::mpsc::channel::<u32>(1);
    let (to_thread, thread_inbox) = std::sync::mpsc::sync_channel::<u32>(1);
    let task = runtime.spawn(async move {
        let mut next = task_inbox.recv().await;
        while let Some(round) = next {
            if to_thread.send(round).is_err() {
                break;
            }
            let deadline = Instant::now() + linger;
            next = loop {
                match task_inbox.try_recv() {
                    Ok(round) => break Some(round),
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty)
                        if Instant::now() < deadline =>
                    {
                        std::hint::spin_loop()
                    }
                    Err(_) => break task_inbox.recv().await,
                }
            };
        }
    });
    let before = Sample::take();
    let thread = std::thread::spawn(move || -> Result<()> {
        for round in 0..FLOOR_ROUNDS {
            to_task
                .blocking_send(round)
                .map_err(|_| anyhow::anyhow!("the task ended early"))?;
            let answer = thread_inbox.recv().context("the task ended early")?;
            ensure!(answer == round, "round {round} was answered with {answer}");
        }
        Ok(())
    });
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("the floor's thread panicked"))??;
    let delta = Sample::take().since(&before);
    runtime.block_on(task)?;
    Ok(delta)
}

// ---------------------------------------------------------------------------------------
// Figure 1c: the same calls with telemetry off and on (OTLP to a loopback receiver).
// ---------------------------------------------------------------------------------------

/// Calls in each half of the telemetry figure.
const TELEMETRY_CALLS: u32 = 2_000;

/// CPU per sequential instant call with the port's `NoTelemetry`, then with the OpenTelemetry
/// exporter posting spans and metrics to a receiver on loopback (in this process: its reads
/// count too, which makes the "on" figure an upper bound). The exporters are shut down, their
/// last batch sent, inside the measured stretch.
fn telemetry_overhead() -> Result<()> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = receiver.local_addr()?.port();
        tokio::spawn(accept_and_drop(receiver));
        let script = sequential_script(TELEMETRY_CALLS, false);
        let mut figures = Vec::new();
        for on in [false, true] {
            let bench = InstantBench::new()?;
            if on {
                let env = EnvSnapshot::from_pairs([(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{port}"),
                )]);
                let config = agentprism::telemetry::TelemetryConfig::from_env(&env)
                    .map_err(anyhow::Error::msg)?
                    .context("telemetry configured")?;
                let exporter = agentprism::telemetry::OtelTelemetry::new(
                    &config,
                    tokio::runtime::Handle::current(),
                )
                .map_err(anyhow::Error::msg)?;
                bench.engine.set_telemetry(Arc::new(exporter));
            }
            let run_id = bench.start(&script).await?;
            let admitted = Sample::take();
            wait_settled(&bench.engine, &run_id).await?;
            bench.engine.shutdown(Duration::from_secs(5)).await;
            let execution = Sample::take().since(&admitted);
            expect_status(&bench.engine, &run_id, "completed").await?;
            let per_call = execution.cpu().as_secs_f64() / f64::from(TELEMETRY_CALLS);
            figures.push(per_call);
            println!(
                "[1c] telemetry {}: {TELEMETRY_CALLS} sequential instant calls: {:.1} µs CPU per call",
                if on { "on (OTLP to loopback)" } else { "off" },
                micros(per_call)
            );
        }
        figure(
            "engine",
            &format!("CPU per call, telemetry off / on, {TELEMETRY_CALLS} instant calls"),
            format!("{:.0} µs / {:.0} µs", micros(figures[0]), micros(figures[1])),
            "-",
        );
        Ok(())
    })
}

/// A receiver that reads each request and answers an empty 200, for the exporters to post to.
async fn accept_and_drop(listener: tokio::net::TcpListener) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 64 * 1024];
            let mut seen = Vec::new();
            loop {
                let Ok(read) = stream.read(&mut buffer).await else {
                    return;
                };
                if read == 0 {
                    return;
                }
                seen.extend_from_slice(&buffer[..read]);
                while let Some(length) = complete_request(&seen) {
                    seen.drain(..length);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

/// The length of the first whole request in `bytes` (head and `Content-Length` body).
fn complete_request(bytes: &[u8]) -> Option<usize> {
    let head = bytes.windows(4).position(|window| window == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&bytes[..head]).to_ascii_lowercase();
    let body: usize = text
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    (bytes.len() >= head + body).then_some(head + body)
}

// ---------------------------------------------------------------------------------------
// Figure 1b: a fan-out with the instant runner, where the journal's syncs show.
// ---------------------------------------------------------------------------------------

/// Calls in the fan-out run.
const FAN_OUT_CALLS: u32 = 1_000;

/// [`FAN_OUT_CALLS`] instant calls in `parallel` batches of [`MOCK_CONCURRENCY`]: the engine's
/// cost per settled call of a fan-out with the store's durability (`AGENTPRISM_STORE_SYNC`),
/// every call's journal commit included. The wall time is where a sync per commit shows.
fn fan_out() -> Result<()> {
    let runtime = runtime()?;
    let sync = store_sync_name(store_sync()?);
    runtime.block_on(async {
        let bench = InstantBench::new()?;
        let script = concurrent_script(FAN_OUT_CALLS, MOCK_CONCURRENCY);
        let run_id = bench.start_concurrent(&script, MOCK_CONCURRENCY).await?;
        let admitted = Sample::take();
        wait_settled(&bench.engine, &run_id).await?;
        let settled = Sample::take();
        expect_status(&bench.engine, &run_id, "completed").await?;
        let execution = settled.since(&admitted);
        let calls = f64::from(FAN_OUT_CALLS);
        println!();
        println!(
            "[1b] fan-out: instant runner, {FAN_OUT_CALLS} calls at concurrency {MOCK_CONCURRENCY}, store sync {sync}: {:.1} µs CPU, {:.1} µs wall per call; {:.0} ms wall in all",
            micros(execution.cpu().as_secs_f64() / calls),
            micros(execution.wall.as_secs_f64() / calls),
            millis(execution.wall.as_secs_f64())
        );
        print_breakdown("execution", &execution);
        figure(
            "engine",
            &format!(
                "instant runner, {FAN_OUT_CALLS}-call fan-out at concurrency {MOCK_CONCURRENCY}, store sync {sync}: CPU / wall per call"
            ),
            format!(
                "{:.0} µs / {:.0} µs",
                micros(execution.cpu().as_secs_f64() / calls),
                micros(execution.wall.as_secs_f64() / calls)
            ),
            "-",
        );
        bench.engine.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Figure 2: runs through the mock ACP agent subprocess at concurrency 16.
// ---------------------------------------------------------------------------------------

fn mock_agent_run(binaries: &Binaries, calls: u32) -> Result<()> {
    let runtime = runtime()?;
    let children_before = cpu_times(Who::Children);
    runtime.block_on(async {
        let dir = tempfile::tempdir().context("creating a temporary folder")?;
        let root = dir.path().join("state");
        let project = project_dir(dir.path())?;
        let backends = json!({"mock": {"command": binaries.mock_agent.display().to_string()}});
        let env = EnvSnapshot::from_pairs([
            ("AGENTPRISM_BACKENDS".to_owned(), backends.to_string()),
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ]);
        let lookup =
            Backends::from_env(&env).map_err(|e| anyhow::anyhow!("backend registry: {e}"))?;
        let store =
            SqliteStore::open_with_sync(&root, store_sync()?).context("opening the store")?;
        let runner = Arc::new(AcpRunner::new(AcpConfig::new(env.clone())));
        // Probing stays on, as for `agentprism run`: it is part of admission.
        let engine = Engine::new(
            Arc::new(store),
            runner,
            Arc::new(lookup),
            EngineConfig {
                home: Some(dir.path().to_path_buf()),
                probe: true,
                ..EngineConfig::default()
            },
        );
        let script = concurrent_script(calls, MOCK_CONCURRENCY);

        reset_peak_rss();
        let before = Sample::take();
        let run_id = start(&engine, &project, &script, MOCK_CONCURRENCY).await?;
        let admitted = Sample::take();
        wait_settled(&engine, &run_id).await?;
        let settled = Sample::take();
        expect_status(&engine, &run_id, "completed").await?;
        let peak = peak_rss_mib();
        let footprint = folder_bytes(&root);
        engine.shutdown(Duration::from_secs(5)).await;

        let admission = admitted.since(&before);
        let execution = settled.since(&admitted);
        let total = settled.since(&before);
        let per_call_cpu = total.cpu().as_secs_f64() / f64::from(calls);
        let written_per_100 = total.write_bytes as f64 / f64::from(calls) * 100.0;
        println!();
        println!(
            "[2] mock agent: {calls} calls at concurrency {MOCK_CONCURRENCY}: wall {:.0} ms, CPU {:.0} ms, written {:.2} MiB, peak RSS {peak:.1} MiB",
            millis(total.wall.as_secs_f64()),
            millis(total.cpu().as_secs_f64()),
            total.write_bytes as f64 / MIB
        );
        println!(
            "    CPU per call: {:.3} ms (goal < 0.2 ms: {})",
            millis(per_call_cpu),
            verdict(per_call_cpu < 0.2e-3)
        );
        println!(
            "    written per 100 calls: {:.3} MiB (goal < 1 MiB: {})",
            written_per_100 / MIB,
            verdict(written_per_100 < MIB)
        );
        print_breakdown("admission (preparation, probe, dry run)", &admission);
        print_breakdown("execution", &execution);
        println!(
            "    store folder after the run: {:.2} MiB (database, WAL, script copy)",
            footprint as f64 / MIB
        );
        figure(
            "engine",
            &format!("mock agent, {calls} calls at concurrency {MOCK_CONCURRENCY}: CPU per call"),
            format!("{:.2} ms", millis(per_call_cpu)),
            "< 0.2 ms",
        );
        figure(
            "engine",
            &format!("mock agent, {calls} calls: written per 100 calls"),
            format!("{:.2} MiB", written_per_100 / MIB),
            "< 1 MiB",
        );
        Ok::<(), anyhow::Error>(())
    })?;
    drop(runtime);
    // The agent process has been shut down and reaped by now, so its CPU shows up here.
    let children = cpu_times(Who::Children);
    let agent_cpu = (children.0 + children.1).saturating_sub(children_before.0 + children_before.1);
    println!(
        "    mock agent's own CPU (not ours): {:.0} ms",
        millis(agent_cpu.as_secs_f64())
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figure 3: resume replays a journal of 10,000 completed calls.
// ---------------------------------------------------------------------------------------

fn replay() -> Result<()> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let bench = InstantBench::new()?;
        let calls = overhead_calls()?;
        let script = sequential_script(calls - 1, true);
        let run_id = bench.start(&script).await?;
        wait_settled(&bench.engine, &run_id).await?;
        let status = expect_status(&bench.engine, &run_id, "paused").await?;
        let checkpoint = status["outcome"]["checkpointContext"]["callIndex"]
            .as_u64()
            .context("the paused run names no waiting checkpoint")?;
        let checkpoint =
            u32::try_from(checkpoint).context("the checkpoint index does not fit in u32")?;
        let prompts = bench.runner.prompts();

        reset_peak_rss();
        callgrind_instrumentation(true)?;
        let before = Sample::take();
        bench
            .engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: vec![(checkpoint, json!(true))],
                ..ResumeRequest::default()
            })
            .await
            .context("resuming the paused run")?;
        let admitted = Sample::take();
        wait_settled(&bench.engine, &run_id).await?;
        let settled = Sample::take();
        callgrind_instrumentation(false)?;
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == prompts,
            "resume prompted {} agents; every call should have replayed from the journal",
            bench.runner.prompts() - prompts
        );

        let total = settled.since(&before);
        println!();
        println!(
            "[3] replay: resume of a run with {calls} journaled calls ({} agent calls and a checkpoint): {:.0} ms wall, {:.0} ms CPU (goal < 0.5 s: {})",
            calls - 1,
            millis(total.wall.as_secs_f64()),
            millis(total.cpu().as_secs_f64()),
            verdict(total.wall < Duration::from_millis(500))
        );
        print_breakdown("resume() until admitted", &admitted.since(&before));
        print_breakdown("replay until settled", &settled.since(&admitted));
        println!("    peak RSS: {:.1} MiB", peak_rss_mib());
        figure(
            "engine",
            &format!("resume replaying a {calls}-call journal: wall / CPU / written"),
            format!(
                "{:.2} s / {:.2} s / {:.1} MiB",
                total.wall.as_secs_f64(),
                total.cpu().as_secs_f64(),
                total.write_bytes as f64 / MIB
            ),
            "< 0.5 s wall",
        );
        bench.engine.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Figure 4: `agentprism run` of a script without agents, process start to exit.
// ---------------------------------------------------------------------------------------

fn cli_start_to_exit(binaries: &Binaries) -> Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let project = project_dir(dir.path())?;
    let script = project.join("zero.js");
    std::fs::write(
        &script,
        "export const meta = {name:'z', description:'d'};\nreturn 42;\n",
    )
    .with_context(|| format!("writing {}", script.display()))?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
    let root = dir.path().join("state");

    let once = || -> Result<Duration> {
        let started = Instant::now();
        let output = Command::new(&binaries.agentprism)
            .arg("run")
            .arg(&script)
            .arg("--project-dir")
            .arg(&project)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("AGENTPRISM_PERSISTENCE_ROOT", &root)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", binaries.agentprism.display()))?;
        let elapsed = started.elapsed();
        ensure!(
            output.status.success() && String::from_utf8_lossy(&output.stdout).contains("42"),
            "agentprism run failed ({}): stdout {:?}, stderr {:?}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(elapsed)
    };
    // The first run creates the store; later runs find it, as a user's usually do.
    let first = once()?;
    let mut times = (0..CLI_RUNS).map(|_| once()).collect::<Result<Vec<_>>>()?;
    times.sort();
    let median = times[times.len() / 2];
    let p90 = times[(times.len() * 9).div_ceil(10) - 1];
    println!();
    println!(
        "[4] cli: `agentprism run` of a 0-agent script, start to exit, {CLI_RUNS} runs: min {:.1} ms, median {:.1} ms, p90 {:.1} ms, max {:.1} ms (goal < 20 ms: {})",
        millis(times[0].as_secs_f64()),
        millis(median.as_secs_f64()),
        millis(p90.as_secs_f64()),
        millis(times[times.len() - 1].as_secs_f64()),
        verdict(median < Duration::from_millis(20))
    );
    println!(
        "    first run (creates the store): {:.1} ms",
        millis(first.as_secs_f64())
    );
    figure(
        "engine",
        "`agentprism run` of a 0-agent script, start to exit: median",
        format!("{:.1} ms", millis(median.as_secs_f64())),
        "< 20 ms",
    );
    Ok(())
}
