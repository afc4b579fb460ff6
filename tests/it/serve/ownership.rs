//! Run ownership over HTTP: a run belongs to the session that started it (or, with
//! `--principal-header`, to the principal), and anyone else gets exactly the answer of a
//! genuinely unknown id, through the `run/*` methods, the `mhl_run_*` tools and the
//! `mhl://run/*` resources alike.

use serde_json::{Value, json};

use super::{Client, Served, copy_folder, fixtures, made_up_id};
use crate::support::context::TestContext;

/// `method` with `{runId: real}` and `{runId: fake}` from `stranger`: both answers, normalised.
fn both(stranger: &Client, method: &str, real: &str, fake: &str) -> (String, String) {
    let of_real = stranger.send(method, json!({"runId": real}));
    let of_fake = stranger.send(method, json!({"runId": fake}));
    assert_eq!(
        of_real.reply.status, of_fake.reply.status,
        "{method}: HTTP status"
    );
    (of_real.normalised(), of_fake.normalised())
}

/// A `tools/call` of `tool` with `{runId: real}` and `{runId: fake}`, normalised.
fn both_tools(stranger: &Client, tool: &str, real: &str, fake: &str) -> (String, String) {
    let call = |run_id: &str| {
        stranger.send(
            "tools/call",
            json!({"name": tool, "arguments": {"runId": run_id}}),
        )
    };
    let (of_real, of_fake) = (call(real), call(fake));
    assert_eq!(
        of_real.reply.status, of_fake.reply.status,
        "{tool}: HTTP status"
    );
    (of_real.normalised(), of_fake.normalised())
}

/// `resources/read` of the run's `part` for `real` and `fake`, normalised, with the id in the
/// echoed uri replaced too (the uri is the caller's own text, not an oracle).
fn both_resources(stranger: &Client, part: &str, real: &str, fake: &str) -> (String, String) {
    let read = |run_id: &str| {
        let answer = stranger.send(
            "resources/read",
            json!({"uri": format!("mhl://run/{run_id}/{part}")}),
        );
        (
            answer.reply.status,
            answer.normalised().replace(run_id, "RUN"),
        )
    };
    let (real_status, of_real) = read(real);
    let (fake_status, of_fake) = read(fake);
    assert_eq!(
        real_status, fake_status,
        "resources/read {part}: HTTP status"
    );
    (of_real, of_fake)
}

/// Every owner-gated answer `stranger` can get about `real` equals the one about `fake`, and
/// it is the "unknown" answer.
fn assert_blind(stranger: &Client, real: &str, fake: &str) {
    for method in ["run/status", "run/resume", "run/cancel", "run/logs"] {
        let (of_real, of_fake) = both(stranger, method, real, fake);
        assert_eq!(of_real, of_fake, "{method} of another session's run");
        let message: Value = serde_json::from_str(&of_real).unwrap();
        assert_eq!(message["error"]["code"], -32602, "{method}: {message}");
        assert_eq!(message["error"]["message"], "unknown runId", "{method}");
    }
    for tool in [
        "mhl_run_status",
        "mhl_run_resume",
        "mhl_run_cancel",
        "mhl_run_logs",
    ] {
        let (of_real, of_fake) = both_tools(stranger, tool, real, fake);
        assert_eq!(of_real, of_fake, "{tool} of another session's run");
        let message: Value = serde_json::from_str(&of_real).unwrap();
        assert_eq!(message["result"]["isError"], true, "{tool}: {message}");
        assert_eq!(
            message["result"]["content"][0]["text"], "unknown runId",
            "{tool}"
        );
    }
    for part in ["logs", "result"] {
        let (of_real, of_fake) = both_resources(stranger, part, real, fake);
        assert_eq!(
            of_real, of_fake,
            "resources/read {part} of another session's run"
        );
        let message: Value = serde_json::from_str(&of_real).unwrap();
        assert_eq!(
            message["error"]["message"], "unknown resource",
            "{part}: {message}"
        );
    }
    assert_eq!(stranger.method("run/list", json!({}))["runs"], json!([]));
    let listed = stranger.tool("mhl_run_list", json!({}));
    assert_eq!(listed["structuredContent"], json!({"runs": []}), "{listed}");
}

#[test]
fn another_session_sees_a_run_exactly_as_an_unknown_id() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let gate = ctx.path("gate");
    let served = Served::start(&ctx, &folder, &[]);
    let owner = served.session(&[]);
    let stranger = served.session(&[]);
    let step = format!("@mock wait_file {}", gate.display());
    let run_id = owner.start("slow", json!({"step": step}));
    let fake = made_up_id(&run_id);
    assert_eq!(owner.status(&run_id)["state"], "working");

    assert_blind(&stranger, &run_id, &fake);
    // The stranger's cancel and resume did nothing to the run.
    let view = owner.status(&run_id);
    assert_eq!(view["state"], "working", "{view}");
    assert_eq!(view["generation"], 1, "{view}");
    let listed = owner.method("run/list", json!({}));
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str());

    std::fs::write(&gate, "").unwrap();
    let done = owner.wait_state(&run_id, "completed");
    assert_eq!(done["result"], json!({"steps": 3}), "{done}");
    // The owner reads the result resource; the stranger still cannot tell the run exists.
    let result = owner
        .send(
            "resources/read",
            json!({"uri": format!("mhl://run/{run_id}/result")}),
        )
        .result();
    let text = result["contents"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"steps": 3})
    );
    assert_blind(&stranger, &run_id, &fake);
    assert_eq!(owner.status(&run_id)["state"], "completed");
}

#[test]
fn with_a_principal_header_ownership_follows_the_header() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let token = "principal-test-token-5e1f";
    let served = Served::start(
        &ctx,
        &folder,
        &["--token", token, "--principal-header", "X-User"],
    );
    let bearer = format!("Bearer {token}");
    let alice_one = served.session(&[("Authorization", &bearer), ("X-User", "alice")]);
    let alice_two = served.session(&[("Authorization", &bearer), ("X-User", "alice")]);
    let bob = served.session(&[("Authorization", &bearer), ("X-User", "bob")]);

    let run_id = alice_one.start("approval", json!({"request": "ship it"}));
    let fake = made_up_id(&run_id);
    let view = alice_one.wait_state(&run_id, "input_required");
    // Another session of the same principal sees and lists the run.
    assert_eq!(
        alice_two.status(&run_id)["state"],
        "input_required",
        "{view}"
    );
    let listed = alice_two.method("run/list", json!({}));
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str(), "{listed}");
    // So does a stateless request carrying the same principal.
    let stateless = Client::stateless(
        served.address,
        &[("Authorization", &bearer), ("X-User", "alice")],
    );
    assert_eq!(stateless.status(&run_id)["state"], "input_required");

    assert_blind(&bob, &run_id, &fake);
    let bob_stateless = Client::stateless(
        served.address,
        &[("Authorization", &bearer), ("X-User", "bob")],
    );
    assert_blind(&bob_stateless, &run_id, &fake);

    // The second alice session answers the checkpoint the first one's run waits at.
    let index = view["checkpoint"]["callIndex"].clone();
    let key = index
        .as_u64()
        .map(|index| index.to_string())
        .unwrap_or_else(|| panic!("no checkpoint callIndex in {view}"));
    let resumed = alice_two.method(
        "run/resume",
        json!({"runId": run_id, "arguments": {"checkpointReplies": {key: true}}}),
    );
    assert_eq!(resumed["generation"], 2, "{resumed}");
    let done = alice_one.wait_state(&run_id, "completed");
    assert_eq!(
        done["result"],
        json!({"summary": "ready to act on: ship it", "approved": true}),
        "{done}"
    );

    // Without the principal header, a request with the right token is still refused.
    let headerless = Client::stateless(served.address, &[("Authorization", &bearer)])
        .send("run/list", json!({}));
    assert_eq!(headerless.reply.status, 401, "{:?}", headerless.reply);
}
