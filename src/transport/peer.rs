//! Who is on the other end of a loopback TCP connection, and whether they may come in.
//!
//! On Linux the owner of an accepted connection is the kernel's answer to one exact
//! `sock_diag` query (`util::socket_owner`). No entry, or any doubt, is "unknown" and is
//! refused.
//!
//! Where the lookup is unavailable (not Linux, or a kernel without `inet_diag`), the policy
//! falls back to a per-user bearer token; it never fails open. [`Access`] is that policy.
//!
//! A folder server (`agentprism serve <dir> --token`) may listen on a non-loopback address
//! behind a gateway, where the kernel has no local user to name: [`Access::Bearer`] lets
//! every connection in and leaves each request to the token check the HTTP transport makes
//! after its intercept hook (`http/guard.rs`), so a public route such as an Agent Card stays
//! reachable without the token.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::util::socket_owner::canonical;
pub use crate::util::socket_owner::{Unavailable, socket_owner};

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
