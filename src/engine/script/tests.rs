//! Cases for every static check, positions included.

use serde_json::json;

use super::*;

const MINIMAL_META: &str = "export const meta = { name: 'n', description: 'd' };\n";

fn ok(source: &str) -> AnalyzedScript {
    match analyze(source.as_bytes()) {
        Ok(script) => script,
        Err(error) => panic!("expected {source:?} to pass, got: {}", error.message),
    }
}

fn err(source: &str) -> ScriptError {
    match analyze(source.as_bytes()) {
        Ok(_) => panic!("expected {source:?} to be rejected"),
        Err(error) => error,
    }
}

/// Asserts the error message contains `needle` and sits at `line`:`column`.
fn rejects_at(source: &str, needle: &str, line: u32, column: u32) {
    let error = err(source);
    assert!(
        error.message.contains(needle),
        "message {:?} should contain {needle:?}",
        error.message
    );
    assert_eq!(
        (error.line, error.column),
        (Some(line), Some(column)),
        "position of {:?}",
        error.message
    );
    assert!(
        error
            .message
            .ends_with(&format!(" at line {line}, column {column}")),
        "message {:?} should end with its position",
        error.message
    );
}

fn rejects(source: &str, needle: &str) {
    let error = err(source);
    assert!(
        error.message.contains(needle),
        "message {:?} should contain {needle:?}",
        error.message
    );
}

/// The meta value of a script whose meta literal is `literal`; the literal must be valid.
fn meta_of(literal: &str) -> Value {
    ok(&format!("export const meta = {literal};\nreturn 1;\n")).meta
}

/// Parses `value` as the `extra` field of an otherwise valid meta.
fn extra(value: &str) -> Value {
    let meta = meta_of(&format!(
        "{{ name: 'n', description: 'd', extra: {value} }}"
    ));
    meta["extra"].clone()
}

fn extra_error(value: &str) -> ScriptError {
    err(&format!(
        "export const meta = {{ name: 'n', description: 'd', extra: {value} }};\n"
    ))
}

/// 1-based (line, char column) of the first occurrence of `needle` in `text`.
fn position_of(text: &str, needle: &str) -> (u32, u32) {
    let offset = text.find(needle).expect("needle present");
    line_and_column(text, offset)
}

// ---- size and encoding ----

#[test]
fn rejects_empty_and_blank_sources() {
    assert!(err("").message.contains("the script is empty"));
    assert!(err(" \n\t\r\n ").message.contains("the script is empty"));
    assert_eq!(err("").line, None);
}

#[test]
fn accepts_exactly_the_size_limit_and_rejects_one_byte_more() {
    let mut source = String::from(MINIMAL_META);
    source.push_str("/*");
    let filler = MAX_SCRIPT_BYTES - source.len() - 2;
    source.push_str(&"x".repeat(filler));
    source.push_str("*/");
    assert_eq!(source.len(), MAX_SCRIPT_BYTES);
    ok(&source);

    source.push(' ');
    let error = err(&source);
    assert_eq!(
        error.message,
        "the script is 1048577 bytes; the limit is 1048576 bytes (1 MiB)"
    );
    assert_eq!(error.line, None);
}

#[test]
fn reports_the_first_invalid_utf8_byte() {
    let mut source = b"export const meta = {\n  name: 'ab".to_vec();
    source.push(0xFF);
    source.extend_from_slice(b"', description: 'd' };\n");
    let error = analyze(&source).unwrap_err();
    assert_eq!(
        error.message,
        "the script is not valid UTF-8: the byte at byte offset 33 (line 2, column 12) \
         does not belong to a UTF-8 character"
    );
    assert_eq!((error.line, error.column), (Some(2), Some(12)));
}

#[test]
fn counts_invalid_utf8_columns_in_characters() {
    let mut source = "é\u{1F600}".as_bytes().to_vec();
    source.push(0xC3); // a truncated two-byte sequence at the end
    let error = analyze(&source).unwrap_err();
    assert!(
        error
            .message
            .contains("the byte at byte offset 6 (line 1, column 3)")
    );
}

// ---- the first statement ----

#[test]
fn accepts_minimal_meta() {
    let script = ok(MINIMAL_META);
    assert_eq!(script.name, "n");
    assert_eq!(script.description, "d");
    assert_eq!(script.meta, json!({"name": "n", "description": "d"}));
    assert!(script.phases.is_empty());
    assert_eq!(script.model, None);
    assert_eq!(script.backends, None);
    assert_eq!(script.input_schema, None);
    assert!(script.unknown_meta_keys.is_empty());
}

#[test]
fn rejects_a_different_first_statement_and_quotes_it() {
    let error = err("const x = 1;\n");
    assert_eq!(
        error.message,
        "the first statement must be `export const meta = { ... }`; found `const x` at line 1, column 1"
    );
    rejects_at("// c\n  export let meta = {};", "found `export let`", 2, 10);
    rejects_at("export const x = {};", "found `export const x`", 1, 14);
    rejects_at(
        "export const meta == {};",
        "found `export const meta =`",
        1,
        19,
    );
    rejects_at("exports.meta = {}", "found `exports.`", 1, 1);
    rejects_at("import x from 'y';\n", "found `import x`", 1, 1);
    rejects_at("// only a comment\n", "found the end of the script", 2, 1);
    rejects_at("log(1);\nexport const meta = {}", "found `log(`", 1, 1);
}

#[test]
fn meta_must_be_the_only_declarator() {
    rejects_at(
        "export const meta = { name: 'n', description: 'd' }, other = 1;",
        "`meta` must be the only declaration",
        1,
        52,
    );
}

#[test]
fn skips_comments_and_a_shebang_before_meta() {
    let source = "#!/usr/bin/env agentprism\n// line comment\n/* block\n comment */ export const meta = { name: 'n', description: 'd' }; return 1;\n";
    let script = ok(source);
    assert!(
        script.body.starts_with("//"),
        "the shebang becomes a comment"
    );
    assert_eq!(script.body.len(), source.len());
    assert!(
        script
            .body
            .contains("// line comment\n/* block\n comment */ ")
    );
    assert_eq!(
        position_of(&script.body, "return 1"),
        position_of(source, "return 1")
    );
}

#[test]
fn a_shebang_is_only_recognised_at_the_very_start() {
    rejects(" #!/bin/sh\nexport const meta = {}", "found `#!`");
}

#[test]
fn statement_ends_with_semicolon_newline_or_end() {
    ok("export const meta = { name: 'n', description: 'd' }");
    ok("export const meta = { name: 'n', description: 'd' }\nreturn 1");
    ok("export const meta = { name: 'n', description: 'd' } // trailing\nreturn 1");
    ok("export const meta = { name: 'n', description: 'd' } /* a\n */ return 1");
    ok("export const meta = { name: 'n', description: 'd' }\n++count");
    rejects_at(
        "export const meta = { name: 'n', description: 'd' } return 1",
        "found `return` after it",
        1,
        53,
    );
    rejects_at(
        "export const meta = { name: 'n', description: 'd' }\n(async () => 1)()",
        "the next line starts with `(`",
        2,
        1,
    );
    rejects(
        "export const meta = { name: 'n', description: 'd' }\n.name",
        "would continue the meta expression",
    );
    rejects(
        "export const meta = { name: 'n', description: 'd' }\n`x`",
        "would continue the meta expression",
    );
}

#[test]
fn blank_source_with_unterminated_comment_is_rejected() {
    rejects_at("/* never closed", "unterminated `/*` comment", 1, 1);
    rejects_at(
        "export const meta = { /* open",
        "unterminated `/*` comment",
        1,
        23,
    );
}

// ---- the literal ----

#[test]
fn parses_keys_of_every_kind() {
    let meta = meta_of(
        "{ name: 'n', 'description': \"d\", 0x10: 1, 1.50: 2, 1e21: 3, default: 4, $x_1: 5, }",
    );
    assert_eq!(
        meta,
        json!({"name": "n", "description": "d", "16": 1, "1.5": 2, "1e+21": 3, "default": 4, "$x_1": 5})
    );
}

#[test]
fn parses_nested_arrays_and_objects() {
    assert_eq!(
        extra("[1, [2, [3, {a: [], b: {}}]], {c: [true, false, null]},]"),
        json!([1, [2, [3, {"a": [], "b": {}}]], {"c": [true, false, null]}])
    );
}

#[test]
fn parses_numbers() {
    assert_eq!(extra("-1"), json!(-1));
    assert_eq!(extra("- /* c */ 2.5"), json!(-2.5));
    assert_eq!(extra("+3"), json!(3));
    assert_eq!(extra("0xFF"), json!(255));
    assert_eq!(extra("0o17"), json!(15));
    assert_eq!(extra("0b101"), json!(5));
    assert_eq!(extra("1_000_000"), json!(1_000_000));
    assert_eq!(extra("1e3"), json!(1000));
    assert_eq!(extra("2.5E-1"), json!(0.25));
    assert_eq!(extra(".5"), json!(0.5));
    assert_eq!(extra("5."), json!(5));
    assert_eq!(extra("-0"), json!(0));
    assert_eq!(extra("0"), json!(0));
    assert_eq!(extra("1.5e300"), json!(1.5e300));
    assert_eq!(extra("9007199254740993"), json!(9_007_199_254_740_992.0));
}

#[test]
fn rejects_malformed_numbers() {
    for (literal, needle) in [
        ("1__0", "`_` in a number must stand between two digits"),
        ("1_", "`_` in a number"),
        ("1._5", "`_` in a number"),
        ("0x", "needs digits"),
        ("017", "leading zero"),
        ("1e", "exponent needs digits"),
        ("10n", "BigInt"),
        ("1.foo", "invalid number"),
        ("1e999", "too large"),
        ("- x", "`-` must be followed by a number, found `x`"),
        ("--1", "`-` must be followed by a number"),
        (
            "-Infinity",
            "`-` must be followed by a number, found `Infinity`",
        ),
    ] {
        let error = extra_error(literal);
        assert!(
            error.message.contains(needle),
            "{literal}: {:?} should contain {needle:?}",
            error.message
        );
    }
}

#[test]
fn parses_strings_and_escapes() {
    assert_eq!(extra(r#""a\nb\tc\\d\'e\"f""#), json!("a\nb\tc\\d'e\"f"));
    assert_eq!(extra(r"'\x41\u0042\u{43}\u{1F600}'"), json!("ABC\u{1F600}"));
    assert_eq!(extra(r"'\uD83D\uDE00'"), json!("\u{1F600}"));
    assert_eq!(extra("'a\\\nb'"), json!("ab"));
    assert_eq!(extra("'a\\\r\nb'"), json!("ab"));
    assert_eq!(extra(r"'\0\b\f\v\r\q'"), json!("\0\u{8}\u{c}\u{b}\rq"));
    assert_eq!(extra("'é \u{2028}'"), json!("é \u{2028}"));
}

#[test]
fn rejects_bad_strings() {
    for (literal, needle) in [
        ("'abc", "unterminated string"),
        ("'a\nb'", "unterminated string"),
        (r"'\1'", "octal escapes"),
        (r"'\x4'", "`\\x` must be followed by two hex digits"),
        (r"'\u12'", "`\\u` must be followed"),
        (r"'\u{110000}'", "`\\u` must be followed"),
        (r"'\uD83D'", "lone surrogate \\uD83D"),
        (r"'\uDE00'", "lone surrogate \\uDE00"),
    ] {
        let error = extra_error(literal);
        assert!(
            error.message.contains(needle),
            "{literal}: {:?} should contain {needle:?}",
            error.message
        );
    }
}

#[test]
fn parses_templates_without_substitutions() {
    assert_eq!(extra("`plain`"), json!("plain"));
    assert_eq!(
        extra("`two\r\nlines $ {x} \\${y}`"),
        json!("two\nlines $ {x} ${y}")
    );
}

#[test]
fn rejects_templates_with_substitutions() {
    let source = "export const meta = {\n  name: `a ${b}`,\n  description: 'd' };\n";
    rejects_at(
        source,
        "templates with `${...}` substitutions are not allowed",
        2,
        12,
    );
}

#[test]
fn allows_comments_and_trailing_commas_inside_the_literal() {
    let meta = meta_of(
        "{ // the name\n name: /* inline */ 'n', description: 'd', list: [1, /* two */ 2,], }",
    );
    assert_eq!(meta["list"], json!([1, 2]));
}

#[test]
fn rejects_non_literals_with_position() {
    let cases = [
        ("undefined", "found `undefined`"),
        ("NaN", "found `NaN`"),
        ("Infinity", "found `Infinity`"),
        ("foo", "found `foo`"),
        ("foo()", "found `foo`"),
        ("/re/", "regular expressions are not allowed"),
        ("function () {}", "functions are not allowed"),
        ("() => 1", "found `(` where a value should be"),
        ("[...xs]", "spread `...` is not allowed"),
        ("{...base}", "spread `...` is not allowed"),
        ("{[key]: 1}", "computed keys"),
        ("{ run() {} }", "methods are not allowed"),
        ("{ get x() { return 1 } }", "getters, setters and methods"),
        ("{ async run() {} }", "getters, setters and methods"),
        ("{ *gen() {} }", "methods are not allowed"),
        ("{ short }", "shorthand property `short` is not allowed"),
        ("{ a, b: 1 }", "shorthand property `a`"),
        ("[1,,2]", "holes are not allowed"),
        ("[,]", "holes are not allowed"),
        ("{ a: 1 b: 2 }", "expected `,` or `}`"),
        ("[1 2]", "expected `,` or `]`"),
        ("{ a 1 }", "expected `:` after the key `a`"),
        (
            "1 + 1",
            "expected `,` or `}` after a property of meta, found `+`",
        ),
        ("'a'.length", "found `.`"),
    ];
    for (literal, needle) in cases {
        let source =
            format!("export const meta = {{ name: 'n', description: 'd',\n  x: {literal} }};");
        let error = err(&source);
        assert!(
            error.message.starts_with("meta must be a literal: "),
            "{literal}: {:?}",
            error.message
        );
        assert!(
            error.message.contains(needle),
            "{literal}: {:?} should contain {needle:?}",
            error.message
        );
        assert_eq!(error.line, Some(2), "{literal}: {:?}", error.message);
    }
}

#[test]
fn reports_the_column_of_the_offending_value() {
    rejects_at(
        "export const meta = {\n  name: 'n',\n  description: undefined,\n};",
        "meta must be a literal: found `undefined`",
        3,
        16,
    );
}

#[test]
fn rejects_prototype_keys_anywhere() {
    for key in ["__proto__", "'__proto__'", "constructor", "prototype"] {
        let source = format!(
            "export const meta = {{ name: 'n', description: 'd', inputSchema: {{ {key}: {{}} }} }};"
        );
        let error = err(&source);
        assert!(
            error
                .message
                .contains("meta.inputSchema may not have the key"),
            "{key}: {}",
            error.message
        );
        assert_eq!(error.column, Some(67));
    }
}

#[test]
fn rejects_duplicate_keys() {
    rejects_at(
        "export const meta = { name: 'n', description: 'd', name: 'm' };",
        "meta has the key `name` more than once",
        1,
        52,
    );
    rejects(
        "export const meta = { name: 'n', description: 'd', x: { 'a': 1, a: 2 } };",
        "meta.x has the key `a` more than once",
    );
    rejects(
        "export const meta = { name: 'n', description: 'd', x: { 1: 1, 0x1: 2 } };",
        "the key `1` more than once",
    );
}

#[test]
fn rejects_absurd_nesting_without_overflowing_the_stack() {
    let depth = 100_000;
    let source = format!(
        "export const meta = {{ name: 'n', description: 'd', x: {}{} }};",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    rejects(&source, "nested more than 64 levels deep");
    // 64 levels below meta are fine.
    let source = format!(
        "export const meta = {{ name: 'n', description: 'd', x: {}{} }};",
        "[".repeat(63),
        "]".repeat(63)
    );
    ok(&source);
}

#[test]
fn positions_in_a_multiline_crlf_meta() {
    let source = "// head\r\nexport const meta = {\r\n  name: 'n',\r\n  description: 'd',\r\n  phases: [{ title: '' }],\r\n};\r\nreturn 1;\r\n";
    rejects_at(
        source,
        "meta.phases[0].title must be a non-empty string",
        5,
        21,
    );
}

#[test]
fn columns_count_characters_not_bytes() {
    let source = "export const meta = { name: 'é😀', description: 'd', x: nope };";
    rejects_at(source, "found `nope`", 1, 56);
}

// ---- meta rules ----

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

// ---- body ----

#[test]
fn body_blanks_the_meta_statement_and_keeps_positions() {
    let source = "// intro\nexport const meta = {\n  name: 'n', // c\n  description: 'd',\n}; const after = 1;\nreturn after;\n";
    let script = ok(source);
    let blank = |line: &str| " ".repeat(line.len());
    assert_eq!(
        script.body,
        format!(
            "// intro\n{}\n{}\n{}\n   const after = 1;\nreturn after;\n",
            blank("export const meta = {"),
            blank("  name: 'n', // c"),
            blank("  description: 'd',"),
        )
    );
    for needle in ["const after", "return after"] {
        assert_eq!(
            position_of(&script.body, needle),
            position_of(source, needle)
        );
    }
}

#[test]
fn body_keeps_crlf_and_character_columns() {
    let source = "export const meta = {\r\n name: 'ünïcödé 😀',\r\n description: 'd' }; const x = 1;\r\nreturn x;\r\n";
    let script = ok(source);
    assert_eq!(
        position_of(&script.body, "const x"),
        position_of(source, "const x")
    );
    assert_eq!(position_of(&script.body, "return x"), (4, 1));
    assert_eq!(script.body.matches("\r\n").count(), 4);
    assert!(script.body.ends_with(" const x = 1;\r\nreturn x;\r\n"));
}

#[test]
fn body_without_semicolon_keeps_the_rest() {
    let script = ok("export const meta = { name: 'n', description: 'd' }\nreturn 1\n");
    assert_eq!(script.body, format!("{}\nreturn 1\n", " ".repeat(51)));
}

// ---- determinism guard ----

fn with_body(body: &str) -> String {
    format!("{MINIMAL_META}{body}")
}

#[test]
fn flags_direct_nondeterministic_calls() {
    let unavailable = "is unavailable in workflow scripts (runs must replay deterministically)";
    let cases: &[(&str, &str, u32, u32)] = &[
        ("const t = Date.now();", "`Date.now()`", 2, 11),
        ("const r = Math.random();", "`Math.random()`", 2, 11),
        ("const s = Date();", "`Date()` (without `new`)", 2, 11),
        ("const s = Date('x');", "`Date()` (without `new`)", 2, 11),
        (
            "const d = new Date();",
            "`new Date()` without arguments",
            2,
            11,
        ),
        ("const d = new Date;", "`new Date` without arguments", 2, 11),
        ("f(new Date)", "`new Date` without arguments", 2, 3),
        (
            "const d = new Date ( /* nothing */ );",
            "`new Date()` without arguments",
            2,
            11,
        ),
        ("x = Date . now ()", "`Date.now()`", 2, 5),
        ("x = Date?.now()", "`Date.now()`", 2, 5),
        ("x = Date.now?.()", "`Date.now()`", 2, 5),
        ("x = [...Date()]", "`Date()` (without `new`)", 2, 9),
        ("const s = `at ${Date.now()}`;", "`Date.now()`", 2, 17),
        (
            "const s = `a ${ `b ${ Math.random() }` }`;",
            "`Math.random()`",
            2,
            23,
        ),
        (
            "const s = `${ {a: 1}.a } ${Date.now()}`;",
            "`Date.now()`",
            2,
            28,
        ),
        ("if (a) {\n  log(1);\n}\nDate.now()", "`Date.now()`", 5, 1),
        ("const t = performance.now();", "`performance.now()`", 2, 11),
        (
            "const t = performance?.now?.();",
            "`performance.now()`",
            2,
            11,
        ),
        (
            "const t = performance.timeOrigin;",
            "`performance.timeOrigin`",
            2,
            11,
        ),
    ];
    for &(body, what, line, column) in cases {
        let source = with_body(body);
        let error = err(&source);
        assert_eq!(
            error.message,
            format!("{what} {unavailable} at line {line}, column {column}"),
            "body {body:?}"
        );
    }
}

#[test]
fn allows_deterministic_date_uses_and_lookalikes() {
    for body in [
        "const d = new Date(0);",
        "const d = new Date(args.when);",
        "const d = new Date(2020, 1, 1);",
        "const u = Date.UTC(2020, 0, 1);",
        "const p = Date.parse('2020-01-01');",
        "const n = foo.Date.now();",
        "const n = foo.Math.random();",
        "const n = foo.performance.now();",
        "const n = foo?.Date();",
        "const o = { Date: 1, now: 2 };",
        "const f = Date.now;",
        "const isDate = x instanceof Date;",
        "const t = typeof Date;",
        "const n = myDate.now() + Date2.now() + MathX.random();",
        "class A { #Date() {} run() { return this.#Date(); } }",
        "const s = 'Date.now() Math.random() new Date()';",
        "const s = \"Date()\";",
        "// Date.now()\n/* Math.random() */",
        "const s = `Date.now() ${'Date.now()'} Math.random()`;",
        "const r = /Date.now()/g.test(x);",
        "const r = x.split(/new Date()/);",
        "const r = [/Math.random()[/]/];",
        "return /Date()/.source;",
        "const q = a / b / Date.UTC(1);",
        "const half = (a + b) / 2; const re = /Date.now()/;",
        "const s = `${ `${'}'}` }`; const t = `Date.now()`;",
        "const tricky = '\\'Date.now()';",
        "const line = 'a\\\nDate.now()';",
    ] {
        if let Err(error) = analyze(with_body(body).as_bytes()) {
            panic!("body {body:?} should pass, got {}", error.message);
        }
    }
}

#[test]
fn aliases_are_left_to_the_runtime() {
    ok(&with_body(
        "const f = Date; f.now(); const m = Math; m.random();",
    ));
}

#[test]
fn rejects_module_loading() {
    let message = "workflow scripts cannot import modules; everything they need is a global";
    for (body, what) in [
        ("const fs = require('fs');", "`require(`"),
        ("const m = await import('./m.js');", "`import(`"),
        ("import fs from 'fs';", "an `import` statement"),
        ("import { a } from 'a';", "an `import` statement"),
        ("import * as a from 'a';", "an `import` statement"),
        ("import 'side-effect';", "an `import` statement"),
    ] {
        let error = err(&with_body(body));
        assert!(
            error.message.starts_with(message) && error.message.contains(what),
            "{body}: {:?}",
            error.message
        );
        assert_eq!(error.line, Some(2));
    }
    for body in [
        "const o = { import: 1, require: 2 }; o.require(1); x.import('y');",
        "const s = 'require(\"fs\")';",
    ] {
        ok(&with_body(body));
    }
}

#[test]
fn top_level_literal_must_end_the_statement() {
    rejects_at("export const meta = 1 + 1;", "found `+` after it", 1, 23);
    rejects_at("export const meta = {}.x;", "found `.` after it", 1, 23);
}

#[test]
fn checks_run_in_order() {
    // A meta error wins over a determinism error later in the file.
    rejects(
        "export const meta = { name: '', description: 'd' };\nDate.now();",
        "meta.name",
    );
}

// ---- robustness ----

const SAMPLES: &[&str] = &[
    "#!/usr/bin/env agentprism\r\n// A sample.\r\n/* block */\r\nexport const meta = {\r\n  name: 'review', description: \"Review \\u00e9 the \\\"code\\\"\",\r\n  phases: [{ title: 'Plan', detail: `multi\r\nline` }, { title: 'Fix', model: 'opus' }],\r\n  backends: { 'local-1': { command: 'agent', args: ['-x'], env: { A: 'b' }, structuredOutputTool: false } },\r\n  inputSchema: { type: 'object', properties: { n: { type: 'number', minimum: -1.5e3 } } },\r\n  extra: [0x1F, 0b1, 0o7, 1_000, .5, -0, null, true],\r\n};\r\nconst plan = await agent(`Plan ${args.n} steps`, { label: 'p' });\r\nconst re = /[/]\\d+/g; const half = plan.length / 2;\r\nreturn { plan, at: new Date(args.when) };\r\n",
    "export const meta = { name: 'x', description: 'y', bad: [1,,2] }\nDate.now()\n",
    "export const meta = { name: `a ${b}`, description: 'é😀' }; const s = `${Math.random()}`;",
    "/* c */ export const meta = {'__proto__': 1, \"k\": '\\uD83D\\uDE00', n: 1e3, m: -0x10 };\nrequire('x')\n",
];

#[test]
fn never_panics_on_any_prefix_or_suffix_of_samples() {
    for sample in SAMPLES {
        let bytes = sample.as_bytes();
        for end in 0..=bytes.len() {
            let _ = analyze(&bytes[..end]);
            let _ = analyze(&bytes[end..]);
        }
    }
}

#[test]
fn the_first_sample_is_valid() {
    let script = ok(SAMPLES[0]);
    assert_eq!(script.name, "review");
    assert_eq!(script.description, "Review é the \"code\"");
    assert_eq!(script.phases.len(), 2);
    assert_eq!(script.phases[0].detail.as_deref(), Some("multi\nline"));
    assert_eq!(
        script.meta["extra"],
        json!([31, 1, 7, 1000, 0.5, 0, null, true])
    );
    assert_eq!(
        script.meta["inputSchema"]["properties"]["n"]["minimum"],
        json!(-1500)
    );
    for needle in ["const plan", "return {", "const re"] {
        assert_eq!(
            position_of(&script.body, needle),
            position_of(SAMPLES[0], needle)
        );
    }
}

#[test]
fn large_objects_and_phase_lists_stay_fast() {
    // Quadratic duplicate checks would take minutes here.
    let keys: String = (0..40_000).map(|index| format!("k{index}: 1,")).collect();
    let phases: String = (0..25_000)
        .map(|index| format!("{{ title: 't{index}' }},"))
        .collect();
    let source = format!(
        "export const meta = {{ name: 'n', description: 'd', phases: [{phases}], extra: {{ {keys} }} }};"
    );
    assert!(source.len() < MAX_SCRIPT_BYTES);
    let started = std::time::Instant::now();
    let script = ok(&source);
    assert_eq!(script.phases.len(), 25_000);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_megabyte_of_tokens_is_scanned() {
    let mut source = String::from(MINIMAL_META);
    while source.len() < MAX_SCRIPT_BYTES - 16 {
        source.push_str("f(a[1]/2, `${x}`);");
    }
    ok(&source);
}

/// Runs the wrapped body in QuickJS and returns the stack of the error it throws.
fn quickjs_error_location(body: &str) -> String {
    let wrapped = format!("(function(){{{body}\n}})()");
    let runtime = rquickjs::Runtime::new().expect("runtime");
    let context = rquickjs::Context::full(&runtime).expect("context");
    context.with(|context| {
        let outcome: rquickjs::Result<()> = context.eval(wrapped);
        assert!(outcome.is_err(), "the body should throw");
        let exception = context.catch();
        exception
            .as_exception()
            .and_then(rquickjs::Exception::stack)
            .unwrap_or_default()
    })
}

#[test]
fn quickjs_reports_body_positions_of_the_original_file() {
    let source = "// lead\r\nexport const meta = {\r\n  name: 'ünï 😀', description: `two\r\nlines`,\r\n}; const x = 1; throw new Error('here');\r\n";
    let script = ok(source);
    // QuickJS names the position of the `Error` constructor call in the stack.
    let (line, column) = position_of(source, "Error(");
    let stack = quickjs_error_location(&script.body);
    assert!(
        stack.contains(&format!(":{line}:{column}")),
        "stack {stack:?} should name {line}:{column}"
    );
    let source = "export const meta = { name: 'é', description: 'd' }; let = ;\n";
    let script = ok(source);
    let stack = quickjs_error_location(&script.body);
    // On the first line QuickJS counts the wrapper's `(function(){` too (12 characters):
    // the engine has to subtract its wrapper's length from first-line columns.
    let (line, column) = position_of(source, "= ;");
    assert_eq!(line, 1);
    assert!(
        stack.contains(&format!(":1:{}", column + 12)),
        "stack {stack:?} should name 1:{} (column {column} + 12)",
        column + 12
    );
}

// ---- what errors may quote ----

/// A GitHub token as a secret file might hold it: `ghp_` and 36 characters.
const TOKEN: &str = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";

#[test]
fn a_token_as_the_first_word_is_never_quoted() {
    for source in [
        format!("{TOKEN}\n"),
        format!("{TOKEN}:x:19000:0:99999:7:::\n"),
        format!("export const {TOKEN} = 1;\n"),
        format!("export const meta = {{ name: 'n', description: 'd', x: {TOKEN} }};\n"),
        format!("export const meta = {{ name: 'n', description: 'd', {TOKEN} }};\n"),
        format!("export const meta = {{ name: 'n', description: 'd', {TOKEN}: undefined }};\n"),
        format!("export const meta = {{ name: 'n', description: 'd' }} {TOKEN};\n"),
    ] {
        let message = err(&source).message;
        assert!(!message.contains("ghp_"), "{message}");
        assert!(!message.contains(&TOKEN[8..]), "{message}");
    }
}

#[test]
fn quotations_are_short() {
    let long = "a".repeat(5000);
    for source in [
        format!("{long}\n"),
        format!("export const meta = {{ name: 'n', description: 'd', x: {long} }};\n"),
        format!("export const meta = {{ name: 'n', description: 'd', {long}: undefined }};\n"),
        format!("export const meta = {{ name: 'n', description: 'd', {long}(){{}} }};\n"),
    ] {
        let message = err(&source).message;
        assert!(message.len() < 300, "{} bytes: {message}", message.len());
        assert!(!message.contains(&"a".repeat(41)), "{message}");
    }
}

#[test]
fn a_long_quotation_is_marked_as_cut() {
    let long = "a".repeat(5000);
    rejects(
        &format!("{long}\n"),
        &format!("found `{}…`", "a".repeat(40)),
    );
}

#[test]
fn a_short_quotation_is_kept_whole() {
    rejects(
        "export const meta = { name: 'n', description: 'd', x: foo };",
        "found `foo`;",
    );
}

#[test]
fn a_model_spec_of_the_limit_is_kept_and_one_byte_more_refused() {
    let limit = "m".repeat(NAME_MAX_BYTES);
    let past = "m".repeat(NAME_MAX_BYTES + 1);
    ok(&format!(
        "export const meta = {{ name: 'n', description: 'd', model: '{limit}', phases: [{{ title: 'P', model: '{limit}' }}] }};\n"
    ));
    rejects(
        &format!("export const meta = {{ name: 'n', description: 'd', model: '{past}' }};"),
        "meta.model must be at most 1024 bytes, got 1025",
    );
    rejects(
        &format!(
            "export const meta = {{ name: 'n', description: 'd', phases: [{{ title: 'P', model: '{past}' }}] }};"
        ),
        "meta.phases[0].model must be at most 1024 bytes, got 1025",
    );
}
