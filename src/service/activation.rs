//! Socket activation (daemon.md 2, scenario 26): a manager that already listens on the
//! daemon's port (`systemd-socket-activate`, or a future `agentprism.socket`) passes the
//! listening socket as fd 3 and describes it in `LISTEN_PID`, `LISTEN_FDS` and
//! `LISTEN_FDNAMES` (sd_listen_fds(3)). `daemon run` then serves that socket instead of
//! binding one.
//!
//! The variables are read once, before the async runtime starts a thread (pitfall 15), and
//! only when `LISTEN_PID` names this process: a variable leaked by a parent that was itself
//! activated describes that parent's descriptors, not ours. The passed socket must be what
//! the daemon would have bound itself, a listening TCP socket on a loopback address: anything
//! else is refused with an error naming the variable, never served. The socket is marked
//! close-on-exec so agents and successors never inherit it, and the variables themselves are
//! stripped from every child ([`super::notify::CHILD_ENV_REMOVALS`]).
//!
//! Written on nix rather than a crate: the protocol is three variables and fd 3.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::socket::{SockType, SockaddrLike, SockaddrStorage, getsockname, getsockopt, sockopt};
use nix::sys::stat::{SFlag, fstat};

use crate::env;

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub(crate) const FIRST_FD: RawFd = 3;

/// What the `LISTEN_*` variables say was passed to this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Passed {
    /// How many descriptors, starting at [`FIRST_FD`]. Always 1 here: the daemon serves one
    /// socket, and more are refused while parsing.
    pub count: u32,
    /// `LISTEN_FDNAMES` split on `:`; empty when unset.
    pub names: Vec<String>,
}

/// A socket-activation setup the daemon refuses to serve.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActivationError {
    #[error("{variable}={value:?} is not {expected}")]
    Malformed {
        variable: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "{} names {count} sockets; agentprism serves exactly one (a loopback TCP listener)",
        env::LISTEN_FDS
    )]
    TooMany { count: u32 },
    #[error("{} names fd {FIRST_FD}, but it is {what}", env::LISTEN_FDS)]
    Unusable { what: String },
    #[error(
        "{} names fd {FIRST_FD}, listening on {address}, which is not a loopback address; \
         the daemon only serves 127.0.0.1, ::1 or another loopback address",
        env::LISTEN_FDS
    )]
    NotLoopback { address: SocketAddr },
}

impl Passed {
    /// Reads the variables from explicit values: `None` when no socket was passed to `pid`
    /// (no `LISTEN_PID`, or one naming another process). Once `LISTEN_PID` names us, every
    /// other defect is an error: the manager meant to hand us a socket, and serving something
    /// else instead would hide the mistake.
    pub(crate) fn from_vars(
        pid: u32,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Option<Passed>, ActivationError> {
        let text = |name: &'static str| -> Option<String> {
            var(name).map(|value| value.to_string_lossy().trim().to_owned())
        };
        let Some(listen_pid) = text(env::LISTEN_PID) else {
            return Ok(None);
        };
        let named: u32 = listen_pid.parse().map_err(|_| ActivationError::Malformed {
            variable: env::LISTEN_PID,
            value: listen_pid.clone(),
            expected: "a process id",
        })?;
        if named != pid {
            return Ok(None);
        }
        let fds = text(env::LISTEN_FDS).unwrap_or_default();
        let count: u32 = fds.parse().ok().filter(|count| *count > 0).ok_or_else(|| {
            ActivationError::Malformed {
                variable: env::LISTEN_FDS,
                value: fds.clone(),
                expected: "a count of at least 1",
            }
        })?;
        if count != 1 {
            return Err(ActivationError::TooMany { count });
        }
        let names = text(env::LISTEN_FDNAMES)
            .filter(|names| !names.is_empty())
            .map(|names| names.split(':').map(str::to_owned).collect())
            .unwrap_or_default();
        Ok(Some(Passed { count, names }))
    }
}

/// The listener passed to this process, if any. Call once, before any thread starts: the
/// first call takes ownership of fd 3.
pub(crate) fn from_process() -> Result<Option<TcpListener>, ActivationError> {
    let Some(_passed) = Passed::from_vars(std::process::id(), |name| std::env::var_os(name))?
    else {
        return Ok(None);
    };
    // fd 3 must be open before we claim it: F_GETFD fails with EBADF otherwise.
    // SAFETY: F_GETFD only reads the descriptor's flags; any integer is a valid argument.
    if unsafe { nix::libc::fcntl(FIRST_FD, nix::libc::F_GETFD) } == -1 {
        return Err(ActivationError::Unusable {
            what: format!("not open ({})", std::io::Error::last_os_error()),
        });
    }
    // SAFETY: LISTEN_PID names this process, so the manager passed fd 3 to us; it is open
    // (checked above) and nothing else in the process refers to it, because this runs once at
    // start, before any thread or file of ours exists.
    let owned = unsafe { OwnedFd::from_raw_fd(FIRST_FD) };
    listener_from_fd(owned).map(Some)
}

/// Checks that `fd` is a listening TCP socket on a loopback address, marks it close-on-exec
/// and returns it as a listener. A refused descriptor is closed.
pub(crate) fn listener_from_fd(fd: OwnedFd) -> Result<TcpListener, ActivationError> {
    let unusable = |what: String| ActivationError::Unusable { what };
    let stat = fstat(&fd).map_err(|error| unusable(format!("unreadable ({error})")))?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(unusable("not a socket".to_owned()));
    }
    let kind = getsockopt(&fd, sockopt::SockType)
        .map_err(|error| unusable(format!("a socket of unknown type ({error})")))?;
    if kind != SockType::Stream {
        return Err(unusable(format!("a {kind:?} socket, not a stream socket")));
    }
    let address: SockaddrStorage = getsockname(fd.as_raw_fd())
        .map_err(|error| unusable(format!("a socket without an address ({error})")))?;
    let address: SocketAddr = if let Some(v4) = address.as_sockaddr_in() {
        SocketAddr::from((v4.ip(), v4.port()))
    } else if let Some(v6) = address.as_sockaddr_in6() {
        SocketAddr::from((v6.ip(), v6.port()))
    } else {
        return Err(unusable(format!(
            "a {:?} socket, not a TCP socket",
            address.family()
        )));
    };
    if !getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false) {
        return Err(unusable(format!(
            "a stream socket on {address} that is not listening"
        )));
    }
    require_loopback(address)?;
    fcntl(&fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|error| unusable(format!("a socket we cannot mark close-on-exec ({error})")))?;
    Ok(TcpListener::from(fd))
}

/// The daemon serves loopback only (daemon.md 1.5), whoever bound the socket.
fn require_loopback(address: SocketAddr) -> Result<(), ActivationError> {
    if is_loopback(address.ip()) {
        Ok(())
    } else {
        Err(ActivationError::NotLoopback { address })
    }
}

/// 127.0.0.0/8, ::1, and IPv4-mapped loopback (`::ffff:127.0.0.1`).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    use super::*;

    const PID: u32 = 4242;

    use crate::service::vars;

    fn owned(fd: impl AsFd) -> OwnedFd {
        fd.as_fd().try_clone_to_owned().unwrap()
    }

    fn cloexec(fd: &impl AsFd) -> bool {
        let flags = fcntl(fd.as_fd(), FcntlArg::F_GETFD).unwrap();
        FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC)
    }

    #[test]
    fn variables_for_this_process_are_read() {
        let pid = PID.to_string();
        assert_eq!(
            Passed::from_vars(PID, vars(&[("LISTEN_PID", &pid), ("LISTEN_FDS", "1")])).unwrap(),
            Some(Passed {
                count: 1,
                names: vec![]
            })
        );
        assert_eq!(
            Passed::from_vars(
                PID,
                vars(&[
                    ("LISTEN_PID", &pid),
                    ("LISTEN_FDS", " 1\n"),
                    ("LISTEN_FDNAMES", "http")
                ])
            )
            .unwrap(),
            Some(Passed {
                count: 1,
                names: vec!["http".into()]
            })
        );
    }

    #[test]
    fn variables_for_no_one_or_another_process_are_ignored() {
        assert_eq!(Passed::from_vars(PID, vars(&[])).unwrap(), None);
        assert_eq!(
            Passed::from_vars(PID, vars(&[("LISTEN_FDS", "1")])).unwrap(),
            None
        );
        // A parent's activation leaked to us: not our descriptors, even if fd 3 is open.
        assert_eq!(
            Passed::from_vars(PID, vars(&[("LISTEN_PID", "1"), ("LISTEN_FDS", "1")])).unwrap(),
            None
        );
    }

    #[test]
    fn malformed_variables_are_refused_by_name() {
        let pid = PID.to_string();
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[("LISTEN_PID", "me"), ("LISTEN_FDS", "1")],
                "LISTEN_PID=\"me\"",
            ),
            (&[("LISTEN_PID", &pid)], "LISTEN_FDS=\"\""),
            (
                &[("LISTEN_PID", &pid), ("LISTEN_FDS", "0")],
                "LISTEN_FDS=\"0\"",
            ),
            (
                &[("LISTEN_PID", &pid), ("LISTEN_FDS", "-1")],
                "LISTEN_FDS=\"-1\"",
            ),
            (
                &[("LISTEN_PID", &pid), ("LISTEN_FDS", "2")],
                "LISTEN_FDS names 2 sockets",
            ),
        ];
        for (pairs, expected) in cases {
            let error = Passed::from_vars(PID, vars(pairs)).unwrap_err().to_string();
            assert!(error.contains(expected), "{pairs:?}: {error}");
        }
    }

    #[test]
    fn a_loopback_listener_is_accepted_and_made_close_on_exec() {
        for address in ["127.0.0.1:0", "[::1]:0"] {
            let listener = match TcpListener::bind(address) {
                Ok(listener) => listener,
                // A host without IPv6 cannot bind ::1; 127.0.0.1 is always checked.
                Err(error) if address.starts_with('[') => {
                    eprintln!("skipped {address}: {error}");
                    continue;
                }
                Err(error) => panic!("bind {address}: {error}"),
            };
            let expected = listener.local_addr().unwrap();
            let fd = owned(&listener);
            fcntl(&fd, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
            assert!(!cloexec(&fd));
            let served = listener_from_fd(fd).unwrap();
            assert!(cloexec(&served));
            assert_eq!(served.local_addr().unwrap(), expected);
            // It really is the listening socket: a connection reaches it.
            let _client = std::net::TcpStream::connect(expected).unwrap();
            served.accept().unwrap();
        }
    }

    #[test]
    fn other_descriptors_are_refused_with_the_variable_named() {
        let temp = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(temp.path().join("plain")).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let unix_path = temp.path().join("unix.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        // Bound but never listening: socket(2) + bind(2) without listen(2).
        let bound_only = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            SockType::Stream,
            nix::sys::socket::SockFlag::empty(),
            None,
        )
        .unwrap();
        nix::sys::socket::bind(
            bound_only.as_raw_fd(),
            &nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, 0),
        )
        .unwrap();
        let cases: Vec<(OwnedFd, &str)> = vec![
            (owned(&file), "not a socket"),
            (owned(&udp), "not a stream socket"),
            (owned(&unix), "not a TCP socket"),
            (bound_only, "not listening"),
        ];
        for (fd, expected) in cases {
            let error = listener_from_fd(fd).unwrap_err().to_string();
            assert!(error.starts_with("LISTEN_FDS names fd 3"), "{error}");
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn only_loopback_addresses_pass() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.8.9.10".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("0.0.0.0".parse().unwrap()));
        assert!(!is_loopback("::".parse().unwrap()));
        assert!(!is_loopback("192.168.1.2".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
        // A wildcard listener is what a careless unit (`ListenStream=29888`) passes. Checked
        // on the address alone: tests bind loopback only.
        let error = require_loopback("0.0.0.0:29888".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a loopback address"), "{error}");
        assert!(error.starts_with("LISTEN_FDS names fd 3"), "{error}");
    }
}
