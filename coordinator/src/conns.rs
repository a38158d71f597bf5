//! The connections a coordinator serves, bounded: at most a total and a
//! number per client address, each closed if its client never starts its
//! handshake or goes quiet, and, when every place is taken, one makes way
//! for a new one: the oldest that never completed a call, else the one
//! idle longest (no call completed within [`BUSY`]). A flood of idle
//! connections can then neither lock live clients out nor use up the
//! process's file descriptors. A connection refused is told why (its
//! calls answered RESOURCE_EXHAUSTED, "too many connections") before it
//! is closed.

use futures_util::task::AtomicWaker;
use nqueens_proto::refusal::Refusal;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long one connection may live before it is closed gracefully.
pub const CONNECTION_AGE: Duration = Duration::from_secs(15 * 60);

/// A new connection must send its first bytes (a TLS ClientHello, or the
/// HTTP/2 preface) within this, else it is closed: connections that never
/// start their handshake cannot hold places.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The least a client sends to start: both a TLS ClientHello and the
/// HTTP/2 preface with its SETTINGS frame are longer.
const HANDSHAKE_BYTES: u64 = 32;

/// A connection that sends nothing for this long is closed. Live ones
/// never reach it: the server pings an idle connection every 30 s and
/// reads the answer.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A connection that started a call within this is never evicted.
pub const BUSY: Duration = Duration::from_secs(1);

/// Calls (HTTP/2 streams) open at once on one connection
/// (`NQUEENS_STREAMS_PER_CONNECTION`, default 12): with the connection
/// limit, it bounds the memory of calls whose request never arrives.
pub fn streams_per_connection() -> u32 {
    std::env::var("NQUEENS_STREAMS_PER_CONNECTION")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(12)
}

/// Gives the memory a flood left behind back to the system every few
/// seconds (glibc keeps freed memory in its arenas otherwise).
pub async fn give_back_memory() {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            extern "C" {
                fn malloc_trim(pad: usize) -> std::ffi::c_int;
            }
            // SAFETY: glibc's malloc_trim takes no pointer and may be
            // called from any thread at any time.
            unsafe {
                malloc_trim(0);
            }
        }
    }
}

/// How many connections at once: `NQUEENS_MAX_CONNECTIONS` (default
/// 1,000) in all, and `NQUEENS_MAX_CONNECTIONS_PER_IP` (default a quarter
/// of that) from one address other than loopback.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub total: usize,
    pub per_ip: usize,
}

impl Bounds {
    pub fn from_env() -> Bounds {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n: &usize| n > 0)
        };
        let total = var("NQUEENS_MAX_CONNECTIONS").unwrap_or(1_000);
        Bounds {
            total,
            per_ip: var("NQUEENS_MAX_CONNECTIONS_PER_IP").unwrap_or((total / 4).max(1)),
        }
    }
}

/// What the table knows of one connection.
#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    /// Milliseconds after the table's start of its latest completed call
    /// (or of its opening).
    active_ms: AtomicU64,
    /// A call of it completed.
    called: AtomicBool,
    closed: AtomicBool,
    waker: AtomicWaker,
}

/// Every open connection.
pub struct Table {
    bounds: Bounds,
    start: Instant,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    by_peer: HashMap<SocketAddr, Arc<Conn>>,
    per_ip: HashMap<IpAddr, usize>,
}

impl Table {
    pub fn new(bounds: Bounds) -> Arc<Table> {
        Arc::new(Table {
            bounds,
            start: Instant::now(),
            open: Mutex::default(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records a completed call from `peer` (its connection is busy).
    pub fn called(&self, peer: SocketAddr) {
        let open = self.open.lock().expect("connections lock");
        if let Some(c) = open.by_peer.get(&peer) {
            c.active_ms.store(self.now_ms(), Ordering::Relaxed);
            c.called.store(true, Ordering::Relaxed);
        }
    }

    /// The connection to close for a new one: the oldest that never
    /// completed a call, else the one idle longest, if idle for [`BUSY`].
    fn victim(&self, open: &Open, now: u64) -> Option<Arc<Conn>> {
        let since = |c: &Arc<Conn>| c.active_ms.load(Ordering::Relaxed);
        let silent = open
            .by_peer
            .values()
            .filter(|c| !c.called.load(Ordering::Relaxed));
        if let Some(c) = silent.min_by_key(|c| since(c)) {
            return Some(Arc::clone(c));
        }
        let busy = BUSY.as_millis() as u64;
        open.by_peer
            .values()
            .filter(|c| now.saturating_sub(since(c)) >= busy)
            .min_by_key(|c| since(c))
            .cloned()
    }

    /// Takes a place for a new connection from `peer`, closing the
    /// connection idle longest if every place is taken; `None` if there is
    /// no place (why, for the refusal).
    fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Arc<Conn>, String> {
        self.admit_at(peer, self.now_ms())
    }

    /// [`Table::admit`] at `now` (ms after the table's start).
    fn admit_at(self: &Arc<Self>, peer: SocketAddr, now: u64) -> Result<Arc<Conn>, String> {
        let mut open = self.open.lock().expect("connections lock");
        let ip = peer.ip();
        let from_ip = open.per_ip.get(&ip).copied().unwrap_or(0);
        if !ip.is_loopback() && from_ip >= self.bounds.per_ip {
            return Err(format!(
                "too many connections from {ip}: {} (NQUEENS_MAX_CONNECTIONS_PER_IP)",
                self.bounds.per_ip
            ));
        }
        if open.by_peer.len() >= self.bounds.total {
            let Some(victim) = self.victim(&open, now) else {
                return Err(format!(
                    "too many connections: {} are open and busy (NQUEENS_MAX_CONNECTIONS)",
                    self.bounds.total
                ));
            };
            forget(&mut open, &victim);
            victim.closed.store(true, Ordering::Release);
            victim.waker.wake();
        }
        let conn = Arc::new(Conn {
            peer,
            active_ms: AtomicU64::new(now),
            called: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        if let Some(old) = open.by_peer.insert(peer, Arc::clone(&conn)) {
            // The same address and port again: the old one is gone.
            old.closed.store(true, Ordering::Release);
            old.waker.wake();
        } else {
            *open.per_ip.entry(ip).or_default() += 1;
        }
        Ok(conn)
    }

    fn close(&self, conn: &Arc<Conn>) {
        let mut open = self.open.lock().expect("connections lock");
        if open
            .by_peer
            .get(&conn.peer)
            .is_some_and(|c| Arc::ptr_eq(c, conn))
        {
            forget(&mut open, conn);
        }
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open.lock().expect("connections lock").by_peer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn forget(open: &mut Open, conn: &Conn) {
    open.by_peer.remove(&conn.peer);
    let ip = conn.peer.ip();
    if let Some(n) = open.per_ip.get_mut(&ip) {
        *n -= 1;
        if *n == 0 {
            open.per_ip.remove(&ip);
        }
    }
}

/// An accepted connection the table can hold: a TCP stream in production,
/// a simulated one in the simulation tests.
pub trait Accepted: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The client's address, which its place in the table is kept under.
    fn peer(&self) -> std::io::Result<SocketAddr>;
    /// The addresses the services read from each call.
    fn connect_info(&self) -> tonic::transport::server::TcpConnectInfo;
}

impl Accepted for tokio::net::TcpStream {
    fn peer(&self) -> std::io::Result<SocketAddr> {
        self.peer_addr()
    }
    fn connect_info(&self) -> tonic::transport::server::TcpConnectInfo {
        tonic::transport::server::Connected::connect_info(self)
    }
}

/// A connection holding a place in the [`Table`] until it closes; closed
/// when its client goes quiet (see the timeouts above) or when it is
/// evicted to make way.
pub struct Limited<IO: Accepted = tokio::net::TcpStream> {
    io: IO,
    conn: Arc<Conn>,
    table: Arc<Table>,
    /// Bytes read so far, up to HANDSHAKE_BYTES.
    started: u64,
    quiet: Pin<Box<tokio::time::Sleep>>,
}

impl<IO: Accepted> Drop for Limited<IO> {
    fn drop(&mut self) {
        self.table.close(&self.conn);
    }
}

impl<IO: Accepted> Limited<IO> {
    fn evicted(&self, cx: &mut Context<'_>) -> bool {
        self.conn.waker.register(cx.waker());
        self.conn.closed.load(Ordering::Acquire)
    }
}

fn gone() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "closed to make way for a new connection (every place was taken; this one was idle longest)",
    )
}

impl<IO: Accepted> AsyncRead for Limited<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        use std::future::Future;
        let me = self.get_mut();
        if me.evicted(cx) {
            return Poll::Ready(Err(gone()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = (buf.filled().len() - before) as u64;
                if got > 0 {
                    me.started = (me.started + got).min(HANDSHAKE_BYTES);
                    // Before the handshake bytes are in, the first deadline stands.
                    if me.started >= HANDSHAKE_BYTES {
                        let next = tokio::time::Instant::now() + IDLE_TIMEOUT;
                        me.quiet.as_mut().reset(next);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match me.quiet.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    match me.started < HANDSHAKE_BYTES {
                        true => "the client did not start its handshake in time",
                        false => "the client went quiet",
                    },
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl<IO: Accepted> AsyncWrite for Limited<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        if me.evicted(cx) {
            return Poll::Ready(Err(gone()));
        }
        Pin::new(&mut me.io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        if me.evicted(cx) {
            return Poll::Ready(Err(gone()));
        }
        Pin::new(&mut me.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Accepted> tonic::transport::server::Connected for Limited<IO> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        Accepted::connect_info(&self.io)
    }
}

/// Refusals being told at once, at most: beyond, a refused connection is
/// just closed.
const TELLING: usize = 64;

/// Tells a refused client why and closes, bounded in time and in number:
/// over plain text, its calls are answered RESOURCE_EXHAUSTED with the
/// reason (so the client's error names the cause); over TLS it is closed.
fn refuse<IO: Accepted>(io: IO, why: String, plain: bool, telling: &Arc<tokio::sync::Semaphore>) {
    let Ok(place) = Arc::clone(telling).try_acquire_owned() else {
        return;
    };
    if !plain {
        return;
    }
    tokio::spawn(async move {
        let _place = place;
        let answer = hyper::service::service_fn(move |_req| {
            let why = why.clone();
            async move {
                http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", (Refusal::Full.code() as i32).to_string())
                    .header("grpc-message", why)
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
            }
        });
        let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_concurrent_streams(4)
            .serve_connection(hyper_util::rt::TokioIo::new(io), answer);
        let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    });
}

/// The accepted connections, each with a place in `table` (or refused).
pub fn limited<IO: Accepted>(
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>>,
    table: Arc<Table>,
    plain: bool,
) -> impl tokio_stream::Stream<Item = std::io::Result<Limited<IO>>> {
    use tokio_stream::StreamExt;
    let mut warned = Instant::now() - Duration::from_secs(60);
    let telling = Arc::new(tokio::sync::Semaphore::new(TELLING));
    incoming.filter_map(move |conn| match conn {
        Err(e) => Some(Err(e)),
        Ok(io) => {
            let peer = io.peer().ok()?;
            match table.admit(peer) {
                Ok(conn) => Some(Ok(Limited {
                    io,
                    conn,
                    table: Arc::clone(&table),
                    started: 0,
                    quiet: Box::pin(tokio::time::sleep(HANDSHAKE_TIMEOUT)),
                })),
                Err(why) => {
                    if warned.elapsed() > Duration::from_secs(10) {
                        warned = Instant::now();
                        tracing::warn!(%peer, "connection refused: {why}");
                    }
                    refuse(io, why, plain, &telling);
                    None
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_a_silent_connection_first_then_the_idlest_never_a_busy_one() {
        let table = Table::new(Bounds {
            total: 2,
            per_ip: 1,
        });
        let at = |ip: [u8; 4], port| SocketAddr::from((ip, port));
        let a = table.admit(at([127, 0, 0, 1], 1)).unwrap();
        let b = table.admit(at([127, 0, 0, 1], 2)).unwrap();
        table.called(a.peer);
        // b never completed a call: it goes first, however recent.
        let c = table.admit(at([127, 0, 0, 1], 3)).unwrap();
        assert!(b.closed.load(Ordering::Acquire) && !a.closed.load(Ordering::Acquire));
        table.called(c.peer);
        // Everything busy (a call completed within BUSY): refused.
        let why = table.admit(at([127, 0, 0, 1], 4)).unwrap_err();
        assert!(why.contains("too many connections"), "{why}");
        // Later, only c has called within BUSY: a, idle longest, makes way.
        let later = 10 * BUSY.as_millis() as u64;
        a.active_ms.store(0, Ordering::Relaxed);
        c.active_ms.store(later, Ordering::Relaxed);
        table.admit_at(at([127, 0, 0, 1], 4), later).unwrap();
        assert!(a.closed.load(Ordering::Acquire), "the idlest was closed");
        assert!(!c.closed.load(Ordering::Acquire));
        assert_eq!(table.len(), 2);
        // One address beyond loopback gets at most `per_ip` places.
        let t = Table::new(Bounds {
            total: 10,
            per_ip: 1,
        });
        t.admit(at([10, 0, 0, 1], 1)).unwrap();
        let why = t.admit(at([10, 0, 0, 1], 2)).unwrap_err();
        assert!(why.contains("from 10.0.0.1"), "{why}");
        t.admit(at([10, 0, 0, 2], 1)).unwrap();
    }
}
