//! How a daemon makes itself known and unknown: its instance record and the family pointer
//! (claimed by compare-and-swap, moved when the configured port is taken back, cleared on the
//! way out), the "already running" answer, the announcement to a superseded predecessor, and
//! sd-notify messages whose failure is only logged.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::health::Health;
use super::{DRAIN_DEADLINE, succession};
use crate::discovery::record::write_own_record;
use crate::discovery::{
    Claim, DaemonRecord, Paths, claim_pointer, clear_pointer_if_mine, remove_own_record,
};
use crate::logging::notice;
use crate::service::Notifier;

/// Writes this daemon's record, then claims the family pointer (`supersede`: may replace a
/// live daemon of a strictly lower version).
pub(super) async fn record_and_claim(
    paths: &Paths,
    record: &DaemonRecord,
    supersede: bool,
) -> Result<Claim> {
    write_own_record(paths, record)?;
    let (paths, record) = (paths.clone(), record.clone());
    tokio::task::spawn_blocking(move || {
        claim_pointer(&paths, &record, supersede, |existing| {
            succession::holds_pointer(&paths, existing)
        })
    })
    .await
    .context("claiming the family pointer")?
    .map_err(anyhow::Error::from)
}

/// Waits (bounded) for the HTTP server, then removes this daemon's record and pointer.
pub(super) async fn finish(tasks: &TaskTracker, paths: &Paths, record: &DaemonRecord) {
    tasks.close();
    if tokio::time::timeout(DRAIN_DEADLINE * 2, tasks.wait())
        .await
        .is_err()
    {
        notice("the HTTP server did not stop within its deadline");
    }
    clear_own_pointer(paths, record).await;
    if let Err(error) = remove_own_record(paths, record.pid, &record.instance_id) {
        notice(format_args!("removing the instance record: {error}"));
    }
}

pub(super) async fn clear_own_pointer(paths: &Paths, record: &DaemonRecord) {
    let (paths, record) = (paths.clone(), record.clone());
    let cleared = tokio::task::spawn_blocking(move || {
        clear_pointer_if_mine(
            &paths,
            &record.env_fingerprint,
            record.pid,
            &record.instance_id,
        )
    })
    .await;
    match cleared {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => notice(format_args!("clearing the family pointer: {error}")),
        Err(error) => notice(format_args!("clearing the family pointer: {error}")),
    }
}

/// Serves `/mcp` on one more listener; its failure is logged, not fatal (the first listener
/// is the daemon's lifeline).
pub(super) async fn serve_more(
    listener: TcpListener,
    server: Arc<crate::mcp::McpServer>,
    options: crate::transport::http::HttpOptions,
    shutdown: CancellationToken,
) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    notice(format_args!(
        "now also serving on the configured port {port}"
    ));
    if let Err(error) =
        crate::transport::http::serve(listener, server, options, shutdown.cancelled_owned()).await
    {
        notice(format_args!(
            "the listener on port {port} failed: {error:#}"
        ));
    }
}

/// Rewrites this daemon's record, and the family pointer if it names us, with `port`.
/// Returns the record as published.
pub(super) async fn publish_port(paths: &Paths, record: &DaemonRecord, port: u16) -> DaemonRecord {
    let mut moved = record.clone();
    moved.port = port;
    moved.url = crate::discovery::record::mcp_url(port);
    if let Err(error) = write_own_record(paths, &moved) {
        notice(format_args!("recording port {port}: {error}"));
        return record.clone();
    }
    let (owned_paths, owned) = (paths.clone(), moved.clone());
    let claimed = tokio::task::spawn_blocking(move || {
        claim_pointer(&owned_paths, &owned, false, |existing| {
            succession::holds_pointer(&owned_paths, existing)
        })
    })
    .await;
    match claimed {
        Ok(Ok(Claim::Claimed { .. })) => {}
        Ok(Ok(Claim::AlreadyRunning(other))) => notice(format_args!(
            "port {port}: the pointer names daemon pid {}, left alone",
            other.pid
        )),
        Ok(Err(error)) => notice(format_args!("port {port}: updating the pointer: {error}")),
        Err(error) => notice(format_args!("port {port}: updating the pointer: {error}")),
    }
    moved
}

/// Tells the predecessor we superseded that we took over, in the background; it notices the
/// pointer within [`super::POINTER_POLL`] if the message does not arrive.
pub(super) fn announce_to(health: &Arc<Health>, predecessor: &DaemonRecord) {
    let Some(key) = health.key.clone() else {
        return;
    };
    let (own, predecessor) = (health.record.clone(), predecessor.clone());
    tokio::spawn(async move {
        match succession::announce(&key, &own, &predecessor).await {
            Ok(answer) => notice(format_args!(
                "superseded daemon pid {} (version {}); it still runs {}",
                predecessor.pid,
                predecessor.version,
                answer
                    .get("ownedRuns")
                    .map_or_else(|| "[]".into(), Value::to_string)
            )),
            Err(error) => notice(format_args!(
                "superseded daemon pid {} (version {}), but could not tell it: {error}",
                predecessor.pid, predecessor.version
            )),
        }
    });
}

/// Exit 0 because `record`'s daemon serves the family. A managed start still reports ready,
/// so `systemctl start` returns successfully and the shim finds that daemon.
pub(super) fn already_running(record: &DaemonRecord, notifier: &Notifier) {
    notice(format_args!(
        "already running: daemon pid {} serves this env family at {}",
        record.pid, record.url
    ));
    notify(
        "READY=1",
        notifier.ready_with_status(&format!(
            "already running: pid {} at 127.0.0.1:{}",
            record.pid, record.port
        )),
    );
    crate::output::stdout(format_args!("{}", record.url), true);
}

/// Logs a notification that could not be sent; the daemon goes on (systemd will judge us by
/// the missing message).
pub(super) fn notify(what: &str, sent: std::io::Result<()>) {
    if let Err(error) = sent {
        notice(format_args!("sd-notify {what}: {error}"));
    }
}
