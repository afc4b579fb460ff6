//! The panel outside an MCP host: the daemon's `GET /ui` (the panel's bytes, its own content
//! security policy as a header, `nosniff`, `no-store`), the page's same-origin `POST /mcp`
//! passing the Origin check while a foreign origin still does not, and `agentprism monitor`,
//! which starts the daemon when needed and prints a URL that serves the panel. Another user's
//! `/ui` is refused with 403 by `security_peer.rs`.

use std::time::Duration;

use agentprism::tools::monitor::{PANEL_HTML, panel_csp};
use serde_json::json;

use crate::daemon::{Reply, World, http, wait_for};

/// Checks that `reply` is the panel with its headers.
fn is_the_panel(reply: &Reply) {
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.body, PANEL_HTML.as_bytes());
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        reply.header("content-security-policy"),
        Some(panel_csp().expect("the panel's meta policy")),
        "the header says what the page's meta tag says"
    );
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(reply.header("cache-control"), Some("no-store"));
}

#[test]
fn the_daemon_serves_the_panel_and_its_same_origin_mcp() {
    let world = World::new();
    let record = world.start();
    let port = record.port;
    is_the_panel(&http(port, "GET", "/ui", &[], ""));
    let posted = http(port, "POST", "/ui", &[], "");
    assert_eq!(posted.status, 405);
    assert_eq!(posted.header("allow"), Some("GET, HEAD"));
    assert_eq!(http(port, "GET", "/ui/other", &[], "").status, 404);

    // The page's own origin may speak MCP; a foreign one still may not.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}},
        "clientInfo": {"name": "panel", "version": "1"},
    }})
    .to_string();
    let origin = format!("http://127.0.0.1:{port}");
    let from = |origin: &str| {
        http(
            port,
            "POST",
            "/mcp",
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("Origin", origin),
            ],
            &initialize,
        )
    };
    let accepted = from(&origin);
    assert_eq!(
        accepted.status,
        200,
        "{}",
        String::from_utf8_lossy(&accepted.body)
    );
    assert!(accepted.header("mcp-session-id").is_some());
    assert_eq!(from("http://evil.example").status, 403);
    assert_eq!(
        from("null").status,
        403,
        "an opaque origin (a sandboxed frame)"
    );
}

#[test]
fn agentprism_monitor_starts_the_daemon_and_prints_a_url_that_serves_the_panel() {
    let world = World::new();
    assert!(world.pointer().is_none(), "no daemon yet");
    let printed = world.run(&["monitor", "mabc1234-k9x2pq"]);
    assert_eq!(printed.code(), 0, "{}", printed.stderr);
    let record = world.pointer().expect("monitor started the daemon");
    let url = printed.stdout.trim();
    assert_eq!(
        url,
        format!("http://127.0.0.1:{}/ui#run=mabc1234-k9x2pq", record.port)
    );
    let path = url
        .strip_prefix(&format!("http://127.0.0.1:{}", record.port))
        .and_then(|rest| rest.split('#').next())
        .unwrap();
    is_the_panel(&http(record.port, "GET", path, &[], ""));

    let bad = world.run(&["monitor", "not a run id"]);
    assert_eq!(bad.code(), 1);
    assert!(
        bad.stderr.contains("runId \"not a run id\""),
        "{}",
        bad.stderr
    );

    // --open hands the URL to xdg-open from PATH.
    let bin = world.ctx.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opened = world.ctx.path("opened.txt");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\nprintf '%s' \"$1\" > {}.tmp && mv {0}.tmp {0}\n",
            opened.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path_value = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let open = world.run_with(&[("PATH", &path_value)], &["monitor", "--open"]);
    assert_eq!(open.code(), 0, "{}", open.stderr);
    let printed = open.stdout.trim().to_owned();
    assert!(printed.ends_with("/ui"), "{printed}");
    let handed = wait_for("xdg-open to run", Duration::from_secs(20), || {
        std::fs::read_to_string(&opened).ok()
    });
    assert_eq!(handed, printed);
}

#[test]
fn where_the_daemon_needs_its_token_monitor_says_why_it_cannot_help() {
    let world = World::with(|ctx| ctx.set("AGENTPRISM_TEST_NO_PEER_LOOKUP", "1"));
    let refused = world.run(&["monitor"]);
    assert_eq!(refused.code(), 1);
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("bearer token"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("workflow_monitor"),
        "{}",
        refused.stderr
    );
}
