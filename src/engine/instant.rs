//! In-process agent runners without processes or tokens: one that answers every prompt at
//! once, and one whose turns wait until cancelled ([`HeldRunner`]). For embedding hosts'
//! tests, the engine's own tests and the overhead benchmark; a test that needs to see what
//! was sent keeps every turn's content blocks ([`InstantRunner::recording`]).
//!
//! A prompt gets `ECHO: <prompt text>`; a prompt asking for JSON (it carries the schema
//! instructions) gets the schema's fabricated mock value, so structured calls validate.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use tokio::sync::mpsc;

use crate::engine::effort;
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, BackendSpec, FailureKind, ProbeReport,
    SessionSpec, StopReason, TurnOutput, TurnRequest,
};
use crate::model::Usage;
use crate::util::sync::Lock;

/// Answers instantly; counts the prompts and probes it served.
#[derive(Default)]
pub struct InstantRunner {
    prompts: Arc<AtomicU64>,
    probes: AtomicU64,
    /// Every turn's prompt blocks, kept only by a runner made with
    /// [`InstantRunner::recording`], so the plain runner's turn costs nothing more.
    turns: Option<Arc<Mutex<Vec<Vec<Value>>>>>,
}

impl InstantRunner {
    pub fn new() -> Arc<InstantRunner> {
        Arc::new(InstantRunner::default())
    }

    /// A runner that also keeps what it was sent ([`InstantRunner::turns`]).
    #[cfg(test)]
    pub(crate) fn recording() -> Arc<InstantRunner> {
        Arc::new(InstantRunner {
            turns: Some(Arc::default()),
            ..InstantRunner::default()
        })
    }

    /// How many prompt turns it answered.
    pub fn prompts(&self) -> u64 {
        self.prompts.load(Ordering::Relaxed)
    }

    /// How many probes it answered.
    pub fn probes(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// The prompt blocks of every turn it answered, in the order they came; empty unless
    /// made with [`InstantRunner::recording`].
    pub fn turns(&self) -> Vec<Vec<Value>> {
        self.turns
            .as_ref()
            .map(|turns| turns.locked().clone())
            .unwrap_or_default()
    }
}

struct InstantSession {
    prompts: Arc<AtomicU64>,
    turns: Option<Arc<Mutex<Vec<Vec<Value>>>>>,
}

#[async_trait]
impl AgentRunner for InstantRunner {
    async fn open_session(
        &self,
        spec: SessionSpec,
        _observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        // It advertises no config options, so it has no reasoning level to set.
        if let Some(effort) = spec.effort
            && let Err(message) = effort::setting(&[], effort, &spec.backend.id)
        {
            return Err(AgentFailure::new(FailureKind::Unsupported, message));
        }
        Ok(Box::new(InstantSession {
            prompts: self.prompts.clone(),
            turns: self.turns.clone(),
        }))
    }

    async fn probe(&self, backend: &BackendSpec, model: Option<&str>, _cwd: &Path) -> ProbeReport {
        self.probes.fetch_add(1, Ordering::Relaxed);
        started_probe(backend, model)
    }

    async fn shutdown(&self, _deadline: Duration) {}
}

#[async_trait]
impl AgentSession for InstantSession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        _cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        self.prompts.fetch_add(1, Ordering::Relaxed);
        if let Some(turns) = &self.turns {
            turns.locked().push(turn.prompt.clone());
        }
        let text = turn
            .prompt
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let reply = match schema_in(&text) {
            Some(schema) => format!(
                "```json\n{}\n```",
                crate::engine::schema::fabricate(&schema)
            ),
            None => format!("ECHO: {text}"),
        };
        let tokens = (reply.len() as u64).div_ceil(4).max(1);
        Ok(TurnOutput {
            text: reply,
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: tokens,
                output_tokens: tokens,
                total_tokens: tokens * 2,
                cost_usd: None,
            },
        })
    }

    fn session_ref(&self) -> Option<Value> {
        Some(json!({"backendId": "instant", "sessionId": "instant"}))
    }

    async fn close(self: Box<Self>) {}
}

/// The probe report of a runner that needs no process: started, probed, on the asked model.
pub(crate) fn started_probe(backend: &BackendSpec, model: Option<&str>) -> ProbeReport {
    ProbeReport {
        backend: backend.id.clone(),
        started: true,
        probed: true,
        current_model: model.map(str::to_owned),
        ..ProbeReport::default()
    }
}

/// A runner whose turns end only when cancelled, so runs stay live inside an agent call
/// (tests of stops and heartbeats, the folder server's live-status benchmark). Each turn
/// sends `()` on the `started` channel when it begins and on `cancelled` when it ends.
pub struct HeldRunner {
    started: mpsc::UnboundedSender<()>,
    cancelled: mpsc::UnboundedSender<()>,
}

struct HeldSession {
    started: mpsc::UnboundedSender<()>,
    cancelled: mpsc::UnboundedSender<()>,
}

impl HeldRunner {
    /// The runner and its two signals: turns started, turns cancelled.
    pub fn new() -> (
        Arc<HeldRunner>,
        mpsc::UnboundedReceiver<()>,
        mpsc::UnboundedReceiver<()>,
    ) {
        let (started, started_rx) = mpsc::unbounded_channel();
        let (cancelled, cancelled_rx) = mpsc::unbounded_channel();
        (
            Arc::new(HeldRunner { started, cancelled }),
            started_rx,
            cancelled_rx,
        )
    }
}

#[async_trait]
impl AgentRunner for HeldRunner {
    async fn open_session(
        &self,
        _spec: SessionSpec,
        _observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        Ok(Box::new(HeldSession {
            started: self.started.clone(),
            cancelled: self.cancelled.clone(),
        }))
    }

    async fn probe(&self, backend: &BackendSpec, model: Option<&str>, _cwd: &Path) -> ProbeReport {
        started_probe(backend, model)
    }

    async fn shutdown(&self, _deadline: Duration) {}
}

#[async_trait]
impl AgentSession for HeldSession {
    async fn prompt(
        &mut self,
        _turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        let _ = self.started.send(());
        cancel.cancelled().await;
        let _ = self.cancelled.send(());
        Err(AgentFailure::new(FailureKind::Cancelled, "cancelled"))
    }

    fn session_ref(&self) -> Option<Value> {
        None
    }

    async fn close(self: Box<Self>) {}
}

/// The schema inside the structured-output instructions, if the prompt has them.
fn schema_in(text: &str) -> Option<Value> {
    let start = text.find("```json\n")? + 8;
    let end = start + text[start..].find("\n```")?;
    serde_json::from_str(&text[start..end]).ok()
}
