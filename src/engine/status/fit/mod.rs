//! Fitting the status document under [`MAX_STRUCTURED_BYTES`].
//!
//! Room goes, in this order, to: the rest of the document; the phases (the first ones
//! declared give way first); the newest calls, each with its result preview shortened to
//! [`SHORT_PREVIEW_BYTES`]; the newest log lines; and last the full previews, newest call
//! first, up to the first that does not fit. Asking for more of one list therefore never
//! shows less of what comes before it in that order: a larger `lastN` never shows fewer
//! calls, and a larger `logLines` never shows fewer calls or fewer log lines (docs/api.md,
//! "status, stop, pause").
//!
//! Sizes are reckoned with every count the fit writes (and the two `filter` numbers) at its
//! widest, so how many digits a count happens to have never decides what is shown; the
//! document that goes out is at most that size. The document is serialised once to measure
//! it; only one that does not fit is measured further, entry by entry, and the choice is
//! then made by arithmetic: compact JSON is exact about it, an array's content being its
//! elements joined by commas.

use serde_json::Value;

use super::{CallEntry, MAX_PHASES, MAX_STRUCTURED_BYTES, StatusDocument};
use crate::engine::preview;

/// Longest result preview of a call shortened to fit: its text (for a string preview) or
/// its compact JSON (for any other), cut at a code-point boundary, as a string.
pub(super) const SHORT_PREVIEW_BYTES: usize = 64;

/// The counts a fit does not change: what there was before anything was shown.
pub(super) struct Totals {
    pub calls: usize,
    pub matched_calls: usize,
    pub phases: usize,
    pub logs: usize,
    pub logs_redacted: usize,
    pub logs_truncated: usize,
}

/// Fits `document` (its calls, log lines and phases all in) under the cap and fills in the
/// counters that say what was shown.
pub(super) fn fit(mut document: StatusDocument, totals: &Totals) -> StatusDocument {
    let shown = Shown::of(&document);
    let whole = widest_len(&mut document, totals, &shown);
    if whole <= MAX_STRUCTURED_BYTES {
        account(&mut document, totals, &shown, &Kept::all(&shown));
        return document;
    }
    let sizes = Sizes::of(&document);
    let fixed = whole - sizes.whole_len();
    let mut kept = Kept::choose(&sizes, MAX_STRUCTURED_BYTES.saturating_sub(fixed));
    let Sizes { short_previews, .. } = sizes;
    document.phases.drain(..shown.phases - kept.phases);
    document.log_tail.lines.drain(..shown.logs - kept.logs);
    let dropped_calls = shown.calls - kept.calls;
    document.calls.drain(..dropped_calls);
    let shortened = kept.calls - kept.full_previews;
    for (entry, short) in document
        .calls
        .iter_mut()
        .zip(short_previews.into_iter().skip(dropped_calls))
        .take(shortened)
    {
        if let Some(short) = short {
            entry.result_preview = Some(short);
            entry.result_truncated = true;
            kept.shortened_results += 1;
        }
    }
    account(&mut document, totals, &shown, &kept);
    debug_assert!(
        fixed > MAX_STRUCTURED_BYTES || serialized_len(&document) <= MAX_STRUCTURED_BYTES,
        "the arithmetic measures what serialising does"
    );
    document
}

/// The length of `value`'s compact JSON.
pub(super) fn serialized_len(value: &impl serde::Serialize) -> usize {
    crate::util::json_len(value)
}

/// A shorter form of a call's result preview, or `None` when it has none (the preview is
/// absent, already short, or its short form would not be smaller).
fn short_preview(entry: &CallEntry) -> Option<Value> {
    let full = entry.result_preview.as_ref()?;
    let text = match full {
        Value::String(text) => text.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    let (cut, was_cut) = preview::cap_text(&text, SHORT_PREVIEW_BYTES);
    if !was_cut {
        return None;
    }
    let short = Value::String(cut);
    (serialized_len(&short) < serialized_len(full)).then_some(short)
}

/// How many entries of each list the document had before the fit.
struct Shown {
    calls: usize,
    logs: usize,
    phases: usize,
}

impl Shown {
    fn of(document: &StatusDocument) -> Shown {
        Shown {
            calls: document.calls.len(),
            logs: document.log_tail.lines.len(),
            phases: document.phases.len(),
        }
    }
}

/// The widest value a count can take when it is at most `bound`, or any count up to 99:
/// the query allows at most 50 calls and 50 log lines, and there are at most 64 phases.
fn widest(bound: usize) -> usize {
    bound.max(99)
}

/// The document's length with every count the fit writes, and the `filter` numbers, at
/// their widest; the document keeps its own `filter`.
fn widest_len(document: &mut StatusDocument, totals: &Totals, shown: &Shown) -> usize {
    let filter = (document.filter.last_n, document.filter.log_lines);
    document.filter.last_n = widest(filter.0);
    document.filter.log_lines = widest(filter.1);
    let log_tail = &mut document.log_tail;
    log_tail.total_lines = totals.logs;
    log_tail.omitted_lines = totals.logs;
    log_tail.truncated_lines = widest(totals.logs_truncated);
    log_tail.redacted_lines = widest(totals.logs_redacted);
    let truncation = &mut document.truncation;
    truncation.byte_cap_applied = false;
    truncation.phases.total = totals.phases;
    truncation.phases.returned = widest(shown.phases);
    truncation.phases.shortened = false;
    truncation.phases.redacted = None;
    truncation.logs.total = totals.logs;
    truncation.logs.returned = widest(shown.logs);
    truncation.logs.shortened = false;
    truncation.logs.redacted = Some(widest(totals.logs_redacted));
    truncation.calls.total = totals.calls;
    truncation.calls.matched = totals.matched_calls;
    truncation.calls.returned = widest(shown.calls);
    truncation.calls.shortened_results = widest(shown.calls);
    truncation.calls.redacted_results = widest(shown.calls);
    let length = serialized_len(document);
    (document.filter.last_n, document.filter.log_lines) = filter;
    length
}

/// What the fit keeps: how many of the newest entries of each list, and how many of the
/// newest kept calls keep their full preview.
struct Kept {
    phases: usize,
    calls: usize,
    logs: usize,
    full_previews: usize,
    /// Kept calls whose preview the fit shortened (set once it is applied).
    shortened_results: usize,
}

impl Kept {
    fn all(shown: &Shown) -> Kept {
        Kept {
            phases: shown.phases,
            calls: shown.calls,
            logs: shown.logs,
            full_previews: shown.calls,
            shortened_results: 0,
        }
    }

    /// Spends `room` (the bytes left for the lists' contents) in the fit's order.
    fn choose(sizes: &Sizes, mut room: usize) -> Kept {
        let phases = take_newest(&sizes.phases, &mut room);
        let calls = take_newest(&sizes.short_calls, &mut room);
        let logs = take_newest(&sizes.logs, &mut room);
        let mut full_previews = 0;
        for (full, short) in sizes.full_calls.iter().zip(&sizes.short_calls).rev() {
            if full_previews == calls || full - short > room {
                break;
            }
            room -= full - short;
            full_previews += 1;
        }
        Kept {
            phases,
            calls,
            logs,
            full_previews,
            shortened_results: 0,
        }
    }
}

/// How many entries at the end of a list whose entry sizes are `sizes` fit in `room`, which
/// they then use up; each entry after the first also costs its comma.
fn take_newest(sizes: &[usize], room: &mut usize) -> usize {
    let mut taken = 0;
    for size in sizes.iter().rev() {
        let cost = size + usize::from(taken > 0);
        if cost > *room {
            break;
        }
        *room -= cost;
        taken += 1;
    }
    taken
}

/// The entries of the three lists, measured one by one, calls in both forms.
struct Sizes {
    phases: Vec<usize>,
    full_calls: Vec<usize>,
    short_calls: Vec<usize>,
    /// Each call's shortened preview, when it has one.
    short_previews: Vec<Option<Value>>,
    logs: Vec<usize>,
}

impl Sizes {
    fn of(document: &StatusDocument) -> Sizes {
        let short_previews: Vec<Option<Value>> = document.calls.iter().map(short_preview).collect();
        let full_calls: Vec<usize> = document.calls.iter().map(serialized_len).collect();
        let short_calls = document
            .calls
            .iter()
            .zip(&short_previews)
            .zip(&full_calls)
            .map(|((entry, short), full)| match short {
                Some(short) => {
                    let mut entry = entry.clone();
                    entry.result_preview = Some(short.clone());
                    entry.result_truncated = true;
                    serialized_len(&entry)
                }
                None => *full,
            })
            .collect();
        Sizes {
            phases: document.phases.iter().map(serialized_len).collect(),
            full_calls,
            short_calls,
            short_previews,
            logs: document.log_tail.lines.iter().map(serialized_len).collect(),
        }
    }

    /// The bytes between the three lists' brackets with every entry in, at full size.
    fn whole_len(&self) -> usize {
        [&self.phases, &self.full_calls, &self.logs]
            .into_iter()
            .map(|sizes| sizes.iter().sum::<usize>() + sizes.len().saturating_sub(1))
            .sum()
    }
}

/// Sets every counter of `document` for what `kept` keeps of `shown`.
fn account(document: &mut StatusDocument, totals: &Totals, shown: &Shown, kept: &Kept) {
    let log_tail = &mut document.log_tail;
    log_tail.total_lines = totals.logs;
    log_tail.omitted_lines = totals.logs.saturating_sub(kept.logs);
    log_tail.truncated_lines = totals.logs_truncated;
    log_tail.redacted_lines = totals.logs_redacted;
    let redacted_results = document
        .calls
        .iter()
        .filter(|entry| entry.result_redacted)
        .count();
    let dropped_any =
        kept.phases < shown.phases || kept.logs < shown.logs || kept.calls < shown.calls;
    let truncation = &mut document.truncation;
    truncation.byte_cap_applied = dropped_any || kept.shortened_results > 0;
    truncation.phases.total = totals.phases;
    truncation.phases.returned = kept.phases;
    truncation.phases.shortened = kept.phases < shown.phases || totals.phases > MAX_PHASES;
    truncation.phases.redacted = None;
    truncation.logs.total = totals.logs;
    truncation.logs.returned = kept.logs;
    truncation.logs.shortened = kept.logs < shown.logs;
    truncation.logs.redacted = Some(totals.logs_redacted);
    truncation.calls.total = totals.calls;
    truncation.calls.matched = totals.matched_calls;
    truncation.calls.returned = kept.calls;
    truncation.calls.shortened_results = kept.shortened_results;
    truncation.calls.redacted_results = redacted_results;
}

#[cfg(test)]
mod tests;
