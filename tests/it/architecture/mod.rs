//! ARCHITECTURE.md checked against the code, in two parts.
//!
//! The import rules ("## Import rules", `imports.rs`): every `.rs` file under `src/` is lexed
//! (comments, strings and char literals dropped), each path that names a module through
//! `crate::` — in a `use` tree, grouped or not, or in code — or through a `super::` chain is
//! resolved from the crate root, and a use a rule forbids fails the test naming file, line and
//! rule. A rule is about a top-level module (`engine`) or a room inside one
//! (`engine::status`). The rules are read from the document, so it stays their single source.
//!
//! The names of files (`file_names.rs`): a comment in `src/`, or ARCHITECTURE.md or
//! CONTRIBUTING.md, that names a file of the repository (`foo.rs`, `dir/bar.rs`, `src/…`,
//! `docs/…`) which is not there fails the test, so a map cannot point at a file that moved.

use std::path::{Path, PathBuf};

mod conventions;
mod file_names;
mod imports;
mod lex;

use imports::{SECTION, is_declared, parse_rules, violations};

/// The modules at the top, which may import any other: the composition root, the command
/// line, and inside the engine its front door. Every other module `src/lib.rs` declares has
/// a rule, and so does every other room of a module whose rooms have rules.
const TOP: &[&str] = &["app", "cli", "engine::manager"];

/// The documents at the root whose names of files are checked.
const DOCUMENTS: &[&str] = &["ARCHITECTURE.md", "CONTRIBUTING.md"];

#[test]
fn the_code_keeps_the_import_rules_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let document = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rules = parse_rules(&document).unwrap_or_else(|e| panic!("{e}"));
    // A rule about a module that no longer exists would pass without checking anything.
    for rule in &rules {
        for name in std::iter::once(&rule.module).chain(&rule.forbidden) {
            assert!(
                is_declared(root, name),
                "ARCHITECTURE.md:{}: `{name}` is not a module that src/lib.rs (or its module's mod.rs) declares",
                rule.line
            );
        }
    }
    // A module without a rule may import anything; only the top may.
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let unruled: Vec<String> = imports::declared_modules(&lib)
        .into_iter()
        .filter(|module| !TOP.contains(&module.as_str()))
        .filter(|module| !rules.iter().any(|rule| &rule.module == module))
        .collect();
    assert!(
        unruled.is_empty(),
        "ARCHITECTURE.md's \"{SECTION}\" section has no rule for {unruled:?}: every module but {TOP:?} says what it does not import"
    );
    // Inside a module whose rooms have rules, every room but the top has one too, so a new
    // room says where it stands.
    for module in rules.iter().filter_map(|rule| rule.module.split_once("::")) {
        let root_file = root.join("src").join(module.0).join("mod.rs");
        let declared =
            imports::declared_modules(&std::fs::read_to_string(&root_file).unwrap_or_default());
        let unruled: Vec<String> = declared
            .into_iter()
            .map(|room| format!("{}::{room}", module.0))
            .filter(|room| !TOP.contains(&room.as_str()))
            .filter(|room| !rules.iter().any(|rule| &rule.module == room))
            .collect();
        assert!(
            unruled.is_empty(),
            "ARCHITECTURE.md's \"{SECTION}\" section has no rule for {unruled:?}: every room of `{}` but its top says what it does not import",
            module.0
        );
    }
    let found = violations(root, &rules);
    assert!(
        found.is_empty(),
        "{} import(s) break ARCHITECTURE.md's import rules:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn no_modules_or_engine_rooms_import_each_other_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for inside in [None, Some("engine")] {
        let found = imports::circles(root, inside);
        assert!(
            found.is_empty(),
            "{} circle(s) among the {}: a circle has no bottom, so move the shared piece down to a room both import\n{}",
            found.len(),
            inside.map_or("top-level modules".to_owned(), |m| format!(
                "rooms of `{m}`"
            )),
            found.join("\n")
        );
    }
}

#[test]
fn comments_and_maps_name_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = file_names::missing_in_comments(root);
    for document in DOCUMENTS {
        missing.extend(file_names::missing_in_document(root, document));
    }
    assert!(
        missing.is_empty(),
        "{} name(s) of files that do not exist (rename the file in the comment, or remove the name):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The module path of a file under `src/`: `engine/manager.rs` is `[engine, manager]`,
/// `engine/mod.rs` is `[engine]`; `None` for crate roots (`lib.rs`, `main.rs`, `bin/`), which
/// belong to no module.
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

/// Every `.rs` file under `dir`, in name order.
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
