//! Writing a pack: the entries as given (the caller sorts them), each under a fresh random
//! nonce. The writer refuses what the reader would refuse (a bad or repeated path, too many
//! entries, a pack over the cap), so every pack it writes opens again with the same key.

use std::collections::HashSet;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};

use super::format::{
    Entry, HEADER_BYTES, MAGIC, MAX_ENTRIES, MAX_PACK_BYTES, NONCE_BYTES, PackError, TAG_BYTES,
    VERSION, path_problem,
};
use super::key::PackKey;

/// The pack of `entries` under `key`, in the order given.
pub(crate) fn seal(entries: &[Entry], key: &PackKey) -> Result<Vec<u8>, PackError> {
    if entries.len() > MAX_ENTRIES {
        return Err(PackError::TooManyEntries {
            count: entries.len(),
        });
    }
    check_paths(entries)?;
    let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(*key.bytes()));
    let mut pack = Vec::with_capacity(HEADER_BYTES);
    pack.extend_from_slice(MAGIC);
    pack.extend_from_slice(&[VERSION, 0, 0, 0]);
    pack.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (index, entry) in entries.iter().enumerate() {
        let path_length = u16::try_from(entry.path.len()).map_err(|_| PackError::InvalidPath {
            index,
            path: entry.path.clone(),
            problem: "is longer than 65,535 bytes",
        })?;
        check_size(pack.len(), entry)?;
        let mut plaintext = Vec::with_capacity(2 + entry.path.len() + entry.content.len());
        plaintext.extend_from_slice(&path_length.to_le_bytes());
        plaintext.extend_from_slice(entry.path.as_bytes());
        plaintext.extend_from_slice(&entry.content);
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|error| PackError::Random(error.to_string()))?;
        let aad = (index as u32).to_le_bytes();
        let ciphertext = cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| PackError::Encrypt { index })?;
        debug_assert_eq!(ciphertext.len(), plaintext.len() + TAG_BYTES);
        pack.extend_from_slice(&nonce);
        pack.extend_from_slice(&(ciphertext.len() as u32).to_le_bytes());
        pack.extend_from_slice(&ciphertext);
    }
    Ok(pack)
}

/// Refuses `entry` if appending it to a pack of `current` bytes would pass the cap; checked
/// before anything is encrypted, so an oversized folder fails at once.
fn check_size(current: usize, entry: &Entry) -> Result<(), PackError> {
    let size = current + NONCE_BYTES + 4 + 2 + entry.path.len() + entry.content.len() + TAG_BYTES;
    if size > MAX_PACK_BYTES {
        return Err(PackError::TooLarge { size });
    }
    Ok(())
}

fn check_paths(entries: &[Entry]) -> Result<(), PackError> {
    let mut seen = HashSet::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        if let Some(problem) = path_problem(&entry.path) {
            return Err(PackError::InvalidPath {
                index,
                path: entry.path.clone(),
                problem,
            });
        }
        if !seen.insert(entry.path.as_str()) {
            let first = entries
                .iter()
                .position(|other| other.path == entry.path)
                .unwrap_or(index);
            return Err(PackError::RepeatedPath {
                path: entry.path.clone(),
                first,
                second: index,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_cap_holds_at_its_edge() {
        // A one-byte path and this much content make a pack of exactly the cap.
        let fits = MAX_PACK_BYTES - HEADER_BYTES - NONCE_BYTES - 4 - TAG_BYTES - 2 - 1;
        let mut entry = Entry {
            path: "b".into(),
            content: vec![b'x'; fits],
        };
        assert_eq!(check_size(HEADER_BYTES, &entry), Ok(()));
        entry.content.push(b'x');
        assert_eq!(
            check_size(HEADER_BYTES, &entry),
            Err(PackError::TooLarge {
                size: MAX_PACK_BYTES + 1
            })
        );
        let key = PackKey::generate().unwrap();
        assert_eq!(
            seal(&[entry], &key),
            Err(PackError::TooLarge {
                size: MAX_PACK_BYTES + 1
            })
        );
    }
}
