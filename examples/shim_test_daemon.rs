//! A stand-in daemon for the shim's integration tests: the workflow MCP server over Streamable
//! HTTP on 127.0.0.1, publishing its record and the family pointer and answering
//! `/healthz?challenge=` with the identity proof, as daemon.md 1.1 and 1.4 describe. It takes
//! the command line the shim spawns (`daemon run --instance-id <uuid>`) and is used through
//! `AGENTPRISM_DAEMON_BIN`. Test-only knobs, outside the fingerprinted `AGENTPRISM_` names:
//!
//! - `SHIM_TEST_DAEMON_DIE_AFTER_INITIALIZED=1`: exit 1 as soon as a session is initialized
//!   (daemon.md 3 scenario 11).
//! - `POST /debug/evict?session=<id>` evicts a session (scenario 10's test hook).

use std::sync::Arc;
use std::time::Duration;

use agentprism::discovery::pointer::claim_pointer;
use agentprism::discovery::{
    Claim, DaemonRecord, Paths, RunControlKey, clear_pointer_if_mine, current_fingerprint,
    healthz_proof, process_alive_as, remove_own_record,
};
use agentprism::env::EnvSnapshot;
use agentprism::mcp::{McpServer, ServerOptions};
use agentprism::transport::http::{HttpBody, HttpOptions, Intercept, serve};
use serde_json::json;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--version") {
        println!("agentprism {}", env!("CARGO_PKG_VERSION"));
        return std::process::ExitCode::SUCCESS;
    }
    let instance_id = args
        .iter()
        .position(|arg| arg == "--instance-id")
        .and_then(|at| args.get(at + 1).cloned())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    match runtime.block_on(run(instance_id)) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(error) => {
            eprintln!("shim_test_daemon: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(instance_id: String) -> anyhow::Result<u8> {
    let env = EnvSnapshot::capture();
    let paths = Paths::from_env(&env)?;
    paths.ensure_dirs()?;
    let key = RunControlKey::load_or_create(&paths)?;
    let fingerprint = current_fingerprint();
    let port: u16 = env.u64_or(agentprism::env::DAEMON_PORT, 0).unwrap_or(0) as u16;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let port = listener.local_addr()?.port();
    let record = DaemonRecord::for_this_process(
        env!("CARGO_PKG_VERSION"),
        &instance_id,
        port,
        &fingerprint,
        "unix:/nonexistent",
    );

    let engine = agentprism::app::foreground_engine(&env, false).await?;
    let handler = agentprism::tools::WorkflowServer::new(engine.clone(), Default::default());
    let server = Arc::new(McpServer::new(handler.clone(), ServerOptions::default()));

    let intercept: Intercept = {
        let record = record.clone();
        let server = server.clone();
        Arc::new(move |parts| {
            let path = parts.uri.path();
            let query = parts.uri.query().unwrap_or_default();
            let value = |name: &str| {
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            let body = match path {
                "/healthz" => {
                    let nonce = value("challenge").unwrap_or_default();
                    json!({
                        "name": record.name, "implementation": record.implementation,
                        "version": record.version, "pid": record.pid,
                        "instanceId": record.instance_id, "envFingerprint": record.env_fingerprint,
                        "port": record.port, "state": "current", "lameDuck": false,
                        "sessions": server.session_count(),
                        "proof": healthz_proof(&key, &record.instance_id, &nonce),
                    })
                }
                "/debug/evict" => {
                    let session = value("session").unwrap_or_default();
                    let server = server.clone();
                    let (done, evicted) = std::sync::mpsc::channel();
                    tokio::spawn(async move {
                        let _ = done.send(server.evict_session(&session).await);
                    });
                    json!({"evicting": evicted.recv_timeout(Duration::ZERO).unwrap_or(true)})
                }
                _ => return None,
            };
            let mut response = hyper::Response::new(HttpBody::full(body.to_string()));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            Some(response)
        })
    };

    agentprism::discovery::record::write_own_record(&paths, &record)?;
    match claim_pointer(&paths, &record, false, |r| process_alive_as(r).is_alive())? {
        Claim::Claimed { .. } => {}
        Claim::AlreadyRunning(current) => {
            eprintln!("shim_test_daemon: already running as pid {}", current.pid);
            remove_own_record(&paths, record.pid, &instance_id)?;
            return Ok(0);
        }
    }
    eprintln!(
        "shim_test_daemon: pid {} serving on port {port}",
        record.pid
    );

    let die_after_initialized = std::env::var("SHIM_TEST_DAEMON_DIE_AFTER_INITIALIZED").is_ok();
    let watched = server.clone();
    let died = async move {
        if !die_after_initialized {
            return std::future::pending().await;
        }
        loop {
            let initialized = watched.session_activity().iter().any(|(id, _)| {
                watched
                    .session(id)
                    .is_some_and(|session| session.is_initialized())
            });
            if initialized {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let options = HttpOptions {
        intercept: Some(intercept),
        ..HttpOptions::default()
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut died_early = false;
    let shutdown = async {
        tokio::select! {
            _ = terminate.recv() => {}
            () = died => died_early = true,
        }
    };
    serve(listener, server.clone(), options, shutdown).await?;
    let _ = clear_pointer_if_mine(&paths, &fingerprint, record.pid, &instance_id);
    let _ = remove_own_record(&paths, record.pid, &instance_id);
    if died_early {
        // Scenario 11: die as a crash would, without draining anything.
        std::process::exit(1);
    }
    server.shutdown();
    handler.shutdown().await;
    engine.shutdown(Duration::from_secs(2)).await;
    Ok(0)
}
