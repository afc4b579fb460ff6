//! A call row's token usage as it is stored: a JSON array `[input, output, total]`, or
//! `[input, output, total, costUsd]` when the usage has a cost, instead of the object of
//! `docs/api.md` (7 bytes instead of about 50 for a small call), so that four call rows fit a
//! 1 KiB page instead of three (docs/store.md has the figures). It reads back as the same
//! `Usage` (an `f64` cost is written by serde_json in its shortest exact form).

use crate::model::Usage;

/// The stored text of `usage`.
pub(super) fn stored(usage: &Usage) -> String {
    let Usage {
        input_tokens,
        output_tokens,
        total_tokens,
        cost_usd,
    } = *usage;
    let counts = [input_tokens, output_tokens, total_tokens];
    match cost_usd {
        None => serde_json::to_string(&counts),
        Some(cost) => serde_json::to_string(&(counts[0], counts[1], counts[2], cost)),
    }
    .expect("numbers always serialize")
}

/// The usage of the stored text [`stored`] writes.
pub(super) fn read(text: &str) -> Result<Usage, serde_json::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Compact {
        Counts(u64, u64, u64),
        Costed(u64, u64, u64, f64),
    }
    Ok(match serde_json::from_str(text)? {
        Compact::Counts(input_tokens, output_tokens, total_tokens) => Usage {
            input_tokens,
            output_tokens,
            total_tokens,
            cost_usd: None,
        },
        Compact::Costed(input_tokens, output_tokens, total_tokens, cost) => Usage {
            input_tokens,
            output_tokens,
            total_tokens,
            cost_usd: Some(cost),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{read, stored};
    use crate::model::Usage;

    fn usage(cost_usd: Option<f64>) -> Usage {
        Usage {
            input_tokens: 1,
            output_tokens: u64::MAX,
            total_tokens: 0,
            cost_usd,
        }
    }

    #[test]
    fn usage_round_trips_through_the_array() {
        let plain = usage(None);
        assert_eq!(stored(&plain), format!("[1,{},0]", u64::MAX));
        assert_eq!(read(&stored(&plain)).unwrap(), plain);
        for cost in [0.1 + 0.2, 1e-300, 12_345.678_901_234_5, 0.0] {
            let costed = usage(Some(cost));
            let back = read(&stored(&costed)).unwrap();
            assert_eq!(back.cost_usd.map(f64::to_bits), Some(cost.to_bits()));
            assert_eq!(back, costed);
        }
    }

    /// Arrays of any other length, a negative count or any other JSON are not usage.
    #[test]
    fn other_texts_are_refused() {
        let object = r#"{"inputTokens":10,"outputTokens":5,"totalTokens":15}"#;
        for text in [
            "[]",
            "[1,2]",
            "[1,2,3,0.5,9]",
            "[-1,2,3]",
            "[1,2,3,\"x\"]",
            object,
        ] {
            assert!(read(text).is_err(), "{text}");
        }
    }
}
