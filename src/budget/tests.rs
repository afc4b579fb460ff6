//! The budget policy's rules and edges: parsing and refusing limits, merging on resume,
//! the stop at exactly the limit, the call that crosses it, replay, the 80% warning once,
//! units no backend reports, and the script's view.

use serde_json::{Map, Value, json};

use super::*;

fn usage(total: u64, cost: Option<f64>) -> Usage {
    Usage {
        input_tokens: 0,
        output_tokens: 0,
        total_tokens: total,
        cost_usd: cost,
    }
}

fn fields(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

fn tokens(limit: u64) -> RunBudget {
    RunBudget {
        limits: SpendLimits {
            tokens: Some(limit),
            cost_usd: None,
        },
    }
}

fn cost(limit: f64) -> RunBudget {
    RunBudget {
        limits: SpendLimits {
            tokens: None,
            cost_usd: Some(limit),
        },
    }
}

#[test]
fn limits_read_both_fields_and_ignore_others() {
    let parsed = limits(
        &fields(json!({"tokenBudget": 50000, "costBudgetUsd": 2.5, "maxAgents": 3})),
        "",
    )
    .unwrap();
    assert_eq!(parsed.tokens, Some(50_000));
    assert_eq!(parsed.cost_usd, Some(2.5));
}

#[test]
fn absent_or_null_fields_set_no_limit() {
    assert!(limits(&fields(json!({})), "").unwrap().is_none());
    let nulls = json!({"tokenBudget": null, "costBudgetUsd": null});
    assert!(limits(&fields(nulls), "").unwrap().is_none());
}

#[test]
fn whole_valued_floats_count_as_token_integers() {
    let parsed = limits(&fields(json!({"tokenBudget": 5e4})), "").unwrap();
    assert_eq!(parsed.tokens, Some(50_000));
}

#[test]
fn bad_token_budgets_are_refused_naming_the_field() {
    for bad in [
        json!(0),
        json!(-5),
        json!(1.5),
        json!("1000"),
        json!(true),
        json!([1]),
        json!(1e300),
    ] {
        let error = limits(&fields(json!({ "tokenBudget": bad })), "").unwrap_err();
        assert_eq!(error.field, "tokenBudget", "for {bad}");
        assert!(
            error
                .to_string()
                .starts_with("tokenBudget must be a positive integer"),
            "for {bad}: {error}"
        );
    }
    let error = limits(&fields(json!({"tokenBudget": -1})), "").unwrap_err();
    assert!(error.to_string().ends_with("got -1"), "{error}");
}

#[test]
fn bad_cost_budgets_are_refused_naming_the_field() {
    for bad in [json!(0), json!(-0.01), json!("2"), json!(false), json!({})] {
        let error = limits(&fields(json!({ "costBudgetUsd": bad })), "").unwrap_err();
        assert_eq!(error.field, "costBudgetUsd", "for {bad}");
        assert!(
            error
                .to_string()
                .starts_with("costBudgetUsd must be a positive number"),
            "for {bad}: {error}"
        );
    }
}

#[test]
fn meta_errors_name_the_meta_field() {
    let error = limits(&fields(json!({"tokenBudget": "lots"})), "meta.").unwrap_err();
    assert_eq!(error.field, "meta.tokenBudget");
    assert!(
        error.to_string().contains("got the string \"lots\""),
        "{error}"
    );
}

#[test]
fn arguments_override_meta_limit_by_limit() {
    let arguments = limits(&fields(json!({"tokenBudget": 10})), "").unwrap();
    let meta = limits(
        &fields(json!({"tokenBudget": 99, "costBudgetUsd": 1.0})),
        "meta.",
    )
    .unwrap();
    let merged = arguments.or(meta);
    assert_eq!(merged.tokens, Some(10));
    assert_eq!(merged.cost_usd, Some(1.0));
}

#[test]
fn a_call_may_start_below_the_limit_and_not_exactly_at_it() {
    let budget = tokens(1000);
    assert_eq!(budget.may_start(&usage(999, None)), Ok(()));
    let exhausted = budget.may_start(&usage(1000, None)).unwrap_err();
    assert_eq!(
        exhausted,
        Exhausted {
            kind: LimitKind::Tokens,
            spent: 1000.0,
            limit: 1000.0
        }
    );
}

#[test]
fn the_call_that_crosses_the_limit_counts_whole_and_stops_the_next() {
    let budget = tokens(1000);
    let before = usage(900, None);
    assert_eq!(budget.may_start(&before), Ok(()));
    let after = settle(&before, &usage(250, None), false);
    assert_eq!(spent_tokens(&after), 1150);
    let exhausted = budget.may_start(&after).unwrap_err();
    assert_eq!(exhausted.spent, 1150.0);
    let reason = exhausted.to_string();
    assert!(reason.contains("1150 of 1000 tokens"), "{reason}");
    assert!(reason.contains("tokenBudget"), "{reason}");
}

#[test]
fn the_cost_limit_stops_calls_and_its_reason_shows_dollars() {
    let budget = cost(0.3);
    let spent = settle(&usage(10, Some(0.1)), &usage(10, Some(0.2)), false);
    let exhausted = budget.may_start(&spent).unwrap_err();
    assert_eq!(exhausted.kind, LimitKind::CostUsd);
    assert!(
        exhausted
            .to_string()
            .contains("$0.3 of $0.3 spent (costBudgetUsd)"),
        "{exhausted}"
    );
}

#[test]
fn no_limit_never_stops_a_call() {
    let budget = RunBudget::default();
    assert_eq!(budget.may_start(&usage(u64::MAX, Some(1e9))), Ok(()));
    assert!(
        budget
            .crossed(&usage(0, None), &usage(u64::MAX, None))
            .is_empty()
    );
}

#[test]
fn a_replayed_call_adds_nothing() {
    let before = usage(700, Some(0.5));
    let after = settle(&before, &usage(300, Some(0.25)), true);
    assert_eq!(after, before);
    assert!(tokens(1000).crossed(&before, &after).is_empty());
}

#[test]
fn a_live_call_adds_all_its_usage() {
    let call = Usage {
        input_tokens: 5,
        output_tokens: 7,
        total_tokens: 12,
        cost_usd: Some(0.01),
    };
    let after = settle(&usage(100, None), &call, false);
    assert_eq!(spent_tokens(&after), 112);
    assert_eq!(spent_cost_usd(&after), 0.01);
}

#[test]
fn tokens_without_a_total_are_input_plus_output() {
    let parts = Usage {
        input_tokens: 40,
        output_tokens: 2,
        total_tokens: 0,
        cost_usd: None,
    };
    assert_eq!(spent_tokens(&parts), 42);
}

#[test]
fn the_warning_fires_on_the_call_that_reaches_80_percent_and_only_then() {
    let budget = tokens(1000);
    assert!(
        budget
            .crossed(&usage(0, None), &usage(799, None))
            .is_empty()
    );
    assert_eq!(
        budget.crossed(&usage(799, None), &usage(800, None)),
        vec![LimitKind::Tokens]
    );
    assert!(
        budget
            .crossed(&usage(800, None), &usage(900, None))
            .is_empty()
    );
    // A call jumping past both the threshold and the limit still warns once.
    assert_eq!(
        budget.crossed(&usage(10, None), &usage(5000, None)),
        vec![LimitKind::Tokens]
    );
}

#[test]
fn the_warning_is_per_limit() {
    let budget = RunBudget {
        limits: SpendLimits {
            tokens: Some(100),
            cost_usd: Some(1.0),
        },
    };
    let crossed = budget.crossed(&usage(50, Some(0.5)), &usage(90, Some(0.9)));
    assert_eq!(crossed, vec![LimitKind::Tokens, LimitKind::CostUsd]);
    let crossed = budget.crossed(&usage(90, Some(0.5)), &usage(95, Some(0.85)));
    assert_eq!(crossed, vec![LimitKind::CostUsd]);
}

#[test]
fn resume_raises_a_limit_and_keeps_the_others() {
    let current = SpendLimits {
        tokens: Some(1000),
        cost_usd: Some(1.0),
    };
    let requested = SpendLimits {
        tokens: Some(5000),
        cost_usd: None,
    };
    let spent = usage(1150, Some(0.4));
    let raised = resume_limits(current, requested, &spent).unwrap();
    assert_eq!(raised.tokens, Some(5000));
    assert_eq!(raised.cost_usd, Some(1.0));
    assert_eq!(tokens(5000).may_start(&spent), Ok(()));
}

#[test]
fn resume_refuses_a_limit_at_or_below_the_spend() {
    let current = SpendLimits {
        tokens: Some(1000),
        cost_usd: None,
    };
    let spent = usage(1150, None);
    for limit in [1150, 1100] {
        let requested = SpendLimits {
            tokens: Some(limit),
            cost_usd: None,
        };
        let error = resume_limits(current, requested, &spent).unwrap_err();
        assert_eq!(error.field, "tokenBudget");
        assert!(error.to_string().contains("(1150 tokens)"), "{error}");
    }
    let requested = SpendLimits {
        tokens: None,
        cost_usd: Some(0.1),
    };
    let error = resume_limits(current, requested, &usage(0, Some(0.1))).unwrap_err();
    assert_eq!(error.field, "costBudgetUsd");
}

#[test]
fn resume_without_limits_keeps_them() {
    let current = SpendLimits {
        tokens: Some(1000),
        cost_usd: Some(2.0),
    };
    let kept = resume_limits(current, SpendLimits::default(), &usage(5000, Some(9.0))).unwrap();
    assert_eq!(kept, current);
}

#[test]
fn raising_a_limit_puts_its_warning_at_the_new_threshold() {
    // Spend 900 crossed 80% of 1000 already; at 5000 the threshold is 4000.
    let raised = tokens(5000);
    assert!(
        raised
            .crossed(&usage(900, None), &usage(3999, None))
            .is_empty()
    );
    assert_eq!(
        raised.crossed(&usage(3999, None), &usage(4000, None)),
        vec![LimitKind::Tokens]
    );
}

#[test]
fn a_cost_limit_over_a_backend_without_cost_is_refused() {
    let backends = [
        ("claude".to_owned(), true),
        ("codex".to_owned(), false),
        ("gemini".to_owned(), false),
    ];
    let refusal = cost(1.0).check_units(&backends).unwrap_err();
    assert_eq!(refusal.kind, LimitKind::CostUsd);
    assert_eq!(refusal.backends, vec!["codex", "gemini"]);
    let text = refusal.to_string();
    assert!(text.starts_with("costBudgetUsd is set"), "{text}");
    assert!(text.contains("codex, gemini report no cost"), "{text}");
}

#[test]
fn units_every_backend_reports_are_accepted() {
    let backends = [("claude".to_owned(), true), ("codex".to_owned(), false)];
    assert_eq!(tokens(1000).check_units(&backends), Ok(()));
    assert_eq!(cost(1.0).check_units(&backends[..1]), Ok(()));
    assert_eq!(RunBudget::default().check_units(&backends), Ok(()));
}

#[test]
fn the_script_view_without_limits() {
    let view = script_view(&SpendLimits::default(), &usage(1234, None));
    assert_eq!(
        view,
        json!({
            "total": null, "spent": 1234, "remaining": null,
            "costTotalUsd": null, "costSpentUsd": 0.0, "costRemainingUsd": null,
        })
    );
}

#[test]
fn the_script_view_with_limits_never_goes_below_zero() {
    let limits = SpendLimits {
        tokens: Some(1000),
        cost_usd: Some(2.0),
    };
    let view = script_view(&limits, &usage(400, Some(0.5)));
    assert_eq!(view["total"], 1000);
    assert_eq!(view["spent"], 400);
    assert_eq!(view["remaining"], 600);
    assert_eq!(view["costTotalUsd"], 2.0);
    assert_eq!(view["costRemainingUsd"], 1.5);
    let over = script_view(&limits, &usage(1500, Some(3.0)));
    assert_eq!(over["remaining"], 0);
    assert_eq!(over["costRemainingUsd"], 0.0);
}

#[test]
fn limits_echo_for_status() {
    let limits = SpendLimits {
        tokens: Some(10),
        cost_usd: None,
    };
    assert_eq!(
        limits.echo(),
        json!({"tokenBudget": 10, "costBudgetUsd": null})
    );
}

#[test]
fn the_warning_threshold_of_an_uneven_limit_is_the_first_token_past_80_percent() {
    // 80% of 7 is 5.6, so the sixth token crosses it and the fifth does not.
    let budget = tokens(7);
    assert!(budget.crossed(&usage(0, None), &usage(5, None)).is_empty());
    assert_eq!(
        budget.crossed(&usage(5, None), &usage(6, None)),
        vec![LimitKind::Tokens]
    );
}
