//! Signed control round trip (area `control` of `docs/performance.md`): one `identify` call through [`ControlClient::call`] to a
//! [`ControlServer`] in the same process over a real Unix socket in a temp folder (connect,
//! sign, send, verify, handle, sign the answer, verify it), 1,000 sequential calls after 100
//! of warm-up. Prints p50/p90/p99 with the goal (p50 under 1 ms) beside them.
//!
//! `cargo bench --bench control` measures an optimised build; `cargo test --bench control`
//! runs the same code in the dev profile (dependencies at opt-level 1) without a release build.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::control::{
    ControlClient, ControlError, ControlHandler, ControlServer, Identity, Peer, kinds,
};
use agentprism::discovery::RunControlKey;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod support;

const WARM_UP: usize = 100;
const SAMPLES: usize = 1_000;
const SERVER_ID: &str = "b0b0b0b0-0000-4000-8000-000000000001";

struct Identify;

#[async_trait::async_trait]
impl ControlHandler for Identify {
    async fn handle(
        &self,
        _kind: &str,
        _from: &Peer,
        _op: &str,
        _body: Value,
    ) -> Result<Value, ControlError> {
        Ok(json!({"instanceId": SERVER_ID, "state": "current"}))
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let temp = tempfile::tempdir().expect("temp dir");
    let key = RunControlKey::from_bytes([7; 32]);
    let identity = |instance_id: &str| Identity {
        instance_id: instance_id.into(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let server = ControlServer::bind_at(
        &temp.path().join("ctl.sock"),
        identity(SERVER_ID),
        key.clone(),
    )
    .expect("bind");
    let path = server.path().to_path_buf();
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(server.serve(Arc::new(Identify), shutdown.clone()));
    let client = ControlClient::new(key, identity("c1c1c1c1-0000-4000-8000-000000000002"));
    let body = json!({});

    let mut samples = Vec::with_capacity(SAMPLES);
    for index in 0..WARM_UP + SAMPLES {
        let op = format!("op-{index}");
        let started = Instant::now();
        client
            .call(&path, SERVER_ID, kinds::IDENTIFY, &op, &body)
            .await
            .expect("identify");
        if index >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    shutdown.cancel();
    served.await.expect("server task");

    samples.sort();
    let at = |quantile: f64| {
        samples[((samples.len() as f64 * quantile) as usize).min(samples.len() - 1)]
    };
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "optimised"
    };
    println!(
        "control round trip ({profile} build, {SAMPLES} calls): p50 {:.0} µs, p90 {:.0} µs, \
         p99 {:.0} µs (goal: p50 under 1000 µs)",
        micros(at(0.50)),
        micros(at(0.90)),
        micros(at(0.99)),
    );
    support::figure(
        "control",
        "signed control round trip (`identify`, new connection each): p50 / p90 / p99",
        format!(
            "{:.0} / {:.0} / {:.0} µs",
            micros(at(0.50)),
            micros(at(0.90)),
            micros(at(0.99))
        ),
        "p50 < 1 ms",
    );
}
