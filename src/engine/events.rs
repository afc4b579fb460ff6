//! A run's event stream as the driver writes it: dense sequence numbers, projection
//! (redaction and caps) at append time, buffering so events ride along with the next durable
//! call write, and a broadcast to live subscribers (the CLI's progress display, MCP
//! resource notifications).

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::engine::preview;
use crate::model::{EventRecord, RunId};

/// Largest serialized event record; bigger ones are cut down to their type and a note.
pub const MAX_EVENT_BYTES: usize = 65_536;

/// Whether `value`'s compact JSON is longer than `max` bytes, counted without building it
/// (and no further than `max` + 1 bytes).
fn longer_than(value: &Value, max: usize) -> bool {
    struct Counter {
        count: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.count += data.len();
            if self.count > self.max {
                return Err(std::io::Error::other("longer than the limit"));
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // A `Value` always serializes, so the only error is the counter's.
    serde_json::to_writer(&mut Counter { count: 0, max }, value).is_err()
}

/// What live subscribers receive.
#[derive(Clone, Debug)]
pub enum RunNotice {
    /// An event was appended to the run's stream.
    Event { run_id: RunId, record: EventRecord },
    /// A permission request waits for an answer (see `PermissionBroker`).
    Permission {
        run_id: RunId,
        permission_id: String,
        request: Value,
    },
    /// The run settled (paused or terminal) and its record is written.
    Settled { run_id: RunId, status: String },
}

/// The driver's event writer for one generation.
pub struct EventLog {
    run_id: RunId,
    next_seq: u64,
    pending: Vec<EventRecord>,
    notices: Option<broadcast::Sender<RunNotice>>,
}

impl EventLog {
    /// Continues a stream whose last written seq is `last_seq`.
    pub fn new(
        run_id: RunId,
        last_seq: u64,
        notices: Option<broadcast::Sender<RunNotice>>,
    ) -> EventLog {
        EventLog {
            run_id,
            next_seq: last_seq + 1,
            pending: Vec::new(),
            notices,
        }
    }

    /// Appends `{type, runId, scope, ...fields}` to the buffer.
    pub fn push(&mut self, kind: &str, scope: &str, fields: Value) {
        let mut event = json!({"type": kind, "runId": self.run_id.as_str(), "scope": scope});
        if let (Some(target), Value::Object(extra)) = (event.as_object_mut(), fields) {
            for (key, value) in extra {
                target.insert(key, value);
            }
        }
        let (mut projected, redacted, mut truncated) = preview::project_event(&event);
        if longer_than(&projected, MAX_EVENT_BYTES) {
            projected = json!({"type": kind, "runId": self.run_id.as_str(), "scope": scope, "omitted": "event too large"});
            truncated = true;
        }
        let record = EventRecord {
            seq: self.next_seq,
            timestamp: crate::util::now_ms(),
            event: projected,
            redacted,
            truncated,
        };
        self.next_seq += 1;
        // Without a subscriber the send would fail: the record is not cloned for nothing.
        if let Some(notices) = self.notices.as_ref().filter(|n| n.receiver_count() > 0) {
            let _ = notices.send(RunNotice::Event {
                run_id: self.run_id.clone(),
                record: record.clone(),
            });
        }
        self.pending.push(record);
    }

    /// Takes the buffered events for a write.
    pub fn take(&mut self) -> Vec<EventRecord> {
        std::mem::take(&mut self.pending)
    }

    /// Puts events back after a failed write, ahead of newer ones.
    pub fn restore(&mut self, mut events: Vec<EventRecord>) {
        events.append(&mut self.pending);
        self.pending = events;
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_limit_counts_compact_json_bytes() {
        // `"xxxxxxxxxx"`: 12 bytes.
        let value = json!("x".repeat(10));
        assert!(!longer_than(&value, 12));
        assert!(longer_than(&value, 11));
        let object = json!({"a": [1, 2]});
        assert!(!longer_than(&object, object.to_string().len()));
        assert!(longer_than(&object, object.to_string().len() - 1));
    }
}
