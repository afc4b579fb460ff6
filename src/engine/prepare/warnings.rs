//! The dry run's warnings: no calls at all, phases entered but not declared or declared but
//! unused, unknown meta keys. Each kind is one warning however many it is about, naming a
//! few and counting the rest, so a script of thousands of phases is admitted with a few
//! lines rather than an answer of megabytes.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::engine::driver::Outcome;
use crate::engine::script::AnalyzedScript;
use crate::util::shortened;

/// Names a warning shows; the others are counted.
const NAMED: usize = 5;
/// Bytes of a name as shown.
const NAME_SHOWN: usize = 120;

pub(super) fn warnings(analyzed: &AnalyzedScript, outcome: &Outcome) -> Vec<String> {
    let mut warnings = Vec::new();
    if outcome.dry_calls.is_empty() {
        warnings.push("the dry run made no agent or checkpoint calls".to_owned());
    }
    let declared: Vec<&str> = analyzed.phases.iter().map(|p| p.title.as_str()).collect();
    if !declared.is_empty() {
        let declared_set: HashSet<&str> = declared.iter().copied().collect();
        let undeclared: Vec<&str> = outcome
            .phases_entered
            .iter()
            .map(String::as_str)
            .filter(|entered| !declared_set.contains(entered))
            .collect();
        warnings.extend(grouped(
            &undeclared,
            true,
            |one| format!("phase {one} is not declared in meta.phases"),
            |some| format!("phases {some} are not declared in meta.phases"),
        ));
        let used: HashSet<&str> = outcome
            .phases_entered
            .iter()
            .map(String::as_str)
            .chain(outcome.dry_calls.iter().filter_map(|c| c.phase.as_deref()))
            .collect();
        let mut seen = HashSet::new();
        let unused: Vec<&str> = declared
            .iter()
            .copied()
            .filter(|phase| !used.contains(phase) && seen.insert(*phase))
            .collect();
        warnings.extend(grouped(
            &unused,
            true,
            |one| format!("declared phase {one} was not used by the dry run"),
            |some| format!("declared phases {some} were not used by the dry run"),
        ));
    }
    let unknown: Vec<String> = analyzed
        .unknown_meta_keys
        .iter()
        .map(|key| format!("meta.{key}"))
        .collect();
    let unknown: Vec<&str> = unknown.iter().map(String::as_str).collect();
    warnings.extend(grouped(
        &unknown,
        false,
        |one| format!("{one} is not a known meta key; it is kept but unused"),
        |some| format!("{some} are not known meta keys; they are kept but unused"),
    ));
    warnings
}

/// One warning about `names` (each quoted when `quoted`): `one` for a single name, `some` for
/// the list of a few and the count of the rest; none when there are none.
fn grouped(
    names: &[&str],
    quoted: bool,
    one: impl Fn(&str) -> String,
    some: impl Fn(&str) -> String,
) -> Option<String> {
    let shown: Vec<String> = names
        .iter()
        .take(NAMED)
        .map(|name| {
            let name = shortened(name, NAME_SHOWN);
            if quoted {
                format!("{name:?}")
            } else {
                name.into_owned()
            }
        })
        .collect();
    list(names.len(), &shown, one, some)
}

fn list(
    count: usize,
    shown: &[String],
    one: impl Fn(&str) -> String,
    some: impl Fn(&str) -> String,
) -> Option<String> {
    match count {
        0 => None,
        1 => Some(one(&shown[0])),
        _ => {
            let mut text = shown.join(", ");
            if count > shown.len() {
                let _ = write!(text, " and {} more", count - shown.len());
            }
            Some(some(&text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(count: usize, prefix: &str) -> Vec<String> {
        (0..count).map(|i| format!("{prefix}{i}")).collect()
    }

    fn refs(names: &[String]) -> Vec<&str> {
        names.iter().map(String::as_str).collect()
    }

    #[test]
    fn one_name_keeps_its_own_sentence() {
        let warning = grouped(
            &["Plan"],
            true,
            |one| format!("phase {one} x"),
            |_| unreachable!(),
        );
        assert_eq!(warning.as_deref(), Some("phase \"Plan\" x"));
        assert_eq!(
            grouped(&[], true, |_| unreachable!(), |_| unreachable!()),
            None
        );
    }

    #[test]
    fn five_names_are_listed_and_the_sixth_counted() {
        let five = named(5, "p");
        let warning = grouped(
            &refs(&five),
            true,
            |_| unreachable!(),
            |some| some.to_owned(),
        );
        assert_eq!(warning.as_deref(), Some(r#""p0", "p1", "p2", "p3", "p4""#));
        let many = named(9_000, "p");
        let warning = grouped(
            &refs(&many),
            true,
            |_| unreachable!(),
            |some| some.to_owned(),
        );
        assert_eq!(
            warning.as_deref(),
            Some(r#""p0", "p1", "p2", "p3", "p4" and 8995 more"#)
        );
    }

    #[test]
    fn a_long_name_is_cut_at_a_character() {
        let long = "é".repeat(NAME_SHOWN);
        let warning = grouped(&[&long], false, |one| one.to_owned(), |_| unreachable!());
        assert_eq!(warning, Some(format!("{}…", "é".repeat(NAME_SHOWN / 2))));
    }
}
