//! Credential redaction for everything a run shows (events, status previews, logs).
//!
//! Secrets are replaced by [`REDACTED`]. The scanner is hand written (no regex engine) as a few
//! left-to-right passes, each linear in the input, applied in this order:
//!
//! 1. PEM private key blocks, `-----BEGIN … PRIVATE KEY-----` to the matching `-----END …-----`
//!    (an unterminated block is redacted to the end of the text).
//! 2. `Bearer <token>` and `Basic <base64>` with a case-insensitive scheme; the scheme word stays.
//!    To keep prose such as "a Bearer token" or "Basic usage" intact, a bearer token must look
//!    like one (a digit, one of `._~+/=`, mixed case, or 20+ characters) and a basic credential
//!    must decode to printable `user:password`.
//! 3. JWTs: three base64url segments separated by dots, the first starting `eyJ`.
//! 4. URL userinfo with a password: `scheme://user:pass@host` becomes `scheme://[REDACTED]@host`.
//!    A bare user (`ssh://git@host`) is kept; a token used as the user is caught by pass 5.
//! 5. Words made of `[A-Za-z0-9_-]`: known token prefixes (`ghp_`, `sk-`, `AKIA`, … followed by
//!    16+ token characters with a digit or an uppercase letter) and opaque tokens of 32+
//!    characters containing both a letter and a digit. Kept on purpose: UUIDs (8-4-4-4-12 hex,
//!    they are ids), lowercase hex of exactly 40 or 64 characters (git and sha256 digests the UI
//!    must show), and dashed or underscored slugs whose every piece is shorter than 16
//!    characters (file names, branch names, snake_case identifiers). Base64 with `+` or `/` is
//!    split into several words by this pass and may survive it.
//! 6. Key/value pairs whose key names a secret (see [`is_secret_key`]): `key=value`,
//!    `key: value`, `"key":"value"`, `key='value'`. Only the value is replaced. `authorization`
//!    and `cookie` values run to the end of the line (or a quote), as in HTTP headers; other
//!    unquoted values end at whitespace or punctuation. `null`, `true`, `false`, `{`, `[` values
//!    and comparisons (`==`, `=>`, `::`) are left alone.
//!
//! Redaction is idempotent: `[REDACTED]` itself never matches a pass, so redacting twice gives
//! the same text as redacting once.

use serde_json::{Map, Value};

/// The text that replaces a secret.
pub(crate) const REDACTED: &str = "[REDACTED]";

/// Redacts credentials in free text; the flag says whether anything was replaced.
pub(crate) fn redact_text(text: &str) -> (String, bool) {
    if cannot_hold_secret(text) {
        return (text.to_owned(), false);
    }
    run_passes(text)
}

/// Every pass, in order, over `text`.
fn run_passes(text: &str) -> (String, bool) {
    let mut changed = false;
    let mut current = std::borrow::Cow::Borrowed(text);
    for pass in [
        redact_pem as fn(&str) -> Option<String>,
        redact_auth_schemes,
        redact_jwts,
        redact_url_userinfo,
        redact_words,
        redact_key_values,
    ] {
        if let Some(next) = pass(&current) {
            changed = true;
            current = std::borrow::Cow::Owned(next);
        }
    }
    (current.into_owned(), changed)
}

/// The shortest word pass 5 can redact: the shortest known prefix and 16 token characters
/// (an opaque token needs 32).
const SHORTEST_SECRET_WORD: usize = 3 + 16;

/// Whether no pass can match `text`, decided in one scan without building anything; most
/// texts of an event (keys, labels, phases, model names, indexes) are like that, and each
/// event redacts every one of them. Each pass needs something this rules out:
/// pass 1 `-----BEGIN ` and pass 2 `Bearer `/`Basic ` a `b`/`B` and a space or tab, pass 3
/// a `.`, pass 4 `://` and pass 6 a `=` or `:`, pass 5 a word of [`SHORTEST_SECRET_WORD`]
/// word bytes. A text that passes this check is returned as it is, as every pass would.
fn cannot_hold_secret(text: &str) -> bool {
    let mut run = 0usize;
    let (mut blank, mut letter_b) = (false, false);
    for &byte in text.as_bytes() {
        if is_word_byte(byte) {
            run += 1;
            if run >= SHORTEST_SECRET_WORD {
                return false;
            }
            letter_b |= byte == b'b' || byte == b'B';
            continue;
        }
        run = 0;
        match byte {
            b'=' | b':' | b'.' => return false,
            b' ' | b'\t' => blank = true,
            _ => {}
        }
    }
    !(blank && letter_b)
}

/// Redacts every string (object keys included) in a JSON value, and replaces wholesale the value
/// of any object member whose key names a secret. `null`, booleans and empty strings under such
/// keys carry nothing to hide and are kept.
pub(crate) fn redact_value(value: &Value) -> (Value, bool) {
    let mut changed = false;
    let redacted = redact_value_inner(value, &mut changed);
    (redacted, changed)
}

/// Whether an object key or `key=value` key names a secret.
///
/// The key is lowercased and stripped of `_` and `-` (so `api_key`, `api-key` and `apiKey` are
/// alike), then searched for password, passwd, passphrase, secret, apikey, credential,
/// authorization, cookie, privatekey or token. A `token` immediately followed by `s`, `count`,
/// `usage`, `budget` or `limit` is a token count (`inputTokens`, `max_tokens`, `tokenUsage`),
/// not a credential, and does not count.
pub(crate) fn is_secret_key(key: &str) -> bool {
    const WORDS: [&str; 9] = [
        "password",
        "passwd",
        "passphrase",
        "secret",
        "apikey",
        "credential",
        "authorization",
        "cookie",
        "privatekey",
    ];
    const COUNTING: [&str; 5] = ["s", "count", "usage", "budget", "limit"];
    let names = |bytes: &[u8]| {
        // Keys are short, so trying each word at each position is cheaper than building a
        // substring searcher per word, which `str::contains` does on every call; this runs
        // for every key of every event.
        (0..bytes.len()).any(|at| {
            let rest = &bytes[at..];
            if WORDS.iter().any(|word| rest.starts_with(word.as_bytes())) {
                return true;
            }
            rest.strip_prefix(b"token".as_slice()).is_some_and(|after| {
                !COUNTING
                    .iter()
                    .any(|suffix| after.starts_with(suffix.as_bytes()))
            })
        })
    };
    // An ASCII key of event size is normalized on the stack; any other takes a string
    // (Unicode lowercasing may change a character's length).
    let mut buffer = [0u8; 64];
    if key.is_ascii() && key.len() <= buffer.len() {
        let mut len = 0;
        for byte in key.bytes().filter(|byte| *byte != b'_' && *byte != b'-') {
            buffer[len] = byte.to_ascii_lowercase();
            len += 1;
        }
        return names(&buffer[..len]);
    }
    let normalized: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    names(normalized.as_bytes())
}

fn redact_value_inner(value: &Value, changed: &mut bool) -> Value {
    match value {
        Value::String(text) => {
            let (text, did) = redact_text(text);
            *changed |= did;
            Value::String(text)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| redact_value_inner(item, changed))
                .collect(),
        ),
        Value::Object(members) => {
            let mut out = Map::with_capacity(members.len());
            for (key, member) in members {
                let (key_text, key_changed) = redact_text(key);
                *changed |= key_changed;
                let member = if secret_member(key, member) {
                    *changed = true;
                    Value::String(REDACTED.to_owned())
                } else {
                    redact_value_inner(member, changed)
                };
                out.insert(key_text, member);
            }
            Value::Object(out)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

/// Whether an object member is replaced wholesale: its key names a secret and its value
/// carries something (see [`redact_value`]).
pub(crate) fn secret_member(key: &str, member: &Value) -> bool {
    is_secret_key(key) && carries_secret(member)
}

fn carries_secret(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) => false,
        Value::String(text) => !text.is_empty() && text != REDACTED,
        Value::Number(_) | Value::Array(_) | Value::Object(_) => true,
    }
}

/// Accumulates the output of one pass, copying untouched input lazily.
struct Rewriter<'a> {
    input: &'a str,
    out: String,
    copied_to: usize,
    changed: bool,
}

impl<'a> Rewriter<'a> {
    fn new(input: &'a str) -> Self {
        Rewriter {
            input,
            out: String::new(),
            copied_to: 0,
            changed: false,
        }
    }

    /// Replaces `input[start..end]` by [`REDACTED`]; ranges must come in increasing order.
    fn redact(&mut self, start: usize, end: usize) {
        if !self.changed {
            self.out.reserve(self.input.len());
        }
        self.out.push_str(&self.input[self.copied_to..start]);
        self.out.push_str(REDACTED);
        self.copied_to = end;
        self.changed = true;
    }

    fn finish(mut self) -> Option<String> {
        if !self.changed {
            return None;
        }
        self.out.push_str(&self.input[self.copied_to..]);
        Some(self.out)
    }
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

fn starts_with_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.len() >= needle.len() && haystack[..needle.len()].eq_ignore_ascii_case(needle)
}

/// Pass 1: PEM private key blocks.
fn redact_pem(text: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN ";
    let mut rewriter = Rewriter::new(text);
    let mut from = 0;
    while let Some(found) = text[from..].find(BEGIN) {
        let start = from + found;
        let label_start = start + BEGIN.len();
        // The label ends at the next `-----` on the same line; labels are short, and a bounded
        // window keeps a text full of `-----BEGIN ` without a label linear.
        let mut window_end = (label_start + 64).min(text.len());
        while !text.is_char_boundary(window_end) {
            window_end -= 1;
        }
        let window = &text[label_start..window_end];
        let window = window.split('\n').next().unwrap_or_default();
        let Some(label_len) = window.find("-----") else {
            from = label_start;
            continue;
        };
        if !text[label_start..label_start + label_len].ends_with("PRIVATE KEY") {
            from = label_start;
            continue;
        }
        let body_start = label_start + label_len + 5;
        let end = match text[body_start..].find("-----END ") {
            Some(at) => {
                let end_label = body_start + at + "-----END ".len();
                match text[end_label..].find("-----") {
                    Some(close) => end_label + close + 5,
                    None => text.len(),
                }
            }
            None => text.len(),
        };
        rewriter.redact(start, end);
        from = end;
    }
    rewriter.finish()
}

/// Pass 2: `Bearer <token>` and `Basic <credentials>`.
fn redact_auth_schemes(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut rewriter = Rewriter::new(text);
    let mut index = 0;
    while index < bytes.len() {
        let at_word_start = index == 0 || !bytes[index - 1].is_ascii_alphanumeric();
        let scheme = if !at_word_start {
            None
        } else if starts_with_ignore_case(&bytes[index..], b"bearer") {
            Some((6, true))
        } else if starts_with_ignore_case(&bytes[index..], b"basic") {
            Some((5, false))
        } else {
            None
        };
        let Some((scheme_len, bearer)) = scheme else {
            index += 1;
            continue;
        };
        let mut token_start = index + scheme_len;
        while token_start < bytes.len()
            && (bytes[token_start] == b' ' || bytes[token_start] == b'\t')
        {
            token_start += 1;
        }
        if token_start == index + scheme_len {
            index += scheme_len;
            continue;
        }
        let token_end = if bearer {
            scan_bearer_token(bytes, token_start)
        } else {
            scan_basic_credentials(bytes, token_start)
        };
        if let Some(token_end) = token_end {
            rewriter.redact(token_start, token_end);
            index = token_end;
        } else {
            index = token_start;
        }
    }
    rewriter.finish()
}

/// The end of a plausible bearer token starting at `start`, if there is one.
fn scan_bearer_token(bytes: &[u8], start: usize) -> Option<usize> {
    let mut end = start;
    while end < bytes.len()
        && (bytes[end].is_ascii_alphanumeric() || b"-._~+/".contains(&bytes[end]))
    {
        end += 1;
    }
    while end < bytes.len() && bytes[end] == b'=' {
        end += 1;
    }
    // A sentence may end right after the token.
    while end > start && bytes[end - 1] == b'.' {
        end -= 1;
    }
    let token = &bytes[start..end];
    if token.is_empty() {
        return None;
    }
    let has_digit_or_symbol = token
        .iter()
        .any(|b| b.is_ascii_digit() || b"._~+/=".contains(b));
    let inner_upper = token[1..].iter().any(u8::is_ascii_uppercase);
    let has_lower = token.iter().any(u8::is_ascii_lowercase);
    let looks_secret = has_digit_or_symbol || (inner_upper && has_lower) || token.len() >= 20;
    looks_secret.then_some(end)
}

/// The end of base64 `user:password` credentials starting at `start`, if they decode as such.
fn scan_basic_credentials(bytes: &[u8], start: usize) -> Option<usize> {
    let mut end = start;
    while end < bytes.len()
        && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'+' || bytes[end] == b'/')
    {
        end += 1;
    }
    let data_end = end;
    while end < bytes.len() && bytes[end] == b'=' {
        end += 1;
    }
    let decoded = decode_base64(&bytes[start..data_end])?;
    let printable = decoded.iter().all(|b| (0x20..0x7f).contains(b));
    (printable && decoded.contains(&b':')).then_some(end)
}

/// Standard base64 without padding; `None` for an impossible length.
fn decode_base64(data: &[u8]) -> Option<Vec<u8>> {
    fn sextet(byte: u8) -> u32 {
        match byte {
            b'A'..=b'Z' => u32::from(byte - b'A'),
            b'a'..=b'z' => u32::from(byte - b'a') + 26,
            b'0'..=b'9' => u32::from(byte - b'0') + 52,
            b'+' => 62,
            _ => 63,
        }
    }
    if data.len() < 4 || data.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for chunk in data.chunks(4) {
        let mut accumulator = 0u32;
        for (position, byte) in chunk.iter().enumerate() {
            accumulator |= sextet(*byte) << (18 - 6 * position);
        }
        let produced = chunk.len() - 1;
        for position in 0..produced {
            out.push((accumulator >> (16 - 8 * position)) as u8);
        }
    }
    Some(out)
}

/// Pass 3: JSON Web Tokens.
fn redact_jwts(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut rewriter = Rewriter::new(text);
    let mut from = 0;
    while let Some(found) = text[from..].find("eyJ") {
        let start = from + found;
        if start > 0 && (is_word_byte(bytes[start - 1]) || bytes[start - 1] == b'.') {
            from = start + 3;
            continue;
        }
        let segment_end = |begin: usize| {
            let mut end = begin;
            while end < bytes.len() && is_word_byte(bytes[end]) {
                end += 1;
            }
            end
        };
        let first_end = segment_end(start);
        let is_jwt_shape = first_end - start >= 10
            && bytes.get(first_end) == Some(&b'.')
            && segment_end(first_end + 1) > first_end + 1
            && bytes.get(segment_end(first_end + 1)) == Some(&b'.');
        if !is_jwt_shape {
            from = first_end.max(start + 3);
            continue;
        }
        let second_end = segment_end(first_end + 1);
        let end = segment_end(second_end + 1);
        rewriter.redact(start, end);
        from = end;
    }
    rewriter.finish()
}

/// Pass 4: `scheme://user:password@host`.
fn redact_url_userinfo(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut rewriter = Rewriter::new(text);
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let separator = from + found;
        let userinfo_start = separator + 3;
        from = userinfo_start;
        let has_scheme = separator > 0 && bytes[separator - 1].is_ascii_alphanumeric();
        if !has_scheme {
            continue;
        }
        let mut end = userinfo_start;
        while end < bytes.len()
            && !bytes[end].is_ascii_whitespace()
            && !b"/?#@\"'<>`[]".contains(&bytes[end])
        {
            end += 1;
        }
        if end < bytes.len() && bytes[end] == b'@' && text[userinfo_start..end].contains(':') {
            rewriter.redact(userinfo_start, end);
            from = end;
        }
    }
    rewriter.finish()
}

/// Pass 5: known token prefixes and opaque tokens, word by word.
fn redact_words(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut rewriter = Rewriter::new(text);
    let mut index = 0;
    while index < bytes.len() {
        if !is_word_byte(bytes[index]) {
            index += 1;
            continue;
        }
        let start = index;
        while index < bytes.len() && is_word_byte(bytes[index]) {
            index += 1;
        }
        let word = &text[start..index];
        if has_known_prefix(word) || is_opaque_token(word) {
            rewriter.redact(start, index);
        }
    }
    rewriter.finish()
}

/// Prefixes of tokens pass 5 redacts, when 16 token characters follow.
const PREFIXES: [&str; 14] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "sk-ant-",
    "sk-",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "ASIA",
    "AIza",
    "glpat-",
    "npm_",
];

fn has_known_prefix(word: &str) -> bool {
    PREFIXES.iter().any(|prefix| {
        word.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= 16
                && rest
                    .bytes()
                    .any(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        })
    })
}

fn is_opaque_token(word: &str) -> bool {
    if word.len() < 32 {
        return false;
    }
    let bytes = word.as_bytes();
    let has_letter = bytes.iter().any(u8::is_ascii_alphabetic);
    let has_digit = bytes.iter().any(u8::is_ascii_digit);
    if !has_letter || !has_digit || is_uuid(word) || is_lower_hex_digest(word) {
        return false;
    }
    let longest_piece = word
        .split(['-', '_'])
        .map(str::len)
        .max()
        .unwrap_or_default();
    longest_piece >= 16
}

fn is_uuid(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() == 36
        && bytes
            .iter()
            .enumerate()
            .all(|(position, byte)| match position {
                8 | 13 | 18 | 23 => *byte == b'-',
                _ => byte.is_ascii_hexdigit(),
            })
}

fn is_lower_hex_digest(word: &str) -> bool {
    (word.len() == 40 || word.len() == 64)
        && word
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Pass 6: `key=value`, `key: value` and quoted variants with a secret-naming key.
fn redact_key_values(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut rewriter = Rewriter::new(text);
    let mut index = 0;
    while index < bytes.len() {
        let separator = bytes[index];
        if separator != b'=' && separator != b':' {
            index += 1;
            continue;
        }
        let next = bytes.get(index + 1).copied();
        let previous = index.checked_sub(1).map(|at| bytes[at]);
        let is_operator = match separator {
            b'=' => matches!(next, Some(b'=' | b'>' | b'~')),
            _ => next == Some(b':') || previous == Some(b':'),
        };
        let key = if is_operator {
            None
        } else {
            key_before(bytes, index)
        };
        let Some(key) = key.filter(|key| is_secret_key(&text[key.clone()])) else {
            index += 1;
            continue;
        };
        let whole_line = {
            let key = text[key].to_ascii_lowercase();
            key.contains("authorization") || key.contains("cookie")
        };
        match value_after(bytes, index + 1, whole_line) {
            Some((start, end)) => {
                rewriter.redact(start, end);
                index = end;
            }
            None => index += 1,
        }
    }
    rewriter.finish()
}

/// The key that ends just before the separator at `separator`: optional spaces, an optional
/// closing quote (plain or backslash-escaped), then a run of key characters.
fn key_before(bytes: &[u8], separator: usize) -> Option<std::ops::Range<usize>> {
    let mut end = separator;
    while end > 0 && (bytes[end - 1] == b' ' || bytes[end - 1] == b'\t') {
        end -= 1;
    }
    if end > 0 && (bytes[end - 1] == b'"' || bytes[end - 1] == b'\'') {
        end -= 1;
        if end > 0 && bytes[end - 1] == b'\\' {
            end -= 1;
        }
    }
    let mut start = end;
    while start > 0 && (is_word_byte(bytes[start - 1]) || bytes[start - 1] == b'.') {
        start -= 1;
    }
    (start < end).then_some(start..end)
}

/// The byte range of the value that starts after the separator, if it is one worth redacting.
fn value_after(bytes: &[u8], after_separator: usize, whole_line: bool) -> Option<(usize, usize)> {
    let mut start = after_separator;
    while start < bytes.len() && (bytes[start] == b' ' || bytes[start] == b'\t') {
        start += 1;
    }
    let rest = &bytes[start..];
    if rest.starts_with(REDACTED.as_bytes()) {
        return None;
    }
    let line_end = |from: usize| {
        let mut end = from;
        while end < bytes.len() && bytes[end] != b'\n' && bytes[end] != b'\r' {
            end += 1;
        }
        end
    };
    // Quoted values: `"…"`, `'…'` or a backslash-escaped `\"…\"` inside serialized JSON.
    let quote = match rest {
        [b'\\', b'"', ..] => Some(&b"\\\""[..]),
        [b'"', ..] => Some(&b"\""[..]),
        [b'\'', ..] => Some(&b"'"[..]),
        _ => None,
    };
    if let Some(quote) = quote {
        let content_start = start + quote.len();
        let mut end = content_start;
        loop {
            if end >= bytes.len() || bytes[end] == b'\n' {
                // Unterminated: hide the rest of the line.
                let end = line_end(content_start);
                let content = &bytes[content_start..end];
                let worth = !content.is_empty() && content != REDACTED.as_bytes();
                return worth.then_some((content_start, end));
            }
            if bytes[end..].starts_with(quote) {
                break;
            }
            if quote.len() == 1 && bytes[end] == b'\\' {
                end += 2;
                continue;
            }
            end += 1;
        }
        let end = end.min(bytes.len());
        let content = &bytes[content_start..end];
        if content.is_empty() || content == REDACTED.as_bytes() {
            return None;
        }
        return Some((content_start, end));
    }
    let end = if whole_line {
        let mut end = start;
        while end < bytes.len() && !b"\n\r\"'`".contains(&bytes[end]) {
            end += 1;
        }
        while end > start && (bytes[end - 1] == b' ' || bytes[end - 1] == b'\t') {
            end -= 1;
        }
        end
    } else {
        let mut end = start;
        while end < bytes.len()
            && !bytes[end].is_ascii_whitespace()
            && !b",;&\"'`<>(){}[]".contains(&bytes[end])
        {
            end += 1;
        }
        end
    };
    let value = &bytes[start..end];
    let harmless = value.is_empty()
        || matches!(value, b"null" | b"true" | b"false" | b"None")
        || (!whole_line && matches!(bytes.get(start), Some(b'{' | b'[')));
    (!harmless).then_some((start, end))
}

#[cfg(test)]
mod tests;
