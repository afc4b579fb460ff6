//! The import rules of ARCHITECTURE.md ("## Import rules"), checked against the code: every
//! `.rs` file under `src/` is lexed (comments, strings and char literals dropped), each path
//! that names a top-level module through `crate::` — in a `use` tree, grouped or not, or in
//! code — or through a `super::` chain that climbs to the crate root is collected, and a use
//! a rule forbids fails the test naming file, line and rule. The rules are read from the
//! document, so it stays their single source.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `module` must not name any of `forbidden`; `line` is where ARCHITECTURE.md says so.
#[derive(Debug, PartialEq)]
struct Rule {
    module: String,
    forbidden: Vec<String>,
    line: usize,
}

/// One path from a file into a top-level module of the crate.
#[derive(Debug, PartialEq)]
struct Reference {
    /// The top-level module named, for example `discovery` for `crate::discovery::liveness`.
    target: String,
    line: usize,
}

const SECTION: &str = "## Import rules";
const RULE_VERB: &str = " imports nothing from ";

/// The rules of the "## Import rules" section: one bullet each, of the form
/// ``- `engine` imports nothing from `a`, `b`. Why…``; the list ends at the first full stop.
fn parse_rules(document: &str) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    let mut inside = false;
    for (index, line) in document.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim_end() == SECTION;
            continue;
        }
        if !inside || !line.starts_with("- `") {
            continue;
        }
        let number = index + 1;
        let (head, rest) = line.split_once(RULE_VERB).ok_or_else(|| {
            format!("ARCHITECTURE.md:{number}: a rule bullet must read \"- `module`{RULE_VERB}`a`, `b`. Why\": {line}")
        })?;
        let module = backticked(head);
        let list = rest.split_once('.').map_or(rest, |(list, _)| list);
        let forbidden = backticked(list);
        match (module.as_slice(), forbidden.is_empty()) {
            ([module], false) => rules.push(Rule {
                module: module.clone(),
                forbidden,
                line: number,
            }),
            _ => {
                return Err(format!(
                    "ARCHITECTURE.md:{number}: expected one `module` before \"{}\" and at least one `module` after it: {line}",
                    RULE_VERB.trim()
                ));
            }
        }
    }
    Ok(rules)
}

/// The words between backticks in `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    /// `::`, kept whole so paths read as ident, `::`, ident.
    PathSep,
    Punct(char),
}

/// Rust source as tokens with their line numbers, without comments, string, byte-string,
/// raw-string and char literals (so a comment or a message that mentions `crate::cli` is
/// not a use of it). Lifetimes are dropped with their quote.
fn lex(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
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
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i, &mut line);
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
    tokens
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

/// Every top-level module a file of module path `module_path` names: `crate::x…`,
/// `crate::{x, y::z}`, and `super::…` chains that reach the crate root (inline `mod m { }`
/// blocks deepen the path). `$crate` (macro bodies) is not a use.
fn references(source: &str, module_path: &[String]) -> Vec<Reference> {
    let tokens = lex(source);
    let mut found = Vec::new();
    // Inline modules open at a brace depth; the path is the file's plus those still open.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod = false;
    for (index, (token, _)) in tokens.iter().enumerate() {
        let ident = |offset: usize| match tokens.get(index + offset) {
            Some((Token::Ident(word), _)) => Some(word.as_str()),
            _ => None,
        };
        match token {
            Token::Punct('{') => {
                depth += 1;
                if pending_mod {
                    inline.push(depth);
                }
                pending_mod = false;
            }
            Token::Punct('}') => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Punct(';') => pending_mod = false,
            Token::Ident(word) if word == "mod" => pending_mod = ident(1).is_some(),
            Token::Ident(word) if word == "crate" => {
                let after_dollar = index > 0 && tokens[index - 1].0 == Token::Punct('$');
                if !after_dollar && tokens.get(index + 1).map(|t| &t.0) == Some(&Token::PathSep) {
                    found.extend(heads_at(&tokens, index + 2));
                }
            }
            Token::Ident(word) if word == "super" => {
                let starts_path = index == 0 || tokens[index - 1].0 != Token::PathSep;
                if !starts_path {
                    continue;
                }
                let mut climbs = 0;
                let mut at = index;
                while matches!(&tokens.get(at), Some((Token::Ident(w), _)) if w == "super")
                    && tokens.get(at + 1).map(|t| &t.0) == Some(&Token::PathSep)
                {
                    climbs += 1;
                    at += 2;
                }
                if climbs > 0 && climbs == module_path.len() + inline.len() {
                    found.extend(heads_at(&tokens, at));
                }
            }
            _ => {}
        }
    }
    found
}

/// The first segments of the path (or `{…}` group of paths) starting at token `at`.
fn heads_at(tokens: &[(Token, usize)], at: usize) -> Vec<Reference> {
    match tokens.get(at) {
        Some((Token::Ident(word), line)) if word != "self" => vec![Reference {
            target: word.clone(),
            line: *line,
        }],
        Some((Token::Punct('{'), _)) => {
            let mut heads = Vec::new();
            let mut nesting = 0;
            let mut item_start = true;
            for (token, line) in &tokens[at + 1..] {
                match token {
                    Token::Punct('{') => nesting += 1,
                    Token::Punct('}') if nesting == 0 => break,
                    Token::Punct('}') => nesting -= 1,
                    Token::Punct(',') if nesting == 0 => {
                        item_start = true;
                        continue;
                    }
                    Token::Ident(word) if item_start && nesting == 0 && word != "self" => {
                        heads.push(Reference {
                            target: word.clone(),
                            line: *line,
                        });
                    }
                    _ => {}
                }
                item_start = false;
            }
            heads
        }
        _ => Vec::new(),
    }
}

/// The module path of a file under `src/`: `engine/manager.rs` is `[engine, manager]`,
/// `engine/mod.rs` and `engine.rs` are `[engine]`; `None` for crate roots (`lib.rs`,
/// `main.rs`, `bin/`), which belong to no module.
fn module_path(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|first| first == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
        return None;
    }
    Some(parts)
}

/// The top-level modules `src/lib.rs` declares (`pub mod x;`, `mod x;`).
fn declared_modules(lib: &str) -> BTreeSet<String> {
    let tokens = lex(lib);
    tokens
        .windows(3)
        .filter_map(|window| match window {
            [
                (Token::Ident(m), _),
                (Token::Ident(name), _),
                (Token::Punct(';'), _),
            ] if m == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .flatten()
        .map(|entry| entry.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every use in `src/` that a rule forbids, one line each: file, line, rule.
fn violations(root: &Path, rules: &[Rule]) -> Vec<String> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(path) = module_path(relative) else {
            continue;
        };
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for reference in references(&source, &path) {
            for rule in rules.iter().filter(|rule| rule.module == path[0]) {
                if rule.forbidden.contains(&reference.target) {
                    out.push(format!(
                        "src/{}:{}: uses crate::{}, but `{}` imports nothing from `{}` (ARCHITECTURE.md:{})",
                        relative.display(),
                        reference.line,
                        reference.target,
                        rule.module,
                        reference.target,
                        rule.line
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn the_code_keeps_the_import_rules_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let document = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rules = parse_rules(&document).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        rules.len() >= 7,
        "ARCHITECTURE.md's \"{SECTION}\" section lists {} rules; expected at least the 7 of issue 12",
        rules.len()
    );
    // A rule about a module that no longer exists would pass without checking anything.
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let modules = declared_modules(&lib);
    for rule in &rules {
        for name in std::iter::once(&rule.module).chain(&rule.forbidden) {
            assert!(
                modules.contains(name),
                "ARCHITECTURE.md:{}: `{name}` is not a module declared in src/lib.rs ({modules:?})",
                rule.line
            );
        }
    }
    let found = violations(root, &rules);
    assert!(
        found.is_empty(),
        "{} import(s) break ARCHITECTURE.md's import rules:\n{}",
        found.len(),
        found.join("\n")
    );
}

fn path(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

fn targets(source: &str, module_path: &[&str]) -> Vec<String> {
    references(source, &path(module_path))
        .into_iter()
        .map(|r| r.target)
        .collect()
}

#[test]
fn the_scanner_finds_uses_in_use_trees_paths_and_super_chains() {
    let source = r#"
use crate::cli::build_engine_as;
use crate::{model::RunId, discovery::{liveness, Paths}, self as me};
pub(crate) fn f() {
    let _ = crate::daemon::spawn::ensure_daemon();
    let _: Vec<crate :: tools :: X> = Vec::new();
}
"#;
    assert_eq!(
        targets(source, &["engine", "manager"]),
        ["cli", "model", "discovery", "daemon", "tools"]
    );
    let lines: Vec<usize> = references(source, &path(&["engine"]))
        .iter()
        .map(|r| r.line)
        .collect();
    assert_eq!(lines, [2, 3, 3, 5, 6]);

    // `super` from engine/manager.rs reaches the crate root after two climbs, and one more
    // inside an inline module; one climb stays inside `engine`.
    let supers = "use super::routing::X;\nuse super::super::cli::Y;\nmod tests { use super::super::super::acp::Z; use super::super::W; }";
    assert_eq!(targets(supers, &["engine", "manager"]), ["cli", "acp"]);
    assert_eq!(targets("use super::cli::Y;", &["engine"]), ["cli"]);
}

#[test]
fn the_scanner_ignores_comments_strings_and_macro_crate() {
    let source = r####"
// use crate::cli::run;
/// Called by `crate::cli::run`.
/* a block /* nested crate::cli */ still crate::cli */
const A: &str = "crate::cli::run";
const B: &str = r#"crate::cli "quoted" run"#;
const C: &[u8] = b"crate::cli";
const D: char = '"';
fn e<'a>(x: &'a str) -> &'a str { x }
macro_rules! m { () => { $crate::cli::run() } }
const F: &str = "escaped \" crate::cli";
use crate::store::Store;
"####;
    assert_eq!(targets(source, &["engine"]), ["store"]);
    let line = references(source, &path(&["engine"]))[0].line;
    assert_eq!(line, 12, "line numbers count the lines of skipped literals");
}

#[test]
fn a_violating_snippet_fails_a_rule_and_the_document_format_parses() {
    let document = "# A\n## Import rules\nIntro.\n- `engine` imports nothing from `cli`, `daemon`. Because.\n- `store` imports nothing from `engine`.\n## Next\n- `x` imports nothing from `y`.\n";
    let rules = parse_rules(document).unwrap();
    assert_eq!(
        rules,
        [
            Rule {
                module: "engine".into(),
                forbidden: path(&["cli", "daemon"]),
                line: 4
            },
            Rule {
                module: "store".into(),
                forbidden: path(&["engine"]),
                line: 5
            },
        ]
    );
    assert!(parse_rules("## Import rules\n- `engine` must not see `cli`.\n").is_err());

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/engine")).unwrap();
    std::fs::write(
        dir.path().join("src/engine/manager.rs"),
        "//! x\n// crate::cli is fine here\nuse crate::daemon::x;\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "pub mod engine;\n").unwrap();
    assert_eq!(
        violations(dir.path(), &rules),
        [
            "src/engine/manager.rs:3: uses crate::daemon, but `engine` imports nothing from `daemon` (ARCHITECTURE.md:4)"
        ]
    );
    assert_eq!(
        declared_modules("//! m\npub mod engine;\nmod store;\n#[cfg(test)]\nmod tests { }\n"),
        BTreeSet::from(["engine".to_owned(), "store".to_owned()])
    );
    assert_eq!(
        module_path(Path::new("engine/mod.rs")),
        Some(path(&["engine"]))
    );
    assert_eq!(module_path(Path::new("bin/agentprism-workflow.rs")), None);
}
