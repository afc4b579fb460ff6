//! Secrets from files through the real binary (docs/serve.md "Secrets"): the pack key and the
//! bearer token taken from a systemd credentials folder and from `*_FILE`, the store location
//! from a file, none of them or the way to them inherited by an agent, and every ambiguous or
//! unsafe source refused at start-up without echoing the secret.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::serve::{Client, Served, copy_folder, fixtures};
use crate::support::context::TestContext;

const KEY: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const TOKEN: &str = "file-token-6d0b2e91c4";

fn secret_file(path: &Path, text: &str, mode: u32) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

/// A workflow whose agent answers with the variables it inherited.
fn write_inherit_workflow(ctx: &TestContext, folder: &str) {
    ctx.write(
        &format!("{folder}/inherit.js"),
        "export const meta = { name: \"inherit\", description: \"What an agent inherits\", model: \"mock\" };\n\
         return await agent(\"@mock env MHL_SERVE_TOKEN MHL_SERVE_TOKEN_FILE MHL_SERVE_WORKFLOWS_KEY MHL_SERVE_WORKFLOWS_KEY_FILE CREDENTIALS_DIRECTORY\");\n",
    );
}

#[test]
fn the_key_and_the_token_come_from_files_and_credentials_and_never_reach_an_agent() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    write_inherit_workflow(&ctx, "workflows");
    let key_file = secret_file(&ctx.path("secrets/key"), &format!("{KEY}\n"), 0o600);
    let out = ctx.path("out/workflows.dmpk");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let (code, stderr) = run_with(
        &ctx,
        &[
            "pack",
            folder.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &[("MHL_SERVE_WORKFLOWS_KEY_FILE", key_file.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{stderr}");
    agentprism::pack::open(
        &std::fs::read(&out).unwrap(),
        &agentprism::pack::PackKey::parse(KEY).unwrap(),
    )
    .expect("the pack is sealed with the key of the file");

    let credentials = ctx.path("credentials");
    secret_file(&credentials.join("MHL_SERVE_TOKEN"), TOKEN, 0o400);
    secret_file(&credentials.join("MHL_SERVE_WORKFLOWS_KEY"), KEY, 0o400);
    let site = ctx.path("site");
    std::fs::create_dir_all(&site).unwrap();
    let served_ctx = ctx.set("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap());
    let served = Served::start(
        &served_ctx,
        &site,
        &["--workflows-pack", out.to_str().unwrap()],
    );
    let without = Client::stateless(served.address, &[]);
    assert_eq!(without.send("tools/list", json!({})).reply.status, 401);
    let bearer = format!("Bearer {TOKEN}");
    let client = Client::legacy(served.address, &[("Authorization", &bearer)]);
    let answer = client.tool("inherit", json!({}));
    let inherited: Value = serde_json::from_str(
        answer["structuredContent"]["result"]
            .as_str()
            .unwrap_or("null"),
    )
    .unwrap_or(Value::Null);
    assert_eq!(
        inherited,
        json!({
            "MHL_SERVE_TOKEN": null, "MHL_SERVE_TOKEN_FILE": null, "MHL_SERVE_WORKFLOWS_KEY": null,
            "MHL_SERVE_WORKFLOWS_KEY_FILE": null, "CREDENTIALS_DIRECTORY": null
        }),
        "{answer}"
    );
    let stopped = served.stop();
    assert!(!stopped.stderr.contains(TOKEN), "stderr shows the token");
    assert!(!stopped.stderr.contains(KEY), "stderr shows the key");
}

#[test]
fn the_store_location_comes_from_a_file() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let root = ctx.path("shared-store");
    let location = secret_file(&ctx.path("secrets/store"), root.to_str().unwrap(), 0o600);
    let served_ctx = ctx.set("MHL_SERVE_STORE_FILE", location.to_str().unwrap());
    let served = Served::start(&served_ctx, &folder, &[]);
    let client = served.stateless();
    let run_id = client.start("echo", json!({"text": "kept"}));
    client.wait_state(&run_id, "completed");
    let _ = served.stop();
    let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the store named by the file was created");
    assert!(
        std::fs::read_dir(&root).unwrap().next().is_some(),
        "the run was kept in the store the file names"
    );
}

/// `agentprism args...` with `vars` added to the context's environment: its exit code and stderr.
fn run_with(ctx: &TestContext, args: &[&str], vars: &[(&str, &str)]) -> (i32, String) {
    let mut command = ctx.command(args);
    command.envs(vars.iter().copied());
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentprism");
    let finished = crate::support::context::finish_child(child, crate::support::context::DEADLINE);
    (finished.code(), finished.stderr.clone())
}

#[test]
fn a_secret_given_twice_or_open_to_others_is_refused_without_echoing_it() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let dir = folder.to_str().unwrap();
    let token_file = secret_file(&ctx.path("secrets/token"), TOKEN, 0o600);
    let (code, stderr) = run_with(
        &ctx,
        &["serve", dir, "--http", "127.0.0.1:0"],
        &[
            ("MHL_SERVE_TOKEN", "another-token-from-the-variable"),
            ("MHL_SERVE_TOKEN_FILE", token_file.to_str().unwrap()),
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("MHL_SERVE_TOKEN is given twice")
            && stderr.contains("MHL_SERVE_TOKEN_FILE"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(TOKEN) && !stderr.contains("another-token"),
        "{stderr}"
    );

    let open = secret_file(&ctx.path("secrets/open"), TOKEN, 0o644);
    let (code, stderr) = run_with(
        &ctx,
        &["serve", dir, "--http", "127.0.0.1:0"],
        &[("MHL_SERVE_TOKEN_FILE", open.to_str().unwrap())],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("other users (mode 0644)"), "{stderr}");
    assert!(!stderr.contains(TOKEN), "{stderr}");

    let store = secret_file(&ctx.path("secrets/store"), "/tmp/unused-store", 0o600);
    let state = ctx.path("serve-state");
    let (code, stderr) = run_with(
        &ctx,
        &["serve", dir, "--state-dir", state.to_str().unwrap()],
        &[("MHL_SERVE_STORE_FILE", store.to_str().unwrap())],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--state-dir name two different stores"),
        "{stderr}"
    );
    assert!(!state.exists(), "a refused start made its state folder");

    let credentials = ctx.path("credentials");
    secret_file(&credentials.join("MHL_SERVE_WORKFLOWS_KEY"), KEY, 0o400);
    let out = ctx.path("out.dmpk");
    let (code, stderr) = run_with(
        &ctx,
        &["pack", dir, "-o", out.to_str().unwrap()],
        &[
            ("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap()),
            ("MHL_SERVE_WORKFLOWS_KEY", KEY),
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("MHL_SERVE_WORKFLOWS_KEY is given twice"),
        "{stderr}"
    );
    assert!(!stderr.contains(KEY), "{stderr}");
    assert!(!out.exists(), "a refused pack wrote its file");
}
