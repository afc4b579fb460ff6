//! `agentprism serve`: the workflow MCP server over stdio or loopback HTTP, or with a folder,
//! that folder's workflows as an MCP server of their own (docs/serve.md), over HTTP also as
//! an A2A agent (its card and `/a2a` through the transport's hooks); as the composition root
//! assembles them, until stdin closes or a signal.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hyper::http::request::Parts;
use hyper::{Method, StatusCode};

use super::EXIT_COMPLETED;
use super::args::ServeArgs;
use super::input::{guarded, input_error, project_dir};
use crate::app::{ServerChoice, Settings};
use crate::env::EnvSnapshot;
use crate::serve::a2a::{A2a, A2aAnswer};
use crate::serve::replica::ReplicaOptions;
use crate::tools::WorkflowServerOptions;
use crate::transport::http::{
    GuardedAnswer, GuardedHandler, GuardedRequest, GuardedRoute, HttpOptions,
};
use crate::transport::peer::Access;

/// Serves the workflow MCP server until stdin closes (stdio) or a signal (HTTP).
pub(super) async fn serve(env: &EnvSnapshot, args: ServeArgs) -> Result<u8> {
    if args.dir.is_some() {
        return guarded(serve_folder(env, args)).await;
    }
    if args.token.is_some()
        || args.state_dir.is_some()
        || args.principal_header.is_some()
        || args.store.is_some()
    {
        note!(
            "--token, --state-dir, --store and --principal-header (and their MHL_SERVE_* \
             variables) apply to a folder server (`agentprism serve <dir>`); ignored"
        );
    }
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
        if args.http.is_some() {
            if args.http.as_deref() != Some("") {
                return Err(input_error("--http takes an address only with a folder (`agentprism serve <dir> --http HOST:PORT`); the workflow tool listens on 127.0.0.1 --port".to_owned(),));
            }
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

/// `agentprism serve <dir>`: loads the folder (a bad one stops here, every file named), then
/// serves it on stdio or HTTP until stdin closes or a signal; the runs still going are
/// interrupted on the way out.
async fn serve_folder(env: &EnvSnapshot, mut args: ServeArgs) -> Result<u8> {
    let dir = args.dir.clone().expect("a folder server has a folder");
    args.token = secret_setting(env, TOKEN_VARIABLE, args.token.take()).await?;
    let flag_store = args.store.is_some();
    args.store = secret_setting(env, STORE_VARIABLE, args.store.take()).await?;
    if !flag_store && args.store.is_some() && args.state_dir.is_some() {
        return Err(input_error(format!(
            "{STORE_VARIABLE}_FILE (or its credential) and --state-dir name two different stores; give one"
        )));
    }
    let (folder, pack) = match &args.workflows_pack {
        None => (
            crate::serve::folder::load(&dir).map_err(|error| input_error(error.to_string()))?,
            None,
        ),
        Some(file) => {
            let (folder, pack) = load_pack(env, &dir, file, args.http.is_some()).await?;
            (folder, Some(pack))
        }
    };
    let http = match args.http.as_deref() {
        None => None,
        Some(address) => Some(bind_address(address, args.port)?),
    };
    if http.is_none() && (args.token.is_some() || args.principal_header.is_some()) {
        return Err(input_error(
            "--token and --principal-header guard an HTTP listener; add --http HOST:PORT"
                .to_owned(),
        ));
    }
    if args.principal_header.is_some() && args.token.is_none() {
        return Err(input_error(
            "--principal-header needs --token (MHL_SERVE_TOKEN): without the shared secret any \
             client could claim any identity in that header"
                .to_owned(),
        ));
    }
    let replica = match &args.store {
        Some(location) => Some(
            ReplicaOptions::new(location, args.single_replica, env)
                .map_err(|error| input_error(error.to_string()))?,
        ),
        None => None,
    };
    let sweep_interval = crate::serve::replica::sweep_interval(env)
        .map_err(|error| input_error(error.to_string()))?;
    let state = match (&replica, &args.state_dir) {
        (Some(replica), _) => match replica.location.root() {
            Some(root) => crate::app::StateFolder::kept(root)?,
            None => crate::app::StateFolder::temporary()?,
        },
        (None, Some(path)) => crate::app::StateFolder::kept(path)?,
        (None, None) => crate::app::StateFolder::temporary()?,
    };
    let mut settings = Settings::from_env(env, true)?;
    if let Some(replica) = &replica {
        crate::app::replicate(&mut settings, replica, &state)
            .await
            .map_err(
                |error| match error.downcast::<crate::serve::replica::ReplicaError>() {
                    Ok(refused) => input_error(refused.to_string()),
                    Err(other) => other,
                },
            )?;
    }
    if let Some(limit) = args.max_concurrent_runs.filter(|limit| *limit > 0) {
        settings.engine.max_runs = limit;
    }
    let options = crate::serve::FolderOptions {
        run_resources: http.is_some(),
        terminal_ttl: args
            .terminal_run_ttl
            .unwrap_or(crate::serve::TERMINAL_RUN_TTL)
            .max(Duration::from_secs(1)),
        sweep_interval,
        queue: queue_options(&args, replica.as_ref(), sweep_interval),
        ..crate::serve::FolderOptions::default()
    };
    let services = match pack {
        Some(pack) => {
            crate::app::pack_folder_services(settings, folder, pack, state, options).await?
        }
        None => crate::app::folder_services(settings, folder, state, options).await?,
    };
    match http {
        Some(address) => serve_folder_http(&services, address, &args).await?,
        None => {
            crate::transport::stdio::serve_stdio(
                services.server.clone(),
                tokio::io::stdin(),
                tokio::io::stdout(),
            )
            .await?
        }
    }
    services.shutdown(Duration::from_secs(5)).await;
    Ok(EXIT_COMPLETED)
}

/// The queue's bound (`--max-queued-runs`); between replicas its claims last as long as a
/// run lease, and the dispatcher looks no less often than the sweep (which tests shorten).
fn queue_options(
    args: &ServeArgs,
    replica: Option<&ReplicaOptions>,
    sweep_interval: Duration,
) -> crate::serve::QueueOptions {
    let defaults = crate::serve::QueueOptions::default();
    crate::serve::QueueOptions {
        bound: args.max_queued_runs.unwrap_or(defaults.bound),
        poll: defaults.poll.min(sweep_interval),
        claim_ttl: replica.map_or(defaults.claim_ttl, |replica| replica.lock_ttl),
    }
}

/// `--workflows-pack`: the key (`MHL_SERVE_WORKFLOWS_KEY`, its file or credential), the pack opened
/// with it (any fault is fatal and named) and its workflows loaded as if they lay under
/// `dir`; nothing under `dir` is read.
async fn load_pack(
    env: &EnvSnapshot,
    dir: &Path,
    file: &Path,
    http: bool,
) -> Result<(crate::serve::Folder, crate::engine::sources::PackSources)> {
    if !http {
        return Err(input_error(
            "--workflows-pack serves over HTTP only; add --http HOST:PORT".to_owned(),
        ));
    }
    let refused =
        |error: &dyn std::fmt::Display| input_error(format!("{error}; nothing is served"));
    let key = crate::pack::workflows_key(env)
        .await
        .map_err(|error| refused(&error))?;
    let file = std::path::absolute(file).map_err(|error| refused(&error))?;
    let entries = crate::pack::read_file(&file, &key).map_err(|error| refused(&error))?;
    let folder = crate::serve::folder::load_files(
        dir,
        entries
            .iter()
            .map(|entry| (entry.path.as_str(), entry.content.as_slice())),
    )
    .map_err(|error| {
        refused(&format!(
            "the workflows of the pack {} do not load: {error}",
            file.display()
        ))
    })?;
    let pack = crate::engine::sources::PackSources::new(folder.root.clone(), entries);
    Ok((folder, pack))
}

/// The variable (and flag) of the bearer token.
const TOKEN_VARIABLE: &str = "MHL_SERVE_TOKEN";
/// The variable (and flag) of the shared store's location, which may hold a password.
const STORE_VARIABLE: &str = "MHL_SERVE_STORE";

/// A secret setting: its flag or variable, else its `_FILE`, else its systemd credential
/// (`crate::util::secret`); two of them at once are refused.
async fn secret_setting(
    env: &EnvSnapshot,
    name: &str,
    given: Option<String>,
) -> Result<Option<String>> {
    crate::util::secret::resolve(env, name, given)
        .await
        .map(|found| found.map(|(value, _)| value))
        .map_err(|error| input_error(error.to_string()))
}

async fn serve_folder_http(
    services: &crate::app::FolderServices,
    address: SocketAddr,
    args: &ServeArgs,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    let bound = listener.local_addr()?;
    let loopback = crate::transport::is_loopback(&bound);
    if !loopback && args.token.is_none() {
        note!(
            "warning: {bound} is not a loopback address and no --token is set: this server is \
             unauthenticated, anyone who reaches it can run its workflows"
        );
    }
    let access = match &args.token {
        Some(token) => Access::Bearer {
            token: Arc::from(token.as_str()),
        },
        None if loopback => Access::owner(None),
        None => Access::Open,
    };
    let mut options = HttpOptions {
        access,
        principal_header: args.principal_header.clone(),
        method_paths: true,
        // Behind a gateway the Host is the public name; Origin is still checked.
        check_host: loopback,
        max_body_bytes: crate::serve::MAX_BODY_BYTES,
        implementation: "agentprism-serve",
        ..HttpOptions::default()
    };
    let pushes = crate::serve::a2a::Pushes::new(&args.a2a_push_allow).map_err(input_error)?;
    let a2a = services.folder.a2a(args.token.is_some(), pushes);
    let card = a2a_card(a2a.clone(), bound);
    let metrics = metrics_route(options.access.clone());
    options.intercept = Some(Arc::new(move |parts: &Parts| {
        card(parts)
            .or_else(|| metrics(parts))
            .or_else(|| liveness(parts))
    }));
    options.guarded_routes = vec![a2a_endpoint(a2a)];
    say!("http://{bound}/mcp");
    crate::transport::http::serve(
        listener,
        services.server.clone(),
        options,
        shutdown_signal(),
    )
    .await
}

/// The public Agent Card (`GET /.well-known/agent-card.json`, before the token check), its
/// endpoint URL composed from the request's `Host` (the name the client reached us by,
/// behind a gateway too), else the bound address.
fn a2a_card(a2a: Arc<A2a>, bound: SocketAddr) -> crate::transport::http::Intercept {
    Arc::new(move |parts: &Parts| {
        if parts.uri.path() != crate::serve::a2a::CARD_PATH || parts.method != Method::GET {
            return None;
        }
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let host = header("host").map_or_else(|| bound.to_string(), str::to_owned);
        let scheme = match header("x-forwarded-proto") {
            Some("https") => "https",
            _ => "http",
        };
        let card = a2a.card(&format!("{scheme}://{host}"));
        Some(crate::transport::http::json_response(StatusCode::OK, &card))
    })
}

/// `GET /metrics` (Prometheus text, [`crate::metrics`]): behind the bearer token when the
/// listener has one (401 without it: this hook runs before the transport's token check).
/// Without a token, a loopback listener's same-user check applies as to every request
/// (it runs before this hook); a non-loopback one without a token is open, like the rest of
/// it: the metrics hold counts only, no run id, name or text.
fn metrics_route(access: Access) -> crate::transport::http::Intercept {
    Arc::new(move |parts: &Parts| {
        if parts.uri.path() != "/metrics" || parts.method != Method::GET {
            return None;
        }
        let guarded = matches!(access, Access::Bearer { .. });
        let authorization = parts
            .headers
            .get(hyper::header::AUTHORIZATION)
            .map(|value| value.as_bytes());
        if guarded && !crate::transport::peer::bearer_matches(&access, authorization) {
            return Some(crate::transport::http::json_response(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({"error": "/metrics needs Authorization: Bearer <token>"}),
            ));
        }
        Some(crate::daemon::health::metrics_response())
    })
}

/// `GET /healthz`: liveness for a load balancer's health check, which carries no secret, so it
/// is answered before the token check. It says the process serves and nothing else: no
/// version, folder, workflow or run.
fn liveness(parts: &Parts) -> Option<hyper::Response<crate::transport::http::HttpBody>> {
    (parts.uri.path() == "/healthz" && parts.method == Method::GET).then(|| {
        crate::transport::http::json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
    })
}

/// `POST /a2a`, behind the token and the principal header like `/mcp`.
fn a2a_endpoint(a2a: Arc<A2a>) -> GuardedRoute {
    let handler: GuardedHandler = Arc::new(move |request: GuardedRequest| {
        let a2a = a2a.clone();
        Box::pin(async move {
            let version = request
                .headers
                .get(crate::serve::a2a::VERSION_HEADER)
                .map(|value| value.to_str().unwrap_or("unreadable"));
            match a2a
                .answer(version, request.principal.as_deref(), &request.body)
                .await
            {
                A2aAnswer::Json(body) => GuardedAnswer::Json {
                    status: StatusCode::OK,
                    body,
                },
                A2aAnswer::Stream(events) => GuardedAnswer::Events(events),
            }
        })
    });
    GuardedRoute {
        path: crate::serve::a2a::ENDPOINT_PATH.to_owned(),
        handler,
    }
}

/// `--http`'s address: `HOST:PORT`, or empty for 127.0.0.1 on `--port`.
fn bind_address(text: &str, port: u16) -> Result<SocketAddr> {
    if text.is_empty() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        input_error(format!(
            "--http expects HOST:PORT with an IP address (such as 127.0.0.1:8080), got {text:?}"
        ))
    })
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
