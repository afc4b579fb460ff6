//! The mapping against the reasoning options each adapter advertised (recorded from the
//! pinned packages' `session/new` or `session/set_config_option` answers, cut to the fields
//! the mapping reads), and the rules for adapters without one.

use serde_json::{Value, json};

use super::*;

fn select(id: &str, category: Option<&str>, values: &[&str]) -> Value {
    let mut option = json!({
        "id": id,
        "name": id,
        "type": "select",
        "currentValue": values.first().copied().unwrap_or_default(),
        "options": values.iter().map(|value| json!({"value": value, "name": value})).collect::<Vec<_>>(),
    });
    if let Some(category) = category {
        option["category"] = json!(category);
    }
    option
}

fn model(values: &[&str]) -> Value {
    select("model", Some("model"), values)
}

fn chosen(options: &[Value], effort: Effort) -> Result<(String, String), String> {
    setting(options, effort, "b").map(|setting| (setting.config_id, setting.value))
}

/// Every portable level onto `options`, as `(level, value)` for those it can take.
fn mapped(options: &[Value]) -> Vec<(&'static str, String)> {
    Effort::ALL
        .into_iter()
        .filter_map(|effort| Some((effort.name(), chosen(options, effort).ok()?.1)))
        .collect()
}

fn same(levels: &[&'static str]) -> Vec<(&'static str, String)> {
    levels
        .iter()
        .map(|level| (*level, (*level).to_owned()))
        .collect()
}

#[test]
fn names_parse_and_list_in_order() {
    for effort in Effort::ALL {
        assert_eq!(Effort::parse(effort.name()), Some(effort));
    }
    assert_eq!(Effort::parse("High"), None);
    assert_eq!(Effort::parse("minimal"), None);
    assert_eq!(
        Effort::listed(),
        "\"low\", \"medium\", \"high\", \"xhigh\", \"max\""
    );
}

#[test]
fn claude_agent_acp_takes_every_level_its_model_offers() {
    // 0.101.0, default model: `effort`, the model's levels after a `default` row.
    let options = [
        model(&["default", "opus", "sonnet", "haiku"]),
        select(
            "effort",
            Some("thought_level"),
            &["default", "low", "medium", "high", "xhigh", "max"],
        ),
        select("fast", Some("model_config"), &["on", "off"]),
    ];
    assert_eq!(
        mapped(&options),
        same(&["low", "medium", "high", "xhigh", "max"])
    );
    assert_eq!(chosen(&options, Effort::Max).unwrap().0, "effort");
    // A model with fewer levels: the missing one is refused, naming what is offered.
    let fewer = [select(
        "effort",
        Some("thought_level"),
        &["default", "low", "medium", "high", "max"],
    )];
    assert_eq!(
        setting(&fewer, Effort::Xhigh, "claude (model sonnet)").unwrap_err(),
        "agent() option effort \"xhigh\" cannot be set: backend claude (model sonnet)'s \
         reasoning option \"effort\" offers default, low, medium, high, max; choose one of \
         those levels or leave effort out"
    );
}

#[test]
fn codex_acp_has_no_max() {
    // 0.16.0 with gpt-5.5: `reasoning_effort`; a preset may also offer none or minimal.
    let options = [
        select("mode", Some("mode"), &["read-only", "auto", "full-access"]),
        model(&["gpt-5.5", "gpt-5.4"]),
        select(
            "reasoning_effort",
            Some("thought_level"),
            &["low", "medium", "high", "xhigh"],
        ),
    ];
    assert_eq!(mapped(&options), same(&["low", "medium", "high", "xhigh"]));
    assert_eq!(
        chosen(&options, Effort::High).unwrap(),
        ("reasoning_effort".to_owned(), "high".to_owned())
    );
    assert!(
        chosen(&options, Effort::Max)
            .unwrap_err()
            .contains("offers low, medium, high, xhigh")
    );
    // A model codex has no preset for (a custom provider's) gets no effort option at all.
    let custom = [model(&["mock-model", "gpt-5.5"])];
    assert!(
        chosen(&custom, Effort::Low)
            .unwrap_err()
            .contains("advertises no reasoning-level config option")
    );
}

#[test]
fn opencode_takes_its_variants_of_those_names() {
    // 1.18.33, an openai-compatible reasoning model: its variants and `default`.
    let options = [
        model(&["mock/mock-model", "mock/mock-reasoner"]),
        select(
            "effort",
            Some("thought_level"),
            &["low", "medium", "high", "default"],
        ),
        select("mode", Some("mode"), &["build", "plan"]),
    ];
    assert_eq!(mapped(&options), same(&["low", "medium", "high"]));
    // An Anthropic model's variants are `high` and `max`.
    let anthropic = [select(
        "effort",
        Some("thought_level"),
        &["high", "max", "default"],
    )];
    assert_eq!(mapped(&anthropic), same(&["high", "max"]));
}

#[test]
fn pi_acp_offers_levels_only_for_a_reasoning_model() {
    // 0.0.34: `thought_level`, pi's levels; a model without reasoning has only `off`.
    let reasoning = [select(
        "thought_level",
        Some("thought_level"),
        &["off", "minimal", "low", "medium", "high"],
    )];
    assert_eq!(mapped(&reasoning), same(&["low", "medium", "high"]));
    let plain = [select("thought_level", Some("thought_level"), &["off"])];
    assert!(mapped(&plain).is_empty());
    assert!(
        chosen(&plain, Effort::Low)
            .unwrap_err()
            .contains("reasoning option \"thought_level\" offers off;")
    );
}

#[test]
fn qwen_code_takes_all_five() {
    // 0.24.4 without a per-model profile.
    let options = [select(
        "reasoning_effort",
        Some("thought_level"),
        &["none", "default", "low", "medium", "high", "xhigh", "max"],
    )];
    assert_eq!(
        mapped(&options),
        same(&["low", "medium", "high", "xhigh", "max"])
    );
}

#[test]
fn an_adapter_without_a_reasoning_option_is_refused_naming_effort_and_the_backend() {
    // claude-agent-acp 0.23.1 advertises mode and model only; gemini-cli no config options.
    let options = [
        select("mode", Some("mode"), &["default", "plan"]),
        model(&["default", "opus"]),
    ];
    assert_eq!(
        setting(&options, Effort::High, "claude").unwrap_err(),
        "agent() option effort \"high\" cannot be set: backend claude advertises no \
         reasoning-level config option (category \"thought_level\"); leave effort out for this \
         backend"
    );
    assert!(setting(&[], Effort::High, "gemini").is_err());
}

#[test]
fn an_uncategorised_option_is_found_by_a_known_id_and_grouped_values_count() {
    let grouped = json!({
        "id": "reasoning_effort", "name": "Reasoning", "type": "select", "currentValue": "low",
        "options": [
            {"group": "fast", "name": "Fast", "options": [{"value": "low", "name": "Low"}]},
            {"group": "deep", "name": "Deep", "options": [{"value": "High", "name": "High"}]},
        ],
    });
    assert_eq!(
        chosen(&[grouped], Effort::High).unwrap(),
        ("reasoning_effort".to_owned(), "High".to_owned()),
        "the advertised spelling is what is sent"
    );
    // An unknown id without the category is not taken for a reasoning level, nor is a known
    // id that a different category claims.
    let unknown = [select("depth", None, &["low", "high"])];
    assert!(chosen(&unknown, Effort::Low).is_err());
    let other = [select("effort", Some("model_config"), &["low", "high"])];
    assert!(chosen(&other, Effort::Low).is_err());
    // The category wins over an id match earlier in the list.
    let both = [
        select("effort", None, &["low"]),
        select("thinking", Some("thought_level"), &["low"]),
    ];
    assert_eq!(chosen(&both, Effort::Low).unwrap().0, "thinking");
}

#[test]
fn a_call_names_its_model_and_may_not_set_the_same_option_through_config_options() {
    let options = [select(
        "reasoning_effort",
        Some("thought_level"),
        &["low", "medium", "high", "xhigh"],
    )];
    let set = call_setting(&options, Effort::Low, &[], "codex", Some("gpt-5.5"));
    assert_eq!(set.unwrap().value, "low");
    let other = [("mode".to_owned(), json!("auto"))];
    assert!(call_setting(&options, Effort::Low, &other, "codex", None).is_ok());
    let same = [("reasoning_effort".to_owned(), json!("high"))];
    assert_eq!(
        call_setting(&options, Effort::Low, &same, "codex", Some("gpt-5.5")).unwrap_err(),
        "agent() options effort and configOptions.reasoning_effort both set backend codex \
         (model gpt-5.5)'s reasoning level; give only one of them"
    );
    assert!(
        call_setting(&options, Effort::Max, &[], "codex", Some("gpt-5.5"))
            .unwrap_err()
            .contains("backend codex (model gpt-5.5)'s reasoning option")
    );
}
