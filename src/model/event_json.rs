//! An event's JSON object as text. The engine writes each event once, as the bytes the store
//! keeps and readers are served; whoever needs its members parses them ([`EventJson::value`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The compact JSON text of one event object, `{"type":…,"runId":…,"scope":…,…}`. A
/// `String` rather than a boxed `str`: an event lives until its commit, and shrinking each
/// buffer to its length would copy every event once more.
#[derive(Clone, PartialEq, Eq)]
pub struct EventJson(String);

impl EventJson {
    /// The compact JSON of `value`.
    pub fn from_value(value: &Value) -> EventJson {
        EventJson(value.to_string())
    }

    /// Text serde_json wrote: the engine's own event writer. Not for text read from outside
    /// the process ([`EventJson::parse`] checks that).
    pub(crate) fn from_written(text: String) -> EventJson {
        debug_assert!(
            serde_json::from_str::<&RawValue>(&text).is_ok(),
            "not JSON: {text}"
        );
        EventJson(text)
    }

    /// Text read back from a store: kept as it is once it is checked to be one JSON value.
    pub fn parse(text: String) -> Result<EventJson, serde_json::Error> {
        serde_json::from_str::<&RawValue>(&text)?;
        Ok(EventJson(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The event's members as a value.
    pub fn value(&self) -> Value {
        // Valid JSON by construction; only nesting past the parser's depth limit could fail,
        // and no event is built that deep.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// The event's `type`, read without parsing the rest when it is the first member, as
    /// every event the engine writes has it.
    pub fn event_type(&self) -> Option<Cow<'_, str>> {
        if let Some(rest) = self.0.strip_prefix("{\"type\":\"")
            && let Some(end) = rest.find(['"', '\\'])
            && rest.as_bytes()[end] == b'"'
        {
            return Some(Cow::Borrowed(&rest[..end]));
        }
        #[derive(Deserialize)]
        struct Typed<'a> {
            #[serde(rename = "type", borrow, default)]
            kind: Option<Cow<'a, str>>,
        }
        serde_json::from_str::<Typed<'_>>(&self.0).ok()?.kind
    }
}

impl fmt::Debug for EventJson {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl fmt::Display for EventJson {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl Serialize for EventJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EventJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EventJson, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer).map_err(D::Error::custom)?;
        Ok(EventJson(Box::<str>::from(raw).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_keeps_its_bytes_and_reads_its_type_either_way() {
        let event = EventJson::from_value(&json!({"type": "agentEnd", "runId": "r", "n": 1}));
        assert_eq!(event.as_str(), r#"{"type":"agentEnd","runId":"r","n":1}"#);
        assert_eq!(event.event_type().as_deref(), Some("agentEnd"));
        assert!(matches!(event.event_type(), Some(Cow::Borrowed(_))));
        // An escape in the type, the type not first, or none at all: the parse answers.
        for (text, kind) in [
            (r#"{"type":"a\"b","x":1}"#, Some("a\"b")),
            (r#"{"type":"\u0061b"}"#, Some("ab")),
            (r#"{"x":[1],"type":"late"}"#, Some("late")),
            (r#"{"x":1}"#, None),
            (r#"{"type":7}"#, None),
        ] {
            let event = EventJson::parse(text.to_owned()).expect("JSON");
            assert_eq!(event.event_type().as_deref(), kind, "{text}");
            assert_eq!(event.as_str(), text);
        }
        assert!(EventJson::parse("{\"type\":".to_owned()).is_err());
        // Served as the JSON it is, not as a string of it.
        let record = json!({"event": EventJson::parse(r#"{"b":1,"a":2}"#.to_owned()).unwrap()});
        assert_eq!(record.to_string(), r#"{"event":{"b":1,"a":2}}"#);
        let back: EventJson = serde_json::from_str(r#"{"b": 1}"#).expect("deserialize");
        assert_eq!(back.as_str(), r#"{"b": 1}"#);
    }
}
