//! Telemetry: traces and metrics of runs for the tools people already watch. This is the
//! port the engine reports through — one trace per run, with a run span per generation,
//! spans per phase, per agent call and its attempts, per tool call an agent reports and per
//! pause a resume ends (checkpoint, sign-in, usage reset); metrics of tokens, cost, call
//! durations, runs by status and pauses by reason.
//! `otel.rs` is the OpenTelemetry implementation (OTLP/HTTP protobuf exporters; `config.rs`
//! reads the standard environment variables), which the composition root chooses when the
//! variables ask for it; `NoTelemetry` records nothing and is what runs otherwise.
//!
//! Beside it: the Prometheus `/metrics` of `metrics/` stay as they are, and logs stay in our
//! log files.
//!
//! Trace context travels as W3C `traceparent` text (`TraceContext`): a `traceparent` in an
//! MCP request's `_meta` makes the run a child of the caller's trace (the servers read it and
//! hand it to the engine with the run request), and the engine passes the current attempt's
//! context to the agent in `_meta` on `session/prompt`. A resumed run continues its trace:
//! the engine keeps the first traced generation's context with the run, and later
//! generations' run spans are its children.
//!
//! Invariants: when telemetry is off (`Telemetry::enabled` is `false`), callers build no
//! attributes and the port costs one branch per call site; a span's attributes never carry
//! prompts, args, results or credentials (only ids, names, counts and codes); a failure to
//! export never reaches a run (exports run on the SDK's own threads, and a failed one is
//! dropped).
//!
//! This module imports nothing from the engine, the store or any server: they call it.

pub mod config;
pub mod otel;

use std::time::SystemTime;

pub use config::TelemetryConfig;
pub use otel::OtelTelemetry;

/// The longest `traceparent` taken from a caller: version 00's is 55 bytes; later versions
/// may append fields, so some room is left.
pub const MAX_TRACEPARENT_BYTES: usize = 128;
/// The longest `tracestate` taken from a caller: the 512 characters W3C asks every vendor to
/// pass on.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A W3C trace context, as the `traceparent` (and optional `tracestate`) texts carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context in a request's `_meta` object: its `traceparent` (and `tracestate`)
    /// strings; `None` when there is no `traceparent` string.
    pub fn from_meta(meta: &serde_json::Value) -> Option<TraceContext> {
        let traceparent = meta.get("traceparent")?.as_str()?.trim();
        if traceparent.is_empty() || traceparent.len() > MAX_TRACEPARENT_BYTES {
            return None;
        }
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            // A caller's tracestate goes on with the run (kept with it, sent with every
            // prompt), so one past the length W3C asks vendors to carry is left behind.
            tracestate: meta
                .get("tracestate")
                .and_then(serde_json::Value::as_str)
                .filter(|state| state.len() <= MAX_TRACESTATE_BYTES)
                .map(str::to_owned),
        })
    }

    /// Adds `traceparent` (and `tracestate`) to a `_meta` object, making one if there is
    /// none; keys the caller set are overwritten, since the context is this span's.
    pub fn into_meta(&self, meta: Option<serde_json::Value>) -> serde_json::Value {
        let mut meta = match meta {
            Some(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        meta.insert("traceparent".into(), self.traceparent.clone().into());
        match &self.tracestate {
            Some(state) => {
                meta.insert("tracestate".into(), state.clone().into());
            }
            None => {
                meta.remove("tracestate");
            }
        }
        serde_json::Value::Object(meta)
    }
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

impl SpanKind {
    /// The span's name when it is given none of its own.
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Run => "agentprism.run",
            SpanKind::Phase => "agentprism.phase",
            SpanKind::AgentCall => "agentprism.agent_call",
            SpanKind::Attempt => "agentprism.attempt",
            SpanKind::ToolCall => "agentprism.tool_call",
            SpanKind::Wait => "agentprism.wait",
        }
    }
}

/// A span this port handed out; [`SpanId::NONE`] when telemetry is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanId(pub u64);

impl SpanId {
    /// The span of a port that records nothing.
    pub const NONE: SpanId = SpanId(0);
}

/// Where a new span hangs.
#[derive(Clone, Debug, PartialEq)]
pub enum Parent {
    /// A trace of its own.
    Root,
    /// A span of this port that has not ended yet.
    Span(SpanId),
    /// A span of another process (the caller's, or an earlier generation of the run).
    Remote(TraceContext),
}

/// A span to start.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanStart {
    pub kind: SpanKind,
    /// The span's name; [`SpanKind::name`] when `None`.
    pub name: Option<String>,
    pub parent: Parent,
    /// When it began, if before now (a wait that began in an earlier generation).
    pub started_at: Option<SystemTime>,
    pub attributes: Vec<Attribute>,
}

impl SpanStart {
    /// A span of `kind` under `parent`, starting now, named by its kind.
    pub fn new(kind: SpanKind, parent: Parent, attributes: Vec<Attribute>) -> SpanStart {
        SpanStart {
            kind,
            name: None,
            parent,
            started_at: None,
            attributes,
        }
    }
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

/// The attribute keys the engine sets (docs/observability.md lists them).
pub mod keys {
    pub const RUN_ID: &str = "agentprism.run.id";
    pub const WORKFLOW: &str = "agentprism.workflow.name";
    pub const PROJECT: &str = "agentprism.project";
    pub const GENERATION: &str = "agentprism.run.generation";
    pub const PHASE: &str = "agentprism.phase";
    pub const BACKEND: &str = "agentprism.backend";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const MODEL: &str = "agentprism.model";
    pub const LABEL: &str = "agentprism.call.label";
    pub const INDEX: &str = "agentprism.call.index";
    pub const ATTEMPT: &str = "agentprism.attempt";
    pub const STATUS: &str = "agentprism.status";
    /// A span that carries it ends with the error status.
    pub const ERROR_CODE: &str = "agentprism.error.code";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const COST: &str = "agentprism.cost_usd";
    pub const REPLAYED: &str = "agentprism.replayed";
    pub const TOOL_CALL_ID: &str = "agentprism.tool_call.id";
    pub const REASON: &str = "agentprism.pause.reason";
    pub const DIRECTION: &str = "agentprism.token.direction";
}

/// The metrics the engine records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Tokens an agent call spent, by backend, model and direction (`input`, `output`).
    Tokens,
    /// What an agent call cost, in US dollars, by backend and model.
    Cost,
    /// How long an agent call took, in seconds, by backend, model and status.
    CallDuration,
    /// Generations that ended, by status.
    Runs,
    /// Pauses, by reason.
    Pauses,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Tokens => "agentprism.tokens",
            Metric::Cost => "agentprism.cost",
            Metric::CallDuration => "agentprism.call.duration",
            Metric::Runs => "agentprism.runs",
            Metric::Pauses => "agentprism.pauses",
        }
    }
}

/// One measurement of a metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub metric: Metric,
    pub value: f64,
    pub attributes: Vec<Attribute>,
}

/// The port the engine reports runs through; object safe, used as `Arc<dyn Telemetry>`.
pub trait Telemetry: Send + Sync + 'static {
    /// Whether anything is recorded; when `false`, callers skip building attributes.
    fn enabled(&self) -> bool;

    /// Starts a span.
    fn start(&self, span: SpanStart) -> SpanId;

    /// Ends `span`, with the attributes known only at its end (status, error code, tokens).
    fn end(&self, span: SpanId, attributes: Vec<Attribute>);

    /// The context to hand on to an agent, or to keep for a later generation, for `span`.
    fn context(&self, span: SpanId) -> Option<TraceContext>;

    /// Records one measurement of a metric.
    fn measure(&self, measurement: Measurement);

    /// Sends what is buffered and stops exporting, within a bounded wait (process exit).
    fn shutdown(&self) {}
}

/// Telemetry that records nothing: the default, and what runs when nothing is configured.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {
    fn enabled(&self) -> bool {
        false
    }

    fn start(&self, _span: SpanStart) -> SpanId {
        SpanId::NONE
    }

    fn end(&self, _span: SpanId, _attributes: Vec<Attribute>) {}

    fn context(&self, _span: SpanId) -> Option<TraceContext> {
        None
    }

    fn measure(&self, _measurement: Measurement) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_context_is_taken_up_to_its_bounds() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let at_bound = "k=".to_owned() + &"v".repeat(MAX_TRACESTATE_BYTES - 2);
        let taken = TraceContext::from_meta(
            &serde_json::json!({"traceparent": parent, "tracestate": at_bound}),
        )
        .expect("a context");
        assert_eq!(taken.tracestate.as_deref(), Some(at_bound.as_str()));
        let over = at_bound.clone() + "v";
        let taken = TraceContext::from_meta(
            &serde_json::json!({"traceparent": parent, "tracestate": over}),
        )
        .expect("the parent still counts");
        assert_eq!(taken.tracestate, None);
        let long_parent = "0".repeat(MAX_TRACEPARENT_BYTES + 1);
        assert_eq!(
            TraceContext::from_meta(&serde_json::json!({"traceparent": long_parent})),
            None
        );
        let edge = "0".repeat(MAX_TRACEPARENT_BYTES);
        assert!(TraceContext::from_meta(&serde_json::json!({"traceparent": edge})).is_some());
    }
}
