//! The prelude, parsed once per process: the first VM compiles `prelude.js` as a module and
//! keeps its bytecode, and every later VM loads that bytecode instead of parsing the 19 KiB
//! source again (parsing it is most of what starting a VM costs). It also holds
//! the host side of the prelude's `callPath` ([`call_path`]): the prelude takes the stack
//! text of a fresh `Error` and the host reads the script's frames out of it, which costs a
//! fraction of splitting and matching it with JavaScript strings and regexps on every call.

use std::sync::OnceLock;

use rquickjs::{Ctx, Function, Module, WriteOptions};

pub(super) const PRELUDE: &str = include_str!("../prelude.js");
/// The module name prelude frames carry in stack traces, as when it was evaluated as a script.
const PRELUDE_NAME: &str = "prelude.js";
/// The prelude compiled by the first VM of this process, loaded by every later one. QuickJS
/// copies what it reads (`JS_READ_OBJ_ROM_DATA` is 0 in QuickJS-ng), so VMs never borrow it.
pub(super) static PRELUDE_BYTECODE: OnceLock<Vec<u8>> = OnceLock::new();

/// The prelude module's source: `prelude.js` unchanged (its function is strict inside, so the
/// module's strict top level changes nothing) with the prefix on its first line, a comment, so
/// lines and columns in stack traces stay as they were. The module stays registered in its
/// context under [`PRELUDE_NAME`], where `import()` could reach its namespace; `take` hands the
/// function out once and clears the binding, so the namespace holds nothing after that.
fn prelude_module_source() -> String {
    let mut source = String::with_capacity(PRELUDE.len() + 160);
    source.push_str("let prelude = ");
    source.push_str(PRELUDE);
    source.push_str(
        "\n;export function take() { const taken = prelude; prelude = undefined; return taken; }\n",
    );
    source
}

/// The function `prelude.js` evaluates to, from this process's bytecode (compiled here by the
/// first VM, which then publishes it; a VM that fails to compile it, e.g. out of memory,
/// publishes nothing and the next one tries again).
pub(super) fn load_prelude<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Function<'js>> {
    let module = match PRELUDE_BYTECODE.get() {
        // SAFETY: the bytes were written by `Module::write` of this same QuickJS build in this
        // process, from the prelude compiled below; nothing else ever sets them.
        Some(bytes) => unsafe { Module::load(ctx.clone(), bytes)? },
        None => {
            let module = Module::declare(ctx.clone(), PRELUDE_NAME, prelude_module_source())?;
            // Without the functions' source texts (each function keeps its own slice of the
            // module's text, 80 KiB in all against 17 KiB of bytecode): every VM reads the
            // bytecode, and no script needs the prelude's source. Line numbers stay.
            let options = WriteOptions {
                strip_source: true,
                ..WriteOptions::default()
            };
            let _ = PRELUDE_BYTECODE.set(module.write(options)?);
            module
        }
    };
    let (module, evaluated) = module.eval()?;
    // The module has no top-level await, so its evaluation has settled by now.
    match evaluated.result::<()>() {
        Some(result) => result?,
        None => {
            return Err(rquickjs::Exception::throw_message(
                ctx,
                "the prelude module did not finish evaluating",
            ));
        }
    }
    let take: Function = module.get("take")?;
    take.call(())
}

/// Frames beyond this many make a call's path absent (as the prelude always did).
const MAX_PATH_FRAMES: usize = 64;

/// A call's structural path from a QuickJS stack text: the synchronous frames in `file`, as
/// `line:col`, innermost first, joined by `<`; `None` when there is none or more than
/// [`MAX_PATH_FRAMES`]. Frames on or below `wrapper_line` (the wrapper's invocation) are not
/// the script's; columns on line 1 lose the wrapper's `wrapper_columns` opening columns (at
/// least 1 stays). Line for line what the prelude's JavaScript did: the last `file:` of each
/// line, then one `)` followed only by white space (JavaScript's `\s`) cut from the end, then
/// exactly `digits:digits`.
pub(super) fn call_path(
    stack: &str,
    file: &str,
    wrapper_line: f64,
    wrapper_columns: f64,
) -> Option<String> {
    let marker = format!("{file}:");
    let mut path = String::new();
    let mut frames = 0usize;
    for line in stack.split('\n') {
        let Some(at) = line.rfind(&marker) else {
            continue;
        };
        let position = line[at + marker.len()..].trim_end_matches(is_js_space);
        let position = position.strip_suffix(')').unwrap_or(position);
        let Some((line_digits, column_digits)) = position.split_once(':') else {
            continue;
        };
        let (Some(line_number), Some(column)) = (digits(line_digits), digits(column_digits)) else {
            continue;
        };
        if line_number >= wrapper_line {
            continue;
        }
        let column = if line_number == 1.0 {
            (column - wrapper_columns).max(1.0)
        } else {
            column
        };
        frames += 1;
        if frames > MAX_PATH_FRAMES {
            return None;
        }
        if !path.is_empty() {
            path.push('<');
        }
        push_number(&mut path, line_number);
        path.push(':');
        push_number(&mut path, column);
    }
    (frames > 0).then_some(path)
}

/// JavaScript's `\s`: white space and line terminators.
fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// `Number(text)` of a non-empty run of ASCII digits (`/^\d+$/`); `None` for anything else.
fn digits(text: &str) -> Option<f64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A number as JavaScript prints it, for the integral values a stack holds (QuickJS lines
/// and columns fit an `i32`).
fn push_number(out: &mut String, value: f64) {
    use std::fmt::Write;
    if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

#[cfg(test)]
mod tests {
    use super::call_path;

    #[test]
    fn the_path_is_the_scripts_frames_innermost_first() {
        let stack = "Error\n    at callPath (prelude.js:130:19)\n    at agent (prelude.js:218:60)\n    at step (workflow.js:4:12)\n    at <anonymous> (workflow.js:1:30)\n    at <eval> (workflow.js:9:3)\n";
        // Line 9 is the wrapper's invocation; line 1 loses 20 opening columns.
        assert_eq!(
            call_path(stack, "workflow.js", 9.0, 20.0).as_deref(),
            Some("4:12<1:10")
        );
        // A column on line 1 never falls below 1.
        assert_eq!(
            call_path("    at f (workflow.js:1:5)", "workflow.js", 9.0, 20.0).as_deref(),
            Some("1:1")
        );
        assert_eq!(
            call_path("Error\n    at x (prelude.js:1:1)", "workflow.js", 9.0, 0.0),
            None
        );
    }

    #[test]
    fn lines_are_read_as_the_prelude_read_them() {
        let at = |line: &str| call_path(line, "workflow.js", 100.0, 0.0);
        // The last occurrence of the file counts; one `)` and trailing white space are cut.
        assert_eq!(
            at("at (workflow.js:1:1) workflow.js:7:8) \u{A0}").as_deref(),
            Some("7:8")
        );
        assert_eq!(at("at workflow.js:7:8").as_deref(), Some("7:8"));
        // Anything else after the position makes the frame not a position.
        for line in [
            "at workflow.js:7:8))",
            "at workflow.js:7:8 )",
            "at workflow.js:7",
            "at workflow.js:7:x",
            "at workflow.js::8",
            "at workflow.js:+7:8",
        ] {
            assert_eq!(at(line), None, "{line}");
        }
        // NEL is not JavaScript white space.
        assert_eq!(at("at workflow.js:7:8\u{85}"), None);
    }

    #[test]
    fn more_than_64_frames_make_the_path_absent() {
        let frames = |count: usize| {
            (0..count)
                .map(|i| format!("    at f (workflow.js:{}:1)", i + 2))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let path = call_path(&frames(64), "workflow.js", 1000.0, 0.0).expect("64 frames");
        assert_eq!(path.split('<').count(), 64);
        assert_eq!(call_path(&frames(65), "workflow.js", 1000.0, 0.0), None);
    }
}
