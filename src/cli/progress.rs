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
            "agentRetry" => retry_line(event),
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
            if matches!(kind, "log" | "agentRetry")
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

/// `label: retry 2/3: CODE: message (waiting 4.0s)` for an `agentRetry` event: the attempt
/// about to start, of how many the call may make.
fn retry_line(event: &Value) -> Option<String> {
    let number = |key: &str| event.get(key).and_then(Value::as_u64);
    let text = |key: &str| event.get(key).and_then(Value::as_str);
    let next = number("attempt")? + 1;
    let of = number("of")?;
    let mut line = format!(
        "{}: retry {next}/{of}: {}",
        text("label").unwrap_or("agent"),
        text("errorCode").unwrap_or("error")
    );
    if let Some(message) = text("errorMessage") {
        line.push_str(&format!(": {message}"));
    }
    if let Some(wait) = number("waitMs").filter(|ms| *ms > 0) {
        line.push_str(&format!(" (waiting {:.1}s)", wait as f64 / 1000.0));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::retry_line;

    #[test]
    fn a_retry_names_the_next_attempt_its_error_and_the_wait() {
        let event = json!({"type": "agentRetry", "label": "review", "callIndex": 0,
            "attempt": 1, "of": 3, "errorCode": "AGENT_EXECUTION_ERROR",
            "errorMessage": "boom", "waitMs": 2500});
        assert_eq!(
            retry_line(&event).as_deref(),
            Some("review: retry 2/3: AGENT_EXECUTION_ERROR: boom (waiting 2.5s)")
        );
        let quick = json!({"label": "x", "attempt": 2, "of": 3, "errorCode": "AGENT_TIMEOUT",
            "waitMs": 0});
        assert_eq!(
            retry_line(&quick).as_deref(),
            Some("x: retry 3/3: AGENT_TIMEOUT")
        );
    }
}
