//! What reopening an interrupted call's session saves, measured with the real claude adapter
//! against the fake model server, which counts a model request's input tokens as a quarter of
//! its body's bytes. The call runs a tool (`MOCK_BASH=cat notes.txt`, a 24 KiB file) and is cut
//! off when the tool's result goes back to the model (a 401 there, so the run pauses
//! `auth_required`); its resume reopens the session and sends the continuation prompt. A cold
//! re-run of the same call is measured as what it is: the same call run from its prompt with
//! nothing in the way. Only claude is measured: the fake scripts a tool call for the Messages
//! API alone, and a call cut off before any work has nothing to save.

use crate::adapters::{Backend, Context, header};
use crate::support::fake_llm::RecordedRequest;

/// The model requests the fake answered.
fn answered(requests: &[RecordedRequest]) -> impl Iterator<Item = &RecordedRequest> {
    requests
        .iter()
        .filter(|request| request.method == "POST" && request.path == "/v1/messages")
        .filter(|request| request.status == 200)
}

/// The fake's own count of input tokens over the model requests it answered.
fn input_tokens(requests: &[RecordedRequest]) -> usize {
    answered(requests)
        .map(|request| request.body.len() / 4 + 1)
        .sum()
}

fn model_requests(requests: &[RecordedRequest]) -> usize {
    answered(requests).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_resume_sends_fewer_input_tokens_than_a_cold_run_of_the_call() {
    let context = Context::new(Backend::Claude).await;
    let line = "The quarterly notes: revenue, churn, hiring and the roadmap, line by line.\n";
    std::fs::write(
        context.project.join("notes.txt"),
        line.repeat(24 * 1024 / line.len()),
    )
    .expect("write the notes");
    let script = format!(
        "{}return await agent('Summarise the notes.\\nMOCK_BASH=cat notes.txt', {{ mode: 'default' }});\n",
        header(Backend::Claude, "notes")
    );
    let path = context.dir.path().join("notes.js");
    std::fs::write(&path, &script).expect("write script");
    let (path, project) = (
        path.display().to_string(),
        context.project.display().to_string(),
    );
    let run = [
        "run",
        &path,
        "--project-dir",
        &project,
        "--permissions",
        "allow",
    ];

    let before = context.fake.requests().len();
    let cold = context.agentprism(&run).await;
    assert_eq!(cold.code, Some(0), "{}", cold.describe());
    let cold_tokens = input_tokens(&context.fake.requests()[before..]);
    let cold_requests = model_requests(&context.fake.requests()[before..]);

    context.fake.fail_tool_results(Some(401));
    let cut_off = context.agentprism(&run).await;
    assert_eq!(cut_off.code, Some(3), "{}", cut_off.describe());
    let run_id = cut_off.run_id();
    assert_eq!(context.status(&run_id).await["reason"], "auth_required");
    context.fake.fail_tool_results(None);
    let before = context.fake.requests().len();
    let resumed = context
        .agentprism(&["resume", &run_id, "--permissions", "allow"])
        .await;
    assert_eq!(resumed.code, Some(0), "{}", resumed.describe());
    // The reopened session already holds the tool's result: the tool does not run again, so
    // the resume needs fewer model requests than the cold run (the tool use, then its result).
    let warm_requests = model_requests(&context.fake.requests()[before..]);
    assert!(
        warm_requests < cold_requests,
        "warm {warm_requests} requests, cold {cold_requests}"
    );
    let warm_tokens = input_tokens(&context.fake.requests()[before..]);

    eprintln!(
        "warm-cost: claude: cold run {cold_requests} requests, {cold_tokens} input tokens; \
         warm resume {warm_requests} requests, {warm_tokens} input tokens"
    );
    assert!(
        warm_tokens < cold_tokens,
        "warm {warm_tokens} is not below cold {cold_tokens}"
    );
    context.assert_no_processes_left().await;
}
