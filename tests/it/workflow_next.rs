//! `structuredContent.next`: hosts show the model the structured result,
//! not the text, so every answer names the one call that moves the run on. Driven through
//! the workflow server's `McpHandler`, with the in-process instant runner.

use serde_json::{Value, json};

use crate::workflow_tool::{Setup, setup};

impl Setup {
    /// `next` of calling `arguments`, with the whole answer for messages.
    async fn next_of(&self, arguments: Value) -> (Value, Value) {
        let answer = self.call(arguments).await;
        (answer["structuredContent"]["next"].clone(), answer)
    }

    async fn run_settled(&self, script: &str) -> (String, Value) {
        let (next, ack) = self
            .next_of(json!({"action": "run", "projectDir": self.h.project, "script": script}))
            .await;
        let run_id = ack["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("{ack:#}"))
            .to_owned();
        assert_eq!(
            next,
            json!({"action": "status", "runId": run_id}),
            "{ack:#}"
        );
        self.h
            .engine
            .wait(&agentprism::model::RunId::parse(&run_id).unwrap())
            .await;
        (run_id, next)
    }
}

const HEADER: &str = "export const meta = { name: 'x', description: 'd', model: 'codex' };\n";

#[tokio::test]
async fn a_completed_run_points_at_its_result_pages_until_the_last() {
    let s = setup();
    let (run_id, status) = s
        .run_settled(&format!(
            "{HEADER}await agent('a');\nreturn 'y'.repeat(20000);"
        ))
        .await;
    let (mut next, answer) = s.next_of(status).await;
    assert_eq!(
        next,
        json!({"action": "result", "runId": run_id, "offset": 0, "maxBytes": 4096}),
        "{answer:#}"
    );
    // 20,002 bytes: four full pages and a last one, each naming the following page.
    for offset in [4096, 8192, 12288, 16384] {
        let (following, page) = s.next_of(next).await;
        assert_eq!(page["structuredContent"]["hasMore"], true, "{page:#}");
        assert_eq!(
            following,
            json!({"action": "result", "runId": run_id, "offset": offset, "maxBytes": 4096})
        );
        next = following;
    }
    let (last, page) = s.next_of(next).await;
    assert_eq!(page["structuredContent"]["hasMore"], false, "{page:#}");
    assert_eq!(last, Value::Null, "nothing follows the last page");
    // A run completed without a value has nothing to read.
    let (run_id, status) = s.run_settled(&format!("{HEADER}await agent('a');")).await;
    let (next, answer) = s.next_of(status).await;
    assert_eq!(next, Value::Null, "{run_id}: {answer:#}");
}

#[tokio::test]
async fn a_checkpoint_pause_points_at_resume_with_the_reply_shape() {
    let s = setup();
    let (run_id, status) = s
        .run_settled(&format!(
            "{HEADER}await agent('a');\nconst ok = await checkpoint('go?');\nconst pick = await checkpoint('which?', {{kind: 'select', choices: ['red', 'blue']}});\nreturn {{ok, pick}};"
        ))
        .await;
    let (next, answer) = s.next_of(status.clone()).await;
    assert_eq!(
        next,
        json!({"action": "resume", "runId": run_id, "checkpointReplies": {"1": "<true or false>"}}),
        "{answer:#}"
    );
    let resumed = s
        .call(json!({"action": "resume", "runId": run_id, "checkpointReplies": {"1": true}}))
        .await;
    assert_eq!(resumed["structuredContent"]["next"], status, "{resumed:#}");
    s.h.engine
        .wait(&agentprism::model::RunId::parse(&run_id).unwrap())
        .await;
    let (next, answer) = s.next_of(status).await;
    assert_eq!(
        next,
        json!({"action": "resume", "runId": run_id, "checkpointReplies": {"2": "<one of: red, blue>"}}),
        "{answer:#}"
    );
}

#[tokio::test]
async fn a_pending_setup_points_at_setup_response_and_a_decline_at_nothing() {
    let s = setup();
    let ack = s
        .call(json!({"action": "run", "projectDir": s.h.project, "script": "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');"}))
        .await;
    let document = &ack["structuredContent"];
    let run_id = document["runId"].as_str().unwrap();
    let setup_id = document["setup"]["request"]["id"].as_str().unwrap();
    assert_eq!(
        document["next"],
        json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": {"action": "accept", "content": {"approve": true}}}),
        "{ack:#}"
    );
    let (next, status) = s
        .next_of(json!({"action": "status", "runId": run_id}))
        .await;
    assert_eq!(next, document["next"], "{status:#}");
    let (next, declined) = s
        .next_of(json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": {"action": "decline"}}))
        .await;
    assert_eq!(next, Value::Null, "{declined:#}");
    let (next, status) = s
        .next_of(json!({"action": "status", "runId": run_id}))
        .await;
    assert_eq!(next, Value::Null, "a declined run cannot go on: {status:#}");
}

#[tokio::test]
async fn stopped_failed_and_config_answers_name_their_next_call() {
    let s = setup();
    let (run_id, status) = s
        .run_settled(&format!(
            "{HEADER}const r = await agent('a');\nif (r.startsWith('ECHO')) throw new Error('boom');\nreturn r;"
        ))
        .await;
    let (next, answer) = s.next_of(status).await;
    assert_eq!(
        answer["structuredContent"]["status"], "failed",
        "{answer:#}"
    );
    assert_eq!(next, json!({"action": "resume", "runId": run_id}));
    let (next, answer) = s.next_of(json!({"action": "stop", "runId": run_id})).await;
    assert_eq!(answer["structuredContent"]["alreadyTerminal"], true);
    assert_eq!(next, json!({"action": "resume", "runId": run_id}));
    let (next, answer) = s
        .next_of(json!({"action": "config", "projectDir": s.h.project}))
        .await;
    assert_eq!(
        next,
        json!({"action": "run", "projectDir": s.h.project, "script": "<the workflow script text>"}),
        "{answer:#}"
    );
}
