//! JSON Schema for structured agent output: validation, mock values for the dry run, and
//! lenient extraction of a JSON value from agent text.
//!
//! An `agent()` call with a `schema` asks the agent for one JSON value ([`output_instructions`]),
//! pulls it out of whatever the agent wrote ([`extract_json`]), checks it ([`validate`]) and, on
//! failure, asks again ([`repair_instructions`]). When the runner offered the agent a tool to
//! return the answer through (`AgentSession::output_channel`), the prompt asks for that tool
//! instead ([`tool_instructions`], [`tool_repair_instructions`]) and the text stays the fallback. The mocked dry run (engine.md 3) does not call
//! agents; it uses [`fabricate`] instead. Validation uses the `jsonschema` crate with remote
//! references disabled (its default features are off), so a schema can only refer to itself.

use serde_json::{Map, Value};

use super::preview::cap_text;

/// Bound on a validation message, in bytes.
pub(crate) const MAX_ERROR_BYTES: usize = 1024;

/// Validation errors listed by name in a message; the rest are counted.
const LISTED_ERRORS: usize = 3;

/// Bound on one listed error, in bytes, so one huge instance cannot crowd out the others.
const MAX_ONE_ERROR_BYTES: usize = 300;

/// Errors counted beyond the listed ones before giving up counting.
const COUNTED_ERRORS: usize = 100;

/// Nesting beyond which fabricated objects keep only required properties and arrays only their
/// `minItems`, so recursive schemas (trees, linked lists) end.
const SHALLOW_DEPTH: usize = 8;

/// Nesting at which fabrication gives up with `null`; a guard against reference cycles that no
/// finite value satisfies.
const MAX_DEPTH: usize = 32;

/// Checks that `schema` is a usable JSON Schema: an object that its declared draft (2020-12 by
/// default) accepts, with resolvable references.
pub(crate) fn check_schema(schema: &Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err(format!(
            "a JSON Schema must be an object, got {}",
            type_name(schema)
        ));
    }
    jsonschema::validator_for(schema)
        .map(drop)
        .map_err(|error| schema_error(&error))
}

/// Validates `value` against `schema`. The message lists the first few errors, each with the
/// JSON pointer of the offending part of the value, and is at most [`MAX_ERROR_BYTES`] long.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|error| schema_error(&error))?;
    let mut errors = validator.iter_errors(value);
    let listed: Vec<String> = errors
        .by_ref()
        .take(LISTED_ERRORS)
        .map(|error| {
            let path = error.instance_path().as_str();
            let path = if path.is_empty() { "/" } else { path };
            cap_text(&format!("at {path}: {error}"), MAX_ONE_ERROR_BYTES).0
        })
        .collect();
    if listed.is_empty() {
        return Ok(());
    }
    let more = errors.take(COUNTED_ERRORS).count();
    let mut message = listed.join("; ");
    match more {
        0 => {}
        COUNTED_ERRORS => message.push_str(&format!("; and {COUNTED_ERRORS}+ more errors")),
        1 => message.push_str("; and 1 more error"),
        more => message.push_str(&format!("; and {more} more errors")),
    }
    Err(cap_text(&message, MAX_ERROR_BYTES).0)
}

/// The dry run's stand-in for an agent's structured answer (engine.md 3).
///
/// Precedence: `const`, then the first `enum` member, then `default`, then by type. Before that,
/// local `$ref`s (`#`, `#/$defs/…`, `#/definitions/…`) are followed, `allOf` members are merged
/// in, and the first `anyOf`/`oneOf` branch (skipping a `{"type":"null"}` branch when another
/// exists) is merged in; merging keeps the first value of a keyword, unions `required`, and
/// combines two schemas for the same property with `allOf`. By type (the first of a type array,
/// skipping `"null"` when there is another; with no type, inferred from object, array, number
/// or string keywords, else a string):
/// - object: every property in `properties`, plus `"mock-<key>"` (or a value for
///   `additionalProperties`) for a `required` key without a property schema;
/// - array: `clamp(minItems, 1, 3)` items (at most `maxItems`) from `prefixItems`/`items`, made
///   distinct when `uniqueItems` is set;
/// - string: `"mock-<field>"`, where field is the property the string sits under (`value` at the
///   top), padded to `minLength` and cut to `maxLength`;
/// - integer / number: `minimum`, else `exclusiveMinimum + 1`, else 1, lowered to `maximum`;
/// - boolean: `true`; null: `null`.
///
/// Recursive schemas end: past a nesting of 8, objects keep only required properties and
/// arrays only `minItems` items; past 32 the value is `null`.
pub fn fabricate(schema: &Value) -> Value {
    Fabricator { root: schema }.value(schema, "value", 0)
}

/// Pulls one JSON value out of an agent's answer.
///
/// In order of preference: the last fenced code block (```` ```json ```` or a bare ```` ``` ````)
/// whose content parses; the whole trimmed text; the last top-level JSON object or array
/// embedded in the text. The embedded search walks the text left to right, tries to parse a
/// value at each `{` or `[` (the JSON parser respects strings and escapes), and on success jumps
/// past the value, so nested values are never taken for top-level ones.
pub fn extract_json(text: &str) -> Option<Value> {
    for block in fenced_blocks(text).into_iter().rev() {
        if let Ok(value) = serde_json::from_str(block.trim()) {
            return Some(value);
        }
    }
    if let Ok(value) = serde_json::from_str(text.trim()) {
        return Some(value);
    }
    last_embedded_value(text)
}

/// The text appended to a prompt that asks for structured output.
pub fn output_instructions(schema: &Value) -> String {
    format!(
        "Answer with exactly one JSON value that matches this JSON Schema:\n\n\
         ```json\n{}\n```\n\n\
         Put the JSON value in a single fenced ```json code block. Nothing else is required; \
         text outside the block is ignored.",
        pretty(schema)
    )
}

/// The text appended to a prompt that asks for structured output when the agent was offered
/// tool `tool` to return it: the tool's input schema carries the schema, so it is not repeated.
pub fn tool_instructions(tool: &str) -> String {
    format!(
        "When you have the answer, return it by calling the `{tool}` tool once, with the \
         answer as the tool's arguments; its input schema is the required format. If it \
         reports errors, correct the arguments and call it again."
    )
}

/// The re-prompt sent when the agent was offered tool `tool` but returned no valid answer
/// through it, nor a valid JSON answer in its text.
pub fn tool_repair_instructions(error: &str, tool: &str, schema: &Value) -> String {
    format!(
        "No valid answer was returned ({error}). Call the `{tool}` tool now with your \
         answer as its arguments, or, if you cannot call it, reply with only one JSON value \
         matching this JSON Schema, in a single fenced ```json code block:\n\n```json\n{}\n```",
        pretty(schema)
    )
}

/// The re-prompt sent after an answer failed validation.
pub fn repair_instructions(error: &str, schema: &Value) -> String {
    format!(
        "Your previous answer did not match the required JSON schema: {error}.\n\n\
         Reply again with only one JSON value matching this JSON Schema, in a single fenced \
         ```json code block:\n\n```json\n{}\n```",
        pretty(schema)
    )
}

fn pretty(schema: &Value) -> String {
    serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string())
}

fn schema_error(error: &jsonschema::ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    let message = if path.is_empty() {
        format!("invalid JSON Schema: {error}")
    } else {
        format!("invalid JSON Schema at {path}: {error}")
    };
    cap_text(&message, MAX_ERROR_BYTES).0
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Fabricates values for one root schema, which local references resolve against.
struct Fabricator<'a> {
    root: &'a Value,
}

impl Fabricator<'_> {
    fn value(&self, schema: &Value, field: &str, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        let flat = self.flatten(schema, depth);
        if let Some(constant) = flat.get("const") {
            return constant.clone();
        }
        if let Some(first) = flat
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|members| members.first())
        {
            return first.clone();
        }
        if let Some(default) = flat.get("default") {
            return default.clone();
        }
        match schema_type(&flat) {
            "object" => self.object(&flat, depth),
            "array" => self.array(&flat, field, depth),
            "integer" => integer(&flat),
            "number" => number(&flat),
            "boolean" => Value::Bool(true),
            "null" => Value::Null,
            _ => string(&flat, field),
        }
    }

    /// The schema's own keywords merged with its reference, `allOf` members and chosen
    /// `anyOf`/`oneOf` branch.
    fn flatten(&self, schema: &Value, depth: usize) -> Map<String, Value> {
        let Value::Object(keywords) = schema else {
            return Map::new();
        };
        let mut flat: Map<String, Value> = keywords
            .iter()
            .filter(|(key, _)| !matches!(key.as_str(), "$ref" | "allOf" | "anyOf" | "oneOf"))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if depth > MAX_DEPTH {
            return flat;
        }
        if let Some(target) = keywords
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| self.resolve(reference))
        {
            merge(&mut flat, self.flatten(target, depth + 1));
        }
        if let Some(members) = keywords.get("allOf").and_then(Value::as_array) {
            for member in members {
                merge(&mut flat, self.flatten(member, depth + 1));
            }
        }
        let branches = keywords
            .get("anyOf")
            .or_else(|| keywords.get("oneOf"))
            .and_then(Value::as_array);
        if let Some(branch) = branches.and_then(|branches| choose_branch(branches)) {
            merge(&mut flat, self.flatten(branch, depth + 1));
        }
        flat
    }

    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    fn object(&self, flat: &Map<String, Value>, depth: usize) -> Value {
        let shallow = depth >= SHALLOW_DEPTH;
        let required: Vec<&str> = flat
            .get("required")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        if let Some(properties) = flat.get("properties").and_then(Value::as_object) {
            for (key, property) in properties {
                if shallow && !required.contains(&key.as_str()) {
                    continue;
                }
                out.insert(key.clone(), self.value(property, key, depth + 1));
            }
        }
        for key in required {
            if out.contains_key(key) {
                continue;
            }
            let value = match flat.get("additionalProperties") {
                Some(extra @ Value::Object(_)) => self.value(extra, key, depth + 1),
                _ => Value::String(format!("mock-{key}")),
            };
            out.insert(key.to_owned(), value);
        }
        Value::Object(out)
    }

    fn array(&self, flat: &Map<String, Value>, field: &str, depth: usize) -> Value {
        let min_items = flat
            .get("minItems")
            .and_then(Value::as_u64)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let max_items = flat
            .get("maxItems")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let count = if depth >= SHALLOW_DEPTH {
            min_items.min(3)
        } else {
            min_items.clamp(1, 3)
        }
        .min(max_items);
        // 2020-12 `prefixItems` + `items`, or the older tuple form `items: [...]` +
        // `additionalItems`.
        let (prefix, rest) = match (flat.get("prefixItems"), flat.get("items")) {
            (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
            (_, Some(Value::Array(prefix))) => (prefix.as_slice(), flat.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        let any = Value::Object(Map::new());
        let unique = flat.get("uniqueItems") == Some(&Value::Bool(true));
        let items = (0..count)
            .map(|index| {
                let schema = prefix.get(index).or(rest).unwrap_or(&any);
                let item = self.value(schema, field, depth + 1);
                if unique { distinct(item, index) } else { item }
            })
            .collect();
        Value::Array(items)
    }
}

/// Merges flattened keywords: the first value of a keyword wins, `required` lists are united,
/// and two schemas for one property are combined with `allOf`.
fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (key, value) in from {
        match (key.as_str(), into.get_mut(&key), value) {
            (_, None, value) => {
                into.insert(key, value);
            }
            ("properties", Some(Value::Object(existing)), Value::Object(added)) => {
                for (name, schema) in added {
                    match existing.get_mut(&name) {
                        Some(first) => {
                            let combined = serde_json::json!({ "allOf": [first.take(), schema] });
                            *first = combined;
                        }
                        None => {
                            existing.insert(name, schema);
                        }
                    }
                }
            }
            ("required", Some(Value::Array(existing)), Value::Array(added)) => {
                for name in added {
                    if !existing.contains(&name) {
                        existing.push(name);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The `anyOf`/`oneOf` branch to fabricate from: the first one that is not only `null`.
fn choose_branch(branches: &[Value]) -> Option<&Value> {
    let is_null_only = |branch: &Value| {
        branch.get("type").and_then(Value::as_str) == Some("null")
            || branch.get("const") == Some(&Value::Null)
    };
    branches
        .iter()
        .find(|branch| !is_null_only(branch))
        .or_else(|| branches.first())
}

fn schema_type(flat: &Map<String, Value>) -> &str {
    match flat.get("type") {
        Some(Value::String(name)) => return name,
        Some(Value::Array(names)) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            if let Some(name) = names.iter().find(|name| **name != "null").or(names.first()) {
                return name;
            }
        }
        _ => {}
    }
    let has = |keywords: &[&str]| keywords.iter().any(|keyword| flat.contains_key(*keyword));
    if has(&[
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
    ]) {
        "object"
    } else if has(&[
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "contains",
    ]) {
        "array"
    } else if has(&[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ]) {
        "number"
    } else {
        "string"
    }
}

fn string(flat: &Map<String, Value>, field: &str) -> Value {
    let mut text = format!("mock-{field}");
    let length = text.chars().count();
    if let Some(min) = flat.get("minLength").and_then(Value::as_u64) {
        let missing = usize::try_from(min)
            .unwrap_or(usize::MAX)
            .saturating_sub(length);
        text.extend(std::iter::repeat_n('x', missing.min(4096)));
    }
    if let Some(max) = flat.get("maxLength").and_then(Value::as_u64) {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        text = text.chars().take(max).collect();
    }
    Value::String(text)
}

/// The lower bound a fabricated number starts from, and the upper bound it must respect.
fn bounds(flat: &Map<String, Value>, step: f64) -> (f64, Option<f64>) {
    let minimum = flat.get("minimum").and_then(Value::as_f64);
    let low = match (minimum, flat.get("exclusiveMinimum")) {
        // Draft 4 spells an exclusive bound as a flag next to `minimum`.
        (Some(minimum), Some(Value::Bool(true))) => minimum + step,
        (Some(minimum), _) => minimum,
        (None, Some(exclusive)) => exclusive.as_f64().map_or(1.0, |bound| bound + step),
        (None, None) => 1.0,
    };
    let maximum = flat.get("maximum").and_then(Value::as_f64);
    let high = match (maximum, flat.get("exclusiveMaximum")) {
        (Some(maximum), Some(Value::Bool(true))) => Some(maximum - step),
        (Some(maximum), _) => Some(maximum),
        (None, Some(exclusive)) => exclusive.as_f64().map(|bound| bound - step),
        (None, None) => None,
    };
    (low, high)
}

fn integer(flat: &Map<String, Value>) -> Value {
    let (low, high) = bounds(flat, 1.0);
    let mut value = low.ceil();
    if let Some(high) = high {
        value = value.min(high.floor());
    }
    if value.abs() < 9.0e15 {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

fn number(flat: &Map<String, Value>) -> Value {
    let (low, high) = bounds(flat, 1.0);
    let value = high.map_or(low, |high| low.min(high));
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

/// Makes the `index`-th item of a `uniqueItems` array differ from the earlier ones.
fn distinct(item: Value, index: usize) -> Value {
    if index == 0 {
        return item;
    }
    match item {
        Value::String(text) => Value::String(format!("{text}-{}", index + 1)),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => Value::from(integer + index as i64),
            None => Value::from(number.as_f64().unwrap_or_default() + index as f64),
        },
        other => other,
    }
}

/// The contents of fenced code blocks (```` ``` ```` fences of three or more backticks), in
/// order; an unclosed fence runs to the end of the text.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    // Content start and fence length of the open block.
    let mut open: Option<(usize, usize)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let trimmed = line.trim();
        let ticks = trimmed.bytes().take_while(|byte| *byte == b'`').count();
        match open {
            None if ticks >= 3 && !trimmed[ticks..].contains('`') => {
                open = Some((offset, ticks));
            }
            Some((start, fence)) if ticks >= fence && ticks == trimmed.len() => {
                blocks.push(&text[start..line_start]);
                open = None;
            }
            _ => {}
        }
    }
    if let Some((start, _)) = open {
        blocks.push(&text[start.min(text.len())..]);
    }
    blocks
}

/// The last top-level JSON object or array embedded in `text`, found in one linear pass.
///
/// A small recognizer walks the JSON grammar from each `{` or `[`. On success it records the
/// value and resumes after it. On failure the containers still open are garbage, since their
/// content would fail the same way from any start, but the last container completed inside them
/// is a whole value and is kept as a candidate; scanning resumes at the failing byte. Brackets
/// inside strings are never starts.
fn last_embedded_value(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    let mut last = None;
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] != b'{' && bytes[index] != b'[' {
            index += 1;
            continue;
        }
        match scan_container(bytes, index) {
            Ok(end) => {
                last = Some(index..end);
                index = end;
            }
            Err(failure) => {
                if let Some(inner) = failure.last_inner {
                    last = Some(inner);
                }
                index = failure.at.max(index + 1);
            }
        }
    }
    last.and_then(|span| serde_json::from_str(&text[span]).ok())
}

/// Where a [`scan_container`] attempt failed, and the last nested container it completed.
struct ScanFailure {
    at: usize,
    last_inner: Option<std::ops::Range<usize>>,
}

/// What the recognizer expects next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    ValueOrClose,
    KeyOrClose,
    Key,
    Colon,
    CommaOrClose,
}

/// Recognizes the JSON container starting at `start`; returns the end of it.
fn scan_container(bytes: &[u8], start: usize) -> Result<usize, ScanFailure> {
    let mut open: Vec<(u8, usize)> = Vec::new();
    let mut last_inner = None;
    let mut expect = Expect::Value;
    let mut index = start;
    let fail =
        |at: usize, last_inner: Option<std::ops::Range<usize>>| ScanFailure { at, last_inner };
    loop {
        while index < bytes.len() && matches!(bytes[index], b' ' | b'\t' | b'\n' | b'\r') {
            index += 1;
        }
        let Some(&byte) = bytes.get(index) else {
            return Err(fail(bytes.len(), last_inner));
        };
        let closes = match (expect, byte) {
            (Expect::ValueOrClose, b']') | (Expect::KeyOrClose, b'}') => true,
            (Expect::CommaOrClose, b']' | b'}') => {
                let expected = if open.last().map(|(kind, _)| *kind) == Some(b'{') {
                    b'}'
                } else {
                    b']'
                };
                if byte != expected {
                    return Err(fail(index, last_inner));
                }
                true
            }
            _ => false,
        };
        if closes {
            let (_, opened_at) = open.pop().unwrap_or((byte, start));
            index += 1;
            if open.is_empty() {
                return Ok(index);
            }
            last_inner = Some(opened_at..index);
            expect = Expect::CommaOrClose;
            continue;
        }
        let scanned = match (expect, byte) {
            (Expect::Value | Expect::ValueOrClose, b'{') => {
                open.push((byte, index));
                expect = Expect::KeyOrClose;
                Some(index + 1)
            }
            (Expect::Value | Expect::ValueOrClose, b'[') => {
                open.push((byte, index));
                expect = Expect::ValueOrClose;
                Some(index + 1)
            }
            (Expect::Value | Expect::ValueOrClose, _) => {
                expect = Expect::CommaOrClose;
                scan_scalar(bytes, index)
            }
            (Expect::KeyOrClose | Expect::Key, b'"') => {
                expect = Expect::Colon;
                scan_string(bytes, index)
            }
            (Expect::Colon, b':') => {
                expect = Expect::Value;
                Some(index + 1)
            }
            (Expect::CommaOrClose, b',') => {
                let in_object = open.last().map(|(kind, _)| *kind) == Some(b'{');
                expect = if in_object {
                    Expect::Key
                } else {
                    Expect::Value
                };
                Some(index + 1)
            }
            _ => None,
        };
        match scanned {
            Some(next) => index = next,
            None => return Err(fail(index, last_inner)),
        }
    }
}

/// The end of the string, number or literal at `start`, if it is well formed.
fn scan_scalar(bytes: &[u8], start: usize) -> Option<usize> {
    let rest = &bytes[start..];
    match rest.first()? {
        b'"' => scan_string(bytes, start),
        b'-' | b'0'..=b'9' => scan_number(bytes, start),
        _ => ["true", "false", "null"]
            .iter()
            .find(|literal| rest.starts_with(literal.as_bytes()))
            .map(|literal| start + literal.len()),
    }
}

fn scan_string(bytes: &[u8], start: usize) -> Option<usize> {
    let mut index = start + 1;
    loop {
        match *bytes.get(index)? {
            b'"' => return Some(index + 1),
            b'\\' => match *bytes.get(index + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => index += 2,
                b'u' => {
                    let hex = bytes.get(index + 2..index + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    index += 6;
                }
                _ => return None,
            },
            0..0x20 => return None,
            _ => index += 1,
        }
    }
}

fn scan_number(bytes: &[u8], start: usize) -> Option<usize> {
    let digits = |from: usize| {
        let mut end = from;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
        end
    };
    let mut index = start;
    if bytes.get(index) == Some(&b'-') {
        index += 1;
    }
    match bytes.get(index)? {
        b'0' => index += 1,
        b'1'..=b'9' => index = digits(index),
        _ => return None,
    }
    if bytes.get(index) == Some(&b'.') {
        let end = digits(index + 1);
        if end == index + 1 {
            return None;
        }
        index = end;
    }
    if matches!(bytes.get(index), Some(b'e' | b'E')) {
        index += 1;
        if matches!(bytes.get(index), Some(b'+' | b'-')) {
            index += 1;
        }
        let end = digits(index);
        if end == index {
            return None;
        }
        index = end;
    }
    Some(index)
}

#[cfg(test)]
mod tests;
