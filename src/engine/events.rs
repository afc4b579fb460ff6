//! A run's event stream as the driver writes it: dense sequence numbers, projection
//! (redaction and caps) at append time, buffering so events ride along with the next durable
//! call write, and a broadcast to live subscribers (the CLI's progress display, MCP
//! resource notifications).
//!
//! The driver's per-call events (`agentStart`, `agentProgress`, `agentEnd`, `tokenUsage`,
//! `callRecord`, ...) are built as [`Fields`]: their keys are fixed, their numbers and
//! enum-like strings are stored as they are, and only their free texts (labels, previews,
//! messages, error texts) are redacted and capped, which gives the same record as projecting
//! the whole event ([`EventLog::push`]) without walking what redaction cannot change. Each
//! event is written once, as the JSON text the store keeps and readers are served
//! ([`EventJson`]). The dry run's log ([`EventLog::discarding`]) numbers events and builds
//! none.

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::engine::preview;
use crate::model::{EventJson, EventRecord, RunId};

/// Largest serialized event record; bigger ones are cut down to their type and a note.
pub(crate) const MAX_EVENT_BYTES: usize = 65_536;

/// What live subscribers receive. A receiver clones each notice it takes, so an event's
/// record is shared rather than copied.
#[derive(Clone, Debug)]
pub enum RunNotice {
    /// An event was appended to the run's stream, with its record: on the records
    /// broadcast only ([`Notices::subscribe_records`]).
    Event {
        run_id: RunId,
        record: std::sync::Arc<EventRecord>,
    },
    /// Events were appended to the run's stream since its last such notice: at most one
    /// per step of the run's driver and one per write of its events, on the broadcast of
    /// every notice ([`Notices::subscribe`]).
    Activity { run_id: RunId },
    /// A permission request waits for an answer (see `PermissionBroker`).
    Permission {
        run_id: RunId,
        permission_id: String,
        request: Value,
    },
    /// The run settled (paused or terminal) and its record is written.
    Settled {
        run_id: RunId,
        status: String,
        /// Whether the record this process wrote holds a result (a completed script's
        /// return value), which makes the result listable.
        result: bool,
    },
}

impl RunNotice {
    /// The run the notice is about.
    pub fn run_id(&self) -> &RunId {
        match self {
            RunNotice::Event { run_id, .. }
            | RunNotice::Activity { run_id }
            | RunNotice::Permission { run_id, .. }
            | RunNotice::Settled { run_id, .. } => run_id,
        }
    }
}

/// The engine's three broadcasts of [`RunNotice`]s. Each carries the lifecycle (permission
/// requests and settlements); besides it, `all` carries the runs' coalesced activity and
/// `records` every event with its record. A subscriber that has no use for events takes
/// `lifecycle` and is not woken for them; one that watches for changes takes `all` and is
/// woken once per step, not once per event; only one that shows the events themselves
/// takes `records`, and while nobody does, no event record is copied for it.
#[derive(Clone, Debug)]
pub struct Notices {
    all: broadcast::Sender<RunNotice>,
    lifecycle: broadcast::Sender<RunNotice>,
    records: broadcast::Sender<RunNotice>,
}

impl Notices {
    /// The broadcasts, each keeping at most `capacity` notices for a slow receiver.
    pub fn new(capacity: usize) -> Notices {
        Notices {
            all: broadcast::channel(capacity).0,
            lifecycle: broadcast::channel(capacity).0,
            records: broadcast::channel(capacity).0,
        }
    }

    /// The lifecycle and the runs' activity.
    pub fn subscribe(&self) -> broadcast::Receiver<RunNotice> {
        self.all.subscribe()
    }

    /// Permission requests and settlements only.
    pub fn subscribe_lifecycle(&self) -> broadcast::Receiver<RunNotice> {
        self.lifecycle.subscribe()
    }

    /// The lifecycle and every event with its record.
    pub fn subscribe_records(&self) -> broadcast::Receiver<RunNotice> {
        self.records.subscribe()
    }

    /// Sends a permission request or a settlement to every broadcast.
    pub fn lifecycle(&self, notice: RunNotice) {
        if self.records.receiver_count() > 0 {
            let _ = self.records.send(notice.clone());
        }
        let _ = self.lifecycle.send(notice.clone());
        let _ = self.all.send(notice);
    }

    /// Sends an event's record, built only when someone listens.
    fn event(&self, run_id: &RunId, record: impl FnOnce() -> EventRecord) {
        if self.records.receiver_count() > 0 {
            let _ = self.records.send(RunNotice::Event {
                run_id: run_id.clone(),
                record: std::sync::Arc::new(record()),
            });
        }
    }

    /// Says that a run's stream has new events.
    fn activity(&self, run_id: &RunId) {
        if self.all.receiver_count() > 0 {
            let _ = self.all.send(RunNotice::Activity {
                run_id: run_id.clone(),
            });
        }
    }
}

/// An event's payload built member by member, each projected as [`preview::project_event`]
/// would project it inside the whole event (a member's projection does not depend on its
/// siblings, and no fixed key is one that redaction changes or that names a secret), and
/// written at once as the JSON the whole event's projection would serialize to: the members
/// in insertion order, each `,"key":value`.
pub struct Fields {
    /// The projected members as JSON text, each behind a comma.
    text: Vec<u8>,
    /// Some member's text or value had a credential replaced.
    redacted: bool,
    /// Some member was capped or cut.
    truncated: bool,
    /// The keys so far, to refuse a second member of one key (a map would have replaced it).
    #[cfg(debug_assertions)]
    keys: Vec<&'static str>,
}

/// The members every event begins with, in their stored order; [`EventLog::push_fields`]
/// writes them before the fields.
const ENVELOPE: [&str; 3] = ["type", "runId", "scope"];

impl Fields {
    pub fn new() -> Fields {
        Fields {
            text: Vec::with_capacity(160),
            redacted: false,
            truncated: false,
            #[cfg(debug_assertions)]
            keys: Vec::new(),
        }
    }

    /// Writes `,"key":`.
    fn key(&mut self, key: &'static str) {
        debug_assert!(fixed_key(key), "{key}");
        #[cfg(debug_assertions)]
        {
            assert!(!self.keys.contains(&key), "{key} twice");
            self.keys.push(key);
        }
        self.text.extend_from_slice(b",\"");
        self.text.extend_from_slice(key.as_bytes());
        self.text.extend_from_slice(b"\":");
    }

    /// Writes `value` as compact JSON.
    fn write(&mut self, value: &(impl serde::Serialize + ?Sized)) {
        // Writing to a vector fails only for a value that is not JSON (a map with non-string
        // keys), which no member is.
        let written = serde_json::to_writer(&mut self.text, value);
        debug_assert!(written.is_ok(), "{written:?}");
    }

    /// A free text (label, message, error text, model name, path): redacted and capped.
    pub fn text(mut self, key: &'static str, text: &str) -> Fields {
        let value = preview::project_event_text(text, &mut self.redacted, &mut self.truncated);
        self.key(key);
        self.write(&value);
        self
    }

    /// A free text or `null`.
    pub(crate) fn opt_text(self, key: &'static str, text: Option<&str>) -> Fields {
        match text {
            Some(text) => self.text(key, text),
            None => self.fixed(key, Value::Null),
        }
    }

    /// A number, boolean, `null`, an engine-made enum-like string or a struct of those
    /// (usage): stored as it is, which is what the projection would leave of it.
    pub fn fixed(self, key: &'static str, value: Value) -> Fields {
        self.fixed_ref(key, &value)
    }

    /// [`Fields::fixed`] for a value serialized in place, without building it as a value.
    pub(crate) fn fixed_ref(mut self, key: &'static str, value: &impl serde::Serialize) -> Fields {
        #[cfg(debug_assertions)]
        {
            let value = serde_json::to_value(value).expect("a JSON value");
            assert_eq!(
                preview::project_event(&value),
                (value.clone(), false, false),
                "{key} is not fixed"
            );
        }
        self.key(key);
        self.write(value);
        self
    }

    /// Any other value (a result preview): walked as the projection walks it.
    pub fn value(mut self, key: &'static str, value: &Value) -> Fields {
        let value = preview::project_event_member(value, &mut self.redacted, &mut self.truncated);
        self.key(key);
        self.write(&value);
        self
    }
}

impl Default for Fields {
    fn default() -> Fields {
        Fields::new()
    }
}

/// Whether the projection leaves `key` and its member alone: not changed by redaction, not
/// a secret's name, within the cap, and written as it is between quotes.
fn fixed_key(key: &str) -> bool {
    !ENVELOPE.contains(&key)
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        && crate::engine::redact::redact_text(key) == (key.to_owned(), false)
        && !crate::engine::redact::is_secret_key(key)
        && key.len() <= preview::TEXT_CAP
}

/// The driver's event writer for one generation.
pub(crate) struct EventLog {
    run_id: RunId,
    /// The run id as the projection stores it in each event's `runId`, as JSON text (and
    /// whether that redacted or capped something): the same for every event of the log, so
    /// projected once.
    run_id_projected: (String, bool, bool),
    next_seq: u64,
    pending: Vec<EventRecord>,
    notices: Option<Notices>,
    /// Events were appended since the last [`RunNotice::Activity`].
    unannounced: bool,
    /// The dry run's log: it writes nothing and has no subscriber, so events are numbered
    /// (for the seqs the driver reads back) and not built.
    discard: bool,
}

impl EventLog {
    /// Continues a stream whose last written seq is `last_seq`.
    pub(crate) fn new(run_id: RunId, last_seq: u64, notices: Option<Notices>) -> EventLog {
        let (mut redacted, mut truncated) = (false, false);
        let projected = preview::project_event_text(run_id.as_str(), &mut redacted, &mut truncated);
        EventLog {
            run_id,
            run_id_projected: (projected.to_string(), redacted, truncated),
            next_seq: last_seq + 1,
            pending: Vec::new(),
            notices,
            unannounced: false,
            discard: false,
        }
    }

    /// A log whose events are numbered and dropped, for a generation that writes nothing
    /// and that nobody watches (the dry run).
    pub(crate) fn discarding(run_id: RunId, last_seq: u64) -> EventLog {
        EventLog {
            discard: true,
            ..EventLog::new(run_id, last_seq, None)
        }
    }

    /// Whether pushed events are dropped: callers may skip building them.
    pub(crate) fn discards(&self) -> bool {
        self.discard
    }

    /// Numbers `count` events of a discarding log without building them.
    pub(crate) fn skip(&mut self, count: u64) {
        debug_assert!(self.discard, "only a discarding log drops events");
        self.next_seq += count;
    }

    /// Appends `{type, runId, scope, ...fields}`, projected member by member (see [`Fields`]).
    pub(crate) fn push_fields(&mut self, kind: &'static str, scope: &str, fields: Fields) {
        if self.discard {
            self.next_seq += 1;
            return;
        }
        let Fields {
            text: members,
            mut redacted,
            mut truncated,
            ..
        } = fields;
        let (run_id, run_id_redacted, run_id_truncated) = &self.run_id_projected;
        redacted |= run_id_redacted;
        truncated |= run_id_truncated;
        let scope_value = preview::project_event_text(scope, &mut redacted, &mut truncated);
        let mut text = Vec::with_capacity(members.len() + run_id.len() + 64);
        text.extend_from_slice(b"{\"type\":");
        // A kind and a projected text serialize whatever they hold.
        let _ = serde_json::to_writer(&mut text, kind);
        text.extend_from_slice(b",\"runId\":");
        text.extend_from_slice(run_id.as_bytes());
        text.extend_from_slice(b",\"scope\":");
        let _ = serde_json::to_writer(&mut text, &scope_value);
        text.extend_from_slice(&members);
        text.push(b'}');
        // serde_json wrote every byte but the punctuation, so this is UTF-8.
        let text = String::from_utf8(text).unwrap_or_default();
        self.append(kind, scope, text, redacted, truncated);
    }

    /// Appends `{type, runId, scope, ...fields}` to the buffer.
    pub(crate) fn push(&mut self, kind: &str, scope: &str, fields: Value) {
        if self.discard {
            self.next_seq += 1;
            return;
        }
        let mut event = json!({"type": kind, "runId": self.run_id.as_str(), "scope": scope});
        if let (Some(target), Value::Object(extra)) = (event.as_object_mut(), fields) {
            for (key, value) in extra {
                target.insert(key, value);
            }
        }
        let (projected, redacted, truncated) = preview::project_event(&event);
        self.append(kind, scope, projected.to_string(), redacted, truncated);
    }

    /// Numbers, size-checks, broadcasts and buffers a projected event's JSON `text`.
    fn append(
        &mut self,
        kind: &str,
        scope: &str,
        mut text: String,
        redacted: bool,
        mut truncated: bool,
    ) {
        if text.len() > MAX_EVENT_BYTES {
            text = json!({"type": kind, "runId": self.run_id.as_str(), "scope": scope, "omitted": "event too large"}).to_string();
            truncated = true;
        }
        let record = EventRecord {
            seq: self.next_seq,
            timestamp: crate::util::now_ms(),
            event: EventJson::from_written(text),
            redacted,
            truncated,
        };
        self.next_seq += 1;
        // Without a subscriber the record is not cloned for nothing.
        if let Some(notices) = &self.notices {
            notices.event(&self.run_id, || record.clone());
        }
        self.unannounced = true;
        self.pending.push(record);
    }

    /// Sends one [`RunNotice::Activity`] for the events appended since the last one: the
    /// driver calls it at the end of each step, and [`EventLog::take`] before a write.
    pub(crate) fn announce(&mut self) {
        if std::mem::take(&mut self.unannounced)
            && let Some(notices) = &self.notices
        {
            notices.activity(&self.run_id);
        }
    }

    /// Takes the buffered events for a write, announcing them first.
    pub(crate) fn take(&mut self) -> Vec<EventRecord> {
        self.announce();
        std::mem::take(&mut self.pending)
    }

    /// Puts events back after a failed write, ahead of newer ones.
    pub(crate) fn restore(&mut self, mut events: Vec<EventRecord>) {
        events.append(&mut self.pending);
        self.pending = events;
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_broadcast_carries_its_share_of_a_run_s_events() {
        let notices = Notices::new(8);
        let mut all = notices.subscribe();
        let mut lifecycle = notices.subscribe_lifecycle();
        let mut records = notices.subscribe_records();
        let run_id = RunId::parse("notices-1").expect("valid id");
        let mut log = EventLog::new(run_id.clone(), 0, Some(notices.clone()));
        log.push("log", "root", json!({"message": "hello"}));
        log.push("log", "root", json!({"message": "again"}));
        log.announce();
        log.announce();
        log.push("log", "root", json!({"message": "third"}));
        let taken = log.take();
        assert_eq!(taken.len(), 3);
        notices.lifecycle(RunNotice::Settled {
            run_id,
            status: "completed".into(),
            result: true,
        });
        // Two events then one: one activity notice for each announcement that had events.
        for _ in 0..2 {
            assert!(matches!(all.try_recv(), Ok(RunNotice::Activity { .. })));
        }
        assert!(matches!(all.try_recv(), Ok(RunNotice::Settled { .. })));
        assert!(
            all.try_recv().is_err(),
            "no record on the activity broadcast"
        );
        for message in ["hello", "again", "third"] {
            match records.try_recv() {
                Ok(RunNotice::Event { record, .. }) => {
                    assert_eq!(record.event.value()["message"], message)
                }
                other => panic!("expected the event {message}, got {other:?}"),
            }
        }
        assert!(matches!(records.try_recv(), Ok(RunNotice::Settled { .. })));
        assert!(matches!(
            lifecycle.try_recv(),
            Ok(RunNotice::Settled { .. })
        ));
        assert!(
            lifecycle.try_recv().is_err(),
            "no event on the lifecycle broadcast"
        );
    }

    #[test]
    fn without_a_records_subscriber_no_record_is_sent() {
        let notices = Notices::new(8);
        let records = notices.subscribe_records();
        drop(records);
        let mut all = notices.subscribe();
        let mut log = EventLog::new(
            RunId::parse("notices-2").expect("valid id"),
            0,
            Some(notices.clone()),
        );
        log.push("log", "root", json!({"message": "hello"}));
        let mut late = notices.subscribe_records();
        log.announce();
        assert!(matches!(all.try_recv(), Ok(RunNotice::Activity { .. })));
        assert!(
            late.try_recv().is_err(),
            "the record was not kept for a late subscriber"
        );
    }

    /// The old construction (a `Value` map projected whole) and the typed one, for the same
    /// event: the stored records must be the same bytes with the same flags.
    fn same_record(kind: &'static str, scope: &str, old: Value, typed: Fields) {
        let run_id = RunId::parse("run-0123456789abcdefghijklmnopqrstuvwxyz").expect("valid id");
        let mut whole = EventLog::new(run_id.clone(), 0, None);
        let mut by_member = EventLog::new(run_id, 0, None);
        whole.push(kind, scope, old);
        by_member.push_fields(kind, scope, typed);
        let (a, b) = (&whole.take()[0], &by_member.take()[0]);
        assert_eq!(a.event.as_str(), b.event.as_str(), "{kind}");
        assert_eq!(
            (a.seq, a.redacted, a.truncated),
            (b.seq, b.redacted, b.truncated)
        );
    }

    const SECRET: &str = "sk-abcdefghijklmnopqrstuvwxyz0123456789";

    #[test]
    fn typed_events_store_the_bytes_of_the_whole_projection() {
        let label = format!("review {SECRET}");
        let long = "é".repeat(400);
        for (label, phase, path) in [
            (label.as_str(), Some("Build"), Some("main.js:3:7/0")),
            ("plain", None, None),
            (long.as_str(), Some(long.as_str()), Some("p")),
        ] {
            same_record(
                "agentStart",
                "root",
                json!({"label": label, "phase": phase, "model": "mock/fast", "backendId": "mock",
                       "callIndex": 7, "path": path}),
                Fields::new()
                    .text("label", label)
                    .opt_text("phase", phase)
                    .opt_text("model", Some("mock/fast"))
                    .opt_text("backendId", Some("mock"))
                    .fixed("callIndex", 7.into())
                    .opt_text("path", path),
            );
        }
        let usage = json!({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7});
        let shown = crate::engine::preview::preview(&json!({
            "text": format!("the key is {SECRET}"), "apiKey": "x", "items": (0..30).collect::<Vec<_>>()
        }));
        let result = json!({"preview": shown.preview, "redacted": shown.redacted, "truncated": shown.truncated});
        for result in [
            result,
            Value::Null,
            json!({"preview": SECRET, "redacted": false, "truncated": false}),
        ] {
            same_record(
                "agentEnd",
                "nested/1",
                json!({"callIndex": 1, "label": &label, "result": result, "usage": usage,
                       "errorCode": "AGENT_FAILED", "errorMessage": format!("token={SECRET}")}),
                Fields::new()
                    .fixed("callIndex", 1.into())
                    .text("label", &label)
                    .value("result", &result)
                    .fixed("usage", usage.clone())
                    .text("errorCode", "AGENT_FAILED")
                    .text("errorMessage", &format!("token={SECRET}")),
            );
        }
        for (latest, tool) in [
            (Some(format!("writing {SECRET}")), None),
            (None, Some("Bash")),
            (Some("é".repeat(600)), None),
        ] {
            let mut old = json!({"callIndex": 3, "executionStartSeq": 12, "turnCount": 1,
                "observedEvents": 4, "coalescedEvents": 2, "cause": "activity"});
            let mut typed = Fields::new()
                .fixed("callIndex", 3.into())
                .fixed("executionStartSeq", 12.into())
                .fixed("turnCount", 1.into())
                .fixed("observedEvents", 4.into())
                .fixed("coalescedEvents", 2.into())
                .fixed("cause", "activity".into());
            if let Some(latest) = &latest {
                old["latestText"] = json!(latest);
                typed = typed.text("latestText", latest);
            } else if let Some(tool) = tool {
                old["lastToolName"] = json!(tool);
                typed = typed.text("lastToolName", tool);
            }
            same_record("agentProgress", "root", old, typed);
        }
        let entry = json!({"role": "assistant", "kind": "text", "text": format!("see {SECRET}"),
                           "toolName": "Read"});
        same_record(
            "agentTranscript",
            "nested/2",
            json!({"callIndex": 3, "executionStartSeq": 12, "entryIndex": 0, "revision": 5,
                   "operation": "upsert", "entry": entry}),
            Fields::new()
                .fixed("callIndex", 3.into())
                .fixed("executionStartSeq", 12.into())
                .fixed("entryIndex", 0.into())
                .fixed("revision", 5.into())
                .fixed("operation", "upsert".into())
                .value("entry", &entry),
        );
        same_record(
            "tokenUsage",
            "root",
            json!({"usage": usage}),
            Fields::new().fixed("usage", usage.clone()),
        );
        same_record(
            "callRecord",
            "root",
            json!({"index": 2, "kind": "agent", "label": label, "outcome": "result",
                   "origin": "runner", "attempts": 1, "errorCode": null}),
            Fields::new()
                .fixed("index", 2.into())
                .fixed("kind", "agent".into())
                .opt_text("label", Some(&label))
                .fixed("outcome", "result".into())
                .fixed("origin", "runner".into())
                .fixed("attempts", 1.into())
                .opt_text("errorCode", None),
        );
    }

    #[test]
    fn a_discarding_log_numbers_events_and_keeps_none() {
        let mut log = EventLog::discarding(RunId::parse("dryrun-0").expect("valid id"), 4);
        log.push("log", "root", json!({"message": "x"}));
        log.push_fields("agentStart", "root", Fields::new());
        log.skip(3);
        assert_eq!(log.last_seq(), 9);
        assert!(!log.has_pending());
    }

    #[test]
    fn an_event_past_the_size_limit_is_cut_to_its_envelope() {
        let run_id = RunId::parse("run-0").expect("valid id");
        let mut log = EventLog::new(run_id.clone(), 0, None);
        let wide: serde_json::Map<String, Value> = (0..200)
            .map(|i| (format!("k{i}"), Value::String("x".repeat(500))))
            .collect();
        log.push("log", "root", Value::Object(wide));
        let controls = vec![Value::String("\u{1}".repeat(512)); 20];
        log.push("log", "root", json!({"message": controls}));
        // Exactly at the limit, and one byte past it, counted in compact JSON bytes: members
        // of 500 bytes, and one that pads the event to the length wanted.
        let at_limit = |log: &mut EventLog, extra: usize| {
            let length = |members: &serde_json::Map<String, Value>| {
                let mut whole = json!({"type": "log", "runId": "run-0", "scope": "root"});
                whole
                    .as_object_mut()
                    .expect("an object")
                    .extend(members.clone());
                whole.to_string().len()
            };
            let mut members = serde_json::Map::new();
            members.insert("pad".into(), Value::String(String::new()));
            while length(&members) + 600 < MAX_EVENT_BYTES {
                let key = format!("k{:03}", members.len());
                members.insert(key, Value::String("x".repeat(500)));
            }
            let pad = MAX_EVENT_BYTES - length(&members) + extra;
            members.insert("pad".into(), Value::String("x".repeat(pad)));
            log.push("log", "root", Value::Object(members));
        };
        at_limit(&mut log, 0);
        at_limit(&mut log, 1);
        let records = log.take();
        assert_eq!(records[0].event.value()["omitted"], "event too large");
        assert!(records[0].truncated);
        // 20 strings of 512 control bytes: 61 KiB of JSON, under the limit.
        assert!(records[1].event.value().get("omitted").is_none());
        assert_eq!(records[2].event.as_str().len(), MAX_EVENT_BYTES);
        assert!(!records[2].truncated);
        assert_eq!(
            records[3].event.as_str(),
            r#"{"type":"log","runId":"run-0","scope":"root","omitted":"event too large"}"#
        );
        assert!(records[3].truncated);
    }
}
