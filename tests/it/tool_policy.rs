//! An agent definition's `tools`/`disallowedTools` at the engine's permission boundary, with
//! the mock agent's permission requests (`@mock permission KIND NAME`): a tool the definition
//! disallows or does not list is denied before the request is ever pending (no permission
//! notice, nothing in `pendingPermissions`) and the denial is a `permissionDenied` event; an
//! allowed tool waits for its answer as before. Then claude-agent-acp against the fake model
//! server, whose model asks for a disallowed `Bash`, on the built-in backend (the policy
//! passed to Claude Code) and on a host-defined one (the policy at the engine's boundary).

use agentprism::engine::StatusQuery;
use agentprism::engine::events::RunNotice;
use agentprism::engine::runner::PermissionOutcome;
use agentprism::model::RunId;
use agentprism::store::EventReads;
use serde_json::{Value, json};

use crate::engine::{Harness, mock_harness};

/// Far more than a mock call takes.
const RUN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

const HEADER: &str = "export const meta = { name: 'x', description: 'd', model: 'mock' };\n";

fn define(h: &Harness, name: &str, frontmatter: &str) {
    let folder = h.project.join(".agentprism/agents");
    std::fs::create_dir_all(&folder).expect("agents folder");
    std::fs::write(
        folder.join(format!("{name}.md")),
        format!("---\n{frontmatter}\n---\nYou help.\n"),
    )
    .expect("write definition");
}

async fn events_of(h: &Harness, run_id: &RunId, kind: &str) -> Vec<Value> {
    h.store
        .events(run_id, 0, 1000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event.value())
        .filter(|event| event["type"] == kind)
        .collect()
}

/// Runs `directive` in a call through the definition `name` to its end, and returns the status
/// and whether any permission request of the run was ever pending.
async fn run_denied(h: &Harness, name: &str, directive: &str) -> (RunId, Value, bool) {
    let mut notices = h.engine.subscribe();
    let script =
        format!("{HEADER}return await agent('x\\n{directive}', {{ agentType: '{name}' }});");
    let run_id = h.start(&script).await.expect("admitted");
    // A request the policy lets through waits for an answer nobody gives here.
    tokio::time::timeout(RUN_DEADLINE, h.engine.wait(&run_id))
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {RUN_DEADLINE:?}"));
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    let mut asked = false;
    while let Ok(notice) = notices.try_recv() {
        asked |= matches!(notice, RunNotice::Permission { run_id: ref id, .. } if *id == run_id);
    }
    (run_id, status, asked)
}

#[tokio::test]
async fn a_disallowed_tool_is_denied_before_anyone_is_asked() {
    let h = mock_harness();
    define(&h, "nobash", "disallowedTools: [Bash]");
    let (run_id, status, asked) = run_denied(&h, "nobash", "@mock permission execute bash").await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(status["outcome"]["result"], json!("PERMISSION: reject"));
    assert!(!asked, "the request was shown as pending");
    assert!(
        status["pendingPermissions"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{status:#}"
    );
    let denied = events_of(&h, &run_id, "permissionDenied").await;
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!(denied[0]["callIndex"], 0);
    assert_eq!(denied[0]["tool"], "bash");
    assert_eq!(denied[0]["rule"], "disallowedTools: Bash");
    assert_eq!(denied[0]["title"], "Mock execute");
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_tool_the_list_does_not_name_is_denied_by_its_kind() {
    let h = mock_harness();
    define(&h, "reader", "tools: Read, Grep");
    // No adapter name: the kind `execute` stands for Bash, which the list does not name.
    let (run_id, status, asked) = run_denied(&h, "reader", "@mock permission execute").await;
    assert_eq!(
        status["outcome"]["result"],
        json!("PERMISSION: reject"),
        "{status:#}"
    );
    assert!(!asked, "the request was shown as pending");
    let denied = events_of(&h, &run_id, "permissionDenied").await;
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!(
        (&denied[0]["tool"], &denied[0]["rule"]),
        (&json!("kind:execute"), &json!("tools: not listed"))
    );
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_allowed_tool_waits_for_the_usual_answer() {
    let h = mock_harness();
    define(
        &h,
        "builder",
        "tools: [Read, Bash]\ndisallowedTools: WebFetch",
    );
    let mut notices = h.engine.subscribe();
    let script = format!(
        "{HEADER}return await agent('x\\n@mock permission execute Bash', {{ agentType: 'builder' }});"
    );
    let run_id = h.start(&script).await.expect("admitted");
    let permission_id = loop {
        match notices.recv().await.expect("a notice") {
            RunNotice::Permission {
                run_id: id,
                permission_id,
                ..
            } if id == run_id => break permission_id,
            _ => {}
        }
    };
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        status["pendingPermissions"][0]["permissionId"],
        permission_id.as_str()
    );
    let allow = PermissionOutcome::Selected {
        option_id: "allow".into(),
    };
    h.engine
        .respond_permission(&run_id, &permission_id, allow)
        .await
        .expect("answered");
    h.engine.wait(&run_id).await;
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        status["outcome"]["result"],
        json!("PERMISSION: allow"),
        "{status:#}"
    );
    assert!(events_of(&h, &run_id, "permissionDenied").await.is_empty());
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

/// claude-agent-acp against the fake model server, whose model asks for `Bash` (to create a
/// file) in a session whose definition disallows it, with the CLI set to allow every request
/// it sees. Both sessions run in Claude Code's `default` mode, where it asks before a shell
/// command (its own default, `auto`, lets a classifier decide without asking). On the built-in `claude` backend the list reaches Claude Code as its own
/// `disallowedTools`, so Claude Code refuses the tool itself; on a host-defined backend that
/// runs the same adapter (whose `_meta` form agentprism does not assume) the adapter's
/// permission request meets the engine's policy, which denies it. Either way the file is never
/// created and the model gets a tool result, not a run.
#[tokio::test]
async fn claude_never_runs_a_bash_the_definition_disallows() {
    use crate::adapters::{Backend, Context};

    let mut context = Context::new(Backend::Claude).await;
    let node = context.deps.get("node").display().to_string();
    let entry = context.deps.get("claude_acp_entry").display().to_string();
    context.extra_env.push((
        "AGENTPRISM_BACKENDS".into(),
        json!({"hostclaude": {"command": node, "args": [entry]}}).to_string(),
    ));
    let folder = context.project.join(".agentprism/agents");
    std::fs::create_dir_all(&folder).expect("agents folder");
    std::fs::write(
        folder.join("nobash.md"),
        "---\ndisallowedTools: [Bash]\n---\nYou help.\n",
    )
    .expect("write definition");
    let built_in = context.dir.path().join("built-in-ran");
    let hosted = context.dir.path().join("hosted-ran");
    let script = format!(
        "export const meta = {{ name: 'policy', description: 'd', model: 'claude' }};\n\
         const builtIn = await agent('Run it.\\nMOCK_BASH=touch {}', {{ agentType: 'nobash', mode: 'default' }});\n\
         const hosted = await agent('Run it.\\nMOCK_BASH=touch {}', {{ agentType: 'nobash', model: 'hostclaude', mode: 'default' }});\n\
         return {{ builtIn, hosted }};\n",
        built_in.display(),
        hosted.display()
    );
    let path = context.dir.path().join("policy.js");
    std::fs::write(&path, script).expect("write script");
    let project = context.project.display().to_string();
    let outcome = context
        .agentprism(&[
            "run",
            &path.display().to_string(),
            "--project-dir",
            &project,
            "--permissions",
            "allow",
        ])
        .await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let run_id = outcome.run_id();
    assert!(!built_in.exists(), "the built-in claude ran Bash");
    assert!(!hosted.exists(), "the host-defined claude ran Bash");
    let status = context.status(&run_id).await;
    let result = &status["outcome"]["result"];
    for call in ["builtIn", "hosted"] {
        let answer = result[call].as_str().unwrap_or_default();
        assert!(
            answer.starts_with("MOCK-TOOL-RESULT:"),
            "{call}: the model got no tool result: {status:#}"
        );
    }
    let store = agentprism::store::SqliteStore::open(&context.root).expect("store");
    let run_id = RunId::parse(&run_id).expect("run id");
    let denied: Vec<Value> = store
        .events(&run_id, 0, 1000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event.value())
        .filter(|event| event["type"] == "permissionDenied")
        .collect();
    // Only the host-defined backend's request reached the engine; the built-in one never asked.
    assert_eq!(denied.len(), 1, "{denied:#?} {status:#}");
    assert_eq!(denied[0]["callIndex"], 1);
    // claude-agent-acp names its tool in the request, so the rule matched the name, not a kind.
    assert_eq!(denied[0]["tool"], "Bash");
    assert_eq!(denied[0]["rule"], "disallowedTools: Bash");
    context.assert_no_processes_left().await;
}
