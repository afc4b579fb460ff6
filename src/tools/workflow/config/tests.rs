//! Tests of `config`: the model filter and the choice cap, and, over the adapters' recorded
//! catalogs, the authoring summary sentence by sentence.

use std::path::{Path, PathBuf};

use super::*;
use crate::acp::catalog;

#[test]
fn model_filters_match_as_documented() {
    let substring = Filter::new("GPT");
    assert!(substring.matches("openai/gpt-5 GPT-5"));
    assert!(!substring.matches("claude-sonnet"));
    let glob = Filter::new("openrouter/*free");
    assert!(glob.matches("openrouter/meta/llama:free"));
    assert!(!glob.matches("openai/gpt-5"));
    let pattern = Filter::new("/^openrouter\\/.*mini$/");
    assert!(pattern.matches("openrouter/openai/gpt-5-mini"));
    assert!(!pattern.matches("x openrouter/openai/gpt-5-mini"));
    assert!(!pattern.matches("openrouter/openai/gpt-5-mini-high"));
    assert!(Filter::new("/g.t/").matches("gpt"));
}

#[test]
fn large_selects_become_summaries() {
    let options: Vec<Value> = (0..40)
        .map(|i| json!({"value": format!("{}/m{i}", if i % 2 == 0 { "openrouter" } else { "direct" }), "name": format!("M{i}")}))
        .collect();
    let option = json!({"id": "model", "category": "model", "type": "select", "currentValue": "x", "options": options});
    let shaped = shape_option(&option, None);
    assert_eq!(shaped["truncated"], true);
    assert_eq!(shaped["choiceSummary"]["total"], 40);
    assert!(shaped.get("options").is_none());
    let filtered = shape_option(&option, Some(&Filter::new("openrouter/m1")));
    assert!(filtered.get("truncated").is_none(), "{filtered}");
    let values: Vec<&str> = filtered["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["value"].as_str())
        .collect();
    assert_eq!(
        values,
        [
            "openrouter/m10",
            "openrouter/m12",
            "openrouter/m14",
            "openrouter/m16",
            "openrouter/m18"
        ]
    );
}

// The recorded catalogs of the four adapters (tests/fixtures/catalogs/, see record.py there),
// put through the code a probe runs on live answers (`acp::catalog`) and then through the
// summary `config` answers with, one test per sentence of the seed's config paragraph.

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/catalogs")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A folder with the HOME and project a recorded pi session had: pi's settings as recorded.
struct PiPlace {
    _dir: tempfile::TempDir,
    agent_dir: PathBuf,
    project: PathBuf,
}

impl PiPlace {
    fn new(settings: &str) -> PiPlace {
        let dir = tempfile::tempdir().expect("temp dir");
        let agent_dir = dir.path().join("home/.pi/agent");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&agent_dir).expect("agent dir");
        std::fs::create_dir_all(&project).expect("project");
        std::fs::write(agent_dir.join("settings.json"), settings).expect("settings");
        PiPlace {
            _dir: dir,
            agent_dir,
            project,
        }
    }
}

/// The report a probe of `backend` makes from the recorded answers; `exact` replays the
/// recorded model choice as a `modelSpecs` probe does.
async fn recorded_report(name: &str, exact: bool, pi: Option<&PiPlace>) -> Probed {
    let recorded = fixture(name);
    let choice = &recorded["session/set_config_option"];
    let model = choice["params"]["value"].as_str().expect("recorded model");
    let info = catalog::recorded_session(
        &recorded["session/new"],
        exact.then_some((model, &choice["result"])),
    );
    let mut report = ProbeReport {
        backend: name.to_owned(),
        started: true,
        auth_methods: recorded["initialize"]["authMethods"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        ..ProbeReport::default()
    };
    // The pool hands the probe pi's agent folder when `initialize` names pi-acp.
    let is_pi = recorded["initialize"]["agentInfo"]["name"] == "pi-acp";
    let place = pi.filter(|_| is_pi);
    let cwd = place.map_or_else(|| PathBuf::from("/"), |place| place.project.clone());
    catalog::record_session(
        &mut report,
        info,
        place.map(|place| place.agent_dir.as_path()),
        &cwd,
    )
    .await;
    Probed {
        model: exact.then(|| model.to_owned()),
        report,
    }
}

fn recorded_pi_place() -> PiPlace {
    PiPlace::new(&fixture("pi")["piSettings"].to_string())
}

/// The summary entry of each probe, through the answer `config` sends.
fn summaries(probed: &[Probed], filter: Option<&str>) -> Vec<Value> {
    let filter = filter.map(Filter::new);
    let answer = answer(Path::new("/project"), probed, filter.as_ref());
    answer["structuredContent"]["authoringSummary"]["backends"]
        .as_array()
        .expect("backends")
        .clone()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|item| item.as_str().expect("string").to_owned())
        .collect()
}

fn model_values(session: &Value) -> Vec<String> {
    let option = session["configOptions"]
        .as_array()
        .expect("configOptions")
        .iter()
        .find(|option| option["category"] == "model")
        .expect("a model option");
    option["options"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|choice| choice["value"].as_str().expect("value").to_owned())
        .collect()
}

/// "Catalogs preserve raw mode IDs, names, descriptions, and `_meta`": ACP modes as sent,
/// and opencode's modes, which it sends only as a `category:"mode"` config option, as that
/// option's choices under the ACP keys.
#[tokio::test]
async fn catalogs_preserve_raw_modes_including_opencodes_mode_option() {
    for name in ["claude", "codex"] {
        let probed = [recorded_report(name, false, None).await];
        let answer = answer(Path::new("/project"), &probed, None);
        let modes = &answer["structuredContent"]["harnesses"][0]["modes"];
        assert_eq!(
            *modes,
            fixture(name)["session/new"]["modes"]["availableModes"],
            "{name}"
        );
    }
    // opencode's recorded choices carry no `_meta`; ACP allows one, so one is added here.
    let mut recorded = fixture("opencode");
    let options = recorded["session/new"]["configOptions"]
        .as_array_mut()
        .expect("configOptions");
    let mode_option = options
        .iter_mut()
        .find(|option| option["category"] == "mode")
        .expect("opencode sends its modes as a config option");
    mode_option["options"][1]["_meta"] = json!({"opencode": {"color": "yellow"}});
    let expected: Vec<Value> = mode_option["options"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|choice| {
            let mut mode = json!({"id": choice["value"], "name": choice["name"], "description": choice["description"]});
            if let Some(meta) = choice.get("_meta") {
                mode["_meta"] = meta.clone();
            }
            mode
        })
        .collect();
    assert!(
        recorded["session/new"].get("modes").is_none(),
        "no ACP modes"
    );
    let info = catalog::recorded_session(&recorded["session/new"], None);
    let mut report = ProbeReport {
        backend: "opencode".into(),
        ..ProbeReport::default()
    };
    catalog::record_session(&mut report, info, None, Path::new("/")).await;
    let probed = [Probed {
        model: None,
        report,
    }];
    let answer = answer(Path::new("/project"), &probed, None);
    assert_eq!(
        answer["structuredContent"]["harnesses"][0]["modes"],
        json!(expected)
    );
    let summary = &answer["structuredContent"]["authoringSummary"]["backends"][0];
    assert_eq!(summary["modes"], json!(["build", "plan"]));
}

/// "Claude/Codex's small catalogs": every model, mode and option value, as recorded.
#[tokio::test]
async fn claude_and_codex_list_their_small_catalogs_whole() {
    for name in ["claude", "codex"] {
        let recorded = fixture(name);
        let session = &recorded["session/new"];
        let summary = &summaries(&[recorded_report(name, false, None).await], None)[0];
        assert_eq!(strings(&summary["models"]), model_values(session), "{name}");
        let mode_ids: Vec<Value> = session["modes"]["availableModes"]
            .as_array()
            .expect("modes")
            .iter()
            .map(|mode| mode["id"].clone())
            .collect();
        assert_eq!(summary["modes"], json!(mode_ids), "{name}");
        let thought = session["configOptions"]
            .as_array()
            .expect("options")
            .iter()
            .find(|option| option["category"] == "thought_level")
            .expect("a thought-level option");
        let listed = summary["options"]
            .as_array()
            .expect("options")
            .iter()
            .find(|option| option["id"] == thought["id"])
            .unwrap_or_else(|| panic!("{name}: {} missing from {summary:#}", thought["id"]));
        let values: Vec<Value> = thought["options"]
            .as_array()
            .expect("choices")
            .iter()
            .map(|choice| choice["value"].clone())
            .collect();
        assert_eq!(listed["values"], json!(values), "{name}");
        assert_eq!(listed["currentValue"], thought["currentValue"], "{name}");
        assert_eq!(summary["modelsFrom"], "catalog", "{name}");
        assert_eq!(summary["browse"], json!([]), "{name}");
    }
    let claude = &summaries(&[recorded_report("claude", false, None).await], None)[0];
    assert!(
        strings(&claude["modes"]).contains(&"bypassPermissions".to_owned()),
        "{claude:#}"
    );
}

/// "Pi's native `enabledModels` preferences intersected with authenticated models plus
/// unmatched patterns": the recorded settings' patterns resolve as pi itself resolved them
/// against the recorded catalog (`piScope`, from pi's own resolver), every listed model is
/// one pi-acp offered, and the pattern that matches nothing is reported.
#[tokio::test]
async fn pi_lists_its_enabled_models_among_the_authenticated_ones() {
    let recorded = fixture("pi");
    let place = recorded_pi_place();
    let summary = &summaries(&[recorded_report("pi", false, Some(&place)).await], None)[0];
    let patterns = strings(&recorded["piSettings"]["enabledModels"]);
    let mut expected: Vec<String> = Vec::new();
    let mut unmatched = Vec::new();
    for pattern in &patterns {
        let by_pi = recorded["piScope"]
            .as_array()
            .expect("piScope")
            .iter()
            .find(|entry| entry["pattern"] == pattern.as_str())
            .unwrap_or_else(|| panic!("pi's own answer for {pattern}"));
        let models = strings(&by_pi["models"]);
        if models.is_empty() {
            unmatched.push(pattern.clone());
        }
        for model in models {
            if !expected.contains(&model) {
                expected.push(model);
            }
        }
    }
    assert_eq!(strings(&summary["models"]), expected, "{summary:#}");
    assert_eq!(strings(&summary["unmatchedPatterns"]), unmatched);
    assert_eq!(summary["modelsFrom"], "enabledModels");
    assert_eq!(
        unmatched,
        ["xai/grok-4.7"],
        "the recording has one unmatched pattern"
    );
    let offered = model_values(&recorded["session/new"]);
    assert!(expected.iter().all(|model| offered.contains(model)));
    assert_eq!(summary["offeredModels"], offered.len());
    assert!(
        expected.len() < offered.len() / 10,
        "the summary stays compact"
    );
    assert_eq!(
        summary["enabledModelsSource"],
        json!(place.agent_dir.join("settings.json"))
    );
}

/// Our matching of pi's patterns gives what pi's own resolver gave on the recorded catalog,
/// for the settings' patterns and the extra ones the recording asked pi about.
#[test]
fn pi_pattern_matching_agrees_with_pi() {
    let recorded = fixture("pi");
    let option = recorded["session/new"]["configOptions"]
        .as_array()
        .expect("options")
        .iter()
        .find(|option| option["category"] == "model")
        .expect("model option")
        .clone();
    let offered: Vec<crate::acp::pi_scope::Offered> = option["options"]
        .as_array()
        .expect("choices")
        .iter()
        .filter_map(|choice| {
            crate::acp::pi_scope::Offered::new(choice["value"].as_str()?, choice["name"].as_str()?)
        })
        .collect();
    let checks = recorded["piScope"].as_array().expect("piScope");
    assert!(checks.len() > 20);
    for check in checks {
        let pattern = check["pattern"].as_str().expect("pattern").to_owned();
        let (ours, _) = crate::acp::pi_scope::resolve(std::slice::from_ref(&pattern), &offered);
        assert_eq!(ours, strings(&check["models"]), "pattern {pattern:?}");
    }
}

/// "OpenCode's direct models before explicitly classified aggregator browse groups
/// (including OpenRouter, OpenCode, Hugging Face, and Bedrock)".
#[tokio::test]
async fn opencode_lists_direct_models_before_aggregator_browse_groups() {
    let recorded = fixture("opencode");
    let offered = model_values(&recorded["session/new"]);
    let provider = |value: &str| value.split_once('/').expect("provider/model").0.to_owned();
    let summary = &summaries(&[recorded_report("opencode", false, None).await], None)[0];
    // In the recording only Anthropic and OpenAI are providers of their own models.
    let direct: Vec<String> = offered
        .iter()
        .filter(|value| ["anthropic", "openai"].contains(&provider(value).as_str()))
        .cloned()
        .collect();
    assert!(!direct.is_empty());
    assert_eq!(strings(&summary["models"]), direct);
    assert_eq!(summary["modelsFrom"], "catalog");
    let browse = summary["browse"].as_array().expect("browse");
    let selectors: Vec<&str> = browse
        .iter()
        .map(|group| group["selector"].as_str().expect("selector"))
        .collect();
    assert_eq!(
        selectors,
        [
            "openrouter/*",
            "huggingface/*",
            "opencode-go/*",
            "opencode/*",
            "amazon-bedrock/*"
        ]
    );
    for group in browse {
        let prefix = group["selector"]
            .as_str()
            .expect("selector")
            .trim_end_matches('*');
        let count = offered
            .iter()
            .filter(|value| value.starts_with(prefix))
            .count();
        assert_eq!(group["count"], count, "{group}");
    }
    let names: Vec<&str> = browse
        .iter()
        .filter_map(|group| group["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "OpenRouter",
            "Hugging Face",
            "OpenCode Go",
            "OpenCode Zen",
            "Amazon Bedrock"
        ]
    );
    // Direct models come first, in the structure and in the text.
    let keys: Vec<&String> = summary.as_object().expect("object").keys().collect();
    let position = |key: &str| keys.iter().position(|k| *k == key).expect(key);
    assert!(position("models") < position("browse"));
    let text = summary_text_of(&[recorded_report("opencode", false, None).await]);
    let line = text
        .lines()
        .find(|line| line.starts_with("- opencode"))
        .expect("line");
    assert!(
        line.find(&format!("{} models", direct.len()))
            .expect("count")
            < line.find("browse").expect("browse"),
        "{line}"
    );
}

fn summary_text_of(probed: &[Probed]) -> String {
    let answer = answer(Path::new("/project"), probed, None);
    answer["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}

/// "The current model is shown separately": its own field, whatever the list holds.
#[tokio::test]
async fn the_current_model_is_shown_separately() {
    let place = recorded_pi_place();
    for name in ["claude", "codex", "opencode", "pi"] {
        let recorded = fixture(name);
        let current = recorded["session/new"]["configOptions"]
            .as_array()
            .expect("options")
            .iter()
            .find(|option| option["category"] == "model")
            .expect("model option")["currentValue"]
            .clone();
        let probed = [recorded_report(name, false, Some(&place)).await];
        let summary = &summaries(&probed, None)[0];
        assert_eq!(summary["currentModel"], current, "{name}");
        // Narrowed to nothing, the list drops it; the field stays.
        let filtered = &summaries(&probed, Some("no-model-is-called-this"))[0];
        assert_eq!(filtered["models"], json!([]), "{name}");
        assert_eq!(filtered["currentModel"], current, "{name}");
    }
}

/// "Expand `openrouter/*` with `modelFilter`; browse selectors cannot dispatch."
#[tokio::test]
async fn model_filter_expands_browse_selectors() {
    let recorded = fixture("opencode");
    let offered = model_values(&recorded["session/new"]);
    let probed = [recorded_report("opencode", false, None).await];
    let unfiltered = &summaries(&probed, None)[0];
    assert!(
        strings(&unfiltered["models"])
            .iter()
            .all(|model| !model.starts_with("openrouter/"))
    );
    // OpenRouter is too large to list: it opens into one selector per vendor.
    let openrouter = &summaries(&probed, Some("openrouter/*"))[0];
    assert_eq!(openrouter["modelsFrom"], "modelFilter");
    let of_openrouter = offered
        .iter()
        .filter(|v| v.starts_with("openrouter/"))
        .count();
    assert_eq!(openrouter["modelFilter"]["matched"], of_openrouter);
    let browse = openrouter["browse"].as_array().expect("browse");
    assert!(browse.len() > 10, "{openrouter:#}");
    let total: u64 = browse
        .iter()
        .map(|group| group["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(total as usize, of_openrouter);
    let anthropic = browse
        .iter()
        .find(|group| group["selector"] == "openrouter/anthropic/*")
        .expect("an anthropic group");
    // That selector, as the filter, lists its models.
    let vendor = &summaries(&probed, Some("openrouter/anthropic/*"))[0];
    let listed = strings(&vendor["models"]);
    let expected: Vec<String> = offered
        .iter()
        .filter(|value| value.starts_with("openrouter/anthropic/"))
        .cloned()
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(anthropic["count"], expected.len());
    assert_eq!(vendor["browse"], json!([]));
    // A routed browse selector is refused before any agent sees it.
    let error = crate::engine::routing::route_spec(
        "opencode/openrouter/*",
        &crate::engine::routing::RoutingSnapshot::default(),
        &crate::engine::routing::NamedBackends::new(["opencode"]),
    )
    .unwrap_err();
    assert!(error.contains("browse selector"), "{error}");
}

/// "Use `modelSpecs` for exact-model option discovery": the options the session offers
/// once the model is chosen, replayed from the recorded `session/set_config_option`.
#[tokio::test]
async fn model_specs_show_the_options_of_the_exact_model() {
    let place = recorded_pi_place();
    for name in ["claude", "codex", "opencode", "pi"] {
        let recorded = fixture(name);
        let chosen = &recorded["session/set_config_option"];
        let model = chosen["params"]["value"].as_str().expect("model");
        let probed = [recorded_report(name, true, Some(&place)).await];
        let summary = &summaries(&probed, None)[0];
        assert_eq!(summary["route"], format!("{name}/{model}"));
        assert_eq!(summary["currentModel"], model);
        assert!(
            summary.get("models").is_none(),
            "{name}: options, not the catalog"
        );
        let expected: Vec<Value> = chosen["result"]["configOptions"]
            .as_array()
            .expect("options")
            .iter()
            .filter(|option| option["category"] != "model" && option["category"] != "mode")
            .map(|option| {
                let values: Vec<&Value> = option["options"]
                    .as_array()
                    .expect("choices")
                    .iter()
                    .map(|choice| &choice["value"])
                    .collect();
                json!([option["id"], option["currentValue"], values])
            })
            .collect();
        let shown: Vec<Value> = summary["options"]
            .as_array()
            .expect("options")
            .iter()
            .map(|option| json!([option["id"], option["currentValue"], option["values"]]))
            .collect();
        assert_eq!(shown, expected, "{name}");
    }
    // What changes with the model, in the recordings.
    let pi = &summaries(&[recorded_report("pi", true, Some(&place)).await], None)[0];
    assert_eq!(pi["options"][0]["values"], json!(["off"]), "{pi:#}");
    let opencode = &summaries(&[recorded_report("opencode", true, None).await], None)[0];
    assert_eq!(
        opencode["options"][0]["values"],
        json!(["high", "max", "default"])
    );
}

/// "Partial probe failures preserve healthy catalogs": failed probes sit beside whole
/// catalogs, and pi settings that cannot be read leave pi's catalog in place.
#[tokio::test]
async fn partial_probe_failures_preserve_healthy_catalogs() {
    let place = recorded_pi_place();
    let alone_claude = summaries(&[recorded_report("claude", false, None).await], None);
    let alone_opencode = summaries(&[recorded_report("opencode", false, None).await], None);
    let failed = Probed {
        model: None,
        report: ProbeReport {
            backend: "codex".into(),
            started: true,
            auth_required: true,
            error: Some("Authentication required".into()),
            ..ProbeReport::default()
        },
    };
    let unknown = Probed {
        model: None,
        report: unprobed("nope", "unknown backend \"nope\"".into()),
    };
    let mixed = summaries(
        &[
            recorded_report("claude", false, None).await,
            failed,
            recorded_report("opencode", false, None).await,
            unknown,
            recorded_report("pi", false, Some(&place)).await,
        ],
        None,
    );
    // pi settings that cannot be read leave pi's catalog whole, with the reason.
    let broken = PiPlace::new("{\"enabledModels\": [");
    let pi = &summaries(&[recorded_report("pi", false, Some(&broken)).await], None)[0];
    assert_eq!(pi["probed"], true);
    assert!(
        pi["enabledModelsError"]
            .as_str()
            .is_some_and(|error| error.contains("is not JSON")),
        "{pi:#}"
    );
    assert!(!strings(&pi["models"]).is_empty());
    assert!(!pi["browse"].as_array().expect("browse").is_empty());
    assert_eq!(pi["modelsFrom"], "catalog");

    assert_eq!(mixed[0], alone_claude[0]);
    assert_eq!(mixed[2], alone_opencode[0]);
    assert_eq!(mixed[1]["probed"], false);
    assert_eq!(mixed[1]["authRequired"], true);
    assert_eq!(mixed[1]["error"], "Authentication required");
    assert_eq!(mixed[3]["probed"], false);
    assert_eq!(mixed[4]["modelsFrom"], "enabledModels");
}
