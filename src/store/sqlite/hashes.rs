//! Call hashes as they are stored: a hash of 64 lowercase hex digits (every hash the engine
//! makes, a SHA-256) is kept as its 32 bytes, halving the two hash columns of each `calls`
//! row, which a replay writes densely (docs/store.md has the figures); any other text is
//! kept as text. A read gives back the text that was written, byte for byte: the hex of a
//! 32-byte blob is lowercase, and only lowercase hex is turned into a blob.

use rusqlite::types::{ToSqlOutput, Value, ValueRef};

/// The length of a hash kept as bytes, and twice that the length of its hex text.
const HASH_BYTES: usize = 32;

/// What a hash is stored as: its bytes when it is 64 lowercase hex digits, else its text.
pub(super) fn stored(hash: &str) -> ToSqlOutput<'_> {
    match decode(hash) {
        Some(bytes) => ToSqlOutput::Owned(Value::Blob(bytes)),
        None => ToSqlOutput::Borrowed(ValueRef::Text(hash.as_bytes())),
    }
}

/// [`stored`] of a hash that may be absent.
pub(super) fn stored_optional(hash: Option<&str>) -> ToSqlOutput<'_> {
    hash.map_or(ToSqlOutput::Owned(Value::Null), stored)
}

/// The hash text of a stored value; `Err` names what the value was instead.
pub(super) fn read(value: ValueRef<'_>) -> Result<String, String> {
    match value {
        ValueRef::Text(text) => String::from_utf8(text.to_vec())
            .map_err(|error| format!("expected UTF-8 hash text: {error}")),
        ValueRef::Blob(bytes) if bytes.len() == HASH_BYTES => Ok(encode(bytes)),
        ValueRef::Blob(bytes) => Err(format!(
            "expected a hash of {HASH_BYTES} bytes, found {} bytes",
            bytes.len()
        )),
        other => Err(format!(
            "expected a hash as text or bytes, found {:?}",
            other.data_type()
        )),
    }
}

/// [`read`] of a column that may be NULL.
pub(super) fn read_optional(value: ValueRef<'_>) -> Result<Option<String>, String> {
    match value {
        ValueRef::Null => Ok(None),
        other => read(other).map(Some),
    }
}

fn decode(hash: &str) -> Option<Vec<u8>> {
    let digits = hash.as_bytes();
    if digits.len() != 2 * HASH_BYTES {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// The value of a lowercase hex digit; uppercase is not one, since it would not read back
/// as written.
fn digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{read, read_optional, stored, stored_optional};
    use rusqlite::types::{ToSqlOutput, Value, ValueRef};

    fn as_value(output: ToSqlOutput<'_>) -> Value {
        match output {
            ToSqlOutput::Owned(value) => value,
            ToSqlOutput::Borrowed(value) => Value::from(
                rusqlite::types::FromSql::column_result(value)
                    .map(|text: String| text)
                    .expect("text"),
            ),
            other => panic!("unexpected output {other:?}"),
        }
    }

    fn round_trip(hash: &str) -> (Value, String) {
        let value = as_value(stored(hash));
        let back = read(ValueRef::from(&value)).expect("reads back");
        (value, back)
    }

    #[test]
    fn lowercase_sha256_hex_is_stored_as_32_bytes_and_reads_back() {
        let hash = "00ff10a9b8c7d6e5f4030201aabbccddeeff0123456789abcdef0123456789ab";
        let (value, back) = round_trip(hash);
        assert!(matches!(&value, Value::Blob(bytes) if bytes.len() == 32 && bytes[1] == 0xff));
        assert_eq!(back, hash);
    }

    /// The edges of the rule: 64 digits become bytes; 63, 65, uppercase or non-hex text stay
    /// text, so every one of them reads back exactly.
    #[test]
    fn any_other_text_is_stored_as_text() {
        let hex64 = "a".repeat(64);
        assert!(matches!(round_trip(&hex64).0, Value::Blob(_)));
        for hash in [
            "a".repeat(63),
            "a".repeat(65),
            "A".repeat(64),
            format!("{}g", "a".repeat(63)),
            String::new(),
            "cafe".to_owned(),
            "é".repeat(32),
        ] {
            let (value, back) = round_trip(&hash);
            assert!(matches!(value, Value::Text(_)), "{hash:?} stays text");
            assert_eq!(back, hash);
        }
    }

    #[test]
    fn absent_hashes_stay_null_and_bad_values_are_named() {
        assert_eq!(as_value(stored_optional(None)), Value::Null);
        assert_eq!(read_optional(ValueRef::Null).unwrap(), None);
        let short = read(ValueRef::Blob(&[1; 31])).unwrap_err();
        assert!(short.contains("32 bytes, found 31 bytes"), "{short}");
        let integer = read(ValueRef::Integer(7)).unwrap_err();
        assert!(integer.contains("text or bytes"), "{integer}");
    }
}
