//! Tests of the JSON Schema checks.

use super::*;
use serde_json::json;

fn assert_fabricates(schema: Value, expected: Value) {
    check_schema(&schema).unwrap();
    let value = fabricate(&schema);
    assert_eq!(value, expected);
    if let Err(error) = validate(&schema, &value) {
        panic!("fabricated {value} does not validate: {error}");
    }
}

#[test]
fn check_schema_accepts_ordinary_schemas() {
    check_schema(&json!({})).unwrap();
    check_schema(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).unwrap();
    check_schema(&json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"n": {"type": "integer"}},
        "items": {"$ref": "#/definitions/n"}
    }))
    .unwrap();
}

#[test]
fn check_schema_says_what_is_wrong() {
    assert!(
        check_schema(&json!("string"))
            .unwrap_err()
            .contains("a string")
    );
    assert!(
        check_schema(&json!(true))
            .unwrap_err()
            .contains("must be an object")
    );
    let error = check_schema(&json!({"type": "strnig"})).unwrap_err();
    assert!(error.starts_with("invalid JSON Schema"), "{error}");
    let error = check_schema(&json!({"properties": {"a": {"minLength": -1}}})).unwrap_err();
    assert!(error.contains("/properties/a/minLength"), "{error}");
    let error = check_schema(&json!({"$ref": "#/$defs/missing"})).unwrap_err();
    assert!(error.starts_with("invalid JSON Schema"), "{error}");
    // An unknown meta-schema is an error, not a panic or a fetch.
    assert!(check_schema(&json!({"$schema": "https://example.com/custom"})).is_err());
    // Remote references are never fetched.
    assert!(check_schema(&json!({"$ref": "https://example.com/schema.json"})).is_err());
}

#[test]
fn validate_lists_errors_with_paths() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name"]
    });
    validate(&schema, &json!({"name": "x", "count": 2, "tags": ["a"]})).unwrap();
    let error = validate(&schema, &json!({"count": -1, "tags": [1, 2]})).unwrap_err();
    assert!(error.contains("at /count:"), "{error}");
    assert!(error.contains("at /tags/0:"), "{error}");
    assert!(error.contains("more error"), "{error}");
    let error = validate(&schema, &json!([])).unwrap_err();
    assert!(error.starts_with("at /:"), "{error}");
    assert!(validate(&json!({"type": 5}), &json!(1)).is_err());
}

#[test]
fn validate_messages_are_bounded() {
    let schema = json!({"type": "array", "items": {"type": "integer"}});
    let huge = json!(vec!["x".repeat(10_000); 500]);
    let error = validate(&schema, &huge).unwrap_err();
    assert!(error.len() <= MAX_ERROR_BYTES, "{}", error.len());
    assert!(error.contains("100+ more errors"), "{error}");
}

#[test]
fn fabricate_precedence() {
    assert_fabricates(json!({"const": 7, "enum": [1, 7], "default": 7}), json!(7));
    assert_fabricates(json!({"enum": ["b", "a"], "default": "a"}), json!("b"));
    assert_fabricates(json!({"type": "string", "default": "d"}), json!("d"));
    assert_fabricates(
        json!({"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        json!(1),
    );
    assert_fabricates(
        json!({"oneOf": [{"type": "null"}, {"type": "boolean"}]}),
        json!(true),
    );
    assert_fabricates(json!({"anyOf": [{"type": "null"}]}), json!(null));
}

#[test]
fn fabricate_by_type() {
    assert_fabricates(json!({"type": "string"}), json!("mock-value"));
    assert_fabricates(json!({"type": "boolean"}), json!(true));
    assert_fabricates(json!({"type": "null"}), json!(null));
    assert_fabricates(json!({"type": "integer"}), json!(1));
    assert_fabricates(json!({"type": "integer", "minimum": 5}), json!(5));
    assert_fabricates(json!({"type": "integer", "exclusiveMinimum": 5}), json!(6));
    assert_fabricates(json!({"type": "integer", "maximum": 0}), json!(0));
    assert_fabricates(json!({"type": "number", "minimum": 0.5}), json!(0.5));
    assert_fabricates(json!({"type": ["null", "string"]}), json!("mock-value"));
    assert_fabricates(json!({"type": ["null"]}), json!(null));
    assert_fabricates(
        json!({"type": "string", "minLength": 12}),
        json!("mock-valuexx"),
    );
    assert_fabricates(json!({"type": "string", "maxLength": 4}), json!("mock"));
    assert_fabricates(json!({}), json!("mock-value"));
}

#[test]
fn fabricate_objects() {
    assert_fabricates(
        json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string"},
                "score": {"type": "number", "minimum": 0, "maximum": 10},
                "verdict": {"enum": ["approve", "reject"]},
                "files": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["summary", "extra"]
        }),
        json!({
            "summary": "mock-summary",
            "score": 0,
            "verdict": "approve",
            "files": ["mock-files"],
            "extra": "mock-extra"
        }),
    );
    // No type: inferred from `properties`.
    assert_fabricates(
        json!({"properties": {"a": {"type": "boolean"}}, "additionalProperties": false}),
        json!({"a": true}),
    );
    assert_fabricates(
        json!({"required": ["n"], "additionalProperties": {"type": "integer"}}),
        json!({"n": 1}),
    );
}

#[test]
fn fabricate_arrays() {
    assert_fabricates(json!({"type": "array"}), json!(["mock-value"]));
    assert_fabricates(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 2}),
        json!([1, 1]),
    );
    assert_fabricates(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 0}),
        json!([1]),
    );
    assert_fabricates(
        json!({"type": "array", "items": {"type": "string"}, "maxItems": 0}),
        json!([]),
    );
    assert_fabricates(
        json!({"items": {"type": "string"}, "minItems": 3, "uniqueItems": true}),
        json!(["mock-value", "mock-value-2", "mock-value-3"]),
    );
    assert_fabricates(
        json!({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                   "minItems": 2}),
        json!([1, "mock-value"]),
    );
    // The spec caps mock arrays at three items.
    assert_eq!(
        fabricate(&json!({"type": "array", "minItems": 10})),
        json!(["mock-value", "mock-value", "mock-value"])
    );
}

#[test]
fn fabricate_follows_refs_and_combinators() {
    assert_fabricates(
        json!({
            "$defs": {"finding": {"type": "object", "properties": {
                "file": {"type": "string"}, "line": {"type": "integer", "minimum": 1}
            }, "required": ["file", "line"]}},
            "type": "object",
            "properties": {"findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}}}
        }),
        json!({"findings": [{"file": "mock-file", "line": 1}]}),
    );
    assert_fabricates(
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"level": {"enum": ["low", "high"]}},
            "properties": {"level": {"$ref": "#/definitions/level"}}
        }),
        json!({"level": "low"}),
    );
    assert_fabricates(
        json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}, "a": {"maxLength": 3}},
             "required": ["b"]}
        ]}),
        json!({"a": "moc", "b": 1}),
    );
    assert_fabricates(
        json!({"type": "object", "properties": {"kind": {"type": "string"}},
                   "anyOf": [{"required": ["x"]}, {"required": ["y"]}]}),
        json!({"kind": "mock-kind", "x": "mock-x"}),
    );
    assert_fabricates(
        json!({"anyOf": [{"type": "string", "const": "fixed"}, {"type": "null"}]}),
        json!("fixed"),
    );
}

#[test]
fn fabricate_ends_on_recursive_schemas() {
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }, "required": ["name"]}},
        "$ref": "#/$defs/node"
    });
    let value = fabricate(&tree);
    validate(&tree, &value).unwrap();
    assert_eq!(value["name"], json!("mock-name"));

    let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                           "$ref": "#/$defs/a"});
    assert_eq!(fabricate(&cycle), json!("mock-value"));
    // A dangling reference contributes nothing.
    assert_eq!(
        fabricate(&json!({"$ref": "#/nowhere"})),
        json!("mock-value")
    );
}

#[test]
fn extract_prefers_the_last_parsing_fence() {
    let text = "Here you go:\n```json\n{\"a\": 1}\n```\nand fixed:\n```json\n{\"a\": 2}\n```\nWarning: done";
    assert_eq!(extract_json(text), Some(json!({"a": 2})));
    let text = "```\n[1, 2]\n```\n```json\nnot json\n```";
    assert_eq!(extract_json(text), Some(json!([1, 2])));
    let text = "````json\n{\"fence\": \"```\"}\n````";
    assert_eq!(extract_json(text), Some(json!({"fence": "```"})));
    let text = "Result:\n```json\n{\"unclosed\": true}\n";
    assert_eq!(extract_json(text), Some(json!({"unclosed": true})));
}

#[test]
fn extract_whole_text() {
    assert_eq!(extract_json("  {\"a\": [1]}\n"), Some(json!({"a": [1]})));
    assert_eq!(
        extract_json("\"just a string\""),
        Some(json!("just a string"))
    );
    assert_eq!(extract_json("42"), Some(json!(42)));
}

#[test]
fn extract_embedded_values() {
    let text = "Sure! {\"verdict\": \"ok\", \"notes\": \"use {braces} and \\\"quotes\\\"\"}\nWarning: something happened";
    assert_eq!(
        extract_json(text),
        Some(json!({"verdict": "ok", "notes": "use {braces} and \"quotes\""}))
    );
    let text = "draft: {\"v\": 1} final: {\"v\": 2} Warning: {not json";
    assert_eq!(extract_json(text), Some(json!({"v": 2})));
    let text = "The list is [1, 2, {\"x\": [3]}] (done).";
    assert_eq!(extract_json(text), Some(json!([1, 2, {"x": [3]}])));
    let text = "Note: a { stray brace, then {\"real\": true} and chatter";
    assert_eq!(extract_json(text), Some(json!({"real": true})));
    assert_eq!(extract_json("no json here"), None);
    assert_eq!(extract_json(""), None);
    assert_eq!(extract_json("{unbalanced"), None);
    // An unclosed outer object still yields the last whole value inside it.
    let text = "{\"x\": 1, \"y\": {\"real\": [1, -2.5e3, null, \"\\u00e9\"]} chatter";
    assert_eq!(
        extract_json(text),
        Some(json!({"real": [1, -2500.0, null, "é"]}))
    );
    // Brackets inside strings are not starts; a later value wins.
    let text = "[\"{\\\"a\\\": 1}\", 2] then [3]";
    assert_eq!(extract_json(text), Some(json!([3])));
    let text = "{\"a\": 1] {\"b\": 2}";
    assert_eq!(extract_json(text), Some(json!({"b": 2})));
}

#[test]
fn extract_is_cheap_on_hostile_text() {
    let text = "[".repeat(1 << 20);
    assert_eq!(extract_json(&text), None);
    let text = "{\"a\":".repeat(1 << 17);
    assert_eq!(extract_json(&text), None);
    let text = "[1,".repeat(1 << 18);
    assert_eq!(extract_json(&text), None);
    let text = format!("{}{{\"ok\": 1}}", "{\"s\": \"x\", ".repeat(1 << 16));
    assert_eq!(extract_json(&text), Some(json!({"ok": 1})));
}

#[test]
fn fabricated_values_extract_and_validate_round_trip() {
    let schema = json!({"type": "object", "properties": {
            "summary": {"type": "string"}, "ok": {"type": "boolean"}}, "required": ["summary"]});
    let answer = format!(
        "Done.\n```json\n{}\n```\nWarning: telemetry off",
        serde_json::to_string_pretty(&fabricate(&schema)).unwrap()
    );
    let value = extract_json(&answer).unwrap();
    validate(&schema, &value).unwrap();
}

#[test]
fn instructions_embed_the_schema() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let text = output_instructions(&schema);
    assert!(
        text.contains("```json\n{\n  \"type\": \"object\""),
        "{text}"
    );
    assert!(text.contains("one JSON value"));
    let text = repair_instructions("at /a: 1 is not of type \"string\"", &schema);
    assert!(text.starts_with(
        "Your previous answer did not match the required JSON schema: at /a: 1 is not"
    ));
    assert!(text.contains("Reply again with only"));
    assert!(text.contains("\"properties\""));
}
