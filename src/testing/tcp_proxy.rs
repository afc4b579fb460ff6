//! A loopback TCP proxy between one client (a replica) and a server (the database), whose
//! behaviour a test switches at any time: pass bytes through, delay them, blackhole them
//! (connections stay open, nothing arrives either way: a partitioned network), or drop
//! every connection (and each new one at once: a refused route). So one replica can be cut
//! off from the database without touching the others.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with the bytes of every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward at once.
    Pass,
    /// Forward each chunk after this long.
    Delay(Duration),
    /// Read and discard: the peers see an open, silent connection.
    Blackhole,
    /// Close every connection, and each new one as soon as it is accepted.
    Drop,
}

/// A running proxy; it stops (and closes its connections) when dropped.
pub struct TcpProxy {
    /// Where clients connect.
    address: SocketAddr,
    /// The mode every connection's pumps watch.
    mode: watch::Sender<ProxyMode>,
    /// The accept loop, aborted at drop; the pumps end when the mode channel closes.
    acceptor: JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `target`, in [`ProxyMode::Pass`].
    pub async fn start(target: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let (mode, watcher) = watch::channel(ProxyMode::Pass);
        let acceptor = tokio::spawn(accept(listener, target, watcher));
        Ok(TcpProxy {
            address,
            mode,
            acceptor,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    /// Switches every connection, open or future, to `mode`.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        // The pumps see the mode channel close and end, closing their sockets.
        self.mode.send_replace(ProxyMode::Drop);
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<ProxyMode>) {
    while let Ok((client, _)) = listener.accept().await {
        if *mode.borrow() == ProxyMode::Drop {
            drop(client);
            continue;
        }
        let mode = mode.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = tokio::spawn(pump(client_read, server_write, mode.clone()));
            let down = tokio::spawn(pump(server_read, client_write, mode));
            up.await.ok();
            down.await.ok();
        });
    }
}

/// Copies one direction of a connection under the current mode, until either side closes
/// or the mode becomes `Drop`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<ProxyMode>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if *mode.borrow_and_update() == ProxyMode::Drop {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        let count = match read {
            Ok(0) | Err(_) => {
                to.shutdown().await.ok();
                return;
            }
            Ok(count) => count,
        };
        let current = *mode.borrow();
        match current {
            ProxyMode::Pass => {}
            ProxyMode::Delay(delay) => tokio::time::sleep(delay).await,
            ProxyMode::Blackhole => continue,
            ProxyMode::Drop => return,
        }
        if to.write_all(&buffer[..count]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// An echo server on a free loopback port.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    tokio::io::copy(&mut read, &mut write).await.ok();
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> Vec<u8> {
        stream.write_all(text).await.unwrap();
        let mut answer = vec![0u8; text.len()];
        stream.read_exact(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn passes_bytes_both_ways() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");
        assert_eq!(proxy.mode(), ProxyMode::Pass);
    }

    #[tokio::test]
    async fn delays_each_direction() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"warm").await, b"warm");
        proxy.set_mode(ProxyMode::Delay(Duration::from_millis(150)));
        let started = Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").await, b"slow");
        // Delayed on the way there and on the way back.
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn blackholes_an_open_connection_and_passes_again_after() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"one").await, b"one");
        proxy.set_mode(ProxyMode::Blackhole);
        stream.write_all(b"lost").await.unwrap();
        let mut answer = [0u8; 4];
        let waited =
            tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut answer)).await;
        assert!(
            waited.is_err(),
            "nothing comes back through a blackhole: {waited:?}"
        );
        // The connection stayed open: once passing again, new bytes flow (the lost ones
        // stay lost).
        proxy.set_mode(ProxyMode::Pass);
        assert_eq!(round_trip(&mut stream, b"back").await, b"back");
    }

    #[tokio::test]
    async fn drop_closes_open_and_new_connections() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"one").await, b"one");
        proxy.set_mode(ProxyMode::Drop);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
            .await
            .expect("the proxy closes the connection");
        assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");
        let mut fresh = TcpStream::connect(proxy.address()).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), fresh.read(&mut byte))
            .await
            .expect("a new connection is closed at once");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
