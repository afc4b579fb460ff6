//! What the pending gauge, the runs-by-state metrics and the housekeeping sweep ask of a
//! store ([`super::Store::run_counts`], [`super::Store::terminal_before`]), and the
//! trait's default answers computed from run summaries, for a backend without queries of
//! its own.

use crate::model::{RunId, RunStatus, RunSummary};

/// How many runs the store holds in each status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub pending: u64,
    pub running: u64,
    pub paused: u64,
    pub completed: u64,
    pub failed: u64,
    pub aborted: u64,
}

impl RunCounts {
    /// The counts of `runs`.
    pub(crate) fn of(runs: &[RunSummary]) -> RunCounts {
        let mut counts = RunCounts::default();
        for run in runs {
            counts.add(run.status, 1);
        }
        counts
    }

    /// The count of `status`.
    #[cfg(test)]
    pub(crate) fn get(&self, status: RunStatus) -> u64 {
        match status {
            RunStatus::Pending => self.pending,
            RunStatus::Running => self.running,
            RunStatus::Paused => self.paused,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Aborted => self.aborted,
        }
    }

    /// Adds `count` runs of `status`.
    pub(crate) fn add(&mut self, status: RunStatus, count: u64) {
        let slot = match status {
            RunStatus::Pending => &mut self.pending,
            RunStatus::Running => &mut self.running,
            RunStatus::Paused => &mut self.paused,
            RunStatus::Completed => &mut self.completed,
            RunStatus::Failed => &mut self.failed,
            RunStatus::Aborted => &mut self.aborted,
        };
        *slot += count;
    }

    /// Every run, whatever its status.
    pub fn total(&self) -> u64 {
        self.pending + self.running + self.paused + self.completed + self.failed + self.aborted
    }
}

/// The terminal runs of `runs` last updated before `before_ms`, oldest update first (then by
/// id), at most `limit`.
pub(super) fn terminal_before(runs: Vec<RunSummary>, before_ms: i64, limit: u32) -> Vec<RunId> {
    let mut finished: Vec<RunSummary> = runs
        .into_iter()
        .filter(|run| run.status.is_terminal() && run.updated_at < before_ms)
        .collect();
    finished
        .sort_by(|a, b| (a.updated_at, a.run_id.as_str()).cmp(&(b.updated_at, b.run_id.as_str())));
    finished
        .into_iter()
        .take(limit as usize)
        .map(|run| run.run_id)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn summary(id: &str, status: RunStatus, updated_at: i64) -> RunSummary {
        RunSummary {
            run_id: RunId::parse(id).unwrap(),
            project_dir: PathBuf::from("/p"),
            workflow_name: "w".to_owned(),
            status,
            pause_reason: None,
            started_at: 1,
            updated_at,
            has_result: false,
            summary: None,
        }
    }

    #[test]
    fn the_defaults_count_and_list_from_summaries() {
        let runs = vec![
            summary("a-000001", RunStatus::Running, 50),
            summary("a-000002", RunStatus::Completed, 30),
            summary("a-000004", RunStatus::Failed, 10),
            summary("a-000003", RunStatus::Aborted, 10),
            summary("a-000005", RunStatus::Paused, 1),
            summary("a-000006", RunStatus::Completed, 99),
        ];
        let counts = RunCounts::of(&runs);
        assert_eq!(
            (
                counts.running,
                counts.completed,
                counts.failed,
                counts.aborted,
                counts.paused
            ),
            (1, 2, 1, 1, 1)
        );
        assert_eq!(counts.get(RunStatus::Completed), 2);
        assert_eq!(counts.total(), 6);
        let listed = |before, limit| -> Vec<String> {
            terminal_before(runs.clone(), before, limit)
                .iter()
                .map(|id| id.as_str().to_owned())
                .collect()
        };
        assert_eq!(listed(99, 10), ["a-000003", "a-000004", "a-000002"]);
        assert_eq!(listed(100, 1), ["a-000003"]);
        assert!(listed(10, 10).is_empty());
    }
}
