//! Bounded projections of values for status and events: capped, redacted previews.
//!
//! Status shows each call's result as a small preview ([`preview`]); the event log stores each
//! event payload as a projection ([`project_event`]). Both redact credentials first
//! ([`super::redact`]) and then cut, so a cut can never expose half a secret that redaction would
//! have recognised whole. Cuts on text always land on a code-point boundary.

use std::io::Write;

use serde_json::{Map, Value};

use super::redact::{REDACTED, redact_text, redact_value, secret_member};

/// Largest preview, and largest string inside a preview or an event projection, in bytes.
pub(crate) const TEXT_CAP: usize = 512;

/// Containers nested deeper than this many levels are elided in a preview.
pub(crate) const PREVIEW_MAX_DEPTH: usize = 4;

/// Items kept from each array in a preview.
pub(crate) const PREVIEW_MAX_ITEMS: usize = 10;

/// Keys kept from each object in a preview.
pub(crate) const PREVIEW_MAX_KEYS: usize = 20;

/// Items kept from each array in an event projection.
pub(crate) const EVENT_MAX_ITEMS: usize = 20;

/// What replaces a container nested too deep in a preview.
pub(crate) const ELIDED: &str = "[…]";

/// A preview of a value and what was done to make it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Preview {
    /// The bounded, redacted projection (see [`preview`]).
    pub preview: Value,
    /// Some credential was replaced by `[REDACTED]`.
    pub redacted: bool,
    /// Something was cut, elided or dropped.
    pub truncated: bool,
}

/// Cuts `text` to at most `max` bytes at a code-point boundary; true if it was cut.
pub(crate) fn cap_text(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    (text[..floor_char_boundary(text, max)].to_owned(), true)
}

/// A bounded preview of a call result (engine.md 6.4).
///
/// The algorithm, in order:
/// 1. Redact the whole value with [`redact_value`].
/// 2. Project it: strings are capped at [`TEXT_CAP`] bytes; arrays keep their first
///    [`PREVIEW_MAX_ITEMS`] items and objects their first [`PREVIEW_MAX_KEYS`] keys (in insertion
///    order), with no marker item, only the `truncated` flag. The root is at depth 1; a non-empty
///    array or object at depth [`PREVIEW_MAX_DEPTH`]` + 1` becomes the string [`ELIDED`] (empty
///    containers and scalars are kept at any depth, they are no bigger than the marker).
/// 3. If the projection is an array or object whose compact JSON exceeds [`TEXT_CAP`] bytes, the
///    preview becomes a string instead: the first [`TEXT_CAP`] bytes (cut at a code-point
///    boundary) of the compact JSON of the redacted value from step 1, and `truncated` is set.
///    Only the bytes needed are serialized, so a huge value costs no more than its redaction.
///
/// A scalar preview is therefore at most [`TEXT_CAP`] bytes of content, and a structured preview
/// at most [`TEXT_CAP`] bytes of compact JSON.
pub(crate) fn preview(value: &Value) -> Preview {
    let (redacted_value, redacted) = redact_value(value);
    let mut truncated = false;
    let projected = project_preview(&redacted_value, 1, &mut truncated);
    if projected.is_array() || projected.is_object() {
        let (json, complete) = compact_json_prefix(&projected, TEXT_CAP);
        if !complete || json.len() > TEXT_CAP {
            let (text, _) = compact_json_prefix(&redacted_value, TEXT_CAP);
            return Preview {
                preview: Value::String(text),
                redacted,
                truncated: true,
            };
        }
    }
    Preview {
        preview: projected,
        redacted,
        truncated,
    }
}

/// Projects an event payload for the event log (engine.md 7): every string redacted and capped
/// at [`TEXT_CAP`] bytes, every array cut to [`EVENT_MAX_ITEMS`] items, numbers and booleans
/// untouched, no depth limit. Returns `(projected, redacted, truncated)`.
///
/// Redaction and projection are one walk over `event` (each string redacted whole, then
/// capped), which gives what redacting the whole value and then projecting it gives: items an
/// array drops still count towards `redacted`, and an object with a key that redaction
/// changes (two keys could then become one) takes the two-step path.
pub(crate) fn project_event(event: &Value) -> (Value, bool, bool) {
    let (mut redacted, mut truncated) = (false, false);
    let projected = project_event_ref(event, &mut redacted, &mut truncated);
    (projected, redacted, truncated)
}

/// One free text of an event, projected as [`project_event`] projects a string member:
/// redacted whole, then capped at [`TEXT_CAP`] bytes; the flags are or-ed in.
pub(crate) fn project_event_text(text: &str, redacted: &mut bool, truncated: &mut bool) -> Value {
    let (text, did) = redact_text(text);
    *redacted |= did;
    project_event_inner(Value::String(text), truncated)
}

/// One member value of an event, projected as [`project_event`] projects it (the walk of a
/// member does not depend on its siblings); the flags are or-ed in.
pub(crate) fn project_event_member(
    value: &Value,
    redacted: &mut bool,
    truncated: &mut bool,
) -> Value {
    project_event_ref(value, redacted, truncated)
}

fn project_event_ref(value: &Value, redacted: &mut bool, truncated: &mut bool) -> Value {
    match value {
        Value::String(text) => {
            let (text, did) = redact_text(text);
            *redacted |= did;
            project_event_inner(Value::String(text), truncated)
        }
        Value::Array(items) => {
            if items.len() > EVENT_MAX_ITEMS {
                *truncated = true;
                *redacted |= items[EVENT_MAX_ITEMS..]
                    .iter()
                    .any(|item| redact_value(item).1);
            }
            Value::Array(
                items
                    .iter()
                    .take(EVENT_MAX_ITEMS)
                    .map(|item| project_event_ref(item, redacted, truncated))
                    .collect(),
            )
        }
        Value::Object(members) => {
            // The object's own flags, dropped if it takes the two-step path after all.
            let (mut object_redacted, mut object_truncated) = (false, false);
            let mut out = Map::with_capacity(members.len());
            for (key, member) in members {
                let (key_text, key_changed) = redact_text(key);
                if key_changed {
                    let (whole, did) = redact_value(value);
                    *redacted |= did;
                    return project_event_inner(whole, truncated);
                }
                let (key_text, cut) = cap_text(&key_text, TEXT_CAP);
                object_truncated |= cut;
                let member = if secret_member(key, member) {
                    object_redacted = true;
                    Value::String(REDACTED.to_owned())
                } else {
                    project_event_ref(member, &mut object_redacted, &mut object_truncated)
                };
                out.insert(key_text, member);
            }
            *redacted |= object_redacted;
            *truncated |= object_truncated;
            Value::Object(out)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

fn project_preview(value: &Value, depth: usize, truncated: &mut bool) -> Value {
    let is_nonempty_container = match value {
        Value::Array(items) => !items.is_empty(),
        Value::Object(members) => !members.is_empty(),
        _ => false,
    };
    if is_nonempty_container && depth > PREVIEW_MAX_DEPTH {
        *truncated = true;
        return Value::String(ELIDED.to_owned());
    }
    match value {
        Value::String(text) => {
            let (text, cut) = cap_text(text, TEXT_CAP);
            *truncated |= cut;
            Value::String(text)
        }
        Value::Array(items) => {
            *truncated |= items.len() > PREVIEW_MAX_ITEMS;
            Value::Array(
                items
                    .iter()
                    .take(PREVIEW_MAX_ITEMS)
                    .map(|item| project_preview(item, depth + 1, truncated))
                    .collect(),
            )
        }
        Value::Object(members) => {
            *truncated |= members.len() > PREVIEW_MAX_KEYS;
            let mut out = Map::new();
            for (key, member) in members.iter().take(PREVIEW_MAX_KEYS) {
                let (key, cut) = cap_text(key, TEXT_CAP);
                *truncated |= cut;
                out.insert(key, project_preview(member, depth + 1, truncated));
            }
            Value::Object(out)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

fn project_event_inner(value: Value, truncated: &mut bool) -> Value {
    match value {
        Value::String(text) => {
            if text.len() <= TEXT_CAP {
                return Value::String(text);
            }
            *truncated = true;
            Value::String(cap_text(&text, TEXT_CAP).0)
        }
        Value::Array(mut items) => {
            if items.len() > EVENT_MAX_ITEMS {
                *truncated = true;
                items.truncate(EVENT_MAX_ITEMS);
            }
            Value::Array(
                items
                    .into_iter()
                    .map(|item| project_event_inner(item, truncated))
                    .collect(),
            )
        }
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .map(|(key, member)| {
                    let (key, cut) = cap_text(&key, TEXT_CAP);
                    *truncated |= cut;
                    (key, project_event_inner(member, truncated))
                })
                .collect(),
        ),
        scalar @ (Value::Null | Value::Bool(_) | Value::Number(_)) => scalar,
    }
}

fn floor_char_boundary(text: &str, max: usize) -> usize {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// The compact JSON of `value`, cut to at most `max` bytes at a code-point boundary, and whether
/// it is complete. Serialization stops soon after `max` bytes.
fn compact_json_prefix(value: &Value, max: usize) -> (String, bool) {
    /// A writer that accepts one byte past the limit and then refuses, ending serialization.
    struct Bounded {
        bytes: Vec<u8>,
        limit: usize,
    }
    impl Write for Bounded {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let room = self.limit + 1 - self.bytes.len();
            if room == 0 {
                return Err(std::io::Error::other("preview limit reached"));
            }
            let taken = data.len().min(room);
            self.bytes.extend_from_slice(&data[..taken]);
            Ok(taken)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = Bounded {
        bytes: Vec::with_capacity(max + 1),
        limit: max,
    };
    let complete = serde_json::to_writer(&mut writer, value).is_ok() && writer.bytes.len() <= max;
    let bytes = writer.bytes;
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        // The cut may split a multi-byte character; keep the valid prefix.
        Err(error) => std::str::from_utf8(&bytes[..error.valid_up_to()]).unwrap_or_default(),
    };
    let end = floor_char_boundary(text, max);
    (text[..end].to_owned(), complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cap_text_respects_char_boundaries() {
        assert_eq!(cap_text("hello", 5), ("hello".to_owned(), false));
        assert_eq!(cap_text("hello", 4), ("hell".to_owned(), true));
        assert_eq!(cap_text("", 0), (String::new(), false));
        assert_eq!(cap_text("é", 1), (String::new(), true));
        assert_eq!(cap_text("aé", 2), ("a".to_owned(), true));
        assert_eq!(cap_text("aé", 3), ("aé".to_owned(), false));
        // The crab is four bytes.
        assert_eq!(cap_text("🦀🦀", 7), ("🦀".to_owned(), true));
        assert_eq!(cap_text("🦀🦀", 8), ("🦀🦀".to_owned(), false));
        for max in 0..=3 {
            assert_eq!(cap_text("🦀", max), (String::new(), true));
        }
    }

    #[test]
    fn small_values_pass_through() {
        for value in [
            json!(null),
            json!(true),
            json!(42),
            json!("short"),
            json!({"a": [1, 2, {"b": "c"}]}),
        ] {
            let result = preview(&value);
            assert_eq!(result.preview, value);
            assert!(!result.redacted && !result.truncated);
        }
    }

    #[test]
    fn strings_cap_at_512_bytes() {
        let exact = "x".repeat(512);
        let result = preview(&json!(exact));
        assert_eq!(result.preview, json!(exact));
        assert!(!result.truncated);

        let over = "x".repeat(513);
        let result = preview(&json!(over));
        assert_eq!(result.preview, json!(exact));
        assert!(result.truncated);

        // 511 ASCII bytes then a two-byte character: the cut drops the whole character.
        let split = format!("{}é", "x".repeat(511));
        let result = preview(&json!(split));
        assert_eq!(result.preview, json!("x".repeat(511)));
        assert!(result.truncated);
    }

    #[test]
    fn arrays_keep_ten_items() {
        let ten: Vec<i32> = (0..10).collect();
        let result = preview(&json!(ten));
        assert_eq!(result.preview, json!(ten));
        assert!(!result.truncated);

        let eleven: Vec<i32> = (0..11).collect();
        let result = preview(&json!(eleven));
        assert_eq!(result.preview, json!(ten));
        assert!(result.truncated);
    }

    #[test]
    fn objects_keep_twenty_keys_in_order() {
        let object = |count: usize| {
            Value::Object((0..count).map(|i| (format!("k{i:02}"), json!(i))).collect())
        };
        let result = preview(&object(20));
        assert_eq!(result.preview, object(20));
        assert!(!result.truncated);

        let result = preview(&object(21));
        assert_eq!(result.preview, object(20));
        assert!(result.truncated);
    }

    #[test]
    fn depth_four_is_kept_and_five_is_elided() {
        let four = json!([[[["deep"]]]]);
        let result = preview(&four);
        assert_eq!(result.preview, four);
        assert!(!result.truncated);

        let five = json!([[[[["deep"]]]]]);
        let result = preview(&five);
        assert_eq!(result.preview, json!([[[["[…]"]]]]));
        assert!(result.truncated);

        let objects = json!({"a": {"b": {"c": {"d": {"e": 1}}, "n": 1}}});
        let result = preview(&objects);
        assert_eq!(
            result.preview,
            json!({"a": {"b": {"c": {"d": "[…]"}, "n": 1}}})
        );
        assert!(result.truncated);

        // Empty containers cost no more than the marker and are kept.
        let empty = json!([[[[[]]]]]);
        assert_eq!(preview(&empty).preview, empty);
    }

    #[test]
    fn serialized_size_falls_back_to_a_json_string() {
        // `["…"]` is four bytes of punctuation plus the string.
        let fits = json!(["x".repeat(508)]);
        let result = preview(&fits);
        assert_eq!(serde_json::to_string(&fits).unwrap().len(), 512);
        assert_eq!(result.preview, fits);
        assert!(!result.truncated);

        let over = json!(["x".repeat(509)]);
        let result = preview(&over);
        let expected = &serde_json::to_string(&over).unwrap()[..512];
        assert_eq!(result.preview, json!(expected));
        assert!(result.truncated);

        // The fallback is the JSON of the redacted value, cut at a character boundary.
        let emoji = json!({"password": "hunter2", "text": "🦀".repeat(200)});
        let result = preview(&emoji);
        let text = result.preview.as_str().unwrap();
        assert!(text.starts_with(r#"{"password":"[REDACTED]","text":"🦀"#));
        assert!(text.len() <= 512 && text.len() > 505);
        assert!(result.redacted && result.truncated);
    }

    #[test]
    fn preview_redacts() {
        let result = preview(&json!({"note": "Bearer abc123", "token": "x"}));
        assert_eq!(
            result.preview,
            json!({"note": "Bearer [REDACTED]", "token": "[REDACTED]"})
        );
        assert!(result.redacted);
        assert!(!result.truncated);
    }

    #[test]
    fn project_event_caps_strings_and_arrays() {
        let twenty: Vec<i32> = (0..20).collect();
        let twenty_one: Vec<i32> = (0..21).collect();
        let event = json!({
            "type": "log",
            "message": format!("{}🦀", "m".repeat(510)),
            "seq": 7,
            "ok": true,
            "items": twenty_one,
            "nested": [[{"deep": {"deeper": {"deepest": "password=hunter2"}}}]],
        });
        let (projected, redacted, truncated) = project_event(&event);
        assert!(redacted && truncated);
        assert_eq!(projected["message"], json!("m".repeat(510)));
        assert_eq!(projected["seq"], json!(7));
        assert_eq!(projected["ok"], json!(true));
        assert_eq!(projected["items"], json!(twenty));
        assert_eq!(
            projected["nested"][0][0]["deep"]["deeper"]["deepest"],
            json!("password=[REDACTED]")
        );

        let small = json!({"type": "phase", "title": "review", "list": twenty});
        assert_eq!(project_event(&small), (small.clone(), false, false));
    }

    #[test]
    fn the_one_walk_projection_equals_redacting_then_projecting() {
        let two_step = |event: &Value| {
            let (whole, redacted) = redact_value(event);
            let mut truncated = false;
            (
                project_event_inner(whole, &mut truncated),
                redacted,
                truncated,
            )
        };
        let mut dropped_secret: Vec<Value> = (0..20).map(|i| json!(i)).collect();
        dropped_secret.push(json!("Bearer abc123"));
        let long_key = "k".repeat(600);
        let token = format!("ghp_{}", "A1".repeat(10));
        let events = [
            json!({"type": "agentStart", "label": "agent 3", "callIndex": 3, "path": null}),
            json!({"type": "agentEnd", "result": {"preview": "ECHO: p3", "redacted": false}}),
            json!({"type": "x", "items": dropped_secret}),
            json!({"type": "x", "apiKey": "abc", "password": null, "nested": {"token": 5}}),
            json!({(long_key.as_str()): "v", "text": "m".repeat(600)}),
            // A key redaction changes: it collides with the member before it.
            json!({"[REDACTED]": "first", (token.as_str()): {"long": "m".repeat(600)}}),
            json!({"ok": [{"Basic dXNlcjpwYXNz": 1}, "password=hunter2"]}),
        ];
        for event in &events {
            assert_eq!(project_event(event), two_step(event), "{event}");
        }
        assert!(
            project_event(&events[2]).1,
            "a dropped item's secret still counts"
        );
    }

    #[test]
    fn huge_values_stay_cheap() {
        let huge = json!({"text": "word ".repeat(1 << 18), "list": vec![1; 100_000]});
        let result = preview(&huge);
        assert!(result.preview.as_str().unwrap().len() <= 512);
        assert!(result.truncated);
    }
}
