//! The settings of an engine, and the default of its daemon-wide cap on runs.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::manager::MAX_ACTIVE_RUNS;
use crate::engine::prepare;
use crate::engine::vm::VmLimits;
use crate::store::LeasePolicy;
use crate::timers::AutoResumePolicy;

/// Settings of an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Per-attempt ceiling of an agent turn.
    pub agent_timeout: Duration,
    /// How long a call whose prompt begins like an in-flight call's waits for that call's
    /// answer to begin (`crate::prompt_cache`); zero: never.
    pub prompt_cache_hold: Duration,
    /// The time slice and heap cap of every script VM (also what [`default_max_runs`]
    /// divides memory by).
    pub vm_limits: VmLimits,
    /// `AGENTPRISM_ALLOW_SCRIPT_BACKENDS`: approve `meta.backends` without a setup answer.
    pub allow_script_backends: bool,
    /// The user's home, for agent definitions in `~/.agentprism/agents`.
    pub home: Option<PathBuf>,
    /// Probe routed backends during preparation.
    pub probe: bool,
    /// How long the probes of one preparation may take together (`AGENTPRISM_PROBE_TIMEOUT_MS`);
    /// a probe unfinished by then rejects the run.
    pub probe_limit: Duration,
    /// The `ownerId` of this engine's leases. A daemon passes its `instanceId`, so a lease
    /// names the daemon whose control socket can act on the run (daemon.md 1.10 step 3);
    /// `None` (other processes) picks a fresh uuid.
    pub owner_id: Option<String>,
    /// `AGENTPRISM_DAEMON_MAX_RUNS`: runs this engine prepares or executes at once, across
    /// every project. Runs waiting for a setup answer hold no VM and do not count.
    pub max_runs: usize,
    /// Runs one project may have preparing, awaiting setup or executing at once
    /// ([`MAX_ACTIVE_RUNS`] by default). The folder server raises it: every run it starts
    /// shares its folder as the project.
    pub max_active_per_project: usize,
    /// When a lease another process holds may be taken over, and how often this engine's
    /// executions renew their own (`LeasePolicy`). The daemon and the CLI keep
    /// `HolderLiveness`: a live holder's lease is never taken on time.
    pub lease_policy: LeasePolicy,
    /// The persistence root, where preparation reads the model tiers
    /// (`<root>/model-tiers.json`). Handed in by the composition root so the engine never asks
    /// the store for a path; `None` reads no tiers file.
    pub persistence_root: Option<PathBuf>,
    /// `AGENTPRISM_AUTO_RESUME`: whether, and how often in a row, a run paused on a usage
    /// limit with a known reset resumes by itself (`src/timers/`).
    pub auto_resume: AutoResumePolicy,
    /// The user's folder of saved workflows (`library::user_folder`), where `workflow(name)`
    /// looks after the project's folder; `None` looks in the project and the bundled library
    /// only.
    pub user_workflows: Option<PathBuf>,
    /// `AGENTPRISM_CONFIRM_AGENTS`: agent calls above which a new run needs a confirmation
    /// (0: never).
    pub confirm_agents: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            agent_timeout: Duration::from_secs(30 * 60),
            prompt_cache_hold: crate::prompt_cache::DEFAULT_HOLD,
            vm_limits: VmLimits::default(),
            allow_script_backends: false,
            home: None,
            probe: true,
            probe_limit: prepare::PROBE_LIMIT,
            owner_id: None,
            max_runs: default_max_runs(VmLimits::default().memory_limit),
            max_active_per_project: MAX_ACTIVE_RUNS,
            lease_policy: LeasePolicy::HolderLiveness,
            persistence_root: None,
            auto_resume: AutoResumePolicy::default(),
            user_workflows: None,
            confirm_agents: crate::engine::estimate::DEFAULT_CONFIRM_AGENTS,
        }
    }
}

/// The default of [`EngineConfig::max_runs`]: `max(2, MemTotal / (4 × heap cap))`, so the
/// script heaps of every admitted run together stay under a quarter of the machine's
/// memory. Where `/proc/meminfo` cannot be read (macOS), 8 GiB is assumed.
pub fn default_max_runs(memory_limit: usize) -> usize {
    use crate::util::safe_file::{Links, read_blocking};
    let total = read_blocking(
        std::path::Path::new("/proc/meminfo"),
        64 * 1024,
        Links::Refuse,
    )
    .ok()
    .and_then(|contents| mem_total_bytes(&String::from_utf8_lossy(&contents.bytes)))
    .unwrap_or(8 << 30);
    max_runs_for(total, memory_limit as u64)
}

fn max_runs_for(mem_total: u64, memory_limit: u64) -> usize {
    let per_run = memory_limit.max(1).saturating_mul(4);
    usize::try_from(mem_total / per_run)
        .unwrap_or(usize::MAX)
        .max(2)
}

/// `MemTotal:  16318480 kB` in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let amount: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        None => 1,
        Some(_) => return None,
    };
    amount.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_is_a_quarter_of_memory_in_script_heaps() {
        let meminfo = "MemTotal:       16318480 kB\nMemFree:         1234 kB\n";
        let total = mem_total_bytes(meminfo).unwrap();
        assert_eq!(total, 16318480 * 1024);
        // 15.56 GiB / (4 × 64 MiB) = 62.2
        assert_eq!(max_runs_for(total, 64 << 20), 62);
        assert_eq!(max_runs_for(total, 48 << 20), 83);
        // Never below 2, however small the machine or large the heap.
        assert_eq!(max_runs_for(512 << 20, 64 << 20), 2);
        assert_eq!(max_runs_for(total, 8 << 30), 2);
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        assert!(default_max_runs(64 << 20) >= 2);
    }
}
