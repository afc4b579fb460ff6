//! The pack reader against valid, crafted, corrupted and random input: a frozen sample, one
//! test per refusal, and a bounded property test (a seeded PRNG written here) that no input
//! panics and that every change to a valid pack is refused unless it changed nothing.

use std::time::{Duration, Instant};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};

use super::*;

/// The key of the frozen sample and of the crafted packs: bytes 0, 1, …, 31.
fn test_key() -> PackKey {
    let hex: String = (0u8..32).map(|byte| format!("{byte:02x}")).collect();
    PackKey::parse(&hex).unwrap()
}

fn entry(path: &str, content: &str) -> Entry {
    Entry {
        path: path.to_owned(),
        content: content.as_bytes().to_vec(),
    }
}

fn sample_entries() -> Vec<Entry> {
    vec![
        entry(
            "flow.js",
            "export const meta = { name: \"flow\" };\nreturn 1;\n",
        ),
        entry("prompts/review.md", "Review carefully."),
        entry("empty.txt", ""),
    ]
}

/// A pack of raw plaintexts, sealed by hand so that the writer's own checks do not stop a
/// bad path or a short plaintext from reaching the reader.
fn craft(plaintexts: &[Vec<u8>], key: &PackKey) -> Vec<u8> {
    let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(*key.bytes()));
    let mut pack = b"DMPK\x02\0\0\0".to_vec();
    pack.extend_from_slice(&(plaintexts.len() as u32).to_le_bytes());
    for (index, plaintext) in plaintexts.iter().enumerate() {
        let nonce = [index as u8; NONCE_BYTES];
        let aad = (index as u32).to_le_bytes();
        let ciphertext = cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .unwrap();
        pack.extend_from_slice(&nonce);
        pack.extend_from_slice(&(ciphertext.len() as u32).to_le_bytes());
        pack.extend_from_slice(&ciphertext);
    }
    pack
}

fn plaintext(path: &[u8], content: &[u8]) -> Vec<u8> {
    let mut bytes = (path.len() as u16).to_le_bytes().to_vec();
    bytes.extend_from_slice(path);
    bytes.extend_from_slice(content);
    bytes
}

/// Where entry `index` starts in a pack of `entries` (sealed in that order).
fn entry_offset(entries: &[Entry], index: usize) -> usize {
    HEADER_BYTES
        + entries[..index]
            .iter()
            .map(|e| NONCE_BYTES + 4 + 2 + e.path.len() + e.content.len() + TAG_BYTES)
            .sum::<usize>()
}

#[test]
fn a_sealed_pack_opens_to_the_same_entries() {
    let key = test_key();
    let entries = sample_entries();
    let pack = seal(&entries, &key).unwrap();
    assert_eq!(&pack[..8], b"DMPK\x02\0\0\0");
    assert_eq!(&pack[8..12], &3u32.to_le_bytes());
    assert_eq!(open(&pack, &key).unwrap(), entries);
    // Fresh nonces: the same entries never seal to the same bytes.
    assert_ne!(seal(&entries, &key).unwrap(), pack);
    assert_eq!(open(&seal(&[], &key).unwrap(), &key).unwrap(), []);
}

/// The sample was written once by `seal(&sample_entries(), &test_key())` (fresh nonces, so
/// writing it again gives other bytes that open the same); it pins that packs made by
/// earlier builds keep opening. Write a new sample only with a new format version.
#[test]
fn the_frozen_version_2_sample_still_opens() {
    let pack = include_bytes!("testdata/sample-v2.dmpk");
    assert_eq!(open(pack, &test_key()).unwrap(), sample_entries());
}

#[test]
fn a_wrong_key_is_named() {
    let pack = seal(&sample_entries(), &test_key()).unwrap();
    let other = PackKey::generate().unwrap();
    assert_eq!(open(&pack, &other), Err(PackError::WrongKey));
}

#[test]
fn each_changed_header_byte_has_its_own_message() {
    let key = test_key();
    let entries = sample_entries();
    let pack = seal(&entries, &key).unwrap();
    let flipped = |at: usize, value: u8| {
        let mut bytes = pack.clone();
        bytes[at] = value;
        open(&bytes, &key).unwrap_err()
    };
    assert_eq!(flipped(0, b'X'), PackError::BadMagic);
    assert_eq!(flipped(3, b'Q'), PackError::BadMagic);
    assert_eq!(flipped(4, 1), PackError::UnsupportedVersion(1));
    assert_eq!(flipped(4, 3), PackError::UnsupportedVersion(3));
    for padding in 5..8 {
        assert_eq!(flipped(padding, 1), PackError::BadPadding);
    }
    assert_eq!(
        flipped(8, 2),
        PackError::TrailingBytes {
            count: pack.len() - entry_offset(&entries, 2),
            entries: 2,
        }
    );
    assert!(matches!(
        flipped(8, 4),
        PackError::Truncated { ref part, .. } if part == "entry 3's nonce"
    ));
    assert!(matches!(
        flipped(9, 1),
        PackError::CountExceedsFile { count: 259, .. }
    ));
    assert_eq!(
        flipped(11, 1),
        PackError::TooManyEntries {
            count: 3 + (1 << 24)
        }
    );
}

#[test]
fn a_changed_nonce_length_or_ciphertext_is_refused() {
    let key = test_key();
    let entries = sample_entries();
    let pack = seal(&entries, &key).unwrap();
    let second = entry_offset(&entries, 1);
    let flip = |at: usize| {
        let mut bytes = pack.clone();
        bytes[at] ^= 0x01;
        open(&bytes, &key).unwrap_err()
    };
    assert_eq!(flip(second), PackError::Tampered { index: 1 });
    assert_eq!(
        flip(second + NONCE_BYTES + 4 + 3),
        PackError::Tampered { index: 1 }
    );
    assert_eq!(flip(pack.len() - 1), PackError::Tampered { index: 2 });
    // Entry 0 cannot be told from a wrong key.
    assert_eq!(flip(HEADER_BYTES), PackError::WrongKey);
    // A shorter length cuts the ciphertext (its tag no longer matches); a longer one runs
    // past the end or into the next entry.
    assert_eq!(flip(second + NONCE_BYTES), PackError::Tampered { index: 1 });
    let mut longer = pack.clone();
    longer[second + NONCE_BYTES + 2] = 0x10;
    assert!(matches!(
        open(&longer, &key).unwrap_err(),
        PackError::LengthExceedsFile { index: 1, .. }
    ));
    let mut tiny = pack.clone();
    tiny[second + NONCE_BYTES..second + NONCE_BYTES + 4].copy_from_slice(&[3, 0, 0, 0]);
    assert_eq!(
        open(&tiny, &key).unwrap_err(),
        PackError::LengthTooSmall {
            index: 1,
            length: 3,
            min: 19
        }
    );
    // Swapping two entries breaks the index bound into each.
    let mut swapped = pack[..HEADER_BYTES].to_vec();
    swapped.extend_from_slice(&pack[second..entry_offset(&entries, 2)]);
    swapped.extend_from_slice(&pack[HEADER_BYTES..second]);
    swapped.extend_from_slice(&pack[entry_offset(&entries, 2)..]);
    assert_eq!(open(&swapped, &key).unwrap_err(), PackError::WrongKey);
}

#[test]
fn every_truncation_and_any_trailing_byte_is_refused() {
    let key = test_key();
    let pack = seal(&sample_entries(), &key).unwrap();
    for end in 0..pack.len() {
        let error = open(&pack[..end], &key).unwrap_err();
        assert!(
            matches!(
                error,
                PackError::Truncated { .. }
                    | PackError::CountExceedsFile { .. }
                    | PackError::LengthExceedsFile { .. }
            ),
            "cut at {end}: {error}"
        );
    }
    assert!(matches!(
        open(&pack[..5], &key).unwrap_err(),
        PackError::Truncated { size: 5, ref part } if part == "the 12-byte header"
    ));
    let mut longer = pack.clone();
    longer.push(0);
    assert_eq!(
        open(&longer, &key).unwrap_err(),
        PackError::TrailingBytes {
            count: 1,
            entries: 3
        }
    );
}

#[test]
fn bad_and_repeated_paths_are_refused_by_reader_and_writer() {
    let key = test_key();
    for (path, problem) in [
        ("/etc/passwd", "is absolute"),
        ("a/../b.js", "has a `..` component"),
        (".env", "is hidden (a component starts with `.`)"),
        ("", "is empty"),
    ] {
        let pack = craft(&[plaintext(path.as_bytes(), b"x")], &key);
        assert_eq!(
            open(&pack, &key).unwrap_err(),
            PackError::InvalidPath {
                index: 0,
                path: path.into(),
                problem
            },
            "{path:?}"
        );
        assert!(matches!(
            seal(&[entry(path, "x")], &key).unwrap_err(),
            PackError::InvalidPath { .. }
        ));
    }
    let repeated = craft(
        &[
            plaintext(b"a.js", b"1"),
            plaintext(b"b.js", b"2"),
            plaintext(b"a.js", b"3"),
        ],
        &key,
    );
    let error = open(&repeated, &key).unwrap_err();
    assert_eq!(
        error,
        PackError::RepeatedPath {
            path: "a.js".into(),
            first: 0,
            second: 2
        }
    );
    assert_eq!(
        error.to_string(),
        "entry 2 repeats the path \"a.js\" of entry 0"
    );
    assert!(matches!(
        seal(&[entry("a.js", "1"), entry("a.js", "2")], &key).unwrap_err(),
        PackError::RepeatedPath { .. }
    ));
    let not_utf8 = craft(&[plaintext(&[0xff, 0xfe], b"x")], &key);
    assert_eq!(
        open(&not_utf8, &key).unwrap_err(),
        PackError::PathNotUtf8 { index: 0 }
    );
    let mut overlong = 900u16.to_le_bytes().to_vec();
    overlong.extend_from_slice(b"a.js");
    assert_eq!(
        open(&craft(&[overlong], &key), &key).unwrap_err(),
        PackError::PathLengthExceedsEntry {
            index: 0,
            length: 900,
            available: 4
        }
    );
}

#[test]
fn the_caps_hold_at_their_edges() {
    let key = test_key();
    let mut header = b"DMPK\x02\0\0\0".to_vec();
    header.extend_from_slice(&(MAX_ENTRIES as u32 + 1).to_le_bytes());
    assert_eq!(
        open(&header, &key).unwrap_err(),
        PackError::TooManyEntries {
            count: MAX_ENTRIES + 1
        }
    );
    let at_cap: Vec<Entry> = (0..MAX_ENTRIES)
        .map(|i| entry(&format!("f{i}"), ""))
        .collect();
    let pack = seal(&at_cap, &key).unwrap();
    assert_eq!(open(&pack, &key).unwrap().len(), MAX_ENTRIES);
    let mut over = at_cap;
    over.push(entry("one-more", ""));
    assert_eq!(
        seal(&over, &key).unwrap_err(),
        PackError::TooManyEntries {
            count: MAX_ENTRIES + 1
        }
    );

    let oversized = vec![0u8; MAX_PACK_BYTES + 1];
    assert_eq!(
        open(&oversized, &key).unwrap_err(),
        PackError::TooLarge {
            size: MAX_PACK_BYTES + 1
        }
    );
    // At the cap the size check passes and the next check speaks (no crypto needed).
    let mut at_cap = vec![0u8; MAX_PACK_BYTES];
    at_cap[..4].copy_from_slice(b"XXXX");
    assert_eq!(open(&at_cap, &key).unwrap_err(), PackError::BadMagic);
}

#[test]
fn no_message_echoes_the_content() {
    let key = test_key();
    let entries = vec![entry("a.js", "CONFIDENTIAL-MARKER"), entry("b.js", "x")];
    let pack = seal(&entries, &key).unwrap();
    for at in 0..pack.len() {
        let mut bytes = pack.clone();
        bytes[at] ^= 0x80;
        let message = open(&bytes, &key).unwrap_err().to_string();
        assert!(!message.contains("CONFIDENTIAL"), "{message}");
        assert!(!message.contains(&key.to_hex()), "{message}");
    }
}

/// xorshift64*: small, seeded, good enough to drive mutations.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// One random change to `pack`: a flipped bit, a replaced, inserted or removed byte, a cut,
/// an overwritten range or a duplicated slice.
fn mutate(pack: &[u8], random: &mut Prng) -> Vec<u8> {
    let mut bytes = pack.to_vec();
    let at = random.below(bytes.len());
    match random.below(7) {
        0 => bytes[at] ^= 1 << random.below(8),
        1 => bytes[at] = random.next() as u8,
        2 => bytes.insert(at, random.next() as u8),
        3 => {
            bytes.remove(at);
        }
        4 => bytes.truncate(at),
        5 => {
            let end = (at + 1 + random.below(32)).min(bytes.len());
            for byte in &mut bytes[at..end] {
                *byte = random.next() as u8;
            }
        }
        _ => {
            let end = (at + 1 + random.below(64)).min(bytes.len());
            let slice = bytes[at..end].to_vec();
            let into = random.below(bytes.len());
            bytes.splice(into..into, slice);
        }
    }
    bytes
}

#[test]
fn property_no_input_panics_and_every_real_change_is_refused() {
    let key = test_key();
    let entries = sample_entries();
    let pack = seal(&entries, &key).unwrap();
    let mut random = Prng(0x9e37_79b9_7f4a_7c15);
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut mutated, mut refused) = (0usize, 0usize);
    while mutated < 20_000 && Instant::now() < deadline {
        let changed = mutate(&pack, &mut random);
        mutated += 1;
        match open(&changed, &key) {
            Err(_) => refused += 1,
            Ok(opened) => {
                assert_eq!(changed, pack, "a changed pack opened");
                assert_eq!(opened, entries);
            }
        }
    }
    assert!(mutated >= 1_000, "only {mutated} mutations ran");
    assert!(
        refused * 10 >= mutated * 9,
        "{refused} of {mutated} refused"
    );

    // Random bytes, some behind a valid header so that the entry parser is reached.
    let mut random_inputs = 0;
    while random_inputs < 5_000 && Instant::now() < deadline + Duration::from_secs(1) {
        let length = random.below(200);
        let mut bytes: Vec<u8> = (0..length).map(|_| random.next() as u8).collect();
        if random.below(2) == 0 && bytes.len() >= 12 {
            bytes[..8].copy_from_slice(b"DMPK\x02\0\0\0");
            bytes[8..12].copy_from_slice(&(random.below(4) as u32).to_le_bytes());
        }
        assert!(open(&bytes, &key).is_err() || bytes.len() == 12);
        random_inputs += 1;
    }
    assert!(
        random_inputs >= 500,
        "only {random_inputs} random inputs ran"
    );
}
