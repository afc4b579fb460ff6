//! The meta literal: keys, numbers, strings, templates, nesting, and the positions its
//! errors name.

use super::*;

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
