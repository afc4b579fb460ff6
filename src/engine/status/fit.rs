//! Fitting the status document under [`MAX_STRUCTURED_BYTES`]: the oldest calls go first,
//! then log lines, then phases, one at a time, until it fits.
//!
//! The document is serialised once to measure it; only one that does not fit is measured
//! further, entry by entry, and the drops are then found by arithmetic instead of by
//! serialising a candidate per drop. That is exact because compact JSON is: an array's
//! content is its elements joined by commas, and the only other bytes a drop changes are the
//! counters `truncation` and `logTail` report (integers in decimal, `true`/`false`).

use super::{MAX_PHASES, MAX_STRUCTURED_BYTES, StatusDocument};

/// The counts a drop does not change: what there was before anything was shown.
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
    account(&mut document, totals, &shown, Dropped::default());
    let whole = serialized_len(&document);
    if whole <= MAX_STRUCTURED_BYTES {
        return document;
    }
    let mut content = Content::of(&document);
    let fixed = whole - content.len() - counters_len(&document);
    let mut dropped = Dropped::default();
    while dropped.one_more(&shown) {
        content.drop_front(&dropped);
        account(&mut document, totals, &shown, dropped);
        if fixed + counters_len(&document) + content.len() <= MAX_STRUCTURED_BYTES {
            break;
        }
    }
    document.calls.drain(..dropped.calls);
    document.log_tail.lines.drain(..dropped.logs);
    document.phases.drain(..dropped.phases);
    debug_assert_eq!(
        serialized_len(&document),
        fixed + counters_len(&document) + content.len(),
        "the arithmetic measures what serialising does"
    );
    document
}

/// The length of `value`'s compact JSON.
pub(super) fn serialized_len(value: &impl serde::Serialize) -> usize {
    crate::util::json_len(value)
}

/// How many entries of each list the document had before any drop.
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

/// How many entries of each list went, from the front.
#[derive(Clone, Copy, Debug, Default)]
struct Dropped {
    calls: usize,
    logs: usize,
    phases: usize,
}

impl Dropped {
    /// Drops the next entry in cap order; `false` when nothing is left to drop.
    fn one_more(&mut self, shown: &Shown) -> bool {
        if self.calls < shown.calls {
            self.calls += 1;
        } else if self.logs < shown.logs {
            self.logs += 1;
        } else if self.phases < shown.phases {
            self.phases += 1;
        } else {
            return false;
        }
        true
    }

    fn any(&self) -> bool {
        self.calls + self.logs + self.phases > 0
    }
}

/// Sets every counter of `document` for what `dropped` leaves of `shown`.
fn account(document: &mut StatusDocument, totals: &Totals, shown: &Shown, dropped: Dropped) {
    let logs_returned = shown.logs - dropped.logs;
    let log_tail = &mut document.log_tail;
    log_tail.total_lines = totals.logs;
    log_tail.omitted_lines = totals.logs.saturating_sub(logs_returned);
    log_tail.truncated_lines = totals.logs_truncated;
    log_tail.redacted_lines = totals.logs_redacted;
    let truncation = &mut document.truncation;
    truncation.byte_cap_applied = dropped.any();
    truncation.phases.total = totals.phases;
    truncation.phases.returned = shown.phases - dropped.phases;
    truncation.phases.shortened = dropped.phases > 0 || totals.phases > MAX_PHASES;
    truncation.phases.redacted = None;
    truncation.logs.total = totals.logs;
    truncation.logs.returned = logs_returned;
    truncation.logs.shortened = dropped.logs > 0;
    truncation.logs.redacted = Some(totals.logs_redacted);
    truncation.calls.total = totals.calls;
    truncation.calls.matched = totals.matched_calls;
    truncation.calls.returned = shown.calls - dropped.calls;
    truncation.calls.shortened_results = 0;
    truncation.calls.redacted_results = 0;
}

/// The bytes of the counters a drop can change, as serialised.
fn counters_len(document: &StatusDocument) -> usize {
    let truncation = &document.truncation;
    [
        document.log_tail.omitted_lines,
        truncation.phases.returned,
        truncation.logs.returned,
        truncation.calls.returned,
    ]
    .into_iter()
    .map(digits)
    .sum::<usize>()
        + [
            truncation.byte_cap_applied,
            truncation.phases.shortened,
            truncation.logs.shortened,
        ]
        .into_iter()
        .map(|flag| if flag { 4 } else { 5 })
        .sum::<usize>()
}

fn digits(number: usize) -> usize {
    number.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// The entries of the three lists, measured one by one, and what is left of them.
struct Content {
    lists: [List; 3],
}

/// One list's entry sizes and the bytes of the entries not dropped yet.
struct List {
    sizes: Vec<usize>,
    dropped: usize,
    remaining_bytes: usize,
}

impl List {
    fn of(sizes: Vec<usize>) -> List {
        List {
            remaining_bytes: sizes.iter().sum(),
            sizes,
            dropped: 0,
        }
    }

    /// Between the brackets: the entries left and a comma between each two.
    fn len(&self) -> usize {
        let left = self.sizes.len() - self.dropped;
        self.remaining_bytes + left.saturating_sub(1)
    }

    fn drop_to(&mut self, dropped: usize) {
        while self.dropped < dropped {
            self.remaining_bytes -= self.sizes[self.dropped];
            self.dropped += 1;
        }
    }
}

impl Content {
    fn of(document: &StatusDocument) -> Content {
        Content {
            lists: [
                List::of(document.calls.iter().map(serialized_len).collect()),
                List::of(document.log_tail.lines.iter().map(serialized_len).collect()),
                List::of(document.phases.iter().map(serialized_len).collect()),
            ],
        }
    }

    fn drop_front(&mut self, dropped: &Dropped) {
        let [calls, logs, phases] = &mut self.lists;
        calls.drop_to(dropped.calls);
        logs.drop_to(dropped.logs);
        phases.drop_to(dropped.phases);
    }

    fn len(&self) -> usize {
        self.lists.iter().map(List::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::status::{CallEntry, StatusQuery, head};
    use crate::model::{CallKind, Phase};

    /// The fitting as it was first written: a candidate serialised per drop. The arithmetic
    /// must pick the same document.
    fn one_candidate_per_drop(document: StatusDocument, totals: &Totals) -> StatusDocument {
        let shown = Shown::of(&document);
        let mut dropped = Dropped::default();
        loop {
            let mut candidate = document.clone();
            candidate.calls.drain(..dropped.calls);
            candidate.log_tail.lines.drain(..dropped.logs);
            candidate.phases.drain(..dropped.phases);
            account(&mut candidate, totals, &shown, dropped);
            if serialized_len(&candidate) <= MAX_STRUCTURED_BYTES || !dropped.one_more(&shown) {
                return candidate;
            }
        }
    }

    fn entry(index: u32, preview_bytes: usize) -> CallEntry {
        CallEntry {
            index,
            kind: CallKind::Agent,
            label: Some(format!("call {index}")),
            phase: None,
            model: Some("mine".into()),
            backend_id: Some("codex".into()),
            timeout_ms: None,
            status: None,
            result_preview: Some(serde_json::Value::String("é\"x".repeat(preview_bytes / 4))),
            result_redacted: false,
            result_truncated: false,
            error_code: None,
            error_message: None,
            replayed: false,
        }
    }

    fn document(calls: usize, preview: usize, logs: usize, phases: usize) -> StatusDocument {
        let record = crate::store::contract::run_record("fit-1", "/home/dev/shop", 1);
        let mut document = head(&record, None, &[], &StatusQuery::default());
        document.calls = (0..calls as u32).map(|i| entry(i, preview)).collect();
        document.log_tail.lines = (0..logs)
            .map(|i| format!("line {i}\n{}", "l".repeat(600)))
            .collect();
        document.phases = (0..phases)
            .map(|i| Phase {
                title: format!("phase {i} {}", "p".repeat(400)),
                detail: None,
                model: None,
            })
            .collect();
        document
    }

    fn totals(document: &StatusDocument) -> Totals {
        Totals {
            calls: document.calls.len() + 3,
            matched_calls: document.calls.len() + 3,
            phases: document.phases.len(),
            logs: document.log_tail.lines.len() + 1,
            logs_redacted: 1,
            logs_truncated: 2,
        }
    }

    fn assert_same_fit(document: StatusDocument) -> StatusDocument {
        let totals = totals(&document);
        let expected = one_candidate_per_drop(document.clone(), &totals);
        let fitted = fit(document, &totals);
        assert_eq!(
            serde_json::to_string(&fitted).expect("json"),
            serde_json::to_string(&expected).expect("json")
        );
        assert_eq!(
            serialized_len(&fitted),
            serde_json::to_vec(&fitted).expect("json").len()
        );
        fitted
    }

    #[test]
    fn a_document_that_fits_is_kept_whole() {
        let fitted = assert_same_fit(document(20, 100, 20, 5));
        assert!(!fitted.truncation.byte_cap_applied);
        assert_eq!(fitted.calls.len(), 20);
    }

    #[test]
    fn calls_go_first_then_log_lines_then_phases() {
        let calls_only = assert_same_fit(document(50, 2_000, 3, 3));
        assert!(calls_only.truncation.byte_cap_applied);
        assert!(!calls_only.calls.is_empty() && calls_only.calls.len() < 50);
        assert_eq!(calls_only.log_tail.lines.len(), 3);
        let logs_too = assert_same_fit(document(5, 4_000, 50, 3));
        assert!(logs_too.calls.is_empty() && logs_too.log_tail.lines.len() < 50);
        assert!(logs_too.truncation.logs.shortened);
        let phases_too = assert_same_fit(document(2, 8_000, 10, 64));
        assert!(phases_too.log_tail.lines.is_empty());
        assert!(phases_too.phases.len() < 64 && phases_too.truncation.phases.shortened);
    }

    /// Across the cap byte by byte: at the cap a document is kept, one byte over it loses
    /// an entry, exactly as serialising each candidate decides.
    #[test]
    fn the_cap_is_kept_to_the_byte() {
        let mut base = document(8, 2_000, 0, 0);
        base.calls[7].label = Some("x".repeat(6_000));
        let accounted_len = |document: &StatusDocument| {
            let (totals, shown) = (totals(document), Shown::of(document));
            let mut document = document.clone();
            account(&mut document, &totals, &shown, Dropped::default());
            serialized_len(&document)
        };
        let over = accounted_len(&base) as isize - MAX_STRUCTURED_BYTES as isize;
        let mut seen_fit_at_cap = false;
        for extra in -3..=3isize {
            let mut document = base.clone();
            let label = document.calls[7].label.as_mut().expect("label");
            let wanted = label.len() as isize - over + extra;
            if wanted < 0 {
                continue;
            }
            label.truncate(0);
            label.push_str(&"x".repeat(wanted as usize));
            let whole = accounted_len(&document);
            let fitted = assert_same_fit(document);
            assert_eq!(
                fitted.truncation.byte_cap_applied,
                whole > MAX_STRUCTURED_BYTES
            );
            seen_fit_at_cap |= whole == MAX_STRUCTURED_BYTES && fitted.calls.len() == 8;
        }
        assert!(seen_fit_at_cap, "one document was exactly at the cap");
    }

    #[test]
    fn a_document_too_big_without_any_list_keeps_nothing_of_them() {
        let mut document = document(1, 100, 1, 1);
        document.workflow_name = "w".repeat(MAX_STRUCTURED_BYTES);
        let fitted = assert_same_fit(document);
        assert!(fitted.calls.is_empty() && fitted.phases.is_empty());
        assert!(fitted.log_tail.lines.is_empty());
    }
}
