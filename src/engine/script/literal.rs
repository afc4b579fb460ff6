//! The `meta` literal, read without a JavaScript engine: objects, arrays, strings, templates
//! without substitutions, numbers, `true`, `false` and `null`. Every value keeps the byte
//! offset where it starts, so that a rule broken later (a blank `name`, a repeated phase
//! title) can point at the offending spot.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::lexer::{Cursor, is_identifier_part, is_identifier_start, is_line_terminator};

/// Deep enough for any real `inputSchema`; shallow enough that recursion cannot exhaust the
/// stack on hostile input.
pub(super) const MAX_DEPTH: usize = 64;

/// A parsed value and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Literal {
    pub value: LiteralValue,
    pub offset: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum LiteralValue {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Literal>),
    /// Properties in source order; keys are unique.
    Object(Vec<Property>),
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Property {
    pub key: String,
    pub key_offset: usize,
    pub value: Literal,
}

/// Why the literal was rejected, without the position (the caller appends it).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LiteralError {
    pub message: String,
    pub offset: usize,
}

/// Keys that could reach an object's prototype once the meta is handed to JavaScript.
const FORBIDDEN_KEYS: &[&str] = &["__proto__", "constructor", "prototype"];

impl Literal {
    pub(super) fn to_json(&self) -> Value {
        match &self.value {
            LiteralValue::Null => Value::Null,
            LiteralValue::Bool(value) => Value::Bool(*value),
            LiteralValue::Number(value) => Value::Number(value.clone()),
            LiteralValue::String(value) => Value::String(value.clone()),
            LiteralValue::Array(items) => {
                Value::Array(items.iter().map(Literal::to_json).collect())
            }
            LiteralValue::Object(properties) => {
                let mut map = Map::with_capacity(properties.len());
                for property in properties {
                    map.insert(property.key.clone(), property.value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match &self.value {
            LiteralValue::String(value) => Some(value),
            _ => None,
        }
    }

    pub(super) fn properties(&self) -> Option<&[Property]> {
        match &self.value {
            LiteralValue::Object(properties) => Some(properties),
            _ => None,
        }
    }
}

/// Parses the literal that starts at the cursor (after trivia); the cursor ends just past it.
pub(super) fn parse_literal(cursor: &mut Cursor<'_>) -> Result<Literal, LiteralError> {
    let mut parser = Parser { cursor };
    parser.value("meta", 0)
}

struct Parser<'cursor, 'source> {
    cursor: &'cursor mut Cursor<'source>,
}

fn not_literal(offset: usize, reason: impl std::fmt::Display) -> LiteralError {
    LiteralError {
        message: format!("meta must be a literal: {reason}"),
        offset,
    }
}

impl Parser<'_, '_> {
    fn skip_trivia(&mut self) -> Result<(), LiteralError> {
        match self.cursor.skip_trivia().unterminated_comment {
            Some(offset) => Err(not_literal(offset, "unterminated `/*` comment")),
            None => Ok(()),
        }
    }

    /// A short description of whatever starts at the cursor, for "found ..." messages.
    fn found_here(&self) -> String {
        describe_token(self.cursor.rest())
    }

    fn value(&mut self, path: &str, depth: usize) -> Result<Literal, LiteralError> {
        self.skip_trivia()?;
        let offset = self.cursor.offset();
        if depth > MAX_DEPTH {
            return Err(LiteralError {
                message: format!("meta is nested more than {MAX_DEPTH} levels deep at {path}"),
                offset,
            });
        }
        let Some(character) = self.cursor.peek() else {
            return Err(not_literal(offset, "the script ends before the value"));
        };
        let value = match character {
            '{' => self.object(path, depth)?,
            '[' => self.array(path, depth)?,
            '"' | '\'' => LiteralValue::String(self.string()?),
            '`' => LiteralValue::String(self.template()?),
            '-' | '+' => {
                self.cursor.bump();
                self.skip_trivia()?;
                let starts_number = match self.cursor.peek() {
                    Some('0'..='9') => true,
                    Some('.') => self
                        .cursor
                        .peek_second()
                        .is_some_and(|c| c.is_ascii_digit()),
                    _ => false,
                };
                if !starts_number {
                    return Err(not_literal(
                        self.cursor.offset(),
                        format!(
                            "`{character}` must be followed by a number, found {}",
                            self.found_here()
                        ),
                    ));
                }
                let magnitude = self.number()?;
                number_value(
                    if character == '-' {
                        -magnitude
                    } else {
                        magnitude
                    },
                    offset,
                )?
            }
            '0'..='9' => number_value(self.number()?, offset)?,
            '.' if self.cursor.starts_with("...") => {
                return Err(not_literal(offset, "spread `...` is not allowed"));
            }
            '.' if self
                .cursor
                .peek_second()
                .is_some_and(|c| c.is_ascii_digit()) =>
            {
                number_value(self.number()?, offset)?
            }
            '/' => return Err(not_literal(offset, "regular expressions are not allowed")),
            character if is_identifier_start(character) => {
                let word = self.cursor.read_identifier();
                match word {
                    "true" => LiteralValue::Bool(true),
                    "false" => LiteralValue::Bool(false),
                    "null" => LiteralValue::Null,
                    _ => return Err(not_literal(offset, describe_word(word))),
                }
            }
            _ => {
                return Err(not_literal(
                    offset,
                    format!("found {} where a value should be", self.found_here()),
                ));
            }
        };
        Ok(Literal { value, offset })
    }

    fn object(&mut self, path: &str, depth: usize) -> Result<LiteralValue, LiteralError> {
        self.cursor.bump();
        let mut properties: Vec<Property> = Vec::new();
        // A set, not a scan of `properties`: a 1 MiB object can hold 100,000 keys.
        let mut seen_keys: HashSet<String> = HashSet::new();
        loop {
            self.skip_trivia()?;
            if self.cursor.eat('}') {
                return Ok(LiteralValue::Object(properties));
            }
            let key_offset = self.cursor.offset();
            let key = self.key(path)?;
            self.skip_trivia()?;
            if !self.cursor.eat(':') {
                return Err(self.missing_colon(&key));
            }
            if FORBIDDEN_KEYS.contains(&key.as_str()) {
                return Err(LiteralError {
                    message: format!("{path} may not have the key {}", quote(&key)),
                    offset: key_offset,
                });
            }
            if !seen_keys.insert(key.clone()) {
                return Err(LiteralError {
                    message: format!("{path} has the key {} more than once", quote(&key)),
                    offset: key_offset,
                });
            }
            let value = self.value(&child_path(path, &key), depth + 1)?;
            properties.push(Property {
                key,
                key_offset,
                value,
            });
            self.skip_trivia()?;
            if self.cursor.eat(',') {
                continue;
            }
            if self.cursor.peek() != Some('}') {
                return Err(not_literal(
                    self.cursor.offset(),
                    format!(
                        "expected `,` or `}}` after a property of {path}, found {}",
                        self.found_here()
                    ),
                ));
            }
        }
    }

    /// Reads a property key: an identifier, a string or a number.
    fn key(&mut self, path: &str) -> Result<String, LiteralError> {
        let offset = self.cursor.offset();
        match self.cursor.peek() {
            Some('"' | '\'') => self.string(),
            Some('0'..='9') => Ok(number_key(self.number()?)),
            Some('.')
                if self
                    .cursor
                    .peek_second()
                    .is_some_and(|c| c.is_ascii_digit()) =>
            {
                Ok(number_key(self.number()?))
            }
            Some('.') if self.cursor.starts_with("...") => {
                Err(not_literal(offset, "spread `...` is not allowed"))
            }
            Some('[') => Err(not_literal(offset, "computed keys `[...]` are not allowed")),
            Some('*') => Err(not_literal(offset, "methods are not allowed")),
            Some('\\') => Err(not_literal(
                offset,
                "escapes in property names are not allowed; quote the key",
            )),
            Some(character) if is_identifier_start(character) => {
                let word = self.cursor.read_identifier().to_owned();
                if matches!(word.as_str(), "get" | "set" | "async") {
                    // `get name() {}` and friends: another key follows without a colon.
                    let mut lookahead = self.cursor.clone();
                    lookahead.skip_trivia();
                    let accessor_follows = lookahead.peek().is_some_and(|next| {
                        is_identifier_start(next)
                            || matches!(next, '"' | '\'' | '[' | '*' | '0'..='9')
                    });
                    if accessor_follows {
                        return Err(not_literal(
                            offset,
                            "getters, setters and methods are not allowed",
                        ));
                    }
                }
                Ok(word)
            }
            Some(_) => Err(not_literal(
                offset,
                format!(
                    "expected a property key or `}}` in {path}, found {}",
                    self.found_here()
                ),
            )),
            None => Err(not_literal(
                offset,
                format!("the script ends inside {path}"),
            )),
        }
    }

    fn missing_colon(&self, key: &str) -> LiteralError {
        let offset = self.cursor.offset();
        let key = shorten(key);
        let reason = match self.cursor.peek() {
            Some('(') => format!("methods are not allowed (`{key}(`)"),
            Some(',' | '}') => {
                format!("shorthand property `{key}` is not allowed; write `{key}: <value>`")
            }
            _ => format!(
                "expected `:` after the key `{key}`, found {}",
                self.found_here()
            ),
        };
        not_literal(offset, reason)
    }

    fn array(&mut self, path: &str, depth: usize) -> Result<LiteralValue, LiteralError> {
        self.cursor.bump();
        let mut items: Vec<Literal> = Vec::new();
        loop {
            self.skip_trivia()?;
            if self.cursor.eat(']') {
                return Ok(LiteralValue::Array(items));
            }
            if self.cursor.peek() == Some(',') {
                return Err(not_literal(
                    self.cursor.offset(),
                    format!("holes are not allowed in arrays ({path}[{}])", items.len()),
                ));
            }
            let item_path = format!("{path}[{}]", items.len());
            items.push(self.value(&item_path, depth + 1)?);
            self.skip_trivia()?;
            if self.cursor.eat(',') {
                continue;
            }
            if self.cursor.peek() != Some(']') {
                return Err(not_literal(
                    self.cursor.offset(),
                    format!(
                        "expected `,` or `]` after an element of {path}, found {}",
                        self.found_here()
                    ),
                ));
            }
        }
    }

    /// A quoted string, cursor on the opening quote.
    fn string(&mut self) -> Result<String, LiteralError> {
        let start = self.cursor.offset();
        let quote = self.cursor.bump().unwrap_or('"');
        let mut text = String::new();
        loop {
            let offset = self.cursor.offset();
            match self.cursor.bump() {
                None => return Err(not_literal(start, "unterminated string")),
                Some('\n' | '\r') => return Err(not_literal(offset, "unterminated string")),
                Some('\\') => self.escape(&mut text, offset)?,
                Some(character) if character == quote => return Ok(text),
                Some(character) => text.push(character),
            }
        }
    }

    /// A template literal without substitutions, cursor on the backtick.
    fn template(&mut self) -> Result<String, LiteralError> {
        let start = self.cursor.offset();
        self.cursor.bump();
        let mut text = String::new();
        loop {
            let offset = self.cursor.offset();
            match self.cursor.bump() {
                None => return Err(not_literal(start, "unterminated template literal")),
                Some('`') => return Ok(text),
                Some('$') if self.cursor.peek() == Some('{') => {
                    return Err(not_literal(
                        offset,
                        "templates with `${...}` substitutions are not allowed",
                    ));
                }
                Some('\\') => self.escape(&mut text, offset)?,
                // JavaScript reads a raw CRLF or CR in a template as LF.
                Some('\r') => {
                    self.cursor.eat('\n');
                    text.push('\n');
                }
                Some(character) => text.push(character),
            }
        }
    }

    /// The escape after a backslash (already consumed) at `offset`.
    fn escape(&mut self, text: &mut String, offset: usize) -> Result<(), LiteralError> {
        let Some(character) = self.cursor.bump() else {
            return Err(not_literal(offset, "unterminated string"));
        };
        match character {
            'n' => text.push('\n'),
            't' => text.push('\t'),
            'r' => text.push('\r'),
            'b' => text.push('\u{8}'),
            'f' => text.push('\u{c}'),
            'v' => text.push('\u{b}'),
            '0' if !self.cursor.peek().is_some_and(|next| next.is_ascii_digit()) => {
                text.push('\0');
            }
            '0'..='9' => {
                return Err(not_literal(
                    offset,
                    "octal escapes like `\\1` are not allowed; use `\\x..` or `\\u....`",
                ));
            }
            'x' => {
                let value = self.hex_digits(2).ok_or_else(|| {
                    not_literal(offset, "`\\x` must be followed by two hex digits")
                })?;
                text.push(char::from_u32(value).unwrap_or('\u{fffd}'));
            }
            'u' => text.push(self.unicode_escape(offset)?),
            // A backslash before a line end continues the string on the next line.
            '\r' => {
                self.cursor.eat('\n');
            }
            '\n' | '\u{2028}' | '\u{2029}' => {}
            other => text.push(other),
        }
        Ok(())
    }

    /// The rest of `\u....` or `\u{...}`, joining a surrogate pair written as two escapes.
    fn unicode_escape(&mut self, offset: usize) -> Result<char, LiteralError> {
        let high = self.code_unit(offset)?;
        let code_point = match high {
            0xD800..=0xDBFF => {
                let low_offset = self.cursor.offset();
                let low = if self.cursor.starts_with("\\u") {
                    self.cursor.bump();
                    self.cursor.bump();
                    Some(self.code_unit(low_offset)?)
                } else {
                    None
                };
                match low {
                    Some(low @ 0xDC00..=0xDFFF) => {
                        0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                    }
                    _ => {
                        return Err(not_literal(
                            offset,
                            format!("the lone surrogate \\u{high:04X} cannot be represented"),
                        ));
                    }
                }
            }
            0xDC00..=0xDFFF => {
                return Err(not_literal(
                    offset,
                    format!("the lone surrogate \\u{high:04X} cannot be represented"),
                ));
            }
            other => other,
        };
        char::from_u32(code_point).ok_or_else(|| not_literal(offset, "invalid `\\u` escape"))
    }

    /// The value of `XXXX` or `{X...}` after `\u`.
    fn code_unit(&mut self, offset: usize) -> Result<u32, LiteralError> {
        let invalid = || {
            not_literal(
                offset,
                "`\\u` must be followed by four hex digits or `{...}`",
            )
        };
        if self.cursor.eat('{') {
            let mut value: u32 = 0;
            let mut digits = 0;
            while let Some(digit) = self.cursor.peek().and_then(|c| c.to_digit(16)) {
                self.cursor.bump();
                digits += 1;
                value = value.saturating_mul(16).saturating_add(digit);
            }
            if digits == 0 || !self.cursor.eat('}') || value > 0x10FFFF {
                return Err(invalid());
            }
            Ok(value)
        } else {
            self.hex_digits(4).ok_or_else(invalid)
        }
    }

    fn hex_digits(&mut self, count: usize) -> Option<u32> {
        let mut value = 0;
        for _ in 0..count {
            let digit = self.cursor.peek()?.to_digit(16)?;
            self.cursor.bump();
            value = value * 16 + digit;
        }
        Some(value)
    }

    /// An unsigned numeric literal at the cursor.
    fn number(&mut self) -> Result<f64, LiteralError> {
        let start = self.cursor.offset();
        let radix = if self.cursor.peek() == Some('0') {
            match self.cursor.peek_second() {
                Some('x' | 'X') => 16,
                Some('o' | 'O') => 8,
                Some('b' | 'B') => 2,
                _ => 10,
            }
        } else {
            10
        };
        let value = if radix == 10 {
            self.decimal(start)?
        } else {
            self.cursor.bump();
            self.cursor.bump();
            let digits = self.digits(radix)?;
            if digits.is_empty() {
                return Err(not_literal(start, "a number prefix needs digits after it"));
            }
            digits.chars().fold(0.0, |total, digit| {
                total * f64::from(radix) + f64::from(digit.to_digit(radix).unwrap_or(0))
            })
        };
        match self.cursor.peek() {
            Some('n') => Err(not_literal(start, "BigInt literals are not allowed")),
            Some(character) if is_identifier_part(character) => Err(not_literal(
                self.cursor.offset(),
                format!("invalid number: unexpected `{character}`"),
            )),
            _ => Ok(value),
        }
    }

    fn decimal(&mut self, start: usize) -> Result<f64, LiteralError> {
        let integer = self.digits(10)?;
        if integer.len() > 1 && integer.starts_with('0') {
            return Err(not_literal(
                start,
                "numbers with a leading zero (legacy octal) are not allowed",
            ));
        }
        let mut fraction = String::new();
        if self.cursor.eat('.') {
            fraction = self.digits(10)?;
        }
        if integer.is_empty() && fraction.is_empty() {
            return Err(not_literal(start, "invalid number"));
        }
        let mut exponent = String::new();
        if matches!(self.cursor.peek(), Some('e' | 'E')) {
            self.cursor.bump();
            if let Some(sign @ ('+' | '-')) = self.cursor.peek() {
                self.cursor.bump();
                exponent.push(sign);
            }
            let digits = self.digits(10)?;
            if digits.is_empty() {
                return Err(not_literal(start, "a number's exponent needs digits"));
            }
            exponent.push_str(&digits);
        }
        let mut normalized = String::new();
        let _ = write!(
            normalized,
            "{}.{}e{}",
            if integer.is_empty() { "0" } else { &integer },
            if fraction.is_empty() { "0" } else { &fraction },
            if exponent.is_empty() { "0" } else { &exponent },
        );
        normalized
            .parse::<f64>()
            .map_err(|_| not_literal(start, "invalid number"))
    }

    /// Digits of `radix`, with `_` separators allowed only between two digits.
    fn digits(&mut self, radix: u32) -> Result<String, LiteralError> {
        let mut digits = String::new();
        while let Some(character) = self.cursor.peek() {
            if character.is_digit(radix) {
                digits.push(character);
                self.cursor.bump();
            } else if character == '_' {
                let between_digits = !digits.is_empty()
                    && self
                        .cursor
                        .peek_second()
                        .is_some_and(|next| next.is_digit(radix));
                if !between_digits {
                    return Err(not_literal(
                        self.cursor.offset(),
                        "a `_` in a number must stand between two digits",
                    ));
                }
                self.cursor.bump();
            } else {
                break;
            }
        }
        Ok(digits)
    }
}

/// A JSON number for a finite `value`; integers stay integers.
fn number_value(value: f64, offset: usize) -> Result<LiteralValue, LiteralError> {
    const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
    if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER {
        // Exact: the value is an integer within the range f64 represents without gaps.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "checked to be a safe integer"
        )]
        return Ok(LiteralValue::Number(Number::from(value as i64)));
    }
    Number::from_f64(value)
        .map(LiteralValue::Number)
        .ok_or_else(|| not_literal(offset, "the number is too large"))
}

/// The property name JavaScript gives a numeric key (`0x10: 1` is the key `"16"`).
fn number_key(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e21 {
        #[expect(clippy::cast_possible_truncation, reason = "below 1e21, fits in i128")]
        return format!("{}", value as i128);
    }
    if value.is_infinite() {
        return "Infinity".to_owned();
    }
    if value.abs() >= 1e21 || value.abs() < 1e-6 {
        let scientific = format!("{value:e}");
        return match scientific.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => scientific,
        };
    }
    format!("{value}")
}

/// `meta.phases` for key `phases` under `meta`; keys that are not plain names are quoted.
pub(super) fn child_path(parent: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    let key = shorten(key);
    if plain {
        format!("{parent}.{key}")
    } else {
        format!("{parent}[{}]", Value::String(key))
    }
}

/// Why an identifier cannot be a value.
fn describe_word(word: &str) -> String {
    match word {
        "undefined" => "found `undefined`; leave the key out or use `null`".to_owned(),
        "NaN" | "Infinity" => format!("found `{word}`, which JSON cannot represent"),
        "function" | "async" | "class" => format!("found `{word}`; functions are not allowed"),
        _ => format!(
            "found {}; only objects, arrays, strings, numbers, true, false and null are allowed",
            quote(word)
        ),
    }
}

/// A short quotation of the token at the start of `rest`, or "the end of the script".
pub(super) fn describe_token(rest: &str) -> String {
    let Some(first) = rest.chars().next() else {
        return "the end of the script".to_owned();
    };
    if is_line_terminator(first) {
        return "a line break".to_owned();
    }
    let length = if is_identifier_start(first) {
        rest.char_indices()
            .find(|&(_, c)| !is_identifier_part(c))
            .map_or(rest.len(), |(index, _)| index)
    } else {
        first.len_utf8()
    };
    quote(&rest[..length])
}

/// Longest piece of script text an error message quotes, in characters.
pub(super) const MAX_QUOTE_CHARS: usize = 40;

/// `text` (script source) as an error message may show it, in backticks: see [`shorten`].
pub(super) fn quote(text: &str) -> String {
    format!("`{}`", shorten(text))
}

/// `text` (script source) as an error message may show it: credentials redacted first (so a
/// `ghp_…` token is caught whole), then cut to [`MAX_QUOTE_CHARS`] characters, `…` marking a
/// cut. A file that is not a script is never quoted at all (`prepare::read_script`).
pub(super) fn shorten(text: &str) -> String {
    // Redaction looks at whole words; a few hundred characters hold any token it knows.
    let scanned = crate::util::truncate_utf8(text, 512);
    let (redacted, _) = crate::engine::redact::redact_text(scanned);
    let mut chars = redacted.chars();
    let mut out: String = chars.by_ref().take(MAX_QUOTE_CHARS).collect();
    if chars.next().is_some() || scanned.len() < text.len() {
        out.push('…');
    }
    out
}
