//! CONTRIBUTING.md's code rules that a reading of the tree can check: one lock policy and one
//! module-file convention.

use std::path::Path;

use super::rust_files;

/// The one file that may take a `std::sync::Mutex` by hand: the policy's own helper.
const LOCK_HELPER: &str = "src/util/sync.rs";

#[test]
fn std_mutexes_are_taken_only_through_the_lock_helper() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("under the root");
        if relative == Path::new(LOCK_HELPER) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("source file");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if by_hand(code) {
                found.push(format!(
                    "{}:{}: {}",
                    relative.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} lock site(s) outside {LOCK_HELPER}: take a std::sync::Mutex with `Lock::locked` or \
         `Lock::try_locked` (CONTRIBUTING.md, \"Locks\"):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// Whether a line of code takes a std lock by hand: `.lock()` that is no tokio `.await`ed
/// lock and no stdio lock, `try_lock()` of anything but a `file` (a file's advisory lock is no
/// mutex), or a `PoisonError`.
fn by_hand(code: &str) -> bool {
    let mut rest = code;
    while let Some(at) = rest.find(".lock()") {
        let before = &rest[..at];
        let after = rest[at + ".lock()".len()..].trim_start();
        let stdio = ["stdin()", "stdout()", "stderr()", "stdin"]
            .iter()
            .any(|name| before.ends_with(name));
        if !after.starts_with(".await") && !stdio {
            return true;
        }
        rest = &rest[at + ".lock()".len()..];
    }
    let try_lock = code
        .match_indices(".try_lock()")
        .any(|(at, _)| !code[..at].ends_with("file"));
    try_lock || code.contains("PoisonError")
}

#[test]
fn a_module_with_a_folder_keeps_its_root_in_mod_rs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let beside: Vec<String> = files
        .iter()
        .filter(|file| file.file_name().is_some_and(|name| name != "mod.rs"))
        .filter(|file| file.with_extension("").is_dir())
        .map(|file| {
            file.strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string()
        })
        .collect();
    assert!(
        beside.is_empty(),
        "module file(s) beside their folder; move each to <folder>/mod.rs (CONTRIBUTING.md, \"Modules\"):\n{}",
        beside.join("\n")
    );
}

#[test]
fn the_lock_rule_sees_a_lock_taken_by_hand() {
    assert!(by_hand("let guard = self.state.lock().expect(\"state\");"));
    assert!(by_hand("match connection.try_lock() {"));
    assert!(by_hand("    .unwrap_or_else(PoisonError::into_inner)"));
    assert!(!by_hand("let guard = self.state.lock().await;"));
    assert!(!by_hand("let mut out = std::io::stdout().lock();"));
    assert!(!by_hand("let guard = self.state.locked();"));
    assert!(!by_hand("match file.try_lock() {"));
}
