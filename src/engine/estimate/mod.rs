//! A run's size before it starts, what earlier runs say it will cost, and whether it needs a
//! confirmation.
//!
//! Preparation's dry run already walks the script's path with made-up answers, so it knows how
//! many agent calls the run starts and in which phases. This room turns those calls into a
//! `RunSize`, combines it with the token usage of earlier runs of the same workflow into an
//! `Estimate`, and decides with `decide` whether the run simply proceeds, proceeds with a warning,
//! or must be confirmed first. It is pure: the manager gathers the history and asks the
//! `ConfirmRun` port that the front ends fill. The size is the dry run's path, so a script whose
//! loops depend on real answers may start more calls than counted.

// The confirmation port, the refusal and the acknowledgement's summary wait for the manager's
// start path and the front ends to use them.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::model::EndSummary;

/// Above this many agent calls a run carries a warning in `warnings`.
pub(crate) const WARN_AGENTS: u32 = 25;

/// The confirmation threshold when `AGENTPRISM_CONFIRM_AGENTS` is unset.
pub(crate) const DEFAULT_CONFIRM_AGENTS: u32 = 100;

/// Named phases a size lists (`size.phases`, the confirmation's refusal); the others are
/// counted. A script may enter thousands.
pub(crate) const PHASES_LISTED: usize = 20;
/// Bytes of a phase title as the refusal shows it.
const TITLE_SHOWN: usize = 120;

/// At most this many earlier runs feed the token estimate, newest first.
pub(crate) const HISTORY_RUNS: usize = 10;

/// One call the dry run recorded, reduced to what the size needs.
#[derive(Clone, Debug)]
pub(crate) struct SizedCall<'a> {
    pub agent: bool,
    pub isolated: bool,
    pub phase: Option<&'a str>,
}

/// How many calls a run starts, on the dry run's path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSize {
    pub agents: u32,
    pub checkpoints: u32,
    pub isolated: u32,
    /// Agent calls per phase, in the order the phases first appear; calls outside any phase
    /// are counted under an empty title.
    pub phases: Vec<(String, u32)>,
}

impl RunSize {
    pub(crate) fn from_calls<'a>(calls: impl IntoIterator<Item = SizedCall<'a>>) -> Self {
        let mut size = RunSize::default();
        // Where each phase's count is: a script may give every call a phase of its own.
        let mut found: HashMap<&'a str, usize> = HashMap::new();
        for call in calls {
            if !call.agent {
                size.checkpoints += 1;
                continue;
            }
            size.agents += 1;
            if call.isolated {
                size.isolated += 1;
            }
            let title = call.phase.unwrap_or("");
            let at = *found.entry(title).or_insert_with(|| {
                size.phases.push((title.to_owned(), 0));
                size.phases.len() - 1
            });
            size.phases[at].1 += 1;
        }
        size
    }

    /// The phases shown: the first [`PHASES_LISTED`] named ones and the calls outside any
    /// phase, in the order they were entered; and how many named phases, with how many
    /// calls, are left out.
    pub(crate) fn listed(&self) -> (Vec<&(String, u32)>, usize, u32) {
        let mut named = 0;
        let (mut left_out, mut left_out_calls) = (0, 0);
        let mut listed = Vec::new();
        for phase in &self.phases {
            if phase.0.is_empty() {
                listed.push(phase);
            } else if named < PHASES_LISTED {
                named += 1;
                listed.push(phase);
            } else {
                left_out += 1;
                left_out_calls += phase.1;
            }
        }
        (listed, left_out, left_out_calls)
    }

    /// "Review 120, Verify 18, Report 2"; calls outside phases read "5 outside any phase";
    /// past [`PHASES_LISTED`] named phases, "and 980 more phases with 1960 calls".
    pub(crate) fn phase_list(&self) -> String {
        let (listed, left_out, left_out_calls) = self.listed();
        let mut parts: Vec<String> = listed
            .iter()
            .map(|(title, count)| {
                if title.is_empty() {
                    format!("{count} outside any phase")
                } else {
                    format!("{} {count}", crate::util::shortened(title, TITLE_SHOWN))
                }
            })
            .collect();
        if left_out > 0 {
            parts.push(format!(
                "and {left_out} more phases with {left_out_calls} calls"
            ));
        }
        parts.join(", ")
    }
}

/// Token usage of one earlier run: the tokens and live agent calls of the backends and models
/// that reported usage ([`PastRun::from_summary`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PastRun {
    pub tokens: u64,
    pub live_agent_calls: u32,
}

impl PastRun {
    /// What an earlier run spent by its summary: the tokens and live calls of the backends
    /// and models that reported usage (an agent that reports none says nothing of the cost).
    pub(crate) fn from_summary(summary: &EndSummary) -> PastRun {
        let reported = summary
            .usage
            .iter()
            .filter(|spent| spent.usage.total_tokens > 0);
        let (tokens, calls) = reported.fold((0u64, 0u64), |(tokens, calls), spent| {
            (
                tokens.saturating_add(spent.usage.total_tokens),
                calls.saturating_add(spent.calls),
            )
        });
        PastRun {
            tokens,
            live_agent_calls: u32::try_from(calls).unwrap_or(u32::MAX),
        }
    }
}

/// What the earlier runs of the same workflow say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct History {
    pub runs: u32,
    pub avg_tokens_per_call: f64,
}

/// The size plus, when history exists, the tokens it predicts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Estimate {
    pub size: RunSize,
    pub history: Option<History>,
    pub estimated_tokens: Option<u64>,
}

impl Estimate {
    /// `past` is newest first; runs without live agent calls say nothing and are skipped.
    pub(crate) fn new(size: RunSize, past: &[PastRun]) -> Self {
        let useful: Vec<&PastRun> = past
            .iter()
            .filter(|run| run.live_agent_calls > 0)
            .take(HISTORY_RUNS)
            .collect();
        let calls: u64 = useful
            .iter()
            .map(|run| u64::from(run.live_agent_calls))
            .sum();
        if calls == 0 {
            return Estimate {
                size,
                history: None,
                estimated_tokens: None,
            };
        }
        let tokens: u64 = useful.iter().map(|run| run.tokens).sum();
        let avg = tokens as f64 / calls as f64;
        let estimated = (avg * f64::from(size.agents)).round() as u64;
        Estimate {
            size,
            history: Some(History {
                runs: useful.len() as u32,
                avg_tokens_per_call: avg,
            }),
            estimated_tokens: Some(estimated),
        }
    }

    /// The `size` object of validate's JSON, the run acknowledgement and the CLI.
    pub(crate) fn to_json(&self, needs_confirmation: bool) -> Value {
        let (listed, left_out, left_out_calls) = self.size.listed();
        let phases: Vec<Value> = listed
            .iter()
            .map(|(title, agents)| json!({"title": title, "agents": agents}))
            .collect();
        let history = self.history.map(|history| {
            json!({"runs": history.runs, "avgTokensPerCall": history.avg_tokens_per_call.round() as u64})
        });
        let mut size = json!({
            "agents": self.size.agents,
            "checkpoints": self.size.checkpoints,
            "isolatedAgents": self.size.isolated,
            "phases": phases,
            "history": history,
            "estimatedTokens": self.estimated_tokens,
            "needsConfirmation": needs_confirmation,
        });
        if left_out > 0 {
            size["phasesNotListed"] = json!({"phases": left_out, "agents": left_out_calls});
        }
        size
    }
}

/// A `size` object (see [`Estimate::to_json`]) in words: "140 agent calls in 3 phases (≈1.2M
/// tokens, from 4 earlier runs)". The front ends print it with an admission.
pub fn describe(size: &Value) -> String {
    let agents = size["agents"].as_u64().unwrap_or(0);
    let listed = size["phases"].as_array().map_or(0, |phases| {
        phases.iter().filter(|p| p["title"] != "").count()
    });
    let named = listed + size["phasesNotListed"]["phases"].as_u64().unwrap_or(0) as usize;
    let mut text = format!("{agents} agent call{}", plural(agents as usize));
    if named > 0 {
        text.push_str(&format!(" in {named} phase{}", plural(named)));
    }
    if let (Some(tokens), Some(runs)) = (
        size["estimatedTokens"].as_u64(),
        size["history"]["runs"].as_u64(),
    ) {
        text.push_str(&format!(
            " (≈{} tokens, from {runs} earlier run{})",
            short_count(tokens),
            plural(runs as usize)
        ));
    }
    text
}

/// What the run does about its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Proceed,
    /// Proceeds, with this line in `warnings`.
    Warn(String),
    /// Must be confirmed first; the line is also the warning shown with the question.
    NeedsConfirmation(String),
}

/// `threshold` 0 turns confirmation off; an explicit `maxAgents` at or above the size confirms.
pub(crate) fn decide(size: &RunSize, threshold: u32, explicit_max_agents: Option<u32>) -> Decision {
    let warning = (size.agents > WARN_AGENTS).then(|| {
        format!(
            "this run will start {} agent calls (more than {WARN_AGENTS})",
            size.agents
        )
    });
    let confirmed = explicit_max_agents.is_some_and(|max| max >= size.agents);
    if threshold > 0 && size.agents > threshold && !confirmed {
        return Decision::NeedsConfirmation(warning.unwrap_or_else(|| {
            format!(
                "this run will start {} agent calls (more than {threshold})",
                size.agents
            )
        }));
    }
    match warning {
        Some(line) => Decision::Warn(line),
        None => Decision::Proceed,
    }
}

/// Reads the threshold from the value of `AGENTPRISM_CONFIRM_AGENTS` (unset → the default).
pub(crate) fn threshold_from(value: Option<&str>) -> Result<u32, String> {
    let Some(value) = value else {
        return Ok(DEFAULT_CONFIRM_AGENTS);
    };
    value.trim().parse::<u32>().map_err(|_| {
        format!(
            "{} must be a whole number of agent calls (0 turns confirmation off), got {value:?}",
            crate::env::CONFIRM_AGENTS
        )
    })
}

/// The refusal when a run above the threshold is not confirmed.
pub(crate) fn refusal_message(size: &RunSize, threshold: u32) -> String {
    format!(
        "this run starts {agents} agent calls ({phases}), above the confirmation threshold of \
         {threshold} ({var}); confirm with maxAgents: {agents} (CLI: --yes or --max-agents {agents})",
        agents = size.agents,
        phases = size.phase_list(),
        var = crate::env::CONFIRM_AGENTS,
    )
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// 950, 12.3k, 1.2M.
fn short_count(tokens: u64) -> String {
    match tokens {
        0..=999 => tokens.to_string(),
        1_000..=999_999 => format!("{:.1}k", tokens as f64 / 1_000.0),
        _ => format!("{:.1}M", tokens as f64 / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests;
