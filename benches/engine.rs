//! The engine's performance figures, as `docs/performance.md` reports them: per-call overhead
//! with the in-process instant runner, runs through the mock ACP agent subprocess, replay of a
//! 10,000-call journal on resume, and the start-to-exit time of `agentprism run`.
//!
//! Run it with `cargo bench --bench engine` (add figure names such as `overhead mock replay
//! cli` after `--` to run only some). It is a plain program, not a statistical harness: each
//! figure is one measured run in a fresh temporary store, read from the kernel's own
//! accounting (`getrusage` for CPU, `/proc/self/io` for bytes, `VmHWM` for peak RSS), so the
//! numbers mean the same thing as they would for a user's process. It needs the release
//! builds of `agentprism` (which `cargo bench` builds) and of the mock agent example (which it
//! does not), and says how to build what is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::acp::lookup::Backends;
use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::instant::InstantRunner;
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::runner::AgentRunner;
use agentprism::engine::{
    Engine, EngineConfig, LimitOverrides, ResumeRequest, RunRequest, ScriptInput, StatusQuery,
};
use agentprism::env::EnvSnapshot;
use agentprism::model::RunId;
use agentprism::store::SqliteStore;
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

/// Calls in the overhead run, and journal entries in the replay run. The engine clamps
/// `maxAgents` to 10,000 and counts a checkpoint as a call, so the replay run makes one
/// agent call fewer and ends on its checkpoint.
const OVERHEAD_CALLS: u32 = 10_000;
/// Call counts of the mock-agent runs.
const MOCK_CALLS: [u32; 2] = [100, 1_000];
/// Concurrency of the mock-agent runs, which is also the engine's upper clamp.
const MOCK_CONCURRENCY: u32 = 16;
/// Timed `agentprism run` invocations (after one untimed run that creates the store).
const CLI_RUNS: usize = 30;
/// How long a run may take before the benchmark gives up on it.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

const MIB: f64 = 1024.0 * 1024.0;

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
    let binaries = Binaries::locate()?;
    // `cargo bench` passes `--bench`; every other word picks a figure.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let selected = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);

    print_machine();
    if selected("overhead") {
        overhead()?;
    }
    if selected("mock") {
        for calls in MOCK_CALLS {
            mock_agent_run(&binaries, calls)?;
        }
    }
    if selected("replay") {
        replay()?;
    }
    if selected("cli") {
        cli_start_to_exit(&binaries)?;
    }
    Ok(())
}

/// The release executables the benchmark drives.
struct Binaries {
    agentprism: PathBuf,
    mock_agent: PathBuf,
}

impl Binaries {
    /// `cargo bench` builds the package's binaries for a bench target (that is where
    /// `CARGO_BIN_EXE_agentprism` points) but not its examples.
    fn locate() -> Result<Binaries> {
        let agentprism = PathBuf::from(env!("CARGO_BIN_EXE_agentprism"));
        let mock_agent = agentprism
            .parent()
            .context("the agentprism binary has no parent directory")?
            .join("examples")
            .join("mock_acp_agent");
        let missing: Vec<&Path> = [agentprism.as_path(), mock_agent.as_path()]
            .into_iter()
            .filter(|path| !path.exists())
            .collect();
        if !missing.is_empty() {
            let list = missing
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            bail!(
                "missing {list}; build the release binaries and the mock agent first with:\n  cargo build --release --bins --examples"
            );
        }
        Ok(Binaries {
            agentprism,
            mock_agent,
        })
    }
}

fn print_machine() {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("machine: {cores} cores, {model}");
}

// ---------------------------------------------------------------------------------------
// Figure 1: engine overhead per agent() call with the instant runner.
// ---------------------------------------------------------------------------------------

fn overhead() -> Result<()> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let bench = InstantBench::new()?;
        let script = sequential_script(OVERHEAD_CALLS, false);
        reset_peak_rss();
        let before = Sample::take();
        let run_id = bench.start(&script).await?;
        let admitted = Sample::take();
        wait_settled(&bench.engine, &run_id).await?;
        let settled = Sample::take();
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == u64::from(OVERHEAD_CALLS),
            "the instant runner answered {} prompts, expected {OVERHEAD_CALLS}",
            bench.runner.prompts()
        );

        let admission = admitted.since(&before);
        let execution = settled.since(&admitted);
        let calls = f64::from(OVERHEAD_CALLS);
        let per_call_cpu = execution.cpu().as_secs_f64() / calls;
        println!();
        println!(
            "[1] overhead: instant runner, {OVERHEAD_CALLS} sequential agent() calls: {:.1} µs CPU per call, {:.1} µs wall per call (goal ≤ 20 µs per call: {})",
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
        let store = SqliteStore::open(&root).context("opening the store")?;
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
        let script = sequential_script(OVERHEAD_CALLS - 1, true);
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
        expect_status(&bench.engine, &run_id, "completed").await?;
        ensure!(
            bench.runner.prompts() == prompts,
            "resume prompted {} agents; every call should have replayed from the journal",
            bench.runner.prompts() - prompts
        );

        let total = settled.since(&before);
        println!();
        println!(
            "[3] replay: resume of a run with {OVERHEAD_CALLS} journaled calls ({} agent calls and a checkpoint): {:.0} ms wall, {:.0} ms CPU (goal < 1 s: {})",
            OVERHEAD_CALLS - 1,
            millis(total.wall.as_secs_f64()),
            millis(total.cpu().as_secs_f64()),
            verdict(total.wall < Duration::from_secs(1))
        );
        print_breakdown("resume() until admitted", &admitted.since(&before));
        print_breakdown("replay until settled", &settled.since(&admitted));
        println!("    peak RSS: {:.1} MiB", peak_rss_mib());
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
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Driving the engine.
// ---------------------------------------------------------------------------------------

/// An engine with the instant runner and its own temporary store.
struct InstantBench {
    _dir: tempfile::TempDir,
    project: PathBuf,
    engine: Engine,
    runner: Arc<InstantRunner>,
}

impl InstantBench {
    fn new() -> Result<InstantBench> {
        let dir = tempfile::tempdir().context("creating a temporary folder")?;
        let project = project_dir(dir.path())?;
        let store = SqliteStore::open(&dir.path().join("state")).context("opening the store")?;
        let runner = InstantRunner::new();
        let engine = Engine::new(
            Arc::new(store),
            runner.clone() as Arc<dyn AgentRunner>,
            Arc::new(NamedBackends::new(["mock"])),
            EngineConfig {
                home: Some(dir.path().to_path_buf()),
                probe: false,
                ..EngineConfig::default()
            },
        );
        Ok(InstantBench {
            _dir: dir,
            project,
            engine,
            runner,
        })
    }

    /// Sequential scripts: concurrency does not matter, so the default stands.
    async fn start(&self, script: &str) -> Result<RunId> {
        start(&self.engine, &self.project, script, 1).await
    }
}

/// The runtime `agentprism` itself uses; one per figure so that nothing carries over.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

fn project_dir(parent: &Path) -> Result<PathBuf> {
    let project = parent.join("project");
    std::fs::create_dir_all(&project).with_context(|| format!("creating {}", project.display()))?;
    std::fs::canonicalize(&project).with_context(|| format!("resolving {}", project.display()))
}

async fn start(engine: &Engine, project: &Path, script: &str, concurrency: u32) -> Result<RunId> {
    let admission = engine
        .start(RunRequest {
            project_dir: project.to_path_buf(),
            script: ScriptInput::Inline(script.to_owned()),
            args: json!({}),
            limits: LimitOverrides {
                max_agents: Some(i64::from(OVERHEAD_CALLS)),
                concurrency: Some(i64::from(concurrency)),
                ..LimitOverrides::default()
            },
            caller: None,
        })
        .await
        .context("starting the run")?;
    Ok(admission.run_id)
}

async fn wait_settled(engine: &Engine, run_id: &RunId) -> Result<()> {
    tokio::time::timeout(RUN_DEADLINE, engine.wait(run_id))
        .await
        .with_context(|| format!("run {run_id} did not settle within {RUN_DEADLINE:?}"))
}

async fn expect_status(engine: &Engine, run_id: &RunId, expected: &str) -> Result<Value> {
    let status = serde_json::to_value(
        engine
            .status(run_id, &StatusQuery::default())
            .await
            .context("reading the run's status")?,
    )?;
    ensure!(
        status["status"] == expected,
        "run {run_id} ended {} instead of {expected}: {status:#}",
        status["status"]
    );
    Ok(status)
}

/// `calls` agent calls one after another, each awaited before the next, so the run measures
/// the engine's per-call path; with `checkpoint` the run then pauses on a checkpoint.
fn sequential_script(calls: u32, checkpoint: bool) -> String {
    let pause = if checkpoint {
        "await checkpoint('done?');\n"
    } else {
        ""
    };
    format!(
        "export const meta = {{name:'b', description:'d', model:'mock'}};\nfor (let i = 0; i < {calls}; i++) await agent('p' + i);\n{pause}return 1;\n"
    )
}

/// `calls` agent calls in `parallel` batches of `width`.
fn concurrent_script(calls: u32, width: u32) -> String {
    format!(
        "export const meta = {{name:'b', description:'d', model:'mock'}};\n\
         for (let start = 0; start < {calls}; start += {width}) {{\n\
         \x20 const batch = [];\n\
         \x20 for (let i = start; i < Math.min(start + {width}, {calls}); i++) batch.push(() => agent('p' + i));\n\
         \x20 await parallel(batch);\n\
         }}\n\
         return 1;\n"
    )
}

// ---------------------------------------------------------------------------------------
// Measuring this process.
// ---------------------------------------------------------------------------------------

/// This process's counters at one moment.
struct Sample {
    at: Instant,
    user: Duration,
    system: Duration,
    /// `/proc/self/io` `write_bytes`: bytes this process caused to be sent to storage.
    write_bytes: u64,
    /// `/proc/self/io` `wchar`: bytes passed to write-like calls, pipes and sockets included.
    wchar: u64,
}

/// The difference between two samples.
struct Delta {
    wall: Duration,
    user: Duration,
    system: Duration,
    write_bytes: u64,
    wchar: u64,
}

impl Sample {
    fn take() -> Sample {
        let (user, system) = cpu_times(Who::Process);
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            io.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Sample {
            at: Instant::now(),
            user,
            system,
            write_bytes: field("write_bytes"),
            wchar: field("wchar"),
        }
    }

    fn since(&self, earlier: &Sample) -> Delta {
        Delta {
            wall: self.at - earlier.at,
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            wchar: self.wchar.saturating_sub(earlier.wchar),
        }
    }
}

impl Delta {
    fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

fn print_breakdown(label: &str, delta: &Delta) {
    println!(
        "    {label}: wall {:.1} ms, CPU {:.1} ms (user {:.1}, sys {:.1}), written to storage {:.1} KiB, write calls {:.1} KiB",
        millis(delta.wall.as_secs_f64()),
        millis(delta.cpu().as_secs_f64()),
        millis(delta.user.as_secs_f64()),
        millis(delta.system.as_secs_f64()),
        delta.write_bytes as f64 / 1024.0,
        delta.wchar as f64 / 1024.0
    );
}

/// Resets `VmHWM` to the current RSS (Linux 4.0+), so each figure reports its own peak.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:")?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Bytes of the files under `folder`, recursively.
fn folder_bytes(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => folder_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn micros(seconds: f64) -> f64 {
    seconds * 1e6
}

fn millis(seconds: f64) -> f64 {
    seconds * 1e3
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// Whose CPU time `getrusage` reports.
#[derive(Clone, Copy)]
enum Who {
    Process,
    /// Terminated and reaped children, such as the mock agent after shutdown.
    Children,
}

/// `struct timeval` on 64-bit Linux.
#[repr(C)]
#[derive(Default)]
struct TimeValue {
    seconds: i64,
    microseconds: i64,
}

/// `struct rusage` on 64-bit Linux: the two times, then fourteen `long` counters.
#[repr(C)]
#[derive(Default)]
struct ResourceUsage {
    user: TimeValue,
    system: TimeValue,
    counters: [i64; 14],
}

unsafe extern "C" {
    fn getrusage(who: i32, usage: *mut ResourceUsage) -> i32;
}

/// User and system CPU time. `getrusage` rather than `/proc/self/stat`, whose clock ticks
/// (10 ms) are too coarse for a 100-call run, and the `nix` feature for it is not enabled.
fn cpu_times(who: Who) -> (Duration, Duration) {
    let code = match who {
        Who::Process => 0,
        Who::Children => -1,
    };
    let mut usage = ResourceUsage::default();
    // SAFETY: `usage` is a live, writable `struct rusage` (64-bit Linux layout, checked at the
    // start of `run`), and getrusage writes only within it.
    let result = unsafe { getrusage(code, &mut usage) };
    if result != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let time = |value: &TimeValue| {
        Duration::from_secs(value.seconds.max(0) as u64)
            + Duration::from_micros(value.microseconds.max(0) as u64)
    };
    (time(&usage.user), time(&usage.system))
}
