//! Static checks of a workflow script before anything runs: size, encoding, the leading
//! `export const meta = <literal>` statement evaluated without running the body, and the
//! determinism guard's static half (direct `Date.now()`, `Math.random()`, `Date()`,
//! `new Date()`, `performance.now()`, `performance.timeOrigin`, plus `require`/`import`,
//! since nothing is importable).
//!
//! The literal is read by a small parser of our own ([`literal`]) rather than by QuickJS, so
//! a hostile script cannot run code while we only want its name. The body the engine runs is
//! the source with the meta statement blanked to spaces, so every position QuickJS reports is
//! a position in the user's file.
//!
//! Positions follow QuickJS: a line ends at `\n` (so CRLF counts once, and a lone `\r` or
//! U+2028 does not start a new line), and columns count Unicode scalar values (chars), not
//! bytes or UTF-16 code units. Both are 1-based.

mod files;
mod lexer;
mod literal;
mod meta;
#[cfg(test)]
mod tests;

pub(crate) use files::companion_path_problem;
pub(crate) use meta::check_no_nul;

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::model::Phase;

use lexer::{Cursor, Token, TokenKind};
use literal::{Literal, LiteralValue, Property, child_path, describe_token, quote};

/// Largest accepted script, in bytes.
pub(crate) const MAX_SCRIPT_BYTES: usize = 1 << 20;
/// The most bytes of a name a script gives: an `agent()` option that names something (label,
/// phase, model spec, tier, mode, agent type), `meta.model` and a phase's `model`. Each is
/// stored with every call it applies to.
pub(crate) const NAME_MAX_BYTES: usize = 1024;

/// A script rejected before running. Positions are 1-based, in the caller's file; when they
/// are set, `message` ends with the same "at line L, column C".
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScriptError {
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// A script that passed the static checks.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyzedScript {
    /// The whole `meta` literal as JSON.
    pub meta: Value,
    /// The source with the `export const meta = ...;` statement replaced by spaces (newlines
    /// kept), so line and column numbers of the body are those of the original file. A `#!`
    /// first line becomes a `//` comment, because the body is wrapped in a function. The
    /// wrapper that precedes the body on line 1 shifts QuickJS's line-1 columns by its length.
    pub body: String,
    pub name: String,
    pub description: String,
    pub phases: Vec<Phase>,
    pub model: Option<String>,
    /// `meta.backends`, shape-checked.
    pub backends: Option<Value>,
    /// `meta.inputSchema`, a JSON Schema object for `args`.
    pub input_schema: Option<Value>,
    /// `meta.whenToUse`: when a saved workflow fits, shown beside its description where it is
    /// offered (the `workflows` listing, MCP prompts). At most [`MAX_WHEN_TO_USE_CHARS`].
    pub when_to_use: Option<String>,
    /// `meta.files`: the companion files preparation reads, relative to the project folder,
    /// in declaration order and checked by [`companion_path_problem`].
    pub files: Vec<String>,
    /// Keys of `meta` we do not know; reported as warnings.
    pub unknown_meta_keys: Vec<String>,
}

/// Runs every static check on `source`, in order: size, encoding, the meta statement, the
/// meta rules, the determinism guard. The first failure is returned.
///
/// An error quotes at most a few short tokens of the source (40 characters each), never a
/// byte that is not UTF-8, and its whole message passes through credential redaction, so a
/// token file given as a script is refused without showing the token.
pub(crate) fn analyze(source: &[u8]) -> Result<AnalyzedScript, ScriptError> {
    analyze_source(source).map_err(|mut error| {
        error.message = crate::engine::redact::redact_text(&error.message).0;
        error
    })
}

fn analyze_source(source: &[u8]) -> Result<AnalyzedScript, ScriptError> {
    check_size(source)?;
    let text = decode(source)?;
    if text
        .chars()
        .all(|c| lexer::is_whitespace(c) || lexer::is_line_terminator(c))
    {
        return Err(ScriptError::without_position(
            "the script is empty; it must start with `export const meta = { ... }`",
        ));
    }
    let statement = meta_statement(text)?;
    let meta = check_meta(text, &statement.literal)?;
    check_determinism(text, statement.end)?;
    Ok(AnalyzedScript {
        meta: statement.literal.to_json(),
        body: blank_meta_statement(text, statement.start, statement.end),
        name: meta.name,
        description: meta.description,
        when_to_use: meta.when_to_use,
        phases: meta.phases,
        model: meta.model,
        backends: meta.backends,
        input_schema: meta.input_schema,
        files: meta.files,
        unknown_meta_keys: meta.unknown_keys,
    })
}

impl fmt::Display for ScriptError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for ScriptError {}

impl ScriptError {
    fn without_position(message: impl Into<String>) -> Self {
        ScriptError {
            message: message.into(),
            line: None,
            column: None,
        }
    }

    /// An error at byte `offset` of `source`; the position is appended to the message.
    fn at(source: &str, offset: usize, message: impl fmt::Display) -> Self {
        let (line, column) = line_and_column(source, offset);
        ScriptError {
            message: format!("{message} at line {line}, column {column}"),
            line: Some(line),
            column: Some(column),
        }
    }
}

/// The 1-based line and column of byte `offset` (see the module comment for the rules).
fn line_and_column(source: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line_start = before.rfind('\n').map_or(0, |index| index + 1);
    let line = before.bytes().filter(|&byte| byte == b'\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (saturate(line), saturate(column))
}

fn saturate(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn check_size(source: &[u8]) -> Result<(), ScriptError> {
    if source.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptError::without_position(format!(
            "the script is {} bytes; the limit is {MAX_SCRIPT_BYTES} bytes (1 MiB)",
            source.len()
        )));
    }
    if source.is_empty() {
        return Err(ScriptError::without_position(
            "the script is empty; it must start with `export const meta = { ... }`",
        ));
    }
    Ok(())
}

fn decode(source: &[u8]) -> Result<&str, ScriptError> {
    std::str::from_utf8(source).map_err(|error| {
        let offset = error.valid_up_to();
        // The valid prefix is text, so the position of the bad byte can be counted in it.
        let valid = std::str::from_utf8(&source[..offset]).unwrap_or_default();
        let (line, column) = line_and_column(valid, offset);
        ScriptError {
            // The byte itself is not shown: the file may not be a script at all.
            message: format!(
                "the script is not valid UTF-8: the byte at byte offset {offset} \
                 (line {line}, column {column}) does not belong to a UTF-8 character"
            ),
            line: Some(line),
            column: Some(column),
        }
    })
}

/// The leading `export const meta = <literal>` statement.
struct MetaStatement {
    literal: Literal,
    /// Byte offset of `export`.
    start: usize,
    /// Byte offset just past the literal, or past the `;` that ends the statement.
    end: usize,
}

const META_SHAPE: &str = "the first statement must be `export const meta = { ... }`";

fn meta_statement(source: &str) -> Result<MetaStatement, ScriptError> {
    let mut cursor = Cursor::new(source, 0);
    if cursor.starts_with("#!") {
        cursor.skip_line();
    }
    if let Some(offset) = cursor.skip_trivia().unterminated_comment {
        return Err(ScriptError::at(source, offset, "unterminated `/*` comment"));
    }
    let start = cursor.offset();
    for (index, expected) in ["export", "const", "meta", "="].into_iter().enumerate() {
        if index > 0 {
            cursor.skip_trivia();
        }
        let found_at = cursor.offset();
        let matches = if expected == "=" {
            cursor.starts_with("=") && !cursor.starts_with("==") && !cursor.starts_with("=>")
        } else {
            cursor.peek().is_some_and(lexer::is_identifier_start)
                && cursor.clone().read_identifier() == expected
        };
        if !matches {
            return Err(ScriptError::at(
                source,
                found_at,
                format!(
                    "{META_SHAPE}; found {}",
                    quote_statement(source, start, index)
                ),
            ));
        }
        if expected == "=" {
            cursor.bump();
        } else {
            cursor.read_identifier();
        }
    }
    let literal = literal::parse_literal(&mut cursor)
        .map_err(|error| ScriptError::at(source, error.offset, error.message))?;
    let end = statement_end(source, &mut cursor)?;
    Ok(MetaStatement {
        literal,
        start,
        end,
    })
}

/// Quotes the start of the statement at `start` up to its token number `mismatch` (0-based),
/// plus one more token when the very first one is wrong, so `const x = 1` reads `const x`.
fn quote_statement(source: &str, start: usize, mismatch: usize) -> String {
    let mut cursor = Cursor::new(source, start);
    if cursor.is_at_end() {
        return "the end of the script".to_owned();
    }
    let mut end = start;
    let wanted = if mismatch == 0 { 2 } else { mismatch + 1 };
    for _ in 0..wanted {
        cursor.skip_trivia();
        if cursor.is_at_end() {
            break;
        }
        if cursor.peek().is_some_and(lexer::is_identifier_start) {
            cursor.read_identifier();
        } else {
            cursor.bump();
        }
        end = cursor.offset();
    }
    let words: Vec<&str> = source[start..end].split_whitespace().collect();
    quote(&words.join(" "))
}

/// Checks that the statement ends after the literal and returns where the blanking stops:
/// past a `;`, or at the literal's end when a line break or the end of the script ends it.
fn statement_end(source: &str, cursor: &mut Cursor<'_>) -> Result<usize, ScriptError> {
    let literal_end = cursor.offset();
    let trivia = cursor.skip_trivia();
    if let Some(offset) = trivia.unterminated_comment {
        return Err(ScriptError::at(source, offset, "unterminated `/*` comment"));
    }
    let next_offset = cursor.offset();
    let Some(next) = cursor.peek() else {
        return Ok(literal_end);
    };
    if next == ';' {
        return Ok(next_offset + 1);
    }
    if next == ',' {
        return Err(ScriptError::at(
            source,
            next_offset,
            "`meta` must be the only declaration of the first statement; end it with `;`",
        ));
    }
    let rest = cursor.rest();
    let next_word = if lexer::is_identifier_start(next) {
        cursor.clone().read_identifier()
    } else {
        ""
    };
    // After a line break JavaScript still continues the expression when the next line starts
    // with one of these, so `{...}\n(async () => {})()` would call the literal.
    let continues_expression = !rest.starts_with("++")
        && !rest.starts_with("--")
        && (matches!(
            next,
            '(' | '['
                | '`'
                | '.'
                | '?'
                | '+'
                | '-'
                | '*'
                | '/'
                | '%'
                | '<'
                | '>'
                | '='
                | '&'
                | '|'
                | '^'
        ) || rest.starts_with("!=")
            || matches!(next_word, "in" | "instanceof"));
    if trivia.crossed_line_terminator && !continues_expression {
        return Ok(literal_end);
    }
    let found = describe_token(rest);
    let message = if trivia.crossed_line_terminator {
        format!(
            "meta must be a literal: the next line starts with {found}, which would continue the \
             meta expression; end the meta statement with `;`"
        )
    } else {
        format!("meta must be a literal: found {found} after it; end the meta statement with `;`")
    };
    Err(ScriptError::at(source, next_offset, message))
}

/// Replaces `source[start..end]` with one space per character, keeping line ends, so every
/// later token keeps its line and (character) column. A leading `#!` line becomes a comment.
fn blank_meta_statement(source: &str, start: usize, end: usize) -> String {
    let mut body = String::with_capacity(source.len());
    let prefix = &source[..start];
    match prefix.strip_prefix("#!") {
        Some(rest) => {
            body.push_str("//");
            body.push_str(rest);
        }
        None => body.push_str(prefix),
    }
    body.extend(source[start..end].chars().map(|character| match character {
        '\n' | '\r' => character,
        _ => ' ',
    }));
    body.push_str(&source[end..]);
    body
}

/// The typed parts of a valid meta.
struct CheckedMeta {
    name: String,
    description: String,
    when_to_use: Option<String>,
    phases: Vec<Phase>,
    model: Option<String>,
    backends: Option<Value>,
    input_schema: Option<Value>,
    files: Vec<String>,
    unknown_keys: Vec<String>,
}

/// Longest `meta.whenToUse`, in characters: a sentence or two for a menu, not a manual.
pub(crate) const MAX_WHEN_TO_USE_CHARS: usize = 1_024;

const KNOWN_META_KEYS: &[&str] = &[
    "name",
    "description",
    "whenToUse",
    "phases",
    "model",
    "backends",
    "inputSchema",
    "files",
    // The run's spending limits, read and checked by preparation (`src/budget/`).
    "tokenBudget",
    "costBudgetUsd",
    // Whether a usage-limit pause resumes by itself at the reset (`src/timers/`).
    "autoResume",
];

/// Backend names the built-in agents own; a script may not redefine them.
const RESERVED_BACKEND_NAMES: &[&str] = &["claude", "codex", "opencode", "pi"];

fn check_meta(source: &str, meta: &Literal) -> Result<CheckedMeta, ScriptError> {
    let Some(properties) = meta.properties() else {
        return Err(ScriptError::at(
            source,
            meta.offset,
            "meta must be an object",
        ));
    };
    let checker = MetaChecker { source };
    let name = checker.required_text(meta, properties, "name", "meta")?;
    let description = checker.required_text(meta, properties, "description", "meta")?;
    let when_to_use = field(properties, "whenToUse")
        .map(|text| checker.when_to_use(text))
        .transpose()?;
    let phases = match field(properties, "phases") {
        Some(phases) => checker.phases(phases)?,
        None => Vec::new(),
    };
    let model = field(properties, "model")
        .map(|model| checker.model(model, "meta.model"))
        .transpose()?;
    let backends = field(properties, "backends")
        .map(|backends| checker.backends(backends))
        .transpose()?;
    let input_schema = match field(properties, "inputSchema") {
        Some(schema) if schema.properties().is_some() => Some(schema.to_json()),
        Some(schema) => {
            return Err(checker.error(schema, "meta.inputSchema must be an object (a JSON Schema)"));
        }
        None => None,
    };
    let files = match field(properties, "files") {
        Some(files) => checker.files(files)?,
        None => Vec::new(),
    };
    let mut unknown_keys: Vec<String> = properties
        .iter()
        .map(|property| property.key.clone())
        .filter(|key| !KNOWN_META_KEYS.contains(&key.as_str()))
        .collect();
    unknown_keys.sort();
    Ok(CheckedMeta {
        name,
        description,
        when_to_use,
        phases,
        model,
        backends,
        input_schema,
        files,
        unknown_keys,
    })
}

fn field<'a>(properties: &'a [Property], key: &str) -> Option<&'a Literal> {
    properties
        .iter()
        .find(|property| property.key == key)
        .map(|property| &property.value)
}

struct MetaChecker<'a> {
    source: &'a str,
}

impl MetaChecker<'_> {
    fn error(&self, value: &Literal, message: impl fmt::Display) -> ScriptError {
        ScriptError::at(self.source, value.offset, message)
    }

    /// `meta.whenToUse`: a non-blank string of at most [`MAX_WHEN_TO_USE_CHARS`] characters.
    fn when_to_use(&self, value: &Literal) -> Result<String, ScriptError> {
        let text = self.text(value, "meta.whenToUse")?;
        if text.chars().count() > MAX_WHEN_TO_USE_CHARS {
            return Err(self.error(
                value,
                format!("meta.whenToUse must be at most {MAX_WHEN_TO_USE_CHARS} characters"),
            ));
        }
        Ok(text)
    }

    /// A non-blank string.
    fn text(&self, value: &Literal, path: &str) -> Result<String, ScriptError> {
        match value.as_str() {
            Some(text) if !text.trim().is_empty() => Ok(text.to_owned()),
            _ => Err(self.error(value, format!("{path} must be a non-empty string"))),
        }
    }

    /// A model spec: a non-blank string of at most [`NAME_MAX_BYTES`] bytes, since every
    /// call routed by it stores it.
    fn model(&self, value: &Literal, path: &str) -> Result<String, ScriptError> {
        let spec = self.text(value, path)?;
        if spec.len() > NAME_MAX_BYTES {
            return Err(self.error(
                value,
                format!(
                    "{path} must be at most {NAME_MAX_BYTES} bytes, got {}",
                    spec.len()
                ),
            ));
        }
        Ok(spec)
    }

    /// `object.key`, which must be present and a non-blank string.
    fn required_text(
        &self,
        object: &Literal,
        properties: &[Property],
        key: &str,
        object_path: &str,
    ) -> Result<String, ScriptError> {
        let path = child_path(object_path, key);
        match field(properties, key) {
            Some(value) => self.text(value, &path),
            None => Err(self.error(object, format!("{path} is required (a non-empty string)"))),
        }
    }

    /// Rejects keys of `properties` not listed in `known`: a misspelt `detial` or `arg` would
    /// otherwise be ignored without a word.
    fn only_known_keys(
        &self,
        properties: &[Property],
        known: &[&str],
        path: &str,
    ) -> Result<(), ScriptError> {
        match properties
            .iter()
            .find(|property| !known.contains(&property.key.as_str()))
        {
            Some(property) => Err(ScriptError::at(
                self.source,
                property.key_offset,
                format!(
                    "{} is not a known field (expected one of: {})",
                    child_path(path, &property.key),
                    known.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    fn phases(&self, phases: &Literal) -> Result<Vec<Phase>, ScriptError> {
        let LiteralValue::Array(items) = &phases.value else {
            return Err(self.error(
                phases,
                "meta.phases must be an array of `{ title, detail?, model? }`",
            ));
        };
        let mut checked: Vec<Phase> = Vec::with_capacity(items.len());
        let mut index_by_title: HashMap<String, usize> = HashMap::new();
        for (index, item) in items.iter().enumerate() {
            let path = format!("meta.phases[{index}]");
            let Some(properties) = item.properties() else {
                return Err(self.error(
                    item,
                    format!("{path} must be an object `{{ title, detail?, model? }}`"),
                ));
            };
            self.only_known_keys(properties, &["title", "detail", "model"], &path)?;
            let title = self.required_text(item, properties, "title", &path)?;
            if let Some(&earlier) = index_by_title.get(&title) {
                let title_value = field(properties, "title").unwrap_or(item);
                return Err(self.error(
                    title_value,
                    format!(
                        "{path}.title {} repeats the title of meta.phases[{earlier}]; phase titles must be unique",
                        Value::String(title.clone())
                    ),
                ));
            }
            let detail = match field(properties, "detail") {
                Some(detail) => Some(
                    detail
                        .as_str()
                        .ok_or_else(|| {
                            self.error(detail, format!("{path}.detail must be a string"))
                        })?
                        .to_owned(),
                ),
                None => None,
            };
            let model = field(properties, "model")
                .map(|model| self.model(model, &format!("{path}.model")))
                .transpose()?;
            index_by_title.insert(title.clone(), index);
            checked.push(Phase {
                title,
                detail,
                model,
            });
        }
        Ok(checked)
    }

    fn backends(&self, backends: &Literal) -> Result<Value, ScriptError> {
        let Some(entries) = backends.properties() else {
            return Err(self.error(backends, "meta.backends must be an object `{ <name>: { command, args?, env?, sessionMeta?, structuredOutputTool? } }`"));
        };
        for entry in entries {
            let name = &entry.key;
            if !is_valid_backend_name(name) {
                return Err(ScriptError::at(
                    self.source,
                    entry.key_offset,
                    format!(
                        "meta.backends has an invalid name {}: use 1 to 64 ASCII letters, digits, \
                         `.`, `_` or `-`, starting with a letter or digit",
                        Value::String(name.clone())
                    ),
                ));
            }
            if RESERVED_BACKEND_NAMES
                .iter()
                .any(|reserved| reserved.eq_ignore_ascii_case(name))
            {
                return Err(ScriptError::at(
                    self.source,
                    entry.key_offset,
                    format!(
                        "{} uses a reserved name: claude, codex, opencode and pi are built in",
                        child_path("meta.backends", name)
                    ),
                ));
            }
            self.backend(&entry.value, &child_path("meta.backends", name))?;
        }
        Ok(backends.to_json())
    }

    fn backend(&self, backend: &Literal, path: &str) -> Result<(), ScriptError> {
        let Some(properties) = backend.properties() else {
            return Err(self.error(backend, format!("{path} must be an object `{{ command, args?, env?, sessionMeta?, structuredOutputTool? }}`")));
        };
        self.only_known_keys(
            properties,
            &[
                "command",
                "args",
                "env",
                "sessionMeta",
                "structuredOutputTool",
            ],
            path,
        )?;
        self.required_text(backend, properties, "command", path)?;
        if let Some(args) = field(properties, "args") {
            let LiteralValue::Array(items) = &args.value else {
                return Err(self.error(args, format!("{path}.args must be an array of strings")));
            };
            if let Some((index, item)) = items
                .iter()
                .enumerate()
                .find(|(_, item)| item.as_str().is_none())
            {
                return Err(self.error(item, format!("{path}.args[{index}] must be a string")));
            }
        }
        if let Some(env) = field(properties, "env") {
            let Some(variables) = env.properties() else {
                return Err(self.error(env, format!("{path}.env must be an object of strings")));
            };
            if let Some(variable) = variables
                .iter()
                .find(|variable| variable.value.as_str().is_none())
            {
                let variable_path = child_path(&format!("{path}.env"), &variable.key);
                return Err(
                    self.error(&variable.value, format!("{variable_path} must be a string"))
                );
            }
        }
        if let Some(session_meta) = field(properties, "sessionMeta")
            && session_meta.properties().is_none()
        {
            return Err(self.error(
                session_meta,
                format!("{path}.sessionMeta must be an object"),
            ));
        }
        // `true` is the default (the tool is offered when the agent takes HTTP MCP servers);
        // `false` keeps the schema in the prompt only.
        if let Some(flag) = field(properties, "structuredOutputTool")
            && !matches!(flag.value, LiteralValue::Bool(_))
        {
            return Err(self.error(
                flag,
                format!("{path}.structuredOutputTool must be true or false"),
            ));
        }
        Ok(())
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`
fn is_valid_backend_name(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric())
        && name.len() <= 64
        && characters.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The determinism guard's static half: direct calls that would make a replay differ, and
/// module loading, which does not exist for workflow scripts. Aliases such as
/// `const f = Date; f.now()` are left to the runtime prelude.
fn check_determinism(source: &str, body_start: usize) -> Result<(), ScriptError> {
    let tokens = lexer::tokenize(source, body_start);
    let text = |index: usize| -> &str {
        tokens
            .get(index)
            .map_or("", |token: &Token| &source[token.start..token.end])
    };
    let is_punctuator = |index: usize, punctuator: &str| -> bool {
        tokens
            .get(index)
            .is_some_and(|token| token.kind == TokenKind::Punctuator)
            && text(index) == punctuator
    };
    let is_member_dot = |index: usize| is_punctuator(index, ".") || is_punctuator(index, "?.");
    let is_identifier = |index: usize, name: &str| -> bool {
        tokens
            .get(index)
            .is_some_and(|token| token.kind == TokenKind::Identifier)
            && text(index) == name
    };
    // `x.now(` or `x.now?.(`, with the dot at `dot`.
    let calls_member = |dot: usize, member: &str| -> bool {
        is_member_dot(dot)
            && is_identifier(dot + 1, member)
            && (is_punctuator(dot + 2, "(")
                || (is_punctuator(dot + 2, "?.") && is_punctuator(dot + 3, "(")))
    };

    for (index, token) in tokens.iter().enumerate() {
        if token.kind != TokenKind::Identifier {
            continue;
        }
        // A property (`foo.Date`) is somebody else's `Date`.
        if index > 0 && is_member_dot(index - 1) {
            continue;
        }
        let after_new = index > 0 && is_identifier(index - 1, "new");
        let next = index + 1;
        let finding = match &source[token.start..token.end] {
            "Date" if after_new => {
                if is_punctuator(next, "(") && is_punctuator(next + 1, ")") {
                    Some((tokens[index - 1].start, "`new Date()` without arguments"))
                } else if is_punctuator(next, "(") || is_member_dot(next) {
                    None
                } else {
                    Some((tokens[index - 1].start, "`new Date` without arguments"))
                }
            }
            "Date" if calls_member(next, "now") => Some((token.start, "`Date.now()`")),
            "Date" if is_punctuator(next, "(") => Some((token.start, "`Date()` (without `new`)")),
            "Math" if calls_member(next, "random") => Some((token.start, "`Math.random()`")),
            "performance" if calls_member(next, "now") => {
                Some((token.start, "`performance.now()`"))
            }
            "performance" if is_member_dot(next) && is_identifier(next + 1, "timeOrigin") => {
                Some((token.start, "`performance.timeOrigin`"))
            }
            _ => None,
        };
        if let Some((offset, what)) = finding {
            return Err(ScriptError::at(
                source,
                offset,
                format!(
                    "{what} is unavailable in workflow scripts (runs must replay deterministically)"
                ),
            ));
        }
        let import = match &source[token.start..token.end] {
            "require" if is_punctuator(next, "(") => Some("`require(`"),
            "import" if is_punctuator(next, "(") => Some("`import(`"),
            "import"
                if tokens.get(next).is_some_and(|next_token| {
                    matches!(next_token.kind, TokenKind::Identifier | TokenKind::String)
                }) || is_punctuator(next, "{")
                    || is_punctuator(next, "*") =>
            {
                Some("an `import` statement")
            }
            _ => None,
        };
        if let Some(what) = import {
            return Err(ScriptError::at(
                source,
                token.start,
                format!(
                    "workflow scripts cannot import modules; everything they need is a global \
                     (found {what})"
                ),
            ));
        }
    }
    Ok(())
}
