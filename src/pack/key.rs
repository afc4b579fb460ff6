//! The pack key: 32 bytes, written as 64 hexadecimal characters (what `agentprism pack
//! --new-key` prints), with standard padded base64 of the 32 bytes accepted too.
//!
//! The original serve mode's documentation does not say how it writes the key, so this
//! encoding is ours (docs/pack.md): hex is what shells, `.env` files and secret stores pass
//! through unchanged, and base64 is accepted because many secret generators emit it.
//!
//! The key arrives in `MHL_SERVE_WORKFLOWS_KEY`, or as a file: `MHL_SERVE_WORKFLOWS_KEY_FILE`
//! or the systemd credential of that name ([`crate::util::secret`]), so it need never sit in
//! an environment block. `main` takes the variable out of the process environment before the
//! runtime or any thread starts and hands it to [`keep_environment_key`]; from then on only
//! [`workflows_key`] reads it, so no child process inherits it and nothing that lists the
//! environment later sees it. Errors never echo it.

use std::sync::OnceLock;

use base64::Engine as _;

use crate::env::EnvSnapshot;
use crate::util::secret;

/// The variable the key is read from.
pub const WORKFLOWS_KEY_VARIABLE: &str = "MHL_SERVE_WORKFLOWS_KEY";
/// Bytes in a key (AES-256).
pub(super) const KEY_BYTES: usize = 32;

/// The variable's value, taken out of the environment at start-up (`None`: it was not set).
static TAKEN: OnceLock<Option<String>> = OnceLock::new();

/// A 32-byte AES-256-GCM key. Its `Debug` shows nothing of it, and it is wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct PackKey([u8; KEY_BYTES]);

/// Why a key was not accepted. No variant carries the key or a part of it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error(
        "{WORKFLOWS_KEY_VARIABLE} is not set: the pack key comes from that variable, from the file {WORKFLOWS_KEY_VARIABLE}_FILE names, or from the systemd credential {WORKFLOWS_KEY_VARIABLE}"
    )]
    Missing,
    /// The key's file or credential could not be used, or two sources were given.
    #[error("{0}")]
    Source(String),
    #[error("{WORKFLOWS_KEY_VARIABLE} is empty")]
    Empty,
    #[error(
        "{WORKFLOWS_KEY_VARIABLE} is malformed: a key is 64 hexadecimal characters (as `agentprism pack --new-key` prints) or the standard base64 of 32 bytes; the value given has {length} characters and is neither"
    )]
    Malformed { length: usize },
    #[error("no random key could be drawn: {0}")]
    Random(String),
}

impl PackKey {
    /// Reads a key written as 64 hex characters or as base64 of 32 bytes; surrounding
    /// whitespace (a trailing newline from a file) is ignored.
    pub fn parse(text: &str) -> Result<PackKey, KeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        let malformed = || KeyError::Malformed {
            length: text.chars().count(),
        };
        if text.len() == 2 * KEY_BYTES && text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            let mut key = [0u8; KEY_BYTES];
            for (slot, pair) in key.iter_mut().zip(text.as_bytes().chunks(2)) {
                *slot = (hex_digit(pair[0]) << 4) | hex_digit(pair[1]);
            }
            return Ok(PackKey(key));
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| malformed())?;
        let key: [u8; KEY_BYTES] = decoded.as_slice().try_into().map_err(|_| malformed())?;
        Ok(PackKey(key))
    }

    /// A fresh key from the operating system's random source.
    pub(crate) fn generate() -> Result<PackKey, KeyError> {
        let mut key = [0u8; KEY_BYTES];
        getrandom::fill(&mut key).map_err(|error| KeyError::Random(error.to_string()))?;
        Ok(PackKey(key))
    }

    /// The key as 64 lowercase hex characters: what `--new-key` prints.
    pub(crate) fn to_hex(&self) -> String {
        crate::util::hex(&self.0)
    }

    pub(super) fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
}

impl std::fmt::Debug for PackKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("PackKey(hidden)")
    }
}

impl Drop for PackKey {
    fn drop(&mut self) {
        self.0.fill(0);
        // Keeps the wipe from being optimised away as a dead store.
        std::hint::black_box(&self.0);
    }
}

fn hex_digit(byte: u8) -> u8 {
    match byte {
        b'0'..=b'9' => byte - b'0',
        b'a'..=b'f' => byte - b'a' + 10,
        _ => byte - b'A' + 10,
    }
}

/// Keeps the value `main` took out of the environment (the first call wins). Called once,
/// before anything else runs.
pub fn keep_environment_key(value: Option<String>) {
    let _ = TAKEN.set(value);
}

/// The pack key, parsed: what `main` took from [`WORKFLOWS_KEY_VARIABLE`], else the file
/// `MHL_SERVE_WORKFLOWS_KEY_FILE` names, else the systemd credential of that name (two of them
/// at once are refused); [`KeyError::Missing`] when none is given.
pub async fn workflows_key(env: &EnvSnapshot) -> Result<PackKey, KeyError> {
    let taken = TAKEN.get().cloned().flatten();
    match secret::resolve(env, WORKFLOWS_KEY_VARIABLE, taken).await {
        Ok(Some((text, _))) => PackKey::parse(&text),
        Ok(None) => Err(KeyError::Missing),
        Err(error) => Err(KeyError::Source(error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_base64_of_the_same_bytes_are_the_same_key() {
        let key = PackKey::generate().unwrap();
        let hex = key.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(PackKey::parse(&hex).unwrap(), key);
        assert_eq!(PackKey::parse(&hex.to_uppercase()).unwrap(), key);
        assert_eq!(PackKey::parse(&format!("  {hex}\n")).unwrap(), key);
        let base64 = base64::engine::general_purpose::STANDARD.encode(key.bytes());
        assert_eq!(PackKey::parse(&base64).unwrap(), key);
        assert_ne!(PackKey::generate().unwrap(), key);
    }

    #[test]
    fn malformed_keys_are_refused_without_being_echoed() {
        let secret = "z".repeat(64);
        let short_hex = "ab".repeat(31);
        let long_hex = "ab".repeat(33);
        let base64_of_31 = base64::engine::general_purpose::STANDARD.encode([7u8; 31]);
        let base64_of_33 = base64::engine::general_purpose::STANDARD.encode([7u8; 33]);
        for bad in [
            secret.as_str(),
            &short_hex,
            &long_hex,
            &base64_of_31,
            &base64_of_33,
            "not a key",
        ] {
            let error = PackKey::parse(bad).unwrap_err();
            assert!(
                matches!(error, KeyError::Malformed { .. }),
                "{bad}: {error}"
            );
            let message = error.to_string();
            assert!(message.contains("is malformed"), "{message}");
            assert!(!message.contains(bad), "the key is echoed: {message}");
        }
        assert_eq!(PackKey::parse(" \n"), Err(KeyError::Empty));
    }

    #[test]
    fn a_key_shows_nothing_of_itself() {
        let key = PackKey::parse(&"ab".repeat(32)).unwrap();
        assert_eq!(format!("{key:?}"), "PackKey(hidden)");
    }
}
