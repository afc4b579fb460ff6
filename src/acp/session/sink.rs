//! A session's inbound side: the engine's observer gets its updates and permission
//! requests, and the current turn's answer text is collected here, up to
//! [`MAX_ANSWER_BYTES`].

use super::*;

/// Routes a session's updates and permission requests to the engine's observer, and collects
/// the message text of the current turn.
pub(crate) struct SessionSink {
    observer: Arc<dyn AgentObserver>,
    run_id: String,
    call_index: u32,
    label: String,
    /// Off while `session/load` replays history, which must not reach the run's events.
    forward: AtomicBool,
    turn: Mutex<TurnState>,
    /// The last structured answer the agent's own channel reported (Claude's `result`).
    pub(super) native_output: Mutex<Option<Value>>,
    /// The call's working tree, then the backend's configured `fileRoots`.
    file_roots: Vec<PathBuf>,
}

struct TurnState {
    collecting: bool,
    text: String,
    /// Cancelled once we sent `session/cancel`: pending permissions are answered `cancelled`.
    cancelled: CancellationToken,
    /// Cancelled when the answer grew past [`MAX_ANSWER_BYTES`]: the turn is ended, and no
    /// more of it is kept or passed on.
    too_long: CancellationToken,
}

/// How a turn whose answer passed [`MAX_ANSWER_BYTES`] ended, after "the turn".
pub(super) fn answer_too_long() -> String {
    format!(
        "was cancelled: its answer grew past {} MiB, the most agentprism keeps of one answer",
        MAX_ANSWER_BYTES >> 20
    )
}

/// The most text of one answer a call keeps: past it the turn is cancelled and the call fails
/// naming the limit, so an agent cannot make the daemon hold an answer without end.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 << 20;

impl SessionSink {
    pub(super) fn new(
        observer: Arc<dyn AgentObserver>,
        spec: &SessionSpec,
        extra_roots: &[PathBuf],
    ) -> SessionSink {
        let mut file_roots = vec![spec.cwd.clone()];
        file_roots.extend(extra_roots.iter().cloned());
        SessionSink {
            file_roots,
            observer,
            run_id: spec.run_id.clone(),
            call_index: spec.call_index,
            label: spec.label.clone(),
            forward: AtomicBool::new(false),
            turn: Mutex::new(TurnState {
                collecting: false,
                text: String::new(),
                cancelled: CancellationToken::new(),
                too_long: CancellationToken::new(),
            }),
            native_output: Mutex::new(None),
        }
    }

    fn turn(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.turn.locked()
    }

    /// Starts collecting a turn's answer: its cancel token, and the one cancelled when the
    /// answer grows past [`MAX_ANSWER_BYTES`].
    pub(super) fn begin_turn(&self) -> (CancellationToken, CancellationToken) {
        let mut turn = self.turn();
        turn.collecting = true;
        turn.text.clear();
        turn.cancelled = CancellationToken::new();
        turn.too_long = CancellationToken::new();
        (turn.cancelled.clone(), turn.too_long.clone())
    }

    pub(super) fn end_turn(&self) -> String {
        let mut turn = self.turn();
        turn.collecting = false;
        std::mem::take(&mut turn.text)
    }

    pub(super) fn start_forwarding(&self) {
        self.forward.store(true, Ordering::Relaxed);
    }
}

#[async_trait]
impl SessionHandler for SessionSink {
    fn update(&self, update: AgentUpdate) {
        if !self.forward.load(Ordering::Relaxed) {
            return;
        }
        if let AgentUpdate::MessageChunk(text) = &update {
            let mut turn = self.turn();
            if turn.too_long.is_cancelled() {
                return;
            }
            if turn.collecting {
                if turn.text.len() + text.len() > MAX_ANSWER_BYTES {
                    turn.too_long.cancel();
                    return;
                }
                turn.text.push_str(text);
            }
        }
        self.observer.update(update);
    }

    fn extension(&self, method: &str, params: &Value) {
        if let Some(value) = claude::structured_output(method, params) {
            *self.native_output.locked() = Some(value);
        }
    }

    fn file_roots(&self) -> Vec<PathBuf> {
        self.file_roots.clone()
    }

    async fn request_permission(&self, params: Value) -> Value {
        let cancelled = self.turn().cancelled.clone();
        // After our session/cancel, ACP requires `cancelled` for every permission request.
        if cancelled.is_cancelled() {
            return json!({"outcome": {"outcome": "cancelled"}});
        }
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .map(|options| {
                options
                    .iter()
                    .filter_map(|option| {
                        Some(PermissionOption {
                            option_id: option.get("optionId")?.as_str()?.to_owned(),
                            name: option
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            kind: option
                                .get("kind")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let request = PermissionRequest {
            run_id: self.run_id.clone(),
            call_index: self.call_index,
            label: self.label.clone(),
            tool_call: params.get("toolCall").cloned().unwrap_or(Value::Null),
            options,
        };
        let outcome = tokio::select! {
            _ = cancelled.cancelled() => PermissionOutcome::Cancelled,
            outcome = self.observer.request_permission(request) => outcome,
        };
        json!({ "outcome": outcome })
    }
}
