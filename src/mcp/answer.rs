//! A tool result that may come with its JSON text already written, so that an answer a
//! handler keeps (the workflow tool's settled `status` documents) is not cloned and
//! serialised again for every call that repeats it.
//!
//! A handler answers `tools/call` with a [`ToolAnswer`]: a plain `Value`, or a shared
//! [`PreparedResult`] holding the result and its compact JSON text side by side. The core
//! writes the text as it stands when the era's shaping would leave the result unchanged (a
//! legacy session of 2025-06-18 or later, or an older one when the result has no
//! `resource_link` block) and appends `resultType` for a modern request; anything else, and
//! every caller that wants a `Value`, gets a clone of the value, exactly as before.

use std::sync::Arc;

use serde_json::Value;

/// One tool result and its compact JSON text, built once and shared.
#[derive(Debug, PartialEq)]
pub struct PreparedResult {
    /// The result, for callers that read or reshape it (stdio, the channels, tests).
    value: Value,
    /// `serde_json::to_string(&value)`: what the HTTP transport writes.
    json: String,
    /// Whether `content` holds a `resource_link` block, which sessions older than
    /// 2025-06-18 must not see (so the text cannot go out to them as it is).
    has_links: bool,
}

impl PreparedResult {
    /// Writes `value`'s text once.
    pub fn new(value: Value) -> PreparedResult {
        let json = serde_json::to_string(&value).expect("a JSON value always serialises");
        let has_links = value
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|content| {
                content
                    .iter()
                    .any(|block| block.get("type").and_then(Value::as_str) == Some("resource_link"))
            });
        PreparedResult {
            value,
            json,
            has_links,
        }
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The result's compact JSON.
    pub fn json(&self) -> &str {
        &self.json
    }

    pub(crate) fn has_links(&self) -> bool {
        self.has_links
    }
}

/// What a tool handler answers `tools/call` with.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolAnswer {
    Value(Value),
    Prepared(Arc<PreparedResult>),
}

impl ToolAnswer {
    /// The result, borrowed.
    pub fn value(&self) -> &Value {
        match self {
            ToolAnswer::Value(value) => value,
            ToolAnswer::Prepared(prepared) => prepared.value(),
        }
    }

    /// The result as a `Value` of its own (a clone of a prepared one).
    pub fn into_value(self) -> Value {
        match self {
            ToolAnswer::Value(value) => value,
            ToolAnswer::Prepared(prepared) => prepared.value().clone(),
        }
    }
}

impl From<Value> for ToolAnswer {
    fn from(value: Value) -> ToolAnswer {
        ToolAnswer::Value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::handler::Era;
    use crate::mcp::{jsonrpc, shape};
    use serde_json::json;

    #[test]
    fn the_text_is_the_values_compact_json() {
        let value = json!({"content": [{"type": "text", "text": "a \"b\""}], "isError": false});
        let prepared = PreparedResult::new(value.clone());
        assert_eq!(prepared.json(), serde_json::to_string(&value).unwrap());
        assert_eq!(prepared.value(), &value);
        assert!(!prepared.has_links());
    }

    #[test]
    fn a_resource_link_block_is_noticed() {
        let value = json!({"content": [{"type": "text", "text": "x"}, {"type": "resource_link", "uri": "file:///a"}]});
        assert!(PreparedResult::new(value).has_links());
        assert!(!PreparedResult::new(json!({"content": "resource_link"})).has_links());
    }

    fn legacy(version: &str) -> Era {
        Era::Legacy {
            version: version.to_owned(),
        }
    }

    /// What the core sends for `value` when it shapes the value itself.
    fn shaped(era: &Era, value: Value) -> String {
        let result = match era {
            Era::Modern { .. } => shape::modern("tools/call", value, 0, shape::CacheScope::Private),
            Era::Legacy { version } => shape::without_links_before_2025_06_18(version, value),
        };
        serde_json::to_string(&jsonrpc::success_response(&json!(7), result)).unwrap()
    }

    #[test]
    fn the_text_goes_out_as_the_shaped_value_would() {
        let modern = Era::Modern {
            version: "2026-07-28".to_owned(),
        };
        let values = [
            json!({"content": [{"type": "text", "text": "é \u{1}"}], "structuredContent": {"n": 1.5}}),
            json!({"content": [{"type": "resource_link", "uri": "file:///a"}], "isError": false}),
            json!({"resultType": "complete", "content": []}),
            json!({}),
        ];
        for value in values {
            let prepared = PreparedResult::new(value.clone());
            for era in [
                legacy("2025-11-25"),
                legacy("2025-06-18"),
                legacy("2025-03-26"),
                modern.clone(),
            ] {
                let expected = shaped(&era, value.clone());
                match shape::prepared_text(&era, &prepared) {
                    Some(text) => assert_eq!(
                        jsonrpc::success_text(&json!(7), &text),
                        expected,
                        "{era:?} {value}"
                    ),
                    None => {
                        assert!(
                            prepared.has_links() && era == legacy("2025-03-26"),
                            "{era:?} {value}"
                        );
                        assert_ne!(expected, jsonrpc::success_text(&json!(7), prepared.json()));
                    }
                }
            }
        }
    }

    #[test]
    fn the_envelope_text_is_serde_jsons() {
        for id in [json!(1), json!("a\"b"), json!(-3), json!(null)] {
            let result = json!({"k": [1, "two"]});
            assert_eq!(
                jsonrpc::success_text(&id, &result.to_string()),
                serde_json::to_string(&jsonrpc::success_response(&id, result)).unwrap()
            );
        }
    }

    #[test]
    fn into_value_gives_the_same_result_either_way() {
        let value = json!({"a": 1});
        let prepared = ToolAnswer::Prepared(Arc::new(PreparedResult::new(value.clone())));
        assert_eq!(prepared.value(), &value);
        assert_eq!(prepared.into_value(), value);
        assert_eq!(ToolAnswer::from(value.clone()).into_value(), value);
    }
}
