//! The `event_blocks` table: two or more consecutive events of one append (none a `log`
//! line) stored as one row whose body is their rows compressed together. The events of a
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
//! A body is stored as one zstd frame (level 1, its content size in the header) made with
//! the events' dictionary, [`DICTIONARY`]: a 4 KiB zstd dictionary trained on the event
//! blocks of sample runs (`scripts/event-dictionary`), which holds the events' keys and
//! frames and the entropy tables that fit them. A block of one call's events then needs no
//! tables of its own and finds most of its text in the dictionary: it takes about a third
//! of the bytes and of the instructions it would without one (docs/store.md). Every frame
//! made with it names its ID, so the dictionary is frozen: a better one would ship beside it
//! under another ID. Frames that name no dictionary (blocks written before it, and the call
//! blocks of `call_blocks.rs`, which use [`compress`]) read without one. Blocks of stores
//! written before zstd are raw deflate and are read as such: a raw deflate stream can never
//! begin with the zstd magic (those four bytes would open a stored deflate block whose length
//! and its complement disagree), so the first bytes tell the two apart.

use std::sync::{Mutex, OnceLock};

use rusqlite::{Connection, Transaction};
use zstd::bulk::Compressor;
use zstd::dict::{DecoderDictionary, EncoderDictionary};

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

/// The dictionary event blocks are compressed with. Never changed: stored frames name it.
const DICTIONARY: &[u8] = include_bytes!("event_blocks.dict");

/// The ID [`DICTIONARY`] carries, which every frame made with it names.
const DICTIONARY_ID: u32 = 0x4150_0001;

/// [`DICTIONARY`] prepared for compressing at [`LEVEL`], once per process.
fn encoder_dictionary() -> &'static EncoderDictionary<'static> {
    static PREPARED: OnceLock<EncoderDictionary<'static>> = OnceLock::new();
    PREPARED.get_or_init(|| EncoderDictionary::copy(DICTIONARY, LEVEL))
}

/// [`DICTIONARY`] prepared for decompressing, once per process.
fn decoder_dictionary() -> &'static DecoderDictionary<'static> {
    static PREPARED: OnceLock<DecoderDictionary<'static>> = OnceLock::new();
    PREPARED.get_or_init(|| DecoderDictionary::copy(DICTIONARY))
}

/// Kept compression contexts: zstd reuses its tables from one frame to the next without
/// clearing them, so a block of one call's events (about 1 KiB) costs a few µs of CPU,
/// where deflate's compressor, whose reset clears some 300 KiB of tables, took about 15 µs.
/// The contexts are the process's, not a thread's: store writes run on whichever thread holds
/// the connection (`off_workers`), and the runtime makes new threads over a daemon's life, so
/// a context per thread would grow with them. Blocks are compressed under the connection's
/// mutex, so one context of a kind is in use at a time per store; at most
/// [`KEPT_COMPRESSORS`] of a kind are kept. Contexts without a dictionary (call blocks) and
/// with the events' one are kept apart.
type Kept = Mutex<Vec<Compressor<'static>>>;
static PLAIN_COMPRESSORS: Kept = Mutex::new(Vec::new());
static EVENT_COMPRESSORS: Kept = Mutex::new(Vec::new());

/// How many idle compression contexts (some tens of KiB each) of a kind the process keeps.
const KEPT_COMPRESSORS: usize = 2;

/// Compresses `body` into one zstd frame without a dictionary (a call block's).
pub(super) fn compress(body: &[u8]) -> StoreResult<Vec<u8>> {
    compress_with(&PLAIN_COMPRESSORS, || Compressor::new(LEVEL), body)
}

/// Compresses an event block's `body` into one zstd frame with [`DICTIONARY`].
fn compress_events(body: &[u8]) -> StoreResult<Vec<u8>> {
    let new = || Compressor::with_prepared_dictionary(encoder_dictionary());
    compress_with(&EVENT_COMPRESSORS, new, body)
}

/// Compresses `body` with a context kept in `kept`, or a new one from `new`.
fn compress_with(
    kept: &Kept,
    new: impl FnOnce() -> std::io::Result<Compressor<'static>>,
    body: &[u8],
) -> StoreResult<Vec<u8>> {
    let idle = kept.locked().pop();
    let mut compressor = match idle {
        Some(compressor) => compressor,
        None => new().map_err(|error| StoreError::Io(format!("zstd: {error}")))?,
    };
    // A context that failed once is not trusted again: it is dropped, not kept.
    let frame = compressor
        .compress(body)
        .map_err(|error| StoreError::Io(format!("zstd: {error}")))?;
    keep(kept, compressor);
    Ok(frame)
}

/// Returns an idle context to `kept`, or drops it when [`KEPT_COMPRESSORS`] are kept.
fn keep(kept: &Kept, compressor: Compressor<'static>) {
    let mut kept = kept.locked();
    if kept.len() < KEPT_COMPRESSORS {
        kept.push(compressor);
    }
}

/// The body of a stored block: a zstd frame (with [`DICTIONARY`] when it names it), or the
/// raw deflate of older blocks; an error saying why when it is neither, names another
/// dictionary, or would exceed [`MAX_BODY`].
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
    let decompressed = match zstd::zstd_safe::get_dict_id_from_frame(stored) {
        None => zstd::bulk::decompress(stored, size),
        Some(id) if id.get() == DICTIONARY_ID => {
            zstd::bulk::Decompressor::with_prepared_dictionary(decoder_dictionary())
                .and_then(|mut decompressor| decompressor.decompress(stored, size))
        }
        Some(id) => {
            return Err(format!(
                "the zstd frame needs dictionary {id}, which this build does not have"
            ));
        }
    };
    decompressed.map_err(|error| format!("the body does not decompress ({error})"))
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
    compress_events(&body)
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
                std::thread::spawn(move || {
                    [
                        compress(&body).expect("compress"),
                        compress_events(&body).expect("compress"),
                    ]
                })
            })
            .collect();
        for thread in threads {
            for frame in thread.join().expect("the thread ends") {
                assert_eq!(decompress(&frame).expect("a zstd frame"), body);
            }
        }
        // As many idle contexts as a busy moment leaves are not all kept.
        for kept in [&PLAIN_COMPRESSORS, &EVENT_COMPRESSORS] {
            for _ in 0..=KEPT_COMPRESSORS + 1 {
                keep(kept, Compressor::new(LEVEL).expect("a context"));
            }
            assert!(kept.locked().len() <= KEPT_COMPRESSORS);
        }
    }

    /// The events one settled call writes, as the store frames them (a mock agent's call).
    fn a_call_s_events(first: u64, index: u32) -> Vec<StoredEvent> {
        let texts = [
            (
                "agentStart",
                format!(
                    r#"{{"scope":"root","label":"agent {index}","phase":null,"model":"mock","backendId":"mock","callIndex":{index},"path":"2:50","liveReason":null}}"#
                ),
            ),
            (
                "agentProgress",
                format!(
                    r#"{{"scope":"root","callIndex":{index},"executionStartSeq":{first},"turnCount":1,"observedEvents":1,"coalescedEvents":0,"cause":"activity","latestText":"ECHO: say {index}"}}"#
                ),
            ),
            (
                "agentTranscript",
                format!(
                    r#"{{"scope":"root","callIndex":{index},"executionStartSeq":{first},"entryIndex":0,"revision":1,"operation":"upsert","entry":{{"role":"assistant","kind":"text","text":"ECHO: say {index}"}}}}"#
                ),
            ),
            (
                "agentEnd",
                format!(
                    r#"{{"scope":"root","callIndex":{index},"label":"agent {index}","result":{{"preview":"ECHO: say {index}","redacted":false,"truncated":false}},"usage":{{"inputTokens":2,"outputTokens":3,"totalTokens":5}}}}"#
                ),
            ),
            (
                "tokenUsage",
                r#"{"scope":"root","usage":{"inputTokens":4,"outputTokens":6,"totalTokens":10}}"#
                    .to_owned(),
            ),
            (
                "callRecord",
                format!(
                    r#"{{"scope":"root","index":{index},"kind":"agent","label":"agent {index}","outcome":"result","origin":"runner","attempts":1,"errorCode":null}}"#
                ),
            ),
        ];
        texts
            .into_iter()
            .zip(first..)
            .map(|((event_type, text), seq)| StoredEvent {
                seq,
                timestamp: 1_796_000_000_000 + seq as i64,
                redacted: false,
                truncated: false,
                framed: true,
                event_type: event_type.to_owned(),
                text,
            })
            .collect()
    }

    /// A block is compressed with the events' dictionary and names it; a call's events take
    /// under half the bytes they take without it.
    #[test]
    fn a_call_s_block_is_made_with_the_dictionary_and_is_small() {
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_dict(DICTIONARY).map(|id| id.get()),
            Some(DICTIONARY_ID)
        );
        let run = RunId::parse("run-0").expect("valid id");
        let events = a_call_s_events(7, 1);
        let body = encode(&events).expect("encode");
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_frame(&body).map(|id| id.get()),
            Some(DICTIONARY_ID)
        );
        assert_eq!(decode(&run, 7, 12, &body).expect("decode"), events);
        let without = zstd::bulk::compress(&raw(&events), LEVEL).expect("compress");
        assert!(
            body.len() * 2 < without.len(),
            "{} bytes with the dictionary, {} without",
            body.len(),
            without.len()
        );
    }

    /// Blocks written before the dictionary (zstd frames that name none) still read.
    #[test]
    fn a_block_without_the_dictionary_decodes() {
        let run = RunId::parse("run-0").expect("valid id");
        let events = a_call_s_events(1, 0);
        let plain = zstd::bulk::compress(&raw(&events), LEVEL).expect("compress");
        assert_eq!(zstd::zstd_safe::get_dict_id_from_frame(&plain), None);
        assert_eq!(decode(&run, 1, 6, &plain).expect("decode"), events);
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
            let fresh = Compressor::with_prepared_dictionary(encoder_dictionary())
                .and_then(|mut compressor| compressor.compress(&raw(&events)))
                .expect("compress");
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
        // A frame made with a dictionary of another ID (this one's, renumbered).
        let mut other = DICTIONARY.to_vec();
        other[4..8].copy_from_slice(&(DICTIONARY_ID + 1).to_le_bytes());
        let foreign = Compressor::with_dictionary(LEVEL, &other)
            .and_then(|mut compressor| compressor.compress(&raw(&events)))
            .expect("compress");
        for (first, last, body, what) in [
            (1, 3, body.clone(), "holds 2 events"),
            (1, 1, body.clone(), "holds 2 events"),
            (1, 2, b"not deflate".to_vec(), "does not inflate"),
            (1, 2, truncated_frame, "does not decompress"),
            (1, 2, sizeless, "does not say its size"),
            (1, 2, foreign, "needs dictionary 1095761922"),
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
