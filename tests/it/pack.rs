//! The encrypted workflows pack through the real binary (docs/pack.md): `agentprism pack`
//! (its key, what it packs, what it refuses to write), a packed folder served by `serve
//! --workflows-pack` answering as the folder does, no pack content or key anywhere on disk
//! or in an agent's or a script's view, every corruption refused at start-up with its own
//! message before anything listens, and a resume refused once the pack's script changed.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use serde_json::{Value, json};

use crate::serve::{Served, copy_folder, fixtures, serve_refused};
use crate::support::context::TestContext;

const KEY_VARIABLE: &str = "MHL_SERVE_WORKFLOWS_KEY";
/// A fixed key for the tests that need one: bytes 0x11 repeated.
const KEY: &str = "1111111111111111111111111111111111111111111111111111111111111111";

const SCRIPT_MARKER: &str = "PACKMARK-SCRIPT-5d1e9b";
const COMPANION_MARKER: &str = "PACKMARK-COMPANION-a8c4f0";
const PEEK_MARKER: &str = "PACKMARK-PEEK-33b7c2";

/// Adds the marker workflows to a copy of the serve fixtures: one that sends a packed prompt
/// (which asks the mock agent what it inherited) and one that shows what a script can see.
fn write_marked_workflows(ctx: &TestContext, folder: &str) {
    ctx.write(
        &format!("{folder}/secret.js"),
        &format!(
            "// {SCRIPT_MARKER}: this comment exists only in the pack.\n\
             export const meta = {{\n  name: \"secret\",\n  description: \"Ask the agent what it inherited\",\n  \
             model: \"mock\",\n  files: [\"prompts/secret.md\"],\n}};\n\
             const prompt = file(\"prompts/secret.md\");\n\
             const answer = await agent(prompt, {{ label: \"inherited\" }});\n\
             return {{ inherited: answer, promptBytes: prompt.length }};\n"
        ),
    );
    ctx.write(
        &format!("{folder}/prompts/secret.md"),
        &format!(
            "@mock env {KEY_VARIABLE} MHL_SERVE_TOKEN\n{COMPANION_MARKER}: this line exists only in the pack.\n"
        ),
    );
    ctx.write(
        &format!("{folder}/peek.js"),
        &format!(
            "// {PEEK_MARKER}\nexport const meta = {{ name: \"peek\", description: \"What a script sees\" }};\n\
             const env = typeof process === \"object\" && process.env !== undefined ? JSON.stringify(process.env) : null;\n\
             return {{ env, globals: Object.getOwnPropertyNames(globalThis).join(\",\"), cwd: process.cwd() }};\n"
        ),
    );
    ctx.write(&format!("{folder}/.hidden-notes.md"), "never packed");
}

/// `agentprism pack <dir> -o <out> extra...` with `key` in the environment (or none).
fn pack(
    ctx: &TestContext,
    dir: &Path,
    out: &Path,
    key: Option<&str>,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec!["pack", dir.to_str().unwrap(), "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut command = ctx.command(&args);
    command.env_remove(KEY_VARIABLE);
    if let Some(key) = key {
        command.env(KEY_VARIABLE, key);
    }
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentprism pack");
    let finished = crate::support::context::finish_child(child, crate::support::context::DEADLINE);
    (
        finished.code(),
        finished.stdout.clone(),
        finished.stderr.clone(),
    )
}

/// Every file under `dir` that holds one of `needles`, as "needle in path".
fn scan(dir: &Path, needles: &[(String, Vec<u8>)], hits: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            scan(&path, needles, hits);
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).unwrap_or_default();
            for (name, needle) in needles {
                if bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_slice())
                {
                    hits.push(format!("{name} in {}", path.display()));
                }
            }
        }
    }
}

/// The markers, the key and every packed file's whole content (those long enough to mean
/// something), to look for on disk.
fn needles(folder: &Path, key: &str) -> Vec<(String, Vec<u8>)> {
    let mut needles: Vec<(String, Vec<u8>)> = [SCRIPT_MARKER, COMPANION_MARKER, PEEK_MARKER, key]
        .iter()
        .map(|text| ((*text).to_owned(), text.as_bytes().to_vec()))
        .collect();
    let key_bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&key[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    needles.push(("the raw key".into(), key_bytes));
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                files(&entry.path(), out);
            } else {
                out.push(entry.path());
            }
        }
    }
    let mut paths = Vec::new();
    files(folder, &mut paths);
    for path in paths {
        let bytes = std::fs::read(&path).unwrap();
        if bytes.len() >= 24 {
            needles.push((format!("the text of {}", path.display()), bytes));
        }
    }
    needles
}

#[test]
fn a_packed_folder_serves_what_the_folder_serves_and_leaves_nothing_on_disk() {
    let ctx = TestContext::new();
    let tmp = ctx.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let ctx = ctx.set("TMPDIR", tmp.to_str().unwrap());
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    write_marked_workflows(&ctx, "workflows");
    let out = ctx.path("out/workflows.dmpk");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();

    let (code, stdout, stderr) = pack(&ctx, &folder, &out, None, &["--new-key"]);
    assert_eq!(code, 0, "{stderr}");
    let key = stdout.strip_suffix('\n').expect("one line").to_owned();
    assert_eq!(key.len(), 64, "only the key on stdout: {stdout:?}");
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{stdout:?}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let entries = agentprism::pack::open(
        &std::fs::read(&out).unwrap(),
        &agentprism::pack::PackKey::parse(&key).unwrap(),
    )
    .expect("the pack opens with the printed key");
    let paths: Vec<&str> = entries.iter().map(|entry| entry.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "echo.js",
            "gates/approval.js",
            "peek.js",
            "prompts/review.md",
            "prompts/secret.md",
            "review.js",
            "secret.js",
            "slow.js"
        ],
        "sorted, hidden files left out"
    );

    // The folder itself, served by a process of its own (its own HOME, state and TMPDIR).
    let direct_ctx = TestContext::new();
    let direct_folder = copy_folder(&direct_ctx, &folder, "workflows");
    let direct = Served::start(&direct_ctx, &direct_folder, &[]);
    let direct_client = direct.stateless();
    let expected = direct_client.tool("echo", json!({"text": "same answer"}));
    let expected_tools = direct_client.method("tools/list", json!({}));
    drop(direct_client);
    let _ = direct.stop();

    let site = ctx.path("site");
    std::fs::create_dir_all(&site).unwrap();
    let state = ctx.path("serve-state");
    let ctx = ctx.set(KEY_VARIABLE, key.as_str());
    let served = Served::start(
        &ctx,
        &site,
        &[
            "--workflows-pack",
            out.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    let client = served.session(&[]);
    let stateless = served.stateless();
    assert_eq!(stateless.method("tools/list", json!({})), expected_tools);
    assert_eq!(
        stateless.tool("echo", json!({"text": "same answer"})),
        expected
    );

    // An async run whose prompt is a packed companion file, answered by the mock agent with
    // the variables it inherited.
    let run_id = client.start("secret", json!({}));
    let done = client.wait_state(&run_id, "completed");
    let inherited: Value =
        serde_json::from_str(done["result"]["inherited"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(
        inherited,
        json!({KEY_VARIABLE: null, "MHL_SERVE_TOKEN": null}),
        "{done}"
    );
    assert!(
        done["result"]["promptBytes"].as_u64().unwrap() > 40,
        "{done}"
    );
    let peek = client.tool("peek", json!({}));
    let seen = &peek["structuredContent"]["result"];
    assert_eq!(
        seen["cwd"],
        site.canonicalize().unwrap().to_str().unwrap(),
        "{peek}"
    );
    assert!(
        !peek.to_string().contains(&key),
        "a script sees the key: {peek}"
    );

    let needles = needles(&folder, &key);
    // The scan finds what is there: the packed folder itself holds every needle but the key.
    let mut control = Vec::new();
    scan(&folder, &needles, &mut control);
    assert!(
        control.iter().any(|hit| hit.starts_with(SCRIPT_MARKER))
            && control.iter().any(|hit| hit.starts_with(COMPANION_MARKER)),
        "{control:#?}"
    );
    let mut hits = Vec::new();
    for dir in [&state, &tmp, &site] {
        scan(dir, &needles, &mut hits);
    }
    assert!(
        hits.is_empty(),
        "pack content on disk while serving: {hits:#?}"
    );
    let stopped = served.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
    assert!(!stopped.stderr.contains(&key), "{}", stopped.stderr);
    let mut hits = Vec::new();
    for dir in [&state, &tmp, &site] {
        scan(dir, &needles, &mut hits);
    }
    assert!(
        hits.is_empty(),
        "pack content on disk after serving: {hits:#?}"
    );
    let stored = std::fs::read_dir(&state).unwrap().count();
    assert!(stored > 0, "the state folder holds the store");
}

#[test]
fn pack_refuses_a_missing_key_and_a_folder_whose_workflows_do_not_load() {
    let ctx = TestContext::new();
    ctx.write(
        "good/echo.js",
        "export const meta = { name: \"echo\", description: \"d\" };\nreturn 1;\n",
    );
    let out = ctx.path("out.dmpk");
    let (code, stdout, stderr) = pack(&ctx, &ctx.path("good"), &out, None, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("MHL_SERVE_WORKFLOWS_KEY is not set"),
        "{stderr}"
    );
    assert!(stdout.is_empty() && !out.exists());
    let (code, _, stderr) = pack(&ctx, &ctx.path("good"), &out, Some("not-a-key"), &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("MHL_SERVE_WORKFLOWS_KEY is malformed"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-a-key"), "the key is echoed: {stderr}");
    assert!(!out.exists());

    ctx.write("bad/broken.js", "export const meta = { name: 1 };\n");
    let (code, _, stderr) = pack(&ctx, &ctx.path("bad"), &out, Some(KEY), &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("broken.js"), "{stderr}");
    assert!(stderr.contains("was not written"), "{stderr}");
    assert!(
        !out.exists(),
        "nothing is written for a pack that would not serve"
    );

    let (code, stdout, stderr) = pack(&ctx, &ctx.path("good"), &out, Some(KEY), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.is_empty(),
        "no key printed without --new-key: {stdout:?}"
    );
    assert!(out.exists());
}

/// A pack of raw `(path, content)` entries sealed here, so that a repeated path can reach
/// the server (the writer refuses one).
fn craft(entries: &[(&str, &str)]) -> Vec<u8> {
    let key: Vec<u8> = vec![0x11; 32];
    let key: [u8; 32] = key.try_into().unwrap();
    let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(key));
    let mut pack = b"DMPK\x02\0\0\0".to_vec();
    pack.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (index, (path, content)) in entries.iter().enumerate() {
        let mut plaintext = (path.len() as u16).to_le_bytes().to_vec();
        plaintext.extend_from_slice(path.as_bytes());
        plaintext.extend_from_slice(content.as_bytes());
        let nonce = [index as u8 + 1; 12];
        let aad = (index as u32).to_le_bytes();
        let sealed = cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &plaintext,
                    aad: &aad,
                },
            )
            .unwrap();
        pack.extend_from_slice(&nonce);
        pack.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
        pack.extend_from_slice(&sealed);
    }
    pack
}

/// Where each entry of `pack` starts.
fn entry_offsets(pack: &[u8]) -> Vec<usize> {
    let count = u32::from_le_bytes(pack[8..12].try_into().unwrap()) as usize;
    let mut offsets = Vec::new();
    let mut at = 12;
    for _ in 0..count {
        offsets.push(at);
        let length = u32::from_le_bytes(pack[at + 12..at + 16].try_into().unwrap()) as usize;
        at += 16 + length;
    }
    offsets
}

#[test]
fn every_corruption_is_fatal_at_start_up_with_its_own_message() {
    let ctx = TestContext::new();
    let echo = "export const meta = { name: \"echo\", description: \"d\" };\nreturn 1;\n";
    ctx.write("wf/echo.js", echo);
    ctx.write("wf/notes/readme.md", "notes that ride along in the pack");
    let good = ctx.path("good.dmpk");
    let (code, _, stderr) = pack(&ctx, &ctx.path("wf"), &good, Some(KEY), &[]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(&good).unwrap();
    let offsets = entry_offsets(&bytes);
    assert_eq!(offsets.len(), 2);
    let site = ctx.path("site");
    std::fs::create_dir_all(&site).unwrap();

    let changed = |at: usize, value: u8| {
        let mut copy = bytes.clone();
        copy[at] = value;
        copy
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("magic", changed(0, b'X'), "does not start with \"DMPK\""),
        ("version", changed(4, 3), "format version 3"),
        (
            "padding",
            changed(6, 1),
            "reserved bytes 5 to 7 are not zero",
        ),
        (
            "count",
            changed(8, 1),
            "follow the last of the pack's 1 entries",
        ),
        (
            "a nonce",
            changed(offsets[1], bytes[offsets[1]] ^ 1),
            "entry 1 fails authentication",
        ),
        ("a length", changed(offsets[1] + 14, 1), "entry 1's length"),
        (
            "a ciphertext",
            changed(bytes.len() - 1, bytes[bytes.len() - 1] ^ 1),
            "entry 1 fails authentication",
        ),
        (
            "entry 0",
            changed(offsets[0] + 20, bytes[offsets[0] + 20] ^ 1),
            "the first entry fails to decrypt",
        ),
        (
            "truncated header",
            bytes[..7].to_vec(),
            "truncated: it ends at byte 7 inside the 12-byte header",
        ),
        (
            "truncated nonce",
            bytes[..offsets[1] + 5].to_vec(),
            "truncated",
        ),
        (
            "truncated ciphertext",
            bytes[..bytes.len() - 3].to_vec(),
            "entry 1's length",
        ),
        (
            "trailing",
            [bytes.clone(), vec![0]].concat(),
            "1 bytes follow the last",
        ),
        (
            "repeated path",
            craft(&[("echo.js", echo), ("echo.js", echo)]),
            "entry 1 repeats the path \"echo.js\" of entry 0",
        ),
        (
            "workflows that do not load",
            craft(&[("broken.js", "export const meta = { name: 1 };\n")]),
            "the workflows of the pack",
        ),
    ];
    cases.push((
        "empty",
        Vec::new(),
        "ends at byte 0 inside the 12-byte header",
    ));
    let keyed = ctx.set(KEY_VARIABLE, KEY);
    for (name, pack_bytes, expected) in &cases {
        let file = keyed.path(&format!("{}.dmpk", name.replace(' ', "-")));
        std::fs::write(&file, pack_bytes).unwrap();
        let (code, stderr) = serve_refused(
            &keyed,
            &site,
            &[
                "--workflows-pack",
                file.to_str().unwrap(),
                "--http",
                "127.0.0.1:0",
            ],
        );
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{name}: expected {expected:?} in\n{stderr}"
        );
        assert!(stderr.contains("nothing is served"), "{name}: {stderr}");
        assert!(!stderr.contains("http://"), "{name}: it listened: {stderr}");
        assert!(
            !stderr.contains("notes that ride"),
            "{name}: content echoed: {stderr}"
        );
    }
    let good_flags = [
        "--workflows-pack",
        good.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
    ];
    let wrong = keyed.set(KEY_VARIABLE, "2".repeat(64));
    let (code, stderr) = serve_refused(&wrong, &site, &good_flags);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the key does not open this pack"),
        "{stderr}"
    );
    let malformed = wrong.set(KEY_VARIABLE, "zz-not-hex");
    let (code, stderr) = serve_refused(&malformed, &site, &good_flags);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("MHL_SERVE_WORKFLOWS_KEY is malformed"),
        "{stderr}"
    );
    assert!(!stderr.contains("zz-not-hex"), "{stderr}");
    let stdio = ["--workflows-pack", good.to_str().unwrap(), "--stdio"];
    let (code, stderr) = serve_refused(&malformed.set(KEY_VARIABLE, KEY), &site, &stdio);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("HTTP only"), "{stderr}");
}

#[test]
fn a_resume_after_the_pack_changed_is_refused_for_the_digest() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let out = ctx.path("workflows.dmpk");
    let (code, _, stderr) = pack(&ctx, &folder, &out, Some(KEY), &[]);
    assert_eq!(code, 0, "{stderr}");
    let site = ctx.path("site");
    std::fs::create_dir_all(&site).unwrap();
    let state = ctx.path("serve-state");
    let flags = [
        "--workflows-pack",
        out.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let ctx = ctx.set(KEY_VARIABLE, KEY);
    let waiting = |client: &crate::serve::Client, run_id: &str| {
        client.poll(run_id, "waiting at its checkpoint", |view| {
            view["state"] == "input_required"
        })
    };

    let first = Served::start(&ctx, &site, &flags);
    let client = first.session(&[]);
    let kept = client.start("approval", json!({"request": "ship it"}));
    let revised = client.start("approval", json!({"request": "ship that"}));
    let view = waiting(&client, &kept);
    let key = view["checkpoint"]["callIndex"]
        .as_u64()
        .map(|index| index.to_string())
        .unwrap_or_else(|| panic!("no checkpoint callIndex in {view}"));
    waiting(&client, &revised);
    drop(client);
    assert_eq!(first.stop().status.code(), Some(0));

    // The same pack: the run continues.
    let second = Served::start(&ctx, &site, &flags);
    let client = second.session(&[]);
    let replies = json!({"checkpointReplies": {key: true}});
    client.status(&kept);
    client.method("run/resume", json!({"runId": kept, "arguments": replies}));
    let done = client.wait_state(&kept, "completed");
    assert_eq!(
        done["result"]["summary"], "ready to act on: ship it",
        "{done}"
    );
    drop(client);
    assert_eq!(second.stop().status.code(), Some(0));

    // Re-packed with an edited script: the other run is refused, naming the digest.
    let script = folder.join("gates/approval.js");
    let text = std::fs::read_to_string(&script).unwrap();
    std::fs::write(&script, text.replace("ready to act on", "now acting on")).unwrap();
    let (code, _, stderr) = pack(&ctx, &folder, &out, Some(KEY), &[]);
    assert_eq!(code, 0, "{stderr}");
    let third = Served::start(&ctx, &site, &flags);
    let client = third.session(&[]);
    client.status(&revised);
    let answer = client.send(
        "run/resume",
        json!({"runId": revised, "arguments": replies}),
    );
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("changed in the workflows pack since the run started"),
        "{}",
        answer.normalised()
    );
    assert!(message.contains("sha256:"), "{message}");
    let still = client.status(&revised);
    assert_eq!(still["state"], "input_required", "{still}");
    drop(client);
    assert_eq!(third.stop().status.code(), Some(0));
}
