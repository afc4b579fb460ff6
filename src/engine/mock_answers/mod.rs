//! Scripted answers for the mocked dry run (`validate --mock-answers`): rules that give the
//! answer of every agent call whose resolved label matches a glob, so a test drives the
//! script down the branch it wants without a token.
//!
//! The fixture is a JSON object whose keys are label globs (`engine::glob`: `*`, `?`, `\`)
//! and whose values are answers, read in the order written. For each agent call, in the order
//! the script makes them, the **last** rule whose glob matches the label gives the answer. A
//! value `{"$sequence": [a, b, …]}` gives `a` to the first matching call, `b` to the next, and
//! fails the dry run when a further call matches it; any other value (an array included) is
//! one answer for every matching call. The answer is merged over the answer the dry run makes
//! up from the call's schema (objects merge key by key, recursively; anything else replaces),
//! so a rule states only what it changes, and the merged answer must satisfy the schema. A
//! call without a schema takes a non-blank string. Messages name the label, the glob and the
//! position in a sequence, never an answer's values.

use std::sync::Mutex;

use serde_json::Value;

use crate::engine::{glob, schema};
use crate::util::sync::Lock as _;

/// Largest fixture, in bytes of JSON.
pub const MAX_FIXTURE_BYTES: usize = 256 * 1024;
/// Most rules in one fixture.
pub const MAX_RULES: usize = 256;
/// Most answers in one `$sequence`.
pub const MAX_SEQUENCE: usize = 256;
/// Deepest nesting of an answer.
pub const MAX_DEPTH: usize = 32;

/// A fixture's rules and what the dry run took from them. Shared by the root script and the
/// nested workflows of one dry run.
#[derive(Debug)]
pub struct MockAnswers {
    rules: Mutex<Vec<Rule>>,
    /// The first answer that could not be given: the dry run fails with it even when the
    /// script catches the call's error.
    failure: Mutex<Option<String>>,
}

#[derive(Debug)]
struct Rule {
    glob: String,
    answers: Answers,
    /// Calls whose label the glob matched (whether or not this rule won).
    matching: u32,
    /// Calls this rule answered.
    consumed: u32,
}

#[derive(Debug)]
enum Answers {
    One(Value),
    Sequence(Vec<Value>),
}

impl MockAnswers {
    /// Reads a fixture; the error names what is wrong and where, never a value.
    pub fn parse(text: &str) -> Result<MockAnswers, String> {
        if text.len() > MAX_FIXTURE_BYTES {
            return Err(format!(
                "the mock answers are {} bytes, over the limit of {MAX_FIXTURE_BYTES}",
                text.len()
            ));
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|error| format!("the mock answers are not JSON: {error}"))?;
        let Value::Object(object) = value else {
            return Err("the mock answers must be a JSON object of label globs to answers".into());
        };
        if object.len() > MAX_RULES {
            return Err(format!(
                "the mock answers have {} rules, over the limit of {MAX_RULES}",
                object.len()
            ));
        }
        let rules = object
            .into_iter()
            .map(|(glob, answer)| rule(glob, answer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MockAnswers {
            rules: Mutex::new(rules),
            failure: Mutex::new(None),
        })
    }

    /// The answer for the agent call `label`, merged over `made_up` (the dry run's own answer
    /// for the call's `schema`) and checked against `schema`: `None` when no rule matches.
    pub fn answer(
        &self,
        label: &str,
        schema: Option<&Value>,
        made_up: Value,
    ) -> Option<Result<Value, String>> {
        let answer = self.pick(label, schema, made_up);
        if let Some(Err(message)) = &answer {
            self.failure.locked().get_or_insert_with(|| message.clone());
        }
        answer
    }

    /// The first answer that could not be given, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.locked().clone()
    }

    fn pick(
        &self,
        label: &str,
        schema: Option<&Value>,
        made_up: Value,
    ) -> Option<Result<Value, String>> {
        let mut rules = self.rules.locked();
        let mut winner = None;
        for (position, rule) in rules.iter_mut().enumerate() {
            if glob::glob_match(&rule.glob, label) {
                rule.matching += 1;
                winner = Some(position);
            }
        }
        let rule = &mut rules[winner?];
        let position = rule.consumed as usize;
        rule.consumed += 1;
        let (answer, place) = match &rule.answers {
            Answers::One(answer) => (answer.clone(), String::new()),
            Answers::Sequence(answers) => match answers.get(position) {
                Some(answer) => (
                    answer.clone(),
                    format!(" (answer {} of its $sequence)", position + 1),
                ),
                None => {
                    return Some(Err(format!(
                        "the agent call {label:?} matches the mock answer {:?}, whose $sequence of {} answers is used up",
                        rule.glob,
                        answers.len()
                    )));
                }
            },
        };
        Some(checked(
            label,
            &rule.glob,
            &place,
            schema,
            merge(made_up, answer),
        ))
    }

    /// What each rule did, in the fixture's order: `{rules: [{glob, matchingCalls,
    /// consumedCalls, sequenceLength?}], unused: [glob]}`; a rule no call took is unused.
    pub fn report(&self) -> Value {
        let rules = self.rules.locked();
        let listed: Vec<Value> = rules
            .iter()
            .map(|rule| {
                let mut entry = serde_json::json!({
                    "glob": rule.glob,
                    "matchingCalls": rule.matching,
                    "consumedCalls": rule.consumed,
                });
                if let Answers::Sequence(answers) = &rule.answers {
                    entry["sequenceLength"] = answers.len().into();
                }
                entry
            })
            .collect();
        let unused: Vec<&str> = rules
            .iter()
            .filter(|rule| rule.consumed == 0)
            .map(|rule| rule.glob.as_str())
            .collect();
        serde_json::json!({"rules": listed, "unused": unused})
    }
}

fn rule(glob: String, answer: Value) -> Result<Rule, String> {
    let count = glob.chars().count();
    if count == 0 || count > glob::MAX_GLOB_CHARS {
        return Err(format!(
            "the mock answer glob {glob:?} must be 1 to {} characters",
            glob::MAX_GLOB_CHARS
        ));
    }
    if glob.ends_with('\\') && !glob.ends_with("\\\\") {
        return Err(format!(
            "the mock answer glob {glob:?} ends with a lone `\\`"
        ));
    }
    if depth(&answer) > MAX_DEPTH {
        return Err(format!(
            "the mock answer for {glob:?} is nested deeper than {MAX_DEPTH} levels"
        ));
    }
    let answers = match answer {
        Value::Object(object) if object.contains_key("$sequence") => {
            if object.len() != 1 {
                return Err(format!(
                    "the mock answer for {glob:?} has keys beside $sequence"
                ));
            }
            match object.into_iter().next().map(|(_, value)| value) {
                Some(Value::Array(answers))
                    if !answers.is_empty() && answers.len() <= MAX_SEQUENCE =>
                {
                    Answers::Sequence(answers)
                }
                _ => {
                    return Err(format!(
                        "the $sequence for {glob:?} must be an array of 1 to {MAX_SEQUENCE} answers"
                    ));
                }
            }
        }
        other => Answers::One(other),
    };
    Ok(Rule {
        glob,
        answers,
        matching: 0,
        consumed: 0,
    })
}

/// `answer` merged over `base`: objects key by key, recursively; anything else replaces.
fn merge(base: Value, answer: Value) -> Value {
    match (base, answer) {
        (Value::Object(mut base), Value::Object(answer)) => {
            for (key, value) in answer {
                let merged = match base.remove(&key) {
                    Some(old) => merge(old, value),
                    None => value,
                };
                base.insert(key, merged);
            }
            Value::Object(base)
        }
        (_, answer) => answer,
    }
}

fn checked(
    label: &str,
    glob: &str,
    place: &str,
    schema: Option<&Value>,
    merged: Value,
) -> Result<Value, String> {
    let fault = match schema {
        Some(schema) => schema::validate(schema, &merged).err().map(|error| {
            // The validator's message names the failing path and keyword; it may quote the
            // value, which the fixture's author wrote, so only its first clause is kept.
            let first = error.split(':').next().unwrap_or("").trim().to_owned();
            format!("does not fit the call's schema ({first})")
        }),
        None => match &merged {
            Value::String(text) if !text.trim().is_empty() => None,
            _ => Some("must be a non-blank string (the call has no schema)".to_owned()),
        },
    };
    match fault {
        None => Ok(merged),
        Some(fault) => Err(format!(
            "the mock answer {glob:?}{place} for the agent call {label:?} {fault}"
        )),
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
