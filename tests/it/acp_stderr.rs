//! What an agent's stderr adds to a failure, against a fake ACP agent written in `sh`: Claude
//! Code's refusal to run as root gets the advice that names `IS_SANDBOX=1`, and each probe on
//! a shared adapter process quotes only what the adapter wrote during that probe.
//!
//! The fakes answer by pattern on each request line, so they need only `sh` and `sed`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::runner::{AgentRunner, BackendOrigin, BackendSpec};
use agentprism::env::EnvSnapshot;

/// Claude Code's words when asked to skip permission prompts as root without `IS_SANDBOX=1`.
const REFUSAL: &str =
    "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons";

/// Generous: two cores are shared by parallel tests; the fakes answer in milliseconds.
const DEADLINE: Duration = Duration::from_secs(20);

fn sh_backend(script: String) -> BackendSpec {
    BackendSpec {
        id: "claude".to_owned(),
        command: "sh".to_owned(),
        args: vec!["-c".to_owned(), script],
        env: BTreeMap::new(),
        session_meta: None,
        structured_output_tool: true,
        file_roots: Vec::new(),
        origin: BackendOrigin::Builtin,
    }
}

fn runner() -> AcpRunner {
    let env = EnvSnapshot::from_pairs([("PATH", std::env::var("PATH").unwrap_or_default())]);
    let mut config = AcpConfig::new(env);
    config.supervision.reaper = Some(PathBuf::from(env!("CARGO_BIN_EXE_agentprism")));
    config.init_timeout = Duration::from_secs(10);
    config.shutdown_grace = Duration::from_millis(500);
    AcpRunner::new(config)
}

async fn probe_error(runner: &AcpRunner, backend: &BackendSpec) -> String {
    let report = tokio::time::timeout(DEADLINE, runner.probe(backend, None, &std::env::temp_dir()))
        .await
        .expect("the probe finished in time");
    assert!(!report.probed, "{report:?}");
    report.error.expect("a failed probe says why")
}

fn assert_advice(error: &str) {
    assert!(error.contains(REFUSAL), "{error}");
    assert!(error.contains("IS_SANDBOX=1"), "{error}");
    assert!(error.contains("AGENTPRISM_CLAUDE_ACP_CMD=env"), "{error}");
    assert!(error.contains("agentprism daemon stop"), "{error}");
}

#[tokio::test]
async fn an_agent_that_refuses_root_gets_advice_naming_is_sandbox() {
    let runner = runner();
    let backend = sh_backend(format!("echo '{REFUSAL}' >&2; exit 1"));
    let error = probe_error(&runner, &backend).await;
    assert_advice(&error);
    runner.shutdown(Duration::from_secs(3)).await;
}

/// The adapter stays up while each session's Claude Code refuses (as claude-agent-acp does),
/// so both probes run on one pooled process and its stderr holds both refusals.
#[tokio::test]
async fn each_probe_quotes_only_the_stderr_of_its_own_request() {
    let script = format!(
        r#"n=0
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":{{"protocolVersion":1,"agentCapabilities":{{}}}}}}\n' "$id" ;;
    *'"session/new"'*)
      n=$((n + 1))
      echo "starting Claude Code for session #$n" >&2
      echo '{REFUSAL}' >&2
      printf '{{"jsonrpc":"2.0","id":%s,"error":{{"code":-32603,"message":"Internal error: Claude Code process exited with code 1"}}}}\n' "$id" ;;
  esac
done"#
    );
    let runner = runner();
    let backend = sh_backend(script);
    let first = probe_error(&runner, &backend).await;
    let second = probe_error(&runner, &backend).await;
    for (error, own, other) in [(&first, "#1", "#2"), (&second, "#2", "#1")] {
        assert!(error.contains(&format!("session {own}")), "{error}");
        assert!(!error.contains(&format!("session {other}")), "{error}");
    }
    for error in [&first, &second] {
        assert_eq!(error.matches(REFUSAL).count(), 1, "{error}");
        assert_advice(error);
    }
    runner.shutdown(Duration::from_secs(3)).await;
}
