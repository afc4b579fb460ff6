//! The OpenTelemetry implementation of the port: the official SDK's tracer and meter
//! providers, exporting OTLP/HTTP protobuf to the URLs [`TelemetryConfig`] resolved. Spans
//! the port hands out are kept by number until they end; a span's parent must not have ended
//! when the span starts (the engine starts children inside their parents).
//!
//! Exports never touch a run: the SDK batches spans on a thread of its own and reads metrics
//! on another, and their HTTP requests go through hyper on the process's tokio runtime
//! ([`OnRuntime`]), whose failures the SDK drops after a bounded wait. No TLS stack is
//! linked, which is why `config` accepts `http://` endpoints only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::trace::{
    Span as _, SpanContext, Status, TraceContextExt as _, TraceFlags, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use super::{
    Attribute, Measurement, Metric, Parent, SpanId, SpanKind, SpanStart, Telemetry,
    TelemetryConfig, TraceContext, keys,
};
use crate::util::sync::Lock;

/// How long shutting down waits for the last exports.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Traces and metrics exported over OTLP/HTTP protobuf.
pub struct OtelTelemetry {
    tracing: Option<(SdkTracerProvider, SdkTracer)>,
    metering: Option<(SdkMeterProvider, Instruments)>,
    /// Spans started and not yet ended, by the number the port handed out.
    spans: Mutex<HashMap<u64, opentelemetry_sdk::trace::Span>>,
    next: AtomicU64,
}

impl OtelTelemetry {
    /// Builds the exporters `config` asks for; their requests run on `runtime`. Errors are
    /// the SDK's refusals of the configuration (a URL it cannot use).
    pub fn new(
        config: &TelemetryConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<OtelTelemetry, String> {
        let client = |timeout: Duration| OnRuntime {
            runtime: runtime.clone(),
            client: HyperClient::with_default_connector(timeout, None),
        };
        let headers: HashMap<String, String> = config.headers.iter().cloned().collect();
        let resource = Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attributes(
                config
                    .resource
                    .iter()
                    .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
            )
            .build();
        let tracing = match &config.traces {
            None => None,
            Some(url) => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(client(config.traces_timeout))
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url.clone())
                    .with_timeout(config.traces_timeout)
                    .with_headers(headers.clone())
                    .build()
                    .map_err(|error| format!("the OTLP trace exporter for {url}: {error}"))?;
                let provider = SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource.clone())
                    .build();
                let tracer = provider.tracer("agentprism");
                Some((provider, tracer))
            }
        };
        let metering = match &config.metrics {
            None => None,
            Some(url) => {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_http_client(client(config.metrics_timeout))
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url.clone())
                    .with_timeout(config.metrics_timeout)
                    .with_headers(headers)
                    .build()
                    .map_err(|error| format!("the OTLP metric exporter for {url}: {error}"))?;
                let provider = SdkMeterProvider::builder()
                    .with_reader(PeriodicReader::builder(exporter).build())
                    .with_resource(resource)
                    .build();
                let instruments = Instruments::new(&provider);
                Some((provider, instruments))
            }
        };
        Ok(OtelTelemetry {
            tracing,
            metering,
            spans: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        })
    }

    fn parent_context(&self, parent: &Parent) -> Context {
        let span_context = match parent {
            Parent::Root => None,
            Parent::Span(id) => self
                .spans
                .locked()
                .get(&id.0)
                .map(|span| span.span_context().clone()),
            Parent::Remote(remote) => parse(remote),
        };
        match span_context {
            Some(span_context) => Context::new().with_remote_span_context(span_context),
            None => Context::new(),
        }
    }
}

impl Telemetry for OtelTelemetry {
    fn enabled(&self) -> bool {
        true
    }

    fn start(&self, span: SpanStart) -> SpanId {
        let Some((_, tracer)) = &self.tracing else {
            return SpanId::NONE;
        };
        let SpanStart {
            kind,
            name,
            parent,
            started_at,
            attributes,
        } = span;
        let parent = self.parent_context(&parent);
        let mut builder = tracer
            .span_builder(name.unwrap_or_else(|| kind.name().to_owned()))
            .with_kind(match kind {
                SpanKind::Attempt => opentelemetry::trace::SpanKind::Client,
                _ => opentelemetry::trace::SpanKind::Internal,
            })
            .with_attributes(attributes.into_iter().map(key_value));
        if let Some(at) = started_at {
            builder = builder.with_start_time(at);
        }
        let started = builder.start_with_context(tracer, &parent);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.spans.locked().insert(id, started);
        SpanId(id)
    }

    fn end(&self, span: SpanId, attributes: Vec<Attribute>) {
        let Some(mut ended) = self.spans.locked().remove(&span.0) else {
            return;
        };
        for attribute in attributes {
            if let Attribute::Text(keys::ERROR_CODE, code) = &attribute {
                ended.set_status(Status::error(code.clone()));
            }
            ended.set_attribute(key_value(attribute));
        }
        ended.end();
    }

    fn context(&self, span: SpanId) -> Option<TraceContext> {
        let spans = self.spans.locked();
        let context = spans.get(&span.0)?.span_context();
        context.is_valid().then(|| format(context))
    }

    fn measure(&self, measurement: Measurement) {
        if let Some((_, instruments)) = &self.metering {
            instruments.record(measurement);
        }
    }

    fn shutdown(&self) {
        let close = || {
            if let Some((provider, _)) = &self.tracing
                && let Err(error) = provider.shutdown_with_timeout(SHUTDOWN_WAIT)
            {
                tracing::warn!("exporting the last spans: {error}");
            }
            if let Some((provider, _)) = &self.metering
                && let Err(error) = provider.shutdown_with_timeout(SHUTDOWN_WAIT)
            {
                tracing::warn!("exporting the last metrics: {error}");
            }
        };
        // The exports run on the runtime: a worker that waits for them must let the others
        // take its tasks.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime)
                if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
            {
                tokio::task::block_in_place(close)
            }
            _ => close(),
        }
    }
}

/// The instruments of [`Metric`].
struct Instruments {
    tokens: Counter<u64>,
    cost: Counter<f64>,
    call_duration: Histogram<f64>,
    runs: Counter<u64>,
    pauses: Counter<u64>,
}

impl Instruments {
    fn new(provider: &SdkMeterProvider) -> Instruments {
        let meter = provider.meter("agentprism");
        Instruments {
            tokens: meter
                .u64_counter(Metric::Tokens.name())
                .with_unit("{token}")
                .with_description("Tokens agent calls spent")
                .build(),
            cost: meter
                .f64_counter(Metric::Cost.name())
                .with_unit("USD")
                .with_description("What agent calls cost, as their agents reported it")
                .build(),
            call_duration: meter
                .f64_histogram(Metric::CallDuration.name())
                .with_unit("s")
                .with_description("How long agent calls took, retries included")
                .build(),
            runs: meter
                .u64_counter(Metric::Runs.name())
                .with_unit("{generation}")
                .with_description("Run generations that ended, by status")
                .build(),
            pauses: meter
                .u64_counter(Metric::Pauses.name())
                .with_unit("{pause}")
                .with_description("Runs that paused, by reason")
                .build(),
        }
    }

    fn record(&self, measurement: Measurement) {
        let Measurement {
            metric,
            value,
            attributes,
        } = measurement;
        let attributes: Vec<KeyValue> = attributes.into_iter().map(key_value).collect();
        match metric {
            Metric::Tokens => self.tokens.add(value as u64, &attributes),
            Metric::Cost => self.cost.add(value, &attributes),
            Metric::CallDuration => self.call_duration.record(value, &attributes),
            Metric::Runs => self.runs.add(value as u64, &attributes),
            Metric::Pauses => self.pauses.add(value as u64, &attributes),
        }
    }
}

fn key_value(attribute: Attribute) -> KeyValue {
    match attribute {
        Attribute::Text(key, value) => KeyValue::new(key, value),
        Attribute::Count(key, value) => KeyValue::new(key, value.min(i64::MAX as u64) as i64),
        Attribute::Amount(key, value) => KeyValue::new(key, value),
        Attribute::Flag(key, value) => KeyValue::new(key, value),
    }
}

/// A `traceparent` of version `00` (and later versions' first four fields, as the W3C
/// recommendation says), with its `tracestate`; `None` when it does not parse or names the
/// all-zero ids.
fn parse(remote: &TraceContext) -> Option<SpanContext> {
    let mut fields = remote.traceparent.trim().split('-');
    let version = fields.next()?;
    let (trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && fields.next().is_some()) {
        return None;
    }
    let hex = |text: &str, len: usize| {
        text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !hex(version, 2) || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = opentelemetry::trace::TraceId::from_hex(trace).ok()?;
    let span_id = opentelemetry::trace::SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1);
    let state = remote
        .tracestate
        .as_deref()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace_id, span_id, flags, true, state);
    context.is_valid().then_some(context)
}

fn format(context: &SpanContext) -> TraceContext {
    let state = context.trace_state().header();
    TraceContext {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        ),
        tracestate: (!state.is_empty()).then_some(state),
    }
}

/// Hyper's client, driven on the process's runtime: the SDK calls exporters from threads of
/// its own, which have no tokio context for hyper's connections and timers.
#[derive(Clone, Debug)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    client: HyperClient,
}

#[async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|error| Box::new(error) as HttpError)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_ones_are_ignored() {
        let remote = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: Some("vendor=opaque".into()),
        };
        let context = parse(&remote).expect("a valid traceparent");
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(format(&context), remote);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "nonsense",
        ] {
            let context = TraceContext {
                traceparent: bad.into(),
                tracestate: None,
            };
            assert_eq!(parse(&context), None, "{bad}");
        }
    }
}
