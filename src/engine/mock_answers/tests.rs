use serde_json::json;

use super::*;

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "real": {"type": "boolean"}, "reason": {"type": "string"}, "tags": {"type": "array"}
    }, "required": ["real", "reason"]})
}

fn made_up() -> Value {
    json!({"real": true, "reason": "mock-reason", "tags": ["a", "b"]})
}

#[test]
fn the_last_matching_rule_wins_and_merges_over_the_made_up_answer() {
    let mock = MockAnswers::parse(r#"{"refute:*": {"real": false}, "refute:db:*": {"tags": []}}"#)
        .unwrap();
    let db = mock
        .answer("refute:db:1", Some(&schema()), made_up())
        .unwrap()
        .unwrap();
    assert_eq!(
        db,
        json!({"real": true, "reason": "mock-reason", "tags": []})
    );
    let api = mock
        .answer("refute:api:1", Some(&schema()), made_up())
        .unwrap()
        .unwrap();
    assert_eq!(api["real"], false);
    assert!(mock.answer("audit:x", Some(&schema()), made_up()).is_none());
    let report = mock.report();
    assert_eq!(report["rules"][0]["matchingCalls"], 2);
    assert_eq!(report["rules"][0]["consumedCalls"], 1);
    assert_eq!(report["unused"], json!([]));
}

#[test]
fn a_sequence_answers_in_turn_and_fails_when_used_up() {
    let mock =
        MockAnswers::parse(r#"{"judge:*": {"$sequence": [{"real": false}, {"real": true}]}}"#)
            .unwrap();
    let first = mock
        .answer("judge:1", Some(&schema()), made_up())
        .unwrap()
        .unwrap();
    let second = mock
        .answer("judge:2", Some(&schema()), made_up())
        .unwrap()
        .unwrap();
    assert_eq!(
        (first["real"].clone(), second["real"].clone()),
        (json!(false), json!(true))
    );
    let error = mock
        .answer("judge:3", Some(&schema()), made_up())
        .unwrap()
        .unwrap_err();
    assert!(
        error.contains("\"judge:3\"") && error.contains("used up"),
        "{error}"
    );
    assert_eq!(mock.report()["rules"][0]["sequenceLength"], 2);
}

#[test]
fn falsy_values_and_arrays_replace_and_a_bad_answer_names_no_value() {
    let mock = MockAnswers::parse(r#"{"*": {"reason": "", "real": 0}}"#).unwrap();
    let error = mock
        .answer("x", Some(&schema()), made_up())
        .unwrap()
        .unwrap_err();
    assert!(
        error.contains("\"x\"") && error.contains("/real"),
        "{error}"
    );
    assert!(!error.contains('0') || error.contains("/real"), "{error}");
    let text = MockAnswers::parse(r#"{"*": ["a"]}"#).unwrap();
    assert!(text.answer("x", None, json!("made")).unwrap().is_err());
    let plain = MockAnswers::parse(r#"{"*": "fine"}"#).unwrap();
    assert_eq!(
        plain.answer("x", None, json!("made")).unwrap().unwrap(),
        json!("fine")
    );
}

#[test]
fn malformed_fixtures_are_refused_naming_the_rule() {
    for (fixture, part) in [
        ("[1]", "JSON object"),
        ("{\"\": 1}", "1 to 128"),
        ("{\"a\\\\\": 1}", "lone"),
        ("{\"a\": {\"$sequence\": []}}", "$sequence"),
        ("{\"a\": {\"$sequence\": [1], \"x\": 2}}", "beside"),
        ("not json", "not JSON"),
    ] {
        let error = MockAnswers::parse(fixture).unwrap_err();
        assert!(error.contains(part), "{fixture}: {error}");
    }
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(40), "]".repeat(40));
    assert!(MockAnswers::parse(&deep).unwrap_err().contains("deeper"));
    let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("\"r{i}\": 1")).collect();
    assert!(
        MockAnswers::parse(&format!("{{{}}}", many.join(",")))
            .unwrap_err()
            .contains("rules")
    );
    let unused = MockAnswers::parse(r#"{"never": 1}"#).unwrap();
    assert_eq!(unused.report()["unused"], json!(["never"]));
}
