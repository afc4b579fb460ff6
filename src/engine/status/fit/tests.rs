//! Tests of the status fit: a seeded property test over every `lastN`/`logLines` pair
//! (monotone, under the cap, newest entries kept, counters true), a reference fit that
//! serialises each candidate (the arithmetic must choose what it chooses), and the cases
//! that made the rule: 60 calls asked for 50 and 50.

use serde_json::{Value, json};

use super::*;
use crate::engine::status::{StatusQuery, head};
use crate::model::{CallKind, Phase};

/// xorshift64*: small and seeded, so every failure reproduces.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    /// Text of about `bytes` bytes mixing plain letters, characters JSON escapes and
    /// two-byte characters.
    fn text(&mut self, bytes: usize) -> String {
        let mut text = String::new();
        while text.len() < bytes {
            text.push(match self.below(12) {
                0 => '"',
                1 => '\n',
                2 => 'é',
                3 => '\\',
                _ => (b'a' + self.below(26) as u8) as char,
            });
        }
        text
    }

    /// [`Prng::text`] of fewer than `bound` bytes (give or take a character).
    fn text_below(&mut self, bound: usize) -> String {
        let bytes = self.below(bound);
        self.text(bytes)
    }
}

/// Everything a run has that status could show.
struct Pool {
    calls: Vec<CallEntry>,
    logs: Vec<String>,
    phases: Vec<Phase>,
}

fn entry(index: u32, label: String, preview: Option<Value>) -> CallEntry {
    CallEntry {
        index,
        kind: CallKind::Agent,
        label: Some(label),
        phase: None,
        model: Some("mine".into()),
        backend_id: Some("codex".into()),
        timeout_ms: None,
        status: None,
        waiting_for: None,
        attempt: None,
        attempts: Some(1),
        result_preview: preview,
        result_redacted: false,
        result_truncated: false,
        error_code: None,
        error_message: None,
        replayed: false,
        live_reason: None,
        // Every third call ran isolated, so the sizes reckoned include its outcome.
        changes: index.is_multiple_of(3).then(|| crate::model::CallChanges {
            branch: Some(format!("agentprism/r/{index}-{}", index * 7)),
            base_commit: "0".repeat(40),
            head_commit: "f".repeat(40),
            files_changed: index,
            insertions: index * 11,
            deletions: index * 3,
        }),
    }
}

impl Pool {
    fn random(random: &mut Prng) -> Pool {
        let calls = (0..random.below(90) as u32)
            .map(|index| {
                let label_bytes = 1 + random.below(120);
                let label = random.text(label_bytes);
                let preview = match random.below(5) {
                    0 => None,
                    1 => Some(json!(random.text_below(40))),
                    2 => Some(json!(random.text_below(512) + "!")),
                    3 => Some(json!({"verdict": random.text_below(200), "n": index})),
                    _ => Some(json!(
                        preview::cap_text(&random.text(700), preview::TEXT_CAP).0
                    )),
                };
                let mut entry = entry(index, label, preview);
                entry.result_redacted = random.below(7) == 0;
                if random.below(6) == 0 {
                    entry.error_code = Some("AGENT_TIMEOUT".into());
                    let message_bytes = random.below(240);
                    entry.error_message = Some(random.text(message_bytes));
                }
                entry
            })
            .collect();
        let logs = (0..random.below(90))
            .map(|_| {
                let bytes = random.below(520);
                preview::cap_text(&random.text(bytes), preview::TEXT_CAP).0
            })
            .collect();
        let phases = (0..random.below(MAX_PHASES + 1))
            .map(|i| Phase {
                title: format!("phase {i} {}", random.text_below(120)),
                detail: None,
                model: None,
            })
            .collect();
        Pool {
            calls,
            logs,
            phases,
        }
    }

    /// The document `status::build` hands the fit for this query, and its totals.
    fn document(&self, last_n: usize, log_lines: usize) -> (StatusDocument, Totals) {
        let record = crate::store::contract::run_record("fit-1", "/home/dev/shop", 1);
        let query = StatusQuery {
            last_n,
            label_glob: None,
            log_lines,
        };
        let mut document = head(&record, None, &[], &query);
        document.calls = self.calls[self.calls.len().saturating_sub(last_n)..].to_vec();
        document.log_tail.lines = self.logs[self.logs.len().saturating_sub(log_lines)..].to_vec();
        document.phases = self.phases.clone();
        let lines = &document.log_tail.lines;
        let totals = Totals {
            calls: self.calls.len(),
            matched_calls: self.calls.len(),
            phases: self.phases.len(),
            logs: self.logs.len(),
            // Status counts these over the lines it read, as `build` does.
            logs_redacted: lines.iter().filter(|line| line.contains('\\')).count(),
            logs_truncated: lines.iter().filter(|line| line.len() >= 500).count(),
        };
        (document, totals)
    }

    fn fitted(&self, last_n: usize, log_lines: usize) -> StatusDocument {
        let (document, totals) = self.document(last_n, log_lines);
        fit(document, &totals)
    }
}

fn exact_len(document: &StatusDocument) -> usize {
    serde_json::to_vec(document).expect("json").len()
}

/// What a fitted document must be, whatever was asked: under the cap; the newest calls,
/// log lines and phases; counters that say what is there; shortened previews only on the
/// oldest calls shown.
fn assert_well_formed(pool: &Pool, last_n: usize, log_lines: usize, fitted: &StatusDocument) {
    let at = format!("lastN {last_n}, logLines {log_lines}");
    assert!(
        exact_len(fitted) <= MAX_STRUCTURED_BYTES,
        "{at}: over the cap"
    );
    let calls = fitted.calls.len();
    assert!(calls <= last_n.min(pool.calls.len()), "{at}");
    let newest = &pool.calls[pool.calls.len() - calls..];
    let indexes = |entries: &[CallEntry]| entries.iter().map(|e| e.index).collect::<Vec<_>>();
    assert_eq!(
        indexes(&fitted.calls),
        indexes(newest),
        "{at}: not the newest calls"
    );
    let lines = &fitted.log_tail.lines;
    assert_eq!(
        lines[..],
        pool.logs[pool.logs.len() - lines.len()..],
        "{at}"
    );
    let phases = fitted.phases.len();
    assert_eq!(
        fitted.phases[..],
        pool.phases[pool.phases.len() - phases..],
        "{at}"
    );
    let truncation = &fitted.truncation;
    assert_eq!(truncation.calls.returned, calls, "{at}");
    assert_eq!(truncation.logs.returned, lines.len(), "{at}");
    assert_eq!(truncation.phases.returned, phases, "{at}");
    assert_eq!(
        fitted.log_tail.omitted_lines,
        pool.logs.len() - lines.len(),
        "{at}"
    );
    let changed: Vec<bool> = fitted
        .calls
        .iter()
        .zip(newest)
        .map(|(shown, original)| shown.result_preview != original.result_preview)
        .collect();
    let shortened = changed.iter().filter(|changed| **changed).count();
    assert_eq!(truncation.calls.shortened_results, shortened, "{at}");
    // Shortened previews are those of the oldest calls shown: no call before the newest
    // shortened one kept a preview it could have had shortened.
    if let Some(last) = changed.iter().rposition(|changed| *changed) {
        for (position, original) in newest[..last].iter().enumerate() {
            let shortenable = short_preview(original).is_some();
            assert!(
                !shortenable || changed[position],
                "{at}: call {position} kept its preview"
            );
        }
    }
    for (shown, original) in fitted.calls.iter().zip(newest) {
        if shown.result_preview != original.result_preview {
            let text = shown.result_preview.as_ref().and_then(Value::as_str);
            assert!(text.is_some_and(|t| t.len() <= SHORT_PREVIEW_BYTES), "{at}");
            assert!(shown.result_truncated, "{at}");
        }
    }
    let redacted = fitted.calls.iter().filter(|c| c.result_redacted).count();
    assert_eq!(truncation.calls.redacted_results, redacted, "{at}");
    let dropped = calls < last_n.min(pool.calls.len())
        || lines.len() < log_lines.min(pool.logs.len())
        || phases < pool.phases.len();
    assert_eq!(
        truncation.byte_cap_applied,
        dropped || shortened > 0,
        "{at}"
    );
}

/// Seeded random runs, each asked with random `lastN` (1..=50) and `logLines` (0..=50) and
/// with one more of each: asking for more calls never shows fewer calls; asking for more
/// log lines never shows fewer calls or fewer log lines; every answer is well formed and
/// under the cap.
#[test]
fn asking_for_more_never_shows_fewer() {
    let mut over_the_cap = 0;
    for seed in 1..=6_u64 {
        let mut random = Prng(0x5eed_0000 + seed);
        let pool = Pool::random(&mut random);
        for _ in 0..70 {
            let (last_n, log_lines) = (1 + random.below(49), random.below(50));
            let at = format!("seed {seed}, lastN {last_n}, logLines {log_lines}");
            let shown = |last_n, log_lines| {
                let fitted = pool.fitted(last_n, log_lines);
                assert_well_formed(&pool, last_n, log_lines, &fitted);
                (
                    fitted.calls.len(),
                    fitted.log_tail.lines.len(),
                    fitted.truncation.byte_cap_applied,
                )
            };
            let (calls, logs, capped) = shown(last_n, log_lines);
            over_the_cap += usize::from(capped);
            let (more_calls, _, _) = shown(last_n + 1, log_lines);
            assert!(more_calls >= calls, "{at}: lastN + 1 shows fewer calls");
            let (same_calls, more_logs, _) = shown(last_n, log_lines + 1);
            assert!(same_calls >= calls, "{at}: logLines + 1 shows fewer calls");
            assert!(
                more_logs >= logs,
                "{at}: logLines + 1 shows fewer log lines"
            );
        }
    }
    assert!(over_the_cap > 50, "only {over_the_cap} answers met the cap");
}

/// The fit done the slow way: each candidate serialised with its counts at their widest, in
/// the fit's order.
fn reference_fit(document: &StatusDocument, totals: &Totals) -> (usize, usize, usize, usize) {
    let shown = Shown::of(document);
    let fits = |phases: usize, calls: usize, logs: usize, full: usize| {
        let mut candidate = document.clone();
        candidate.phases.drain(..shown.phases - phases);
        candidate.log_tail.lines.drain(..shown.logs - logs);
        candidate.calls.drain(..shown.calls - calls);
        for entry in candidate.calls.iter_mut().take(calls - full) {
            if let Some(short) = short_preview(entry) {
                entry.result_preview = Some(short);
                entry.result_truncated = true;
            }
        }
        widest_len(&mut candidate, totals, &shown) <= MAX_STRUCTURED_BYTES
    };
    let most = |limit: usize, check: &dyn Fn(usize) -> bool| {
        (0..=limit).take_while(|&n| check(n)).last().unwrap_or(0)
    };
    let phases = most(shown.phases, &|p| fits(p, 0, 0, 0));
    let calls = most(shown.calls, &|c| fits(phases, c, 0, 0));
    let logs = most(shown.logs, &|l| fits(phases, calls, l, 0));
    let full = most(calls, &|f| fits(phases, calls, logs, f));
    (phases, calls, logs, full)
}

#[test]
fn the_arithmetic_chooses_what_serialising_each_candidate_chooses() {
    let mut random = Prng(0x00c0_ffee);
    let mut over_the_cap = 0;
    for _ in 0..12 {
        let pool = Pool::random(&mut random);
        let (last_n, log_lines) = (1 + random.below(50), random.below(51));
        let (document, totals) = pool.document(last_n, log_lines);
        let (phases, calls, logs, full) = reference_fit(&document, &totals);
        over_the_cap += usize::from(calls < document.calls.len() || full < calls);
        let fitted = fit(document.clone(), &totals);
        assert_eq!(
            (
                fitted.phases.len(),
                fitted.calls.len(),
                fitted.log_tail.lines.len()
            ),
            (phases, calls, logs)
        );
        let kept_full = fitted
            .calls
            .iter()
            .zip(&document.calls[document.calls.len() - calls..])
            .filter(|(shown, original)| shown.result_preview == original.result_preview)
            .count();
        let unshortenable = document.calls[document.calls.len() - calls..]
            .iter()
            .take(calls - full)
            .filter(|entry| short_preview(entry).is_none())
            .count();
        assert_eq!(kept_full, full + unshortenable);
    }
    assert!(over_the_cap > 0, "some random document was over the cap");
}

/// A run of 60 calls with full previews and 60 long log lines: 50/50 shows all 50 calls
/// (shortened), and never fewer than the default 20/20 does.
#[test]
fn sixty_calls_asked_for_fifty_and_fifty_show_fifty_calls() {
    let mut random = Prng(60);
    let pool = Pool {
        calls: (0..60)
            .map(|i| {
                let preview = preview::cap_text(&random.text(600), preview::TEXT_CAP).0;
                entry(i, format!("review file {i}"), Some(json!(preview)))
            })
            .collect(),
        logs: (0..60)
            .map(|i| preview::cap_text(&format!("line {i} {}", "l".repeat(600)), 512).0)
            .collect(),
        phases: Vec::new(),
    };
    let default = pool.fitted(20, 20);
    let most = pool.fitted(50, 50);
    assert_well_formed(&pool, 20, 20, &default);
    assert_well_formed(&pool, 50, 50, &most);
    assert_eq!(default.calls.len(), 20);
    assert_eq!(most.calls.len(), 50);
    assert!(most.truncation.calls.shortened_results > 0);
    assert!(!most.log_tail.lines.is_empty());
    assert!(most.truncation.byte_cap_applied);
}

#[test]
fn a_document_that_fits_is_kept_whole() {
    let pool = Pool {
        calls: (0..20)
            .map(|i| entry(i, format!("c{i}"), Some(json!("ok"))))
            .collect(),
        logs: vec!["one".into(), "two".into()],
        phases: Vec::new(),
    };
    let fitted = pool.fitted(20, 20);
    assert!(!fitted.truncation.byte_cap_applied);
    assert_eq!(fitted.calls.len(), 20);
    assert_eq!(fitted.truncation.calls.shortened_results, 0);
}

#[test]
fn a_document_too_big_without_any_list_keeps_nothing_of_them() {
    let pool = Pool {
        calls: vec![entry(0, "c".into(), Some(json!("x")))],
        logs: vec!["line".into()],
        phases: vec![Phase {
            title: "p".into(),
            detail: None,
            model: None,
        }],
    };
    let (mut document, totals) = pool.document(20, 20);
    document.workflow_name = "w".repeat(MAX_STRUCTURED_BYTES);
    let fitted = fit(document, &totals);
    assert!(fitted.calls.is_empty() && fitted.phases.is_empty());
    assert!(fitted.log_tail.lines.is_empty());
}
