//! Telemetry: traces and metrics of runs for the tools people already watch. This is the
//! port the engine will report through — one trace per run, with spans per phase, per agent
//! call and its attempts, per tool call an agent reports and per checkpoint or pause wait;
//! metrics of tokens, cost, call durations, runs by status and pauses by reason. The
//! OpenTelemetry implementation (OTLP exporters configured by the standard environment
//! variables) will live in this folder, and the composition root will choose it when the
//! variables ask for it. Today the only implementation is `NoTelemetry`, which records
//! nothing, and nothing calls the port.
//!
//! Beside it: the Prometheus `/metrics` of `metrics/` stay as they are, and logs stay in our
//! log files.
//!
//! Trace context travels as W3C `traceparent` text (`TraceContext`): a `traceparent` in an
//! MCP request's `_meta` makes the run a child of the caller's trace (the servers read it and
//! hand it to the engine with the run request), and the engine passes the current span's
//! context to the agent in `_meta` on `session/prompt`. A resumed run continues its trace
//! (with linked spans where a new root is needed).
//!
//! Invariants: when telemetry is off (`Telemetry::enabled` is `false`), callers build no
//! attributes and the port costs one branch per call site; a span's attributes never carry
//! prompts, args, results or credentials (only ids, names, counts and codes); a failure to
//! export never reaches a run.
//!
//! This module imports nothing from the engine, the store or any server: they call it.

/// A W3C trace context, as the `traceparent` (and optional `tracestate`) texts carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// What a span covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Run,
    Phase,
    AgentCall,
    Attempt,
    ToolCall,
    Wait,
}

/// A span this port handed out; [`SpanId::NONE`] when telemetry is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanId(pub u64);

impl SpanId {
    /// The span of a port that records nothing.
    pub const NONE: SpanId = SpanId(0);
}

/// An attribute a user filters by: run id, workflow, project, backend, model, label, status,
/// error code, tokens, cost, replayed or live.
#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    Text(&'static str, String),
    Count(&'static str, u64),
    Amount(&'static str, f64),
    Flag(&'static str, bool),
}

/// One measurement of a metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The metric's name, for example `agentprism.tokens`.
    pub name: &'static str,
    pub value: f64,
    pub attributes: Vec<Attribute>,
}

/// The port the engine reports runs through; object safe, used as `Arc<dyn Telemetry>`.
pub trait Telemetry: Send + Sync + 'static {
    /// Whether anything is recorded; when `false`, callers skip building attributes.
    fn enabled(&self) -> bool;

    /// Starts a span under `parent`, or a run's root span under the caller's `remote`
    /// context (`None` for a root of our own).
    fn start(
        &self,
        kind: SpanKind,
        parent: Option<SpanId>,
        remote: Option<&TraceContext>,
        attributes: Vec<Attribute>,
    ) -> SpanId;

    /// Ends `span`, with the attributes known only at its end (status, error code, tokens).
    fn end(&self, span: SpanId, attributes: Vec<Attribute>);

    /// The context to hand on to an agent for `span`.
    fn context(&self, span: SpanId) -> Option<TraceContext>;

    /// Records one measurement of a metric.
    fn measure(&self, measurement: Measurement);
}

/// Telemetry that records nothing: the default, and what runs when nothing is configured.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {
    fn enabled(&self) -> bool {
        false
    }

    fn start(
        &self,
        _kind: SpanKind,
        _parent: Option<SpanId>,
        _remote: Option<&TraceContext>,
        _attributes: Vec<Attribute>,
    ) -> SpanId {
        SpanId::NONE
    }

    fn end(&self, _span: SpanId, _attributes: Vec<Attribute>) {}

    fn context(&self, _span: SpanId) -> Option<TraceContext> {
        None
    }

    fn measure(&self, _measurement: Measurement) {}
}
