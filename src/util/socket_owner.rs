//! Who owns the other end of an accepted loopback TCP connection, as the kernel tells it.
//!
//! On Linux the owner is looked up with one exact netlink `sock_diag` query
//! (`SOCK_DIAG_BY_FAMILY` without `NLM_F_DUMP`): the kernel finds the one socket whose *local*
//! endpoint is the peer's address and port and whose *remote* endpoint is our listener's, and
//! reports its uid. That socket is the client's; our own accepted socket has the endpoints the
//! other way round, so it can never be the answer. Only an `ESTABLISHED` full socket counts: a
//! client that closed at once leaves a time-wait entry whose reported uid is 0, which must not
//! pass for root. No entry is `Ok(None)`; a system that cannot be asked is [`Unavailable`].
//! The policies over it are their callers': the transports' `Access`, the structured-output
//! tool's own check.

use std::net::{IpAddr, SocketAddr};

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

/// Maps an IPv4 peer of a dual-stack answer back to IPv4, so both forms compare equal.
pub(crate) fn canonical(address: IpAddr) -> IpAddr {
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
