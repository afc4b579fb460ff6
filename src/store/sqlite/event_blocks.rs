//! The `event_blocks` table: two or more consecutive events of one append (none a `log`
//! line) stored as one row whose body is their rows deflated together. The events of a
//! settled call repeat their keys and most of their values, so a block of a commit's events
//! takes about a tenth of the bytes of their rows, and a store writes about half the bytes
//! it would with a row per event (docs/store.md has the figures). `events.rs` decides what
//! goes into a block and merges blocks with the plain rows when it reads.
//!
//! A body, before deflating, is one entry per event in seq order: the timestamp (8 bytes,
//! little-endian, two's complement), a flags byte (1 redacted, 2 truncated, 4 framed), then
//! the event type and the stored text, each as a 4-byte little-endian length and its UTF-8
//! bytes. The event's seq is the block's first seq plus its position.

use std::cell::RefCell;

use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress_to_output, create_comp_flags_from_zip_params,
};
use rusqlite::{Connection, Transaction};

use super::connection::Context;
use super::rows::RowReader;
use crate::model::RunId;
use crate::store::{StoreError, StoreResult};

/// Deflate level: the fastest of miniz's levels already finds the repeated keys and values
/// of neighbouring events; higher levels shrink a block by a few per cent more for several
/// times the CPU.
const LEVEL: u8 = 1;

thread_local! {
    /// This thread's compressor, made once and reset for each block. Making one per block
    /// (what `compress_to_vec` does) allocates about 300 KiB of tables each time, and the
    /// fresh pages a larger block reaches into fault in one by one: a block of 7 KiB (the
    /// events of a fan-out commit, or of a replayed batch) took 66 µs of CPU that way and
    /// takes 19 µs reset; a block of one call's events costs the same either way (about
    /// 17 µs, the block's own Huffman codes and the reset), and the bytes are the same.
    /// Store writes run on the few threads of the daemon's runtime, so the few hundred KiB
    /// each stay with those threads.
    static COMPRESSOR: RefCell<Option<Box<CompressorOxide>>> = const { RefCell::new(None) };
}

/// Deflates `body` (raw deflate, no zlib wrapper, as `compress_to_vec` makes it) with this
/// thread's compressor.
fn deflate(body: &[u8]) -> Vec<u8> {
    COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = slot.get_or_insert_with(|| {
            let flags = create_comp_flags_from_zip_params(LEVEL.into(), 0, 0);
            Box::new(CompressorOxide::new(flags))
        });
        compressor.reset();
        let mut deflated = Vec::with_capacity(body.len() / 4 + 16);
        let (status, _) = compress_to_output(compressor, body, TDEFLFlush::Finish, |chunk| {
            deflated.extend_from_slice(chunk);
            true
        });
        // With all of the input given and an output that takes everything, deflate ends in
        // one call. Should it not, the compressor is dropped and the block made the old way,
        // never stored cut short.
        if status == TDEFLStatus::Done {
            return deflated;
        }
        *slot = None;
        miniz_oxide::deflate::compress_to_vec(body, LEVEL)
    })
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

/// The deflated body of `events` (in seq order, consecutive).
fn encode(events: &[StoredEvent]) -> Vec<u8> {
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
    deflate(&body)
}

/// Reads a body's entries back; anything that is not what [`encode`] writes for seqs
/// `first..=last` is `Corrupt`, naming the run and the block.
fn decode(run_id: &RunId, first: u64, last: u64, deflated: &[u8]) -> StoreResult<Vec<StoredEvent>> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "run {run_id}: table event_blocks, block of seqs {first} to {last}: {what}"
        ))
    };
    let body = miniz_oxide::inflate::decompress_to_vec_with_limit(deflated, MAX_BODY)
        .map_err(|error| corrupt(&format!("the body does not inflate ({:?})", error.status)))?;
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
    transaction
        .prepare_cached("INSERT INTO event_blocks (block_key, last_seq, body) VALUES (?1, ?2, ?3)")
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![first_key, last, encode(events)])
        })
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
        let body = encode(&events);
        assert_eq!(decode(&run, 7, 9, &body).expect("decode"), events);
    }

    /// The compressor a thread keeps carries nothing from one block into the next: blocks
    /// of different sizes in turn, a large one between small ones, each decode to their own
    /// events and are byte for byte what a compressor of their own makes.
    #[test]
    fn blocks_made_one_after_another_on_a_thread_are_those_of_a_fresh_compressor() {
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
            let body = encode(&events);
            let (first, last) = (events[0].seq, events[events.len() - 1].seq);
            assert_eq!(decode(&run, first, last, &body).expect("decode"), events);
            let inflated = miniz_oxide::inflate::decompress_to_vec(&body).expect("inflate");
            assert_eq!(
                body,
                miniz_oxide::deflate::compress_to_vec(&inflated, LEVEL)
            );
        }
    }

    #[test]
    fn a_body_that_is_not_the_blocks_is_corrupt() {
        let run = RunId::parse("run-0").expect("valid id");
        let events = vec![stored(1, "{}", 0), stored(2, "{}", 0)];
        let body = encode(&events);
        let cut = miniz_oxide::deflate::compress_to_vec(
            &miniz_oxide::inflate::decompress_to_vec(&body).expect("inflate")[..20],
            LEVEL,
        );
        for (first, last, body, what) in [
            (1, 3, body.clone(), "holds 2 events"),
            (1, 1, body.clone(), "holds 2 events"),
            (1, 2, b"not deflate".to_vec(), "does not inflate"),
            (1, 2, cut, "cut short"),
            (
                1,
                1,
                miniz_oxide::deflate::compress_to_vec(&[0, 0, 0, 0, 0, 0, 0, 0, 8], LEVEL),
                "unknown flags 8",
            ),
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
