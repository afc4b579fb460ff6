//! The one hook through which a server learns of the tool calls the core answered: after a
//! `tools/call` is answered, and before the answer is sent, the core tells every
//! [`CallObserver`] registered with the handler's [`ToolRegistry`](super::ToolRegistry)
//! what was asked and what was answered.
//!
//! An observer reads; it never changes the answer, and it is told only of successful
//! answers (a protocol error changed nothing an observer follows). It runs inline on the
//! request, so it must be quick and must not wait: work that needs I/O goes onto a task of
//! its own. This is how the workflow server's channels learn which runs a session named, and
//! how its tasks layer learns which session created a run task, without wrapping the tool.

use serde_json::Value;

use super::answer::ToolAnswer;
use super::tasks::TaskState;

/// One answered `tools/call`, as the observers see it.
#[derive(Clone, Copy, Debug)]
pub struct AnsweredCall<'a> {
    /// The legacy session that asked; `None` for a stateless (2026-07-28) request.
    pub session: Option<&'a str>,
    /// The tool's name.
    pub tool: &'a str,
    /// The call's arguments (an empty object when the client sent none).
    pub arguments: &'a Value,
    /// The answer the client gets: the tool's own result, or, when the call became a task,
    /// the task-creation result of the era.
    pub answer: &'a ToolAnswer,
    /// The task the call became, if it became one.
    pub task: Option<&'a TaskState>,
}

impl AnsweredCall<'_> {
    /// The `action` argument, for tools that take one (the `workflow` tool).
    pub(crate) fn action(&self) -> Option<&str> {
        self.arguments.get("action").and_then(Value::as_str)
    }
}

/// Told of every successful `tools/call` answer of the registry it is registered with.
pub trait CallObserver: Send + Sync + 'static {
    fn answered(&self, call: &AnsweredCall<'_>);
}
