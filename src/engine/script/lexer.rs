//! Just enough JavaScript lexing for the static checks: a cursor that skips whitespace and
//! comments, and a token scanner for the body that knows where strings, template text,
//! comments and regular expressions are, so that `Date.now()` written inside them is not
//! mistaken for code. It is deliberately lenient: malformed input (an unterminated string, a
//! stray character) never fails here, because QuickJS reports syntax errors far better when
//! the script is compiled.

/// A position in the source, always on a character boundary.
#[derive(Clone, Debug)]
pub(super) struct Cursor<'a> {
    source: &'a str,
    offset: usize,
}

/// What [`Cursor::skip_trivia`] went past.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Trivia {
    /// Automatic semicolon insertion depends on whether a line ended between two tokens.
    pub crossed_line_terminator: bool,
    /// Where a `/*` comment without its `*/` started; the cursor is then at the end.
    pub unterminated_comment: Option<usize>,
}

/// A significant token of the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// A name or keyword, including `#private` names.
    Identifier,
    Number,
    String,
    /// Template text that ends the template (closing backtick): it ends an expression.
    TemplateEnd,
    /// Template text that ends with `${`: an expression starts after it.
    TemplateOpen,
    Regex,
    Punctuator,
}

/// Keywords after which a `/` starts a regular expression rather than a division.
const KEYWORDS_BEFORE_EXPRESSION: &[&str] = &[
    "return",
    "typeof",
    "case",
    "do",
    "else",
    "in",
    "instanceof",
    "new",
    "delete",
    "void",
    "throw",
    "yield",
    "await",
    "of",
    "extends",
];

pub(super) fn is_line_terminator(character: char) -> bool {
    matches!(character, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

pub(super) fn is_whitespace(character: char) -> bool {
    !is_line_terminator(character) && (character.is_whitespace() || character == '\u{feff}')
}

/// Identifiers are approximated generously: any non-ASCII character that is not whitespace
/// counts, so the scanner never splits a Unicode name into pieces.
pub(super) fn is_identifier_start(character: char) -> bool {
    character == '$'
        || character == '_'
        || character == '\\'
        || character.is_ascii_alphabetic()
        || (!character.is_ascii() && !is_whitespace(character) && !is_line_terminator(character))
}

pub(super) fn is_identifier_part(character: char) -> bool {
    is_identifier_start(character) || character.is_ascii_digit()
}

impl<'a> Cursor<'a> {
    pub(super) fn new(source: &'a str, offset: usize) -> Self {
        Cursor { source, offset }
    }

    pub(super) fn offset(&self) -> usize {
        self.offset
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.source[self.offset..]
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub(super) fn peek_second(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    pub(super) fn starts_with(&self, text: &str) -> bool {
        self.rest().starts_with(text)
    }

    pub(super) fn bump(&mut self) -> Option<char> {
        let character = self.peek()?;
        self.offset += character.len_utf8();
        Some(character)
    }

    /// Consumes `character` if it is next.
    pub(super) fn eat(&mut self, character: char) -> bool {
        if self.peek() == Some(character) {
            self.offset += character.len_utf8();
            true
        } else {
            false
        }
    }

    pub(super) fn is_at_end(&self) -> bool {
        self.offset >= self.source.len()
    }

    /// Skips whitespace, line terminators, `//` and `/* */` comments.
    pub(super) fn skip_trivia(&mut self) -> Trivia {
        let mut trivia = Trivia::default();
        while let Some(character) = self.peek() {
            if is_line_terminator(character) {
                trivia.crossed_line_terminator = true;
                self.bump();
            } else if is_whitespace(character) {
                self.bump();
            } else if self.starts_with("//") {
                self.skip_line();
            } else if self.starts_with("/*") {
                let comment_start = self.offset;
                match self.rest()[2..].find("*/") {
                    Some(length) => {
                        let comment = &self.rest()[..length + 4];
                        if comment.chars().any(is_line_terminator) {
                            trivia.crossed_line_terminator = true;
                        }
                        self.offset += comment.len();
                    }
                    None => {
                        trivia.unterminated_comment = Some(comment_start);
                        self.offset = self.source.len();
                    }
                }
            } else {
                break;
            }
        }
        trivia
    }

    /// Moves to the next line terminator (not past it).
    pub(super) fn skip_line(&mut self) {
        while let Some(character) = self.peek() {
            if is_line_terminator(character) {
                break;
            }
            self.bump();
        }
    }

    /// Reads an identifier starting here (escapes are kept as written).
    pub(super) fn read_identifier(&mut self) -> &'a str {
        let start = self.offset;
        if self.peek() == Some('#') {
            self.bump();
        }
        while let Some(character) = self.peek() {
            if character == '\\' {
                // `\u0041` or `\u{41}`: the letters and digits follow as identifier parts,
                // braces need an explicit step.
                self.bump();
                if self.eat('u') && self.eat('{') {
                    while let Some(inner) = self.bump() {
                        if inner == '}' {
                            break;
                        }
                    }
                }
            } else if is_identifier_part(character) {
                self.bump();
            } else {
                break;
            }
        }
        &self.source[start..self.offset]
    }
}

/// Splits the source from `start` on into significant tokens, skipping comments.
pub(super) fn tokenize(source: &str, start: usize) -> Vec<Token> {
    let mut cursor = Cursor::new(source, start);
    let mut tokens: Vec<Token> = Vec::new();
    // One entry per open `{` or `${`: a `}` closing a `${` resumes the template text.
    let mut open_braces: Vec<Brace> = Vec::new();
    loop {
        cursor.skip_trivia();
        let token_start = cursor.offset();
        let Some(character) = cursor.peek() else {
            break;
        };
        let kind = match character {
            '`' => {
                cursor.bump();
                scan_template_text(&mut cursor, &mut open_braces)
            }
            '}' => {
                cursor.bump();
                if open_braces.pop() == Some(Brace::Substitution) {
                    scan_template_text(&mut cursor, &mut open_braces)
                } else {
                    TokenKind::Punctuator
                }
            }
            '{' => {
                cursor.bump();
                open_braces.push(Brace::Block);
                TokenKind::Punctuator
            }
            '\'' | '"' => {
                cursor.bump();
                scan_string(&mut cursor, character);
                TokenKind::String
            }
            '0'..='9' => {
                scan_number(&mut cursor);
                TokenKind::Number
            }
            '.' if cursor
                .peek_second()
                .is_some_and(|next| next.is_ascii_digit()) =>
            {
                scan_number(&mut cursor);
                TokenKind::Number
            }
            '#' if cursor.peek_second().is_some_and(is_identifier_start) => {
                cursor.read_identifier();
                TokenKind::Identifier
            }
            character if is_identifier_start(character) => {
                cursor.read_identifier();
                TokenKind::Identifier
            }
            '/' if regex_may_follow(source, tokens.last()) => {
                cursor.bump();
                scan_regex(&mut cursor);
                TokenKind::Regex
            }
            _ => {
                scan_punctuator(&mut cursor);
                TokenKind::Punctuator
            }
        };
        tokens.push(Token {
            kind,
            start: token_start,
            end: cursor.offset(),
        });
    }
    tokens
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Brace {
    Block,
    Substitution,
}

/// Whether a `/` after `previous` starts a regular expression: the usual heuristic, which
/// guesses wrong only in rare spots such as `if (x) /re/.test(y)`.
fn regex_may_follow(source: &str, previous: Option<&Token>) -> bool {
    let Some(previous) = previous else {
        return true;
    };
    let text = &source[previous.start..previous.end];
    match previous.kind {
        TokenKind::Identifier => KEYWORDS_BEFORE_EXPRESSION.contains(&text),
        TokenKind::Number | TokenKind::String | TokenKind::TemplateEnd | TokenKind::Regex => false,
        TokenKind::TemplateOpen => true,
        TokenKind::Punctuator => !matches!(text, ")" | "]" | "}" | "++" | "--"),
    }
}

/// Scans template text after a backtick or a substitution's `}`.
fn scan_template_text(cursor: &mut Cursor<'_>, open_braces: &mut Vec<Brace>) -> TokenKind {
    while let Some(character) = cursor.bump() {
        match character {
            '\\' => {
                cursor.bump();
            }
            '`' => return TokenKind::TemplateEnd,
            '$' if cursor.eat('{') => {
                open_braces.push(Brace::Substitution);
                return TokenKind::TemplateOpen;
            }
            _ => {}
        }
    }
    TokenKind::TemplateEnd
}

/// Scans a quoted string after its opening quote; stops early at an unescaped line end.
fn scan_string(cursor: &mut Cursor<'_>, quote: char) {
    while let Some(character) = cursor.peek() {
        if character == '\n' || character == '\r' {
            return;
        }
        cursor.bump();
        if character == quote {
            return;
        }
        if character == '\\' && cursor.bump() == Some('\r') {
            cursor.eat('\n');
        }
    }
}

/// Scans a regular expression after its opening slash, then its flags.
fn scan_regex(cursor: &mut Cursor<'_>) {
    let mut in_class = false;
    while let Some(character) = cursor.peek() {
        if is_line_terminator(character) {
            return;
        }
        cursor.bump();
        match character {
            '\\' if cursor.peek().is_some_and(|next| !is_line_terminator(next)) => {
                cursor.bump();
            }
            '[' => in_class = true,
            ']' => in_class = false,
            '/' if !in_class => break,
            _ => {}
        }
    }
    while cursor.peek().is_some_and(is_identifier_part) {
        cursor.bump();
    }
}

/// Scans a numeric literal loosely: exactness does not matter to the determinism scan, only
/// that the token ends where JavaScript would end it.
fn scan_number(cursor: &mut Cursor<'_>) {
    let mut seen_dot = false;
    let mut previous = '\0';
    let radix_prefixed = cursor.starts_with("0x")
        || cursor.starts_with("0X")
        || cursor.starts_with("0o")
        || cursor.starts_with("0O")
        || cursor.starts_with("0b")
        || cursor.starts_with("0B");
    while let Some(character) = cursor.peek() {
        let exponent_sign =
            !radix_prefixed && matches!(previous, 'e' | 'E') && matches!(character, '+' | '-');
        if character == '.' && !seen_dot && !radix_prefixed {
            seen_dot = true;
        } else if !(character.is_ascii_alphanumeric() || character == '_' || exponent_sign) {
            break;
        }
        previous = character;
        cursor.bump();
    }
}

/// Punctuators that matter to the checks get their full length; the rest are one character.
fn scan_punctuator(cursor: &mut Cursor<'_>) {
    for long in ["...", "?.", "++", "--", "=>"] {
        if cursor.starts_with(long) {
            // `a?.5:b` is a conditional, not optional chaining.
            let is_conditional = long == "?."
                && cursor.rest()[2..]
                    .chars()
                    .next()
                    .is_some_and(|next| next.is_ascii_digit());
            if !is_conditional {
                for _ in 0..long.len() {
                    cursor.bump();
                }
                return;
            }
        }
    }
    cursor.bump();
}
