//! Opening a pack: every byte of the file is checked before any entry is handed out.
//!
//! The reader works on a byte slice with explicit offsets and bounds-checked reads only, so
//! no input can make it index out of range, allocate beyond the file's own size or panic.
//! The checks run in file order: size cap, header (magic, version, padding, count against
//! the cap and against the bytes that follow), then each entry (nonce, length against what
//! is left, decryption with the entry index as AAD, path length, path rule, repeats), then
//! trailing bytes. The first entry failing to decrypt is reported as a wrong key: with
//! AES-GCM a wrong key and a changed entry 0 look the same, and a wrong key is the likelier.

use std::collections::HashMap;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};

use super::format::{
    Entry, HEADER_BYTES, MAGIC, MAX_ENTRIES, MAX_PACK_BYTES, MIN_ENTRY_BYTES, NONCE_BYTES,
    PackError, TAG_BYTES, VERSION, path_problem,
};
use super::key::PackKey;
use crate::util::safe_file::{self, FileError, Links};

/// Why a pack file was not opened: the file itself, or its contents.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the workflows pack cannot be read: {0}")]
    File(#[from] FileError),
    #[error("the workflows pack {path} cannot be opened: {error}")]
    Pack { path: String, error: PackError },
}

/// Reads the pack file at `path` (through [`safe_file`]: no link followed after resolution,
/// regular files only, at most [`MAX_PACK_BYTES`]) and opens it with `key`.
pub fn read_file(path: &Path, key: &PackKey) -> Result<Vec<Entry>, ReadError> {
    let contents = safe_file::read_blocking(path, MAX_PACK_BYTES as u64, Links::ResolveFirst)?;
    open(&contents.bytes, key).map_err(|error| ReadError::Pack {
        path: path.display().to_string(),
        error,
    })
}

/// The entries of the pack `bytes`, in file order, or the first thing wrong with it.
pub fn open(bytes: &[u8], key: &PackKey) -> Result<Vec<Entry>, PackError> {
    if bytes.len() > MAX_PACK_BYTES {
        return Err(PackError::TooLarge { size: bytes.len() });
    }
    let mut cursor = Cursor { bytes, at: 0 };
    let count = read_header(&mut cursor)?;
    let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(*key.bytes()));
    let mut entries = Vec::with_capacity(count);
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(count);
    for index in 0..count {
        let entry = read_entry(&mut cursor, &cipher, index)?;
        if let Some(first) = seen.insert(entry.path.clone(), index) {
            return Err(PackError::RepeatedPath {
                path: entry.path,
                first,
                second: index,
            });
        }
        entries.push(entry);
    }
    let trailing = bytes.len() - cursor.at;
    if trailing > 0 {
        return Err(PackError::TrailingBytes {
            count: trailing,
            entries: count,
        });
    }
    Ok(entries)
}

/// A position in the pack; every read is bounds-checked and names what it was reading.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(
        &mut self,
        length: usize,
        part: impl FnOnce() -> String,
    ) -> Result<&'a [u8], PackError> {
        let end = self
            .at
            .checked_add(length)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| PackError::Truncated {
                size: self.bytes.len(),
                part: part(),
            })?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }
}

fn u32_at(bytes: &[u8]) -> usize {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(word) as usize
}

/// The header's entry count, after magic, version, padding and both bounds on the count.
fn read_header(cursor: &mut Cursor<'_>) -> Result<usize, PackError> {
    let header = cursor.take(HEADER_BYTES, || "the 12-byte header".to_owned())?;
    if &header[..4] != MAGIC {
        return Err(PackError::BadMagic);
    }
    if header[4] != VERSION {
        return Err(PackError::UnsupportedVersion(header[4]));
    }
    if header[5..8] != [0, 0, 0] {
        return Err(PackError::BadPadding);
    }
    let count = u32_at(&header[8..12]);
    if count > MAX_ENTRIES {
        return Err(PackError::TooManyEntries { count });
    }
    let remaining = cursor.remaining();
    if count.saturating_mul(MIN_ENTRY_BYTES) > remaining {
        return Err(PackError::CountExceedsFile { count, remaining });
    }
    Ok(count)
}

fn read_entry(
    cursor: &mut Cursor<'_>,
    cipher: &Aes256Gcm,
    index: usize,
) -> Result<Entry, PackError> {
    let nonce = cursor.take(NONCE_BYTES, || format!("entry {index}'s nonce"))?;
    let length = u32_at(cursor.take(4, || format!("entry {index}'s length"))?);
    let min = MIN_ENTRY_BYTES - NONCE_BYTES - 4;
    if length < min {
        return Err(PackError::LengthTooSmall { index, length, min });
    }
    let remaining = cursor.remaining();
    if length > remaining {
        return Err(PackError::LengthExceedsFile {
            index,
            length,
            remaining,
        });
    }
    let ciphertext = cursor.take(length, || format!("entry {index}'s ciphertext"))?;
    let mut nonce_bytes = [0u8; NONCE_BYTES];
    nonce_bytes.copy_from_slice(nonce);
    let aad = (index as u32).to_le_bytes();
    let plaintext = cipher
        .decrypt(
            &Nonce::from(nonce_bytes),
            Payload {
                msg: ciphertext,
                aad: &aad,
            },
        )
        .map_err(|_| {
            if index == 0 {
                PackError::WrongKey
            } else {
                PackError::Tampered { index }
            }
        })?;
    debug_assert_eq!(plaintext.len() + TAG_BYTES, length);
    split_plaintext(plaintext, index)
}

/// `u16 path length · path · content` into an entry whose path passes the rule.
fn split_plaintext(mut plaintext: Vec<u8>, index: usize) -> Result<Entry, PackError> {
    let available = plaintext.len().saturating_sub(2);
    let length = match plaintext.get(..2) {
        Some(prefix) => usize::from(u16::from_le_bytes([prefix[0], prefix[1]])),
        None => {
            return Err(PackError::PathLengthExceedsEntry {
                index,
                length: 2,
                available: plaintext.len(),
            });
        }
    };
    if length > available {
        return Err(PackError::PathLengthExceedsEntry {
            index,
            length,
            available,
        });
    }
    let content = plaintext.split_off(2 + length);
    let path =
        String::from_utf8(plaintext.split_off(2)).map_err(|_| PackError::PathNotUtf8 { index })?;
    if let Some(problem) = path_problem(&path) {
        return Err(PackError::InvalidPath {
            index,
            path,
            problem,
        });
    }
    Ok(Entry { path, content })
}
