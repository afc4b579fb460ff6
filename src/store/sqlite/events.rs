//! The `events` table, each run's append-only event stream with `seq` dense from 1: the
//! checked append (inside the caller's transaction, so a call and its events commit
//! together), pages by cursor, and the log tail. A row's key is [`EventKeys`]' run range plus
//! its seq, so the table's rowid B-tree is the only one an event row writes, and its text is
//! stored without the `"type"` and `"runId"` members every event starts with ([`frame`]), put
//! back when read (docs/store.md has the figures). Two or more consecutive events of one
//! append that are not `log` lines are one row of `event_blocks` instead (`event_blocks.rs`);
//! reads merge the two tables in seq order.

use rusqlite::{Connection, Transaction};
use serde_json::Value;

use super::connection::{Context, write_transaction};
use super::event_blocks::{self, StoredEvent};
use super::rows::{RowReader, fenced_run_key, run_key, to_json, to_sql_integer};
use crate::model::{EventJson, EventRecord, RunId};
use crate::store::{Fence, StoreError, StoreResult};

/// How many event keys each run has: `event_key` = run_key * 2^32 + seq.
const SEQS_PER_RUN: i64 = 1 << 32;

/// The highest seq a run's stream may reach, and the highest run key whose range fits an
/// SQLite integer.
pub(super) const MAX_SEQ: u64 = u32::MAX as u64;
pub(super) const MAX_RUN_KEY: i64 = i64::MAX / SEQS_PER_RUN;

/// The first of the 2^32 keys a run has in a table keyed by run_key * 2^32 + a number of
/// the run (`events`, `event_blocks`, `calls`); `rows` names what the table holds.
pub(super) fn run_base(run_key: i64, run_id: &RunId, rows: &str) -> StoreResult<i64> {
    if !(0..=MAX_RUN_KEY).contains(&run_key) {
        return Err(StoreError::Io(format!(
            "run {run_id}: run key {run_key} is beyond the {MAX_RUN_KEY} runs whose {rows} the \
             store can key"
        )));
    }
    Ok(run_key * SEQS_PER_RUN)
}

/// The range of `event_key`s of one run: `base + seq` for seq 1 to [`MAX_SEQ`].
#[derive(Clone, Copy)]
struct EventKeys {
    base: i64,
}

impl EventKeys {
    fn of(run_key: i64, run_id: &RunId) -> StoreResult<EventKeys> {
        Ok(EventKeys {
            base: run_base(run_key, run_id, "events")?,
        })
    }

    /// The key of `seq`, which must be at most [`MAX_SEQ`].
    fn key(self, seq: u64, run_id: &RunId) -> StoreResult<i64> {
        if seq > MAX_SEQ {
            return Err(StoreError::Io(format!(
                "append events of run {run_id}: event seq {seq} is beyond the {MAX_SEQ} events \
                 a run may hold"
            )));
        }
        Ok(self.base + to_sql_integer(seq, "event seq")?)
    }

    /// The last key of the range.
    fn last(self) -> i64 {
        self.base + (SEQS_PER_RUN - 1)
    }

    fn seq(self, key: i64) -> u64 {
        // Every key read comes from this run's range, so the difference is in 0..2^32.
        u64::try_from(key - self.base).unwrap_or_default()
    }
}

/// The members every event starts with, as `serde_json` writes them (key order preserved):
/// `{"type":<type>,"runId":<run id>,`. The store leaves them out of the stored text (the type
/// is its own column, the run id the key's) and writes them back when it reads the row.
fn frame_prefix(event_type: &str, run_id: &RunId) -> StoreResult<String> {
    let run_id = run_id.as_str();
    let mut prefix = String::with_capacity(event_type.len() + run_id.len() + 20);
    prefix.push_str("{\"type\":");
    push_json_string(&mut prefix, event_type, "event type")?;
    prefix.push_str(",\"runId\":");
    push_json_string(&mut prefix, run_id, "run id")?;
    prefix.push(',');
    Ok(prefix)
}

/// Appends `text` as the JSON string `serde_json` writes for it: between quotes as it is
/// when none of its bytes needs an escape (a `"`, a `\` or a control character below
/// U+0020, the only ones `serde_json` escapes), else through `serde_json`. Event types and
/// run ids need none, and a prefix is made for each event type of every append.
fn push_json_string(out: &mut String, text: &str, what: &str) -> StoreResult<()> {
    if text
        .bytes()
        .all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
    {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&to_json(&text, what)?);
    }
    Ok(())
}

/// The text to store for an event's JSON `text` and whether it is framed: the text after
/// `prefix` ([`frame_prefix`]), behind a `{`, when the event starts with it and has members
/// after it; else whole.
fn frame(text: &str, prefix: &str) -> (String, bool) {
    match text.strip_prefix(prefix) {
        Some(rest) => {
            let mut framed = String::with_capacity(rest.len() + 1);
            framed.push('{');
            framed.push_str(rest);
            (framed, true)
        }
        None => (text.to_owned(), false),
    }
}

/// The frame prefixes of the event types of one append, each made once.
struct Prefixes<'r> {
    run_id: &'r RunId,
    made: Vec<(String, String)>,
}

impl Prefixes<'_> {
    fn of(&mut self, event_type: &str) -> StoreResult<&str> {
        let at = match self.made.iter().position(|(kind, _)| kind == event_type) {
            Some(at) => at,
            None => {
                let prefix = frame_prefix(event_type, self.run_id)?;
                self.made.push((event_type.to_owned(), prefix));
                self.made.len() - 1
            }
        };
        Ok(&self.made[at].1)
    }
}

/// The event JSON of a stored row: `stored` itself, or with the prefix put back when framed.
fn unframe(stored: String, framed: bool, event_type: &str, run_id: &RunId) -> StoreResult<String> {
    if !framed {
        return Ok(stored);
    }
    let prefix = frame_prefix(event_type, run_id)?;
    let rest = stored.strip_prefix('{').ok_or_else(|| {
        StoreError::Corrupt(format!(
            "run {run_id}: column events.event: a framed event does not start with {{"
        ))
    })?;
    Ok(format!("{prefix}{rest}"))
}

/// Appends `events` under the lease `fence` holds.
pub(super) fn append(
    connection: &mut Connection,
    run_id: &RunId,
    events: &[EventRecord],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append events of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    insert_events(&transaction, run_key, run_id, events)?;
    transaction.commit().context(doing)
}

/// The highest event seq of the run (0 when none).
pub(super) fn last_event_seq(connection: &Connection, run_id: &RunId) -> StoreResult<u64> {
    let run_key = run_key(connection, run_id)?;
    last_seq(connection, run_key, run_id)
}

pub(super) fn page(
    connection: &Connection,
    run_id: &RunId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let keys = EventKeys::of(run_key(connection, run_id)?, run_id)?;
    // A cursor at or beyond the last seq a run may hold can only mean "after everything".
    let Ok(after_key) = keys.key(after, run_id) else {
        return Ok(Vec::new());
    };
    // Each seq is a row or an entry of a block; both reads are in seq order
    // and hold at least the first `limit` of their events above the cursor.
    let mut events = rows_after(connection, run_id, keys, after_key, limit)?;
    events.extend(event_blocks::after(
        connection,
        run_id,
        (keys.base, after_key, keys.last()),
        limit,
    )?);
    events.sort_unstable_by_key(|event| event.seq);
    events.truncate(limit as usize);
    events
        .into_iter()
        .map(|event| record(run_id, event))
        .collect()
}

/// The run's rows of `events` after the key `after_key`, at most `limit`, in seq order.
fn rows_after(
    connection: &Connection,
    run_id: &RunId,
    keys: EventKeys,
    after_key: i64,
    limit: u32,
) -> StoreResult<Vec<StoredEvent>> {
    let doing = || format!("read events of run {run_id}");
    let mut statement = connection
        .prepare_cached(
            "SELECT event_key, event_type, timestamp, redacted, truncated, framed, event
             FROM events WHERE event_key > ?1 AND event_key <= ?2 ORDER BY event_key LIMIT ?3",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![after_key, keys.last(), limit])
        .context(doing)?;
    let mut events = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "events");
        events.push(StoredEvent {
            seq: keys.seq(reader.get("event_key")?),
            timestamp: reader.get("timestamp")?,
            redacted: reader.get("redacted")?,
            truncated: reader.get("truncated")?,
            framed: reader.get("framed")?,
            event_type: reader.get("event_type")?,
            text: reader.get("event")?,
        });
    }
    Ok(events)
}

/// The record of a stored event: its text unframed and checked to be JSON.
fn record(run_id: &RunId, event: StoredEvent) -> StoreResult<EventRecord> {
    let seq = event.seq;
    let text = unframe(event.text, event.framed, &event.event_type, run_id)?;
    let event_json = EventJson::parse(text).map_err(|error| {
        StoreError::Corrupt(format!(
            "run {run_id}: column events.event of seq {seq}: {error}"
        ))
    })?;
    Ok(EventRecord {
        seq,
        timestamp: event.timestamp,
        event: event_json,
        redacted: event.redacted,
        truncated: event.truncated,
    })
}

pub(super) fn log_tail(
    connection: &Connection,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(Vec<String>, u64)> {
    let doing = || format!("read the log of run {run_id}");
    let keys = EventKeys::of(run_key(connection, run_id)?, run_id)?;
    let total: i64 = connection
        .prepare_cached(
            "SELECT COUNT(*) FROM events
             WHERE event_key > ?1 AND event_key <= ?2 AND event_type = 'log'",
        )
        .and_then(|mut statement| statement.query_row([keys.base, keys.last()], |row| row.get(0)))
        .context(doing)?;
    let mut statement = connection
        .prepare_cached(
            "SELECT event_key, event FROM events
             WHERE event_key > ?1 AND event_key <= ?2 AND event_type = 'log'
             ORDER BY event_key DESC LIMIT ?3",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![keys.base, keys.last(), limit])
        .context(doing)?;
    let mut lines = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "events");
        let seq = keys.seq(reader.get("event_key")?);
        // The message is a member of the stored text whether or not it is framed.
        let event: Value = reader.json("event")?;
        let message = event
            .get("message")
            .and_then(Value::as_str)
            .ok_or_else(|| reader.corrupt("event", format!("log event {seq} has no message")))?;
        lines.push(message.to_owned());
    }
    // Read newest first to stop after `limit`; a tail reads oldest first.
    lines.reverse();
    let total = u64::try_from(total).unwrap_or_default();
    Ok((lines, total))
}

/// Appends events after checking that they continue the run's stream densely: each run of
/// two or more consecutive events that are not `log` lines as one block,
/// every other event as a row. The events of one transaction are one append, whichever
/// call writes they came with, so a commit of several settled calls stores one block.
pub(super) fn insert_events<'e>(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    events: impl IntoIterator<Item = &'e EventRecord>,
) -> StoreResult<()> {
    let mut events = events.into_iter().peekable();
    if events.peek().is_none() {
        return Ok(());
    }
    let keys = EventKeys::of(run_key, run_id)?;
    let stored = to_store(
        keys,
        run_id,
        last_seq(transaction, run_key, run_id)? + 1,
        events,
    )?;
    let mut rest = &stored[..];
    while let Some(first) = rest.first() {
        let blocked = rest
            .iter()
            .take_while(|event| event.event_type != "log")
            .count();
        let key = keys.key(first.seq, run_id)?;
        if blocked >= 2 {
            event_blocks::insert(transaction, run_id, key, &rest[..blocked])?;
            rest = &rest[blocked..];
        } else {
            insert_row(transaction, run_id, key, first)?;
            rest = &rest[1..];
        }
    }
    Ok(())
}

/// The events as stored, checked to continue the stream at `first_seq` and to fit the range.
fn to_store<'e>(
    keys: EventKeys,
    run_id: &RunId,
    first_seq: u64,
    events: impl Iterator<Item = &'e EventRecord>,
) -> StoreResult<Vec<StoredEvent>> {
    let mut stored = Vec::with_capacity(events.size_hint().0);
    let mut prefixes = Prefixes {
        run_id,
        made: Vec::new(),
    };
    for (expected, event) in (first_seq..).zip(events) {
        if event.seq != expected {
            return Err(StoreError::Io(format!(
                "append events of run {run_id}: event seq {} does not continue the stream, \
                 expected {expected}",
                event.seq
            )));
        }
        keys.key(event.seq, run_id)?;
        let event_type = event.event.event_type().unwrap_or_default();
        let (text, framed) = frame(event.event.as_str(), prefixes.of(&event_type)?);
        stored.push(StoredEvent {
            seq: event.seq,
            timestamp: event.timestamp,
            redacted: event.redacted,
            truncated: event.truncated,
            framed,
            event_type: event_type.into_owned(),
            text,
        });
    }
    Ok(stored)
}

/// Writes one event as a row of `events` at `key`.
fn insert_row(
    transaction: &Transaction<'_>,
    run_id: &RunId,
    key: i64,
    event: &StoredEvent,
) -> StoreResult<()> {
    transaction
        .prepare_cached(
            "INSERT INTO events (event_key, event_type, timestamp, redacted, truncated, framed,
                 event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                key,
                event.event_type,
                event.timestamp,
                event.redacted,
                event.truncated,
                event.framed,
                event.text
            ])
        })
        .context(|| format!("append events of run {run_id}"))?;
    Ok(())
}

pub(super) fn last_seq(connection: &Connection, run_key: i64, run_id: &RunId) -> StoreResult<u64> {
    let keys = EventKeys::of(run_key, run_id)?;
    let last: Option<i64> = connection
        .prepare_cached(
            "SELECT MAX(event_key) FROM events WHERE event_key > ?1 AND event_key <= ?2",
        )
        .and_then(|mut statement| statement.query_row([keys.base, keys.last()], |row| row.get(0)))
        .context(|| format!("read the last event seq of run {run_id}"))?;
    let in_rows = last.map_or(0, |key| keys.seq(key));
    let in_blocks = event_blocks::last_seq(connection, run_id, (keys.base, keys.last()))?;
    Ok(in_rows.max(in_blocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ASCII character alone and amid others, and texts past ASCII: the string
    /// [`push_json_string`] writes is the one `serde_json` writes.
    #[test]
    fn a_json_string_is_written_as_serde_json_writes_it() {
        let mut texts: Vec<String> = (0u8..=0x7f)
            .map(|byte| char::from(byte).to_string())
            .collect();
        texts.extend((0u8..=0x7f).map(|byte| format!("agent{}End", char::from(byte))));
        texts.extend(
            [
                "",
                "agentStart",
                "é",
                "日本",
                "\u{2028}",
                "\u{7f}x",
                "a\"b\\c",
                "tab\there",
            ]
            .map(str::to_owned),
        );
        for text in texts {
            let mut written = String::new();
            push_json_string(&mut written, &text, "text").expect("a JSON string");
            let expected = serde_json::to_string(&text).expect("serde_json");
            assert_eq!(written, expected, "{text:?}");
        }
    }

    #[test]
    fn a_frame_prefix_is_the_members_serde_json_writes_first() {
        let run_id = RunId::parse("hello-0123abcd").expect("a run id");
        let event = serde_json::json!({"type": "agentEnd", "runId": run_id.as_str(), "x": 1});
        let text = serde_json::to_string(&event).expect("JSON");
        let prefix = frame_prefix("agentEnd", &run_id).expect("a prefix");
        assert_eq!(format!("{prefix}\"x\":1}}"), text);
    }
}
