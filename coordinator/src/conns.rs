//! The connections a coordinator serves, bounded: at most a total and a
//! number per client address, each closed if its client never starts its
//! handshake or goes quiet, and, when every place is taken, one makes way
//! for a new one (see `Table::victim`): first one whose calls never
//! arrive in full or all fail, never one whose request arrived and is
//! being answered or is still coming in, and a new one only last, since
//! its request may still be on its way. A flood of idle connections can
//! then neither lock live clients out nor use up the process's file
//! descriptors. A connection refused is told why (its calls answered
//! RESOURCE_EXHAUSTED, "too many connections") before it is closed.
//!
//! A request on its way is protected only while it comes at a live
//! client's pace ([`MIN_ARRIVAL_RATE`] after [`BUSY`]): a byte trickled
//! now and then cannot hold a place. The bytes of requests still arriving,
//! which the server buffers until each message is whole, are bounded per
//! connection and in all ([`Call::take`]); past the bound in all, the
//! connection slowest to finish its request makes way, a stalled one first
//! (see `Table::make_room`).

use futures_util::task::AtomicWaker;
use nqueens_proto::refusal::Refusal;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

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

/// A connection that completed a call within this, or that opened within
/// this and started none, is never evicted.
pub const BUSY: Duration = Duration::from_secs(1);

/// A connection whose latest call started, or sent bytes of its request,
/// within this (its body maybe still on its way) is never evicted, while
/// that request comes at [`MIN_ARRIVAL_RATE`]: long enough for a live
/// client's request to go on arriving on a loaded machine or a slow link,
/// short enough that a flood of half-open calls makes way at the limit's
/// number of connections four times a second.
pub const ARRIVING: Duration = Duration::from_millis(250);

/// A request still arriving [`BUSY`] after its call started protects its
/// connection only if it came at this many bytes a second at least since
/// then (a live client sends a request at once: most are under a
/// kilobyte, and a megabyte takes a minute even at this rate).
pub const MIN_ARRIVAL_RATE: u64 = 16 << 10;

/// While the bytes of requests still arriving are at their bound in all,
/// a request holds its place only at this many bytes a second at least
/// (see `Table::make_room`): four times [`MIN_ARRIVAL_RATE`], so that a
/// flood paced just fast enough to hold its places makes way, while a
/// live client's upload on a slow link (half a megabit a second) still
/// goes on.
pub const PRESSED_ARRIVAL_RATE: u64 = 4 * MIN_ARRIVAL_RATE;

/// The largest message the server decodes (tonic's default bound).
pub const LARGEST_MESSAGE: u64 = 4 << 20;

/// Bytes of requests still arriving on one connection at once, all its
/// calls together: one message of the largest size and a little more.
pub const ARRIVING_PER_CONNECTION: u64 = LARGEST_MESSAGE + (64 << 10);

/// What a request still arriving holds of the server's memory: the bytes
/// received, or, once its first message's 5-byte prefix is in, the length
/// that prefix claims (the server makes room for the whole message then),
/// up to [`LARGEST_MESSAGE`] (a longer claim is refused at once). Every
/// request here is one message.
#[derive(Debug, Default)]
pub struct Claim {
    seen: u64,
    prefix: [u8; 5],
}

impl Claim {
    /// Takes in `data`, the next bytes of the request; returns what it
    /// holds now.
    pub fn see(&mut self, data: &[u8]) -> u64 {
        let at = self.seen.min(5) as usize;
        let n = (5 - at).min(data.len());
        self.prefix[at..at + n].copy_from_slice(&data[..n]);
        self.seen += data.len() as u64;
        let claimed = match self.seen >= 5 {
            true => 5 + u64::from(u32::from_be_bytes(self.prefix[1..].try_into().expect("4"))),
            false => 0,
        };
        self.seen.max(claimed.min(5 + LARGEST_MESSAGE))
    }
}

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
/// seconds where glibc's malloc holds it (it keeps freed memory in its
/// arenas otherwise): in processes that embed the coordinator. The
/// `nqueens` binary allocates with jemalloc, whose own background thread
/// does this.
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
/// of that) from one address other than loopback; and the bytes of
/// requests still arriving, all connections together
/// (`NQUEENS_MAX_ARRIVING_BYTES`, default 256 MiB). IPv6 addresses that
/// share their first `NQUEENS_IPV6_PREFIX` bits (default 128: each
/// address on its own) count as one address: 64 where clients are
/// reached over the internet, where one machine is often given a whole
/// /64; the default where many machines share a subnet's /64, as in a
/// data centre.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub total: usize,
    pub per_ip: usize,
    pub arriving: u64,
    pub ipv6_prefix: u8,
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
            arriving: var("NQUEENS_MAX_ARRIVING_BYTES").map_or(256 << 20, |b| b as u64),
            ipv6_prefix: var("NQUEENS_IPV6_PREFIX").map_or(128, |p| p.min(128) as u8),
        }
    }
}

/// What the table knows of one connection.
#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    /// The address it counts under (see [`group`]).
    from: IpAddr,
    /// Milliseconds after the table's start of its latest completed call
    /// (or of its opening).
    active_ms: AtomicU64,
    /// A call of it completed without an error.
    called: AtomicBool,
    /// A call of it started (its headers came in).
    started: AtomicBool,
    /// Milliseconds after the table's start of its latest call's start, or
    /// of the latest bytes of that call's request.
    call_ms: AtomicU64,
    /// Milliseconds after the table's start of the first call it started
    /// since it last completed one (or opened), and the bytes of requests
    /// it received since: a connection that starts call after call and
    /// completes none is paced from its first (see [`arriving`]).
    call_start_ms: AtomicU64,
    call_bytes: AtomicU64,
    /// A call started since it last completed one (or opened).
    pending: AtomicBool,
    /// Bytes of its requests still arriving (see [`Call::take`]).
    arriving_bytes: AtomicU64,
    /// Milliseconds after the table's start when it last began to hold
    /// bytes of requests still arriving (none before), and the bytes of
    /// requests it received since: its pace while it holds, whatever calls
    /// complete meanwhile (see `Table::make_room`).
    hold_ms: AtomicU64,
    hold_bytes: AtomicU64,
    /// Calls whose request arrived in full and that are not answered yet:
    /// while any is, the connection is live and never makes way.
    in_flight: AtomicU32,
    closed: AtomicBool,
    waker: AtomicWaker,
}

/// Every open connection.
pub struct Table {
    bounds: Bounds,
    start: Instant,
    open: Mutex<Open>,
    /// Bytes of requests still arriving, all connections together.
    arriving_bytes: AtomicU64,
}

#[derive(Default)]
struct Open {
    by_peer: HashMap<SocketAddr, Arc<Conn>>,
    /// Connections open per address (see [`group`]).
    per_ip: HashMap<IpAddr, usize>,
}

impl Table {
    pub fn new(bounds: Bounds) -> Arc<Table> {
        Arc::new(Table {
            bounds,
            start: Instant::now(),
            open: Mutex::default(),
            arriving_bytes: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// A call from `peer` whose headers came in (`None` if its connection
    /// is gone): what follows of the call is marked through it.
    pub fn call(self: &Arc<Self>, peer: SocketAddr) -> Option<Call> {
        self.call_at(peer, self.now_ms())
    }

    /// [`Table::call`] at `now` (ms after the table's start).
    fn call_at(self: &Arc<Self>, peer: SocketAddr, now: u64) -> Option<Call> {
        let open = self.open.lock().expect("connections lock");
        let conn = Arc::clone(open.by_peer.get(&peer)?);
        conn.call_ms.store(now, Ordering::Relaxed);
        if !conn.pending.swap(true, Ordering::Relaxed) {
            conn.call_start_ms.store(now, Ordering::Relaxed);
            conn.call_bytes.store(0, Ordering::Relaxed);
        }
        conn.started.store(true, Ordering::Relaxed);
        Some(Call {
            conn,
            table: Arc::clone(self),
        })
    }

    /// The connection to close for a new one, never one with a call in
    /// flight or one whose latest call started or sent bytes within
    /// [`ARRIVING`], in this order (oldest or idlest first):
    /// 1. one that started a call and never completed one (a half-open
    ///    call, or only refusals and health checks, which keep no place):
    ///    what a flood looks like;
    /// 2. one that never completed a call, open for [`BUSY`];
    /// 3. one with no call completed within [`BUSY`].
    ///
    /// Never one opened within [`BUSY`] that has started no call: its
    /// request may still be on its way (see [`NoPlace::Wait`]).
    fn victim(&self, open: &Open, now: u64) -> Option<Arc<Conn>> {
        let since = |c: &&Arc<Conn>| c.active_ms.load(Ordering::Relaxed);
        let long = |c: &&Arc<Conn>| now.saturating_sub(since(c)) >= BUSY.as_millis() as u64;
        let silent = |c: &&Arc<Conn>| !c.called.load(Ordering::Relaxed);
        let idle = || {
            open.by_peer
                .values()
                .filter(|c| c.in_flight.load(Ordering::Relaxed) == 0)
                .filter(|c| !arriving(c, now))
        };
        let stalled = |c: &&Arc<Conn>| silent(c) && c.started.load(Ordering::Relaxed);
        idle()
            .filter(stalled)
            .min_by_key(since)
            .or_else(|| idle().filter(|c| silent(c) && long(c)).min_by_key(since))
            .or_else(|| idle().filter(long).min_by_key(since))
            .cloned()
    }

    /// When a connection that never completed a call, opened within
    /// [`BUSY`] or with a call arriving, becomes one that can make way
    /// (none: every place is busy).
    fn soonest(&self, open: &Open, now: u64) -> Option<Duration> {
        let after =
            |from: u64, wait: Duration| (from + wait.as_millis() as u64).saturating_sub(now);
        open.by_peer
            .values()
            .filter(|c| c.in_flight.load(Ordering::Relaxed) == 0)
            .filter(|c| !c.called.load(Ordering::Relaxed))
            .map(|c| match c.started.load(Ordering::Relaxed) {
                true => arriving_until(c).saturating_sub(now),
                false => after(c.active_ms.load(Ordering::Relaxed), BUSY),
            })
            .min()
            .map(Duration::from_millis)
    }

    /// Closes connections holding bytes of requests still arriving, for
    /// `asking`, which needs `len` more, until what they hold covers it
    /// (true then): stalled ones first (not arriving: see [`arriving`]),
    /// the one holding most first; then those whose bytes came at under
    /// [`PRESSED_ARRIVAL_RATE`] since they began to hold, the one slowest
    /// to finish at that pace first ([`finish_ms`]). Never `asking`, one
    /// whose request arrived and is being answered, one that began to
    /// hold within [`BUSY`] (its pace is not known yet), nor one arriving
    /// faster. Where all of them would not cover `len`, only the stalled
    /// ones are closed, and false. Requests paced just fast enough to hold
    /// their places then make way before any that arrives faster, and
    /// what they held comes back as their calls end, at once, whatever
    /// the flood sends next.
    fn make_room(&self, asking: &Arc<Conn>, len: u64, now: u64) -> bool {
        let open = self.open.lock().expect("connections lock");
        // Each one's standing read once: the counters move meanwhile.
        let mut holders: Vec<(bool, u64, u64, &Arc<Conn>)> = open
            .by_peer
            .values()
            .filter(|c| !Arc::ptr_eq(c, asking) && !c.closed.load(Ordering::Acquire))
            .filter(|c| c.in_flight.load(Ordering::Relaxed) == 0)
            .filter_map(|c| {
                let held = c.arriving_bytes.load(Ordering::Relaxed);
                let age = now.saturating_sub(c.hold_ms.load(Ordering::Relaxed));
                if held == 0 || age < BUSY.as_millis() as u64 {
                    return None;
                }
                let stalled = !arriving(c, now);
                let sent = c.hold_bytes.load(Ordering::Relaxed);
                if !stalled && u128::from(sent) * 1000 >= u128::from(PRESSED_ARRIVAL_RATE * age) {
                    return None;
                }
                let slowness = if stalled {
                    held
                } else {
                    finish_ms(held, sent, age)
                };
                Some((stalled, slowness, held, c))
            })
            .collect();
        holders.sort_by_key(|&(stalled, slowness, _, _)| std::cmp::Reverse((stalled, slowness)));
        let mut freed = 0;
        let enough = holders.iter().position(|&(_, _, held, _)| {
            freed += held;
            freed >= len
        });
        let close = |(_, _, _, c): &(bool, u64, u64, &Arc<Conn>)| {
            c.closed.store(true, Ordering::Release);
            c.waker.wake();
        };
        match enough {
            Some(last) => holders[..=last].iter().for_each(close),
            None => holders.iter().filter(|h| h.0).for_each(close),
        }
        enough.is_some()
    }

    /// Closes every connection (its calls end, and with them what they
    /// hold of the coordinator): at shutdown, once calls had their grace.
    pub fn close_all(&self) {
        let open = self.open.lock().expect("connections lock");
        for c in open.by_peer.values() {
            c.closed.store(true, Ordering::Release);
            c.waker.wake();
        }
    }

    /// Takes a place for a new connection from `peer`, closing one that
    /// makes way (see `Table::victim`) if every place is taken.
    fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Arc<Conn>, NoPlace> {
        self.admit_at(peer, self.now_ms())
    }

    /// [`Table::admit`] at `now` (ms after the table's start).
    fn admit_at(self: &Arc<Self>, peer: SocketAddr, now: u64) -> Result<Arc<Conn>, NoPlace> {
        let mut open = self.open.lock().expect("connections lock");
        let from = group(peer.ip(), self.bounds.ipv6_prefix);
        let from_ip = open.per_ip.get(&from).copied().unwrap_or(0);
        // A dual-stack listener sees a loopback client as ::ffff:127.0.0.1.
        let local = peer.ip().is_loopback() || from.is_loopback();
        if !local && from_ip >= self.bounds.per_ip {
            return Err(NoPlace::Refused(format!(
                "too many connections from {}: {} (NQUEENS_MAX_CONNECTIONS_PER_IP)",
                named(from, self.bounds.ipv6_prefix),
                self.bounds.per_ip
            )));
        }
        if open.by_peer.len() >= self.bounds.total {
            let Some(victim) = self.victim(&open, now) else {
                return Err(match self.soonest(&open, now) {
                    Some(wait) => NoPlace::Wait(wait),
                    None => NoPlace::Refused(format!(
                        "too many connections: {} are open and busy (NQUEENS_MAX_CONNECTIONS)",
                        self.bounds.total
                    )),
                });
            };
            forget(&mut open, &victim);
            victim.closed.store(true, Ordering::Release);
            victim.waker.wake();
        }
        let conn = Arc::new(Conn {
            peer,
            from,
            active_ms: AtomicU64::new(now),
            called: AtomicBool::new(false),
            started: AtomicBool::new(false),
            call_ms: AtomicU64::new(0),
            call_start_ms: AtomicU64::new(0),
            call_bytes: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            arriving_bytes: AtomicU64::new(0),
            hold_ms: AtomicU64::new(now),
            hold_bytes: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        if let Some(old) = open.by_peer.insert(peer, Arc::clone(&conn)) {
            // The same address and port again: the old one is gone.
            old.closed.store(true, Ordering::Release);
            old.waker.wake();
        } else {
            *open.per_ip.entry(from).or_default() += 1;
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

/// Why a new connection has no place yet.
#[derive(Debug)]
enum NoPlace {
    /// Every place is held by a connection that may be live; the new one
    /// is refused, and told why.
    Refused(String),
    /// Places are held by connections just opened, whose requests may
    /// still be on their way: the new one waits (so does accepting) until
    /// they either call or can make way, at most this long.
    Wait(Duration),
}

/// One call on a connection in the [`Table`].
pub struct Call {
    conn: Arc<Conn>,
    table: Arc<Table>,
}

impl Call {
    /// Its request arrived in full: until the returned guard is dropped
    /// (the call answered or abandoned), its connection is never evicted.
    /// Half-open calls never get here.
    pub fn arrived(&self) -> InFlight {
        self.conn.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            conn: Arc::clone(&self.conn),
        }
    }

    /// `received` bytes of its request came in, and it holds `len` more
    /// until it arrives or ends (see [`Claim`]): refused, nothing more
    /// held, where its connection would hold more than
    /// [`ARRIVING_PER_CONNECTION`]. Past the bound in all, another
    /// connection makes way (see `Table::make_room`): it goes on where
    /// what that one held covers it, and is refused otherwise. Only bytes
    /// received pace it (see [`MIN_ARRIVAL_RATE`]): a claim costs its
    /// sender nothing. Give what it holds back with [`Call::give_back`].
    pub fn take(&self, received: u64, len: u64) -> Result<(), String> {
        self.take_at(received, len, self.table.now_ms())
    }

    fn take_at(&self, received: u64, len: u64, now: u64) -> Result<(), String> {
        let conn = &self.conn;
        conn.call_ms.store(now, Ordering::Relaxed);
        conn.call_bytes.fetch_add(received, Ordering::Relaxed);
        let before = conn.arriving_bytes.fetch_add(len, Ordering::Relaxed);
        if before == 0 && len > 0 {
            conn.hold_ms.store(now, Ordering::Relaxed);
            conn.hold_bytes.store(0, Ordering::Relaxed);
        }
        conn.hold_bytes.fetch_add(received, Ordering::Relaxed);
        if before + len > ARRIVING_PER_CONNECTION {
            conn.arriving_bytes.fetch_sub(len, Ordering::Relaxed);
            return Err(format!(
                "this connection's requests still arriving would pass {} bytes",
                ARRIVING_PER_CONNECTION
            ));
        }
        let all = &self.table.arriving_bytes;
        if all.fetch_add(len, Ordering::Relaxed) + len > self.table.bounds.arriving {
            // The bytes of the connections closed come back as their
            // calls end, at once: where they cover this request, it goes
            // on (past the bound for that moment).
            if self.table.make_room(conn, len, now) {
                return Ok(());
            }
            all.fetch_sub(len, Ordering::Relaxed);
            conn.arriving_bytes.fetch_sub(len, Ordering::Relaxed);
            return Err(format!(
                "the requests still arriving would pass {} bytes in all \
                 (NQUEENS_MAX_ARRIVING_BYTES): try again",
                self.table.bounds.arriving
            ));
        }
        Ok(())
    }

    /// Bytes [`Call::take`] held, given back once its request arrived or
    /// ended.
    pub fn give_back(&self, len: u64) {
        self.conn.arriving_bytes.fetch_sub(len, Ordering::Relaxed);
        self.table.arriving_bytes.fetch_sub(len, Ordering::Relaxed);
    }

    /// It completed without an error: the connection is busy.
    pub fn completed(&self) {
        let now = self.table.now_ms();
        self.conn.active_ms.store(now, Ordering::Relaxed);
        self.conn.called.store(true, Ordering::Relaxed);
        self.conn.pending.store(false, Ordering::Relaxed);
    }
}

/// A call being answered (see [`Call::arrived`]).
pub struct InFlight {
    conn: Arc<Conn>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether `c`'s latest call is arriving at `now`: started, or sent
/// bytes, within [`ARRIVING`], and, past [`BUSY`] from its start, at
/// [`MIN_ARRIVAL_RATE`] since.
fn arriving(c: &Conn, now: u64) -> bool {
    c.started.load(Ordering::Relaxed) && now < arriving_until(c)
}

/// Until when `c`'s latest call counts as arriving (see [`arriving`]):
/// [`ARRIVING`] after its latest bytes, and no later than its start plus
/// [`BUSY`] or plus the time its bytes take at [`MIN_ARRIVAL_RATE`].
fn arriving_until(c: &Conn) -> u64 {
    let start = c.call_start_ms.load(Ordering::Relaxed);
    let paced = (c.call_bytes.load(Ordering::Relaxed) * 1000 / MIN_ARRIVAL_RATE)
        .max(BUSY.as_millis() as u64);
    (c.call_ms.load(Ordering::Relaxed) + ARRIVING.as_millis() as u64).min(start + paced)
}

/// How long requests holding `held` bytes take yet, in milliseconds, at
/// the pace of `sent` bytes in `elapsed` ms: one that sent nothing yet
/// takes the longest.
fn finish_ms(held: u64, sent: u64, elapsed: u64) -> u64 {
    let pace = u128::from(elapsed.max(1)) * u128::from(held) / u128::from(sent.max(1));
    u64::try_from(pace).unwrap_or(u64::MAX)
}

fn forget(open: &mut Open, conn: &Conn) {
    open.by_peer.remove(&conn.peer);
    if let Some(n) = open.per_ip.get_mut(&conn.from) {
        *n -= 1;
        if *n == 0 {
            open.per_ip.remove(&conn.from);
        }
    }
}

/// The address whose connections `ip`'s are counted with: an IPv4
/// address (an IPv4-mapped IPv6 one as its IPv4 address), or an IPv6
/// address's first `prefix` bits ([`Bounds::ipv6_prefix`]).
fn group(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}

/// An address counted with others (see [`group`]) as a person reads it.
fn named(group: IpAddr, prefix: u8) -> String {
    match group {
        IpAddr::V6(v6) if prefix < 128 => format!("{v6}/{prefix}"),
        ip => ip.to_string(),
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
        "closed to make way for a new connection (every place was taken; this one was idle)",
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

/// How often a connection waiting for a place looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// The accepted connections, each with a place in `table` (or refused).
/// While the places are held by connections just opened, accepting
/// waits: their requests are read first, so a burst of new connections
/// cannot push out a client whose request has not been read yet.
pub fn limited<IO: Accepted>(
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>>,
    table: Arc<Table>,
    plain: bool,
) -> impl tokio_stream::Stream<Item = std::io::Result<Limited<IO>>> {
    use futures_util::StreamExt;
    let warned = Arc::new(Mutex::new(None::<Instant>));
    let telling = Arc::new(tokio::sync::Semaphore::new(TELLING));
    incoming.filter_map(move |conn| {
        let (table, warned, telling) = (
            Arc::clone(&table),
            Arc::clone(&warned),
            Arc::clone(&telling),
        );
        async move {
            let io = match conn {
                Err(e) => return Some(Err(e)),
                Ok(io) => io,
            };
            let peer = io.peer().ok()?;
            let why = loop {
                match table.admit(peer) {
                    Ok(conn) => {
                        return Some(Ok(Limited {
                            io,
                            conn,
                            table,
                            started: 0,
                            quiet: Box::pin(tokio::time::sleep(HANDSHAKE_TIMEOUT)),
                        }))
                    }
                    Err(NoPlace::Wait(wait)) => tokio::time::sleep(wait.min(LOOK_AGAIN)).await,
                    Err(NoPlace::Refused(why)) => break why,
                }
            };
            let mut warned = warned.lock().expect("warned lock");
            if warned.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                *warned = Some(Instant::now());
                tracing::warn!(%peer, "connection refused: {why}");
            }
            refuse(io, why, plain, &telling);
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_the_stalled_then_the_old_silent_then_the_idlest_and_waits_for_the_new() {
        let table = Table::new(Bounds {
            total: 5,
            per_ip: 1,
            arriving: 1 << 30,
            ipv6_prefix: 128,
        });
        let t = 10 * BUSY.as_millis() as u64;
        let ms = |d: Duration| d.as_millis() as u64;
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let closed = |c: &Arc<Conn>| c.closed.load(Ordering::Acquire);
        let idle = table.admit_at(at(1), 0).unwrap();
        table.call_at(at(1), 0).unwrap().completed();
        idle.active_ms.store(0, Ordering::Relaxed);
        let old = table.admit_at(at(2), 0).unwrap();
        let young = table.admit_at(at(3), t - 100).unwrap();
        let stalled = table.admit_at(at(4), t - 300).unwrap();
        let _half_open = table.call_at(at(4), t - 300).unwrap();
        // Its headers in 50 ms ago: its body may be on its way.
        let arriving = table.admit_at(at(5), t - 50).unwrap();
        let _on_its_way = table.call_at(at(5), t - 50).unwrap();
        // A call that started ARRIVING ago and never arrived goes first.
        let n1 = table.admit_at(at(11), t).unwrap();
        assert!(closed(&stalled) && !closed(&arriving) && !closed(&old) && !closed(&young));
        // Then the oldest that never completed a call, open for BUSY.
        let n2 = table.admit_at(at(12), t).unwrap();
        assert!(closed(&old) && !closed(&idle) && !closed(&arriving));
        // Then the one whose last call is longest ago.
        let n3 = table.admit_at(at(13), t).unwrap();
        assert!(closed(&idle) && !closed(&arriving) && !closed(&young));
        // Only new ones left, and a call arriving: the new one waits until
        // that call has had ARRIVING, and then it goes.
        match table.admit_at(at(14), t) {
            Err(NoPlace::Wait(wait)) => assert_eq!(wait, ARRIVING - Duration::from_millis(50)),
            other => panic!("{other:?}"),
        }
        let later = t - 50 + ms(ARRIVING);
        let n4 = table.admit_at(at(14), later).unwrap();
        assert!(closed(&arriving) && !closed(&young));
        // Then the oldest of the new ones, once open for BUSY.
        match table.admit_at(at(15), later) {
            Err(NoPlace::Wait(wait)) => {
                assert_eq!(ms(wait), t - 100 + ms(BUSY) - later)
            }
            other => panic!("{other:?}"),
        }
        let n5 = table.admit_at(at(15), t - 100 + ms(BUSY)).unwrap();
        assert!(closed(&young));
        // Never one whose request arrived and is being answered, nor one
        // busy (a call completed within BUSY): refused.
        let end = t + 5 * ms(BUSY);
        let n1_call = table.call_at(n1.peer, end - ms(BUSY)).unwrap();
        let answering = n1_call.arrived();
        for n in [&n2, &n3, &n4, &n5] {
            table.call_at(n.peer, end).unwrap().completed();
            n.active_ms.store(end, Ordering::Relaxed);
        }
        match table.admit_at(at(16), end) {
            Err(NoPlace::Refused(why)) => assert!(why.contains("open and busy"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Answered with an error: its call never completed, so it goes.
        drop(answering);
        table.admit_at(at(16), end).unwrap();
        assert!(closed(&n1) && [&n2, &n3, &n4, &n5].iter().all(|n| !closed(n)));
        assert_eq!(table.len(), 5);
        assert!(
            table.call(at(11)).is_none(),
            "a closed connection has no calls"
        );
    }

    /// A request trickled a byte at a time protects its connection for
    /// [`BUSY`] only; one coming at a live client's pace, for as long as
    /// it comes.
    #[test]
    fn a_trickled_request_holds_no_place_and_a_paced_one_does() {
        let table = Table::new(Bounds {
            total: 2,
            per_ip: 2,
            arriving: 1 << 30,
            ipv6_prefix: 128,
        });
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let closed = |c: &Arc<Conn>| c.closed.load(Ordering::Acquire);
        let busy = BUSY.as_millis() as u64;
        let trickler = table.admit_at(at(1), 0).unwrap();
        let paced = table.admit_at(at(2), 0).unwrap();
        let (slow, fast) = (
            table.call_at(at(1), 0).unwrap(),
            table.call_at(at(2), 0).unwrap(),
        );
        // 5 bytes every 200 ms, against 8 KiB every 200 ms (40 KiB/s).
        let mut now = 0;
        while now < 3 * busy {
            now += 200;
            slow.take_at(5, 5, now).unwrap();
            fast.take_at(8 << 10, 8 << 10, now).unwrap();
            if now < busy {
                assert!(
                    matches!(table.admit_at(at(3), now), Err(NoPlace::Wait(_))),
                    "both still arriving at {now} ms"
                );
            }
        }
        table.admit_at(at(3), now).unwrap();
        assert!(closed(&trickler) && !closed(&paced));
        // The paced one stops: it makes way ARRIVING after its last bytes.
        let later = now + ARRIVING.as_millis() as u64;
        match table.admit_at(at(4), later - 1) {
            Err(NoPlace::Wait(w)) => assert_eq!(w, Duration::from_millis(1)),
            other => panic!("{other:?}"),
        }
        table.admit_at(at(4), later).unwrap();
        assert!(closed(&paced));
        // Call after call started and none completed, each with 5 bytes
        // that claim 64 KiB: paced from the first by the bytes received
        // (a claim costs nothing to send), so it makes way once its
        // second is over.
        let one = Table::new(Bounds {
            total: 1,
            per_ip: 1,
            arriving: 1 << 30,
            ipv6_prefix: 128,
        });
        let restarter = one.admit_at(at(5), 0).unwrap();
        let mut now = 0;
        while now < 3 * busy {
            now += 200;
            let call = one.call_at(at(5), now).unwrap();
            call.take_at(5, 64 << 10, now).unwrap();
        }
        one.admit_at(at(6), now).unwrap();
        assert!(closed(&restarter));
    }

    /// Bytes of requests still arriving are bounded per connection and in
    /// all. Past the bound in all, stalled connections make way, the one
    /// slowest to finish (of equals, the one holding most) first: where
    /// what they held covers the request, it goes on at once; else it is
    /// refused, and goes on once their calls gave their bytes back.
    #[test]
    fn bytes_still_arriving_are_bounded_and_the_slowest_stalled_holders_make_way() {
        let table = Table::new(Bounds {
            total: 10,
            per_ip: 10,
            arriving: 6 << 20,
            ipv6_prefix: 128,
        });
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let closed = |c: &Arc<Conn>| c.closed.load(Ordering::Acquire);
        let conns: Vec<_> = (1..=4).map(|p| table.admit_at(at(p), 0).unwrap()).collect();
        let calls: Vec<_> = (1..=4).map(|p| table.call_at(at(p), 0).unwrap()).collect();
        let e = calls[3]
            .take_at(5, ARRIVING_PER_CONNECTION + 1, 0)
            .unwrap_err();
        assert!(e.contains("this connection's"), "{e}");
        calls[0].take_at(4 << 20, 4 << 20, 0).unwrap();
        calls[1].take_at(1 << 20, 1 << 20, 0).unwrap();
        // Both stalled (nothing more for a while), as fast so far: the one
        // holding most makes way, and covers the request.
        let later = 10 * BUSY.as_millis() as u64;
        calls[2].take_at(2 << 20, 2 << 20, later).unwrap();
        let shut: Vec<bool> = conns.iter().map(closed).collect();
        assert_eq!(shut, [true, false, false, false]);
        // What the one stalled left holds does not cover 4 MiB: it makes
        // way all the same, and the request is refused.
        let e = calls[3].take_at(5, 4 << 20, later).unwrap_err();
        assert!(e.contains("NQUEENS_MAX_ARRIVING_BYTES"), "{e}");
        assert!(closed(&conns[1]) && !closed(&conns[2]));
        // Their calls end and give their bytes back: the next try fits.
        calls[0].give_back(4 << 20);
        calls[1].give_back(1 << 20);
        calls[3].take_at(5, 4 << 20, later).unwrap();
        assert_eq!(table.arriving_bytes.load(Ordering::Relaxed), 6 << 20);
    }

    /// Requests that claim a message and then arrive just fast enough to
    /// hold their places fill the bound in all. Another request past it
    /// goes on at once, as many of them making way as it needs, never a
    /// request arriving faster (though it holds more) nor one being
    /// answered; and so again when the flood comes back.
    #[test]
    fn past_the_bound_the_requests_slowest_to_finish_make_way() {
        let table = Table::new(Bounds {
            total: 20,
            per_ip: 20,
            arriving: 8 << 20,
            ipv6_prefix: 128,
        });
        let flood = |port| SocketAddr::from(([203, 0, 113, 7], port));
        let closed = |c: &Arc<Conn>| c.closed.load(Ordering::Acquire);
        let conns: Vec<_> = (1..=4)
            .map(|p| table.admit_at(flood(p), 0).unwrap())
            .collect();
        let calls: Vec<_> = (1..=4)
            .map(|p| table.call_at(flood(p), 0).unwrap())
            .collect();
        for call in &calls {
            call.take_at(5, 1 << 20, 0).unwrap();
        }
        // Another client's request arrived and is being answered.
        let honest = SocketAddr::from(([198, 51, 100, 2], 9));
        let answered = table.admit_at(honest, 0).unwrap();
        let _answering = table.call_at(honest, 0).unwrap().arrived();
        // A 3 MiB upload at 1 MiB/s, from 1 s on.
        let upload = table
            .admit_at(SocketAddr::from(([198, 51, 100, 4], 9)), 1000)
            .unwrap();
        let up = table.call_at(upload.peer, 1000).unwrap();
        up.take_at(5, 3 << 20, 1000).unwrap();
        // The flood sends at the least pace every 100 ms, the upload at
        // 1 MiB/s: all of them are arriving, none stalled.
        let mut now = 0;
        while now < 2200 {
            now += 100;
            for call in &calls {
                call.take_at(MIN_ARRIVAL_RATE / 10 + 1, 0, now).unwrap();
            }
            if now > 1000 {
                up.take_at((1 << 20) / 10, 0, now).unwrap();
            }
        }
        assert!(calls.iter().all(|c| arriving(&c.conn, now)) && arriving(&up.conn, now));
        let late = table
            .admit_at(SocketAddr::from(([198, 51, 100, 3], 9)), now)
            .unwrap();
        let lc = table.call_at(late.peer, now).unwrap();
        lc.take_at(5, 2 << 20, now).unwrap();
        assert_eq!(conns.iter().filter(|c| closed(c)).count(), 2);
        assert!(!closed(&answered) && !closed(&upload) && !closed(&late));
        // The flood comes back as its connections close, before their
        // calls gave their bytes back: its new request goes on, as a new
        // one does, and so does the next one after it, the flood's older
        // requests making way, never the new ones (their pace unknown yet).
        let back = table.admit_at(flood(9), now).unwrap();
        let bc = table.call_at(back.peer, now).unwrap();
        bc.take_at(5, 1 << 20, now).unwrap();
        let again = table
            .admit_at(SocketAddr::from(([198, 51, 100, 5], 9)), now)
            .unwrap();
        let ac = table.call_at(again.peer, now).unwrap();
        ac.take_at(5, 1 << 20, now).unwrap();
        assert!(conns.iter().all(closed));
        assert!([&upload, &late, &back, &again].iter().all(|c| !closed(c)));
        // With no old request left to make way, a new one is refused.
        let third = table.admit_at(flood(10), now).unwrap();
        let tc = table.call_at(third.peer, now).unwrap();
        let e = tc.take_at(5, 1 << 20, now).unwrap_err();
        assert!(e.contains("NQUEENS_MAX_ARRIVING_BYTES"), "{e}");
        assert!(!closed(&upload));
    }

    /// A connection holding a claim that completes small calls beside it,
    /// each restarting its latest call's pace, still makes way: its pace
    /// is measured from when it began to hold.
    #[test]
    fn calls_completed_beside_a_claim_do_not_keep_its_place() {
        let table = Table::new(Bounds {
            total: 10,
            per_ip: 10,
            arriving: 4 << 20,
            ipv6_prefix: 128,
        });
        let at = |port| SocketAddr::from(([192, 0, 2, 1], port));
        let holder = table.admit_at(at(1), 0).unwrap();
        let claim = table.call_at(at(1), 0).unwrap();
        claim.take_at(5, 4 << 20, 0).unwrap();
        let mut now = 0;
        while now < 2000 {
            now += 200;
            let beside = table.call_at(at(1), now).unwrap();
            beside.take_at(20, 0, now).unwrap();
            beside.completed();
        }
        assert!(arriving(&holder, now));
        table.admit_at(at(2), now).unwrap();
        let other = table.call_at(at(2), now).unwrap();
        other.take_at(5, 1 << 20, now).unwrap();
        assert!(holder.closed.load(Ordering::Acquire));
    }

    /// A request holds the length its prefix claims as soon as the prefix
    /// is in, whichever frames carry it, up to the largest message.
    #[test]
    fn a_request_holds_what_its_prefix_claims() {
        let mut c = Claim::default();
        assert_eq!(c.see(&[0, 0, 1]), 3, "the prefix not whole yet");
        assert_eq!(c.see(&[0, 0]), 5 + (1 << 16), "1 << 16 claimed");
        assert_eq!(c.see(&[7; 100]), 5 + (1 << 16));
        let mut big = Claim::default();
        assert_eq!(
            big.see(&[0, 0xff, 0xff, 0xff, 0xff, 1]),
            5 + LARGEST_MESSAGE
        );
        let mut short = Claim::default();
        assert_eq!(
            short.see(&[0, 0, 0, 0, 2, 9, 9]),
            7,
            "a whole small message"
        );
    }

    #[test]
    fn one_address_beyond_loopback_gets_at_most_its_share() {
        let at = |ip: [u8; 4], port| SocketAddr::from((ip, port));
        let t = Table::new(Bounds {
            total: 10,
            per_ip: 1,
            arriving: 1 << 30,
            ipv6_prefix: 128,
        });
        t.admit(at([10, 0, 0, 1], 1)).unwrap();
        match t.admit(at([10, 0, 0, 1], 2)) {
            Err(NoPlace::Refused(why)) => assert!(why.contains("from 10.0.0.1"), "{why}"),
            other => panic!("{other:?}"),
        }
        t.admit(at([10, 0, 0, 2], 1)).unwrap();
    }

    /// With `NQUEENS_IPV6_PREFIX=64`, an IPv6 /64 is one address: its
    /// share is counted together, and named as the /64. By default each
    /// IPv6 address is its own (a data centre's subnet shares a /64).
    #[test]
    fn an_ipv6_prefix_counts_as_one_address_where_asked() {
        let table = |ipv6_prefix| {
            Table::new(Bounds {
                total: 10,
                per_ip: 2,
                arriving: 1 << 30,
                ipv6_prefix,
            })
        };
        let v6 = |s: &str| SocketAddr::new(s.parse().unwrap(), 1);
        let at = |ip: [u8; 4], port| SocketAddr::from((ip, port));
        let t = table(64);
        t.admit(v6("2001:db8::1")).unwrap();
        t.admit(v6("2001:db8::2")).unwrap();
        match t.admit(v6("2001:db8::ffff:1")) {
            Err(NoPlace::Refused(why)) => assert!(why.contains("from 2001:db8::/64"), "{why}"),
            other => panic!("{other:?}"),
        }
        t.admit(v6("2001:db8:0:1::1")).unwrap();
        // An IPv4-mapped address is its IPv4 address.
        t.admit(v6("::ffff:10.0.0.1")).unwrap();
        t.admit(at([10, 0, 0, 1], 2)).unwrap();
        assert!(t.admit(at([10, 0, 0, 1], 3)).is_err());
        // Loopback, as a dual-stack listener sees it, has no share.
        for port in 1..=3 {
            let mapped = SocketAddr::new("::ffff:127.0.0.1".parse().unwrap(), port);
            t.admit(mapped).unwrap();
        }
        let each = table(128);
        for host in 1..=4 {
            each.admit(v6(&format!("2001:db8::{host}"))).unwrap();
        }
        each.admit(SocketAddr::new("2001:db8::1".parse().unwrap(), 2))
            .unwrap();
        match each.admit(SocketAddr::new("2001:db8::1".parse().unwrap(), 3)) {
            Err(NoPlace::Refused(why)) => assert!(why.contains("from 2001:db8::1:"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
