//! The rule a saved workflow's name follows: it is the file's stem, used as a CLI argument,
//! an MCP prompt name and part of a slash command (`/mcp__<server>__<name>`), so it is kept
//! to what all three take without quoting.

/// Longest name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// `Ok` for a name of 1 to 64 characters from `a-z`, `0-9`, `-` and `_`, starting with a
/// letter or digit; otherwise the reason, naming the name.
pub fn check(name: &str) -> Result<(), String> {
    let valid_first = name
        .as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let valid_rest = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid_first && valid_rest && name.len() <= MAX_NAME_LEN {
        Ok(())
    } else {
        Err(format!(
            "the workflow name {name:?} must be 1 to {MAX_NAME_LEN} characters of a-z, 0-9, `-` \
             and `_`, starting with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn names_are_lowercase_words_of_at_most_64_characters() {
        for good in ["a", "audit", "fix-tests", "v2_review", &"x".repeat(64)] {
            assert!(check(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "A",
            "a b",
            "a/b",
            "..",
            "a.b",
            &"x".repeat(65),
        ] {
            let error = check(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }
}
