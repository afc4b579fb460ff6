//! The import rules of ARCHITECTURE.md: parsing the "## Import rules" bullets, finding every
//! path a file names inside the crate, and matching the two.
//!
//! A path is resolved from the crate root: `crate::engine::driver::X` is `engine::driver`,
//! and `super::status::Y` in `src/engine/driver/mod.rs` is `engine::status`. Paths are kept
//! to their first two segments, which is as deep as a rule names a room.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::lex::{Token, lex};
use super::{module_path, rust_files};

/// `module` must not name any of `forbidden`; `line` is where ARCHITECTURE.md says so. Each
/// name is a module path from the crate root: `engine`, or a room inside it, `engine::status`.
#[derive(Debug, PartialEq)]
pub(super) struct Rule {
    pub module: String,
    pub forbidden: Vec<String>,
    pub line: usize,
}

/// One path from a file into the crate, resolved from the crate root.
#[derive(Debug, PartialEq)]
pub(super) struct Reference {
    /// At most two segments: `["discovery", "liveness"]` for `crate::discovery::liveness::X`.
    pub path: Vec<String>,
    pub line: usize,
}

pub(super) const SECTION: &str = "## Import rules";
const RULE_VERB: &str = " imports nothing from ";
/// How deep a rule names a module: a top-level module or a room inside one.
const DEPTH: usize = 2;

/// The rules of the "## Import rules" section: one bullet each, of the form
/// ``- `engine` imports nothing from `a`, `b`. Why…``; the list ends at the first full stop.
pub(super) fn parse_rules(document: &str) -> Result<Vec<Rule>, String> {
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
pub(super) fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Every path into the crate that a file of module path `module_path` names: `crate::x…`,
/// `crate::{x, y::z}`, and `super::…` chains (inline `mod m { }` blocks deepen the path).
/// `$crate` (macro bodies) is not a use; a path that climbs past the root is not one either.
pub(super) fn references(source: &str, module_path: &[String]) -> Vec<Reference> {
    let tokens = lex(source);
    let mut found = Vec::new();
    // Inline modules open at a brace depth; the path is the file's plus those still open.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    for (index, (token, _)) in tokens.iter().enumerate() {
        let ident = |offset: usize| match tokens.get(index + offset) {
            Some((Token::Ident(word), _)) => Some(word.clone()),
            _ => None,
        };
        match token {
            Token::Punct('{') => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((depth, name));
                }
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|(at, _)| *at == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Punct(';') => pending_mod = None,
            Token::Ident(word) if word == "mod" => pending_mod = ident(1),
            Token::Ident(word) if word == "crate" => {
                let after_dollar = index > 0 && tokens[index - 1].0 == Token::Punct('$');
                if !after_dollar && tokens.get(index + 1).map(|t| &t.0) == Some(&Token::PathSep) {
                    found.extend(resolved(&[], paths_at(&tokens, index + 2, DEPTH)));
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
                let here: Vec<String> = module_path
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(_, name)| name.clone()))
                    .collect();
                if climbs > 0 && climbs <= here.len() {
                    let base = &here[..here.len() - climbs];
                    found.extend(resolved(base, paths_at(&tokens, at, DEPTH)));
                }
            }
            _ => {}
        }
    }
    found.dedup();
    found
}

/// `paths` below `base`, cut to [`DEPTH`] segments; the crate root itself
/// (`crate::{self}`) is no path into a module.
fn resolved(base: &[String], paths: Vec<(Vec<String>, usize)>) -> Vec<Reference> {
    paths
        .into_iter()
        .filter_map(|(tail, line)| {
            let mut path: Vec<String> = base.iter().cloned().chain(tail).collect();
            path.truncate(DEPTH);
            (!path.is_empty()).then_some(Reference { path, line })
        })
        .collect()
}

/// The paths (or `{…}` group of paths) starting at token `at`, each at most `depth` segments
/// long, with the line of its first segment. `self` in a group stands for the prefix itself.
fn paths_at(tokens: &[(Token, usize)], at: usize, depth: usize) -> Vec<(Vec<String>, usize)> {
    match tokens.get(at) {
        Some((Token::Ident(word), line)) if word == "self" => vec![(Vec::new(), *line)],
        Some((Token::Ident(word), line)) => {
            let continues = tokens.get(at + 1).map(|t| &t.0) == Some(&Token::PathSep);
            let tails = if continues && depth > 1 {
                paths_at(tokens, at + 2, depth - 1)
            } else {
                Vec::new()
            };
            if tails.is_empty() {
                return vec![(vec![word.clone()], *line)];
            }
            tails
                .into_iter()
                .map(|(tail, _)| {
                    let path = std::iter::once(word.clone()).chain(tail).collect();
                    (path, *line)
                })
                .collect()
        }
        Some((Token::Punct('{'), _)) => {
            let mut paths = Vec::new();
            let mut nesting = 0;
            let mut item_start = true;
            for (offset, (token, _)) in tokens[at + 1..].iter().enumerate() {
                match token {
                    Token::Punct('{') => nesting += 1,
                    Token::Punct('}') if nesting == 0 => break,
                    Token::Punct('}') => nesting -= 1,
                    Token::Punct(',') if nesting == 0 => {
                        item_start = true;
                        continue;
                    }
                    _ if item_start && nesting == 0 => {
                        paths.extend(paths_at(tokens, at + 1 + offset, depth));
                    }
                    _ => {}
                }
                item_start = false;
            }
            paths
        }
        _ => Vec::new(),
    }
}

/// The modules a module root declares (`pub mod x;`, `mod x;`).
pub(super) fn declared_modules(root: &str) -> BTreeSet<String> {
    let tokens = lex(root);
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

/// Whether `name` (`engine`, `engine::status`) is a module the crate declares: a top-level
/// module of `src/lib.rs`, or a module its root (`src/engine/mod.rs`) declares.
pub(super) fn is_declared(root: &Path, name: &str) -> bool {
    let parts: Vec<&str> = name.split("::").collect();
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    match parts.as_slice() {
        [top] => declared_modules(&read(&root.join("src/lib.rs"))).contains(*top),
        [top, room] => {
            declared_modules(&read(&root.join("src/lib.rs"))).contains(*top)
                && declared_modules(&read(&root.join("src").join(top).join("mod.rs")))
                    .contains(*room)
        }
        _ => false,
    }
}

/// Whether `path` lies in the module that `name` (`engine::status`) spells.
fn within(path: &[String], name: &str) -> bool {
    let parts: Vec<&str> = name.split("::").collect();
    path.len() >= parts.len() && path.iter().zip(&parts).all(|(a, b)| a == b)
}

/// Every use in `src/` that a rule forbids, one line each: file, line, rule.
pub(super) fn violations(root: &Path, rules: &[Rule]) -> Vec<String> {
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
            for rule in rules.iter().filter(|rule| within(&path, &rule.module)) {
                for forbidden in &rule.forbidden {
                    if within(&reference.path, forbidden) {
                        out.push(format!(
                            "src/{}:{}: uses crate::{forbidden}, but `{}` imports nothing from `{forbidden}` (ARCHITECTURE.md:{})",
                            relative.display(),
                            reference.line,
                            rule.module,
                            rule.line
                        ));
                    }
                }
            }
        }
    }
    out.dedup();
    out
}

/// The circles among the top-level modules (`inside` is `None`) or among the rooms of one
/// module (`Some("engine")`): each group of two or more that reach one another through their
/// imports, with one `file:line` per import inside the group. A circle has no bottom, so no
/// rule can say which way it should point.
pub(super) fn circles(root: &Path, inside: Option<&str>) -> Vec<String> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // (from, to) → where the first such import is.
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(path) = module_path(relative) else {
            continue;
        };
        let from = match inside {
            None => path[0].clone(),
            Some(module) if path[0] == module && path.len() > 1 => path[1].clone(),
            Some(_) => continue,
        };
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for reference in references(&source, &path) {
            let to = match inside {
                None => reference.path[0].clone(),
                Some(module) if reference.path[0] == module && reference.path.len() > 1 => {
                    reference.path[1].clone()
                }
                Some(_) => continue,
            };
            if to != from {
                edges
                    .entry((from.clone(), to))
                    .or_insert_with(|| format!("src/{}:{}", relative.display(), reference.line));
            }
        }
    }
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let reaches = |start: &String| {
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for (from, to) in edges.keys() {
                if from == node && seen.insert(to) {
                    stack.push(to);
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<&String>> =
        nodes.iter().map(|node| (*node, reaches(node))).collect();
    let mut out = Vec::new();
    let mut placed: BTreeSet<&String> = BTreeSet::new();
    for node in &nodes {
        if placed.contains(node) || !reach[node].contains(node) {
            continue;
        }
        let group: BTreeSet<&String> = reach[node]
            .iter()
            .filter(|other| reach[*other].contains(node))
            .copied()
            .collect();
        placed.extend(group.iter().copied());
        let imports: Vec<String> = edges
            .iter()
            .filter(|((from, to), _)| group.contains(from) && group.contains(to))
            .map(|((from, to), at)| format!("{from} → {to} ({at})"))
            .collect();
        let names: Vec<&str> = group.iter().map(|name| name.as_str()).collect();
        out.push(format!("{}: {}", names.join(", "), imports.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| p.to_string()).collect()
    }

    /// The top-level modules other than the file's own that `source` names.
    fn targets(source: &str, module_path: &[&str]) -> Vec<String> {
        let mut heads: Vec<String> = references(source, &path(module_path))
            .into_iter()
            .map(|r| r.path[0].clone())
            .filter(|head| head != module_path[0])
            .collect();
        heads.dedup();
        heads
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
        assert_eq!(lines, [2, 3, 3, 3, 5, 6]);

        // `super` from engine/manager.rs reaches the crate root after two climbs, and one
        // more inside an inline module; one climb stays inside `engine`.
        let supers = "use super::routing::X;\nuse super::super::cli::Y;\nmod tests { use super::super::super::acp::Z; use super::super::W; }";
        assert_eq!(targets(supers, &["engine", "manager"]), ["cli", "acp"]);
        assert_eq!(targets("use super::cli::Y;", &["engine"]), ["cli"]);
    }

    #[test]
    fn paths_resolve_to_rooms_inside_a_module() {
        let source = "use super::status::LiveView;\nuse crate::engine::{driver::{self, Control}, manager};\nuse super::super::vm;\nmod tests { use super::X; }\n";
        let paths: Vec<Vec<String>> = references(source, &path(&["engine", "prepare", "dry"]))
            .into_iter()
            .map(|r| r.path)
            .collect();
        assert_eq!(
            paths,
            [
                path(&["engine", "prepare"]),
                path(&["engine", "driver"]),
                path(&["engine", "manager"]),
                path(&["engine", "vm"]),
                path(&["engine", "prepare"]),
            ]
        );
        // A climb past the crate root names nothing.
        assert!(references("use super::super::x;", &path(&["engine"])).is_empty());
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
        let document = "# A\n## Import rules\nIntro.\n- `engine` imports nothing from `cli`, `daemon`. Because.\n- `engine::status` imports nothing from `engine::driver`. Status is read by the driver.\n## Next\n- `x` imports nothing from `y`.\n";
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
                    module: "engine::status".into(),
                    forbidden: path(&["engine::driver"]),
                    line: 5
                },
            ]
        );
        assert!(parse_rules("## Import rules\n- `engine` must not see `cli`.\n").is_err());

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/engine/status")).unwrap();
        std::fs::write(
            dir.path().join("src/engine/manager.rs"),
            "//! x\n// crate::cli is fine here\nuse crate::daemon::x;\nuse super::status::Y;\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("src/engine/status/mod.rs"),
            "//! x\nuse crate::engine::{glob, driver::LiveView};\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("src/engine/mod.rs"),
            "pub mod driver;\npub mod status;\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "pub mod engine;\n").unwrap();
        assert_eq!(
            violations(dir.path(), &rules),
            [
                "src/engine/manager.rs:3: uses crate::daemon, but `engine` imports nothing from `daemon` (ARCHITECTURE.md:4)",
                "src/engine/status/mod.rs:2: uses crate::engine::driver, but `engine::status` imports nothing from `engine::driver` (ARCHITECTURE.md:5)",
            ]
        );
        assert_eq!(
            circles(dir.path(), Some("engine")),
            Vec::<String>::new(),
            "manager → status and status → driver make no circle"
        );
        std::fs::write(
            dir.path().join("src/engine/driver.rs"),
            "//! x\nuse crate::engine::status::LiveView;\n",
        )
        .unwrap();
        assert_eq!(
            circles(dir.path(), Some("engine")),
            [
                "driver, status: driver → status (src/engine/driver.rs:2); status → driver (src/engine/status/mod.rs:2)"
            ]
        );
        assert_eq!(circles(dir.path(), None), Vec::<String>::new());
        assert!(is_declared(dir.path(), "engine::status"));
        assert!(!is_declared(dir.path(), "engine::companions"));
        assert!(!is_declared(dir.path(), "store"));
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
}
