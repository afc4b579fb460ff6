//! A small Rust lexer for the architecture checks: identifiers, `::` and punctuation with
//! their line numbers, with comments and every kind of literal taken out, so that a comment
//! or a message that mentions `crate::cli` is not a use of it; the comments come back
//! separately for the check of the files they name.

#[derive(Debug, PartialEq)]
pub(super) enum Token {
    Ident(String),
    /// `::`, kept whole so paths read as ident, `::`, ident.
    PathSep,
    Punct(char),
}

/// Rust source as tokens with their line numbers, without comments, string, byte-string,
/// raw-string and char literals (so a comment or a message that mentions `crate::cli` is
/// not a use of it). Lifetimes are dropped with their quote.
pub(super) fn lex(source: &str) -> Vec<(Token, usize)> {
    lex_with_comments(source).0
}

/// One comment of a source file: its text (markers included) and the line it starts on.
pub(super) struct Comment {
    pub text: String,
    pub line: usize,
}

/// [`lex`], and the comments it dropped.
pub(super) fn lex_with_comments(source: &str) -> (Vec<(Token, usize)>, Vec<Comment>) {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut comments = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            let start = i;
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            comments.push(Comment {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == '/' && next == Some('*') {
            let (start, first_line) = (i, line);
            i = skip_block_comment(&chars, i, &mut line);
            comments.push(Comment {
                text: chars[start..i].iter().collect(),
                line: first_line,
            });
        } else if c == '"' {
            i = skip_quoted(&chars, i, '"', &mut line);
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i, &mut line);
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if let Some(end) = literal_after_prefix(&chars, &word, i, &mut line) {
                i = end;
            } else {
                tokens.push((Token::Ident(word), line));
            }
        } else if c == ':' && next == Some(':') {
            tokens.push((Token::PathSep, line));
            i += 2;
        } else {
            tokens.push((Token::Punct(c), line));
            i += 1;
        }
    }
    (tokens, comments)
}

/// Past a (nested) block comment starting at `start`.
fn skip_block_comment(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            (c, _) => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// Past a literal opened by `quote` at `start`, honouring backslash escapes.
fn skip_quoted(chars: &[char], start: usize, quote: char, line: &mut usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '\n' => {
                *line += 1;
                i += 1;
            }
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Past a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or the quote of a lifetime (`'a`).
fn skip_char_or_lifetime(chars: &[char], start: usize, line: &mut usize) -> usize {
    match (chars.get(start + 1), chars.get(start + 2)) {
        (Some('\\'), _) => skip_quoted(chars, start, '\'', line),
        (Some(_), Some('\'')) => start + 3,
        _ => start + 1,
    }
}

/// When `word` (just read, ending at `end`) is the prefix of a literal — `b"…"`, `c"…"`,
/// `b'…'`, `r"…"`, `r#"…"#`, `br#"…"#`, `cr"…"` — the index past that literal.
fn literal_after_prefix(chars: &[char], word: &str, end: usize, line: &mut usize) -> Option<usize> {
    let next = chars.get(end).copied();
    match (word, next) {
        ("b" | "c", Some('"')) => Some(skip_quoted(chars, end, '"', line)),
        ("b", Some('\'')) => Some(skip_quoted(chars, end, '\'', line)),
        ("r" | "br" | "cr", Some('"' | '#')) => {
            let hashes = chars[end..].iter().take_while(|c| **c == '#').count();
            if chars.get(end + hashes) != Some(&'"') {
                return None; // a raw identifier such as r#type
            }
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut i = end + hashes + 1;
            while i < chars.len() {
                if chars[i..].starts_with(&closing) {
                    return Some(i + closing.len());
                }
                if chars[i] == '\n' {
                    *line += 1;
                }
                i += 1;
            }
            Some(i)
        }
        _ => None,
    }
}
