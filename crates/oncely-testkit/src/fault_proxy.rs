//! A loopback TCP fault proxy: put it between a client (the consumer's store pool) and its
//! server, and cut, stall or slow the connection at runtime — real network faults, no mocks.
//!
//! ```ignore
//! let proxy = FaultProxy::start("127.0.0.1:5432").await?;
//! let url = format!("postgres://postgres@{}/test", proxy.addr());
//! // … connect through `url`, then:
//! proxy.set(Fault::Drop);       // every connection closed, new ones closed at once
//! proxy.set(Fault::Blackhole);  // connections accepted, nothing forwarded: clients hang
//! proxy.set(Fault::Pass);       // back to normal
//! proxy.strand();               // open connections go silent for good; new ones work
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to the traffic, set with [`FaultProxy::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything (the normal state).
    #[default]
    Pass,
    /// Close every open connection, and close each new one as soon as it is accepted.
    Drop,
    /// Accept connections but forward nothing in either direction, so clients wait until
    /// their own timeouts. The bytes are held, not lost: back in [`Fault::Pass`] they flow on,
    /// as after a network partition healed by TCP retransmission. Set [`Fault::Drop`] before
    /// [`Fault::Pass`] for a partition that outlived the connections.
    Blackhole,
    /// Forward everything, each chunk (one read, in either direction) this much later.
    Delay(Duration),
    /// Forward everything until a client sends `COMMIT` (once per [`FaultProxy::set`]); then
    /// cut that connection, without forwarding the server's answer. With `deliver`, the
    /// `COMMIT` reaches the server first, so the transaction commits while the client sees a
    /// lost connection: a commit whose outcome is unknown to the client.
    CutAtCommit {
        /// Whether the `COMMIT` reaches the server before the cut.
        deliver: bool,
    },
}

/// Counters of what the proxy saw (for test reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections closed by the proxy because of [`Fault::Drop`].
    pub dropped: u64,
    /// Connections cut at a `COMMIT` ([`Fault::CutAtCommit`]).
    pub cut_at_commit: u64,
    /// Connections open at a [`FaultProxy::strand`] (silent from then on).
    pub stranded: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
    cut_at_commit: AtomicU64,
    /// A [`Fault::CutAtCommit`] that has not fired yet.
    commit_cut_armed: AtomicBool,
    /// Connections accepted before [`FaultProxy::strand`] set this (their number) are silent.
    stranded_below: AtomicU64,
    /// Connections open now.
    open: AtomicU64,
    stranded: AtomicU64,
}

/// A running fault proxy on `127.0.0.1:<random port>`. Dropping it stops it and closes
/// every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    state: watch::Sender<Fault>,
    counters: Arc<Counters>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards each connection to `target`, in [`Fault::Pass`].
    pub async fn start(target: impl ToSocketAddrs) -> io::Result<Self> {
        let target = tokio::net::lookup_host(target)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no target address"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (state, rx) = watch::channel(Fault::Pass);
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(listener, target, rx, counters.clone()));
        Ok(Self {
            addr,
            state,
            counters,
            accept,
        })
    }

    /// The address clients connect to instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the fault, for open and new connections alike.
    pub fn set(&self, fault: Fault) {
        self.counters
            .commit_cut_armed
            .store(matches!(fault, Fault::CutAtCommit { .. }), Ordering::SeqCst);
        self.state.send_replace(fault);
    }

    /// Strands every connection open now, as a NAT or firewall that dropped its state does:
    /// from here on they forward nothing in either direction, for good, and close neither
    /// end (no RST, no FIN); connections opened later pass (under the fault in force).
    pub fn strand(&self) {
        let open = self.counters.open.load(Ordering::SeqCst);
        self.counters.stranded.fetch_add(open, Ordering::Relaxed);
        let accepted = self.counters.accepted.load(Ordering::SeqCst);
        self.counters
            .stranded_below
            .store(accepted, Ordering::SeqCst);
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.state.borrow()
    }

    /// What the proxy saw so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            cut_at_commit: self.counters.cut_at_commit.load(Ordering::Relaxed),
            stranded: self.counters.stranded.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Connection tasks end when the state sender is gone (see `until_dropped`).
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    rx: watch::Receiver<Fault>,
    counters: Arc<Counters>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let number = counters.accepted.fetch_add(1, Ordering::SeqCst);
        if *rx.borrow() == Fault::Drop {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        let rx = rx.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            counters.open.fetch_add(1, Ordering::SeqCst);
            tokio::select! {
                _ = serve(client, target, rx.clone(), counters.clone(), number) => {}
                _ = until_dropped(rx) => {
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            counters.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Resolves when the fault becomes [`Fault::Drop`] or the proxy is gone.
async fn until_dropped(mut rx: watch::Receiver<Fault>) {
    loop {
        if *rx.borrow_and_update() == Fault::Drop {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Waits while blackholed; `None` when the connection must end, else the delay to add.
async fn gate(rx: &mut watch::Receiver<Fault>) -> Option<Option<Duration>> {
    loop {
        match *rx.borrow_and_update() {
            Fault::Pass | Fault::CutAtCommit { .. } => return Some(None),
            Fault::Delay(d) => return Some(Some(d)),
            Fault::Drop => return None,
            Fault::Blackhole => {}
        }
        rx.changed().await.ok()?;
    }
}

async fn serve(
    client: TcpStream,
    target: SocketAddr,
    mut rx: watch::Receiver<Fault>,
    counters: Arc<Counters>,
    number: u64,
) {
    // A connection accepted while blackholed reaches the server only once traffic passes.
    if gate(&mut rx).await.is_none() {
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    let up = pump(
        client_r,
        server_w,
        Direction {
            rx: rx.clone(),
            cut: cut.clone(),
            upstream: Some(counters.clone()),
            stranded: Stranded {
                counters: counters.clone(),
                number,
            },
        },
    );
    let down = pump(
        server_r,
        client_w,
        Direction {
            rx,
            cut: cut.clone(),
            upstream: None,
            stranded: Stranded { counters, number },
        },
    );
    tokio::pin!(up, down);
    // A direction ending normally lets the other finish; a cut ends both at once.
    tokio::select! {
        _ = &mut up => if !cut.load(Ordering::SeqCst) { let _ = down.await; },
        _ = &mut down => if !cut.load(Ordering::SeqCst) { let _ = up.await; },
    }
}

/// One direction of a connection: the fault to follow, the connection's cut flag, and (client
/// to server only) the counters whose armed [`Fault::CutAtCommit`] it may fire.
struct Direction {
    rx: watch::Receiver<Fault>,
    cut: Arc<AtomicBool>,
    upstream: Option<Arc<Counters>>,
    stranded: Stranded,
}

/// Whether a connection (by its accept number) was open at the last [`FaultProxy::strand`].
struct Stranded {
    counters: Arc<Counters>,
    number: u64,
}

impl Stranded {
    fn now(&self) -> bool {
        self.number < self.counters.stranded_below.load(Ordering::SeqCst)
    }
}

impl Direction {
    /// Whether this client chunk fires an armed [`Fault::CutAtCommit`]; `Some(deliver)` if so.
    fn cuts_at(&self, chunk: &[u8]) -> Option<bool> {
        let counters = self.upstream.as_ref()?;
        let Fault::CutAtCommit { deliver } = *self.rx.borrow() else {
            return None;
        };
        let commit = chunk.windows(6).any(|w| w.eq_ignore_ascii_case(b"COMMIT"));
        (commit && counters.commit_cut_armed.swap(false, Ordering::SeqCst)).then(|| {
            counters.cut_at_commit.fetch_add(1, Ordering::Relaxed);
            // Set before the COMMIT can reach the server, so its answer is never forwarded.
            self.cut.store(true, Ordering::SeqCst);
            deliver
        })
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut d: Direction) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if gate(&mut d.rx).await.is_none() {
            return Ok(());
        }
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        // The fault may have changed while reading: hold the chunk while blackholed.
        let Some(delay) = gate(&mut d.rx).await else {
            return Ok(());
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        if let Some(deliver) = d.cuts_at(&buf[..n]) {
            if deliver {
                to.write_all(&buf[..n]).await?;
                to.flush().await?;
            }
            return Ok(());
        }
        if d.cut.load(Ordering::SeqCst) {
            return Ok(());
        }
        if d.stranded.now() {
            // Silent for good: hold the socket open, forward nothing, answer nothing.
            std::future::pending::<()>().await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// Sends `msg` and reads the echo, or fails/times out.
    async fn round_trip(s: &mut TcpStream, msg: &[u8], wait: Duration) -> io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        match tokio::time::timeout(wait, s.read_exact(&mut got)).await {
            Ok(r) => r.map(|_| got),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no echo")),
        }
    }

    const WAIT: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn passes_traffic() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"hello", WAIT).await.unwrap(), b"hello");
        assert_eq!(proxy.stats().accepted, 1);
    }

    #[tokio::test]
    async fn cut_at_commit_fires_once_and_hides_the_answer() {
        for deliver in [false, true] {
            let proxy = FaultProxy::start(echo_server().await).await.unwrap();
            let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
            proxy.set(Fault::CutAtCommit { deliver });
            assert_eq!(
                round_trip(&mut s, b"INSERT", WAIT).await.unwrap(),
                b"INSERT"
            );
            assert!(
                round_trip(&mut s, b"COMMIT", WAIT).await.is_err(),
                "{deliver}"
            );
            assert_eq!(proxy.stats().cut_at_commit, 1);
            // Fired once: a new connection commits through.
            let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
            assert_eq!(
                round_trip(&mut again, b"COMMIT", WAIT).await.unwrap(),
                b"COMMIT"
            );
            assert_eq!(proxy.stats().cut_at_commit, 1);
        }
    }

    #[tokio::test]
    async fn drop_closes_open_and_new_connections() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        round_trip(&mut open, b"x", WAIT).await.unwrap();
        proxy.set(Fault::Drop);
        let mut buf = [0u8; 1];
        let eof = tokio::time::timeout(WAIT, open.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(eof, Ok(0) | Err(_)), "open connection not closed");
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut new, b"y", WAIT).await.is_err());
        proxy.set(Fault::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"z", WAIT).await.unwrap(), b"z");
        assert_eq!(proxy.stats().dropped, 2);
    }

    #[tokio::test]
    async fn blackhole_holds_then_releases() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        round_trip(&mut open, b"a", WAIT).await.unwrap();
        proxy.set(Fault::Blackhole);
        let short = Duration::from_millis(300);
        let err = round_trip(&mut open, b"b", short).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut new, b"c", short).await.is_err());
        proxy.set(Fault::Pass);
        // The held bytes flow on once the partition heals.
        let mut got = [0u8; 1];
        tokio::time::timeout(WAIT, open.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"b");
        tokio::time::timeout(WAIT, new.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"c");
    }

    #[tokio::test]
    async fn delay_slows_each_chunk() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set(Fault::Delay(Duration::from_millis(200)));
        let t = std::time::Instant::now();
        assert_eq!(round_trip(&mut s, b"slow", WAIT).await.unwrap(), b"slow");
        // One chunk each way.
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(proxy.fault(), Fault::Delay(Duration::from_millis(200)));
    }
}
