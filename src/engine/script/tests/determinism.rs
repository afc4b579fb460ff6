//! The determinism guard's static half: clocks and randomness written directly are refused
//! with their position.

use super::*;

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
