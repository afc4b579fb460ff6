//! Who is on the other end of a loopback TCP connection, and whether they may come in.
//!
//! On Linux the owner of an accepted connection is looked up with one exact netlink
//! `sock_diag` query (`SOCK_DIAG_BY_FAMILY` without `NLM_F_DUMP`): the kernel finds the one
//! socket whose *local* endpoint is the peer's address and port and whose *remote* endpoint
//! is our listener's, and reports its uid. That socket is the client's; our own accepted
//! socket has the endpoints the other way round, so it can never be the answer. Only an
//! `ESTABLISHED` full socket counts: a client that closed at once leaves a time-wait entry
//! whose reported uid is 0, which must not pass for root. No entry, or any doubt, is
//! "unknown" and is refused.
//!
//! Where the lookup is unavailable (not Linux, or a kernel without `inet_diag`), the policy
//! falls back to a per-user bearer token; it never fails open. [`Access`] is that policy.
//!
//! A folder server (`agentprism serve <dir> --token`) may listen on a non-loopback address
//! behind a gateway, where the kernel has no local user to name: [`Access::Bearer`] lets
//! every connection in and leaves each request to the token check the HTTP transport makes
//! after its intercept hook (`http/guard.rs`), so a public route such as an Agent Card stays
//! reachable without the token.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Whom a listener lets in.
#[derive(Clone)]
pub enum Access {
    /// Anyone who reaches the socket (`AGENTPRISM_DAEMON_ALLOW_OTHER_USERS=1`, tests of
    /// the transport alone). Dangerous on a shared machine.
    Open,
    /// Only connections whose socket belongs to `uid`; where the kernel cannot say, only
    /// requests that carry `Authorization: Bearer <token>` (and none at all without a token).
    Owner {
        uid: u32,
        token: Option<Arc<str>>,
        /// Tests force the token fallback with this (`lookup: false`).
        lookup: bool,
    },
    /// Anyone who shows `Authorization: Bearer <token>` on each request; the peer's user is
    /// not asked. The transport checks the token per request, after the intercept hook, so
    /// the hook's public routes answer without it.
    Bearer { token: Arc<str> },
}

impl Access {
    /// Only this process's own user.
    pub fn owner(token: Option<String>) -> Access {
        Access::Owner {
            uid: nix::unistd::geteuid().as_raw(),
            token: token.map(Arc::from),
            lookup: true,
        }
    }
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Open => f.write_str("Open"),
            Access::Owner { uid, token, lookup } => f
                .debug_struct("Owner")
                .field("uid", uid)
                .field("token", &token.as_ref().map(|_| ".."))
                .field("lookup", lookup)
                .finish(),
            Access::Bearer { .. } => f.debug_struct("Bearer").field("token", &"..").finish(),
        }
    }
}

/// What the connection check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Let in: the owner's connection, an open listener, or a bearer listener (whose
    /// requests then show the token one by one).
    Trusted,
    /// The kernel names another user (`Some(uid)`) or has no live entry for the peer (`None`).
    Foreign(Option<u32>),
    /// The kernel cannot tell: each request must show the bearer token.
    NeedsToken,
}

/// Classifies a connection accepted on `local` from `peer`.
pub fn classify(access: &Access, local: SocketAddr, peer: SocketAddr) -> Caller {
    match access {
        Access::Open | Access::Bearer { .. } => Caller::Trusted,
        Access::Owner { uid, lookup, .. } => {
            if !lookup {
                return Caller::NeedsToken;
            }
            match socket_owner(local, peer) {
                Ok(Some(owner)) if owner == *uid => Caller::Trusted,
                Ok(owner) => Caller::Foreign(owner),
                Err(Unavailable) => Caller::NeedsToken,
            }
        }
    }
}

/// Whether `authorization` (a header value) carries the listener's token, compared in
/// constant time. An open listener needs none; an owner listener without a token accepts none.
pub(crate) fn bearer_matches(access: &Access, authorization: Option<&[u8]>) -> bool {
    let token = match access {
        Access::Open => return true,
        Access::Owner { token: None, .. } => return false,
        Access::Owner {
            token: Some(token), ..
        }
        | Access::Bearer { token } => token,
    };
    let Some(presented) = authorization.and_then(|value| value.strip_prefix(b"Bearer ")) else {
        return false;
    };
    constant_time_eq(presented, token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The socket owner lookup is not available on this system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unavailable;

/// The uid owning the established client socket `peer` → `local`, `Ok(None)` if the kernel
/// has no such live socket, `Err(Unavailable)` if it cannot be asked.
pub fn socket_owner(local: SocketAddr, peer: SocketAddr) -> Result<Option<u32>, Unavailable> {
    #[cfg(target_os = "linux")]
    {
        sock_diag::owner(local, peer)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (local, peer);
        Err(Unavailable)
    }
}

/// Whether [`socket_owner`] works here: asks about a loopback connection of our own and
/// expects our own uid back. `daemon url` uses it to know whether hosts need the token.
pub(crate) fn lookup_available() -> bool {
    let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", 0)) else {
        return false;
    };
    let Ok(local) = listener.local_addr() else {
        return false;
    };
    let Ok(client) = std::net::TcpStream::connect(local) else {
        return false;
    };
    let Ok(peer) = client.local_addr() else {
        return false;
    };
    let Ok((_accepted, _)) = listener.accept() else {
        return false;
    };
    socket_owner(local, peer) == Ok(Some(nix::unistd::geteuid().as_raw()))
}

/// Whether `address` is a loopback address (`127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`): the
/// CLI warns that a listener bound anywhere else without a token is unauthenticated. The
/// unspecified addresses (`0.0.0.0`, `::`) listen on every interface, so they are not.
pub(crate) fn is_loopback(address: &SocketAddr) -> bool {
    canonical(address.ip()).is_loopback()
}

/// Maps an IPv4 peer of a dual-stack answer back to IPv4, so both forms compare equal.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(target_os = "linux")]
mod sock_diag {
    //! The netlink exchange: one `inet_diag_req_v2`, one `inet_diag_msg` (or an error).
    //! Layouts from `linux/inet_diag.h`; every multi-byte field is host order except ports
    //! and addresses, which are network order.

    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        socket,
    };

    use super::{Unavailable, canonical};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_HEADER: usize = 16;
    const REQUEST_BODY: usize = 56;
    const TCP_ESTABLISHED: u8 = 1;
    /// `inet_diag_msg`: family, state, timer, retrans (4), the socket id (48), expires,
    /// rqueue, wqueue (12), then uid and inode.
    const UID_OFFSET: usize = 4 + 48 + 12;
    const INODE_OFFSET: usize = UID_OFFSET + 4;

    pub(super) fn owner(local: SocketAddr, peer: SocketAddr) -> Result<Option<u32>, Unavailable> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkSockDiag,
        )
        .map_err(|_| Unavailable)?;
        // An IPv4 listener's client may be an IPv6 socket with mapped addresses; the kernel
        // finds it under either family for an IPv4 tuple, so one query suffices.
        let request = request(local, peer);
        sendto(
            fd.as_raw_fd(),
            &request,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(|_| Unavailable)?;
        let mut answer = [0u8; 512];
        let length =
            recv(fd.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(|_| Unavailable)?;
        parse(&answer[..length], local, peer)
    }

    /// The request: the client socket's local end is `peer`, its remote end `local`.
    fn request(local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
        let family = match canonical(peer.ip()) {
            IpAddr::V4(_) => nix::libc::AF_INET,
            IpAddr::V6(_) => nix::libc::AF_INET6,
        } as u8;
        let mut message = Vec::with_capacity(NLMSG_HEADER + REQUEST_BODY);
        message.extend_from_slice(&((NLMSG_HEADER + REQUEST_BODY) as u32).to_ne_bytes());
        message.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        message.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        message.push(family);
        message.push(nix::libc::IPPROTO_TCP as u8);
        message.push(0); // no extensions
        message.push(0);
        message.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
        message.extend_from_slice(&socket_id(peer, local));
        message
    }

    /// An `inet_diag_sockid`: sport, dport, src, dst, interface, cookie (none).
    fn socket_id(source: SocketAddr, destination: SocketAddr) -> [u8; 48] {
        let mut id = [0u8; 48];
        id[0..2].copy_from_slice(&source.port().to_be_bytes());
        id[2..4].copy_from_slice(&destination.port().to_be_bytes());
        id[4..20].copy_from_slice(&address_bytes(source.ip()));
        id[20..36].copy_from_slice(&address_bytes(destination.ip()));
        // idiag_if = 0 (any interface); idiag_cookie = INET_DIAG_NOCOOKIE.
        id[40..48].fill(0xff);
        id
    }

    fn address_bytes(address: IpAddr) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        match canonical(address) {
            IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => bytes.copy_from_slice(&v6.octets()),
        }
        bytes
    }

    /// Reads the answer. Anything but one established socket with the asked endpoints and
    /// a real inode is `None` (refused by the caller).
    fn parse(
        answer: &[u8],
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Result<Option<u32>, Unavailable> {
        if answer.len() < NLMSG_HEADER {
            return Err(Unavailable);
        }
        let kind = u16::from_ne_bytes([answer[4], answer[5]]);
        let body = &answer[NLMSG_HEADER..];
        if kind == NLMSG_ERROR {
            let errno = body
                .get(..4)
                .map(|bytes| i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                .unwrap_or(0);
            // ENOENT: no such socket (the peer is gone, or never was). Anything else means
            // the kernel cannot answer this kind of question.
            return if errno == -nix::libc::ENOENT {
                Ok(None)
            } else {
                Err(Unavailable)
            };
        }
        if kind != SOCK_DIAG_BY_FAMILY || body.len() < INODE_OFFSET + 4 {
            return Err(Unavailable);
        }
        let word = |offset: usize| {
            u32::from_ne_bytes([
                body[offset],
                body[offset + 1],
                body[offset + 2],
                body[offset + 3],
            ])
        };
        let state = body[1];
        let asked = (
            SocketAddr::new(canonical(peer.ip()), peer.port()),
            SocketAddr::new(canonical(local.ip()), local.port()),
        );
        let same_endpoints = endpoints(body) == Some(asked);
        if state != TCP_ESTABLISHED || word(INODE_OFFSET) == 0 || !same_endpoints {
            return Ok(None);
        }
        Ok(Some(word(UID_OFFSET)))
    }

    /// The (local, remote) endpoints an answer names, IPv4-mapped addresses folded to IPv4.
    fn endpoints(body: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
        let id = body.get(4..52)?;
        let port = |at: usize| u16::from_be_bytes([id[at], id[at + 1]]);
        let address = |at: usize| -> Option<IpAddr> {
            let bytes = &id[at..at + 16];
            match i32::from(body[0]) {
                nix::libc::AF_INET => Some(IpAddr::from(<[u8; 4]>::try_from(&bytes[..4]).ok()?)),
                nix::libc::AF_INET6 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
                _ => None,
            }
        };
        let source = SocketAddr::new(canonical(address(4)?), port(0));
        let destination = SocketAddr::new(canonical(address(20)?), port(2));
        Some((source, destination))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_connection_is_ours() {
        assert!(lookup_available(), "sock_diag answers for our own socket");
    }

    #[test]
    fn the_accepted_side_is_never_the_answer() {
        // Asking with the endpoints swapped names our accepted socket, which the query must
        // not mistake for the client's: the lookup is directional.
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let peer = client.local_addr().unwrap();
        let (_accepted, seen) = listener.accept().unwrap();
        assert_eq!(seen, peer);
        let uid = nix::unistd::geteuid().as_raw();
        assert_eq!(socket_owner(local, peer), Ok(Some(uid)));
        // A port nobody uses as the client's: no entry, not "ours".
        let unused = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1).max(1));
        assert_eq!(socket_owner(local, unused), Ok(None));
    }

    #[test]
    fn a_closed_client_is_unknown() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let peer = client.local_addr().unwrap();
        let (accepted, _) = listener.accept().unwrap();
        drop(client);
        // The client's end is now FIN_WAIT or a time-wait entry: never "ours", never root.
        let owner = socket_owner(local, peer);
        assert_eq!(owner, Ok(None), "a closing client has no trusted owner");
        drop(accepted);
    }

    #[test]
    fn bearer_tokens() {
        let access = Access::owner(Some("s3cret".into()));
        assert!(bearer_matches(&access, Some(b"Bearer s3cret")));
        assert!(!bearer_matches(&access, Some(b"Bearer s3cre")));
        assert!(!bearer_matches(&access, Some(b"bearer s3cret")));
        assert!(!bearer_matches(&access, None));
        assert!(!bearer_matches(&Access::owner(None), Some(b"Bearer ")));
        assert!(bearer_matches(&Access::Open, None));
    }

    #[test]
    fn a_bearer_listener_lets_every_connection_in_and_checks_the_token() {
        let access = Access::Bearer {
            token: Arc::from("s3cret"),
        };
        let address: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        assert_eq!(classify(&access, address, address), Caller::Trusted);
        assert!(bearer_matches(&access, Some(b"Bearer s3cret")));
        assert!(!bearer_matches(&access, Some(b"Bearer s3cretx")));
        assert!(!bearer_matches(&access, Some(b"Bearer ")));
        assert!(!bearer_matches(&access, Some(b"s3cret")));
        assert!(!bearer_matches(&access, None));
        assert_eq!(format!("{access:?}"), r#"Bearer { token: ".." }"#);
    }

    #[test]
    fn loopback_addresses() {
        for loopback in [
            "127.0.0.1:80",
            "127.255.0.9:1",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:9",
        ] {
            let address: SocketAddr = loopback.parse().unwrap();
            assert!(is_loopback(&address), "{loopback}");
        }
        for other in [
            "0.0.0.0:8080",
            "[::]:8080",
            "10.0.0.1:80",
            "[::ffff:10.0.0.1]:80",
            "[fe80::1]:80",
        ] {
            let address: SocketAddr = other.parse().unwrap();
            assert!(!is_loopback(&address), "{other}");
        }
    }

    #[test]
    fn the_token_fallback_never_opens() {
        let access = Access::Owner {
            uid: 0,
            token: None,
            lookup: false,
        };
        let address: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(classify(&access, address, address), Caller::NeedsToken);
        assert!(!bearer_matches(&access, Some(b"Bearer anything")));
    }
}
