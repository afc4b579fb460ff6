//! Files named by callers, through the real daemon over HTTP (docs/security.md): a
//! run's recorded `scriptPath` swapped for a symlink, a FIFO, a link to `/dev/zero` or an
//! oversize file is refused by `resources/read` and by a resume with an error that names the
//! path and what it is, never its contents; FIFO reads stall nothing else (a bystander run
//! keeps making calls and completes while no writer ever opens the FIFO); and a scriptPath
//! that is a token file is refused without showing the token. Waits poll with deadlines;
//! nothing sleeps to synchronise.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::daemon::{HEADER, World, mcp_post, open_session, wait_for, wait_ready};
use crate::support::context::{DEADLINE, Running};

/// A GitHub token as a token file holds it: `ghp_` and 36 characters.
const TOKEN: &str = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";
/// What a root-only file holds; no answer may ever contain it.
const SECRET: &str = "root-only secret 7d1f0c";
/// The 1 MiB script limit.
const SCRIPT_LIMIT: usize = 1 << 20;
/// How long a refused read may take: it must not wait for anything.
const PROMPT: Duration = Duration::from_secs(5);

/// A foreground daemon on an ephemeral port with one open session.
struct Daemon {
    world: World,
    port: u16,
    session: String,
    _process: Running,
}

fn daemon() -> Daemon {
    let world = World::new();
    let process = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let session = open_session(record.port);
    Daemon {
        port: record.port,
        session,
        world,
        _process: process,
    }
}

impl Daemon {
    fn project(&self) -> PathBuf {
        self.world.ctx.project()
    }

    /// One JSON-RPC request in the session, with a fresh id (a repeated id would be an
    /// exact retry, answered with the first answer); the whole response.
    fn request(&self, method: &str, params: Value) -> Value {
        let id = uuid::Uuid::new_v4().to_string();
        let reply = mcp_post(
            self.port,
            Some(&self.session),
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert_eq!(
            reply.status,
            200,
            "{method}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    }

    /// The `workflow` tool's result.
    fn tool(&self, arguments: Value) -> Value {
        let answer = self.request(
            "tools/call",
            json!({"name": "workflow", "arguments": arguments}),
        );
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {answer}"))
    }

    /// Starts a run of the file at `path`; the acknowledgement's structured content.
    fn run_path(&self, path: &Path) -> Value {
        let result =
            self.tool(json!({"action": "run", "projectDir": self.project(), "scriptPath": path}));
        assert_ne!(result["isError"], true, "{result:#}");
        result["structuredContent"].clone()
    }

    /// A run of `path` that must be refused; the error text.
    fn refused_run(&self, path: &Path) -> String {
        let result =
            self.tool(json!({"action": "run", "projectDir": self.project(), "scriptPath": path}));
        assert_eq!(result["isError"], true, "{result:#}");
        error_text(&result)
    }

    fn status(&self, run_id: &str) -> Value {
        self.tool(json!({"action": "status", "runId": run_id}))["structuredContent"].clone()
    }

    fn wait_status(&self, run_id: &str, wanted: &str) -> Value {
        wait_for(&format!("run {run_id} to be {wanted}"), DEADLINE, || {
            let status = self.status(run_id);
            (status["status"] == wanted).then_some(status)
        })
    }

    /// `resources/read` of `uri`: the text, or the JSON-RPC error message.
    fn read(&self, uri: &str) -> Result<String, String> {
        read_over(self.port, &self.session, uri)
    }
}

fn read_over(port: u16, session: &str, uri: &str) -> Result<String, String> {
    let reply = mcp_post(
        port,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(),
                "method": "resources/read", "params": {"uri": uri}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let answer = reply.json();
    match answer.get("error") {
        Some(error) => Err(error["message"].as_str().unwrap_or_default().to_owned()),
        None => Ok(answer["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()),
    }
}

fn error_text(result: &Value) -> String {
    crate::support::context::first_text(result)
}

fn script(body: &str) -> String {
    format!("{HEADER}{body}")
}

/// A file only root may read, holding [`SECRET`] and [`TOKEN`].
fn secret_file(world: &World) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = world
        .ctx
        .write("secret/shadow", &format!("{SECRET}\n{TOKEN}\n"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the secret");
    path
}

fn replace_with_symlink(path: &Path, target: &Path) {
    std::fs::remove_file(path).expect("remove the script");
    std::os::unix::fs::symlink(target, path).expect("symlink");
}

fn replace_with_fifo(path: &Path) {
    std::fs::remove_file(path).expect("remove the script");
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

fn assert_shows_nothing(message: &str) {
    assert!(!message.contains(SECRET), "the secret leaked: {message}");
    assert!(!message.contains("ghp_"), "the token leaked: {message}");
    assert!(
        !message.contains(&TOKEN[10..]),
        "the token leaked: {message}"
    );
}

/// A short run that completes: its record keeps the file's path.
fn completed_run_of(d: &Daemon, name: &str) -> (PathBuf, String) {
    let path = d.world.ctx.write(
        &format!("project/{name}"),
        &script("return await agent('hi');\n"),
    );
    let ack = d.run_path(&path);
    let run_id = ack["runId"].as_str().unwrap().to_owned();
    d.wait_status(&run_id, "completed");
    let uri = ack["scriptUri"].as_str().unwrap().to_owned();
    assert_eq!(d.read(&uri).unwrap(), script("return await agent('hi');\n"));
    (path, uri)
}

#[test]
fn a_script_swapped_for_a_symlink_is_never_read_through_it() {
    let d = daemon();
    let secret = secret_file(&d.world);

    // The file itself becomes a link.
    let (path, uri) = completed_run_of(&d, "flow.js");
    replace_with_symlink(&path, &secret);
    let message = d
        .read(&uri)
        .expect_err("a symlinked script must not be served");
    assert_shows_nothing(&message);
    assert!(
        message.contains(&format!("{} is a symbolic link", path.display())),
        "{message}"
    );

    // A folder on its path becomes a link to a folder holding a file of that name.
    let flows = d.project().join("flows");
    std::fs::create_dir(&flows).unwrap();
    let nested = flows.join("flow.js");
    std::fs::write(&nested, script("return await agent('hi');\n")).unwrap();
    let ack = d.run_path(&nested);
    let nested_uri = ack["scriptUri"].as_str().unwrap().to_owned();
    d.wait_status(ack["runId"].as_str().unwrap(), "completed");
    let decoy = d.world.ctx.path("decoy");
    std::fs::create_dir(&decoy).unwrap();
    std::os::unix::fs::symlink(&secret, decoy.join("flow.js")).unwrap();
    std::fs::remove_file(&nested).unwrap();
    std::fs::remove_dir(&flows).unwrap();
    std::os::unix::fs::symlink(&decoy, &flows).unwrap();
    let message = d
        .read(&nested_uri)
        .expect_err("a link on the path must not be followed");
    assert_shows_nothing(&message);
    assert!(
        message.contains(&format!(
            "{} on its path is a symbolic link",
            flows.display()
        )),
        "{message}"
    );

    // The daemon still serves the file once it is a regular file again.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "// restored\n").unwrap();
    assert_eq!(d.read(&uri).unwrap(), "// restored\n");
}

#[test]
fn fifo_reads_stall_neither_requests_nor_a_bystander_run() {
    let d = daemon();
    let (path, uri) = completed_run_of(&d, "victim.js");
    replace_with_fifo(&path);

    // The bystander's calls each wait for a gate file the test creates, so it is mid-call
    // while the FIFO reads are in flight and only finishes if the daemon keeps serving it.
    const CALLS: usize = 4;
    let gates = d.world.ctx.path("gates");
    std::fs::create_dir(&gates).unwrap();
    let bystander = d.world.ctx.write(
        "project/bystander.js",
        &script(&format!(
            "const out = [];\nfor (let i = 0; i < {CALLS}; i++) out.push(await agent('step ' + i + '\\n@mock wait_file {}/gate-' + i));\nreturn out.length;\n",
            gates.display()
        )),
    );
    let ack = d.run_path(&bystander);
    let run_id = ack["runId"].as_str().unwrap().to_owned();

    for round in 0..CALLS {
        // Two or more concurrent reads of the FIFO, which no writer ever opens.
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (port, session, uri) = (d.port, d.session.clone(), uri.clone());
                std::thread::spawn(move || {
                    let started = Instant::now();
                    (read_over(port, &session, &uri), started.elapsed())
                })
            })
            .collect();
        std::fs::write(gates.join(format!("gate-{round}")), "").unwrap();
        for reader in readers {
            let (result, took) = reader.join().expect("reader thread");
            let message = result.expect_err("a FIFO must not be served");
            assert!(
                message.contains(&format!(
                    "{} is a FIFO (named pipe), not a regular file",
                    path.display()
                )),
                "{message}"
            );
            assert!(took < PROMPT, "a FIFO read took {took:?}");
        }
        // The bystander's call settles and the next one is made while the reads went on.
        wait_for(&format!("call {round} of the bystander"), DEADLINE, || {
            let status = d.status(&run_id);
            let settled = status["calls"]
                .as_array()
                // Settled calls are listed without the live `status` of a call in flight.
                .map(|calls| calls.iter().filter(|c| c.get("status").is_none()).count())
                .unwrap_or(0);
            (settled > round || status["status"] == "completed").then_some(())
        });
    }
    let status = d.wait_status(&run_id, "completed");
    assert_eq!(status["outcome"]["result"], json!(CALLS), "{status:#}");
    // An admission of the FIFO is refused at once, too.
    let message = d.refused_run(&path);
    assert!(
        message.contains("is a FIFO (named pipe), not a regular file"),
        "{message}"
    );
}

#[test]
fn dev_zero_and_oversize_files_end_in_a_bounded_error() {
    let d = daemon();

    // A recorded script swapped for a link to /dev/zero: refused as a link, nothing read.
    let (path, uri) = completed_run_of(&d, "zero.js");
    replace_with_symlink(&path, Path::new("/dev/zero"));
    let message = d.read(&uri).expect_err("/dev/zero must not be served");
    assert!(message.contains("is a symbolic link"), "{message}");
    // Given at admission, the link is resolved and the device refused.
    let message = d.refused_run(&path);
    assert!(
        message.contains(&format!(
            "{} (which resolves to /dev/zero) is a character device, not a regular file",
            path.display()
        )),
        "{message}"
    );

    // A recorded script that grows past the limit.
    let (path, uri) = completed_run_of(&d, "big.js");
    let mut text = script("return 1;\n");
    text.push_str(&"/".repeat(SCRIPT_LIMIT + 1 - text.len()));
    std::fs::write(&path, &text).unwrap();
    let message = d
        .read(&uri)
        .expect_err("an oversize file must not be served");
    assert!(
        message.contains(&format!(
            "{} is too large: {} bytes, over the limit of {SCRIPT_LIMIT} bytes",
            path.display(),
            SCRIPT_LIMIT + 1
        )),
        "{message}"
    );
    assert!(message.len() < 1000, "{} bytes: {message}", message.len());
    let message = d.refused_run(&path);
    assert!(message.contains("is too large"), "{message}");

    // Exactly at the limit it is served whole.
    text.pop();
    std::fs::write(&path, &text).unwrap();
    assert_eq!(d.read(&uri).unwrap().len(), SCRIPT_LIMIT);
}

#[test]
fn a_token_file_as_script_path_is_refused_without_showing_the_token() {
    let d = daemon();
    let tokens = d
        .world
        .ctx
        .write("home/.config/gh/token", &format!("{TOKEN}\n"));
    let secret = secret_file(&d.world);
    let named_js = d.world.ctx.write("project/token.js", &format!("{TOKEN}\n"));
    let linked = d.project().join("linked.js");
    std::os::unix::fs::symlink(&tokens, &linked).unwrap();
    let shadow_linked = d.project().join("shadow.js");
    std::os::unix::fs::symlink(&secret, &shadow_linked).unwrap();

    // Not named like a script (or resolving to such a file): nothing of it is quoted.
    for path in [&tokens, &linked, &secret, &shadow_linked] {
        let message = d.refused_run(path);
        assert_shows_nothing(&message);
        assert!(
            message.contains(&format!("{} ", path.display()))
                && message.contains("is not a workflow script"),
            "{message}"
        );
    }
    // The daemon's own environment and the system's password hashes, directly and through a
    // link named like a script.
    let environ_linked = d.project().join("environ.js");
    std::os::unix::fs::symlink("/proc/self/environ", &environ_linked).unwrap();
    for path in [
        Path::new("/proc/self/environ"),
        &environ_linked,
        Path::new("/etc/shadow"),
    ] {
        let message = d.refused_run(path);
        assert_shows_nothing(&message);
        for leak in ["PATH=", "HOME=", "AGENTPRISM_", "root:"] {
            assert!(!message.contains(leak), "{message}");
        }
        assert!(
            message.contains("is not a workflow script") || message.contains("cannot be read"),
            "{message}"
        );
    }
    // A file named like a script may be quoted, briefly and redacted.
    let message = d.refused_run(&named_js);
    assert_shows_nothing(&message);
    assert!(message.contains("SCRIPT_VALIDATION_ERROR"), "{message}");
    assert!(message.contains("found `[REDACTED]`"), "{message}");
    // Not UTF-8: no byte of it is shown.
    let binary = d.world.ctx.path("project/binary.js");
    std::fs::write(&binary, b"\xFF\xFEQZX").unwrap();
    let message = d.refused_run(&binary);
    assert!(message.contains("not valid UTF-8"), "{message}");
    assert!(
        !message.contains("0xFF") && !message.contains("QZX"),
        "{message}"
    );
}

#[test]
fn a_resume_rereads_the_script_path_safely() {
    let d = daemon();
    let secret = secret_file(&d.world);
    let original = script("const ok = await checkpoint('go?');\nreturn {ok};\n");
    let path = d.world.ctx.write("project/paused.js", &original);
    let ack = d.run_path(&path);
    let run_id = ack["runId"].as_str().unwrap().to_owned();
    d.wait_status(&run_id, "paused");
    let resume = json!({"action": "resume", "runId": run_id, "checkpointReplies": {"0": true}});

    // A link to a secret: refused, nothing of it shown, the run stays paused.
    replace_with_symlink(&path, &secret);
    let result = d.tool(resume.clone());
    assert_eq!(result["isError"], true, "{result:#}");
    let message = error_text(&result);
    assert_shows_nothing(&message);
    assert!(
        message.contains(&format!("{} is a symbolic link", path.display())),
        "{message}"
    );
    assert_eq!(d.status(&run_id)["status"], "paused");

    // A FIFO: refused at once.
    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = Instant::now();
    let result = d.tool(resume.clone());
    assert!(started.elapsed() < PROMPT);
    assert!(
        error_text(&result).contains("is a FIFO (named pipe), not a regular file"),
        "{result:#}"
    );

    // A regular file again, revised: the resume reads it and the run completes.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(
        &path,
        script("const ok = await checkpoint('go?');\nreturn {ok, revised: true};\n"),
    )
    .unwrap();
    let result = d.tool(resume);
    assert_ne!(result["isError"], true, "{result:#}");
    let status = d.wait_status(&run_id, "completed");
    assert_eq!(
        status["outcome"]["result"],
        json!({"ok": true, "revised": true}),
        "{status:#}"
    );
}
