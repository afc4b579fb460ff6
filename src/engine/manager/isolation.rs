//! Worktree isolation outside a generation: the base admission records for a run that asks
//! for isolation, and the start-up sweep of worktrees whose calls no longer run.
//!
//! A run gets a base when its dry run made an isolated call, when its script's code names
//! the option or the helper (a call the dry run did not reach), or when one of the
//! project's agent definitions isolates its calls. Finding the base runs git, so a run that
//! asks for none pays nothing. A run whose dry run made an isolated call in a folder that
//! cannot give a base is refused before anything is spent; a run that only names
//! isolation is admitted without a base, and an isolated call of it fails naming why.

use std::path::Path;

use crate::engine::driver::recorded_base;
use crate::engine::manager::{Engine, EngineError, EngineResult, Rejected};
use crate::engine::prepare::Prepared;
use crate::model::{RunId, RunStatus, WorkspaceBase};
use crate::store::StoreError;

impl Engine {
    /// The base a run admitted in `project_dir` records, and the warning admission gives
    /// with it (uncommitted changes are not in the base).
    pub(super) async fn admission_base(
        &self,
        project_dir: &Path,
        prepared: &Prepared,
    ) -> EngineResult<(Option<WorkspaceBase>, Option<String>)> {
        if !asks_for_isolation(prepared) {
            return Ok((None, None));
        }
        let Some(workspaces) = self.inner.workspaces.get() else {
            if prepared.isolated_calls > 0 {
                return Err(EngineError::Rejected(Rejected::Script(format!(
                    "{}: the script isolates calls (isolation: \"worktree\"), and worktree \
                     isolation is not available in this process",
                    project_dir.display()
                ))));
            }
            return Ok((None, None));
        };
        match workspaces.base(project_dir).await {
            Ok(base) => {
                let warning = base.dirty.then(|| {
                    format!(
                        "{} has uncommitted changes: isolated calls start from commit {} \
                         and do not see them; commit them first to include them",
                        project_dir.display(),
                        short(&base.commit)
                    )
                });
                Ok((Some(recorded_base(&base)), warning))
            }
            Err(error) if prepared.isolated_calls > 0 => Err(EngineError::Rejected(
                Rejected::Script(format!("isolation: \"worktree\" cannot run here: {error}")),
            )),
            Err(error) => Ok((
                None,
                Some(format!(
                    "the script asks for isolation, but isolated calls cannot run here: {error}"
                )),
            )),
        }
    }

    /// Removes the worktrees of every run not running now (a crash or a kill left them),
    /// keeping those of runs another live process executes; answers how many went. The
    /// daemon calls it at start-up, before it admits or resumes anything.
    pub async fn sweep_workspaces(&self) -> usize {
        let Some(workspaces) = self.inner.workspaces.get() else {
            return 0;
        };
        let mut ended = Vec::new();
        for folder in workspaces.runs().await {
            let Ok(run_id) = RunId::parse(&folder) else {
                ended.push(folder);
                continue;
            };
            match self.load_reconciled(&run_id).await {
                Ok(record) if record.status == RunStatus::Running => {}
                Ok(_) | Err(EngineError::UnknownRun(_)) => ended.push(folder),
                Err(EngineError::Store(StoreError::UnknownRun(_))) => ended.push(folder),
                // Unknown state: the run's worktrees stay for a later sweep.
                Err(error) => {
                    tracing::warn!(run = %run_id, "worktree sweep keeps the run's worktrees: {error}");
                }
            }
        }
        match workspaces.sweep(&ended).await {
            Ok(removed) => removed,
            Err(error) => {
                tracing::warn!("worktree sweep stopped: {error}");
                0
            }
        }
    }
}

/// Whether the run may make isolated calls: the dry run made one, the script's code names
/// the option or `isolated()`, or an agent definition of the project isolates.
fn asks_for_isolation(prepared: &Prepared) -> bool {
    prepared.isolated_calls > 0
        || names_isolation(&prepared.text)
        || prepared
            .routing
            .agents
            .values()
            .any(|definition| definition.isolation.is_some())
}

/// Whether `text` calls `isolated(` or sets an `isolation` key (`isolation:`, `"isolation":`,
/// `['isolation']:`): prose that merely says the word does not count.
fn names_isolation(text: &str) -> bool {
    if text.contains("isolated(") {
        return true;
    }
    text.match_indices("isolation").any(|(at, word)| {
        text[at + word.len()..]
            .trim_start_matches(['"', '\'', '`', ']', ' ', '\t'])
            .starts_with(':')
    })
}

/// A commit's first 12 digits, for messages.
fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::names_isolation;

    #[test]
    fn only_code_that_names_the_option_or_the_helper_counts() {
        assert!(names_isolation("agent(p, {isolation: 'worktree'})"));
        assert!(names_isolation("const o = {\"isolation\" : \"worktree\"};"));
        assert!(names_isolation("o['isolation']: 1"));
        assert!(names_isolation("await isolated('fix')"));
        assert!(!names_isolation("meta = { description: 'no isolation' }"));
        assert!(!names_isolation("// isolation is for later"));
    }
}
