//! The run monitor panel (`src/tools/monitor/run-monitor.html`) in headless Chromium against
//! a real daemon: `tests/e2e/monitor/driver.mjs` is the MCP host. It embeds the panel through
//! the official MCP Apps host bridge (`AppBridge` of `@modelcontextprotocol/ext-apps`) and
//! drives it with `playwright-core` and Debian's `/usr/bin/chromium` over a run with a
//! checkpoint, a permission request and several agents on the mock ACP agent: the graph
//! renders, the checkpoint and the permission are answered from the panel, one agent is
//! stopped, the result is paged and downloaded, an agent of a completed run is rerun from
//! the panel, a second invocation in the same iframe rebinds, fullscreen keeps the selection, the narrow layout moves the inspector below the
//! graph, and the model-facing tool list the host computes leaves out the app-only tools. Then
//! the same panel as a plain page (`GET /ui`), speaking MCP to its own origin, approves the
//! setup of a run whose script declares its own backend and answers its checkpoint. The
//! panel's tool calls reach the daemon's own `workflow_monitor`, `workflow-events`,
//! `workflow-notifications` and `workflow` tools; the resource the host reads must be the
//! file in the repository.
//!
//! Each step prints PASS or FAIL; this test checks the summary and the screenshots of the
//! wide and the narrow layout (`AGENTPRISM_MONITOR_SCREENSHOTS=<dir>` copies them there, which
//! is how `docs/monitor/*.png` are refreshed). Without Node, the packages or chromium the test
//! fails and names the install step. A second test checks the panel's own limits: under
//! 200 KiB, the strict CSP (script-src: the hash of its one script), no external URL; a third
//! that each blob URL the script makes is revoked after its click.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::daemon::World;
use crate::sdk_clients::{
    CLIENT_DEADLINE, Sweeper, check_client, path_from_manifest, run_with_deadline,
    wait_until_no_process_has_home,
};
use crate::support::context::mock_agent_binary;

const PANEL: &str = include_str!("../../src/tools/monitor/run-monitor.html");
const PANEL_LIMIT_BYTES: usize = 200 * 1024;
/// The panel's policy around its script's hash: only that one inline script runs, so markup
/// that ever reached the DOM as HTML could not run a handler or a script of its own.
fn csp(script_hash: &str) -> String {
    format!(
        "default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; \
         img-src data:; connect-src 'self'"
    )
}
const CHROMIUM: &str = "/usr/bin/chromium";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
/// A screenshot of the panel is tens of KiB; past this it is not the small PNG docs embed.
const SCREENSHOT_LIMIT_BYTES: usize = 300 * 1024;

#[test]
fn the_panel_drives_a_real_run_in_headless_chromium() {
    let node = path_from_manifest("node", "Node 22 for the monitor's browser test");
    let playwright = path_from_manifest("playwright_core", "playwright-core");
    let ext_apps = path_from_manifest("ext_apps", "@modelcontextprotocol/ext-apps");
    let esbuild = path_from_manifest("esbuild", "esbuild");
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install the Debian package chromium (.ci/run does)"
    );
    let world = World::new();
    let home = PathBuf::from(&world.ctx.env["HOME"]);
    let _sweeper = Sweeper { home: home.clone() };
    let record = world.start();
    let out = world.ctx.path("screenshots");
    std::fs::create_dir_all(&out).expect("screenshot dir");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(&node);
    command
        .arg(root.join("tests/e2e/monitor/driver.mjs"))
        .arg("--mcp")
        .arg(&record.url)
        .arg("--project")
        .arg(world.ctx.project())
        .arg("--panel")
        .arg(root.join("src/tools/monitor/run-monitor.html"))
        .arg("--out")
        .arg(&out)
        .arg("--mock-agent")
        .arg(mock_agent_binary())
        .arg("--playwright")
        .arg(&playwright)
        .arg("--ext-apps")
        .arg(&ext_apps)
        .arg("--esbuild")
        .arg(&esbuild)
        .args(["--chromium", CHROMIUM])
        .env_clear()
        .envs(&world.ctx.env)
        .current_dir(world.ctx.project());
    let outcome = run_with_deadline(command, CLIENT_DEADLINE);
    let stopped = world.run(&["daemon", "stop"]);
    let daemon_log =
        std::fs::read_to_string(world.ctx.state().join("logs/daemon.log")).unwrap_or_default();
    let describe = check_client("monitor browser driver", &outcome, &daemon_log);
    assert_eq!(stopped.code(), 0, "daemon stop: {}", stopped.stderr);

    for step in [
        "a client without the ui capability lists none of the monitor tools",
        "the model-facing tool list excludes the app-only tools",
        "the panel resource is the MCP App compiled from --panel",
        "a second invocation rebinds the iframe and the late reply is discarded",
        "the checkpoint answered from the panel and the run continued",
        "one agent stopped from the panel, the run went on",
        "the result pages",
        "the panel reruns an agent of a completed run",
        "the setup approved from the standalone page",
        "the standalone page answers a checkpoint and shows the result",
        "markup from a run is shown as text and never runs",
    ] {
        assert!(
            outcome.stdout.contains(&format!("PASS monitor {step}")),
            "no PASS for {step:?}\n{}",
            describe()
        );
    }
    for name in ["wide.png", "narrow.png"] {
        let bytes = std::fs::read(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(bytes.starts_with(PNG_MAGIC), "{name} is not a PNG");
        assert!(
            bytes.len() <= SCREENSHOT_LIMIT_BYTES,
            "{name} has {} bytes, more than {SCREENSHOT_LIMIT_BYTES}",
            bytes.len()
        );
        if let Some(dir) = std::env::var_os("AGENTPRISM_MONITOR_SCREENSHOTS") {
            std::fs::copy(out.join(name), PathBuf::from(dir).join(name)).expect("copy screenshot");
        }
    }
    let leftovers = wait_until_no_process_has_home(&home);
    assert!(
        leftovers.is_empty(),
        "processes left behind: {leftovers:?}\n{}",
        describe()
    );
}

#[test]
fn the_panel_is_self_contained_small_and_under_a_strict_csp() {
    assert!(
        PANEL.len() < PANEL_LIMIT_BYTES,
        "run-monitor.html has {} bytes; the limit is {PANEL_LIMIT_BYTES}",
        PANEL.len()
    );
    use base64::Engine as _;
    use sha2::Digest as _;
    let script = PANEL
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(script, _)| script)
        .expect("run-monitor.html has an inline script");
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script));
    let csp = csp(&hash);
    assert!(
        PANEL.contains(&format!(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
        )),
        "run-monitor.html lacks the CSP meta tag {csp:?} (after editing its script, put the \
         script's new hash in the tag)"
    );
    let lower = PANEL.to_ascii_lowercase();
    for external in [
        "http://",
        "https://",
        "ws://",
        "wss://",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(
            !lower.contains(external),
            "run-monitor.html references something outside itself ({external:?})"
        );
    }
    // One inline script and one inline style: nothing is loaded from a file either.
    assert_eq!(lower.matches("<script").count(), 1, "one inline script");
    assert!(!lower.contains("<script src"), "no script file");
    assert!(!lower.contains("<link"), "no linked style or icon");
}

/// Every blob URL the panel makes (the result download outside a host that downloads files
/// itself) is revoked once its download has started, on a later task: the URL would
/// otherwise keep the result's bytes alive for as long as the page is open. Checked on the
/// script's text, since this machine's browser test needs Chromium and the test packages.
#[test]
fn every_blob_url_the_panel_makes_is_revoked_after_its_download_starts() {
    let script = PANEL
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(script, _)| script)
        .expect("run-monitor.html has an inline script");
    let created: Vec<usize> = script
        .match_indices("URL.createObjectURL(")
        .map(|(at, _)| at)
        .collect();
    assert!(!created.is_empty(), "the panel makes no blob URL any more");
    for at in created {
        // The statement that makes the URL names it: `const <name> = URL.createObjectURL(`.
        let before = &script[..at];
        let name = before
            .trim_end()
            .strip_suffix('=')
            .and_then(|rest| rest.trim_end().rsplit(' ').next())
            .unwrap_or_else(|| {
                panic!(
                    "a blob URL that is not kept in a name: {}",
                    &script[at..at + 60]
                )
            });
        let rest = &script[at..];
        let click = rest
            .find(".click()")
            .unwrap_or_else(|| panic!("blob URL `{name}` is never clicked"));
        let revoke = format!("setTimeout(() => URL.revokeObjectURL({name}), 0)");
        let revoked = rest.find(&revoke).unwrap_or_else(|| {
            panic!("blob URL `{name}` is not revoked on a later task ({revoke})")
        });
        assert!(
            click < revoked,
            "blob URL `{name}` is revoked before its click"
        );
    }
}
