//! The README as a new user meets it: every shell block marked `<!-- readme-test -->` runs as
//! written, and every block marked `<!-- readme-file: PATH -->` is that file's text, so the
//! README cannot drift from what runs.
//!
//! A marked block runs in one `bash -euxo pipefail` from a folder laid out like the
//! repository's root after the first run's build: `samples/` copied from the repository, an
//! empty `src/`, `target/release/agentprism` and `target/release/examples/mock_acp_agent` linked
//! to this test build's binaries, and `agentprism` on `PATH`. The one line not run as written
//! is the release build: a `cargo` on `PATH` accepts exactly `cargo build --release --bins
//! --examples` (the targets this test's own build already made) and refuses anything else, so
//! a block that needs more than those targets fails here. Every line must succeed, except a
//! line whose comment says `# exits N`: it must exit with exactly `N`. Each block gets its
//! own HOME and state folder.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::context::{TestContext, agentprism_binary, finish_child, mock_agent_binary};

/// A whole walkthrough of several commands, each starting agents, on a loaded machine.
const BLOCK_DEADLINE: Duration = Duration::from_secs(180);

/// What precedes a marked block.
const TEST_MARKER: &str = "<!-- readme-test -->";
const FILE_MARKER: &str = "<!-- readme-file: ";

/// A fenced block that follows a marker.
#[derive(Debug)]
struct Marked {
    /// The marker's line, 1-based, for messages.
    line: usize,
    /// `None` for a block to run; `Some(path)` for a block that must equal a file.
    file: Option<String>,
    body: String,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(repository().join("README.md")).expect("read README.md")
}

/// The marked blocks of `text`, in order. A marker not followed by a fenced block fails.
fn marked_blocks(text: &str) -> Vec<Marked> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at].trim();
        let file = if line == TEST_MARKER {
            None
        } else if let Some(rest) = line.strip_prefix(FILE_MARKER) {
            let path = rest.strip_suffix("-->").map(str::trim);
            Some(path.expect("a readme-file marker ends with -->").to_owned())
        } else {
            at += 1;
            continue;
        };
        let marker = at + 1;
        let open = (at + 1..lines.len())
            .find(|&i| !lines[i].trim().is_empty())
            .filter(|&i| lines[i].starts_with("```"))
            .unwrap_or_else(|| panic!("README line {marker}: no fenced block after the marker"));
        let close = (open + 1..lines.len())
            .find(|&i| lines[i].trim() == "```")
            .unwrap_or_else(|| panic!("README line {marker}: the fenced block never closes"));
        let mut body = lines[open + 1..close].join("\n");
        body.push('\n');
        found.push(Marked {
            line: marker,
            file,
            body,
        });
        at = close + 1;
    }
    found
}

/// `line` as bash runs it: a `# exits N` comment turns it into a check of that exit code.
fn checked_line(number: usize, line: &str) -> String {
    let Some(at) = line.find("# exits ") else {
        return line.to_owned();
    };
    let expected: String = line[at + "# exits ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(
        !expected.is_empty(),
        "README block line {number}: `# exits` needs a number"
    );
    let command = line[..at].trim_end();
    format!(
        "if {command}; then rc=0; else rc=$?; fi; [ \"$rc\" = {expected} ] || \
         {{ echo \"README block line {number} exited $rc; the README says {expected}\" >&2; exit 1; }}"
    )
}

/// Copies the files of `from` (one level: the samples the README names) into `to`.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read folder") {
        let entry = entry.expect("folder entry");
        if entry.file_type().expect("file type").is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
        }
    }
}

fn link(target: &Path, at: &Path) {
    std::fs::create_dir_all(at.parent().expect("parent")).expect("create folder");
    std::os::unix::fs::symlink(target, at).expect("symlink");
}

/// The folder a block runs in, laid out like the repository after the first run's build,
/// and the folder of commands put first on `PATH`.
fn world(ctx: &TestContext) -> (PathBuf, PathBuf) {
    let root = ctx.path("world");
    copy_folder(&repository().join("samples"), &root.join("samples"));
    // The walkthrough names `src` as the folder to review; the mock agent never reads it.
    std::fs::create_dir_all(root.join("src")).expect("create src");
    let release = root.join("target/release");
    link(&agentprism_binary(), &release.join("agentprism"));
    link(
        Path::new(env!("CARGO_BIN_EXE_agentprism-workflow")),
        &release.join("agentprism-workflow"),
    );
    link(
        &mock_agent_binary(),
        &release.join("examples/mock_acp_agent"),
    );
    let bin = ctx.path("bin");
    link(&agentprism_binary(), &bin.join("agentprism"));
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n\
         [ \"$*\" = 'build --release --bins --examples' ] && exit 0\n\
         echo \"readme test: the README's cargo line is 'cargo $*', not the build this test stands in for\" >&2\n\
         exit 1\n",
    )
    .expect("write cargo");
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod cargo");
    (root, bin)
}

/// Runs one marked block as written and returns its stdout; fails with its trace otherwise.
fn run_block(block: &Marked) -> String {
    // The README registers its own backends: the context's mock entry must not stand in.
    let mut ctx = TestContext::new();
    ctx.env.remove("AGENTPRISM_BACKENDS");
    let (root, bin) = world(&ctx);
    let path = format!("{}:{}", bin.display(), ctx.env["PATH"]);
    let script: Vec<String> = block
        .body
        .lines()
        .enumerate()
        .map(|(index, line)| checked_line(index + 1, line))
        .collect();
    let child = Command::new("bash")
        .args(["-euxo", "pipefail", "-c", &script.join("\n")])
        .env_clear()
        .envs(&ctx.env)
        .env("PATH", path)
        .current_dir(&root)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bash");
    let finished = finish_child(child, BLOCK_DEADLINE);
    assert!(
        finished.status.success(),
        "the README block after line {} does not run as written ({}):\n{}\nstdout:\n{}\nstderr:\n{}",
        block.line,
        finished.status,
        block.body,
        finished.stdout,
        finished.stderr
    );
    finished.stdout
}

#[test]
fn the_readme_names_its_runnable_blocks() {
    let blocks = marked_blocks(&readme());
    let runnable = blocks.iter().filter(|block| block.file.is_none()).count();
    assert!(
        runnable >= 2,
        "the first run and the walkthrough are marked: {blocks:#?}"
    );
}

#[test]
fn the_first_run_finishes_against_the_mock_in_two_commands() {
    let blocks = marked_blocks(&readme());
    let first = blocks
        .iter()
        .find(|block| block.file.is_none())
        .expect("a runnable block");
    let commands = first
        .body
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .count();
    assert_eq!(commands, 2, "two commands:\n{}", first.body);
    let stdout = run_block(first);
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("the first run prints its result JSON ({error}):\n{stdout}")
    });
    assert!(
        result["summary"].is_string(),
        "the sample's result has its summary: {result}"
    );
}

#[test]
fn every_runnable_readme_block_runs_as_written() {
    // The first one is run, and its result read, by the test above.
    for block in marked_blocks(&readme())
        .iter()
        .filter(|block| block.file.is_none())
        .skip(1)
    {
        run_block(block);
    }
}

#[test]
fn every_script_the_readme_shows_is_the_file_it_names() {
    let blocks = marked_blocks(&readme());
    let files: Vec<&Marked> = blocks.iter().filter(|block| block.file.is_some()).collect();
    assert!(!files.is_empty(), "the walkthrough's script is marked");
    for block in files {
        let path = block.file.as_deref().expect("a file block");
        let text = std::fs::read_to_string(repository().join(path))
            .unwrap_or_else(|error| panic!("README line {}: {path}: {error}", block.line));
        assert_eq!(
            block.body, text,
            "README line {}: the block is not {path} as it is",
            block.line
        );
    }
}

#[test]
fn an_exit_comment_checks_the_exit_code() {
    let line = checked_line(3, "false   # exits 1: the reason");
    let ok = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &line])
        .status()
        .expect("bash");
    assert!(ok.success(), "{line}");
    let wrong = checked_line(3, "true   # exits 3");
    let refused = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &wrong])
        .stderr(Stdio::null())
        .status()
        .expect("bash");
    assert!(!refused.success(), "{wrong}");
}
