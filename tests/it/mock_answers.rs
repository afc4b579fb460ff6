//! `validate --mock-answers` through the real binary: a rule sends the dry run down the branch
//! it names (seen in the calls the dry run counts), a `$sequence` makes a `gate()` loop take a
//! second round, an unused rule is reported and warned about, a used-up sequence and an answer
//! that breaks the call's schema fail the dry run (exit 2, naming label and glob, never the
//! value), and a malformed fixture or both flags together are usage errors (exit 3).

use serde_json::{Value, json};

use crate::support::context::TestContext;

const BRANCH: &str = "export const meta = { name: 'branch', description: 'd', model: 'mock' };
const verdict = { type: 'object', properties: { real: { type: 'boolean' }, reason: { type: 'string' } }, required: ['real', 'reason'] };
const checked = await parallel([1, 2].map((i) => () => agent('check ' + i, { label: `refute:area:${i}`, schema: verdict })));
for (const [i, v] of checked.entries()) {
  if (!v.real) await agent('follow up ' + i, { label: `follow:${i}` });
}
const ok = { type: 'object', properties: { ok: { type: 'boolean' }, feedback: { type: 'string' } }, required: ['ok'] };
await gate((feedback) => agent('work ' + (feedback ?? ''), { label: 'work' }), () => agent('judge', { label: 'verify', schema: ok }), { attempts: 3 });
return checked.length;
";

fn validate(ctx: &TestContext, extra: &[&str]) -> (i32, Value, String) {
    let script = ctx.write("branch.js", BRANCH).display().to_string();
    let mut args = vec!["validate", script.as_str(), "--no-probe"];
    args.extend_from_slice(extra);
    let finished = ctx.run(&args);
    let report = serde_json::from_str(&finished.stdout).unwrap_or(Value::Null);
    (finished.code(), report, finished.stderr)
}

#[test]
fn rules_choose_the_branch_and_sequences_answer_in_turn() {
    let ctx = TestContext::new();
    let (code, plain, stderr) = validate(&ctx, &[]);
    assert_eq!(code, 0, "{stderr}");
    // The made-up verdicts are `real: true` and `ok: true`: no follow-up, one gate round.
    assert_eq!(plain["dryRunCalls"], 4, "{plain:#}");
    assert_eq!(plain["mockAnswers"], Value::Null);

    let fixture = json!({
        "refute:*": {"real": false},
        "refute:area:2": {"reason": "only the reason changes"},
        "verify": {"$sequence": [{"ok": false, "feedback": "again"}, {"ok": true}]},
        "never": "x",
    });
    let (code, scripted, stderr) = validate(&ctx, &["--mock-answers", &fixture.to_string()]);
    assert_eq!(code, 0, "{stderr}");
    // refute:area:1 takes `real: false` (one follow-up); refute:area:2's last matching rule
    // keeps the made-up `real: true`; the gate takes a second round (work + verify twice).
    assert_eq!(scripted["dryRunCalls"], 2 + 1 + 4, "{scripted:#}");
    let rules = &scripted["mockAnswers"]["rules"];
    assert_eq!(
        rules[0],
        json!({"glob": "refute:*", "matchingCalls": 2, "consumedCalls": 1})
    );
    assert_eq!(rules[2]["consumedCalls"], 2);
    assert_eq!(rules[2]["sequenceLength"], 2);
    assert_eq!(scripted["mockAnswers"]["unused"], json!(["never"]));
    assert!(
        scripted["warnings"]
            .to_string()
            .contains("the mock answer \\\"never\\\" answered no agent call"),
        "{scripted:#}"
    );

    // The same fixture from a file gives the same report, every time.
    let file = ctx.write("answers.json", &fixture.to_string());
    for _ in 0..3 {
        let (code, again, _) = validate(&ctx, &["--mock-answers-file", file.to_str().unwrap()]);
        assert_eq!(code, 0);
        assert_eq!(again["mockAnswers"], scripted["mockAnswers"]);
        assert_eq!(again["dryRunCalls"], scripted["dryRunCalls"]);
    }
}

#[test]
fn answers_that_cannot_be_given_fail_the_dry_run_and_bad_fixtures_are_usage_errors() {
    let ctx = TestContext::new();
    let used_up = json!({"verify": {"$sequence": [{"ok": false, "feedback": "no"}]}});
    let (code, _, stderr) = validate(&ctx, &["--mock-answers", &used_up.to_string()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("\"verify\"") && stderr.contains("used up"),
        "{stderr}"
    );

    let secret = json!({"refute:*": {"real": "SECRET-VALUE"}});
    let (code, _, stderr) = validate(&ctx, &["--mock-answers", &secret.to_string()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("refute:area:1") && stderr.contains("/real"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET-VALUE"), "{stderr}");

    for fixture in [
        r#"{"a\\": 1}"#,
        "[1]",
        r#"{"a": {"$sequence": []}}"#,
        "not json",
    ] {
        let (code, _, stderr) = validate(&ctx, &["--mock-answers", fixture]);
        assert_eq!(code, 3, "{fixture}: {stderr}");
        assert!(stderr.contains("--mock-answers"), "{stderr}");
    }
    let (code, _, stderr) = validate(
        &ctx,
        &[
            "--mock-answers",
            "{}",
            "--mock-answers-file",
            "answers.json",
        ],
    );
    assert_eq!(code, 3, "{stderr}");
}

#[test]
fn a_bundled_workflow_is_tested_without_tokens() {
    let ctx = TestContext::new();
    let args = json!({"model": "mock", "instructions": "rename", "files": ["a.txt", "b.txt"]});
    let check = |fixture: Option<Value>| {
        let mut command = vec![
            "validate".to_owned(),
            "migrate".to_owned(),
            "--no-probe".to_owned(),
            "--args".to_owned(),
            args.to_string(),
        ];
        if let Some(fixture) = fixture {
            command.extend(["--mock-answers".to_owned(), fixture.to_string()]);
        }
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let finished = ctx.run(&command);
        assert_eq!(finished.code(), 0, "{}", finished.stderr);
        finished.json()["dryRunCalls"].as_u64().unwrap()
    };
    // Each file is migrated and verified once...
    assert_eq!(check(None), 4);
    // ...and a verifier that rejects a.txt's first try sends it round the gate again.
    let rejecting = json!({"verify:a.txt:*": {"$sequence": [{"ok": false, "feedback": "still old"}, {"ok": true}]}});
    assert_eq!(check(Some(rejecting)), 6);
}
