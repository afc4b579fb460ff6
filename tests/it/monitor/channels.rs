//! Claude Code channels: a legacy session receives `notifications/claude/channel` exactly
//! once per automatic message of the runs its own `run`, `resume` or `status` calls named,
//! with `meta: {run_id, kind, status, event_id}`; other sessions never see them; a session
//! that starts following through `status` gets nothing that status answer already carried.
//!
//! One run goes through every kind with the mock agent: a backend approval (`setup`), a
//! parked permission request (`permission`), a checkpoint (`checkpoint`), a requested pause
//! (`paused`) and its completion (`terminal`). Notifications are read from the sessions'
//! own event streams, as the HTTP GET stream or stdio would carry them.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Host, is_error};
use crate::engine::mock_harness;
use crate::support::context::mock_agent_binary;

/// A session's channel notifications, collected by a task reading its event stream.
struct Inbox {
    receiver: mpsc::UnboundedReceiver<Value>,
}

impl Inbox {
    fn of(host: &Host, session: &str) -> Inbox {
        let mut events = host.server.session_events(session).expect("a live session");
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = events.next().await {
                if message["method"] == "notifications/claude/channel"
                    && sender.send(message["params"].clone()).is_err()
                {
                    break;
                }
            }
        });
        Inbox { receiver }
    }

    /// The next channel notification, which must be of `kind`.
    async fn next(&mut self, kind: &str) -> Value {
        let params = tokio::time::timeout(Duration::from_secs(60), self.receiver.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} notification within a minute"))
            .expect("the stream is open");
        assert_eq!(params["meta"]["kind"], kind, "{params:#}");
        params
    }

    /// Everything received so far.
    fn drain(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Ok(params) = self.receiver.try_recv() {
            all.push(params);
        }
        all
    }
}

/// Polls `status` (with a deadline) until `done` holds: observation, not a timed wait.
async fn status_until(
    host: &Host,
    session: &str,
    run_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let status = host
            .call(
                session,
                "workflow",
                json!({"action": "status", "runId": run_id}),
            )
            .await;
        if done(&status["structuredContent"]) {
            return status["structuredContent"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{status:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn script() -> String {
    let mock = mock_agent_binary();
    format!(
        "export const meta = {{ name: 'chan', description: 'd', model: 'mine', backends: {{ mine: {{ command: {mock:?} }} }} }};\n\
         const p = await agent('x\\n@mock permission');\n\
         const ok = await checkpoint('go on?');\n\
         const slow = await agent('y\\n@mock delay 2000');\n\
         return {{p, ok, slow}};",
        mock = mock.display().to_string()
    )
}

/// Checks one notification's shape for `run_id`, returning its event id.
fn checked(params: &Value, run_id: &str, status: &str) -> String {
    let meta = params["meta"].as_object().expect("meta");
    let keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    assert_eq!(keys, ["run_id", "kind", "status", "event_id"], "{params:#}");
    assert_eq!(meta["run_id"], run_id);
    assert_eq!(meta["status"], status, "{params:#}");
    assert!(meta.values().all(Value::is_string), "{params:#}");
    let content = params["content"].as_str().unwrap();
    assert!(content.contains(run_id), "{content}");
    meta["event_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_session_hears_each_kind_once_for_the_runs_it_named_and_nobody_else_does() {
    let host = Host::new(mock_harness());
    let named = host.initialize(json!({})).await;
    let other = host.initialize(json!({})).await;
    let mut inbox = Inbox::of(&host, &named);
    let mut others = Inbox::of(&host, &other);

    // setup: the run waits for approval of its own backend.
    let ack = host
        .call(
            &named,
            "workflow",
            json!({"action": "run", "projectDir": host.h.project, "script": script()}),
        )
        .await;
    let run_id = ack["structuredContent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let setup_id = ack["structuredContent"]["setup"]["request"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{ack:#}"))
        .to_owned();
    let setup = inbox.next("setup").await;
    assert_eq!(
        checked(&setup, &run_id, "pending"),
        format!("setup-{setup_id}")
    );

    // The other session's own run: it hears about that one only.
    let mine = host
        .run(
            &other,
            "export const meta = { name: 'o', description: 'd', model: 'mock' };\nreturn await agent('o');",
        )
        .await;
    let terminal = others.next("terminal").await;
    checked(&terminal, &mine, "completed");

    // permission, after the approval.
    let approved = host
        .call(
            &named,
            "workflow",
            json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": {"action": "accept", "content": {"approve": true}}}),
        )
        .await;
    assert_eq!(
        approved["structuredContent"]["accepted"], true,
        "{approved:#}"
    );
    let permission = inbox.next("permission").await;
    let permission_event = checked(&permission, &run_id, "running");
    let status = status_until(&host, &named, &run_id, |s| {
        s["pendingPermissions"].get(0).is_some()
    })
    .await;
    let pending = &status["pendingPermissions"][0];
    let permission_id = pending["permissionId"].as_str().unwrap();
    assert_eq!(permission_event, format!("permission-{permission_id}"));

    // A restarted session re-attaches on status, and hears nothing already in that answer.
    let restarted = host.initialize(json!({})).await;
    let mut restarted_inbox = Inbox::of(&host, &restarted);
    host.call(
        &restarted,
        "workflow",
        json!({"action": "status", "runId": run_id}),
    )
    .await;

    let answered = host
        .call(
            &named,
            "workflow",
            json!({"action": "permissions-response", "runId": run_id, "permissionId": permission_id, "response": {"outcome": {"outcome": "selected", "optionId": pending["options"][0]["optionId"]}}}),
        )
        .await;
    assert!(!is_error(&answered), "{answered:#}");

    // checkpoint: the run pauses on checkpoint().
    let checkpoint = inbox.next("checkpoint").await;
    let checkpoint_event = checked(&checkpoint, &run_id, "paused");
    assert_eq!(checkpoint_event, "checkpoint-1-1");
    assert!(checkpoint["content"].as_str().unwrap().contains("go on?"));
    let heard = restarted_inbox.next("checkpoint").await;
    assert_eq!(heard["meta"]["event_id"], "checkpoint-1-1");
    host.settle(&run_id).await;

    // paused: a requested pause while the slow agent runs.
    let resumed = host
        .call(
            &named,
            "workflow",
            json!({"action": "resume", "runId": run_id, "checkpointReplies": {"1": true}}),
        )
        .await;
    assert!(!is_error(&resumed), "{resumed:#}");
    status_until(&host, &named, &run_id, |s| {
        s["calls"].as_array().is_some_and(|calls| {
            calls
                .iter()
                .any(|c| c["index"] == 2 && c["status"] == "running")
        })
    })
    .await;
    let pause = host
        .call(
            &named,
            "workflow",
            json!({"action": "pause", "runId": run_id}),
        )
        .await;
    assert!(!is_error(&pause), "{pause:#}");
    let paused = inbox.next("paused").await;
    assert_eq!(checked(&paused, &run_id, "paused"), "paused-2-requested");
    host.settle(&run_id).await;

    // terminal: resumed to the end.
    let resumed = host
        .call(
            &named,
            "workflow",
            json!({"action": "resume", "runId": run_id}),
        )
        .await;
    assert!(!is_error(&resumed), "{resumed:#}");
    let terminal = inbox.next("terminal").await;
    assert_eq!(
        checked(&terminal, &run_id, "completed"),
        "terminal-3-completed"
    );
    host.settle(&run_id).await;

    // A barrier: a later run of the same session is heard after anything still owed for the
    // first, so what was heard before it is all there was.
    let sentinel = host
        .run(
            &named,
            "export const meta = { name: 's', description: 'd', model: 'mock' };\nreturn await agent('s');",
        )
        .await;
    let last = inbox.next("terminal").await;
    assert_eq!(
        last["meta"]["run_id"], sentinel,
        "no repeat of {run_id}: {last:#}"
    );
    assert_eq!(inbox.drain(), Vec::<Value>::new());

    // The restarted session heard the checkpoint (after its status), the pause and the end,
    // and nothing from before it looked.
    let mut heard: Vec<String> = vec![heard["meta"]["kind"].as_str().unwrap().to_owned()];
    heard.push(
        restarted_inbox.next("paused").await["meta"]["kind"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    heard.push(
        restarted_inbox.next("terminal").await["meta"]["kind"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    assert_eq!(heard, ["checkpoint", "paused", "terminal"]);
    // The other session named none of this run's calls: it heard only its own run.
    assert!(
        others
            .drain()
            .iter()
            .all(|params| params["meta"]["run_id"] == mine),
        "another session's run reached it"
    );
}
