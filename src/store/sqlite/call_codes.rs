//! Three `calls` columns in a shorter stored form (migration 12, docs/performance.md "Issue 18:
//! bytes per call, fourth pass"), so that six rows of a small call fit a 1 KiB page instead of
//! four and each commit copies fewer pages into the WAL:
//!
//! - `outcome` and `origin` as a one-digit code ([`OUTCOMES`], [`ORIGINS`]: a code is the
//!   value's position there) instead of their names; text, since the columns' TEXT affinity
//!   would turn an integer into text anyway, and no name is a digit;
//! - `session` as the bare session id (a blob of its UTF-8 bytes) when the stored JSON would be
//!   exactly `{"backendId":<the row's backend_id>,"sessionId":<text>}`, the shape every runner
//!   writes; any other session stays its JSON text.
//!
//! Rows written before keep the names and the JSON text, which read as they always did. A read
//! gives back the value written: a code names one value, and a compact session is rebuilt with
//! its members in the written order.

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use serde_json::Value;

use crate::model::{CallOrigin, CallOutcome};
use crate::store::StoreResult;
use crate::store::codec::to_json;

/// The outcome of each code; codes are positions, so new values go at the end.
pub(super) const OUTCOMES: [CallOutcome; 3] =
    [CallOutcome::Result, CallOutcome::Null, CallOutcome::Error];
/// The origin of each code; codes are positions, so new values go at the end.
pub(super) const ORIGINS: [CallOrigin; 5] = [
    CallOrigin::Runner,
    CallOrigin::JournalReplay,
    CallOrigin::Confirm,
    CallOrigin::Headless,
    CallOrigin::Engine,
];

/// The stored codes, by position.
const CODES: [&str; 5] = ["0", "1", "2", "3", "4"];

/// The stored code of an outcome.
pub(super) fn outcome_code(outcome: CallOutcome) -> &'static str {
    code(&OUTCOMES, outcome)
}

/// The stored code of an origin.
pub(super) fn origin_code(origin: CallOrigin) -> &'static str {
    code(&ORIGINS, origin)
}

/// The outcome of a stored code or (rows written before migration 12) name.
pub(super) fn read_outcome(value: ValueRef<'_>) -> Result<CallOutcome, String> {
    decoded(value, &OUTCOMES, CallOutcome::parse)
}

/// The origin of a stored code or (rows written before migration 12) name.
pub(super) fn read_origin(value: ValueRef<'_>) -> Result<CallOrigin, String> {
    decoded(value, &ORIGINS, CallOrigin::parse)
}

fn code<T: PartialEq + Copy>(table: &[T], value: T) -> &'static str {
    let position = table.iter().position(|known| *known == value);
    // Every value of the enums is in its table, and the tables are no longer than CODES
    // (tested).
    CODES[position.expect("every value has a code")]
}

fn decoded<T: Copy>(
    value: ValueRef<'_>,
    table: &[T],
    parse: fn(&str) -> Option<T>,
) -> Result<T, String> {
    match value {
        ValueRef::Text(&[digit @ b'0'..=b'9']) => table
            .get(usize::from(digit - b'0'))
            .copied()
            .ok_or_else(|| format!("unknown code {}", char::from(digit))),
        ValueRef::Text(text) => {
            let text = std::str::from_utf8(text).map_err(|error| error.to_string())?;
            parse(text).ok_or_else(|| format!("unknown value {text:?}"))
        }
        other => Err(format!(
            "expected a code or a name, found {:?}",
            other.data_type()
        )),
    }
}

/// What a session is stored as: the bare session id when it is the runner's shape for the
/// row's backend, else its JSON text; NULL without one.
pub(super) fn stored_session<'a>(
    session: Option<&'a Value>,
    backend_id: Option<&str>,
) -> StoreResult<ToSqlOutput<'a>> {
    let Some(session) = session else {
        return Ok(ToSqlOutput::Owned(SqlValue::Null));
    };
    if let Some(id) = compact_id(session, backend_id) {
        return Ok(ToSqlOutput::Borrowed(ValueRef::Blob(id.as_bytes())));
    }
    to_json(session, "call session").map(|text| ToSqlOutput::Owned(SqlValue::Text(text)))
}

/// The session id of `{"backendId": backend_id, "sessionId": <text>}`, members in that
/// order and no others.
fn compact_id<'a>(session: &'a Value, backend_id: Option<&str>) -> Option<&'a str> {
    let members = session.as_object()?;
    let mut entries = members.iter();
    let (Some(("backendId", backend)), Some(("sessionId", Value::String(id))), None) = (
        entries.next().map(|(key, value)| (key.as_str(), value)),
        entries.next().map(|(key, value)| (key.as_str(), value)),
        entries.next(),
    ) else {
        return None;
    };
    (backend.as_str().is_some() && backend.as_str() == backend_id).then_some(id.as_str())
}

/// The session of a stored value, given the row's backend id: a blob is a compact session id.
pub(super) fn read_session(
    value: ValueRef<'_>,
    backend_id: Option<&str>,
) -> Result<Option<Value>, String> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(text) => serde_json::from_slice(text)
            .map(Some)
            .map_err(|error| error.to_string()),
        ValueRef::Blob(id) => {
            let id = std::str::from_utf8(id).map_err(|error| error.to_string())?;
            let backend = backend_id.ok_or("a compact session without a backend id")?;
            let mut members = serde_json::Map::new();
            members.insert("backendId".to_owned(), Value::from(backend));
            members.insert("sessionId".to_owned(), Value::from(id));
            Ok(Some(Value::Object(members)))
        }
        other => Err(format!(
            "expected session JSON or an id, found {:?}",
            other.data_type()
        )),
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::types::{ToSqlOutput, ValueRef};
    use serde_json::{Value, json};

    use super::*;

    fn as_ref<'a>(output: &'a ToSqlOutput<'_>) -> ValueRef<'a> {
        match output {
            ToSqlOutput::Borrowed(value) => *value,
            ToSqlOutput::Owned(value) => value.into(),
            other => panic!("unexpected output {other:?}"),
        }
    }

    /// Every value has its own code and reads back from it and from its name.
    #[test]
    fn every_outcome_and_origin_round_trips() {
        for outcome in OUTCOMES {
            let code = outcome_code(outcome);
            assert_eq!(read_outcome(ValueRef::Text(code.as_bytes())), Ok(outcome));
            let name = ValueRef::Text(outcome.as_str().as_bytes());
            assert_eq!(read_outcome(name), Ok(outcome));
        }
        for origin in ORIGINS {
            let code = origin_code(origin);
            assert_eq!(read_origin(ValueRef::Text(code.as_bytes())), Ok(origin));
            let name = ValueRef::Text(origin.as_str().as_bytes());
            assert_eq!(read_origin(name), Ok(origin));
        }
        let codes: Vec<&str> = ORIGINS.into_iter().map(origin_code).collect();
        assert_eq!(codes, ["0", "1", "2", "3", "4"]);
        let codes: Vec<&str> = OUTCOMES.into_iter().map(outcome_code).collect();
        assert_eq!(codes, ["0", "1", "2"]);
        // Every variant is in a table: a new one fails to compile here until it is added.
        for outcome in OUTCOMES {
            match outcome {
                CallOutcome::Result | CallOutcome::Null | CallOutcome::Error => {}
            }
        }
        for origin in ORIGINS {
            match origin {
                CallOrigin::Runner
                | CallOrigin::JournalReplay
                | CallOrigin::Confirm
                | CallOrigin::Headless
                | CallOrigin::Engine => {}
            }
        }
    }

    #[test]
    fn unknown_codes_and_names_are_refused() {
        for value in [
            ValueRef::Text(b"3"),
            ValueRef::Text(b"00"),
            ValueRef::Text(b"Result"),
            ValueRef::Integer(0),
            ValueRef::Real(0.0),
            ValueRef::Null,
        ] {
            assert!(read_outcome(value).is_err(), "{value:?}");
        }
        assert!(read_origin(ValueRef::Text(b"5")).is_err());
    }

    /// The runner's shape for the row's backend is stored as the bare id and reads back equal,
    /// members in the same order; every other session is stored as its JSON text.
    #[test]
    fn sessions_read_back_as_written() {
        let compact = json!({"backendId": "claude", "sessionId": "s-1"});
        let stored = stored_session(Some(&compact), Some("claude")).expect("stored");
        assert_eq!(as_ref(&stored), ValueRef::Blob(b"s-1"));
        let back = read_session(as_ref(&stored), Some("claude")).expect("read");
        assert_eq!(back.as_ref(), Some(&compact));
        assert_eq!(
            serde_json::to_string(&back).expect("text"),
            serde_json::to_string(&compact).expect("text")
        );
        let kept: [(Value, Option<&str>); 7] = [
            (
                json!({"backendId": "claude", "sessionId": "s-1"}),
                Some("pi"),
            ),
            (json!({"backendId": "claude", "sessionId": "s-1"}), None),
            (
                json!({"sessionId": "s-1", "backendId": "claude"}),
                Some("claude"),
            ),
            (
                json!({"backendId": "claude", "sessionId": 7}),
                Some("claude"),
            ),
            (
                json!({"backendId": "claude", "sessionId": "s", "x": 1}),
                Some("claude"),
            ),
            (json!({"sessionId": "s-1"}), Some("claude")),
            (json!(["claude", "s-1"]), Some("claude")),
        ];
        for (session, backend) in kept {
            let stored = stored_session(Some(&session), backend).expect("stored");
            let text = serde_json::to_string(&session).expect("text");
            assert_eq!(
                as_ref(&stored),
                ValueRef::Text(text.as_bytes()),
                "{session}"
            );
            let back = read_session(as_ref(&stored), backend).expect("read");
            assert_eq!(back, Some(session));
        }
        let none = stored_session(None, Some("claude")).expect("stored");
        assert_eq!(as_ref(&none), ValueRef::Null);
        assert_eq!(read_session(ValueRef::Null, None), Ok(None));
        // A compact id needs the row's backend to be rebuilt.
        assert!(read_session(ValueRef::Blob(b"s-1"), None).is_err());
    }
}
