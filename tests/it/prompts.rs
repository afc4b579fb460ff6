//! Saved workflows as MCP prompts against the real per-user daemon (`agentprism daemon run`,
//! its own HOME, the mock agent), driven by `tests/e2e/prompts_client.mjs` with the TypeScript
//! SDK v1 client: the client's root makes the project's workflows appear, arguments come from
//! the input schema, a bad argument is refused naming it, and the JSON call in a prompt's text,
//! sent as is, runs the workflow (a project one and a bundled one) to completion. The
//! 2026-07-28 era, which has no roots, lists no project workflows. The same client confirms
//! (and declines) a run of 101 agent calls through the elicitation form.

use std::path::Path;
use std::process::Command;

use nix::sys::signal::Signal;

use crate::daemon::{World, wait_ready};
use crate::sdk_clients::{
    CLIENT_DEADLINE, Sweeper, check_client, path_from_manifest, run_with_deadline,
};
use crate::support::context::DEADLINE;

const GREET: &str = "export const meta = {
  name: 'greet', description: 'Greets someone', whenToUse: 'when greeting someone',
  model: 'mock',
  inputSchema: { type: 'object', properties: {
    who: { type: 'string', description: 'whom to greet' },
    times: { type: 'integer', description: 'how often' },
    tags: { type: 'array', items: { type: 'string' } },
  }, required: ['who'] },
};
return await agent(`hello ${args.who} x${args.times ?? 1}`);
";

#[test]
fn saved_workflows_are_prompts_whose_text_runs_them() {
    let world = World::new();
    let _sweeper = Sweeper {
        home: world.ctx.path("home"),
    };
    let project = std::fs::canonicalize(world.ctx.project()).unwrap();
    world
        .ctx
        .write("project/.agentprism/workflows/greet.js", GREET);
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);

    let node = path_from_manifest("node", "Node 22 for the TypeScript MCP clients");
    let sdk = path_from_manifest("ts_sdk_v1", "the TypeScript MCP SDK v1");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/prompts_client.mjs");
    let mut client = Command::new(node);
    client
        .arg(script)
        .args(["--http", &record.url, "--project"])
        .arg(&project)
        .arg("--sdk")
        .arg(sdk)
        .env_clear()
        .envs(&world.ctx.env)
        .current_dir(&project);
    let outcome = run_with_deadline(client, CLIENT_DEADLINE);

    daemon.signal(Signal::SIGTERM);
    let finished = daemon.finish(DEADLINE);
    check_client("prompts client", &outcome, &finished.stderr)();
}
