//! The rules of `meta` itself: the required keys, phases, model, backends, the input
//! schema and unknown keys.

use super::*;

#[test]
fn meta_must_be_an_object() {
    rejects_at("export const meta = [];", "meta must be an object", 1, 21);
    rejects_at("export const meta = 'x';", "meta must be an object", 1, 21);
}

#[test]
fn name_and_description_are_required_and_non_blank() {
    rejects_at(
        "export const meta = { description: 'd' };",
        "meta.name is required",
        1,
        21,
    );
    rejects_at(
        "export const meta = { name: 'n' };",
        "meta.description is required",
        1,
        21,
    );
    rejects_at(
        "export const meta = { name: '  ', description: 'd' };",
        "meta.name must be a non-empty string",
        1,
        29,
    );
    rejects(
        "export const meta = { name: 3, description: 'd' };",
        "meta.name must be a non-empty string",
    );
    rejects(
        "export const meta = { name: 'n', description: null };",
        "meta.description must be a non-empty string",
    );
}

#[test]
fn accepts_phases() {
    let script = ok(
        "export const meta = { name: 'n', description: 'd', phases: [\n  { title: 'Plan', detail: 'think' },\n  { title: 'Build', model: 'sonnet', detail: '' },\n] };\n",
    );
    assert_eq!(
        script.phases,
        vec![
            Phase {
                title: "Plan".into(),
                detail: Some("think".into()),
                model: None
            },
            Phase {
                title: "Build".into(),
                detail: Some(String::new()),
                model: Some("sonnet".into())
            },
        ]
    );
}

#[test]
fn rejects_bad_phases() {
    let with_phases = |phases: &str| {
        format!("export const meta = {{ name: 'n', description: 'd', phases: {phases} }};")
    };
    rejects(&with_phases("{}"), "meta.phases must be an array");
    rejects(&with_phases("['Plan']"), "meta.phases[0] must be an object");
    rejects(
        &with_phases("[{ title: 'a' }, { detail: 'x' }]"),
        "meta.phases[1].title is required",
    );
    rejects(
        &with_phases("[{ title: 'a' }, { title: ' ' }]"),
        "meta.phases[1].title must be a non-empty string",
    );
    rejects(
        &with_phases("[{ title: 'a', detail: 1 }]"),
        "meta.phases[0].detail must be a string",
    );
    rejects(
        &with_phases("[{ title: 'a', model: '' }]"),
        "meta.phases[0].model must be a non-empty string",
    );
    rejects(
        &with_phases("[{ title: 'a', titel: 'b' }]"),
        "meta.phases[0].titel is not a known field",
    );
    let source = with_phases("[{ title: 'Plan' }, { title: 'Plan' }]");
    rejects_at(
        &source,
        "meta.phases[1].title \"Plan\" repeats the title of meta.phases[0]",
        1,
        89,
    );
}

#[test]
fn model_must_be_non_blank() {
    assert_eq!(
        ok("export const meta = { name: 'n', description: 'd', model: 'opus' };")
            .model
            .as_deref(),
        Some("opus")
    );
    rejects(
        "export const meta = { name: 'n', description: 'd', model: '' };",
        "meta.model must be a non-empty string",
    );
}

#[test]
fn accepts_backends() {
    let script = ok(
        "export const meta = { name: 'n', description: 'd', backends: {
        'my-agent.v2': { command: 'my-agent', args: ['--acp'], env: { TOKEN_FILE: '/x' },
                         sessionMeta: { a: 1 }, structuredOutputTool: false },
        other_1: { command: 'o' },
    } };",
    );
    assert_eq!(
        script.backends,
        Some(json!({
            "my-agent.v2": {"command": "my-agent", "args": ["--acp"], "env": {"TOKEN_FILE": "/x"},
                            "sessionMeta": {"a": 1}, "structuredOutputTool": false},
            "other_1": {"command": "o"},
        }))
    );
}

#[test]
fn rejects_bad_backends() {
    let with_backends = |backends: &str| {
        format!("export const meta = {{ name: 'n', description: 'd', backends: {backends} }};")
    };
    for (backends, needle) in [
        ("[]", "meta.backends must be an object"),
        ("{ x: 'cmd' }", "meta.backends.x must be an object"),
        ("{ x: {} }", "meta.backends.x.command is required"),
        (
            "{ x: { command: ' ' } }",
            "meta.backends.x.command must be a non-empty string",
        ),
        (
            "{ x: { command: 'c', args: 'a' } }",
            "meta.backends.x.args must be an array of strings",
        ),
        (
            "{ x: { command: 'c', args: ['a', 1] } }",
            "meta.backends.x.args[1] must be a string",
        ),
        (
            "{ x: { command: 'c', env: [] } }",
            "meta.backends.x.env must be an object",
        ),
        (
            "{ x: { command: 'c', env: { A: 1 } } }",
            "meta.backends.x.env.A must be a string",
        ),
        (
            "{ x: { command: 'c', sessionMeta: 1 } }",
            "meta.backends.x.sessionMeta must be an object",
        ),
        (
            "{ x: { command: 'c', structuredOutputTool: 'yes' } }",
            "meta.backends.x.structuredOutputTool must be true or false",
        ),
        (
            "{ x: { command: 'c', arg: [] } }",
            "meta.backends.x.arg is not a known field",
        ),
        (
            "{ 'a b': { command: 'c' } }",
            "meta.backends has an invalid name \"a b\"",
        ),
        ("{ '-a': { command: 'c' } }", "invalid name \"-a\""),
        ("{ '': { command: 'c' } }", "invalid name \"\""),
        ("{ 'é': { command: 'c' } }", "invalid name"),
        (
            "{ Claude: { command: 'c' } }",
            "meta.backends.Claude uses a reserved name",
        ),
        ("{ codex: { command: 'c' } }", "reserved name"),
        ("{ OPENCODE: { command: 'c' } }", "reserved name"),
        ("{ pi: { command: 'c' } }", "reserved name"),
        (
            "{ 'a.b': { command: 1 } }",
            "meta.backends[\"a.b\"].command must be",
        ),
    ] {
        let error = err(&with_backends(backends));
        assert!(
            error.message.contains(needle),
            "{backends}: {:?} should contain {needle:?}",
            error.message
        );
    }
    let long_name = "a".repeat(64);
    ok(&with_backends(&format!(
        "{{ {long_name}: {{ command: 'c' }} }}"
    )));
    rejects(
        &with_backends(&format!("{{ {long_name}b: {{ command: 'c' }} }}")),
        "invalid name",
    );
}

#[test]
fn input_schema_must_be_an_object() {
    let script = ok(
        "export const meta = { name: 'n', description: 'd', inputSchema: { type: 'object', required: ['x'] } };",
    );
    assert_eq!(
        script.input_schema,
        Some(json!({"type": "object", "required": ["x"]}))
    );
    rejects(
        "export const meta = { name: 'n', description: 'd', inputSchema: true };",
        "meta.inputSchema must be an object (a JSON Schema)",
    );
}

#[test]
fn unknown_keys_are_kept_and_listed_sorted() {
    let script = ok("export const meta = { zeta: 1, name: 'n', description: 'd', alpha: [2] };");
    assert_eq!(script.unknown_meta_keys, vec!["alpha", "zeta"]);
    assert_eq!(script.meta["zeta"], json!(1));
    let keys: Vec<&String> = script.meta.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["zeta", "name", "description", "alpha"],
        "source order is kept"
    );
}
