//! A run's summary, "what a run cost at a glance": written on the run row whenever a
//! generation ends the run or pauses it, shown by status, `runs`, the CLI, the channel's
//! terminal notification and the monitor page. The call counts describe the generation that
//! ended; the usage adds up every generation's live calls, so a resumed run still says what
//! the whole run cost. The engine's driver fills it in as calls settle
//! (`engine::driver::summary`).

use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// The summary of a run at the end of its latest generation (`docs/api.md`, `summary`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndSummary {
    /// From the run's `startedAt` to the end of the generation that ended it.
    pub duration_ms: u64,
    /// The generation [`EndSummary::calls`] describes.
    pub generation: u32,
    pub calls: CallCounts,
    /// What live calls spent, per backend and model, over every generation.
    pub usage: Vec<ModelUsage>,
    /// The sum of [`EndSummary::usage`].
    pub total: Usage,
}

/// The agent calls (never checkpoints) one generation settled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallCounts {
    pub total: u64,
    /// Not answered from the journal: run (or queued to run) against an agent.
    pub live: u64,
    /// Answered from the journal of an earlier generation.
    pub replayed: u64,
    /// Settled with an error or `null`, an interrupted call among them.
    pub failed: u64,
    /// Live calls that needed more than one attempt.
    pub retried: u64,
}

/// What the live calls routed to one backend and model spent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelUsage {
    pub backend: String,
    /// The model the backend reported, or else the one the call asked for; absent when
    /// neither is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub calls: u64,
    #[serde(flatten)]
    pub usage: Usage,
}

impl EndSummary {
    /// One short line: `12 calls · 1.0k tok · $0.01` (the cost only where a backend
    /// reported one).
    pub fn line(&self) -> String {
        let calls = self.calls.total;
        let mut line = format!(
            "{calls} call{} · {} tok",
            if calls == 1 { "" } else { "s" },
            tokens_text(self.total.total_tokens)
        );
        if let Some(cost) = self.total.cost_usd {
            line.push_str(&format!(" · ${cost:.2}"));
        }
        line
    }
}

impl EndSummary {
    /// The summary a status document (JSON) carries, if it carries one.
    pub(crate) fn of_status(status: &serde_json::Value) -> Option<EndSummary> {
        serde_json::from_value(status.get("summary")?.clone()).ok()
    }

    /// [`EndSummary::line`] and how long the run took: `12 calls · 1.0k tok · $0.01 · 8.1s`.
    pub fn line_with_time(&self) -> String {
        format!("{} · {}", self.line(), duration_text(self.duration_ms))
    }

    /// The summary in words, for status texts: its line with the calls broken down, then one
    /// line per backend and model, each indented by `indent`.
    pub(crate) fn details(&self, indent: &str) -> Vec<String> {
        let calls = &self.calls;
        let mut lines = vec![format!(
            "{} (generation {}: {} live, {} replayed, {} failed, {} retried)",
            self.line_with_time(),
            self.generation,
            calls.live,
            calls.replayed,
            calls.failed,
            calls.retried
        )];
        for entry in &self.usage {
            let mut line = format!(
                "{indent}{} {}: {} call{}, {} tok ({} in, {} out)",
                entry.backend,
                entry.model.as_deref().unwrap_or("(model not reported)"),
                entry.calls,
                if entry.calls == 1 { "" } else { "s" },
                tokens_text(entry.usage.total_tokens),
                tokens_text(entry.usage.input_tokens),
                tokens_text(entry.usage.output_tokens),
            );
            if let Some(cost) = entry.usage.cost_usd {
                line.push_str(&format!(", ${cost:.2}"));
            }
            lines.push(line);
        }
        lines
    }
}

/// A duration in its largest units: `950ms`, `8.1s`, `2m 05s`, `1h 02m`.
pub(crate) fn duration_text(ms: u64) -> String {
    let seconds = ms / 1_000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{seconds}.{}s", ms % 1_000 / 100),
        60_000..3_600_000 => format!("{}m {:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h {:02}m", seconds / 3_600, seconds % 3_600 / 60),
    }
}

/// A token count in at most four characters and a unit: `950`, `1.0k`, `12k`, `3.4M`.
pub(crate) fn tokens_text(tokens: u64) -> String {
    let scaled = |value: u64, unit: u64, suffix: &str| {
        let whole = value / unit;
        if whole >= 10 {
            format!("{whole}{suffix}")
        } else {
            let tenths = (value % unit) * 10 / unit;
            format!("{whole}.{tenths}{suffix}")
        }
    };
    match tokens {
        0..1_000 => tokens.to_string(),
        1_000..1_000_000 => scaled(tokens, 1_000, "k"),
        _ => scaled(tokens, 1_000_000, "M"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_read_short() {
        let shown: Vec<String> = [0, 950, 1_000, 1_049, 9_999, 12_345, 999_999, 3_400_000]
            .into_iter()
            .map(tokens_text)
            .collect();
        assert_eq!(
            shown,
            ["0", "950", "1.0k", "1.0k", "9.9k", "12k", "999k", "3.4M"]
        );
    }

    #[test]
    fn durations_read_in_their_largest_units() {
        let shown: Vec<String> = [0, 950, 8_123, 59_999, 125_000, 3_720_000]
            .into_iter()
            .map(duration_text)
            .collect();
        assert_eq!(shown, ["0ms", "950ms", "8.1s", "59.9s", "2m 05s", "1h 02m"]);
    }

    #[test]
    fn the_details_break_the_calls_down_and_list_each_backend_and_model() {
        let mut summary: EndSummary =
            serde_json::from_value(serde_json::json!({
                "durationMs": 8123, "generation": 2,
                "calls": {"total": 12, "live": 3, "replayed": 9, "failed": 0, "retried": 1},
                "usage": [{"backend": "claude", "model": "sonnet", "calls": 3, "inputTokens": 900,
                           "outputTokens": 120, "totalTokens": 1020, "costUsd": 0.012},
                          {"backend": "mock", "calls": 1, "inputTokens": 1,
                           "outputTokens": 2, "totalTokens": 3}],
                "total": {"inputTokens": 901, "outputTokens": 122, "totalTokens": 1023, "costUsd": 0.012}
            }))
            .unwrap();
        assert_eq!(
            summary.details("  "),
            [
                "12 calls · 1.0k tok · $0.01 · 8.1s (generation 2: 3 live, 9 replayed, 0 failed, 1 retried)",
                "  claude sonnet: 3 calls, 1.0k tok (900 in, 120 out), $0.01",
                "  mock (model not reported): 1 call, 3 tok (1 in, 2 out)",
            ]
        );
        let status = serde_json::json!({"summary": summary});
        assert_eq!(EndSummary::of_status(&status).as_ref(), Some(&summary));
        summary.usage.clear();
        assert_eq!(EndSummary::of_status(&serde_json::json!({})), None);
    }

    #[test]
    fn the_line_names_calls_tokens_and_cost_only_when_reported() {
        let mut summary = EndSummary {
            calls: CallCounts {
                total: 12,
                ..CallCounts::default()
            },
            total: Usage {
                total_tokens: 1_020,
                ..Usage::default()
            },
            ..EndSummary::default()
        };
        assert_eq!(summary.line(), "12 calls · 1.0k tok");
        summary.total.cost_usd = Some(0.012);
        summary.calls.total = 1;
        assert_eq!(summary.line(), "1 call · 1.0k tok · $0.01");
    }

    #[test]
    fn it_serializes_to_the_documented_shape() {
        let summary = EndSummary {
            duration_ms: 8_123,
            generation: 2,
            calls: CallCounts {
                total: 12,
                live: 3,
                replayed: 9,
                failed: 0,
                retried: 1,
            },
            usage: vec![ModelUsage {
                backend: "claude".into(),
                model: Some("sonnet".into()),
                calls: 3,
                usage: Usage {
                    input_tokens: 900,
                    output_tokens: 120,
                    total_tokens: 1_020,
                    cost_usd: Some(0.012),
                },
            }],
            total: Usage {
                input_tokens: 900,
                output_tokens: 120,
                total_tokens: 1_020,
                cost_usd: Some(0.012),
            },
        };
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "durationMs": 8123, "generation": 2,
                "calls": {"total": 12, "live": 3, "replayed": 9, "failed": 0, "retried": 1},
                "usage": [{"backend": "claude", "model": "sonnet", "calls": 3, "inputTokens": 900,
                           "outputTokens": 120, "totalTokens": 1020, "costUsd": 0.012}],
                "total": {"inputTokens": 900, "outputTokens": 120, "totalTokens": 1020, "costUsd": 0.012}
            })
        );
        let back: EndSummary = serde_json::from_value(json).unwrap();
        assert_eq!(back, summary);
    }
}
