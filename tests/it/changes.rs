//! `agentprism changes` (the list and `--apply`), and the isolated calls' outcomes in
//! `status` and a foreground run's final summary, through the real binary. Each run here is
//! a real run of the mock agent in a real git repository; its call rows then get the
//! `changes` an isolated call records (and the run its workspace base) written into its
//! store, beside real branches made with git commands, so `--apply` merges real commits and
//! the checks read the real repository.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::context::TestContext;

/// Three isolated calls (one adds a file, one edits a line the project's branch edits too,
/// one changes nothing), a call in the shared tree, then a checkpoint so that a resume can
/// finish the run.
const SCRIPT: &str =
    "export const meta = { name: 'iso', description: 'isolated calls', model: 'mock' };
const a = await agent('one', {label: 'add'});
const b = await agent('two', {label: 'edit'});
const c = await agent('three', {label: 'idle'});
const d = await agent('four', {label: 'plain'});
const ok = await checkpoint('keep them?');
return {a, b, c, d, ok};
";

/// Runs git in `dir` with the test's environment and a fixed identity; answers its stdout.
pub(crate) fn git(ctx: &TestContext, dir: &Path, args: &[&str]) -> String {
    let output = git_output(ctx, dir, args);
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn git_output(ctx: &TestContext, dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .envs(&ctx.env)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "tester")
        .env("GIT_AUTHOR_EMAIL", "tester@localhost")
        .env("GIT_COMMITTER_NAME", "tester")
        .env("GIT_COMMITTER_EMAIL", "tester@localhost")
        .output()
        .expect("run git")
}

/// The repository, the run and the commits the checks compare against.
struct Fixture {
    ctx: TestContext,
    run_id: String,
    base: String,
    /// The heads of the `add` and `edit` branches.
    added: String,
    edited: String,
    /// The project's branch after its own edit of the line `edit` changes.
    main: String,
}

impl Fixture {
    /// The project is a repository with one commit; the run pauses at its checkpoint; then the
    /// branches are made and the rows written as the engine records isolated calls.
    fn new() -> Fixture {
        let ctx = TestContext::new();
        let project = ctx.project();
        git(&ctx, &project, &["init", "-q", "-b", "main"]);
        std::fs::write(project.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        git(&ctx, &project, &["add", "a.txt"]);
        git(&ctx, &project, &["commit", "-q", "-m", "base"]);
        let base = git(&ctx, &project, &["rev-parse", "HEAD"]);
        let script = ctx.write("wf.js", SCRIPT);
        let paused = ctx.run(&["run", script.to_str().unwrap()]);
        assert_eq!(paused.code(), 3, "{}", paused.stderr);
        let run_id = paused.run_id();

        let branch = |label: &str| format!("agentprism/{run_id}/{}-{label}", index_of(label));
        git(
            &ctx,
            &project,
            &["checkout", "-q", "-b", &branch("add"), &base],
        );
        std::fs::write(project.join("b.txt"), "new\n").unwrap();
        git(&ctx, &project, &["add", "b.txt"]);
        git(&ctx, &project, &["commit", "-q", "-m", "add"]);
        let added = git(&ctx, &project, &["rev-parse", "HEAD"]);
        git(
            &ctx,
            &project,
            &["checkout", "-q", "-b", &branch("edit"), &base],
        );
        std::fs::write(project.join("a.txt"), "one\nTWO\nthree\n").unwrap();
        git(&ctx, &project, &["commit", "-q", "-am", "edit"]);
        let edited = git(&ctx, &project, &["rev-parse", "HEAD"]);
        git(&ctx, &project, &["checkout", "-q", "main"]);
        std::fs::write(project.join("a.txt"), "one\n2\nthree\n").unwrap();
        git(
            &ctx,
            &project,
            &["commit", "-q", "-am", "the user's own edit"],
        );
        let main = git(&ctx, &project, &["rev-parse", "HEAD"]);

        let fixture = Fixture {
            ctx,
            run_id,
            base,
            added,
            edited,
            main,
        };
        fixture.record();
        fixture
    }

    fn project(&self) -> std::path::PathBuf {
        self.ctx.project()
    }

    fn branch(&self, label: &str) -> String {
        format!("agentprism/{}/{}-{label}", self.run_id, index_of(label))
    }

    /// Writes the workspace base on the run and each isolated call's changes on its row.
    fn record(&self) {
        let store = agentprism::store::SqliteStore::open(&self.ctx.state()).expect("store");
        let database = rusqlite::Connection::open(store.database_path()).expect("open");
        let project = self.project().canonicalize().unwrap();
        let base = json!({"repository": project, "commit": self.base, "dirty": true});
        let changed = database
            .execute(
                "UPDATE runs SET workspace = ?1 WHERE run_id = ?2",
                [base.to_string(), self.run_id.clone()],
            )
            .expect("the run's base");
        assert_eq!(changed, 1);
        let changes = [
            (
                0,
                json!({"branch": self.branch("add"), "baseCommit": self.base,
                "headCommit": self.added, "filesChanged": 1, "insertions": 1, "deletions": 0}),
            ),
            (
                1,
                json!({"branch": self.branch("edit"), "baseCommit": self.base,
                "headCommit": self.edited, "filesChanged": 1, "insertions": 1, "deletions": 1}),
            ),
            (
                2,
                json!({"branch": null, "baseCommit": self.base,
                "headCommit": self.base, "filesChanged": 0, "insertions": 0, "deletions": 0}),
            ),
        ];
        for (index, changes) in changes {
            let changed = database
                .execute(
                    "UPDATE calls SET changes = ?1
                     WHERE run_key = (SELECT run_key FROM runs WHERE run_id = ?2)
                       AND call_index = ?3",
                    rusqlite::params![changes.to_string(), self.run_id, index],
                )
                .expect("a call's changes");
            assert_eq!(changed, 1, "call {index} has one row");
        }
    }

    fn head(&self) -> String {
        git(&self.ctx, &self.project(), &["rev-parse", "HEAD"])
    }

    fn porcelain(&self) -> String {
        git(&self.ctx, &self.project(), &["status", "--porcelain"])
    }
}

fn index_of(label: &str) -> u32 {
    match label {
        "add" => 0,
        "edit" => 1,
        _ => panic!("no branch for {label}"),
    }
}

fn short(commit: &str) -> &str {
    &commit[..7]
}

#[test]
fn changes_lists_each_isolated_call_with_its_branch_and_stat() {
    let f = Fixture::new();
    let listed = f.ctx.run(&["changes", &f.run_id]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "one line per isolated call:\n{}",
        listed.stdout
    );
    assert_eq!(
        lines[0],
        format!(
            "  #0    add                      {}  1 file changed, +1 -0  {}..{}",
            f.branch("add"),
            short(&f.base),
            short(&f.added)
        )
    );
    assert_eq!(
        lines[1],
        format!(
            "  #1    edit                     {}  1 file changed, +1 -1  {}..{}",
            f.branch("edit"),
            short(&f.base),
            short(&f.edited)
        )
    );
    assert_eq!(
        lines[2],
        format!(
            "  #2    idle                     no changes (base {})",
            short(&f.base)
        )
    );
    assert!(
        !listed.stdout.contains("plain"),
        "a call in the shared tree is not listed"
    );
    assert!(
        listed.stderr.contains(&format!(
            "isolated from commit {} of {} (the tree had uncommitted changes then",
            short(&f.base),
            f.project().canonicalize().unwrap().display()
        )),
        "{}",
        listed.stderr
    );
    assert!(
        listed
            .stderr
            .contains(&format!("agentprism changes {} --apply <INDEX>", f.run_id)),
        "{}",
        listed.stderr
    );

    let json_listed = f.ctx.run(&["changes", &f.run_id, "--json"]);
    assert_eq!(json_listed.code(), 0, "{}", json_listed.stderr);
    let document = json_listed.json();
    assert_eq!(document["runId"], f.run_id);
    assert_eq!(document["workspace"]["commit"], f.base);
    assert_eq!(document["workspace"]["dirty"], true);
    let calls = document["calls"].as_array().unwrap();
    let indexes: Vec<&Value> = calls.iter().map(|c| &c["index"]).collect();
    assert_eq!(indexes, [&json!(0), &json!(1), &json!(2)]);
    assert_eq!(calls[0]["label"], "add");
    assert_eq!(calls[0]["changes"]["branch"], f.branch("add"));
    assert_eq!(calls[0]["changes"]["headCommit"], f.added);
    assert_eq!(calls[2]["changes"]["branch"], Value::Null);
}

#[test]
fn status_shows_the_base_and_each_isolated_calls_changes() {
    let f = Fixture::new();
    let status = f.ctx.status(&f.run_id);
    assert_eq!(status["workspace"]["commit"], f.base);
    assert_eq!(status["workspace"]["dirty"], true);
    let calls = status["calls"].as_array().unwrap();
    assert_eq!(calls[0]["changes"]["branch"], f.branch("add"));
    assert_eq!(calls[0]["changes"]["filesChanged"], 1);
    assert_eq!(calls[1]["changes"]["deletions"], 1);
    assert_eq!(calls[2]["changes"]["branch"], Value::Null);
    assert!(
        calls[3].get("changes").is_none(),
        "a call in the shared tree has no changes: {}",
        calls[3]
    );

    let text = f.ctx.run(&["status", &f.run_id]);
    assert_eq!(text.code(), 0, "{}", text.stderr);
    assert!(
        text.stdout.contains(&format!(
            "isolated calls start from commit {} of ",
            short(&f.base)
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!(
            "        {}  1 file changed, +1 -0  {}..{}",
            f.branch("add"),
            short(&f.base),
            short(&f.added)
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains(&format!("        no changes (base {})", short(&f.base))),
        "{}",
        text.stdout
    );
}

#[test]
fn a_conflicting_apply_changes_nothing_and_a_clean_one_merges() {
    let f = Fixture::new();
    assert_eq!(f.porcelain(), "", "the run left the tree clean");

    let conflicting = f.ctx.run(&["changes", &f.run_id, "--apply", "1"]);
    assert_eq!(conflicting.code(), 1, "{}", conflicting.stderr);
    assert!(
        conflicting
            .stderr
            .contains("nothing was changed. Conflicting files:\n  a.txt\n"),
        "{}",
        conflicting.stderr
    );
    assert_eq!(f.porcelain(), "", "no half-applied tree");
    assert_eq!(f.head(), f.main, "HEAD is where it was");
    assert!(
        !f.project().join(".git/MERGE_HEAD").exists(),
        "no merge is left under way"
    );
    assert_eq!(
        std::fs::read_to_string(f.project().join("a.txt")).unwrap(),
        "one\n2\nthree\n"
    );

    let clean = f.ctx.run(&["changes", &f.run_id, "--apply", "0"]);
    assert_eq!(clean.code(), 0, "{}", clean.stderr);
    assert!(
        clean.stdout.contains(&format!(
            "applied call 0's branch {} to main of ",
            f.branch("add")
        )),
        "{}",
        clean.stdout
    );
    assert_eq!(
        std::fs::read_to_string(f.project().join("b.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(f.porcelain(), "");
    assert_ne!(f.head(), f.main);
    for commit in [&f.added, &f.main] {
        let ancestor = git_output(
            &f.ctx,
            &f.project(),
            &["merge-base", "--is-ancestor", commit, "HEAD"],
        );
        assert!(ancestor.status.success(), "{commit} is in the merged HEAD");
    }

    let again = f.ctx.run(&["changes", &f.run_id, "--apply", "0"]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("is already in main"),
        "{}",
        again.stderr
    );
}

#[test]
fn apply_refuses_what_it_cannot_apply_and_names_what_is_needed() {
    let f = Fixture::new();
    let refused = |index: &str, expected: &str| {
        let before = f.head();
        let answer = f.ctx.run(&["changes", &f.run_id, "--apply", index]);
        assert_eq!(answer.code(), 2, "--apply {index}: {}", answer.stderr);
        assert!(
            answer.stderr.contains(expected),
            "--apply {index}: {}",
            answer.stderr
        );
        assert_eq!(f.head(), before, "--apply {index} moved HEAD");
    };
    refused("2", "changed nothing; there is no branch to apply");
    refused("3", "did not run isolated, so it has no branch to apply");
    refused("9", &format!("run {} has no agent call 9", f.run_id));

    std::fs::write(f.project().join("a.txt"), "mine, not committed\n").unwrap();
    refused(
        "0",
        "has uncommitted changes to 1 tracked file(s) (a.txt): commit or stash them first",
    );
    assert_eq!(
        std::fs::read_to_string(f.project().join("a.txt")).unwrap(),
        "mine, not committed\n",
        "the user's change stays"
    );
    git(&f.ctx, &f.project(), &["checkout", "--", "a.txt"]);

    // An untracked file the branch would overwrite: git refuses the merge before starting,
    // its message says why, and nothing changes.
    std::fs::write(f.project().join("b.txt"), "the user's own b\n").unwrap();
    let overwrite = f.ctx.run(&["changes", &f.run_id, "--apply", "0"]);
    assert_eq!(overwrite.code(), 1, "{}", overwrite.stderr);
    assert!(
        overwrite.stderr.contains("b.txt") && overwrite.stderr.contains("untracked"),
        "{}",
        overwrite.stderr
    );
    assert_eq!(f.head(), f.main);
    assert_eq!(
        std::fs::read_to_string(f.project().join("b.txt")).unwrap(),
        "the user's own b\n"
    );
    std::fs::remove_file(f.project().join("b.txt")).unwrap();

    git(&f.ctx, &f.project(), &["checkout", "-q", "--detach"]);
    refused("0", "is detached: check out the branch to apply onto first");
    git(&f.ctx, &f.project(), &["checkout", "-q", "main"]);

    git(
        &f.ctx,
        &f.project(),
        &["branch", "-q", "-D", &f.branch("add")],
    );
    refused(
        "0",
        &format!(
            "branch {} no longer exists in {}; it held commit {}",
            f.branch("add"),
            f.project().canonicalize().unwrap().display(),
            f.added
        ),
    );
    assert_eq!(f.porcelain(), "");
    assert!(!f.project().join("b.txt").exists());
}

#[test]
fn the_final_summary_of_a_resumed_run_lists_its_branches() {
    let f = Fixture::new();
    // The resumed generation replays the isolated calls: their rows carry the changes on.
    let done = f.ctx.run(&["resume", &f.run_id, "--reply", "4=true"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(
        done.stderr
            .contains("2 of 3 isolated agent calls changed files:\n"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr.contains(&format!(
            "  #0    add                      {}  1 file changed, +1 -0",
            f.branch("add")
        )),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains(&format!("agentprism changes {} --apply <INDEX>", f.run_id)),
        "{}",
        done.stderr
    );
    let listed = f.ctx.run(&["changes", &f.run_id, "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    assert_eq!(listed.json()["calls"].as_array().unwrap().len(), 3);
}

#[test]
fn a_run_without_isolated_calls_says_so_and_an_unknown_run_is_refused() {
    let ctx = TestContext::new();
    let script = ctx.write(
        "wf.js",
        "export const meta = { name: 'plain', description: 'no isolation', model: 'mock' };\nreturn await agent('hi');\n",
    );
    let done = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(
        !done.stderr.contains("isolated"),
        "no summary of isolated calls: {}",
        done.stderr
    );
    let run_id = done.run_id();
    let listed = ctx.run(&["changes", &run_id]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    assert_eq!(listed.stdout, "");
    assert!(
        listed
            .stderr
            .contains(&format!("run {run_id} has no isolated calls")),
        "{}",
        listed.stderr
    );
    let as_json = ctx.run(&["changes", &run_id, "--json"]);
    assert_eq!(
        as_json.json(),
        json!({"runId": run_id, "workspace": null, "calls": []})
    );
    let status = ctx.status(&run_id);
    assert!(status.get("workspace").is_none(), "{status}");
    assert!(status["calls"][0].get("changes").is_none(), "{status}");
    let apply = ctx.run(&["changes", &run_id, "--apply", "0"]);
    assert_eq!(apply.code(), 2);
    assert!(
        apply.stderr.contains("did not run isolated"),
        "{}",
        apply.stderr
    );

    let unknown = ctx.run(&["changes", "lq3k2m3-nope00"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.stderr);
    assert!(
        unknown
            .stderr
            .contains("No workflow run found for runId \"lq3k2m3-nope00\""),
        "{}",
        unknown.stderr
    );
    let malformed = ctx.run(&["changes", "not a run"]);
    assert_eq!(malformed.code(), 2, "{}", malformed.stderr);
}

/// The `workflow` tool's `status` over `agentprism serve --stdio`: the structured document
/// carries the base and each isolated call's changes, and the text shows them.
#[test]
fn the_mcp_status_shows_the_base_and_each_isolated_calls_changes() {
    let f = Fixture::new();
    let answer = mcp_status(&f.ctx, &f.run_id);
    let document = &answer["structuredContent"];
    assert_eq!(document["workspace"]["commit"], f.base, "{answer}");
    assert_eq!(document["calls"][0]["changes"]["branch"], f.branch("add"));
    assert_eq!(document["calls"][1]["changes"]["headCommit"], f.edited);
    assert!(document["calls"][3].get("changes").is_none());
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!(
            "Isolated calls start from commit {} of ",
            short(&f.base)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "    changes: {}  1 file changed, +1 -1  {}..{}\n",
            f.branch("edit"),
            short(&f.base),
            short(&f.edited)
        )),
        "{text}"
    );
}

/// One `workflow` `status` call in a fresh stdio session; answers the call's result.
fn mcp_status(ctx: &TestContext, run_id: &str) -> Value {
    use std::io::{BufRead, BufReader, Write};
    let mut child = ctx
        .command(&["serve", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve --stdio");
    let mut input = child.stdin.take().unwrap();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "changes-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "workflow", "arguments": {"action": "status", "runId": run_id}}}),
    ];
    for request in requests {
        writeln!(input, "{request}").expect("write a request");
    }
    let output = child.stdout.take().unwrap();
    let (lines, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let result = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = answers
            .recv_timeout(left)
            .expect("an answer to the status call");
        let message: Value = serde_json::from_str(&line).expect("a JSON line");
        if message["id"] == 2 {
            break message["result"].clone();
        }
    };
    drop(input);
    let _ = child.kill();
    let _ = child.wait();
    result
}
