//! Saved workflows through the real binary: `workflows` listing the project's folder, the
//! user's folder (under the test's own HOME) and what shadows what; `run` and `validate` by
//! name; `workflow(name)` inside a script; `workflows new`, `show` and `save`, and saving
//! refusing symbolic links.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::context::TestContext;

const MODEL_ARGS: &str = r#"{"model":"mock"}"#;

fn workflow(name: &str, description: &str, body: &str) -> String {
    format!(
        "export const meta = {{ name: '{name}', description: '{description}', model: 'mock' }};\n{body}\n"
    )
}

fn project_folder(ctx: &TestContext) -> PathBuf {
    std::fs::canonicalize(ctx.project())
        .unwrap()
        .join(".agentprism/workflows")
}

/// The default user folder under the test's HOME (no `XDG_CONFIG_HOME` in its environment).
fn user_folder(ctx: &TestContext) -> PathBuf {
    ctx.path("home/.config/agentprism/workflows")
}

fn put(folder: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(folder).unwrap();
    let path = folder.join(format!("{name}.js"));
    std::fs::write(&path, text).unwrap();
    path
}

fn entry<'a>(listing: &'a Value, name: &str, origin: &str) -> &'a Value {
    listing
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["name"] == name && item["origin"] == origin)
        .unwrap_or_else(|| panic!("no {origin} {name} in {listing:#}"))
}

#[test]
fn the_listing_shows_origins_what_is_shadowed_and_broken_files_with_their_error() {
    let ctx = TestContext::new();
    let project = project_folder(&ctx);
    let user = user_folder(&ctx);
    let winner = put(
        &project,
        "same",
        &workflow("same", "from the project", "return 1;"),
    );
    put(
        &user,
        "same",
        &workflow("same", "from the user", "return 2;"),
    );
    put(&user, "helper", &workflow("helper", "helps", "return 3;"));
    put(
        &user,
        "broken",
        "export const meta = { name: 'broken', description: 'b' };\nreturn (;\n",
    );

    let listed = ctx.run(&["workflows", "--json"]);
    assert_eq!(listed.code(), 1, "a broken file exits 1: {}", listed.stderr);
    let listing = listed.json();
    let same = entry(&listing, "same", "project");
    assert_eq!(same["path"], json!(winner));
    assert_eq!(same["description"], "from the project");
    assert_eq!(same["shadowedBy"], Value::Null);
    assert_eq!(same["error"], Value::Null);
    assert_eq!(entry(&listing, "same", "user")["shadowedBy"], "project");
    assert_eq!(entry(&listing, "helper", "user")["shadowedBy"], Value::Null);
    let broken = entry(&listing, "broken", "user");
    assert!(
        broken["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{broken}"
    );
    assert_eq!(broken["description"], Value::Null);

    let text = ctx.run(&["workflows"]);
    assert_eq!(text.code(), 1);
    assert!(
        text.stdout.contains("same (user)  shadowed by project"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("broken (user)  [invalid: "),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(&format!("path: {}", winner.display())));

    std::fs::remove_file(user.join("broken.js")).unwrap();
    let clean = ctx.run(&["workflows", "list", "--json"]);
    assert_eq!(clean.code(), 0, "{}", clean.stderr);
}

#[test]
fn a_name_runs_its_saved_file_and_paths_still_run_files() {
    let ctx = TestContext::new();
    let saved = put(
        &project_folder(&ctx),
        "greet",
        &workflow("greet", "greets", "return await agent(`hi ${args.who}`);"),
    );
    let finished = ctx.run(&["run", "greet", "--args", r#"{"who":"you"}"#]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert_eq!(finished.json(), json!("ECHO: hi you"));
    let status = ctx.status(&finished.run_id());
    assert_eq!(status["scriptPath"], json!(saved), "{status:#}");

    ctx.write("project/x.js", &workflow("x", "a file", "return 'file x';"));
    for given in ["./x.js", "x.js"] {
        let file = ctx.run(&["run", given]);
        assert_eq!(file.code(), 0, "{given}: {}", file.stderr);
        assert_eq!(file.json(), json!("file x"));
    }
    // An existing file runs as a file even without `/` or `.js`.
    ctx.write(
        "project/plain",
        &workflow("plain", "no ending", "return 'plain';"),
    );
    let plain = ctx.run(&["run", "plain"]);
    assert_eq!(plain.code(), 0, "{}", plain.stderr);
    assert_eq!(plain.json(), json!("plain"));
}

#[test]
fn an_unknown_name_lists_the_names_that_exist() {
    let ctx = TestContext::new();
    put(
        &project_folder(&ctx),
        "greet",
        &workflow("greet", "g", "return 1;"),
    );
    put(
        &user_folder(&ctx),
        "mine",
        &workflow("mine", "m", "return 1;"),
    );
    let run = ctx.run(&["run", "nothere"]);
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("no workflow named \"nothere\"")
            && run.stderr.contains("project: greet")
            && run.stderr.contains("user: mine"),
        "{}",
        run.stderr
    );
    let validate = ctx.run(&["validate", "nothere"]);
    assert_eq!(validate.code(), 3, "{}", validate.stderr);
    assert!(
        validate.stderr.contains("project: greet"),
        "{}",
        validate.stderr
    );
    let runs = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(runs.json(), json!([]), "nothing was stored");
}

#[test]
fn a_script_finds_a_user_workflow_by_name() {
    let ctx = TestContext::new();
    put(
        &user_folder(&ctx),
        "helper",
        &workflow(
            "helper",
            "helps",
            "return { doubled: args.n * 2, said: await agent('inner') };",
        ),
    );
    let main = ctx.write(
        "project/main.js",
        &workflow(
            "main",
            "calls helper",
            "return await workflow('helper', { n: 21 });",
        ),
    );
    let finished = ctx.run(&["run", main.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert_eq!(
        finished.json(),
        json!({"doubled": 42, "said": "ECHO: inner"})
    );
}

#[test]
fn a_new_workflow_validates_and_runs_as_written_and_is_not_overwritten_unasked() {
    let ctx = TestContext::new();
    let made = ctx.run(&["workflows", "new", "starter"]);
    assert_eq!(made.code(), 0, "{}", made.stderr);
    let path = project_folder(&ctx).join("starter.js");
    assert_eq!(made.stdout.trim(), path.display().to_string());
    let validated = ctx.run(&["validate", "starter", "--args", MODEL_ARGS]);
    assert_eq!(validated.code(), 0, "{}", validated.stderr);
    assert_eq!(validated.json()["dryRunCalls"], 1);
    let ran = ctx.run(&["run", "starter", "--args", MODEL_ARGS]);
    assert_eq!(ran.code(), 0, "{}", ran.stderr);
    assert!(ran.json()["answer"].is_string());

    std::fs::write(&path, "edited").unwrap();
    let again = ctx.run(&["workflows", "new", "starter"]);
    assert_eq!(again.code(), 2);
    assert!(again.stderr.contains("--force"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "edited");
    let forced = ctx.run(&["workflows", "new", "starter", "--force"]);
    assert_eq!(forced.code(), 0, "{}", forced.stderr);
    assert_ne!(std::fs::read_to_string(&path).unwrap(), "edited");

    let user = ctx.run(&["workflows", "new", "private", "--user"]);
    assert_eq!(user.code(), 0, "{}", user.stderr);
    assert!(user_folder(&ctx).join("private.js").is_file());
}

#[test]
fn show_prints_the_winning_source_and_copy_writes_it_where_asked() {
    let ctx = TestContext::new();
    let text = workflow("mine", "from the user", "return 'user';");
    put(&user_folder(&ctx), "mine", &text);
    let shown = ctx.run(&["workflows", "show", "mine"]);
    assert_eq!(shown.code(), 0, "{}", shown.stderr);
    assert_eq!(shown.stdout, text);
    let copied = ctx.run(&["workflows", "show", "mine", "--copy"]);
    assert_eq!(copied.code(), 0, "{}", copied.stderr);
    let copy = project_folder(&ctx).join("mine.js");
    assert_eq!(copied.stdout.trim(), copy.display().to_string());
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), text);
    let unknown = ctx.run(&["workflows", "show", "nothere"]);
    assert_eq!(unknown.code(), 2);
    assert!(unknown.stderr.contains("mine"), "{}", unknown.stderr);
}

#[test]
fn save_writes_the_script_a_run_executed() {
    let ctx = TestContext::new();
    let text = workflow("once", "ran once", "return await agent('once');");
    let script = ctx.write("project/once.js", &text);
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let run_id = finished.run_id();
    let saved = ctx.run(&["workflows", "save", &run_id, "kept"]);
    assert_eq!(saved.code(), 0, "{}", saved.stderr);
    let path = project_folder(&ctx).join("kept.js");
    assert_eq!(saved.stdout.trim(), path.display().to_string());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let user = ctx.run(&["workflows", "save", &run_id, "kept", "--user"]);
    assert_eq!(user.code(), 0, "{}", user.stderr);
    assert_eq!(
        std::fs::read_to_string(user_folder(&ctx).join("kept.js")).unwrap(),
        text
    );
    let by_name = ctx.run(&["run", "kept"]);
    assert_eq!(by_name.code(), 0, "{}", by_name.stderr);
    assert_eq!(by_name.json(), json!("ECHO: once"));
    assert!(!saved.stderr.contains("meta.files"), "{}", saved.stderr);
    let listed = ctx.run(&["workflows"]);
    assert!(
        listed
            .stdout
            .contains(r#"note: meta.name is "once"; it runs by its file name "kept""#),
        "{}",
        listed.stdout
    );

    ctx.write("project/notes/brief.md", "the brief");
    let with_files = ctx.write(
        "project/with-files.js",
        "export const meta = { name: 'with-files', description: 'w', model: 'mock', files: ['notes/brief.md'] };\nreturn file('notes/brief.md');\n",
    );
    let finished = ctx.run(&["run", with_files.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let warned = ctx.run(&["workflows", "save", &finished.run_id(), "with-files"]);
    assert_eq!(warned.code(), 0, "{}", warned.stderr);
    assert!(
        warned.stderr.contains("warning:") && warned.stderr.contains("notes/brief.md"),
        "{}",
        warned.stderr
    );
    assert!(project_folder(&ctx).join("with-files.js").is_file());
}

#[test]
fn saving_refuses_a_symbolic_link_names_it_and_writes_nothing() {
    let ctx = TestContext::new();
    let script = ctx.write("project/once.js", &workflow("once", "o", "return 1;"));
    let finished = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let run_id = finished.run_id();

    let elsewhere = ctx.path("elsewhere");
    std::fs::create_dir_all(elsewhere.join("workflows")).unwrap();
    let link = std::fs::canonicalize(ctx.project())
        .unwrap()
        .join(".agentprism");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    for args in [
        vec!["workflows", "save", &run_id, "kept", "--force"],
        vec!["workflows", "new", "kept"],
    ] {
        let refused = ctx.run(&args);
        assert_eq!(refused.code(), 2, "{args:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains(&link.display().to_string())
                && refused.stderr.contains("symbolic link"),
            "{args:?}: {}",
            refused.stderr
        );
        assert_eq!(
            std::fs::read_dir(elsewhere.join("workflows"))
                .unwrap()
                .count(),
            0,
            "{args:?} wrote through the link"
        );
    }

    std::fs::remove_file(&link).unwrap();
    let folder = project_folder(&ctx);
    std::fs::create_dir_all(&folder).unwrap();
    let victim = ctx.write("victim.txt", "keep");
    let target = folder.join("kept.js");
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    let refused = ctx.run(&["workflows", "save", &run_id, "kept", "--force"]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&target.display().to_string()),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(std::fs::symlink_metadata(&target).unwrap().is_symlink());
    assert_eq!(
        std::fs::read_dir(&folder).unwrap().count(),
        1,
        "no temporary file left"
    );
}

#[test]
fn save_keeps_the_latest_revision_of_a_script_that_changed_between_resumes() {
    let ctx = TestContext::new();
    let body = |version: &str| {
        workflow(
            "revised",
            "r",
            &format!("await checkpoint('go on?');\nreturn '{version}';"),
        )
    };
    let script = ctx.write("project/revised.js", &body("first"));
    let paused = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    std::fs::write(&script, body("second")).unwrap();
    let resumed = ctx.run(&["resume", &run_id, "--reply", "0=true"]);
    assert_eq!(resumed.code(), 0, "{}", resumed.stderr);
    assert_eq!(resumed.json(), json!("second"));
    std::fs::write(&script, body("third, never run")).unwrap();
    let saved = ctx.run(&["workflows", "save", &run_id, "revised"]);
    assert_eq!(saved.code(), 0, "{}", saved.stderr);
    assert_eq!(
        std::fs::read_to_string(project_folder(&ctx).join("revised.js")).unwrap(),
        body("second")
    );
}
