//! A TCP proxy that puts a bad network between a client and a server,
//! with faults changed on command while connections run.
//!
//! Each connection through the proxy is two *delay lines*, one a
//! direction: a reader takes bytes from one socket and stamps each chunk
//! with the time it may leave; a writer hands the chunks to the other
//! socket in the order they came, never before their time. The faults:
//!
//! - **delay** (one way, each direction) with **jitter**: each chunk is
//!   due after the delay plus a random shift within ± the jitter, but
//!   never before the chunk ahead of it (a delay line; TCP never
//!   reorders what the application reads).
//! - **bandwidth**: at most so many bytes a second each direction; a
//!   chunk leaves once the link has sent the ones ahead of it.
//! - **loss**: a TCP proxy cannot drop a segment without breaking the
//!   stream, so loss is modelled as what TCP shows the application: with
//!   probability `p` a chunk is held back for a retransmission timeout
//!   ([`MIN_RTO`], Linux's least, plus the round trip), and everything
//!   behind it waits too (head-of-line blocking). Nothing is lost or
//!   reordered.
//! - **stall**: the connections open now stop forwarding, both ways,
//!   silently: no FIN, no RST, sockets open (a half-open link, as a NAT
//!   that forgot the connection or a dead host makes). New connections
//!   pass. Only [`Proxy::heal`] or [`Proxy::reset`] ends it.
//! - **partition**: every connection stalls as above, and new ones are
//!   refused (closed with a reset at once; behind a real partition a
//!   connect would time out instead, later, with the same outcome for the
//!   client: a failed connect, tried again). [`Proxy::heal`] resumes the
//!   stalled connections with the bytes they held, as TCP's
//!   retransmissions do once a real partition heals; a connection an
//!   endpoint gave up on meanwhile (keepalive) is closed then, when its
//!   FIN or RST gets through.
//! - **reset**: every connection open now is closed abruptly, with a RST
//!   to both ends (`SO_LINGER` 0).
//!
//! The proxy runs on its own runtime thread, so a test that blocks its
//! own runtime (a CLI run, a wait) cannot stall the network. [`Proxy`] is
//! a cheap handle (an `Arc`): clones steer the same proxy, which stops
//! (closing its connections) when the last handle is dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The least retransmission timeout of Linux's TCP: a "lost" chunk
/// arrives this much plus one round trip late.
pub const MIN_RTO: Duration = Duration::from_millis(200);

/// The most bytes read (and forwarded) as one chunk.
const CHUNK: usize = 16 * 1024;

/// Chunks in flight a direction: the delay line's length (TCP's window
/// and the socket buffers, roughly). A full line stops the reader, so a
/// slow link pushes back on its sender as TCP does.
const LINE: usize = 64;

/// The faults now in force (see the module's documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Added delay, one way (each direction).
    pub delay: Duration,
    /// Each chunk's delay varies by up to this either way.
    pub jitter: Duration,
    /// Bytes per second, each direction (`None`: no cap).
    pub bandwidth: Option<u64>,
    /// The chance that a chunk is held for a retransmission timeout.
    pub loss: f64,
}

/// Which connections pass now.
#[derive(Clone, Copy, Debug, Default)]
struct Gate {
    /// Connections numbered below this are stalled (0: none).
    stall_below: u64,
    /// Every connection is stalled and new ones are refused.
    partitioned: bool,
}

impl Gate {
    fn passes(&self, conn: u64) -> bool {
        !self.partitioned && conn >= self.stall_below
    }
}

/// What the proxy's tasks share with the handles.
struct Shared {
    target: String,
    faults: Mutex<Faults>,
    gate: watch::Sender<Gate>,
    /// Bumped by [`Proxy::reset`]: connections older than it close.
    resets: watch::Sender<u64>,
    next_conn: AtomicU64,
    open: AtomicUsize,
    refused: AtomicU64,
    /// Bytes delivered client → target and target → client.
    up: AtomicU64,
    down: AtomicU64,
    rng: Mutex<u64>,
}

impl Shared {
    /// Uniform in [0, 1) (xorshift64: deterministic enough, no crate).
    fn unit(&self) -> f64 {
        let mut s = self.rng.lock().expect("rng lock");
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        (*s >> 11) as f64 / (1u64 << 53) as f64
    }

    /// When a chunk read at `now` may leave: the delay with its jitter,
    /// plus a retransmission timeout if it is "lost".
    fn due(&self, now: Instant) -> Instant {
        let f = *self.faults.lock().expect("faults lock");
        let shift = f.jitter.as_secs_f64() * (2.0 * self.unit() - 1.0);
        let mut wait = (f.delay.as_secs_f64() + shift).max(0.0);
        if f.loss > 0.0 && self.unit() < f.loss {
            wait += (MIN_RTO + 2 * f.delay).as_secs_f64();
        }
        now + Duration::from_secs_f64(wait)
    }
}

struct Inner {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Inner {
    /// Stops every task (closing every socket) without blocking, which a
    /// handle dropped inside a test's runtime must not do.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A fault proxy in front of one address (see the module's
/// documentation); clones are handles of the same proxy.
#[derive(Clone)]
pub struct Proxy(Arc<Inner>);

impl Proxy {
    /// A proxy on a free loopback port forwarding to `target`
    /// (`host:port`, or a coordinator's `http://host:port`), passing
    /// everything until told otherwise.
    pub fn start(target: &str) -> Proxy {
        let target = target.trim_start_matches("http://").to_string();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        // Bound here (not with the runtime's `block_on`, which a caller
        // inside a runtime may not use), served on the proxy's runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy's port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            target,
            faults: Mutex::new(Faults::default()),
            gate: watch::Sender::new(Gate::default()),
            resets: watch::Sender::new(0),
            next_conn: AtomicU64::new(1),
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            rng: Mutex::new(0x9e37_79b9_7f4a_7c15 ^ u64::from(addr.port())),
        });
        let serving = Arc::clone(&shared);
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("the proxy's listener");
            accept(listener, serving).await;
        });
        Proxy(Arc::new(Inner {
            addr,
            shared,
            runtime: Some(runtime),
        }))
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    /// `http://` and [`Proxy::addr`]: a coordinator's URL through the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.0.addr)
    }

    fn shared(&self) -> &Shared {
        &self.0.shared
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        *self.shared().faults.lock().expect("faults lock")
    }

    /// Puts `faults` in force, for chunks read from now on.
    pub fn set(&self, faults: Faults) {
        *self.shared().faults.lock().expect("faults lock") = faults;
    }

    /// A one-way `delay` (each direction) varying by ± `jitter`: a round
    /// trip of twice the delay.
    pub fn set_delay(&self, delay: Duration, jitter: Duration) {
        self.set(Faults {
            delay,
            jitter,
            ..self.faults()
        });
    }

    /// At most `bytes_per_second` each direction (`None`: no cap).
    pub fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.set(Faults {
            bandwidth: bytes_per_second,
            ..self.faults()
        });
    }

    /// Each chunk "lost" (held for a retransmission timeout) with
    /// probability `p`.
    pub fn set_loss(&self, p: f64) {
        self.set(Faults {
            loss: p,
            ..self.faults()
        });
    }

    /// The connections open now stop forwarding, silently; new ones pass.
    pub fn stall(&self) {
        let below = self.shared().next_conn.load(Ordering::SeqCst);
        self.shared().gate.send_modify(|g| g.stall_below = below);
    }

    /// Every connection stalls and new ones are refused.
    pub fn partition(&self) {
        self.shared().gate.send_modify(|g| g.partitioned = true);
    }

    /// Ends a stall and a partition: held connections forward what they
    /// held, new ones are let through.
    pub fn heal(&self) {
        self.shared().gate.send_replace(Gate::default());
    }

    /// Closes every connection open now with a RST to both ends.
    pub fn reset(&self) {
        self.shared().resets.send_modify(|r| *r += 1);
    }

    /// Connections accepted and forwarded so far.
    pub fn connections(&self) -> u64 {
        self.shared().next_conn.load(Ordering::SeqCst) - 1
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.shared().open.load(Ordering::SeqCst)
    }

    /// Connections refused during a partition.
    pub fn refused(&self) -> u64 {
        self.shared().refused.load(Ordering::SeqCst)
    }

    /// Bytes delivered to the target so far (with any chunk being
    /// written: every byte the target has read is counted).
    pub fn bytes_up(&self) -> u64 {
        self.shared().up.load(Ordering::SeqCst)
    }

    /// Bytes delivered back to clients so far (with any chunk being
    /// written, as [`Proxy::bytes_up`]).
    pub fn bytes_down(&self) -> u64 {
        self.shared().down.load(Ordering::SeqCst)
    }
}

/// Accepts clients for ever: each is connected to the target and served
/// by its own task, or refused during a partition.
async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if shared.gate.borrow().partitioned {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.set_zero_linger();
            continue;
        }
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve(id, client, Arc::clone(&shared)));
    }
}

/// One connection: both directions until both ends have closed, or until
/// a reset (or a reset from either end) closes both abruptly.
async fn serve(id: u64, mut client: TcpStream, shared: Arc<Shared>) {
    let Ok(mut server) = TcpStream::connect(&shared.target).await else {
        // The target is down: the client sees the reset a closed port gives.
        let _ = client.set_zero_linger();
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    shared.open.fetch_add(1, Ordering::SeqCst);
    let mut resets = shared.resets.subscribe();
    let abort = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let up = direction(id, cr, sw, &shared, &shared.up);
        let down = direction(id, sr, cw, &shared, &shared.down);
        tokio::select! {
            both = async { tokio::try_join!(up, down) } => both.is_err(),
            _ = resets.changed() => true,
        }
    };
    if abort {
        let _ = (client.set_zero_linger(), server.set_zero_linger());
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}

/// What goes down a delay line: a chunk and when it may leave, or the end
/// of the stream (its FIN).
enum Piece {
    Bytes(Vec<u8>, Instant),
    End,
}

/// One direction of connection `id`: reads `from`, delays, writes `to`,
/// counting delivered bytes in `delivered`. `Err` when either socket
/// failed (a reset, which the other end must then see too).
async fn direction(
    id: u64,
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    shared: &Shared,
    delivered: &AtomicU64,
) -> Result<(), ()> {
    let (line, mut arriving) = mpsc::channel::<Piece>(LINE);
    let reader = async {
        let mut gate = shared.gate.subscribe();
        let mut last = Instant::now();
        loop {
            // A stalled link reads nothing: the sender's TCP buffers fill.
            let _ = gate.wait_for(|g| g.passes(id)).await;
            let mut buf = vec![0u8; chunk_size(shared)];
            let n = from.read(&mut buf).await.map_err(drop)?;
            if n == 0 {
                let _ = line.send(Piece::End).await;
                return Ok(());
            }
            buf.truncate(n);
            last = shared.due(Instant::now()).max(last);
            if line.send(Piece::Bytes(buf, last)).await.is_err() {
                return Err(());
            }
        }
    };
    let writer = async {
        let mut gate = shared.gate.subscribe();
        let mut link_free = Instant::now();
        while let Some(piece) = arriving.recv().await {
            let Piece::Bytes(bytes, due) = piece else {
                // The FIN, after every byte ahead of it.
                let _ = gate.wait_for(|g| g.passes(id)).await;
                let _ = to.shutdown().await;
                return Ok(());
            };
            tokio::time::sleep_until(due).await;
            let _ = gate.wait_for(|g| g.passes(id)).await;
            let cap = shared.faults.lock().expect("faults lock").bandwidth;
            if let Some(rate) = cap {
                let send = Duration::from_secs_f64(bytes.len() as f64 / rate.max(1) as f64);
                link_free = link_free.max(Instant::now()) + send;
                tokio::time::sleep_until(link_free).await;
            }
            // Counted before the write: a byte the far end has read is
            // always in the count (after the write, a test reading the
            // count once its bytes arrive could see a chunk fewer).
            delivered.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            to.write_all(&bytes).await.map_err(drop)?;
        }
        Ok(())
    };
    tokio::try_join!(reader, writer).map(drop)
}

/// Bytes to read as one chunk: at most [`CHUNK`], and under a bandwidth
/// cap about 20 ms of it, so one chunk does not hold the link for long.
fn chunk_size(shared: &Shared) -> usize {
    match shared.faults.lock().expect("faults lock").bandwidth {
        Some(rate) => ((rate / 50) as usize).clamp(512, CHUNK),
        None => CHUNK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream as Socket;

    /// An echo server on a free loopback port (a thread per connection).
    fn echo() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A server that accepts and hands each connection to the test.
    fn sink() -> (SocketAddr, std::sync::mpsc::Receiver<Socket>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                if tx.send(s).is_err() {
                    break;
                }
            }
        });
        (addr, rx)
    }

    fn connect(p: &Proxy) -> Socket {
        let s = Socket::connect(p.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    /// Writes `data` and reads as many bytes back.
    fn round_trip(s: &mut Socket, data: &[u8]) -> Vec<u8> {
        s.write_all(data).unwrap();
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).unwrap();
        back
    }

    #[test]
    fn delay_jitter_and_loss_keep_every_byte_in_order() {
        let p = Proxy::start(&echo().to_string());
        p.set(Faults {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(5),
            loss: 0.2,
            bandwidth: None,
        });
        let mut s = connect(&p);
        // Many small writes, each its own chunk at the proxy: with the
        // jitter larger than the gap between them, a proxy that
        // scheduled chunks independently would swap some.
        let writer = {
            let mut s = s.try_clone().unwrap();
            std::thread::spawn(move || {
                for i in 0u32..2000 {
                    s.write_all(&i.to_le_bytes()).unwrap();
                }
            })
        };
        let mut back = vec![0u8; 8000];
        s.read_exact(&mut back).unwrap();
        writer.join().unwrap();
        let got: Vec<u32> = back
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, (0..2000).collect::<Vec<_>>());
        assert_eq!((p.bytes_up(), p.bytes_down()), (8000, 8000));
    }

    #[test]
    fn a_stall_forwards_nothing_keeps_the_connection_and_heals() {
        let p = Proxy::start(&echo().to_string());
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"before"), b"before");
        p.stall();
        s.write_all(b"held").unwrap();
        // A window in which nothing may pass (not a synchronisation: the
        // assertion is that nothing happens).
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!((p.bytes_up(), p.bytes_down()), (6, 6));
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut byte = [0u8; 1];
        let quiet = s.read(&mut byte).unwrap_err();
        assert!(
            matches!(quiet.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{quiet:?}"
        );
        // New connections pass a stall; the stalled one is still open.
        let mut fresh = connect(&p);
        assert_eq!(round_trip(&mut fresh, b"new"), b"new");
        assert_eq!(p.open(), 2);
        p.heal();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut back = [0u8; 4];
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"held");
        assert_eq!(round_trip(&mut s, b"after"), b"after");
    }

    #[test]
    fn a_partition_refuses_new_connections_and_heal_resumes_old_ones() {
        let p = Proxy::start(&echo().to_string());
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"a"), b"a");
        p.partition();
        s.write_all(b"b").unwrap();
        // Refused: the connection is reset before anything comes back.
        let mut refused = connect(&p);
        let mut byte = [0u8; 1];
        let _ = refused.write_all(b"x");
        assert!(!matches!(refused.read(&mut byte), Ok(1)));
        assert_eq!(p.refused(), 1);
        assert_eq!(p.bytes_up(), 1);
        p.heal();
        s.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"b");
        assert_eq!(p.connections(), 1);
    }

    #[test]
    fn a_reset_is_seen_as_a_reset_at_both_ends() {
        let (addr, accepted) = sink();
        let p = Proxy::start(&addr.to_string());
        let mut client = connect(&p);
        client.write_all(b"hello").unwrap();
        let mut server = accepted.recv().unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut got = [0u8; 5];
        server.read_exact(&mut got).unwrap();
        p.reset();
        let mut byte = [0u8; 1];
        for (end, s) in [("client", &mut client), ("server", &mut server)] {
            let e = s.read(&mut byte).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionReset, "the {end}: {e:?}");
        }
        kit_wait(|| p.open() == 0);
        // The proxy goes on: a new connection works.
        let mut again = connect(&p);
        again.write_all(b"x").unwrap();
        let mut server = accepted.recv().unwrap();
        server.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    #[test]
    fn a_bandwidth_cap_bounds_what_is_delivered() {
        const RATE: u64 = 200_000;
        let (addr, accepted) = sink();
        let p = Proxy::start(&addr.to_string());
        p.set_bandwidth(Some(RATE));
        let mut client = connect(&p);
        let mut server = accepted.recv().unwrap();
        let start = std::time::Instant::now();
        let writer = std::thread::spawn(move || client.write_all(&vec![7u8; 150_000]).unwrap());
        let mut got = 0usize;
        let mut buf = vec![0u8; 8192];
        while got < 150_000 {
            got += server.read(&mut buf).unwrap();
            let up = p.bytes_up();
            // What has arrived by now is at most the rate times the time
            // since the first byte could leave, plus a chunk: a slower
            // machine only delivers less.
            let bound = RATE as f64 * start.elapsed().as_secs_f64() + (RATE / 50) as f64;
            assert!(
                (got.max(up as usize) as f64) <= bound,
                "{got} bytes ({up} counted) after {:?}",
                start.elapsed()
            );
        }
        writer.join().unwrap();
        assert_eq!(p.bytes_up(), 150_000);
    }

    fn kit_wait(cond: impl FnMut() -> bool) {
        crate::wait::wait_until("the proxy to close its connections", cond)
    }
}
