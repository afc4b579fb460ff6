//! The MCP Inspector's CLI (`inspector --cli`, from `@modelcontextprotocol/inspector`, which
//! ships its CLI inside since its version 2) lists agentprism's tools over Streamable HTTP and
//! over stdio (the shim), and prints no warning: its `--strict` schema portability check finds
//! nothing in the `workflow` tool's input schema.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::setup::Deps;
use crate::shim::World;

#[test]
fn the_inspector_lists_the_workflow_tool_without_warnings_over_http_and_stdio() {
    let deps = Deps::find();
    let world = World::new();
    let started = world.context.run(&["daemon", "start"]);
    assert_eq!(started.code(), 0, "daemon start: {}", started.stderr);
    let url = world.pointer().expect("a daemon pointer")["url"]
        .as_str()
        .expect("the daemon's url")
        .to_owned();
    list_tools(&deps, &world, &[url.as_str()]);

    // The Inspector starts a stdio server with an environment of its own plus `-e` pairs.
    let shim = env!("CARGO_BIN_EXE_agentprism-workflow");
    let mut target = vec![shim.to_owned()];
    for (key, value) in &world.context.env {
        if key.starts_with("AGENTPRISM_") {
            target.extend(["-e".to_owned(), format!("{key}={value}")]);
        }
    }
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    list_tools(&deps, &world, &target);
}

/// `tools/list` through the Inspector at `target`: it succeeds, lists `workflow` with `args`
/// as an object, and says nothing on stderr that is a warning or an error.
fn list_tools(deps: &Deps, world: &World, target: &[&str]) {
    let node = deps.get("node");
    let home = world.context.path("inspector-home");
    std::fs::create_dir_all(&home).expect("the Inspector's HOME");
    let output = Command::new(&node)
        .arg(deps.get("inspector_entry"))
        .arg("--cli")
        .args(target)
        // The default text format: `--format json` leaves the portability findings out.
        .args(["--method", "tools/list", "--strict"])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", path_with(&node))
        .stdin(Stdio::null())
        .output()
        .expect("run the Inspector");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let describe = || format!("{target:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert_eq!(output.status.code(), Some(0), "{}", describe());
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            let line = line.to_ascii_lowercase();
            line.contains("warn") || line.contains("error")
        })
        .collect();
    assert!(
        complaints.is_empty(),
        "the Inspector complained: {}",
        describe()
    );
    let listed: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("the Inspector's JSON ({error}): {}", describe()));
    let workflow = listed["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "workflow"))
        .unwrap_or_else(|| panic!("no workflow tool: {}", describe()));
    assert_eq!(
        workflow["inputSchema"]["properties"]["args"]["type"],
        "object",
        "{}",
        describe()
    );
}

fn path_with(node: &Path) -> String {
    let folder = node.parent().expect("node has a folder");
    format!("{}:/usr/bin:/bin", folder.display())
}
