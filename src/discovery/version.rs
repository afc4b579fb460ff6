//! The version order every shim and daemon uses to decide who succeeds whom (daemon.md 1.8).
//! Frozen forever: if two builds ordered versions differently they could supersede each other
//! in a loop. A semver triple compares numerically; a release outranks its prereleases;
//! prereleases compare as plain strings (so `rc.10 < rc.9`, deliberately simple); build
//! metadata is ignored. A version that is not `MAJOR.MINOR.PATCH[-PRE][+BUILD]` ranks below
//! every parseable one, and unparseable versions compare as plain strings among themselves —
//! comparing a parseable version to an unparseable one as strings would make the order cyclic.

use std::cmp::Ordering;

/// Total order on version strings (ties: equal up to build metadata, or identical).
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => {
            x.triple
                .cmp(&y.triple)
                .then_with(|| match (x.prerelease, y.prerelease) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Greater,
                    (Some(_), None) => Ordering::Less,
                    (Some(p), Some(q)) => p.cmp(q),
                })
        }
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => a.cmp(b),
    }
}

struct Parsed<'a> {
    triple: (u64, u64, u64),
    prerelease: Option<&'a str>,
}

fn parse(version: &str) -> Option<Parsed<'_>> {
    let without_build = match version.split_once('+') {
        Some((head, build)) if !build.is_empty() => head,
        Some(_) => return None,
        None => version,
    };
    let (core, prerelease) = match without_build.split_once('-') {
        Some((core, pre)) if !pre.is_empty() => (core, Some(pre)),
        Some(_) => return None,
        None => (without_build, None),
    };
    let mut parts = core.split('.');
    let mut number = || -> Option<u64> {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let triple = (number()?, number()?, number()?);
    if parts.next().is_some() {
        return None;
    }
    Some(Parsed { triple, prerelease })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn pairs() {
        let cases = [
            ("0.1.0", "0.1.0", Equal),
            ("0.1.1", "0.1.0", Greater),
            ("0.2.0", "0.1.9", Greater),
            ("1.0.0", "0.99.99", Greater),
            ("0.10.0", "0.9.0", Greater),
            ("1.0.0", "1.0.0-rc.1", Greater),
            ("1.0.0-rc.1", "0.9.9", Greater),
            ("1.0.0-alpha", "1.0.0-beta", Less),
            ("1.0.0-rc.10", "1.0.0-rc.9", Less),
            ("1.0.0+abc", "1.0.0+xyz", Equal),
            ("1.0.0-rc.1+a", "1.0.0-rc.1", Equal),
            ("1.0.0", "1.0", Greater),
            ("0.0.1", "banana", Greater),
            ("v1.0.0", "1.0.0", Less),
            ("1.0", "1.1", Less),
            ("x", "y", Less),
            ("", "0.0.0", Less),
            ("1.0.0-", "1.0.0", Less),
            ("1.0.0+", "0.0.1", Less),
            ("1.0.0.0", "0.0.1", Less),
            ("18446744073709551616.0.0", "0.0.1", Less),
        ];
        for (a, b, expected) in cases {
            assert_eq!(compare_versions(a, b), expected, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), expected.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn total_order_over_a_mixed_set() {
        let versions = [
            "0.1.0",
            "0.1.0-rc.1",
            "0.1.0+b",
            "0.1.1",
            "0.10.0",
            "0.9.0",
            "1.0.0-alpha",
            "1.0.0-beta",
            "1.0.0",
            "1.5",
            "1.10",
            "garbage",
            "",
            "v2",
            "2.0.0-",
            "0.30.1",
        ];
        for a in versions {
            assert_eq!(compare_versions(a, a), Equal);
            for b in versions {
                assert_eq!(
                    compare_versions(a, b),
                    compare_versions(b, a).reverse(),
                    "{a} {b}"
                );
                for c in versions {
                    if compare_versions(a, b) != Greater && compare_versions(b, c) != Greater {
                        assert_ne!(
                            compare_versions(a, c),
                            Greater,
                            "transitivity {a} <= {b} <= {c}"
                        );
                    }
                }
            }
        }
        let mut sorted = versions.to_vec();
        sorted.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(sorted.last(), Some(&"1.0.0"));
        assert_eq!(sorted.first(), Some(&""));
    }
}
