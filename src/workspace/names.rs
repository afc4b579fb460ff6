//! Names made from untrusted text: the branch a call's changes land on and the folder its
//! worktree lives in. Run ids and labels come from scripts and clients, so every character
//! outside a small safe set becomes a dash; what is left is always a valid ref component and
//! a plain folder name (no `..`, no leading dot, no `.lock` ending, no slash).

use super::CallRef;

/// The prefix of every branch this room makes, so a user can list them with one pattern.
pub(crate) const BRANCH_PREFIX: &str = "agentprism";

/// The branch of `call`: `agentprism/<run>/<index>` with `-<label>` when the label has
/// anything left after sanitizing.
pub(crate) fn branch(call: &CallRef) -> String {
    let run = part(&call.run_id, 64);
    let run = if run.is_empty() {
        "run".to_owned()
    } else {
        run
    };
    let label = part(&call.label, 40);
    if label.is_empty() {
        format!("{BRANCH_PREFIX}/{run}/{}", call.call_index)
    } else {
        format!("{BRANCH_PREFIX}/{run}/{}-{label}", call.call_index)
    }
}

/// The folder name a run's worktrees are grouped under.
pub(crate) fn run_folder(run_id: &str) -> String {
    let run = part(run_id, 64);
    if run.is_empty() {
        "run".to_owned()
    } else {
        run
    }
}

/// One line for a commit message: control characters become spaces, cut to `max` chars.
pub(crate) fn one_line(raw: &str, max: usize) -> String {
    raw.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// `raw` reduced to ASCII letters, digits, `_` and single dashes, at most `max` bytes, with no
/// dash at either end.
fn part(raw: &str, max: usize) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        let keep = c.is_ascii_alphanumeric() || c == '_';
        if keep {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= max {
            break;
        }
    }
    out.truncate(max);
    out.trim_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(run: &str, index: u32, label: &str) -> CallRef {
        CallRef {
            run_id: run.to_owned(),
            call_index: index,
            label: label.to_owned(),
        }
    }

    #[test]
    fn branch_names_say_run_and_call_and_drop_unsafe_characters() {
        assert_eq!(branch(&call("r-1", 3, "")), "agentprism/r-1/3");
        assert_eq!(
            branch(&call("r-1", 3, "Fix the ../../bug.lock ~^:?*[\\")),
            "agentprism/r-1/3-Fix-the-bug-lock"
        );
        assert_eq!(branch(&call("../..", 0, "...")), "agentprism/run/0");
        let long = "a".repeat(500);
        assert!(branch(&call(&long, 1, &long)).len() <= "agentprism//1-".len() + 64 + 40);
    }

    #[test]
    fn run_folders_are_plain_names() {
        assert_eq!(run_folder("../../etc"), "etc");
        assert_eq!(run_folder(".."), "run");
        assert_eq!(run_folder("abc_DEF-12"), "abc_DEF-12");
    }

    #[test]
    fn commit_lines_have_no_control_characters() {
        assert_eq!(one_line("a\nb\tc\u{7}", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc");
    }
}
