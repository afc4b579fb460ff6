//! Unit tests for the run size, the history estimate and the confirmation rule.

use super::*;

fn calls(spec: &[(&'static str, u32)]) -> RunSize {
    let mut all = Vec::new();
    for (phase, count) in spec {
        for _ in 0..*count {
            all.push(SizedCall {
                agent: true,
                isolated: false,
                phase: Some(phase),
            });
        }
    }
    RunSize::from_calls(all)
}

#[test]
fn size_counts_agents_per_phase_in_first_seen_order_and_checkpoints_apart() {
    let list = vec![
        SizedCall {
            agent: true,
            isolated: true,
            phase: Some("Review"),
        },
        SizedCall {
            agent: false,
            isolated: false,
            phase: Some("Review"),
        },
        SizedCall {
            agent: true,
            isolated: false,
            phase: Some("Verify"),
        },
        SizedCall {
            agent: true,
            isolated: false,
            phase: Some("Review"),
        },
        SizedCall {
            agent: true,
            isolated: false,
            phase: None,
        },
    ];
    let size = RunSize::from_calls(list);
    assert_eq!(size.agents, 4);
    assert_eq!(size.checkpoints, 1);
    assert_eq!(size.isolated, 1);
    assert_eq!(
        size.phases,
        vec![
            ("Review".to_owned(), 2),
            ("Verify".to_owned(), 1),
            (String::new(), 1)
        ]
    );
    assert_eq!(size.phase_list(), "Review 2, Verify 1, 1 outside any phase");
}

#[test]
fn warning_starts_above_twenty_five() {
    assert_eq!(decide(&calls(&[("A", 25)]), 100, None), Decision::Proceed);
    assert!(
        matches!(decide(&calls(&[("A", 26)]), 100, None), Decision::Warn(line) if line.contains("26 agent calls"))
    );
}

#[test]
fn confirmation_above_threshold_unless_explicit_max_agents_covers_it_or_threshold_is_zero() {
    let size = calls(&[("A", 60), ("B", 41)]);
    assert!(matches!(
        decide(&size, 100, None),
        Decision::NeedsConfirmation(_)
    ));
    assert!(matches!(
        decide(&size, 100, Some(100)),
        Decision::NeedsConfirmation(_)
    ));
    assert!(matches!(decide(&size, 100, Some(101)), Decision::Warn(_)));
    assert!(matches!(decide(&size, 0, None), Decision::Warn(_)));
    assert!(matches!(
        decide(&calls(&[("A", 100)]), 100, None),
        Decision::Warn(_)
    ));
}

#[test]
fn threshold_defaults_to_one_hundred_and_names_the_variable_on_bad_input() {
    assert_eq!(threshold_from(None), Ok(100));
    assert_eq!(threshold_from(Some("0")), Ok(0));
    assert_eq!(threshold_from(Some("250")), Ok(250));
    let error = threshold_from(Some("abc")).unwrap_err();
    assert!(error.contains("AGENTPRISM_CONFIRM_AGENTS"), "{error}");
    assert!(threshold_from(Some("-1")).is_err());
}

#[test]
fn estimate_averages_the_newest_ten_runs_with_live_calls() {
    let mut past = vec![PastRun {
        tokens: 0,
        live_agent_calls: 0,
    }];
    past.extend((0..12).map(|i| PastRun {
        tokens: 100 * (i + 1),
        live_agent_calls: 2,
    }));
    let estimate = Estimate::new(calls(&[("A", 3)]), &past);
    let history = estimate.history.expect("history");
    assert_eq!(history.runs, 10);
    // Runs 1..=10 of the list with calls: tokens 100..=1000, 20 calls.
    assert_eq!(history.avg_tokens_per_call, 5500.0 / 20.0);
    assert_eq!(estimate.estimated_tokens, Some(825));
    assert_eq!(
        describe(&estimate.to_json(false)),
        "3 agent calls in 1 phase (≈825 tokens, from 10 earlier runs)"
    );
}

#[test]
fn a_summary_gives_the_tokens_and_calls_of_the_models_that_reported_usage() {
    use crate::model::{ModelUsage, Usage};
    let spent = |backend: &str, calls: u64, total_tokens: u64| ModelUsage {
        backend: backend.to_owned(),
        model: None,
        calls,
        usage: Usage {
            total_tokens,
            ..Usage::default()
        },
    };
    let summary = EndSummary {
        usage: vec![
            spent("claude", 3, 900),
            spent("mine", 5, 0),
            spent("codex", 1, 100),
        ],
        ..EndSummary::default()
    };
    let past = PastRun::from_summary(&summary);
    assert_eq!((past.tokens, past.live_agent_calls), (1_000, 4));
    let silent = PastRun::from_summary(&EndSummary {
        usage: vec![spent("mine", 5, 0)],
        ..EndSummary::default()
    });
    assert_eq!((silent.tokens, silent.live_agent_calls), (0, 0));
}

#[test]
fn no_history_gives_null_estimate() {
    let estimate = Estimate::new(calls(&[("A", 2), ("B", 1)]), &[]);
    let value = estimate.to_json(false);
    assert_eq!(value["history"], Value::Null);
    assert_eq!(value["estimatedTokens"], Value::Null);
    assert_eq!(value["agents"], 3);
    assert_eq!(value["phases"][1], json!({"title": "B", "agents": 1}));
    assert_eq!(
        describe(&estimate.to_json(false)),
        "3 agent calls in 2 phases"
    );
}

#[test]
fn refusal_names_phases_threshold_variable_and_how_to_confirm() {
    let message = refusal_message(&calls(&[("Review", 120), ("Verify", 20)]), 100);
    for part in [
        "140 agent calls",
        "Review 120, Verify 20",
        "threshold of 100",
        "AGENTPRISM_CONFIRM_AGENTS",
        "maxAgents: 140",
        "--yes",
        "--max-agents 140",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
}

#[test]
fn past_twenty_named_phases_the_size_counts_the_rest() {
    let titles: Vec<String> = (0..10_000).map(|i| format!("p{i}")).collect();
    let mut all: Vec<SizedCall> = titles
        .iter()
        .map(|title| SizedCall {
            agent: true,
            isolated: false,
            phase: Some(title),
        })
        .collect();
    all.push(SizedCall {
        agent: true,
        isolated: false,
        phase: None,
    });
    let size = RunSize::from_calls(all);
    assert_eq!(size.phases.len(), 10_001, "every phase is counted");
    let json = Estimate::new(size.clone(), &[]).to_json(false);
    let phases = json["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), PHASES_LISTED + 1, "{json}");
    assert_eq!(phases[0], json!({"title": "p0", "agents": 1}));
    assert_eq!(phases[PHASES_LISTED], json!({"title": "", "agents": 1}));
    assert_eq!(
        json["phasesNotListed"],
        json!({"phases": 10_000 - PHASES_LISTED, "agents": 10_000 - PHASES_LISTED})
    );
    assert_eq!(describe(&json), "10001 agent calls in 10000 phases");
    let list = size.phase_list();
    assert!(
        list.ends_with("p19 1, 1 outside any phase, and 9980 more phases with 9980 calls"),
        "{list}"
    );

    let named = |count: usize| {
        RunSize::from_calls(titles[..count].iter().map(|title| SizedCall {
            agent: true,
            isolated: false,
            phase: Some(title),
        }))
    };
    let json = Estimate::new(named(PHASES_LISTED), &[]).to_json(false);
    assert!(json.get("phasesNotListed").is_none(), "{json}");
    assert_eq!(json["phases"].as_array().map(Vec::len), Some(PHASES_LISTED));
    let json = Estimate::new(named(PHASES_LISTED + 1), &[]).to_json(false);
    assert_eq!(json["phasesNotListed"], json!({"phases": 1, "agents": 1}));
}
