//! Where a daemon listens: the configured loopback port, an ephemeral one when that is held
//! by someone we must not disturb, or the socket systemd passed by socket activation; and the
//! one-thread *front* runtime that accepts connections, so a busy engine cannot starve
//! `/healthz` (daemon.md 1.4).

use std::net::SocketAddr;

use anyhow::{Context, Result, anyhow};
use tokio::net::{TcpListener, TcpSocket};

use super::probe;
use crate::discovery::pointer::read_pointer;
use crate::discovery::record::read_instance_records;
use crate::discovery::{
    DaemonRecord, Paths, RecordRead, RunControlKey, compare_versions, process_alive_as,
};
use crate::logging::notice;

/// The daemon's front runtime: one worker thread of its own that accepts HTTP connections,
/// answers `/healthz` and serves the control socket, while MCP requests and runs go to the
/// main runtime (`HttpOptions::dispatch`). However busy the engine gets, the daemon still
/// proves it is alive, which is what keeps shims from calling it unresponsive (daemon.md 1.4,
/// pitfall 8).
pub(super) struct Front(Option<tokio::runtime::Runtime>);

impl Front {
    pub(super) fn start() -> Result<Front> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentprism-front")
            .enable_all()
            .build()
            .context("starting the daemon's front runtime")?;
        Ok(Front(Some(runtime)))
    }

    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("the front runtime lives until drop")
            .handle()
    }

    /// Moves a listener bound on the main runtime over to the front runtime's reactor.
    pub(super) fn adopt(&self, listener: TcpListener) -> Result<TcpListener> {
        let listener = listener.into_std().context("detaching the listener")?;
        let _front = self.handle().enter();
        TcpListener::from_std(listener).context("moving the listener to the front runtime")
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        // Dropped from async code: shut down without blocking. Its tasks have ended by then
        // (the daemon waits for them), or the daemon is exiting anyway.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The outcome of binding the daemon's port.
pub(super) enum Bound {
    Listener(TcpListener),
    /// Our own healthy current daemon of this family holds the port and the pointer.
    AlreadyRunning(Box<DaemonRecord>),
}

/// What [`listen`] needs to know about this daemon.
pub(super) struct Listen<'a> {
    pub paths: &'a Paths,
    pub fingerprint: &'a str,
    pub port: u16,
    pub key: Option<&'a RunControlKey>,
    /// `--supersede`: our version, which may displace a lower one holding the port.
    pub superseding: Option<&'a str>,
}

/// The listener this daemon serves on: the activated socket if systemd passed one, else the
/// port [`bind_daemon_port`] finds.
pub(super) async fn listen(
    activated: Option<std::net::TcpListener>,
    how: Listen<'_>,
) -> Result<Bound> {
    match activated {
        Some(listener) => {
            listener
                .set_nonblocking(true)
                .context("preparing the activated socket")?;
            Ok(Bound::Listener(
                TcpListener::from_std(listener).context("serving the activated socket")?,
            ))
        }
        None => {
            bind_daemon_port(
                how.paths,
                how.fingerprint,
                how.port,
                how.key,
                how.superseding,
            )
            .await
        }
    }
}

/// Binds 127.0.0.1:`port` with SO_REUSEADDR (never SO_REUSEPORT: two listeners would split
/// sessions). A held port means either our family's healthy daemon (exit 0) or someone we
/// must not disturb (a foreign process, another family, our draining predecessor, or the
/// older daemon a successor started with `--supersede` replaces; `superseding` is then our
/// version): then an ephemeral port, with the holder logged.
async fn bind_daemon_port(
    paths: &Paths,
    fingerprint: &str,
    port: u16,
    key: Option<&RunControlKey>,
    superseding: Option<&str>,
) -> Result<Bound> {
    match bind_loopback(port) {
        Ok(listener) => return Ok(Bound::Listener(listener)),
        Err(error) if port != 0 && error.kind() == std::io::ErrorKind::AddrInUse => {}
        Err(error) => return Err(anyhow!(error).context(format!("binding 127.0.0.1:{port}"))),
    }
    if let Some(current) = read_pointer(paths, fingerprint)
        && current.port == port
        && process_alive_as(&current).is_alive()
        && probe::probe(&current, key, crate::discovery::healthz::HEALTHZ_TIMEOUT)
            .await
            .qualifies()
        && !superseding.is_some_and(|ours| compare_versions(&current.version, ours).is_lt())
    {
        return Ok(Bound::AlreadyRunning(Box::new(current)));
    }
    let holder = describe_port_holder(paths, fingerprint, port);
    let listener = bind_loopback(0).context("binding 127.0.0.1 on an ephemeral port")?;
    notice(format_args!(
        "port {port} is held by {holder}; listening on ephemeral port {} instead",
        listener.local_addr().map(|a| a.port()).unwrap_or(0)
    ));
    Ok(Bound::Listener(listener))
}

pub(super) fn bind_loopback(port: u16) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.listen(1024)
}

/// Names who holds `port` as well as the records tell.
fn describe_port_holder(paths: &Paths, fingerprint: &str, port: u16) -> String {
    let records = read_instance_records(paths).unwrap_or_default();
    for file in records {
        if let RecordRead::Ours(record) = file.read
            && record.port == port
            && process_alive_as(&record).is_alive()
        {
            return if record.env_fingerprint == fingerprint {
                format!(
                    "this family's daemon pid {} (draining or unresponsive)",
                    record.pid
                )
            } else {
                format!(
                    "agentprism daemon pid {} of another env family ({})",
                    record.pid, record.env_fingerprint
                )
            };
        }
    }
    "a process that is not an agentprism daemon of this user".to_owned()
}
