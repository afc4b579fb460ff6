//! The run's summary as a generation builds it: every agent call counts once as it settles
//! (live from its task, replayed from the journal), and a live call's usage goes to its
//! backend and model. Nothing is read back from the store: a generation of ten thousand
//! calls pays one map update per call, and the engine adds what earlier generations spent
//! from the run record's previous summary when it records the outcome ([`Tally::summary`]).

use std::collections::BTreeMap;

use crate::model::{CallCounts, CallKind, CallOrigin, CallOutcome, CallRecord, EndSummary};
use crate::model::{ModelUsage, Usage};

/// The counts and spend of the calls settled so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    calls: CallCounts,
    /// Live calls' spend by backend and model; ordered so the summary reads the same every
    /// time.
    spent: BTreeMap<(String, Option<String>), (u64, Usage)>,
}

impl Tally {
    /// Counts a settled row of the generation: an agent call, live or replayed (checkpoints
    /// are not counted), with a live call's usage.
    pub(crate) fn settled(&mut self, record: &CallRecord) {
        if record.kind != CallKind::Agent {
            return;
        }
        let calls = &mut self.calls;
        calls.total += 1;
        if record.origin == CallOrigin::JournalReplay {
            calls.replayed += 1;
            return;
        }
        calls.live += 1;
        calls.failed += u64::from(record.outcome != CallOutcome::Result);
        calls.retried += u64::from(record.attempts > 1);
        self.spend(record);
    }

    /// Adds a live row's usage to its backend and model, without counting the call in
    /// the generation's counts: what an earlier generation's row spent.
    pub(crate) fn spend(&mut self, record: &CallRecord) {
        let Some(backend) = &record.backend_id else {
            // No route, no agent: nothing ran, nothing was spent.
            return;
        };
        if record.attempts == 0 && record.usage.is_zero() {
            // Interrupted before its first attempt: it never reached the agent.
            return;
        }
        let model = record
            .model_resolved
            .clone()
            .or_else(|| record.model_requested.clone());
        let (calls, usage) = self.spent.entry((backend.clone(), model)).or_default();
        *calls += 1;
        usage.add(&record.usage);
    }

    /// The run's summary at the end of `generation`: this tally's calls, and its spend on
    /// top of what `earlier` (the run's previous summary) says earlier generations spent.
    pub(crate) fn summary(
        &self,
        generation: u32,
        duration_ms: u64,
        earlier: Option<&EndSummary>,
    ) -> EndSummary {
        let mut spent = self.spent.clone();
        for entry in earlier
            .map(|summary| summary.usage.as_slice())
            .unwrap_or(&[])
        {
            let key = (entry.backend.clone(), entry.model.clone());
            let (calls, usage) = spent.entry(key).or_default();
            *calls += entry.calls;
            usage.add(&entry.usage);
        }
        let mut total = Usage::default();
        let usage = spent
            .into_iter()
            .map(|((backend, model), (calls, usage))| {
                total.add(&usage);
                ModelUsage {
                    backend,
                    model,
                    calls,
                    usage,
                }
            })
            .collect();
        EndSummary {
            duration_ms,
            generation,
            calls: self.calls,
            usage,
            total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallError, ReplayInfo};

    fn call(backend: &str, model: &str, tokens: u64, cost: Option<f64>) -> CallRecord {
        CallRecord {
            label: Some("a".into()),
            result: Some(serde_json::json!("ok")),
            usage: Usage {
                input_tokens: tokens * 3 / 4,
                output_tokens: tokens / 4,
                total_tokens: tokens,
                cost_usd: cost,
            },
            model_requested: Some("tier".into()),
            model_resolved: Some(model.into()),
            backend_id: Some(backend.into()),
            settlement_ordinal: 0,
            ..CallRecord::agent_row(1, 0, "h")
        }
    }

    fn replayed(backend: &str, model: &str) -> CallRecord {
        CallRecord {
            origin: CallOrigin::JournalReplay,
            attempts: 0,
            usage: Usage::default(),
            replay: Some(ReplayInfo {
                source_generation: 1,
                recorded_index: 0,
                match_kind: "hash".into(),
            }),
            ..call(backend, model, 0, None)
        }
    }

    fn failed(backend: &str, model: &str, outcome: CallOutcome) -> CallRecord {
        CallRecord {
            outcome,
            result: None,
            error: Some(CallError {
                form: "agent".into(),
                code: "AGENT_TIMEOUT".into(),
                message: "slow".into(),
                recoverable: outcome == CallOutcome::Null,
            }),
            ..call(backend, model, 40, None)
        }
    }

    #[test]
    fn calls_are_counted_live_replayed_failed_and_retried() {
        let mut tally = Tally::default();
        tally.settled(&CallRecord {
            attempts: 2,
            ..call("claude", "sonnet", 100, None)
        });
        tally.settled(&replayed("claude", "sonnet"));
        tally.settled(&failed("claude", "sonnet", CallOutcome::Null));
        tally.settled(&failed("codex", "gpt", CallOutcome::Error));
        tally.settled(&CallRecord {
            kind: CallKind::Checkpoint,
            ..call("claude", "sonnet", 0, None)
        });
        let summary = tally.summary(1, 50, None);
        assert_eq!(
            summary.calls,
            CallCounts {
                total: 4,
                live: 3,
                replayed: 1,
                failed: 2,
                retried: 1,
            }
        );
        assert_eq!((summary.generation, summary.duration_ms), (1, 50));
    }

    #[test]
    fn usage_goes_to_each_backend_and_model_and_a_replay_spends_nothing() {
        let mut tally = Tally::default();
        tally.settled(&call("claude", "sonnet", 100, Some(0.5)));
        tally.settled(&call("claude", "sonnet", 20, None));
        tally.settled(&call("codex", "gpt", 8, None));
        tally.settled(&replayed("codex", "gpt"));
        let summary = tally.summary(1, 0, None);
        let shown: Vec<String> = summary
            .usage
            .iter()
            .map(|entry| {
                format!(
                    "{} {:?} {} {} {:?}",
                    entry.backend,
                    entry.model,
                    entry.calls,
                    entry.usage.total_tokens,
                    entry.usage.cost_usd
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "claude Some(\"sonnet\") 2 120 Some(0.5)",
                "codex Some(\"gpt\") 1 8 None",
            ]
        );
        assert_eq!(summary.total.total_tokens, 128);
        assert_eq!(summary.total.cost_usd, Some(0.5));
        assert_eq!(summary.total.input_tokens, 75 + 15 + 6);
    }

    #[test]
    fn without_any_reported_cost_the_total_has_none() {
        let mut tally = Tally::default();
        tally.settled(&call("codex", "gpt", 8, None));
        assert_eq!(tally.summary(1, 0, None).total.cost_usd, None);
    }

    #[test]
    fn a_later_generation_adds_its_spend_to_the_earlier_summary_and_counts_only_its_calls() {
        let mut first = Tally::default();
        first.settled(&call("claude", "sonnet", 100, Some(0.25)));
        first.settled(&call("codex", "gpt", 10, None));
        let earlier = first.summary(1, 10, None);
        let mut second = Tally::default();
        second.settled(&replayed("claude", "sonnet"));
        second.settled(&call("claude", "sonnet", 50, Some(0.25)));
        let summary = second.summary(2, 30, Some(&earlier));
        assert_eq!(summary.calls.total, 2);
        assert_eq!((summary.calls.live, summary.calls.replayed), (1, 1));
        assert_eq!(summary.usage[0].calls, 2);
        assert_eq!(summary.usage[0].usage.total_tokens, 150);
        assert_eq!(summary.usage[1].usage.total_tokens, 10);
        assert_eq!(summary.total.total_tokens, 160);
        assert_eq!(summary.total.cost_usd, Some(0.5));
    }

    #[test]
    fn a_call_without_a_backend_is_counted_but_spends_nothing() {
        let mut tally = Tally::default();
        tally.settled(&CallRecord {
            backend_id: None,
            ..call("x", "y", 0, None)
        });
        let summary = tally.summary(1, 0, None);
        assert_eq!(summary.calls.live, 1);
        assert!(summary.usage.is_empty());
    }
}
