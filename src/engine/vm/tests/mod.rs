//! Tests of the script VM.

use super::*;

mod queue;

/// Runs a script body, answering every agent call with `answer(payload)`.
fn run_script(
    body: &str,
    answer: impl Fn(&Value) -> Result<Value, (String, bool)>,
) -> (Result<Option<Value>, ScriptFailure>, Vec<Value>) {
    run_script_with_files(body, BTreeMap::new(), answer)
}

/// [`run_script`] with these companion texts.
fn run_script_with_files(
    body: &str,
    files: BTreeMap<String, String>,
    answer: impl Fn(&Value) -> Result<Value, (String, bool)>,
) -> (Result<Option<Value>, ScriptFailure>, Vec<Value>) {
    run_vm_script(test_script(body, files, true), answer)
}

fn test_script(body: &str, files: BTreeMap<String, String>, call_paths: bool) -> VmScript {
    VmScript {
        body: body.into(),
        args: serde_json::json!({"n": 2}),
        cwd: "/tmp/project".into(),
        nested: None,
        files: Arc::new(files),
        call_paths,
        budget: crate::budget::script_view(&Default::default(), &Default::default()),
        max_calls: u32::MAX,
    }
}

/// Runs `script` under the tests' limits, answering every call with `answer(payload)`.
fn run_vm_script(
    script: VmScript,
    answer: impl Fn(&Value) -> Result<Value, (String, bool)>,
) -> (Result<Option<Value>, ScriptFailure>, Vec<Value>) {
    let (tx, mut rx) = super::event_queue();
    let vm = spawn(
        script,
        VmLimits {
            slice_limit: Duration::from_millis(300),
            memory_limit: 16 << 20,
        },
        tx,
    );
    let mut calls = Vec::new();
    loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Call {
                call_id,
                kind,
                payload,
                ..
            } => {
                let mut recorded = payload.clone();
                recorded["kind"] = Value::String(kind);
                calls.push(recorded);
                match answer(&payload) {
                    Ok(value) => vm.reply(VmReply::Resolve { call_id, value }),
                    Err((code, recoverable)) => vm.reply(VmReply::Reject {
                        call_id,
                        code,
                        message: "failed".into(),
                        recoverable,
                    }),
                }
            }
            VmEvent::Finished(result) => return (result, calls),
            _ => {}
        }
    }
}

fn echo(payload: &Value) -> Result<Value, (String, bool)> {
    Ok(Value::String(format!(
        "re: {}",
        payload["prompt"].as_str().unwrap_or("")
    )))
}

#[test]
fn syntax_is_checked_without_running_the_script() {
    let limits = VmLimits::default();
    assert_eq!(check_syntax("while (true) {}\nreturn 1;", limits), Ok(()));
    let error = check_syntax("\nreturn {;", limits).unwrap_err();
    assert!(error.contains("SyntaxError"), "{error}");
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn top_level_await_and_return() {
    let (result, calls) = run_script(
        "const a = await agent('hi'); return {a, n: args.n, cwd: process.cwd()};",
        echo,
    );
    assert_eq!(
        result.unwrap(),
        Some(serde_json::json!({"a": "re: hi", "n": 2, "cwd": "/tmp/project"}))
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["path"], "1:16");
}

#[test]
fn a_script_without_call_paths_sends_none_and_runs_the_same() {
    let body = "const a = await agent('hi'); await checkpoint('ok?'); return a;";
    let (result, calls) = run_vm_script(test_script(body, BTreeMap::new(), false), echo);
    assert_eq!(result.unwrap(), Some(Value::String("re: hi".into())));
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|call| call["path"].is_null()), "{calls:?}");
    let (_, with_paths) = run_vm_script(test_script(body, BTreeMap::new(), true), echo);
    assert_eq!(with_paths[0]["path"], "1:16");
    assert_eq!(with_paths[1]["path"], "1:35");
}

/// `agent(prompt)` without options goes through `host.agent`, which builds the payload
/// itself; it is the payload, members in order, that `host.call` gets for the same call
/// with options that stringify to `{}`. A prompt with a lone surrogate (no UTF-8 form)
/// still takes `host.call` and does not stop the script.
#[test]
fn an_agent_call_without_options_sends_what_the_json_call_sends() {
    let body = "await agent('hi'); await agent('hi', {}); await agent('hi', {model: undefined});\n\
                await agent('x\\ud800'); return 1;";
    let (result, calls) = run_script(body, echo);
    assert_eq!(result.unwrap(), Some(serde_json::json!(1)));
    assert_eq!(calls.len(), 4);
    let without_path = |call: &Value| {
        let mut call = call.clone();
        call.as_object_mut().expect("an object").remove("path");
        call.to_string()
    };
    let plain = without_path(&calls[0]);
    assert_eq!(
        plain,
        r#"{"scope":"root","prompt":"hi","options":{},"kind":"agent"}"#
    );
    assert_eq!(without_path(&calls[1]), plain);
    assert_eq!(without_path(&calls[2]), plain, "the JSON text's payload");
    assert_eq!(
        (&calls[0]["path"], &calls[1]["path"], &calls[2]["path"]),
        (
            &serde_json::json!("1:6"),
            &serde_json::json!("1:25"),
            &serde_json::json!("1:69")
        )
    );
    assert!(calls[3].get("scope").is_none(), "{:?}", calls[3]);
}

#[test]
fn file_returns_a_declared_text_and_names_an_undeclared_path() {
    let files = BTreeMap::from([("prompts/a.md".to_owned(), "Review.".to_owned())]);
    let (result, calls) = run_script_with_files(
        "return await agent(file('prompts/a.md'));",
        files.clone(),
        echo,
    );
    assert_eq!(result.unwrap(), Some(Value::String("re: Review.".into())));
    assert_eq!(calls.len(), 1);
    let (result, _) = run_script_with_files("return file('prompts/b.md');", files, echo);
    let failure = result.unwrap_err();
    assert!(
        failure
            .message
            .contains("\"prompts/b.md\" is not declared in meta.files; add it to meta.files"),
        "{}",
        failure.message
    );
    let (result, _) = run_script("return file(3);", echo);
    assert!(
        result
            .unwrap_err()
            .message
            .contains("path must be a string")
    );
}

#[test]
fn parallel_keeps_order_and_call_order() {
    let (result, calls) = run_script(
        "return await parallel([() => agent('a'), () => agent('b')]);",
        echo,
    );
    assert_eq!(result.unwrap(), Some(serde_json::json!(["re: a", "re: b"])));
    assert_eq!(calls[0]["prompt"], "a");
    assert_eq!(calls[1]["prompt"], "b");
}

#[test]
fn parallel_rejects_non_functions() {
    let (result, _) = run_script("return await parallel([agent('a')]);", echo);
    let failure = result.unwrap_err();
    assert!(
        failure
            .message
            .contains("parallel(thunks) expects an array of functions"),
        "{failure:?}"
    );
}

#[test]
fn determinism_guard_catches_aliases() {
    let (result, _) = run_script("const f = Date; return f.now();", echo);
    assert!(
        result
            .unwrap_err()
            .message
            .contains("Date.now() is unavailable")
    );
    let (result, _) = run_script("const m = Math; return m.random();", echo);
    assert!(
        result
            .unwrap_err()
            .message
            .contains("Math.random() is unavailable")
    );
    let (result, _) = run_script("return new Date(0).toISOString();", echo);
    assert_eq!(
        result.unwrap(),
        Some(Value::String("1970-01-01T00:00:00.000Z".into()))
    );
    let (result, _) = run_script("return typeof eval;", echo);
    assert_eq!(result.unwrap(), Some(Value::String("undefined".into())));
}

#[test]
fn every_clock_is_refused_like_date_now() {
    for (script, what) in [
        ("return performance.now();", "performance.now()"),
        (
            "const p = performance; return p.now();",
            "performance.now()",
        ),
        ("return performance.timeOrigin;", "performance.timeOrigin"),
        (
            "const o = globalThis['perf' + 'ormance']; return o.timeOrigin;",
            "performance.timeOrigin",
        ),
        (
            "return Reflect.get(performance, 'now').call();",
            "performance.now()",
        ),
        ("return new WeakRef({});", "WeakRef"),
        (
            "return new FinalizationRegistry(() => {});",
            "FinalizationRegistry",
        ),
        (
            "const D = new Date(0).constructor; return D.now();",
            "Date.now()",
        ),
        ("return Reflect.construct(Date, []);", "new Date()"),
    ] {
        let (result, _) = run_script(script, echo);
        let failure = result.expect_err(script);
        assert!(
            failure.message.contains(&format!("{what} is unavailable")),
            "{script}: {failure:?}"
        );
    }
    // The stub cannot be swapped for a clock, and nothing else in the realm reads time
    // or randomness.
    let (result, _) = run_script(
        "try { globalThis.performance = {now: () => 1}; } catch (e) {}\n\
             return [typeof crypto, typeof queueMicrotask === 'function' ? 'q' : '-',\n\
                     Object.isFrozen(performance), typeof setTimeout, typeof os, typeof std];",
        echo,
    );
    assert_eq!(
        result.unwrap(),
        Some(serde_json::json!([
            "undefined",
            "q",
            true,
            "undefined",
            "undefined",
            "undefined"
        ]))
    );
    // Atomics.wait would read a clock and block the thread outside the interrupt handler.
    let (result, _) = run_script(
        "const a = new Int32Array(new SharedArrayBuffer(4));\n\
             try { Atomics.wait(a, 0, 0, 1e9); return 'blocked'; } catch (e) { return 'refused'; }",
        echo,
    );
    assert_eq!(result.unwrap(), Some(Value::String("refused".into())));
}

#[test]
fn the_prelude_is_compiled_once_and_reused() {
    let body = "const a = await agent('one');\nreturn [a, agent.name, agent.length];";
    let expected = serde_json::json!(["re: one", "agent", 2]);
    let (first, _) = run_script(body, echo);
    assert_eq!(first.unwrap(), Some(expected.clone()));
    let bytecode = PRELUDE_BYTECODE
        .get()
        .expect("the first VM published the bytecode");
    // With its functions' source texts the bytecode would be about three times the prelude's
    // text; every VM reads it.
    assert!(
        bytecode.len() < PRELUDE.len(),
        "{} bytes of bytecode for {} of text",
        bytecode.len(),
        PRELUDE.len()
    );
    // A VM started from the published bytecode runs the same DSL (the bytecode leaves the
    // functions' source texts out), and leaves the bytecode as it found it.
    let (second, calls) = run_script(body, echo);
    assert_eq!(second.unwrap(), Some(expected));
    assert_eq!(calls.len(), 1);
    let again = PRELUDE_BYTECODE.get().unwrap();
    assert!(std::ptr::eq(bytecode, again));
    // Prelude frames keep the file name and line they had when it was a script.
    let line = 1 + PRELUDE
        .lines()
        .position(|line| line.contains("prompt must be a string"))
        .unwrap();
    let (stack, _) = run_script("try { agent(1); } catch (e) { return e.stack; }", echo);
    let stack = stack.unwrap().unwrap();
    assert!(
        stack
            .as_str()
            .unwrap()
            .contains(&format!("prelude.js:{line}:")),
        "{stack}"
    );
}

#[test]
fn the_prelude_module_hands_out_nothing() {
    // The prelude module stays registered in the context; importing it by name yields a
    // namespace whose `take` gives nothing more (or the import is refused outright).
    for specifier in ["prelude.js", "./prelude.js"] {
        let body = format!(
            "try {{ const ns = await import({specifier:?});\n\
                 return Object.keys(ns).join() + ':' + typeof ns.take(); }}\n\
                 catch (e) {{ return 'refused'; }}"
        );
        let (result, _) = run_script(&body, echo);
        let result = result.unwrap();
        assert!(
            result == Some(Value::String("take:undefined".into()))
                || result == Some(Value::String("refused".into())),
            "{specifier}: {result:?}"
        );
    }
}

#[test]
fn prelude_helpers_are_unreachable() {
    let (result, _) = run_script(
        "return Reflect.ownKeys(globalThis).filter((k) => typeof k === 'string' && k.startsWith('__'));",
        echo,
    );
    assert_eq!(result.unwrap(), Some(serde_json::json!([])));
    let (result, _) = run_script(
        "return ['__ap_strictJson', '__ap_makeError', '__ap_install', '__ap_call', '__ap_log', '__ap_phase', '__ap_nested', '__ap_filename']\n\
               .map((name) => typeof globalThis[name]);",
        echo,
    );
    assert_eq!(
        result.unwrap(),
        Some(serde_json::json!(vec!["undefined"; 8]))
    );
    // Replacing a helper's name on the global changes nothing the host does: a function
    // result is still refused, and a rejected call still carries the host's code.
    let (result, _) = run_script(
        "globalThis.__ap_strictJson = () => '\"forged\"';\n\
             Object.keys = () => []; Array.isArray = () => false;\n\
             return {f: () => 1};",
        echo,
    );
    assert!(result.unwrap_err().message.contains("strict JSON"));
    let (result, _) = run_script(
        "globalThis.__ap_makeError = () => ({code: 'FORGED', recoverable: true});\n\
             try { await agent('x'); } catch (e) { return [e.code, e.recoverable]; }",
        |_| Err(("SCHEMA_NONCOMPLIANCE".into(), false)),
    );
    assert_eq!(
        result.unwrap(),
        Some(serde_json::json!(["SCHEMA_NONCOMPLIANCE", false]))
    );
    // Stack-trace callbacks would see every frame's function (QuickJS-ng's
    // CallSite.getFunction), the prelude's own closures included.
    let (result, _) = run_script(
        "const seen = [];\n\
             try { Error.prepareStackTrace = (e, sites) => { for (const s of sites) seen.push(s.getFunction()); return ''; }; } catch (e) {}\n\
             try { await agent('x'); } catch (e) {}\n\
             try { agent(1); } catch (e) {}\n\
             return [typeof Error.prepareStackTrace, seen.filter((f) => typeof f === 'function').map((f) => f.name)];",
        |_| Err(("SCHEMA_NONCOMPLIANCE".into(), false)),
    );
    assert_eq!(result.unwrap(), Some(serde_json::json!(["undefined", []])));
    // The DSL itself is read-only.
    let (result, _) = run_script(
        "try { globalThis.agent = async () => 'forged'; } catch (e) {}\n\
             return await agent('x');",
        echo,
    );
    assert_eq!(result.unwrap(), Some(Value::String("re: x".into())));
}

#[test]
fn a_microtask_loop_after_a_call_is_a_runaway() {
    let started = Instant::now();
    let (result, calls) = run_script("const r = await agent('x'); while (true) await null;", echo);
    let failure = result.unwrap_err();
    assert_eq!(failure.code, "SCRIPT_ERROR");
    assert!(failure.message.contains("runaway"), "{failure:?}");
    assert_eq!(calls.len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // A chain of promises that each queue the next is one slice too, without any call.
    let (result, _) = run_script(
        "const spin = () => { Promise.resolve().then(spin); }; spin(); await new Promise(() => {});",
        echo,
    );
    let failure = result.unwrap_err();
    assert!(failure.message.contains("runaway"), "{failure:?}");
}

#[test]
fn host_waits_are_not_part_of_a_slice() {
    // Agents that take most of a slice each: the run spends longer than one slice in
    // total, but only waiting, so it is no runaway.
    let slow = |payload: &Value| {
        std::thread::sleep(Duration::from_millis(200));
        echo(payload)
    };
    let (result, calls) = run_script(
        "let out = [];\nfor (let i = 0; i < 3; i++) { out.push(await agent('x' + i)); await null; }\nreturn out;",
        slow,
    );
    assert_eq!(
        result.unwrap(),
        Some(serde_json::json!(["re: x0", "re: x1", "re: x2"]))
    );
    assert_eq!(calls.len(), 3);
}

#[test]
fn result_must_be_strict_json() {
    let (result, _) = run_script("return {f: () => 1};", echo);
    assert!(result.unwrap_err().message.contains("strict JSON"));
    let (result, _) = run_script("return [1, undefined];", echo);
    assert!(result.unwrap_err().message.contains("[1] is undefined"));
    let (result, _) = run_script("return NaN;", echo);
    assert!(result.unwrap_err().message.contains("not JSON"));
    let (result, _) = run_script("return;", echo);
    assert_eq!(result.unwrap(), None);
}

#[test]
fn thrown_errors_carry_position_and_code() {
    let (result, _) = run_script("\n\n  throw new Error('boom');", echo);
    let failure = result.unwrap_err();
    assert_eq!(failure.message, "boom");
    assert_eq!(failure.line, Some(3));
    assert_eq!(failure.code, "SCRIPT_ERROR");
    let (result, _) = run_script("await agent('x');", |_| {
        Err(("SCHEMA_NONCOMPLIANCE".into(), false))
    });
    assert_eq!(result.unwrap_err().code, "SCHEMA_NONCOMPLIANCE");
}

#[test]
fn caught_errors_do_not_fail() {
    let (result, _) = run_script(
        "try { await agent('x'); } catch (e) { return e.code; }",
        |_| Err(("SCHEMA_NONCOMPLIANCE".into(), false)),
    );
    assert_eq!(
        result.unwrap(),
        Some(Value::String("SCHEMA_NONCOMPLIANCE".into()))
    );
}

#[test]
fn unhandled_rejection_fails_the_script() {
    let (result, _) = run_script(
        "agent('x').then(() => { throw new Error('late'); }); await agent('y'); return 1;",
        echo,
    );
    let failure = result.unwrap_err();
    assert!(failure.message.contains("late"), "{failure:?}");
}

#[test]
fn runaway_loops_are_stopped() {
    let (result, _) = run_script("while (true) {}", echo);
    assert!(result.unwrap_err().message.contains("runaway"));
    let (result, _) = run_script("await agent('x'); while (true) {}", echo);
    assert!(result.unwrap_err().message.contains("runaway"));
}

#[test]
fn memory_is_capped() {
    let (result, _) = run_script(
        "const a = []; while (true) { a.push('x'.repeat(1 << 16) + a.length); }",
        echo,
    );
    let failure = result.unwrap_err();
    assert!(
        failure.message.to_lowercase().contains("memory"),
        "{failure:?}"
    );
}

#[test]
fn never_settling_promise_is_reported() {
    let (result, _) = run_script("await new Promise(() => {});", echo);
    assert!(result.unwrap_err().message.contains("can never settle"));
}

#[test]
fn syntax_errors_have_lines() {
    let (result, _) = run_script("\nconst = 3;", echo);
    let failure = result.unwrap_err();
    assert_eq!(failure.line, Some(2), "{failure:?}");
}

#[test]
fn phase_with_two_arguments_is_an_error() {
    let (result, _) = run_script("phase('a', 'b');", echo);
    assert!(result.unwrap_err().message.contains("exactly one argument"));
}
