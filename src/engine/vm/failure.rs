//! Script failures out of the VM: a runaway slice, the memory cap, and a thrown value read
//! for its `code`, message and innermost script position.

use std::sync::atomic::Ordering;

use rquickjs::Ctx;

use super::{SCRIPT_FILENAME, ScriptFailure, SliceClock, VmLimits, WRAPPER_OPEN};

pub(super) fn runaway(limits: VmLimits) -> ScriptFailure {
    ScriptFailure::script_error(format!(
        "the script ran for more than {} ms without waiting on an agent or checkpoint (a runaway loop?) and was stopped",
        limits.slice_limit.as_millis()
    ))
}

/// Bytes of a failure's message kept. The message reaches the run row, its `error` event,
/// `status` and an admission's refusal, and a script can throw a message of megabytes.
pub(crate) const MESSAGE_LIMIT: usize = 8 << 10;
/// Bytes of a failure's `code` kept: the script sets it (`error.code`) as freely.
pub(crate) const CODE_LIMIT: usize = 128;

/// Turns an rquickjs error (usually a pending exception) into a failure.
pub(super) fn vm_failure<'js>(
    ctx: &Ctx<'js>,
    error: rquickjs::Error,
    clock: &SliceClock,
    limits: VmLimits,
) -> ScriptFailure {
    if clock.tripped.load(Ordering::SeqCst) {
        return runaway(limits);
    }
    match error {
        rquickjs::Error::Exception => failure_from_value(ctx, ctx.catch()),
        other => {
            let text = other.to_string();
            if text.to_ascii_lowercase().contains("out of memory") || text.contains("Allocation") {
                memory_failure(limits)
            } else {
                bounded(ScriptFailure::script_error(text))
            }
        }
    }
}

/// `failure` with its message cut to [`MESSAGE_LIMIT`] bytes (saying how long it was) and its
/// code to [`CODE_LIMIT`], each at a character boundary.
pub(super) fn bounded(mut failure: ScriptFailure) -> ScriptFailure {
    crate::util::cut_message(&mut failure.message, MESSAGE_LIMIT);
    if failure.code.len() > CODE_LIMIT {
        failure.code = crate::util::shortened(&failure.code, CODE_LIMIT).into_owned();
    }
    failure
}

fn memory_failure(limits: VmLimits) -> ScriptFailure {
    ScriptFailure::script_error(format!(
        "the script exceeded its memory limit of {} MiB and was stopped",
        limits.memory_limit >> 20
    ))
}

/// Reads `code`, `message`, and the innermost script position out of a thrown value, the
/// texts [`bounded`].
pub(super) fn failure_from_value<'js>(
    ctx: &Ctx<'js>,
    value: rquickjs::Value<'js>,
) -> ScriptFailure {
    bounded(read_thrown(ctx, value))
}

fn read_thrown<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> ScriptFailure {
    if let Some(object) = value.as_object() {
        let message: Option<String> = object.get("message").ok();
        let name: Option<String> = object.get("name").ok();
        let code: Option<String> = object.get("code").ok();
        let stack: Option<String> = object.get("stack").ok();
        let line_number: Option<u32> = object.get("lineNumber").ok();
        let column_number: Option<u32> = object.get("columnNumber").ok();
        let mut message = message.unwrap_or_default();
        if message.to_ascii_lowercase().contains("out of memory") {
            return ScriptFailure {
                code: "SCRIPT_ERROR".into(),
                ..ScriptFailure::script_error(message)
            };
        }
        if let Some(name) = name.filter(|n| !n.is_empty() && n != "Error") {
            message = format!("{name}: {message}");
        }
        let (line, column) = stack
            .as_deref()
            .and_then(script_position)
            .map(|(l, c)| (Some(l), Some(c)))
            .unwrap_or((line_number, column_number));
        let column = match (line, column) {
            (Some(1), Some(column)) => {
                Some(column.saturating_sub(WRAPPER_OPEN.len() as u32).max(1))
            }
            (_, column) => column,
        };
        return ScriptFailure {
            code: code
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "SCRIPT_ERROR".into()),
            message,
            line,
            column,
        };
    }
    let text = if let Some(text) = value.as_string().and_then(|s| s.to_string().ok()) {
        text
    } else if value.is_undefined() {
        "undefined".to_owned()
    } else {
        ctx.json_stringify(value)
            .ok()
            .flatten()
            .and_then(|s| s.to_string().ok())
            .unwrap_or_else(|| "a non-error value".to_owned())
    };
    ScriptFailure::script_error(format!("the script threw {text}"))
}

/// The innermost `workflow.js:L:C` frame of a stack trace.
fn script_position(stack: &str) -> Option<(u32, u32)> {
    let marker = format!("{SCRIPT_FILENAME}:");
    for line in stack.lines() {
        if let Some(at) = line.rfind(&marker) {
            let rest =
                line[at + marker.len()..].trim_end_matches(|c: char| c == ')' || c.is_whitespace());
            let mut parts = rest.split(':');
            let line_no = parts.next()?.parse().ok()?;
            let column = parts.next().and_then(|c| c.parse().ok()).unwrap_or(1);
            return Some((line_no, column));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_s_message_and_code_are_kept_to_their_limits() {
        let within = ScriptFailure {
            code: "c".repeat(CODE_LIMIT),
            ..ScriptFailure::script_error("m".repeat(MESSAGE_LIMIT))
        };
        assert_eq!(
            bounded(within.clone()),
            within,
            "texts of the limit are whole"
        );
        let past = ScriptFailure {
            code: format!("{}é", "c".repeat(CODE_LIMIT - 1)),
            line: Some(3),
            ..ScriptFailure::script_error(format!("{}é", "m".repeat(MESSAGE_LIMIT - 1)))
        };
        let cut = bounded(past);
        assert_eq!(
            cut.message,
            format!(
                "{}… (cut: the message had {} bytes)",
                "m".repeat(MESSAGE_LIMIT - 1),
                MESSAGE_LIMIT + 1
            )
        );
        assert_eq!(cut.code, format!("{}…", "c".repeat(CODE_LIMIT - 1)));
        assert_eq!(cut.line, Some(3), "the position stays");
    }
}
