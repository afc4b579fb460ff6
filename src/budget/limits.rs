//! Reading a run's spending limits from JSON: the `workflow` tool's flat `run` and `resume`
//! arguments and the script's `meta` object carry `tokenBudget` and `costBudgetUsd`. Bad
//! values are refused with the field's name and what was expected; `resume` replaces the
//! limits it names, refusing one that the run has already spent.

use serde_json::{Map, Value};

use super::{LimitKind, SpendLimits, dollars, spent_cost_usd, spent_tokens};
use crate::model::Usage;

/// The largest `tokenBudget` accepted: integers above 2^53 do not survive a JSON number.
const MAX_TOKENS: u64 = 1 << 53;

/// A limit refused: `field` is the name the caller wrote (`tokenBudget`, `meta.tokenBudget`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct LimitError {
    pub field: String,
    pub problem: String,
}

/// The limits in `fields`, the arguments of `run` or `resume` or the `meta` object; `prefix`
/// goes before a field's name in an error (`""` for arguments, `"meta."` for `meta`). A field
/// that is absent or `null` sets no limit; other fields are not this room's and are ignored.
pub fn limits(fields: &Map<String, Value>, prefix: &str) -> Result<SpendLimits, LimitError> {
    Ok(SpendLimits {
        tokens: token_limit(fields, prefix)?,
        cost_usd: cost_limit(fields, prefix)?,
    })
}

/// The limits a `resume` leaves the run with: each limit `requested` names replaces the
/// current one, the others stay. A requested limit at or below what the run has `spent`
/// is refused, since the run would pause again before any call.
pub fn resume_limits(
    current: SpendLimits,
    requested: SpendLimits,
    spent: &Usage,
) -> Result<SpendLimits, LimitError> {
    if let Some(limit) = requested.tokens {
        let spent = spent_tokens(spent);
        if limit <= spent {
            return Err(below_spend(
                LimitKind::Tokens,
                &format!("{spent} tokens"),
                &limit.to_string(),
            ));
        }
    }
    if let Some(limit) = requested.cost_usd {
        let spent = spent_cost_usd(spent);
        if limit <= spent {
            return Err(below_spend(
                LimitKind::CostUsd,
                &format!("${}", dollars(spent)),
                &dollars(limit),
            ));
        }
    }
    Ok(SpendLimits {
        tokens: requested.tokens.or(current.tokens),
        cost_usd: requested.cost_usd.or(current.cost_usd),
    })
}

impl SpendLimits {
    /// These limits, each unset one taken from `fallback`: the arguments over `meta`.
    pub fn or(self, fallback: SpendLimits) -> SpendLimits {
        SpendLimits {
            tokens: self.tokens.or(fallback.tokens),
            cost_usd: self.cost_usd.or(fallback.cost_usd),
        }
    }
}

fn token_limit(fields: &Map<String, Value>, prefix: &str) -> Result<Option<u64>, LimitError> {
    let field = LimitKind::Tokens.field();
    let Some(value) = present(fields, field) else {
        return Ok(None);
    };
    let expected = format!("must be a positive integer (total tokens, at most {MAX_TOKENS})");
    // Whole-valued floats (`5e4`, `50000.0`) count, as they do for `maxAgents`.
    let number = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= MAX_TOKENS as f64)
            .map(|f| f as u64)
    });
    match number {
        Some(tokens) if (1..=MAX_TOKENS).contains(&tokens) => Ok(Some(tokens)),
        _ => Err(refused(prefix, field, &expected, value)),
    }
}

fn cost_limit(fields: &Map<String, Value>, prefix: &str) -> Result<Option<f64>, LimitError> {
    let field = LimitKind::CostUsd.field();
    let Some(value) = present(fields, field) else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(dollars) if dollars.is_finite() && dollars > 0.0 => Ok(Some(dollars)),
        _ => Err(refused(
            prefix,
            field,
            "must be a positive number (US dollars)",
            value,
        )),
    }
}

fn present<'a>(fields: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    fields.get(field).filter(|value| !value.is_null())
}

fn refused(prefix: &str, field: &str, expected: &str, value: &Value) -> LimitError {
    LimitError {
        field: format!("{prefix}{field}"),
        problem: format!("{expected}, got {}", shown(value)),
    }
}

fn below_spend(kind: LimitKind, spent: &str, limit: &str) -> LimitError {
    LimitError {
        field: kind.field().to_owned(),
        problem: format!(
            "must be above what the run has already spent ({spent}) to resume it, got {limit}"
        ),
    }
}

/// A refused value as the error shows it: numbers and short strings as written, anything
/// else by its kind, so an error never echoes a large payload.
fn shown(value: &Value) -> String {
    match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) if text.chars().count() <= 32 => format!("the string {text:?}"),
        Value::String(_) => "a string".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
        Value::Null => "null".to_owned(),
    }
}
