//! The `event_blocks` table: two or more consecutive events of one append (none a `log`
//! line) stored as one row whose body is their rows deflated together. The events of a
//! settled call repeat their keys and most of their values, so a block of a commit's events
//! takes about a tenth of the bytes of their rows, and a store writes about half the bytes
//! it would with a row per event (docs/store.md has the figures). `events.rs` decides what
//! goes into a block and merges blocks with the plain rows when it reads.
//!
//! A body, before compressing, is one entry per event in seq order: the timestamp (8 bytes,
//! little-endian, two's complement), a flags byte (1 redacted, 2 truncated, 4 framed), then
//! the event type and the stored text, each as a 4-byte little-endian length and its UTF-8
//! bytes. The event's seq is the block's first seq plus its position.
//!
//! A body is stored as one zstd frame (level 1, its content size in the header). Blocks of
//! stores written before are raw deflate and are read as such: a raw deflate stream can never
//! begin with the zstd magic (those four bytes would open a stored deflate block whose length
//! and its complement disagree), so the first bytes tell the two apart.

use rusqlite::{Connection, Transaction};

use super::connection::Context;
use super::rows::RowReader;
use crate::model::RunId;
use crate::store::{StoreError, StoreResult};
use crate::util::sync::Lock;

/// zstd's level: its fastest regular level already finds the repeated keys and values of
/// neighbouring events, and makes blocks as small as deflate's level 1 did.
const LEVEL: i32 = 1;

/// The first bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Kept compression contexts: zstd reuses its tables from one frame to the next without
/// clearing them, so a block of one call's events (about 1 KiB) costs about 3 µs of CPU,
/// where deflate's compressor, whose reset clears some 300 KiB of tables, took about 15 µs.
/// The contexts are the process's, not a thread's: store writes run on whichever thread holds
/// the connection (`off_workers`), and the runtime makes new threads over a daemon's life, so
/// a context per thread would grow with them. Blocks are compressed under the connection's
/// mutex, so one context is in use at a time per store; at most [`KEPT_COMPRESSORS`] are kept.
static COMPRESSORS: std::sync::Mutex<Vec<zstd::bulk::Compressor<'static>>> =
    std::sync::Mutex::new(Vec::new());

/// How many idle compression contexts (some tens of KiB each) the process keeps.
const KEPT_COMPRESSORS: usize = 2;

/// Compresses `body` into one zstd frame with a kept context, or a new one.
pub(super) fn compress(body: &[u8]) -> StoreResult<Vec<u8>> {
    let kept = COMPRESSORS.locked().pop();
    let mut compressor = match kept {
        Some(compressor) => compressor,
        None => zstd::bulk::Compressor::new(LEVEL)
            .map_err(|error| StoreError::Io(format!("zstd: {error}")))?,
    };
    // A context that failed once is not trusted again: it is dropped, not kept.
    let frame = compressor
        .compress(body)
        .map_err(|error| StoreError::Io(format!("zstd: {error}")))?;
    keep(compressor);
    Ok(frame)
}

/// Returns an idle context to the kept ones, or drops it when [`KEPT_COMPRESSORS`] are kept.
fn keep(compressor: zstd::bulk::Compressor<'static>) {
    let mut kept = COMPRESSORS.locked();
    if kept.len() < KEPT_COMPRESSORS {
        kept.push(compressor);
    }
}

/// The body of a stored block: a zstd frame, or the raw deflate of older blocks; `None`
/// (with why) when it is neither or would exceed [`MAX_BODY`].
pub(super) fn decompress(stored: &[u8]) -> Result<Vec<u8>, String> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return miniz_oxide::inflate::decompress_to_vec_with_limit(stored, MAX_BODY)
            .map_err(|error| format!("the body does not inflate ({:?})", error.status));
    }
    let size = match zstd::zstd_safe::get_frame_content_size(stored) {
        Ok(Some(size)) => size,
        _ => return Err("the zstd frame does not say its size".to_owned()),
    };
    let size = usize::try_from(size)
        .ok()
        .filter(|size| *size <= MAX_BODY)
        .ok_or_else(|| format!("the zstd frame holds {size} bytes, more than a block may"))?;
    zstd::bulk::decompress(stored, size)
        .map_err(|error| format!("the body does not decompress ({error})"))
}

/// The largest body a block may inflate to: every event of a block is at most
/// `MAX_EVENT_BYTES` of JSON, and a block holds one append's events, so a body beyond this is
/// not one the store wrote.
const MAX_BODY: usize = 1 << 30;

const REDACTED: u8 = 1;
const TRUNCATED: u8 = 2;
const FRAMED: u8 = 4;

/// One event as the store keeps it: a row of `events` or an entry of a block.
#[derive(Debug, PartialEq)]
pub(super) struct StoredEvent {
    pub(super) seq: u64,
    pub(super) timestamp: i64,
    pub(super) redacted: bool,
    pub(super) truncated: bool,
    /// The text lacks the `"type"`/`"runId"` frame (`events.rs` puts it back).
    pub(super) framed: bool,
    pub(super) event_type: String,
    pub(super) text: String,
}

/// The compressed body of `events` (in seq order, consecutive).
fn encode(events: &[StoredEvent]) -> StoreResult<Vec<u8>> {
    let mut body = Vec::with_capacity(events.iter().map(|e| e.text.len() + 32).sum());
    for event in events {
        body.extend_from_slice(&event.timestamp.to_le_bytes());
        let flags = [
            (event.redacted, REDACTED),
            (event.truncated, TRUNCATED),
            (event.framed, FRAMED),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .fold(0, |flags, (_, bit)| flags | bit);
        body.push(flags);
        for text in [&event.event_type, &event.text] {
            // An event is at most `MAX_EVENT_BYTES` of JSON, far below 2^32.
            let length = u32::try_from(text.len()).unwrap_or(u32::MAX);
            body.extend_from_slice(&length.to_le_bytes());
            body.extend_from_slice(text.as_bytes());
        }
    }
    compress(&body)
}

/// Reads a body's entries back; anything that is not what [`encode`] writes for seqs
/// `first..=last` is `Corrupt`, naming the run and the block.
fn decode(run_id: &RunId, first: u64, last: u64, stored: &[u8]) -> StoreResult<Vec<StoredEvent>> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "run {run_id}: table event_blocks, block of seqs {first} to {last}: {what}"
        ))
    };
    let body = decompress(stored).map_err(|what| corrupt(&what))?;
    let mut reader = Reader { body: &body };
    let mut events = Vec::new();
    let mut seq = first;
    while !reader.body.is_empty() {
        let short = || corrupt("an entry is cut short");
        let timestamp = i64::from_le_bytes(
            reader
                .take(8)
                .ok_or_else(short)?
                .try_into()
                .unwrap_or_default(),
        );
        let flags = reader.take(1).ok_or_else(short)?[0];
        if flags & !(REDACTED | TRUNCATED | FRAMED) != 0 {
            return Err(corrupt(&format!("unknown flags {flags}")));
        }
        let event_type = reader
            .text()
            .ok_or_else(short)?
            .map_err(|_| corrupt("a type is not UTF-8"))?;
        let text = reader
            .text()
            .ok_or_else(short)?
            .map_err(|_| corrupt("a text is not UTF-8"))?;
        events.push(StoredEvent {
            seq,
            timestamp,
            redacted: flags & REDACTED != 0,
            truncated: flags & TRUNCATED != 0,
            framed: flags & FRAMED != 0,
            event_type,
            text,
        });
        seq += 1;
    }
    if first == 0 || seq != last + 1 {
        return Err(corrupt(&format!("it holds {} events", events.len())));
    }
    Ok(events)
}

/// The unread rest of a body.
struct Reader<'body> {
    body: &'body [u8],
}

impl<'body> Reader<'body> {
    fn take(&mut self, count: usize) -> Option<&'body [u8]> {
        if self.body.len() < count {
            return None;
        }
        let (taken, rest) = self.body.split_at(count);
        self.body = rest;
        Some(taken)
    }

    /// A length-prefixed text: `None` when cut short, `Some(Err)` when not UTF-8.
    fn text(&mut self) -> Option<Result<String, std::string::FromUtf8Error>> {
        let length = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        let bytes = self.take(usize::try_from(length).ok()?)?;
        Some(String::from_utf8(bytes.to_vec()))
    }
}

/// Writes `events` (two or more, consecutive, the first at key `first_key`) as one block.
pub(super) fn insert(
    transaction: &Transaction<'_>,
    run_id: &RunId,
    first_key: i64,
    events: &[StoredEvent],
) -> StoreResult<()> {
    let doing = || format!("append events of run {run_id}");
    let last = events.last().map_or(0, |event| event.seq);
    let last =
        i64::try_from(last).map_err(|error| StoreError::Io(format!("{}: {error}", doing())))?;
    let body = encode(events).map_err(|error| StoreError::Io(format!("{}: {error}", doing())))?;
    transaction
        .prepare_cached("INSERT INTO event_blocks (block_key, last_seq, body) VALUES (?1, ?2, ?3)")
        .and_then(|mut statement| statement.execute(rusqlite::params![first_key, last, body]))
        .context(doing)?;
    Ok(())
}

/// The run's blocked events with seq above `after`, in seq order, at least `limit` of them
/// when there are that many (whole blocks are read, so there may be more). `after_key` is
/// the key of seq `after`, `last_key` the last key of the run's range.
pub(super) fn after(
    connection: &Connection,
    run_id: &RunId,
    (base, after_key, last_key): (i64, i64, i64),
    limit: u32,
) -> StoreResult<Vec<StoredEvent>> {
    let doing = || format!("read events of run {run_id}");
    let mut events = Vec::new();
    // The block that holds seq `after` itself may hold later seqs too.
    let mut read = |statement: &str, params: &[&dyn rusqlite::ToSql]| -> StoreResult<()> {
        let mut statement = connection.prepare_cached(statement).context(doing)?;
        let mut rows = statement.query(params).context(doing)?;
        while let Some(row) = rows.next().context(doing)? {
            let reader = RowReader::new(row, run_id, "event_blocks");
            let key: i64 = reader.get("block_key")?;
            let last: i64 = reader.get("last_seq")?;
            let body: Vec<u8> = reader.get("body")?;
            // Every key read comes from this run's range, so the difference is in 0..2^32.
            let first = u64::try_from(key - base).unwrap_or_default();
            let last = u64::try_from(last).map_err(|error| reader.corrupt("last_seq", error))?;
            let after = u64::try_from(after_key - base).unwrap_or_default();
            if last <= after {
                continue;
            }
            let decoded = decode(run_id, first, last, &body)?;
            events.extend(decoded.into_iter().filter(|event| event.seq > after));
            if events.len() >= limit as usize {
                break;
            }
        }
        Ok(())
    };
    read(
        "SELECT block_key, last_seq, body FROM event_blocks
         WHERE block_key > ?1 AND block_key <= ?2 ORDER BY block_key DESC LIMIT 1",
        &[&base, &after_key],
    )?;
    read(
        "SELECT block_key, last_seq, body FROM event_blocks
         WHERE block_key > ?1 AND block_key <= ?2 ORDER BY block_key LIMIT ?3",
        &[&after_key, &last_key, &limit],
    )?;
    Ok(events)
}

/// The last seq of the run's blocks (0 when it has none).
pub(super) fn last_seq(
    connection: &Connection,
    run_id: &RunId,
    (base, last_key): (i64, i64),
) -> StoreResult<u64> {
    let last: Option<i64> = connection
        .prepare_cached(
            "SELECT last_seq FROM event_blocks WHERE block_key > ?1 AND block_key <= ?2
             ORDER BY block_key DESC LIMIT 1",
        )
        .and_then(|mut statement| {
            use rusqlite::OptionalExtension;
            statement
                .query_row([base, last_key], |row| row.get(0))
                .optional()
        })
        .context(|| format!("read the last event seq of run {run_id}"))?;
    Ok(last.map_or(0, |last| u64::try_from(last).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_contexts_are_the_process_s_and_bounded() {
        // Frames made on other threads with the kept contexts read back.
        let body = b"{\"type\":\"agentEnd\",\"label\":\"a\"}".repeat(40);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let body = body.clone();
                std::thread::spawn(move || compress(&body).expect("compress"))
            })
            .collect();
        for thread in threads {
            assert_eq!(
                decompress(&thread.join().expect("the thread ends")).expect("a zstd frame"),
                body
            );
        }
        // As many idle contexts as a busy moment leaves are not all kept.
        for _ in 0..=KEPT_COMPRESSORS + 1 {
            keep(zstd::bulk::Compressor::new(LEVEL).expect("a context"));
        }
        assert!(COMPRESSORS.locked().len() <= KEPT_COMPRESSORS);
    }

    fn stored(seq: u64, text: &str, flags: u8) -> StoredEvent {
        StoredEvent {
            seq,
            timestamp: -(seq as i64) * 1_000_000_007,
            redacted: flags & REDACTED != 0,
            truncated: flags & TRUNCATED != 0,
            framed: flags & FRAMED != 0,
            event_type: format!("type{seq}é"),
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_body_decodes_to_the_events_encoded() {
        let run = RunId::parse("run-0").expect("valid id");
        let events = vec![
            stored(7, r#"{"scope":"root","label":"agent 0"}"#, FRAMED),
            stored(8, "", REDACTED | TRUNCATED),
            stored(9, &"é\"\u{0}".repeat(3000), 0),
        ];
        let body = encode(&events).expect("encode");
        assert!(body.starts_with(&ZSTD_MAGIC));
        assert_eq!(decode(&run, 7, 9, &body).expect("decode"), events);
    }

    /// The raw body of `events`, as `encode` builds it before compressing.
    fn raw(events: &[StoredEvent]) -> Vec<u8> {
        let body = encode(events).expect("encode");
        decompress(&body).expect("decompress")
    }

    /// Blocks written as raw deflate (stores from before zstd) still read.
    #[test]
    fn a_deflated_block_of_an_older_store_decodes() {
        let run = RunId::parse("run-0").expect("valid id");
        let events = vec![stored(3, r#"{"a":1}"#, FRAMED), stored(4, "{}", 0)];
        let deflated = miniz_oxide::deflate::compress_to_vec(&raw(&events), 1);
        assert!(!deflated.starts_with(&ZSTD_MAGIC));
        assert_eq!(decode(&run, 3, 4, &deflated).expect("decode"), events);
    }

    /// The context a thread keeps carries nothing from one block into the next: blocks of
    /// different sizes in turn, a large one between small ones, each decode to their own
    /// events and are byte for byte what a context of their own makes.
    #[test]
    fn blocks_made_one_after_another_on_a_thread_are_those_of_a_fresh_context() {
        let run = RunId::parse("run-0").expect("valid id");
        let block = |first: u64, count: u64, text: &str| -> Vec<StoredEvent> {
            (first..first + count)
                .map(|seq| stored(seq, &format!("{text}{seq}"), 0))
                .collect()
        };
        for events in [
            block(1, 6, r#"{"scope":"root","label":"agent "#),
            block(7, 2, "x"),
            block(9, 400, &"a long, repeated text ".repeat(40)),
            block(409, 3, r#"{"callIndex":"#),
            block(412, 6, r#"{"scope":"root","label":"agent "#),
        ] {
            let body = encode(&events).expect("encode");
            let (first, last) = (events[0].seq, events[events.len() - 1].seq);
            assert_eq!(decode(&run, first, last, &body).expect("decode"), events);
            let fresh = zstd::bulk::compress(&raw(&events), LEVEL).expect("compress");
            assert_eq!(body, fresh);
        }
    }

    #[test]
    fn a_body_that_is_not_the_blocks_is_corrupt() {
        let run = RunId::parse("run-0").expect("valid id");
        let events = vec![stored(1, "{}", 0), stored(2, "{}", 0)];
        let body = encode(&events).expect("encode");
        let zstd = |bytes: &[u8]| zstd::bulk::compress(bytes, LEVEL).expect("compress");
        let cut = zstd(&raw(&events)[..20]);
        let sizeless = zstd::stream::encode_all(&raw(&events)[..], LEVEL).expect("stream");
        let mut truncated_frame = body.clone();
        truncated_frame.truncate(body.len() - 3);
        for (first, last, body, what) in [
            (1, 3, body.clone(), "holds 2 events"),
            (1, 1, body.clone(), "holds 2 events"),
            (1, 2, b"not deflate".to_vec(), "does not inflate"),
            (1, 2, truncated_frame, "does not decompress"),
            (1, 2, sizeless, "does not say its size"),
            (1, 2, cut, "cut short"),
            (1, 1, zstd(&[0, 0, 0, 0, 0, 0, 0, 0, 8]), "unknown flags 8"),
        ] {
            match decode(&run, first, last, &body) {
                Err(StoreError::Corrupt(message)) => {
                    assert!(message.contains(what), "{message}");
                    assert!(message.contains("run run-0"), "{message}");
                }
                other => panic!("expected Corrupt for {what}, got {other:?}"),
            }
        }
    }
}
