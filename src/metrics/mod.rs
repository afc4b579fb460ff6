//! The process's Prometheus metrics: one registry, built once ([`global`]), served as the
//! text exposition format at `/metrics` (the folder server's HTTP listener, docs/serve.md).
//!
//! Increment points are few and cheap (an atomic add each): a settled agent call and a lease
//! renewal in the driver, a run-API request's latency in the folder server. The gauges of
//! what the store holds (`mhl_serve_runs_pending`, runs by state) are set by the folder
//! server's housekeeping sweep from one query of the store, not read per scrape, so a scrape
//! never touches the store.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The label of the runs-by-state gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabel {
    pub state: String,
}

/// The labels of the replica identity gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReplicaLabels {
    pub host: String,
    pub instance: String,
    pub pid: String,
    pub boot: String,
}

/// The label of the request latency histogram: the run-API method (`run/start`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MethodLabel {
    pub method: String,
}

/// Every metric of the process, and the registry that encodes them.
pub(crate) struct Metrics {
    /// Owns the metrics below (they are shared handles) for encoding.
    registry: Registry,
    /// Runs of the served folder that are pending or running, as the store holds them.
    runs_pending: Gauge,
    /// Runs of the served folder by stored status.
    runs_by_state: Family<StateLabel, Gauge>,
    /// Agent calls settled and journaled by this process.
    agent_calls: Counter,
    /// Lease renewals (heartbeats) that succeeded.
    lease_renewals: Counter,
    /// Lease renewals that failed (store unreachable, too slow, or fenced).
    lease_renewal_failures: Counter,
    /// Run-API request latency, by method.
    request_seconds: Family<MethodLabel, Histogram>,
    /// 1 for this process's identity as a lease holder, once the folder server set it.
    replica_info: Family<ReplicaLabels, Gauge>,
    /// Starts waiting in the folder server's queue (every replica's, on a shared store).
    queue_length: Gauge,
    /// How long the oldest of them has waited, in seconds (0 when none waits).
    queue_oldest_wait: Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// The process's metrics.
pub(crate) fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~16 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 15,
    ))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let runs_pending = Gauge::default();
        let runs_by_state = Family::<StateLabel, Gauge>::default();
        let agent_calls = Counter::default();
        let lease_renewals = Counter::default();
        let lease_renewal_failures = Counter::default();
        let request_seconds = Family::<MethodLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "mhl_serve_runs_pending",
            "Runs of the served folder pending or running, as the store holds them",
            runs_pending.clone(),
        );
        registry.register(
            "mhl_serve_runs",
            "Runs of the served folder by stored state",
            runs_by_state.clone(),
        );
        registry.register(
            "mhl_agent_calls",
            "Agent calls settled and journaled by this process",
            agent_calls.clone(),
        );
        registry.register(
            "mhl_lease_renewals",
            "Run lease renewals that succeeded",
            lease_renewals.clone(),
        );
        registry.register(
            "mhl_lease_renewal_failures",
            "Run lease renewals that failed",
            lease_renewal_failures.clone(),
        );
        registry.register(
            "mhl_serve_request_seconds",
            "Run API request latency",
            request_seconds.clone(),
        );
        let replica_info = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "mhl_serve_replica",
            "This replica's identity as a run lease holder (host, instance id, pid, boot id); always 1",
            replica_info.clone(),
        );
        let queue_length = Gauge::default();
        registry.register(
            "mhl_serve_queue_length",
            "Starts waiting in the queue for a slot, on every replica sharing the store",
            queue_length.clone(),
        );
        let queue_oldest_wait = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "mhl_serve_queue_oldest_wait_seconds",
            "How long the oldest start in the queue has waited (0 when none waits)",
            queue_oldest_wait.clone(),
        );
        Metrics {
            queue_length,
            queue_oldest_wait,
            registry,
            runs_pending,
            runs_by_state,
            agent_calls,
            lease_renewals,
            lease_renewal_failures,
            request_seconds,
            replica_info,
        }
    }

    /// Names this process as a lease holder: the `mhl_serve_replica` series.
    pub(crate) fn identify(&self, labels: ReplicaLabels) {
        self.replica_info.get_or_create(&labels).set(1);
    }

    /// `count` agent calls settled together (one group commit).
    pub(crate) fn agent_calls_settled(&self, count: usize) {
        if count > 0 {
            self.agent_calls.inc_by(count as u64);
        }
    }

    pub(crate) fn lease_renewed(&self) {
        self.lease_renewals.inc();
    }

    pub(crate) fn lease_renewal_failed(&self) {
        self.lease_renewal_failures.inc();
    }

    /// Records one run-API request of `method` that took `elapsed`.
    pub(crate) fn request_took(&self, method: &str, elapsed: Duration) {
        self.request_seconds
            .get_or_create(&MethodLabel {
                method: method.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Sets the store gauges: `pending` runs pending or running, and the count of each
    /// state (states absent from `by_state` are set to 0 once seen).
    pub(crate) fn set_runs(&self, pending: u64, by_state: &[(&str, u64)]) {
        self.runs_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        for (state, count) in by_state {
            self.runs_by_state
                .get_or_create(&StateLabel {
                    state: (*state).to_owned(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// The queue's length and its oldest start's wait, as the dispatcher last read them.
    pub(crate) fn set_queue(&self, length: u64, oldest_wait: Duration) {
        self.queue_length
            .set(i64::try_from(length).unwrap_or(i64::MAX));
        self.queue_oldest_wait.set(oldest_wait.as_secs_f64());
    }

    /// The text exposition of every metric (OpenMetrics, which Prometheus reads).
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_every_metric_with_its_value() {
        let metrics = Metrics::new();
        metrics.set_runs(3, &[("running", 2), ("pending", 1), ("completed", 7)]);
        metrics.set_queue(4, Duration::from_millis(2500));
        metrics.agent_calls_settled(1);
        metrics.lease_renewed();
        metrics.lease_renewed();
        metrics.lease_renewal_failed();
        metrics.request_took("run/status", Duration::from_millis(3));
        let text = metrics.encode();
        for line in [
            "mhl_serve_runs_pending 3",
            "mhl_serve_queue_length 4",
            "mhl_serve_queue_oldest_wait_seconds 2.5",
            "mhl_serve_runs{state=\"completed\"} 7",
            "mhl_agent_calls_total 1",
            "mhl_lease_renewals_total 2",
            "mhl_lease_renewal_failures_total 1",
            "mhl_serve_request_seconds_count{method=\"run/status\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
