//! What a generation reports through the telemetry port (`crate::telemetry`): its run span
//! (under the caller's context or the run's kept one, or a root of its own), the wait it
//! ended when it resumes a pause, a span per root phase, per agent call (and a short one per
//! replayed call, marked replayed), per attempt with the tool calls its agent reported, and
//! the metrics of calls and of the generation's end. The driver and the
//! agent tasks call these helpers at the points they already pass; with telemetry off each
//! helper returns at its first branch and builds nothing.
//!
//! Attributes carry ids, names, counts and codes only: never a prompt, args, a result, a tool
//! call's title (it quotes arguments) or anything from the environment.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

use crate::engine::routing::Route;
use crate::model::{PauseReason, RunStatus, Usage};
use crate::telemetry::{
    Attribute, Measurement, Metric, NoTelemetry, Parent, SpanId, SpanKind, SpanStart, Telemetry,
    TraceContext, keys,
};
use crate::util::sync::Lock;

/// What a generation needs to report: the port, where its run span hangs and the run's
/// names.
#[derive(Clone)]
pub(crate) struct TraceSetup {
    pub telemetry: Arc<dyn Telemetry>,
    /// The caller's context (a `traceparent` in the request's `_meta`), if any.
    pub remote: Option<TraceContext>,
    pub workflow: String,
    pub project: String,
    /// The pause a resumed generation ends, which gets a span of its own.
    pub waited: Option<Waited>,
}

/// A pause the run waited in between two generations.
#[derive(Clone, Debug)]
pub(crate) struct Waited {
    /// When the earlier generation paused.
    pub since: std::time::SystemTime,
    /// Why (`checkpoint_required`, `usage_limit`, ...), as the `paused` event says.
    pub reason: Option<String>,
}

impl TraceSetup {
    /// Reports nothing (the dry run, tests).
    pub(crate) fn off() -> TraceSetup {
        TraceSetup {
            telemetry: Arc::new(NoTelemetry),
            remote: None,
            workflow: String::new(),
            project: String::new(),
            waited: None,
        }
    }
}

/// The spans of one generation that the driver holds: the run's and the current root phase's.
pub(super) struct RunTrace {
    telemetry: Arc<dyn Telemetry>,
    run: SpanId,
    phase: Option<SpanId>,
    run_id: String,
}

impl RunTrace {
    /// Starts the generation's run span, and its phase's span when it starts inside one.
    pub(super) fn begin(
        setup: &TraceSetup,
        run_id: &str,
        generation: u32,
        phase: Option<&str>,
    ) -> RunTrace {
        let telemetry = setup.telemetry.clone();
        if !telemetry.enabled() {
            return RunTrace {
                telemetry,
                run: SpanId::NONE,
                phase: None,
                run_id: String::new(),
            };
        }
        let parent = match &setup.remote {
            Some(remote) => Parent::Remote(remote.clone()),
            None => Parent::Root,
        };
        let mut start = SpanStart::new(
            SpanKind::Run,
            parent,
            vec![
                Attribute::Text(keys::RUN_ID, run_id.to_owned()),
                Attribute::Text(keys::WORKFLOW, setup.workflow.clone()),
                Attribute::Text(keys::PROJECT, setup.project.clone()),
                Attribute::Count(keys::GENERATION, u64::from(generation)),
            ],
        );
        start.name = Some(format!("run {}", setup.workflow));
        let run = telemetry.start(start);
        if let Some(waited) = &setup.waited {
            wait_span(telemetry.as_ref(), setup, run, run_id, waited);
        }
        let mut trace = RunTrace {
            telemetry,
            run,
            phase: None,
            run_id: run_id.to_owned(),
        };
        if let Some(title) = phase {
            trace.phase(title);
        }
        trace
    }

    /// The run span's context, while it has not ended.
    pub(super) fn context(&self) -> Option<TraceContext> {
        if !self.telemetry.enabled() {
            return None;
        }
        self.telemetry.context(self.run)
    }

    /// The root scope entered phase `title`: the last phase's span ends, this one's starts.
    pub(super) fn phase(&mut self, title: &str) {
        if !self.telemetry.enabled() {
            return;
        }
        if let Some(previous) = self.phase.take() {
            self.telemetry.end(previous, Vec::new());
        }
        let mut start = SpanStart::new(
            SpanKind::Phase,
            Parent::Span(self.run),
            vec![
                Attribute::Text(keys::RUN_ID, self.run_id.clone()),
                Attribute::Text(keys::PHASE, title.to_owned()),
            ],
        );
        start.name = Some(format!("phase {title}"));
        self.phase = Some(self.telemetry.start(start));
    }

    /// The span of a live agent call, under the current phase (or the run).
    pub(super) fn call(&self, index: u32, label: &str, route: Option<&Route>) -> CallTrace {
        if !self.telemetry.enabled() {
            return CallTrace::off(self.telemetry.clone());
        }
        let call = CallFacts::of(route);
        let span = self.start_call(index, label, &call, false);
        CallTrace {
            telemetry: self.telemetry.clone(),
            span,
            started: Instant::now(),
            call,
        }
    }

    /// A short span for a call answered from the journal, marked replayed, with what the
    /// recorded call spent.
    pub(super) fn replayed(&self, index: u32, label: &str, route: Option<&Route>, usage: &Usage) {
        if !self.telemetry.enabled() {
            return;
        }
        let span = self.start_call(index, label, &CallFacts::of(route), true);
        let mut ending = vec![Attribute::Text(keys::STATUS, "replayed".into())];
        ending.extend(usage_attributes(usage));
        self.telemetry.end(span, ending);
    }

    fn start_call(&self, index: u32, label: &str, call: &CallFacts, replayed: bool) -> SpanId {
        let mut attributes = vec![
            Attribute::Text(keys::RUN_ID, self.run_id.clone()),
            Attribute::Text(keys::LABEL, label.to_owned()),
            Attribute::Count(keys::INDEX, u64::from(index)),
            Attribute::Text(keys::BACKEND, call.backend.clone()),
            Attribute::Flag(keys::REPLAYED, replayed),
        ];
        if let Some(model) = &call.model {
            attributes.push(Attribute::Text(keys::REQUEST_MODEL, model.clone()));
            attributes.push(Attribute::Text(keys::MODEL, model.clone()));
        }
        let parent = Parent::Span(self.phase.unwrap_or(self.run));
        let mut start = SpanStart::new(SpanKind::AgentCall, parent, attributes);
        start.name = Some(format!("agent {label}"));
        self.telemetry.start(start)
    }

    /// The generation ended: its phase and run spans end with its status, and the runs and
    /// pauses metrics count it.
    pub(super) fn end(
        &mut self,
        status: RunStatus,
        pause: Option<PauseReason>,
        error_code: Option<&str>,
        usage: &Usage,
    ) {
        if !self.telemetry.enabled() {
            return;
        }
        if let Some(phase) = self.phase.take() {
            self.telemetry.end(phase, Vec::new());
        }
        let mut ending = vec![Attribute::Text(keys::STATUS, status.as_str().to_owned())];
        if let Some(reason) = pause {
            ending.push(Attribute::Text(keys::REASON, reason.as_str().to_owned()));
        }
        if let Some(code) = error_code {
            ending.push(Attribute::Text(keys::ERROR_CODE, code.to_owned()));
        }
        ending.extend(usage_attributes(usage));
        self.telemetry.end(self.run, ending);
        self.telemetry.measure(Measurement {
            metric: Metric::Runs,
            value: 1.0,
            attributes: vec![Attribute::Text(keys::STATUS, status.as_str().to_owned())],
        });
        if let Some(reason) = pause {
            self.telemetry.measure(Measurement {
                metric: Metric::Pauses,
                value: 1.0,
                attributes: vec![Attribute::Text(keys::REASON, reason.as_str().to_owned())],
            });
        }
    }
}

/// Where a call went, as its spans and metrics name it.
#[derive(Clone, Default)]
struct CallFacts {
    backend: String,
    model: Option<String>,
}

impl CallFacts {
    fn of(route: Option<&Route>) -> CallFacts {
        CallFacts {
            backend: route
                .map(|route| route.backend.id.clone())
                .unwrap_or_default(),
            model: route.and_then(|route| route.model.clone()),
        }
    }

    fn attributes(&self) -> Vec<Attribute> {
        let mut attributes = vec![Attribute::Text(keys::BACKEND, self.backend.clone())];
        if let Some(model) = &self.model {
            attributes.push(Attribute::Text(keys::MODEL, model.clone()));
        }
        attributes
    }
}

/// The span of one live agent call, carried by its task.
pub(super) struct CallTrace {
    telemetry: Arc<dyn Telemetry>,
    span: SpanId,
    started: Instant,
    call: CallFacts,
}

impl CallTrace {
    pub(super) fn off(telemetry: Arc<dyn Telemetry>) -> CallTrace {
        CallTrace {
            telemetry,
            span: SpanId::NONE,
            started: Instant::now(),
            call: CallFacts::default(),
        }
    }

    /// Starts attempt `number`'s span under the call's.
    pub(super) fn attempt(&self, number: u32) -> Option<Arc<AttemptTrace>> {
        if !self.telemetry.enabled() {
            return None;
        }
        let span = self.telemetry.start(SpanStart::new(
            SpanKind::Attempt,
            Parent::Span(self.span),
            vec![Attribute::Count(keys::ATTEMPT, u64::from(number))],
        ));
        Some(Arc::new(AttemptTrace {
            telemetry: self.telemetry.clone(),
            span,
            tools: Mutex::new(ToolSpans::default()),
        }))
    }

    /// The call settled: its span ends with its status, error code and spend, and the
    /// tokens, cost and duration metrics count it.
    pub(super) fn end(&self, status: &str, code: Option<&str>, usage: &Usage) {
        if !self.telemetry.enabled() {
            return;
        }
        let mut ending = vec![Attribute::Text(keys::STATUS, status.to_owned())];
        if let Some(code) = code {
            ending.push(Attribute::Text(keys::ERROR_CODE, code.to_owned()));
        }
        ending.extend(usage_attributes(usage));
        self.telemetry.end(self.span, ending);
        for (direction, tokens) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            let mut attributes = self.call.attributes();
            attributes.push(Attribute::Text(keys::DIRECTION, direction.into()));
            self.telemetry.measure(Measurement {
                metric: Metric::Tokens,
                value: tokens as f64,
                attributes,
            });
        }
        if let Some(cost) = usage.cost_usd {
            self.telemetry.measure(Measurement {
                metric: Metric::Cost,
                value: cost,
                attributes: self.call.attributes(),
            });
        }
        let mut attributes = self.call.attributes();
        attributes.push(Attribute::Text(keys::STATUS, status.to_owned()));
        self.telemetry.measure(Measurement {
            metric: Metric::CallDuration,
            value: self.started.elapsed().as_secs_f64(),
            attributes,
        });
    }
}

/// The most tool-call spans one attempt starts: an agent reports as many tool calls as it
/// likes, and each open one is held until it completes, so past this the attempt's further
/// tool calls are not traced.
pub(super) const MAX_TOOL_SPANS: usize = 1_024;
/// A tool call's id is the agent's text; an id longer than this is not traced.
pub(super) const MAX_TOOL_ID_BYTES: usize = 256;

/// The span of one attempt, and of the tool calls its agent reported, by the agent's id.
pub(super) struct AttemptTrace {
    telemetry: Arc<dyn Telemetry>,
    span: SpanId,
    tools: Mutex<ToolSpans>,
}

/// The attempt's open tool-call spans by the agent's id, and how many it started.
#[derive(Default)]
pub(super) struct ToolSpans {
    open: HashMap<String, SpanId>,
    started: usize,
}

impl AttemptTrace {
    /// The attempt's context in the `_meta` of `session/prompt`, beside what the call set.
    pub(super) fn prompt_meta(&self, meta: Option<Value>) -> Option<Value> {
        match self.telemetry.context(self.span) {
            Some(context) => Some(context.into_meta(meta)),
            None => meta,
        }
    }

    /// A `tool_call` or `tool_call_update`: the first report of an id starts its span, a
    /// `completed` or `failed` status ends it.
    pub(super) fn tool_call(&self, id: &str, status: Option<&str>) {
        let mut tools = self.tools.locked();
        let span = match tools.open.get(id) {
            Some(span) => *span,
            None if tools.started >= MAX_TOOL_SPANS || id.len() > MAX_TOOL_ID_BYTES => return,
            None => {
                let span = self.telemetry.start(SpanStart::new(
                    SpanKind::ToolCall,
                    Parent::Span(self.span),
                    vec![Attribute::Text(keys::TOOL_CALL_ID, id.to_owned())],
                ));
                tools.started += 1;
                tools.open.insert(id.to_owned(), span);
                span
            }
        };
        if let Some(status @ ("completed" | "failed")) = status {
            tools.open.remove(id);
            let mut ending = vec![Attribute::Text(keys::STATUS, status.to_owned())];
            if status == "failed" {
                ending.push(Attribute::Text(keys::ERROR_CODE, "TOOL_CALL_FAILED".into()));
            }
            self.telemetry.end(span, ending);
        }
    }

    /// The attempt ended: tool calls still open end with it.
    pub(super) fn end(&self, code: Option<&str>) {
        for (_, span) in self.tools.locked().open.drain() {
            self.telemetry.end(
                span,
                vec![Attribute::Text(keys::STATUS, "unfinished".into())],
            );
        }
        let mut ending = vec![Attribute::Text(
            keys::STATUS,
            if code.is_some() { "failed" } else { "ok" }.into(),
        )];
        if let Some(code) = code {
            ending.push(Attribute::Text(keys::ERROR_CODE, code.to_owned()));
        }
        self.telemetry.end(self.span, ending);
    }
}

/// The time the run waited before this generation: a span from the pause to now, beside the
/// generations under the run's kept context (under this generation's run span when none was
/// kept).
fn wait_span(
    telemetry: &dyn Telemetry,
    setup: &TraceSetup,
    run: SpanId,
    run_id: &str,
    waited: &Waited,
) {
    let parent = match &setup.remote {
        Some(kept) => Parent::Remote(kept.clone()),
        None => Parent::Span(run),
    };
    let mut attributes = vec![Attribute::Text(keys::RUN_ID, run_id.to_owned())];
    if let Some(reason) = &waited.reason {
        attributes.push(Attribute::Text(keys::REASON, reason.clone()));
    }
    let mut start = SpanStart::new(SpanKind::Wait, parent, attributes);
    start.name = Some(match &waited.reason {
        Some(reason) => format!("wait {reason}"),
        None => "wait".to_owned(),
    });
    start.started_at = Some(waited.since);
    let span = telemetry.start(start);
    telemetry.end(span, Vec::new());
}

fn usage_attributes(usage: &Usage) -> Vec<Attribute> {
    let mut attributes = vec![
        Attribute::Count(keys::INPUT_TOKENS, usage.input_tokens),
        Attribute::Count(keys::OUTPUT_TOKENS, usage.output_tokens),
    ];
    if let Some(cost) = usage.cost_usd {
        attributes.push(Attribute::Amount(keys::COST, cost));
    }
    attributes
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::telemetry::{Measurement, SpanStart};

    /// Counts the spans started and ended.
    #[derive(Default)]
    struct Counting {
        started: AtomicU64,
        ended: AtomicU64,
    }

    impl Telemetry for Counting {
        fn enabled(&self) -> bool {
            true
        }
        fn start(&self, _span: SpanStart) -> SpanId {
            SpanId(self.started.fetch_add(1, Ordering::Relaxed) + 1)
        }
        fn end(&self, _span: SpanId, _attributes: Vec<Attribute>) {
            self.ended.fetch_add(1, Ordering::Relaxed);
        }
        fn context(&self, _span: SpanId) -> Option<TraceContext> {
            None
        }
        fn measure(&self, _measurement: Measurement) {}
        fn shutdown(&self) {}
    }

    fn attempt(telemetry: &Arc<Counting>) -> AttemptTrace {
        AttemptTrace {
            telemetry: telemetry.clone(),
            span: SpanId(0),
            tools: Mutex::new(ToolSpans::default()),
        }
    }

    #[test]
    fn an_attempt_traces_a_bounded_number_of_tool_calls() {
        let counting = Arc::new(Counting::default());
        let trace = attempt(&counting);
        // Never completed: each stays open until the attempt ends.
        for id in 0..MAX_TOOL_SPANS + 10 {
            trace.tool_call(&format!("t{id}"), Some("in_progress"));
        }
        assert_eq!(
            counting.started.load(Ordering::Relaxed),
            MAX_TOOL_SPANS as u64
        );
        assert_eq!(trace.tools.locked().open.len(), MAX_TOOL_SPANS);
        // A known id still reports; an unknown one past the bound does not.
        trace.tool_call("t0", Some("completed"));
        trace.tool_call("t-new", Some("completed"));
        assert_eq!(counting.ended.load(Ordering::Relaxed), 1);
        trace.end(None);
        // The open ones and the attempt's own span ended with it.
        assert_eq!(
            counting.ended.load(Ordering::Relaxed),
            MAX_TOOL_SPANS as u64 + 1
        );
    }

    #[test]
    fn a_tool_call_id_past_its_bound_is_not_traced() {
        let counting = Arc::new(Counting::default());
        let trace = attempt(&counting);
        trace.tool_call(&"x".repeat(MAX_TOOL_ID_BYTES), None);
        trace.tool_call(&"y".repeat(MAX_TOOL_ID_BYTES + 1), None);
        assert_eq!(counting.started.load(Ordering::Relaxed), 1);
    }
}
