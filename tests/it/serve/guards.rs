//! The folder server's HTTP guards (docs/serve.md, "Guards"): the bearer token, the principal
//! header's need for a token, cross-origin refusal, the 1 MiB body cap, per-method paths,
//! the warning on a non-loopback bind without a token, and the 256 KiB `arguments` cap.

use serde_json::json;

use super::{Client, Served, copy_folder, fixtures, http, serve_refused};
use crate::support::context::{TestContext, first_text};

const BODY_CAP: usize = 1024 * 1024;
const ARGUMENTS_CAP: usize = 256 * 1024;

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "serve-it", "version": "1"}}})
    .to_string()
}

/// An `initialize` with `headers` on top of the usual ones.
fn initialize_with(served: &Served, headers: &[(&str, &str)]) -> super::Reply {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    http(
        served.address,
        "POST",
        "/mcp",
        &all,
        initialize_body().as_bytes(),
    )
}

fn assert_no_secret(reply: &super::Reply, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !reply.body.contains(secret),
            "the body echoes {secret:?}: {}",
            reply.body
        );
        for (name, value) in &reply.headers {
            assert!(!value.contains(secret), "header {name} echoes {secret:?}");
        }
    }
}

#[test]
fn a_token_is_required_on_every_request_and_never_echoed() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let token = "serve-token-3f9a1c77d2";
    let wrong = "wrong-token-b84e0d1265";
    let ctx = ctx.set("MHL_SERVE_TOKEN", token);
    let served = Served::start(&ctx, &folder, &[]);

    let missing = initialize_with(&served, &[]);
    assert_eq!(missing.status, 401, "{missing:?}");
    // A load balancer's health check carries no token: liveness, and nothing beyond it.
    let health = http(served.address, "GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&health.body).ok(),
        Some(json!({"status": "ok"}))
    );
    assert_eq!(
        http(served.address, "POST", "/healthz", &[], b"").status,
        401,
        "only the GET is open"
    );
    assert_no_secret(&missing, &[token]);
    let bad = format!("Bearer {wrong}");
    let refused = initialize_with(&served, &[("Authorization", &bad)]);
    assert_eq!(refused.status, 401, "{refused:?}");
    assert_no_secret(&refused, &[token, wrong]);
    let prefix = format!("Bearer {}", &token[..token.len() - 1]);
    assert_eq!(
        initialize_with(&served, &[("Authorization", &prefix)]).status,
        401
    );

    let good = format!("Bearer {token}");
    let session = served.session(&[("Authorization", &good)]);
    let tools = session.method("tools/list", json!({}));
    assert!(
        tools["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty())
    );
    // A session id alone does not let a request in: every request needs the token.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}});
    let without = Client::stateless(served.address, &[]);
    let sid = session.session.clone().unwrap();
    let reply = without.post(
        "/mcp",
        &[
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 401, "{reply:?}");
    // Stateless requests too.
    let stateless = Client::stateless(served.address, &[("Authorization", &bad)]);
    assert_eq!(stateless.send("tools/list", json!({})).reply.status, 401);
    let stateless = Client::stateless(served.address, &[("Authorization", &good)]);
    assert_eq!(stateless.send("tools/list", json!({})).reply.status, 200);

    let stopped = served.stop();
    assert!(!stopped.stderr.contains(token), "stderr shows the token");
    assert!(
        !stopped.stderr.contains(wrong),
        "stderr shows the wrong token"
    );
}

#[test]
fn a_principal_header_without_a_token_is_a_start_up_error() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let (code, stderr) = serve_refused(
        &ctx,
        &folder,
        &["--http", "127.0.0.1:0", "--principal-header", "X-User"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--principal-header needs --token"),
        "{stderr}"
    );
    // The same through the variable.
    let ctx = ctx.set("MHL_SERVE_PRINCIPAL_HEADER", "X-User");
    let (code, stderr) = serve_refused(&ctx, &folder, &["--http", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--principal-header needs --token"),
        "{stderr}"
    );
}

#[test]
fn origins_bodies_and_method_paths_are_checked() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let served = Served::start(&ctx, &folder, &[]);

    // A page of another site is refused; a loopback page is let in.
    let foreign = initialize_with(&served, &[("Origin", "https://attacker.invalid")]);
    assert_eq!(foreign.status, 403, "{foreign:?}");
    let local_origin = format!("http://{}", served.address);
    assert_eq!(
        initialize_with(&served, &[("Origin", &local_origin)]).status,
        200
    );

    let session = served.session(&[]);
    // A body of exactly 1 MiB is read (a tools/list padded with white space) ...
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}).to_string();
    let padded = format!("{list}{}", " ".repeat(BODY_CAP - list.len()));
    assert_eq!(padded.len(), BODY_CAP);
    let at_cap = session.post("/mcp", &[], padded.as_bytes());
    assert_eq!(
        at_cap.status, 200,
        "a body of exactly 1 MiB is within the cap"
    );
    assert!(at_cap.json()["result"]["tools"].is_array());
    // ... one byte more is not.
    let over = format!("{padded} ");
    let refused = session.post("/mcp", &[], over.as_bytes());
    assert_eq!(refused.status, 413, "{refused:?}");

    // Per-method paths: the body must name the path's method.
    let run_id = session.start("echo", json!({"text": "hi"}));
    let status = session.send_to("/mcp/run/status", "run/status", json!({"runId": run_id}));
    assert_eq!(status.reply.status, 200, "{:?}", status.reply);
    assert_eq!(status.result()["runId"], run_id.as_str());
    let listed = session.send_to("/mcp/run/list", "run/list", json!({}));
    assert_eq!(listed.result()["runs"][0]["runId"], run_id.as_str());
    let mismatch = session.send_to("/mcp/run/status", "run/list", json!({}));
    assert_eq!(mismatch.reply.status, 400, "{:?}", mismatch.reply);
    let mismatch = session.send_to("/mcp/run/resume", "run/cancel", json!({"runId": run_id}));
    assert_eq!(mismatch.reply.status, 400, "{:?}", mismatch.reply);
    let stateless = served.stateless();
    let mismatch = stateless.send_to("/mcp/run/status", "run/list", json!({}));
    assert_eq!(mismatch.reply.status, 400, "{:?}", mismatch.reply);
}

#[test]
fn arguments_are_capped_at_256_kib() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let served = Served::start(&ctx, &folder, &[]);
    let session = served.session(&[]);
    // `{"text":"…"}`: 11 bytes around the text.
    let exact = "x".repeat(ARGUMENTS_CAP - 11);
    assert_eq!(json!({"text": exact}).to_string().len(), ARGUMENTS_CAP);
    let run_id = session.start("echo", json!({"text": exact}));
    let done = session.wait_state(&run_id, "completed");
    assert_eq!(
        done["result"]["echoed"].as_str().map(str::len),
        Some(exact.len())
    );

    let over = format!("{exact}x");
    for (method, params) in [
        (
            "run/start",
            json!({"name": "echo", "arguments": {"text": over}}),
        ),
        (
            "run/resume",
            json!({"runId": run_id, "arguments": {"checkpointReplies": {"0": over}}}),
        ),
    ] {
        let answer = session.send(method, params);
        let message = answer.json();
        assert_eq!(message["error"]["code"], -32602, "{method}: {message}");
        let text = message["error"]["message"].as_str().unwrap_or_default();
        assert!(
            text.contains("at most 262144 (256 KiB)"),
            "{method} names the limit: {text}"
        );
    }
    let refused = session.tool(
        "mhl_run_start",
        json!({"name": "echo", "arguments": {"text": over}}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(first_text(&refused).contains("256 KiB"));
    // The synchronous call of the workflow has the same cap.
    let refused = session.tool("echo", json!({"text": over}));
    assert_eq!(refused["isError"], true, "{refused}");
    let listed = session.method("run/list", json!({}));
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn a_non_loopback_bind_without_a_token_warns_that_it_is_unauthenticated() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    // The one test that binds beyond loopback: stopped as soon as it listens (the warning
    // comes before the URL), and never sent a request.
    let mut open = Served::start_on(&ctx, &folder, "0.0.0.0:0", &[]);
    let stderr = open.kill().stderr;
    assert!(stderr.contains("unauthenticated"), "{stderr}");

    let mut guarded = Served::start_on(&ctx, &folder, "127.0.0.1:0", &[]);
    let stderr = guarded.kill().stderr;
    assert!(!stderr.contains("unauthenticated"), "{stderr}");
}
