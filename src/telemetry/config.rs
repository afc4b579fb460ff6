//! What the standard OpenTelemetry variables ask for, read once from the process's snapshot
//! (`crate::env`): whether traces and metrics are exported, where to, with which headers and
//! under which resource. Telemetry is off unless an endpoint or an `otlp` exporter is named;
//! a value this build cannot act on (another protocol, an `https` endpoint, an exporter other
//! than `otlp`/`none`, a malformed list) is refused with an error naming the variable, so a
//! daemon never starts pretending to export.

use std::time::Duration;

use crate::env::{self, EnvSnapshot};

/// Where OTLP/HTTP goes when `otlp` is asked for and no endpoint is named.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// The `service.name` when neither variable names one.
const DEFAULT_SERVICE: &str = "agentprism";
/// One export's deadline when no variable sets one: the specification's default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest export deadline a variable may set (ten minutes).
const MAX_TIMEOUT_MS: u64 = 600_000;

/// The exporters the variables ask for; `None` from [`TelemetryConfig::from_env`] when they
/// ask for nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// The URL spans are posted to, when traces are exported.
    pub traces: Option<String>,
    /// The URL metrics are posted to, when metrics are exported.
    pub metrics: Option<String>,
    /// Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// One trace export's deadline (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s).
    pub traces_timeout: Duration,
    /// One metric export's deadline, likewise.
    pub metrics_timeout: Duration,
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`, `service.name` left out (it is [`Self::service_name`]).
    pub resource: Vec<(String, String)>,
}

impl TelemetryConfig {
    /// Reads the variables; `Ok(None)` when telemetry is off. Errors name the variable and
    /// what it must hold.
    pub fn from_env(env: &EnvSnapshot) -> Result<Option<TelemetryConfig>, String> {
        if env.flag(env::OTEL_SDK_DISABLED) {
            return Ok(None);
        }
        check_transport(env)?;
        let traces = endpoint(
            env,
            env::OTEL_TRACES_EXPORTER,
            env::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
            "v1/traces",
        )?;
        let metrics = endpoint(
            env,
            env::OTEL_METRICS_EXPORTER,
            env::OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
            "v1/metrics",
        )?;
        if traces.is_none() && metrics.is_none() {
            return Ok(None);
        }
        let headers = pairs(env, env::OTEL_EXPORTER_OTLP_HEADERS)?;
        let traces_timeout = timeout(env, env::OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)?;
        let metrics_timeout = timeout(env, env::OTEL_EXPORTER_OTLP_METRICS_TIMEOUT)?;
        let mut resource = pairs(env, env::OTEL_RESOURCE_ATTRIBUTES)?;
        let named = resource
            .iter()
            .position(|(key, _)| key == "service.name")
            .map(|at| resource.remove(at).1);
        let service_name = env
            .non_empty(env::OTEL_SERVICE_NAME)
            .map(|name| name.trim().to_owned())
            .or(named)
            .unwrap_or_else(|| DEFAULT_SERVICE.to_owned());
        Ok(Some(TelemetryConfig {
            traces,
            metrics,
            headers,
            traces_timeout,
            metrics_timeout,
            service_name,
            resource,
        }))
    }
}

/// Only `http/protobuf` is built in (no gRPC, no JSON encoding).
fn check_protocol(env: &EnvSnapshot, variable: &str) -> Result<(), String> {
    match env.non_empty(variable).map(str::trim) {
        None | Some("http/protobuf") => Ok(()),
        Some(other) => Err(format!(
            "{variable} must be http/protobuf (the only OTLP protocol agentprism exports \
             with), got {other:?}"
        )),
    }
}

/// The protocol and compression variables: refused, even with nothing exported, when they ask
/// for what this build cannot do.
fn check_transport(env: &EnvSnapshot) -> Result<(), String> {
    for variable in [
        env::OTEL_EXPORTER_OTLP_PROTOCOL,
        env::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
        env::OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    ] {
        check_protocol(env, variable)?;
    }
    for variable in [
        env::OTEL_EXPORTER_OTLP_COMPRESSION,
        env::OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
        env::OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
    ] {
        check_compression(env, variable)?;
    }
    Ok(())
}

/// One signal's export deadline: its own variable, else `OTEL_EXPORTER_OTLP_TIMEOUT`, else
/// [`DEFAULT_TIMEOUT`]; milliseconds from 1 to [`MAX_TIMEOUT_MS`].
fn timeout(env: &EnvSnapshot, own: &str) -> Result<Duration, String> {
    for variable in [own, env::OTEL_EXPORTER_OTLP_TIMEOUT] {
        let Some(text) = env.non_empty(variable) else {
            continue;
        };
        return text
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|ms| (1..=MAX_TIMEOUT_MS).contains(ms))
            .map(Duration::from_millis)
            .ok_or_else(|| {
                format!("{variable} must be milliseconds from 1 to {MAX_TIMEOUT_MS}, got {text:?}")
            });
    }
    Ok(DEFAULT_TIMEOUT)
}

/// The exporter reads the compression variables itself and would pass over a value it
/// cannot act on with a warning; this build compresses nothing, so anything but `none` is
/// refused instead.
fn check_compression(env: &EnvSnapshot, variable: &str) -> Result<(), String> {
    match env.non_empty(variable).map(str::trim) {
        None => Ok(()),
        Some(value) if value.eq_ignore_ascii_case("none") => Ok(()),
        Some(other) => Err(format!(
            "{variable} must be none (agentprism sends OTLP uncompressed), got {other:?}"
        )),
    }
}

/// The URL one signal is posted to, or `None` when it is not exported: its own endpoint as
/// given, else the base endpoint with `path` appended, else the default collector when the
/// exporter variable says `otlp`.
fn endpoint(
    env: &EnvSnapshot,
    exporter: &str,
    own: &str,
    path: &str,
) -> Result<Option<String>, String> {
    let asked = match env.non_empty(exporter).map(str::trim) {
        None => false,
        Some("none") => return Ok(None),
        Some("otlp") => true,
        Some(other) => {
            return Err(format!(
                "{exporter} must be otlp or none (the only exporters agentprism has), got \
                 {other:?}"
            ));
        }
    };
    let (variable, url) = if let Some(url) = env.non_empty(own) {
        (own, url.trim().to_owned())
    } else if let Some(base) = env.non_empty(env::OTEL_EXPORTER_OTLP_ENDPOINT) {
        (env::OTEL_EXPORTER_OTLP_ENDPOINT, joined(base.trim(), path))
    } else if asked {
        (exporter, joined(DEFAULT_ENDPOINT, path))
    } else {
        return Ok(None);
    };
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "{variable} must be an http:// URL (this build exports without TLS; send to a \
             local OpenTelemetry Collector that forwards over https), got {url:?}"
        ));
    };
    if rest.is_empty() || rest.starts_with('/') || url.parse::<hyper::Uri>().is_err() {
        return Err(format!(
            "{variable} must be a URL such as http://localhost:4318, got {url:?}"
        ));
    }
    Ok(Some(url))
}

fn joined(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

/// A `key=value,key=value` list; values may be percent-encoded. Blank entries are skipped.
fn pairs(env: &EnvSnapshot, variable: &str) -> Result<Vec<(String, String)>, String> {
    let Some(list) = env.non_empty(variable) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let (key, value) = entry
            .split_once('=')
            .map(|(key, value)| (key.trim(), value.trim()))
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| {
                format!("{variable} must be key=value pairs separated by commas, got {entry:?}")
            })?;
        let value = percent_decoded(value)
            .ok_or_else(|| format!("{variable} holds a badly percent-encoded value for {key:?}"))?;
        found.push((key.to_owned(), value));
    }
    Ok(found)
}

fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text.get(at + 1..at + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<Option<TelemetryConfig>, String> {
        TelemetryConfig::from_env(&EnvSnapshot::from_pairs(pairs.iter().copied()))
    }

    #[test]
    fn nothing_configured_is_off_and_disabled_wins() {
        assert_eq!(config(&[]), Ok(None));
        assert_eq!(
            config(&[
                (env::OTEL_SDK_DISABLED, "true"),
                (env::OTEL_EXPORTER_OTLP_ENDPOINT, "http://127.0.0.1:4318"),
            ]),
            Ok(None)
        );
        assert_eq!(config(&[(env::OTEL_SERVICE_NAME, "x")]), Ok(None));
    }

    #[test]
    fn endpoints_resolve_per_signal() {
        let got = config(&[
            (env::OTEL_EXPORTER_OTLP_ENDPOINT, "http://127.0.0.1:4318/"),
            (env::OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, "http://m:9/own"),
            (env::OTEL_EXPORTER_OTLP_HEADERS, "x-key=a%20b, team=one"),
            (
                env::OTEL_RESOURCE_ATTRIBUTES,
                "service.name=ours,deployment.environment=dev",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            got.traces.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(got.metrics.as_deref(), Some("http://m:9/own"));
        assert_eq!(
            got.headers,
            [
                ("x-key".into(), "a b".into()),
                ("team".into(), "one".into())
            ]
        );
        assert_eq!(got.service_name, "ours");
        assert_eq!(
            got.resource,
            [("deployment.environment".into(), "dev".into())]
        );
        let only = config(&[(env::OTEL_TRACES_EXPORTER, "otlp")])
            .unwrap()
            .unwrap();
        assert_eq!(
            only.traces.as_deref(),
            Some("http://localhost:4318/v1/traces")
        );
        assert_eq!(only.metrics, None);
        assert_eq!(only.service_name, "agentprism");
        let none = config(&[
            (env::OTEL_EXPORTER_OTLP_ENDPOINT, "http://h:1"),
            (env::OTEL_METRICS_EXPORTER, "none"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(none.metrics, None);
    }

    #[test]
    fn what_cannot_be_done_is_refused_naming_the_variable() {
        let refused = |pairs: &[(&str, &str)], variable: &str| {
            let error = config(pairs).unwrap_err();
            assert!(error.starts_with(variable), "{error}");
        };
        let endpoint = (env::OTEL_EXPORTER_OTLP_ENDPOINT, "http://127.0.0.1:4318");
        refused(
            &[endpoint, (env::OTEL_EXPORTER_OTLP_PROTOCOL, "grpc")],
            env::OTEL_EXPORTER_OTLP_PROTOCOL,
        );
        // Refused even with no endpoint: the variable asks for something not done.
        refused(
            &[(env::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "http/json")],
            env::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
        );
        refused(
            &[(env::OTEL_EXPORTER_OTLP_ENDPOINT, "https://api.example")],
            env::OTEL_EXPORTER_OTLP_ENDPOINT,
        );
        refused(
            &[(env::OTEL_TRACES_EXPORTER, "console")],
            env::OTEL_TRACES_EXPORTER,
        );
        refused(
            &[endpoint, (env::OTEL_EXPORTER_OTLP_HEADERS, "novalue")],
            env::OTEL_EXPORTER_OTLP_HEADERS,
        );
        refused(
            &[endpoint, (env::OTEL_RESOURCE_ATTRIBUTES, "a=%zz")],
            env::OTEL_RESOURCE_ATTRIBUTES,
        );
        refused(
            &[(env::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "http://")],
            env::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        );
        refused(
            &[endpoint, (env::OTEL_EXPORTER_OTLP_COMPRESSION, "gzip")],
            env::OTEL_EXPORTER_OTLP_COMPRESSION,
        );
        refused(
            &[
                endpoint,
                (env::OTEL_EXPORTER_OTLP_METRICS_COMPRESSION, "zstd"),
            ],
            env::OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
        );
        assert!(
            config(&[
                endpoint,
                (env::OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, "none")
            ])
            .unwrap()
            .is_some()
        );
        refused(
            &[endpoint, (env::OTEL_EXPORTER_OTLP_TIMEOUT, "5s")],
            env::OTEL_EXPORTER_OTLP_TIMEOUT,
        );
        refused(
            &[endpoint, (env::OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, "600001")],
            env::OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
        );
    }

    #[test]
    fn export_deadlines_come_per_signal_then_shared_then_default() {
        let endpoint = (env::OTEL_EXPORTER_OTLP_ENDPOINT, "http://127.0.0.1:4318");
        let plain = config(&[endpoint]).unwrap().unwrap();
        assert_eq!(plain.traces_timeout, Duration::from_secs(10));
        let set = config(&[
            endpoint,
            (env::OTEL_EXPORTER_OTLP_TIMEOUT, "2500"),
            (env::OTEL_EXPORTER_OTLP_METRICS_TIMEOUT, "600000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(set.traces_timeout, Duration::from_millis(2500));
        assert_eq!(set.metrics_timeout, Duration::from_secs(600));
    }
}
