//! The sd-notify channel to systemd (daemon.md 2, "Notify"). A [`Notifier`] is built once, at
//! the top of `daemon run` and before any thread exists, from variables systemd set for us; it
//! keeps what it read, so nothing later depends on the process environment, which cannot be
//! changed safely once threads run (`env::remove_var` is `unsafe`). Instead of unsetting the
//! variables, every child is spawned without them ([`CHILD_ENV_REMOVALS`]): an agent that
//! inherited `NOTIFY_SOCKET` could otherwise tell our manager we are ready or stopping.
//!
//! The variables are trusted only under `--managed=systemd` and when `SYSTEMD_EXEC_PID` names
//! us: MCP hosts that themselves run as services leak `NOTIFY_SOCKET` into the shims and the
//! daemons they self-spawn, and such a daemon must stay silent.
//!
//! We write the datagrams ourselves instead of using the `sd-notify` crate: its 0.5 API reads
//! `NOTIFY_SOCKET` from the live environment on every call and has no way to send to a socket
//! captured earlier, nor to an abstract-namespace (`@`) socket. The protocol is one datagram
//! of `KEY=VALUE` lines.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

use crate::env;

/// Variables a daemon removes from the environment of every process it starts (agents, tool
/// subprocesses, a successor it spawns): they describe this process's relationship with
/// systemd and mean nothing, or harm, anywhere else.
pub(crate) const CHILD_ENV_REMOVALS: [&str; 6] = [
    env::NOTIFY_SOCKET,
    env::LISTEN_FDS,
    env::LISTEN_PID,
    env::LISTEN_FDNAMES,
    env::WATCHDOG_USEC,
    env::WATCHDOG_PID,
];

/// Talks to systemd for a daemon under `--managed=systemd`; silent otherwise. Cheap to share
/// by reference across threads (every send is one `sendto`).
#[derive(Debug)]
pub struct Notifier {
    /// `None` when we are not a systemd-managed main process: every method is then a no-op.
    channel: Option<Channel>,
    /// `WATCHDOG_USEC`, if it was meant for us.
    watchdog_period: Option<Duration>,
}

/// Where notifications go, and the unbound socket they are sent from. The socket is created
/// at construction so a later send cannot fail for lack of descriptors at a bad moment.
#[derive(Debug)]
struct Channel {
    target: Target,
    socket: UnixDatagram,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Path(PathBuf),
    /// `@name`: Linux abstract namespace, the name without the `@`.
    Abstract(Vec<u8>),
}

impl Default for Notifier {
    /// [`Notifier::disabled`].
    fn default() -> Notifier {
        Notifier::disabled()
    }
}

impl Notifier {
    /// A notifier that sends nothing: self-spawned and launchd daemons, tests.
    pub(crate) fn disabled() -> Notifier {
        Notifier {
            channel: None,
            watchdog_period: None,
        }
    }

    /// Reads this process's environment. Call once, before any thread is spawned, with
    /// `managed_by_systemd` = whether `--managed=systemd` was given.
    pub(crate) fn from_process(managed_by_systemd: bool) -> io::Result<Notifier> {
        Notifier::from_vars(managed_by_systemd, std::process::id(), |name| {
            std::env::var_os(name)
        })
    }

    /// The same from explicit variables and pid (tests, and hosts that embed the daemon).
    /// Fails only if a notification socket was named but no socket could be created.
    pub(crate) fn from_vars(
        managed_by_systemd: bool,
        pid: u32,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> io::Result<Notifier> {
        let ours = |name: &str| {
            var(name)
                .and_then(|value| value.to_str()?.trim().parse::<u32>().ok())
                .is_some_and(|named| named == pid)
        };
        if !managed_by_systemd || !ours(env::SYSTEMD_EXEC_PID) {
            return Ok(Notifier::disabled());
        }
        let channel = match var(env::NOTIFY_SOCKET).filter(|value| !value.is_empty()) {
            Some(value) => Some(Channel {
                target: Target::parse(&value),
                socket: UnixDatagram::unbound()?,
            }),
            None => None,
        };
        // WATCHDOG_PID may be absent (older systemd); when present it must name us.
        let watchdog_for_us = var(env::WATCHDOG_PID).is_none() || ours(env::WATCHDOG_PID);
        let watchdog_period = var(env::WATCHDOG_USEC)
            .filter(|_| watchdog_for_us)
            .and_then(|value| value.to_str()?.trim().parse::<u64>().ok())
            .filter(|usec| *usec > 0)
            .map(Duration::from_micros);
        Ok(Notifier {
            channel,
            watchdog_period,
        })
    }

    /// Whether notifications go anywhere.
    #[cfg(test)]
    pub(crate) fn is_active(&self) -> bool {
        self.channel.is_some()
    }

    /// How often to send [`Notifier::watchdog`]: half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3)
    /// recommends, so one late tick does not get us killed. `None` when no watchdog is set.
    pub(crate) fn watchdog_interval(&self) -> Option<Duration> {
        self.channel.as_ref()?;
        self.watchdog_period.map(|period| period / 2)
    }

    /// `READY=1`: send once the pointer CAS has made us the family's current daemon, so a
    /// shim that waits on `systemctl start` finds us through discovery at once.
    #[cfg(test)]
    pub(crate) fn ready(&self) -> io::Result<()> {
        self.send("READY=1\n")
    }

    /// `READY=1` and `STATUS=` in one datagram.
    pub(crate) fn ready_with_status(&self, text: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}\n", one_line(text)))
    }

    /// `STATUS=<text>`, shown by `systemctl status`. Line breaks become spaces: a newline
    /// would end the assignment.
    pub(crate) fn status(&self, text: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}\n", one_line(text)))
    }

    /// `WATCHDOG=1`: send only after a real self-check (a `/healthz` probe of our own
    /// listener) succeeded, every [`Notifier::watchdog_interval`].
    pub(crate) fn watchdog(&self) -> io::Result<()> {
        self.send("WATCHDOG=1\n")
    }

    /// `STOPPING=1`: only at real shutdown (signal, stop, idle exit), never when turning lame
    /// duck. systemd treats it as final and starts the stop timer.
    pub(crate) fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1\n")
    }

    fn send(&self, message: &str) -> io::Result<()> {
        let Some(channel) = &self.channel else {
            return Ok(());
        };
        let sent = match &channel.target {
            Target::Path(path) => channel.socket.send_to(message.as_bytes(), path)?,
            Target::Abstract(name) => send_abstract(&channel.socket, name, message.as_bytes())?,
        };
        if sent != message.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the notification datagram was cut short",
            ));
        }
        Ok(())
    }
}

impl Target {
    fn parse(value: &OsStr) -> Target {
        match value.as_bytes().strip_prefix(b"@") {
            Some(name) => Target::Abstract(name.to_vec()),
            None => Target::Path(PathBuf::from(value)),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn send_abstract(socket: &UnixDatagram, name: &[u8], message: &[u8]) -> io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    socket.send_to_addr(message, &address)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn send_abstract(_socket: &UnixDatagram, _name: &[u8], _message: &[u8]) -> io::Result<usize> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract-namespace notification sockets exist only on Linux",
    ))
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {

    use super::*;

    const PID: u32 = 4242;

    use crate::service::vars;

    /// Everything queued on the harness socket, without waiting: a Unix datagram is in the
    /// receiver's queue by the time `send_to` returns.
    fn drain(socket: &UnixDatagram) -> Vec<String> {
        socket.set_nonblocking(true).unwrap();
        let mut messages = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            match socket.recv(&mut buffer) {
                Ok(n) => messages.push(String::from_utf8(buffer[..n].to_vec()).unwrap()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return messages,
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    fn exercise(notifier: &Notifier) {
        notifier.ready().unwrap();
        notifier.status("lame duck: 2 runs\nleft").unwrap();
        notifier.watchdog().unwrap();
        notifier.stopping().unwrap();
    }

    const EXPECTED: [&str; 4] = [
        "READY=1\n",
        "STATUS=lame duck: 2 runs left\n",
        "WATCHDOG=1\n",
        "STOPPING=1\n",
    ];

    #[test]
    fn managed_notifier_sends_in_order_to_a_path_socket() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("notify");
        let harness = UnixDatagram::bind(&path).unwrap();
        let pid = PID.to_string();
        let notifier = Notifier::from_vars(
            true,
            PID,
            vars(&[
                ("SYSTEMD_EXEC_PID", &pid),
                ("NOTIFY_SOCKET", path.to_str().unwrap()),
                ("WATCHDOG_USEC", "3000000"),
                ("WATCHDOG_PID", &pid),
            ]),
        )
        .unwrap();
        assert!(notifier.is_active());
        assert_eq!(
            notifier.watchdog_interval(),
            Some(Duration::from_millis(1500))
        );
        exercise(&notifier);
        assert_eq!(drain(&harness), EXPECTED);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn managed_notifier_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("agentprism-test-{}", uuid::Uuid::new_v4());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        let harness = UnixDatagram::bind_addr(&address).unwrap();
        let notifier = Notifier::from_vars(
            true,
            PID,
            vars(&[
                ("SYSTEMD_EXEC_PID", &PID.to_string()),
                ("NOTIFY_SOCKET", &format!("@{name}")),
            ]),
        )
        .unwrap();
        exercise(&notifier);
        notifier
            .ready_with_status("serving on 127.0.0.1:29888")
            .unwrap();
        let mut expected: Vec<&str> = EXPECTED.to_vec();
        expected.push("READY=1\nSTATUS=serving on 127.0.0.1:29888\n");
        assert_eq!(drain(&harness), expected);
        assert_eq!(notifier.watchdog_interval(), None);
    }

    #[test]
    fn unmanaged_or_foreign_notifiers_send_nothing() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("notify");
        let harness = UnixDatagram::bind(&path).unwrap();
        let socket = path.to_str().unwrap();
        let cases = [
            // Self-spawned: no --managed=systemd, although a host leaked the variables.
            (false, PID.to_string()),
            // Managed flag, but systemd started another process (we were forked or spawned
            // by it), so the socket is not ours to use.
            (true, (PID + 1).to_string()),
            (true, String::new()),
        ];
        for (managed, exec_pid) in cases {
            let notifier = Notifier::from_vars(
                managed,
                PID,
                vars(&[
                    ("SYSTEMD_EXEC_PID", &exec_pid),
                    ("NOTIFY_SOCKET", socket),
                    ("WATCHDOG_USEC", "3000000"),
                ]),
            )
            .unwrap();
            assert!(!notifier.is_active());
            assert_eq!(notifier.watchdog_interval(), None);
            exercise(&notifier);
        }
        assert!(drain(&harness).is_empty());
    }

    #[test]
    fn a_watchdog_meant_for_another_pid_is_ignored() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("notify");
        let _harness = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier::from_vars(
            true,
            PID,
            vars(&[
                ("SYSTEMD_EXEC_PID", &PID.to_string()),
                ("NOTIFY_SOCKET", path.to_str().unwrap()),
                ("WATCHDOG_USEC", "3000000"),
                ("WATCHDOG_PID", "1"),
            ]),
        )
        .unwrap();
        assert_eq!(notifier.watchdog_interval(), None);

        let notifier =
            Notifier::from_vars(true, PID, vars(&[("SYSTEMD_EXEC_PID", &PID.to_string())]))
                .unwrap();
        // No NOTIFY_SOCKET: nothing to send to, and no watchdog without a channel.
        assert!(!notifier.is_active());
        notifier.ready().unwrap();
    }
}
