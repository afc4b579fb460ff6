//! The DMPK layout, its limits, the entry-path rule and every way a pack is refused.
//!
//! ```text
//! header   "DMPK" · u8 version (2) · 3 zero bytes · u32 count        12 bytes
//! entry i  12-byte nonce · u32 length · AES-256-GCM ciphertext (length bytes, tag included)
//!          AAD: i as u32; plaintext: u16 path length · path (UTF-8) · content
//! ```
//!
//! Little-endian throughout. The entry index in the AAD ties each entry to its place, so
//! entries cannot be reordered, dropped from the middle or copied between slots unnoticed;
//! the count in the header and the end of the file bound the rest (trailing bytes and short
//! files are refused). Errors say what is wrong and where, and never carry key or content.

/// The first four bytes of every pack.
pub(super) const MAGIC: &[u8; 4] = b"DMPK";
/// The one format version this build reads and writes.
pub const VERSION: u8 = 2;
/// Bytes before the first entry.
pub const HEADER_BYTES: usize = 12;
/// A nonce per entry (AES-GCM's 96 bits).
pub const NONCE_BYTES: usize = 12;
/// The authentication tag AES-GCM appends to each ciphertext.
pub const TAG_BYTES: usize = 16;
/// The smallest entry: nonce, length, tag, path length and a one-byte path.
pub(super) const MIN_ENTRY_BYTES: usize = NONCE_BYTES + 4 + TAG_BYTES + 2 + 1;
/// Entries one pack may hold.
pub const MAX_ENTRIES: usize = 10_000;
/// The largest pack, in bytes (64 MiB).
pub const MAX_PACK_BYTES: usize = 64 * 1024 * 1024;

/// One file of a pack: its path under the packed folder and its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    /// `/`-separated, relative, no hidden or `..` component ([`path_problem`]).
    pub path: String,
    pub content: Vec<u8>,
}

// Content stays out of debug output: a pack's files are confidential.
impl std::fmt::Debug for Entry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Entry")
            .field("path", &self.path)
            .field("bytes", &self.content.len())
            .finish()
    }
}

/// Why a pack was not opened (or not written). Every message names the offset or the entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PackError {
    #[error("the pack is {size} bytes; a pack holds at most {MAX_PACK_BYTES} bytes (64 MiB)")]
    TooLarge { size: usize },
    #[error("the pack is truncated: it ends at byte {size} inside {part}")]
    Truncated { size: usize, part: String },
    #[error("the pack does not start with \"DMPK\": it is not a workflows pack")]
    BadMagic,
    #[error("the pack has format version {0}; this build reads version {VERSION}")]
    UnsupportedVersion(u8),
    #[error("the pack header's reserved bytes 5 to 7 are not zero: the header was changed")]
    BadPadding,
    #[error("the pack header counts {count} entries; a pack holds at most {MAX_ENTRIES}")]
    TooManyEntries { count: usize },
    #[error(
        "the pack header counts {count} entries, more than the {remaining} bytes after the header can hold"
    )]
    CountExceedsFile { count: usize, remaining: usize },
    #[error(
        "entry {index}'s length {length} exceeds the {remaining} bytes left in the pack after its nonce and length"
    )]
    LengthExceedsFile {
        index: usize,
        length: usize,
        remaining: usize,
    },
    #[error("entry {index}'s length {length} is below the {min} bytes of the smallest entry")]
    LengthTooSmall {
        index: usize,
        length: usize,
        min: usize,
    },
    #[error(
        "the key does not open this pack: the first entry fails to decrypt (a wrong key, or entry 0 was changed)"
    )]
    WrongKey,
    #[error(
        "entry {index} fails authentication: its nonce, length or ciphertext was changed or corrupted"
    )]
    Tampered { index: usize },
    #[error("entry {index}'s path length {length} exceeds the {available} bytes it decrypts to")]
    PathLengthExceedsEntry {
        index: usize,
        length: usize,
        available: usize,
    },
    #[error("entry {index}'s path is not UTF-8")]
    PathNotUtf8 { index: usize },
    #[error("entry {index}'s path {path:?} {problem}")]
    InvalidPath {
        index: usize,
        path: String,
        problem: &'static str,
    },
    #[error("entry {second} repeats the path {path:?} of entry {first}")]
    RepeatedPath {
        path: String,
        first: usize,
        second: usize,
    },
    #[error("{count} bytes follow the last of the pack's {entries} entries")]
    TrailingBytes { count: usize, entries: usize },
    #[error("AES-GCM refused to encrypt entry {index}")]
    Encrypt { index: usize },
    #[error("no random nonce could be drawn: {0}")]
    Random(String),
}

/// What is wrong with a pack path, completing "the path ...": `None` when it is acceptable.
/// The same rule serves reader and writer, so a packed folder's paths always read back.
pub fn path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("is empty");
    }
    if path.starts_with('/') {
        return Some("is absolute");
    }
    if path.contains('\\') {
        return Some("contains a backslash (paths are /-separated)");
    }
    if path.chars().any(char::is_control) {
        return Some("contains a control character");
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.contains(&"..") {
        return Some("has a `..` component");
    }
    if parts.iter().any(|part| part.is_empty()) {
        return Some("has an empty component");
    }
    if parts.iter().any(|part| part.starts_with('.')) {
        return Some("is hidden (a component starts with `.`)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_rule_names_each_fault() {
        for (path, problem) in [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("a\\b.js", "contains a backslash (paths are /-separated)"),
            ("a\nb.js", "contains a control character"),
            ("a/../b.js", "has a `..` component"),
            ("..", "has a `..` component"),
            ("a//b.js", "has an empty component"),
            ("a/", "has an empty component"),
            (".env", "is hidden (a component starts with `.`)"),
            ("a/.git/config", "is hidden (a component starts with `.`)"),
        ] {
            assert_eq!(path_problem(path), Some(problem), "{path:?}");
        }
        for path in ["flow.js", "prompts/review.md", "a/b/c.d.e"] {
            assert_eq!(path_problem(path), None, "{path:?}");
        }
    }

    #[test]
    fn an_entry_never_shows_its_content() {
        let entry = Entry {
            path: "a.js".into(),
            content: b"secret text".to_vec(),
        };
        let shown = format!("{entry:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("a.js") && shown.contains("11"), "{shown}");
    }
}
