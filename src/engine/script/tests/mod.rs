//! Cases for every static check, positions included.

use serde_json::json;

use super::*;

mod determinism;
mod literal;
mod meta_rules;

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
