//! The bundled library through the real binary: every `workflows/*.js` is compiled in and
//! passes the static checks, and each workflow runs end to end by name against the mock agent
//! (whose schema'd answers are made up from each schema, docs/mock-agent.md), including
//! `fix-tests`' attempts in worktrees of their own.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::context::TestContext;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The stems of `workflows/*.js`, sorted.
fn workflow_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repository().join("workflows"))
        .unwrap()
        .filter_map(|item| {
            let name = item.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".js").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn run_by_name(ctx: &TestContext, name: &str, args: Value) -> Value {
    let finished = ctx.run(&["run", name, "--args", &args.to_string()]);
    assert_eq!(finished.code(), 0, "{name}: {}", finished.stderr);
    finished.json()
}

fn git(ctx: &TestContext, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(ctx.project())
        .args(args)
        .env_clear()
        .envs(&ctx.env)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "tester")
        .env("GIT_AUTHOR_EMAIL", "tester@localhost")
        .env("GIT_COMMITTER_NAME", "tester")
        .env("GIT_COMMITTER_EMAIL", "tester@localhost")
        .output()
        .expect("run git");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn every_workflow_file_is_bundled_and_passes_the_static_checks() {
    let ctx = TestContext::new();
    let listed = ctx.run(&["workflows", "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    let listing = listed.json();
    let bundled: Vec<&Value> = listing
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["origin"] == "bundled")
        .collect();
    let names: Vec<String> = bundled
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, workflow_files(), "{listing:#}");
    assert!(names.len() >= 5, "{names:?}");
    for entry in bundled {
        assert_eq!(entry["error"], Value::Null, "{entry:#}");
        assert!(entry["whenToUse"].is_string(), "{entry:#}");
        assert!(
            entry["inputSchema"]["required"]
                .as_array()
                .is_some_and(|required| required.contains(&json!("model"))),
            "{entry:#}"
        );
        assert!(!entry["phases"].as_array().unwrap().is_empty(), "{entry:#}");
        // The shipped text is the repository's file, byte for byte.
        let shown = ctx.run(&["workflows", "show", entry["name"].as_str().unwrap()]);
        let file = std::fs::read_to_string(
            repository().join(format!("workflows/{}.js", entry["name"].as_str().unwrap())),
        )
        .unwrap();
        assert_eq!(shown.stdout.trim_end(), file.trim_end());
    }
}

#[test]
fn research_audit_and_review_panel_run_to_their_results_on_the_mock() {
    let ctx = TestContext::new();
    let research = run_by_name(
        &ctx,
        "research",
        json!({"model": "mock", "question": "What does this repo do?"}),
    );
    let angles = research["angles"].as_array().unwrap();
    assert!(!angles.is_empty(), "{research:#}");
    assert!(
        research["answer"]
            .as_str()
            .unwrap()
            .contains("What does this repo do?"),
        "{research:#}"
    );

    let audit = run_by_name(
        &ctx,
        "audit",
        json!({"model": "mock", "areas": ["src", "docs"], "maxFindingsPerArea": 2}),
    );
    assert_eq!(audit["areas"], json!(["src", "docs"]));
    // The mock's verifier answers `real: true`, so every finding is confirmed.
    let confirmed = audit["confirmed"].as_array().unwrap();
    assert!(!confirmed.is_empty(), "{audit:#}");
    assert!(confirmed.len() <= 4, "{audit:#}");
    assert_eq!(audit["refuted"], json!([]));

    let review = run_by_name(&ctx, "review-panel", json!({"model": "mock", "judges": 3}));
    let kept = review["kept"].as_array().unwrap();
    assert!(!kept.is_empty(), "{review:#}");
    assert_eq!(kept[0]["votes"], 3, "{review:#}");
    assert!(
        review["summary"].as_str().unwrap().starts_with("ECHO:"),
        "{review:#}"
    );

    let listed = ctx.run(&["runs", "--json"]);
    let runs = listed.json();
    assert_eq!(runs.as_array().unwrap().len(), 3, "{runs:#}");
}

#[test]
fn migrate_takes_each_file_through_its_pipeline() {
    let ctx = TestContext::new();
    let migrated = run_by_name(
        &ctx,
        "migrate",
        json!({"model": "mock", "instructions": "use the new API", "files": ["a.js", "b.js", "c.js"]}),
    );
    assert_eq!(
        migrated["migrated"],
        json!(["a.js", "b.js", "c.js"]),
        "{migrated:#}"
    );
    assert_eq!(migrated["needsAPerson"], json!([]));
}

#[test]
fn fix_tests_attempts_in_worktrees_and_keeps_a_branch_without_touching_the_tree() {
    let ctx = TestContext::new();
    git(&ctx, &["init", "-q", "-b", "main"]);
    std::fs::write(ctx.project().join("a.txt"), "one\n").unwrap();
    git(&ctx, &["add", "a.txt"]);
    git(&ctx, &["commit", "-q", "-m", "base"]);
    // The mock agent plays `@mock` lines of its prompt: each attempt writes a file in its
    // own worktree, as a coding agent edits its tree.
    let result = run_by_name(
        &ctx,
        "fix-tests",
        json!({"model": "mock", "command": "make test", "attempts": 2,
               "notes": "@mock write_cwd FIXED.txt fixed"}),
    );
    assert_eq!(result["fixed"], true, "{result:#}");
    let branches = result["branches"].as_array().unwrap();
    assert_eq!(branches.len(), 2, "{result:#}");
    assert!(branches.contains(&result["branch"]), "{result:#}");
    assert_eq!(git(&ctx, &["status", "--porcelain"]), "");
    assert_eq!(
        git(
            &ctx,
            &[
                "show",
                &format!("{}:FIXED.txt", result["branch"].as_str().unwrap())
            ]
        ),
        "fixed"
    );

    let runs = ctx.run(&["runs", "--json"]).json();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();
    let changes = ctx.run(&["changes", &run_id, "--json"]);
    assert_eq!(changes.code(), 0, "{}", changes.stderr);
    let listed: Vec<Value> = changes.json()["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["changes"]["branch"].clone())
        .filter(|branch| !branch.is_null())
        .collect();
    assert_eq!(&listed, branches, "{}", changes.stdout);
}
