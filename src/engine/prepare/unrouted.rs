//! The routing check's refusal names the calls without a route grouped by why they have
//! none, a few of each: a script of 10,000 calls with one wrong model spec is refused in a
//! few lines that say what to fix, not in 10,000 copies of the same reason. Labels and
//! reasons both carry the script's text (a label, a model spec), so each is shown cut.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::util::shortened;

/// Calls named for each reason; the others of that reason are counted.
const NAMED_PER_REASON: usize = 5;
/// Reasons shown; the calls of the others are counted with them.
const REASONS_SHOWN: usize = 4;
/// Bytes of a label as shown.
const LABEL_SHOWN: usize = 80;
/// Bytes of a reason as shown.
const REASON_SHOWN: usize = 400;

/// One reason and the calls that have it, in the order the dry run reached them.
struct Group<'a> {
    reason: &'a str,
    named: Vec<(&'a str, u32)>,
    calls: usize,
}

/// `None` when every call has a route; else the list of the calls without one and the
/// reasons, and the number of those calls. `missing` yields `(label, index, reason)` in the
/// order the dry run reached the calls.
pub(super) fn describe<'a>(
    missing: impl IntoIterator<Item = (&'a str, u32, &'a str)>,
) -> Option<(String, usize)> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    // Where each reason's group is: a script may give every call a reason of its own.
    let mut found: HashMap<&'a str, usize> = HashMap::new();
    let mut total = 0;
    for (label, index, reason) in missing {
        total += 1;
        let at = *found.entry(reason).or_insert_with(|| {
            groups.push(Group {
                reason,
                named: Vec::new(),
                calls: 0,
            });
            groups.len() - 1
        });
        let group = &mut groups[at];
        group.calls += 1;
        if group.named.len() < NAMED_PER_REASON {
            group.named.push((label, index));
        }
    }
    if total == 0 {
        return None;
    }
    let mut text = String::new();
    for (shown, group) in groups.iter().take(REASONS_SHOWN).enumerate() {
        if shown > 0 {
            text.push_str("; ");
        }
        for (at, (label, index)) in group.named.iter().enumerate() {
            if at > 0 {
                text.push_str(", ");
            }
            let _ = write!(text, "{}@{index}", shortened(label, LABEL_SHOWN));
        }
        let unnamed = group.calls - group.named.len();
        if unnamed > 0 {
            let _ = write!(text, " and {unnamed} more");
        }
        let _ = write!(text, " ({})", shortened(group.reason, REASON_SHOWN));
    }
    if groups.len() > REASONS_SHOWN {
        let others = &groups[REASONS_SHOWN..];
        let calls: usize = others.iter().map(|group| group.calls).sum();
        let plural = if others.len() == 1 { "" } else { "s" };
        let _ = write!(
            text,
            "; and {calls} more for {} other reason{plural}",
            others.len()
        );
    }
    Some((text, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_routed_is_nothing_to_say() {
        assert_eq!(describe(std::iter::empty()), None);
    }

    #[test]
    fn one_call_is_named_with_its_reason() {
        let (text, calls) = describe([("review", 3, "no such backend")]).expect("one");
        assert_eq!(text, "review@3 (no such backend)");
        assert_eq!(calls, 1);
    }

    #[test]
    fn ten_thousand_calls_for_one_reason_are_five_names_and_a_count() {
        let labels: Vec<String> = (0..10_000).map(|i| format!("p{i}")).collect();
        let reason = "model spec \"mock\" is not a registered backend";
        let (text, calls) = describe(
            labels
                .iter()
                .enumerate()
                .map(|(i, label)| (label.as_str(), i as u32, reason)),
        )
        .expect("missing");
        assert_eq!(calls, 10_000);
        assert_eq!(
            text,
            format!("p0@0, p1@1, p2@2, p3@3, p4@4 and 9995 more ({reason})")
        );
    }

    #[test]
    fn a_reason_s_fifth_call_is_named_and_its_sixth_counted() {
        let five: Vec<_> = (0..5).map(|i| ("a", i, "r")).collect();
        let (text, _) = describe(five.clone()).expect("five");
        assert_eq!(text, "a@0, a@1, a@2, a@3, a@4 (r)");
        let mut six = five;
        six.push(("a", 5, "r"));
        let (text, _) = describe(six).expect("six");
        assert_eq!(text, "a@0, a@1, a@2, a@3, a@4 and 1 more (r)");
    }

    #[test]
    fn reasons_keep_the_order_they_were_met_in_and_past_four_are_counted() {
        let calls = [
            ("a", 0, "r1"),
            ("b", 1, "r2"),
            ("c", 2, "r1"),
            ("d", 3, "r3"),
            ("e", 4, "r4"),
            ("f", 5, "r5"),
        ];
        let (text, total) = describe(calls).expect("missing");
        assert_eq!(
            text,
            "a@0, c@2 (r1); b@1 (r2); d@3 (r3); e@4 (r4); and 1 more for 1 other reason"
        );
        assert_eq!(total, 6);
        let (text, _) = describe(calls.into_iter().take(5)).expect("four reasons");
        assert!(!text.contains("other reason"), "{text}");
        let mut two_more = calls.to_vec();
        two_more.push(("g", 6, "r6"));
        two_more.push(("h", 7, "r6"));
        let (text, _) = describe(two_more).expect("six reasons");
        assert!(text.ends_with("; and 3 more for 2 other reasons"), "{text}");
    }

    #[test]
    fn long_labels_and_reasons_are_cut_at_a_character() {
        let label = "é".repeat(100);
        let reason = "x".repeat(1_000);
        let (text, _) = describe([(label.as_str(), 0, reason.as_str())]).expect("one");
        let expected_label = format!("{}…", "é".repeat(LABEL_SHOWN / 2));
        let expected_reason = format!("{}…", "x".repeat(REASON_SHOWN));
        assert_eq!(text, format!("{expected_label}@0 ({expected_reason})"));
        let exact = "y".repeat(LABEL_SHOWN);
        let (text, _) = describe([(exact.as_str(), 1, "r")]).expect("one");
        assert_eq!(
            text,
            format!("{exact}@1 (r)"),
            "a label of the limit is whole"
        );
    }
}
