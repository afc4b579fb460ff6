//! What the engine and limit benches share: an engine with the instant runner in its own
//! temporary store, the scripts they run, and this process's counters read from the kernel
//! (`getrusage` for CPU, `/proc/self/io` for bytes written, `VmHWM` for peak RSS).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::engine::instant::InstantRunner;
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::runner::AgentRunner;
use agentprism::engine::{
    Engine, EngineConfig, LimitOverrides, RunRequest, ScriptInput, StatusQuery,
};
use agentprism::env::EnvSnapshot;
use agentprism::model::RunId;
use agentprism::store::{SqliteStore, StoreSync};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

/// The most calls a run may make (the engine clamps `maxAgents` to it).
pub const MAX_AGENTS: u32 = 10_000;
/// How long a run may take before the benchmark gives up on it.
pub const RUN_DEADLINE: Duration = Duration::from_secs(120);
pub const MIB: f64 = 1024.0 * 1024.0;

/// The release executables the benchmark drives.
pub struct Binaries {
    pub agentprism: PathBuf,
    pub mock_agent: PathBuf,
}

impl Binaries {
    /// `cargo bench` builds the package's binaries for a bench target (that is where
    /// `CARGO_BIN_EXE_agentprism` points) but not its examples.
    pub fn locate() -> Result<Binaries> {
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

pub fn print_machine() {
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
// Driving the engine.
// ---------------------------------------------------------------------------------------

/// An engine with the instant runner and its own temporary store.
pub struct InstantBench {
    pub _dir: tempfile::TempDir,
    pub project: PathBuf,
    pub engine: Engine,
    pub runner: Arc<InstantRunner>,
}

impl InstantBench {
    pub fn new() -> Result<InstantBench> {
        let dir = tempfile::tempdir().context("creating a temporary folder")?;
        let project = project_dir(dir.path())?;
        let store = SqliteStore::open_with_sync(&dir.path().join("state"), store_sync()?)
            .context("opening the store")?;
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
    pub async fn start(&self, script: &str) -> Result<RunId> {
        start(&self.engine, &self.project, script, 1).await
    }

    /// A script that runs up to `concurrency` calls at once.
    pub async fn start_concurrent(&self, script: &str, concurrency: u32) -> Result<RunId> {
        start(&self.engine, &self.project, script, concurrency).await
    }
}

/// The store's durability for this bench, from `AGENTPRISM_STORE_SYNC` as the product reads
/// it, so one build measures both modes.
pub fn store_sync() -> Result<StoreSync> {
    StoreSync::from_env(&EnvSnapshot::capture()).map_err(anyhow::Error::msg)
}

/// The name of a durability in figure names.
pub fn store_sync_name(sync: StoreSync) -> &'static str {
    match sync {
        StoreSync::Full => "full",
        StoreSync::Normal => "normal",
    }
}

/// The runtime `agentprism` itself uses (multi-threaded, `MAIN_WORKERS` workers); one per
/// figure so that nothing carries over.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(agentprism::cli::MAIN_WORKERS)
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

pub fn project_dir(parent: &Path) -> Result<PathBuf> {
    let project = parent.join("project");
    std::fs::create_dir_all(&project).with_context(|| format!("creating {}", project.display()))?;
    std::fs::canonicalize(&project).with_context(|| format!("resolving {}", project.display()))
}

pub async fn start(
    engine: &Engine,
    project: &Path,
    script: &str,
    concurrency: u32,
) -> Result<RunId> {
    let admission = engine
        .start(RunRequest {
            project_dir: project.to_path_buf(),
            script: ScriptInput::Inline(script.to_owned()),
            args: json!({}),
            limits: LimitOverrides {
                max_agents: Some(i64::from(MAX_AGENTS)),
                concurrency: Some(i64::from(concurrency)),
                ..LimitOverrides::default()
            },
            caller: None,
            trace: None,
        })
        .await
        .context("starting the run")?;
    Ok(admission.run_id)
}

pub async fn wait_settled(engine: &Engine, run_id: &RunId) -> Result<()> {
    tokio::time::timeout(RUN_DEADLINE, engine.wait(run_id))
        .await
        .with_context(|| format!("run {run_id} did not settle within {RUN_DEADLINE:?}"))
}

pub async fn expect_status(engine: &Engine, run_id: &RunId, expected: &str) -> Result<Value> {
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
pub fn sequential_script(calls: u32, checkpoint: bool) -> String {
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
pub fn concurrent_script(calls: u32, width: u32) -> String {
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
pub struct Sample {
    pub at: Instant,
    pub user: Duration,
    pub system: Duration,
    /// `/proc/self/io` `write_bytes`: bytes this process caused to be sent to storage.
    pub write_bytes: u64,
    /// `/proc/self/io` `wchar`: bytes passed to write-like calls, pipes and sockets included.
    pub wchar: u64,
}

/// The difference between two samples.
pub struct Delta {
    pub wall: Duration,
    pub user: Duration,
    pub system: Duration,
    pub write_bytes: u64,
    pub wchar: u64,
}

impl Sample {
    pub fn take() -> Sample {
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

    pub fn since(&self, earlier: &Sample) -> Delta {
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
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

pub fn print_breakdown(label: &str, delta: &Delta) {
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
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub fn peak_rss_mib() -> f64 {
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
pub fn folder_bytes(folder: &Path) -> u64 {
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

pub fn micros(seconds: f64) -> f64 {
    seconds * 1e6
}

pub fn millis(seconds: f64) -> f64 {
    seconds * 1e3
}

pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// Whose CPU time `getrusage` reports.
#[derive(Clone, Copy)]
pub enum Who {
    Process,
    /// Terminated and reaped children, such as the mock agent after shutdown.
    Children,
}

/// `struct timeval` on 64-bit Linux.
#[repr(C)]
#[derive(Default)]
pub struct TimeValue {
    seconds: i64,
    microseconds: i64,
}

/// `struct rusage` on 64-bit Linux: the two times, then fourteen `long` counters.
#[repr(C)]
#[derive(Default)]
pub struct ResourceUsage {
    user: TimeValue,
    system: TimeValue,
    counters: [i64; 14],
}

unsafe extern "C" {
    fn getrusage(who: i32, usage: *mut ResourceUsage) -> i32;
}

/// User and system CPU time. `getrusage` rather than `/proc/self/stat`, whose clock ticks
/// (10 ms) are too coarse for a 100-call run, and the `nix` feature for it is not enabled.
pub fn cpu_times(who: Who) -> (Duration, Duration) {
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
