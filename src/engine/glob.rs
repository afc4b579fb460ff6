//! Whole-label, case-sensitive glob matching for `labelGlob` (`*`, `?`, `\` escape).
//!
//! A status or stop request may filter calls by label with a small glob: `*` matches any run of
//! characters (including none), `?` exactly one Unicode scalar value, and `\` makes the next
//! character literal (a trailing lone `\` stands for a literal backslash). Everything else matches
//! itself. The pattern must match the whole label. Matching uses the classic single-backtrack
//! algorithm: on a mismatch only the most recent `*` is retried, one character further along, so
//! the cost is bounded by `pattern × label` and never exponential.

/// Longest accepted pattern, in code points (engine.md 6.1).
pub(crate) const MAX_GLOB_CHARS: usize = 128;

/// Whether `text` matches `pattern` as a whole.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let tokens = parse(pattern);
    let text: Vec<char> = text.chars().collect();

    let mut token_index = 0;
    let mut text_index = 0;
    // Where to resume after the most recent `*`: the token after it and the text position the
    // star's match currently ends at.
    let mut backtrack: Option<(usize, usize)> = None;

    while text_index < text.len() {
        match tokens.get(token_index) {
            Some(Token::Star) => {
                token_index += 1;
                backtrack = Some((token_index, text_index));
                continue;
            }
            Some(Token::AnyChar) => {
                token_index += 1;
                text_index += 1;
                continue;
            }
            Some(Token::Literal(expected)) if *expected == text[text_index] => {
                token_index += 1;
                text_index += 1;
                continue;
            }
            _ => {}
        }
        // Mismatch: let the last star swallow one more character, or fail.
        match backtrack {
            Some((after_star, star_end)) => {
                token_index = after_star;
                text_index = star_end + 1;
                backtrack = Some((after_star, star_end + 1));
            }
            None => return false,
        }
    }
    // The text is used up: only stars may remain.
    tokens[token_index..]
        .iter()
        .all(|token| matches!(token, Token::Star))
}

/// Checks a `labelGlob` before use: 1 to 128 code points.
pub(crate) fn check_glob(pattern: &str) -> Result<(), String> {
    let count = pattern.chars().count();
    if count == 0 {
        return Err("labelGlob must not be empty".to_owned());
    }
    if count > MAX_GLOB_CHARS {
        return Err(format!(
            "labelGlob must be at most {MAX_GLOB_CHARS} code points, got {count}"
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
}

fn parse(pattern: &str) -> Vec<Token> {
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        let token = match c {
            '*' => {
                // Consecutive stars mean the same as one; collapsing them keeps backtracking cheap.
                if tokens.last() == Some(&Token::Star) {
                    continue;
                }
                Token::Star
            }
            '?' => Token::AnyChar,
            '\\' => Token::Literal(chars.next().unwrap_or('\\')),
            other => Token::Literal(other),
        };
        tokens.push(token);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_match_whole_label_only() {
        assert!(glob_match("review", "review"));
        assert!(!glob_match("review", "reviewer"));
        assert!(!glob_match("review", "a review"));
        assert!(!glob_match("review", ""));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "x"));
    }

    #[test]
    fn matching_is_case_sensitive() {
        assert!(!glob_match("Review", "review"));
        assert!(!glob_match("r*", "Review"));
    }

    #[test]
    fn star_matches_any_run_including_empty() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything at all"));
        assert!(glob_match("review*", "review"));
        assert!(glob_match("review*", "review agent 3"));
        assert!(glob_match("*agent*", "review agent 3"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("**a**", "a"));
        assert!(glob_match("*a", "banana"));
        assert!(!glob_match("*a", "bananas"));
    }

    #[test]
    fn question_mark_matches_one_scalar() {
        assert!(glob_match("agent ?", "agent 7"));
        assert!(!glob_match("agent ?", "agent 12"));
        assert!(!glob_match("agent ?", "agent "));
        assert!(glob_match("?", "é"));
        assert!(glob_match("?", "🦀"));
        assert!(!glob_match("?", "🦀🦀"));
        assert!(glob_match("crab ?? end", "crab 🦀é end"));
    }

    #[test]
    fn backslash_escapes_the_next_character() {
        assert!(glob_match(r"a\*b", "a*b"));
        assert!(!glob_match(r"a\*b", "axxb"));
        assert!(glob_match(r"what\?", "what?"));
        assert!(!glob_match(r"what\?", "whats"));
        assert!(glob_match(r"back\\slash", r"back\slash"));
        assert!(glob_match(r"\a", "a"));
        assert!(glob_match(r"*\*", "stars*"));
        assert!(!glob_match(r"*\*", "stars"));
    }

    #[test]
    fn trailing_backslash_is_literal() {
        assert!(glob_match("dir\\", "dir\\"));
        assert!(!glob_match("dir\\", "dir"));
        assert!(glob_match("*\\", "a\\"));
    }

    #[test]
    fn pathological_patterns_stay_cheap() {
        let long = "a".repeat(20_000);
        assert!(!glob_match("a*a*a*a*a*b", &long));
        assert!(glob_match("a*a*a*a*a*", &long));
        let many_stars = "*a".repeat(60) + "b";
        assert!(!glob_match(&many_stars, &long));
        let mut with_b = long.clone();
        with_b.push('b');
        assert!(glob_match("a*a*a*a*a*b", &with_b));
    }

    #[test]
    fn check_glob_bounds_length_in_code_points() {
        assert!(check_glob("").is_err());
        assert!(check_glob("*").is_ok());
        assert!(check_glob(&"x".repeat(128)).is_ok());
        assert!(check_glob(&"x".repeat(129)).unwrap_err().contains("129"));
        // 128 multi-byte characters are still 128 code points.
        assert!(check_glob(&"é".repeat(128)).is_ok());
        assert!(check_glob(&"🦀".repeat(129)).is_err());
    }
}
