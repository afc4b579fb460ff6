//! `agentprism serve`: the workflow MCP server over stdio or loopback HTTP, as the
//! composition root assembles it, until stdin closes or a signal.

use std::time::Duration;

use anyhow::{Context, Result};

use super::EXIT_COMPLETED;
use super::args::ServeArgs;
use super::input::{guarded, project_dir};
use crate::app::{ServerChoice, Settings};
use crate::env::EnvSnapshot;
use crate::tools::WorkflowServerOptions;

/// Serves the workflow MCP server until stdin closes (stdio) or a signal (HTTP).
pub(super) async fn serve(env: &EnvSnapshot, args: ServeArgs) -> Result<u8> {
    guarded(async {
        let mut settings = Settings::from_env(env, true)?;
        let default_project_dir = match &args.project_dir {
            Some(dir) => Some(project_dir(Some(dir))?),
            None => None,
        };
        settings.server = ServerChoice::Workflow(WorkflowServerOptions {
            default_project_dir,
            ..WorkflowServerOptions::default()
        });
        let (http, paths) = (settings.http.clone(), settings.paths());
        let services = crate::app::services(settings).await?;
        if args.http {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
                .await
                .with_context(|| format!("binding 127.0.0.1:{}", args.port))?;
            let address = listener.local_addr()?;
            say!("http://{address}/mcp");
            crate::transport::http::serve(
                listener,
                services.server.clone(),
                crate::app::http_options(&http, &paths),
                shutdown_signal(),
            )
            .await?;
        } else {
            crate::transport::stdio::serve_stdio(
                services.server.clone(),
                tokio::io::stdin(),
                tokio::io::stdout(),
            )
            .await?;
        }
        services.shutdown(Duration::from_secs(5)).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
