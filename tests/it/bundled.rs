//! The bundled workflow library (`workflows/*.js`, compiled in through
//! `agentprism::library::bundled`): every file is in the table and analyzes with a complete
//! `meta`, and each workflow runs end to end through the real binary on the mock agent, whose
//! schema'd answers are made from each call's schema. `fix-tests` and `migrate` run in a real
//! git repository; `research` also runs through a real adapter against the fake model server.

use std::path::{Path, PathBuf};

use agentprism::library::bundled::BUNDLED;
use serde_json::{Value, json};

use crate::adapters::{Backend, Context};
use crate::support::context::{Finished, TestContext};

fn workflows_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows")
}

fn script(name: &str) -> String {
    workflows_folder()
        .join(format!("{name}.js"))
        .display()
        .to_string()
}

/// `agentprism run <name> --args <args>` in `ctx`'s project (the bundled workflow, by name),
/// which must finish.
fn run(ctx: &TestContext, name: &str, args: Value) -> (Finished, Value) {
    let finished = ctx.run(&["run", name, "--args", &args.to_string()]);
    assert_eq!(finished.code(), 0, "{name}: {}", finished.stderr);
    let result = finished.json();
    (finished, result)
}

/// The labels of a run's agent calls, in call order.
fn call_labels(ctx: &TestContext, run_id: &str) -> Vec<String> {
    let status = ctx.status(run_id);
    let calls = status["calls"].as_array().cloned().unwrap_or_default();
    assert!(!calls.is_empty(), "no calls in status: {status}");
    calls
        .iter()
        .map(|call| call["label"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// git in the test's project, as `changes.rs` runs it.
fn git(ctx: &TestContext, args: &[&str]) -> String {
    crate::changes::git(ctx, &ctx.project(), args)
}

/// A test context whose project is a git repository with one commit of `a.txt` and `b.txt`.
fn repository() -> TestContext {
    let ctx = TestContext::new();
    git(&ctx, &["init", "-q", "-b", "main"]);
    std::fs::write(ctx.project().join("a.txt"), "old api\n").unwrap();
    std::fs::write(ctx.project().join("b.txt"), "old api\n").unwrap();
    git(&ctx, &["add", "a.txt", "b.txt"]);
    git(&ctx, &["commit", "-q", "-m", "base"]);
    ctx
}

#[test]
fn every_workflow_file_is_bundled_and_analyzes_with_a_complete_meta() {
    let mut files: Vec<String> = std::fs::read_dir(workflows_folder())
        .expect("workflows folder")
        .filter_map(|entry| {
            let name = entry.expect("entry").file_name().into_string().ok()?;
            name.strip_suffix(".js").map(str::to_owned)
        })
        .collect();
    files.sort();
    let bundled: Vec<&str> = BUNDLED.iter().map(|bundled| bundled.name).collect();
    assert_eq!(
        bundled, files,
        "BUNDLED must list every workflows/*.js, sorted"
    );
    for bundled in BUNDLED {
        let text = std::fs::read_to_string(script(bundled.name)).unwrap();
        assert_eq!(
            bundled.source, text,
            "{} is compiled in as written",
            bundled.name
        );
    }

    let harness = crate::engine::harness();
    let listed = harness.engine.saved_workflows(None).expect("list");
    for bundled in BUNDLED {
        let entry = listed
            .iter()
            .find(|saved| saved.entry.name == bundled.name)
            .unwrap_or_else(|| panic!("{} is not listed", bundled.name));
        let meta = entry
            .meta
            .as_ref()
            .unwrap_or_else(|error| panic!("{}: {error}", bundled.name));
        assert_eq!(meta.meta_name, bundled.name);
        assert!(!meta.description.is_empty());
        assert!(
            meta.when_to_use.is_some(),
            "{} has no whenToUse",
            bundled.name
        );
        assert!(
            meta.phases.len() >= 3,
            "{}: {:?}",
            bundled.name,
            meta.phases
        );
        let required = meta.input_schema["required"].as_array().expect("required");
        assert!(
            required.contains(&json!("model")),
            "{} must require a model",
            bundled.name
        );
    }
}

#[test]
fn review_panel_keeps_the_findings_its_judges_uphold() {
    let ctx = TestContext::new();
    let (finished, result) = run(&ctx, "review-panel", json!({"model": "mock"}));
    // Three reviewers report the same fabricated finding, which is judged once by three
    // judges who all keep it.
    let kept = result["kept"].as_array().expect("kept");
    assert_eq!(kept.len(), 1, "{result}");
    assert_eq!(kept[0]["keeps"], 3, "{result}");
    assert_eq!(result["dropped"], 0);
    assert_eq!(result["reviewers"], 3);
    let labels = call_labels(&ctx, &finished.run_id());
    assert_eq!(
        labels,
        [
            "review:0",
            "review:1",
            "review:2",
            "judge:0:0",
            "judge:0:1",
            "judge:0:2"
        ]
    );
}

#[test]
fn audit_refutes_each_finding_and_reports_the_confirmed_ones() {
    let ctx = TestContext::new();
    let (finished, result) = run(
        &ctx,
        "audit",
        json!({"model": "mock", "areas": ["src", "docs"]}),
    );
    assert_eq!(result["areas"], json!(["src", "docs"]));
    assert_eq!(result["reported"], 2, "{result}");
    let confirmed = result["confirmed"].as_array().expect("confirmed");
    assert_eq!(confirmed.len(), 2, "{result}");
    assert_eq!(confirmed[1]["area"], "docs");
    let mut labels = call_labels(&ctx, &finished.run_id());
    labels.sort();
    assert_eq!(
        labels,
        ["audit:docs", "audit:src", "refute:docs:0", "refute:src:0"]
    );

    // Without areas, one planning call chooses them.
    let (_, planned) = run(&ctx, "audit", json!({"model": "mock"}));
    assert_eq!(
        planned["areas"].as_array().map(Vec::len),
        Some(1),
        "{planned}"
    );
    assert_eq!(planned["confirmed"].as_array().map(Vec::len), Some(1));
}

#[test]
fn fix_tests_attempts_in_worktrees_and_names_the_branch_to_apply() {
    let ctx = repository();
    // Every attempt (and the diagnosis, which runs in the project) writes fix.txt, as an
    // agent that edits the tree would; the attempts' edits land on branches of their own.
    let command = "true\n@mock write_cwd fix.txt fixed\n";
    let (finished, result) = run(
        &ctx,
        "fix-tests",
        json!({"model": "mock", "command": command}),
    );
    let run_id = finished.run_id();
    let attempts = result["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3, "{result}");
    assert!(
        attempts.iter().all(|attempt| attempt["branch"].is_string()),
        "{result}"
    );
    assert_eq!(result["best"]["attempt"], 0, "{result}");
    let apply = result["apply"].as_str().expect("apply");
    let prefix = format!("agentprism changes {run_id} --apply ");
    let index = apply
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{apply}"));

    let listed = ctx.run(&["changes", &run_id, "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    let listed = listed.json();
    let calls = listed["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 3, "only the attempts are isolated: {listed}");
    assert!(
        calls
            .iter()
            .any(|call| call["changes"]["branch"] == result["best"]["branch"]),
        "{listed}"
    );

    // The command it prints applies the best attempt's branch.
    std::fs::remove_file(ctx.project().join("fix.txt")).unwrap();
    let applied = ctx.run(&["changes", &run_id, "--apply", index]);
    assert_eq!(applied.code(), 0, "{}", applied.stderr);
    assert_eq!(
        std::fs::read_to_string(ctx.project().join("fix.txt")).unwrap(),
        "fixed\n"
    );
    assert_eq!(git(&ctx, &["status", "--porcelain"]), "");
}

#[test]
fn migrate_verifies_each_file_and_retries_a_failed_one_through_its_gate() {
    let ctx = repository();
    let (finished, result) = run(
        &ctx,
        "migrate",
        json!({"model": "mock", "instructions": "Rename old api to new api.", "files": ["a.txt", "b.txt"]}),
    );
    assert_eq!(result["migrated"], json!(["a.txt", "b.txt"]), "{result}");
    assert_eq!(result["failed"], json!([]));
    let mut labels = call_labels(&ctx, &finished.run_id());
    labels.sort();
    assert_eq!(
        labels,
        [
            "migrate:a.txt:0",
            "migrate:b.txt:0",
            "verify:a.txt:0",
            "verify:b.txt:0"
        ]
    );

    // A verifier that rejects every try: each file is migrated twice, then reported failed
    // with the verifier's feedback.
    let rejecting =
        "Rename old api to new api.\n@mock json {\"ok\":false,\"feedback\":\"still old\"}";
    let (finished, result) = run(
        &ctx,
        "migrate",
        json!({"model": "mock", "instructions": rejecting, "files": ["a.txt"]}),
    );
    assert_eq!(result["migrated"], json!([]), "{result}");
    assert_eq!(
        result["failed"],
        json!([{"file": "a.txt", "tries": 2, "feedback": "still old"}])
    );
    assert_eq!(call_labels(&ctx, &finished.run_id()).len(), 4);

    // Without files, one planning call lists them.
    let (_, planned) = run(
        &ctx,
        "migrate",
        json!({"model": "mock", "instructions": "Rename old api to new api."}),
    );
    assert_eq!(
        planned["migrated"].as_array().map(Vec::len),
        Some(1),
        "{planned}"
    );
}

#[test]
fn research_answers_from_its_angles() {
    let ctx = TestContext::new();
    let question = "What does this repo do?";
    let (finished, result) = run(
        &ctx,
        "research",
        json!({"model": "mock", "question": question}),
    );
    assert_eq!(result["question"], question);
    assert_eq!(
        result["angles"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
    let answer = result["answer"].as_str().expect("answer");
    // The mock echoes its prompt: the synthesis saw the notes and the critique.
    assert!(answer.contains("Research notes:"), "{answer}");
    assert!(answer.contains("A critic's remarks:"), "{answer}");
    assert_eq!(
        call_labels(&ctx, &finished.run_id()),
        ["angles", "research:0", "critique", "synthesis"]
    );
}

/// `research` through claude-agent-acp and the fake model server, with the angles given, so
/// every call is a plain text turn of a real adapter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_runs_through_a_real_adapter() {
    let context = Context::new(Backend::Claude).await;
    let args = json!({
        "model": "claude",
        "question": "What does this repo do?",
        "angles": ["its purpose", "its structure"],
    });
    let project = context.project.display().to_string();
    let outcome = context
        .agentprism(&[
            "run",
            &script("research"),
            "--args",
            &args.to_string(),
            "--project-dir",
            &project,
        ])
        .await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let result = outcome.json();
    assert_eq!(result["angles"], json!(["its purpose", "its structure"]));
    let answer = result["answer"].as_str().expect("answer");
    assert!(answer.starts_with("MOCK-REPLY: Question:"), "{answer}");
    assert!(
        result["critique"]
            .as_str()
            .is_some_and(|c| c.starts_with("MOCK-REPLY:"))
    );
    context.assert_no_processes_left().await;
}
