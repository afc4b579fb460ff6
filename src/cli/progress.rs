//! The live progress display of a foreground run: one redrawn status line on a terminal,
//! plain lines otherwise, fed by the run's events.

use std::io::Write;

use serde_json::Value;

/// The live progress display: a redrawn line on a terminal, plain lines otherwise.
pub(super) struct Progress {
    interactive: bool,
    phase: Option<String>,
    running: u64,
    done: u64,
    failed: u64,
    tokens: u64,
    drawn: bool,
}

impl Progress {
    pub(super) fn new(interactive: bool) -> Progress {
        Progress {
            interactive,
            phase: None,
            running: 0,
            done: 0,
            failed: 0,
            tokens: 0,
            drawn: false,
        }
    }

    pub(super) fn event(&mut self, event: &Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let line = match kind {
            "log" => event
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            "phase" => {
                self.phase = event
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.phase.as_ref().map(|p| format!("phase: {p}"))
            }
            "agentStart" => {
                self.running += 1;
                let replay = event.get("replay") == Some(&Value::Bool(true));
                Some(format!(
                    "{} {}",
                    if replay { "replayed" } else { "started" },
                    event
                        .get("label")
                        .and_then(Value::as_str)
                        .unwrap_or("agent")
                ))
            }
            "agentEnd" => {
                self.running = self.running.saturating_sub(1);
                if let Some(code) = event.get("errorCode").and_then(Value::as_str) {
                    self.failed += 1;
                    Some(format!(
                        "{} failed: {code}{}",
                        event
                            .get("label")
                            .and_then(Value::as_str)
                            .unwrap_or("agent"),
                        event
                            .get("errorMessage")
                            .and_then(Value::as_str)
                            .map(|message| format!(": {message}"))
                            .unwrap_or_default()
                    ))
                } else {
                    self.done += 1;
                    Some(format!(
                        "finished {}",
                        event
                            .get("label")
                            .and_then(Value::as_str)
                            .unwrap_or("agent")
                    ))
                }
            }
            "tokenUsage" => {
                self.tokens = event
                    .pointer("/usage/totalTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.tokens);
                None
            }
            "error" => event
                .pointer("/errorRecord/message")
                .and_then(Value::as_str)
                .map(|m| format!("error: {m}")),
            _ => None,
        };
        if self.interactive {
            if kind == "log"
                && let Some(line) = line
            {
                self.clear();
                note!("{line}");
            }
            self.draw();
        } else if let Some(line) = line {
            note!("{line}");
        }
    }

    fn draw(&mut self) {
        let phase = self.phase.as_deref().unwrap_or("-");
        note_partial!(
            "\r\x1b[2K[{phase}] running {} · done {} · failed {} · {} tokens",
            self.running,
            self.done,
            self.failed,
            self.tokens
        );
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    pub(super) fn clear(&mut self) {
        if self.interactive && self.drawn {
            note_partial!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
            self.drawn = false;
        }
    }
}
