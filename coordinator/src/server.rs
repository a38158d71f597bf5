//! Running the coordinator: the gRPC server with health and reflection,
//! bearer tokens per role, and the sweeper that expires leases.

use crate::access::{bearer, worker_auth, Access, Gate};
use crate::credentials::Credentials;
use crate::hub::{Clock, CoordError, Coordinator, IoMode, SystemClock};
use crate::service::{Operators, Ready, Workers};
use crate::state::Limits;
use nqueens_proto::v1::{
    self, operator_service_server::OperatorServiceServer,
    worker_service_server::WorkerServiceServer,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

/// How to run a coordinator.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Required of workers when set.
    pub worker_token: Option<String>,
    /// Required of operators when set.
    pub operator_token: Option<String>,
    /// Allow listening beyond loopback without tokens.
    pub insecure: bool,
    /// Where to serve Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Allow `metrics` beyond loopback (it has no authentication).
    pub metrics_public: bool,
    /// Serve over TLS with these PEM files.
    pub tls: Option<Tls>,
    pub limits: Limits,
    pub checkpoints: Checkpoints,
    /// Audit each job in the background when it finishes, and log its
    /// digest. `solve --state` does not: it exits as its job ends, before
    /// an audit could finish (`nqueens audit` checks its directory).
    pub audit_when_done: bool,
    /// Start even though the journal lacks exactly this many acknowledged
    /// records (see `CoordError::JournalBehind`).
    pub accept_lost_records: Option<u64>,
}

/// When the coordinator checkpoints its state (and seals the journal's
/// segment): after `records` journal records, or after `interval` if
/// anything was journaled; and once at shutdown.
#[derive(Clone, Copy, Debug)]
pub struct Checkpoints {
    pub records: u64,
    pub interval: Duration,
    pub at_shutdown: bool,
}

impl Checkpoints {
    /// No checkpoint at all: every start-up replays the whole journal (for
    /// tests of what a start-up finds in the journal alone).
    pub fn never() -> Checkpoints {
        Checkpoints {
            records: u64::MAX,
            interval: Duration::from_secs(u64::MAX / 4),
            at_shutdown: false,
        }
    }
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints {
            // About a second of replay at start-up, whatever the history.
            records: 500_000,
            interval: Duration::from_secs(300),
            at_shutdown: true,
        }
    }
}

impl Config {
    /// A coordinator on a free loopback port with its data in `dir`:
    /// default limits, no tokens, TLS, metrics or audit when a job ends (an
    /// embedded run, a test).
    pub fn local(dir: &Path) -> Config {
        Config {
            listen: ([127, 0, 0, 1], 0).into(),
            data_dir: dir.to_path_buf(),
            worker_token: None,
            operator_token: None,
            insecure: false,
            metrics: None,
            metrics_public: false,
            tls: None,
            limits: Limits::default(),
            checkpoints: Checkpoints::default(),
            audit_when_done: false,
            accept_lost_records: None,
        }
    }
}

/// TLS files (PEM).
#[derive(Clone, Debug)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

pub use crate::access::{ACCESS_HEADER, MIN_TOKEN};

/// Refuses tokens that are blank or short, and one token for both roles.
pub fn check_tokens(worker: Option<&str>, operator: Option<&str>) -> Result<(), StartError> {
    for (role, t) in [("worker", worker), ("operator", operator)] {
        if let Some(t) = t {
            if t.trim().len() < MIN_TOKEN || t.trim() != t {
                return Err(StartError::WeakToken {
                    role,
                    len: t.trim().len(),
                });
            }
        }
    }
    if let (Some(w), Some(o)) = (worker, operator) {
        if bool::from(w.as_bytes().ct_eq(o.as_bytes())) {
            return Err(StartError::SameTokens);
        }
    }
    Ok(())
}

/// Why the coordinator did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "the {role} token is {len} bytes after trimming whitespace; at least {MIN_TOKEN} are required \
         (make one with: head -c 32 /dev/urandom | base64 > FILE)"
    )]
    WeakToken { role: &'static str, len: usize },
    #[error(
        "the worker and operator tokens are the same: a worker could then act as an operator. \
         Give each role its own token file"
    )]
    SameTokens,
    #[error(
        "refusing to listen on {0} without worker and operator tokens: anyone who can reach it could submit \
         results. Give --worker-token-file and --operator-token-file, listen on 127.0.0.1, or pass --insecure"
    )]
    NoTokens(SocketAddr),
    #[error(
        "refusing to serve metrics on {0} without --metrics-public: the page has no authentication, \
         so anyone who can reach it reads job progress and worker names. Bind --metrics to \
         127.0.0.1:PORT, or add --metrics-public if a firewall or network policy guards it"
    )]
    PublicMetrics(SocketAddr),
    #[error(
        "--data-dir {0} is a file, not a directory: give the directory a coordinator keeps its \
         journal in (it is created if missing)"
    )]
    DataDirIsAFile(PathBuf),
    #[error("cannot listen on {addr} ({flag}): {source}")]
    Bind {
        /// The option that named the address: `--listen` or `--metrics`.
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Core(#[from] CoordError),
    #[error("issued worker tokens: {0}")]
    Credentials(String),
    #[error("reflection service: {0}")]
    Reflection(String),
    #[error("TLS: cannot read {path}: {source}")]
    TlsFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS setup failed (are the certificate and key PEM files a matching pair?): {0}")]
    Tls(String),
}

impl StartError {
    /// A mistake in the configuration (exit code 2), as opposed to a
    /// failure of the data directory or the machine.
    pub fn is_configuration(&self) -> bool {
        !matches!(
            self,
            StartError::Core(_) | StartError::Credentials(_) | StartError::Reflection(_)
        )
    }
}

/// A running coordinator.
pub struct Running {
    pub addr: SocketAddr,
    /// The metrics address, when serving metrics.
    pub metrics_addr: Option<SocketAddr>,
    pub core: Arc<Coordinator>,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    sweeper: tokio::task::JoinHandle<()>,
    checkpointer: tokio::task::JoinHandle<()>,
    checkpoint_at_shutdown: bool,
    health_watch: tokio::task::JoinHandle<()>,
    refresher: tokio::task::JoinHandle<()>,
    metrics: Option<tokio::task::JoinHandle<()>>,
    /// Turns true once the data directory's lock is released.
    released: tokio::sync::watch::Receiver<bool>,
    /// The connections served, closed where calls outlive the shutdown's
    /// grace.
    connections: Arc<crate::conns::Table>,
}

impl Running {
    /// Stops accepting calls and waits for the server to end; the data
    /// directory is free once this returns.
    pub async fn shutdown(mut self) -> Result<(), tonic::transport::Error> {
        self.core.close();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.sweeper.abort();
        let _ = (&mut self.sweeper).await;
        self.checkpointer.abort();
        let _ = (&mut self.checkpointer).await;
        self.health_watch.abort();
        self.refresher.abort();
        if let Some(m) = self.metrics.take() {
            m.abort();
            let _ = m.await;
        }
        // Calls in flight finish, within a bound: a client that keeps a
        // stream open must not keep the process (and its lock) alive.
        let served = match tokio::time::timeout(SHUTDOWN_GRACE, &mut self.server).await {
            Ok(served) => served.expect("server task panicked"),
            Err(_) => {
                tracing::warn!(grace = ?SHUTDOWN_GRACE, "calls still open after the shutdown grace; closing their connections");
                self.server.abort();
                // Their tasks outlive the server's: closed, they end, and
                // let the coordinator (and its lock) go.
                self.connections.close_all();
                Ok(())
            }
        };
        // The next start reads this instead of replaying the journal.
        let checkpoint = match self.checkpoint_at_shutdown {
            true => self.core.checkpoint(false).await,
            false => Ok(None),
        };
        if let Err(e) = checkpoint {
            tracing::warn!(error = %e, "no checkpoint at shutdown; the next start replays the journal since the last one");
        }
        self.core.close_store();
        // The lock goes with the coordinator's last handle; the tasks of
        // calls that just ended may still hold one for a moment.
        let mut released = self.released.clone();
        drop(self);
        let freed = tokio::time::timeout(SHUTDOWN_GRACE, released.wait_for(|&r| r)).await;
        if freed.is_err() {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "the data directory's lock is still held by tasks of calls that have not ended");
        }
        served
    }

    /// Waits until the server ends (it ends only on shutdown or an error).
    pub async fn wait(self) -> Result<(), tonic::transport::Error> {
        self.server.await.expect("server task panicked")
    }
}

pub use crate::conns::{CONNECTION_AGE, HANDSHAKE_TIMEOUT, IDLE_TIMEOUT};

/// How long a shutdown waits for calls in flight before it closes their
/// connections.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the data directory and starts serving.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<Running, StartError> {
    start_announced(config, clock, |_| {}).await
}

/// Where a starting coordinator answers, known before its recovery.
#[derive(Clone, Copy, Debug)]
pub struct Listening {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    /// Which roles need credentials.
    pub access: Access,
}

/// [`start`], calling `announce` once the ports are bound and the server
/// answers, before the journal is replayed: health says NOT_SERVING and
/// other calls UNAVAILABLE until the coordinator has recovered, so probes,
/// operators and workers learn what is happening instead of timing out.
pub async fn start_announced(
    config: Config,
    clock: Arc<dyn Clock>,
    announce: impl FnOnce(Listening),
) -> Result<Running, StartError> {
    let prepared = prepare(&config)?;
    let (listener, addr) = bind(config.listen).await?;
    let incoming = tcp_incoming(listener);
    let io = IoMode::Threads;
    serve_prepared(config, clock, prepared, (incoming, addr), io, announce).await
}

/// [`start`] on connections accepted by the caller, which arrive at
/// `addr`, with the data directory's disk work done as `io` says: for the
/// simulation tests, whose network is simulated and whose one thread runs
/// every host ([`IoMode::Inline`]). The same services, connection table,
/// recovery and timers as [`start`].
pub async fn start_on<IO: crate::conns::Accepted>(
    config: Config,
    clock: Arc<dyn Clock>,
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    addr: SocketAddr,
    io: IoMode,
) -> Result<Running, StartError> {
    let prepared = prepare(&config)?;
    serve_prepared(config, clock, prepared, (incoming, addr), io, |_| {}).await
}

/// What a start settles before it listens: the data directory's lock (a
/// second coordinator on it never announces an address), who must
/// authenticate, the server's settings, the issued worker tokens.
struct Prepared {
    lock: std::fs::File,
    access: Access,
    builder: tonic::transport::Server,
    issued: Arc<Credentials>,
}

fn prepare(config: &Config) -> Result<Prepared, StartError> {
    if config.data_dir.exists() && !config.data_dir.is_dir() {
        return Err(StartError::DataDirIsAFile(config.data_dir.clone()));
    }
    let access = check_access(config)?;
    let builder = server_builder(config.tls.as_ref())?;
    let lock = crate::hub::lock_dir(&config.data_dir)?;
    // Read, or made on a first start: a directory the coordinator cannot
    // write in is refused before it announces an address.
    crate::hub::lease_key(&config.data_dir).map_err(|why| CoordError::DataDir {
        path: config.data_dir.clone(),
        why,
    })?;
    let issued = Arc::new(
        Credentials::open(&config.data_dir).map_err(|e| StartError::Credentials(e.to_string()))?,
    );
    Ok(Prepared {
        lock,
        access,
        builder,
        issued,
    })
}

/// Serves the connections of `incoming` (accepted at `addr`), announces
/// it, recovers the state and starts the timers.
async fn serve_prepared<IO: crate::conns::Accepted>(
    config: Config,
    clock: Arc<dyn Clock>,
    Prepared {
        lock,
        access,
        builder,
        issued,
    }: Prepared,
    (incoming, addr): (
        impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
        SocketAddr,
    ),
    io: IoMode,
    announce: impl FnOnce(Listening),
) -> Result<Running, StartError> {
    let metrics_listener = bind_metrics(&config).await?;
    let metrics_addr = metrics_listener.as_ref().map(|(_, at)| *at);
    let gate = Arc::new(Gate::new(access, &config.data_dir));
    let front = serve_front(builder, incoming, &config, &gate, &issued).await?;
    let metrics = metrics_listener.map(|(l, _)| serve_metrics(l, &front));
    announce(Listening {
        addr,
        metrics_addr,
        access,
    });
    log_access(access, &issued);
    tracing::info!(%addr, dir = %config.data_dir.display(), "answering (NOT_SERVING) while the state is recovered");

    let core = match Coordinator::open(
        lock,
        &config.data_dir,
        config.limits,
        clock,
        config.accept_lost_records,
        io,
    )
    .await
    {
        Ok(core) => core,
        Err(e) => {
            front.abandon(metrics).await;
            return Err(e.into());
        }
    };
    core.set_audit_when_done(config.audit_when_done);
    front.ready.set(Arc::clone(&core));
    let health_watch = watch_journal_health(&core, front.health).await;
    let refresher = spawn_refresher(issued, gate, Arc::clone(&core));
    let sweeper = spawn_sweeper(Arc::clone(&core), config.limits.lease_ttl_ms);
    let checkpointer = spawn_checkpointer(Arc::clone(&core), config.checkpoints);
    tracing::info!(%addr, dir = %config.data_dir.display(), "coordinator serving");
    Ok(Running {
        released: core.lock_released(),
        addr,
        metrics_addr,
        metrics,
        core,
        stop: Some(front.stop),
        server: front.server,
        connections: front.connections,
        sweeper,
        checkpointer,
        checkpoint_at_shutdown: config.checkpoints.at_shutdown,
        health_watch,
        refresher,
    })
}

/// Checks the tokens, warns about `--insecure`, and decides who must
/// authenticate ([`decide_access`]).
fn check_access(config: &Config) -> Result<Access, StartError> {
    check_tokens(
        config.worker_token.as_deref(),
        config.operator_token.as_deref(),
    )?;
    if config.insecure {
        tracing::warn!(
            listen = %config.listen,
            "--insecure: calls without a token are accepted beyond loopback; anyone who can reach \
             {} can submit results and control jobs",
            config.listen
        );
    }
    decide_access(config)
}

/// The gRPC server's settings, with TLS when `tls` is given.
fn server_builder(tls: Option<&Tls>) -> Result<tonic::transport::Server, StartError> {
    // Dead peers are found by pings; every connection is recycled after
    // CONNECTION_AGE (clients reconnect on their next call), so idle
    // connections cannot be held for ever; calls per connection are capped.
    let builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_connection_age(CONNECTION_AGE)
        .max_connection_age_grace(Duration::from_secs(60))
        .max_concurrent_streams(Some(crate::conns::streams_per_connection()))
        .concurrency_limit_per_connection(256)
        // A call whose request does not arrive whole within this ends (its
        // stream and buffers freed); streamed answers (watch, export) are
        // not cut by it.
        .timeout(CALL_TIMEOUT);
    match tls {
        Some(tls) => builder
            .tls_config(tls_config(tls)?)
            .map_err(|e| StartError::Tls(e.to_string())),
        None => Ok(builder),
    }
}

/// The server's certificate and key, and the CA its clients' certificates
/// must be signed by, if any.
fn tls_config(tls: &Tls) -> Result<tonic::transport::ServerTlsConfig, StartError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| StartError::TlsFile {
            path: path.clone(),
            source,
        })
    };
    let mut t = tonic::transport::ServerTlsConfig::new().identity(
        tonic::transport::Identity::from_pem(read(&tls.cert)?, read(&tls.key)?),
    );
    if let Some(ca) = &tls.client_ca {
        t = t.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    Ok(t)
}

/// Binds the gRPC listener; returns it with the address it got.
async fn bind(listen: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind {
        flag: "--listen",
        addr: listen,
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

/// Binds the metrics listener, if metrics are served; refuses an address
/// beyond loopback without `--metrics-public`.
async fn bind_metrics(
    config: &Config,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, StartError> {
    let Some(at) = config.metrics else {
        return Ok(None);
    };
    if nqueens_metrics::http::beyond_loopback(at) {
        if !config.metrics_public {
            return Err(StartError::PublicMetrics(at));
        }
        tracing::warn!(
            %at,
            "--metrics-public: metrics are served without authentication beyond loopback; anyone \
             who can reach {at} reads job progress and worker names"
        );
    }
    let bind_error = |source| StartError::Bind {
        flag: "--metrics",
        addr: at,
        source,
    };
    let listener = nqueens_metrics::http::bind(at).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok(Some((listener, addr)))
}

/// The gRPC server, answering from before the state is recovered.
struct Front {
    health: tonic_health::server::HealthReporter,
    /// Set once the state is recovered; the services answer UNAVAILABLE
    /// until then.
    ready: Ready,
    /// Every call counted by method and status, refused ones included.
    grpc: Arc<nqueens_metrics::grpc::GrpcMetrics>,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    /// The connections served.
    connections: Arc<crate::conns::Table>,
}

impl Front {
    /// Stops the server (and the metrics server) of a coordinator that
    /// could not recover its state.
    async fn abandon(self, metrics: Option<tokio::task::JoinHandle<()>>) {
        let _ = self.stop.send(());
        if let Some(m) = metrics {
            m.abort();
        }
        let _ = self.server.await;
    }
}

/// Starts serving health (NOT_SERVING), reflection and the worker and
/// operator services on `listener`, each with its credentials; every
/// connection takes a place in the connection table (see [`crate::conns`]).
async fn serve_front<IO: crate::conns::Accepted>(
    builder: tonic::transport::Server,
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    config: &Config,
    gate: &Arc<Gate>,
    issued: &Arc<Credentials>,
) -> Result<Front, StartError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, tonic_health::ServingStatus::NotServing).await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| StartError::Reflection(e.to_string()))?;
    // The schema is the operators' to read: reflection asks what the
    // operator service asks (its answers are far larger than its requests).
    let reflection = tonic::service::interceptor::InterceptedService::new(
        reflection,
        bearer(config.operator_token.as_deref().map(Arc::from), "operator"),
    );
    let ready = Ready::default();
    let table = crate::conns::Table::new(crate::conns::Bounds::from_env());
    let workers = WorkerServiceServer::with_interceptor(
        Workers(ready.clone()),
        worker_auth(
            Arc::clone(gate),
            config.worker_token.as_deref().map(Arc::from),
            Arc::clone(issued),
        ),
    );
    let operators = OperatorServiceServer::with_interceptor(
        Operators(ready.clone()),
        bearer(config.operator_token.as_deref().map(Arc::from), "operator"),
    );
    let grpc = nqueens_metrics::grpc::GrpcMetrics::new(&crate::metrics::SERVICES);
    let (stop, stopped) = oneshot::channel::<()>();
    let router = builder
        .layer(grpc.layer())
        .layer(tower::layer::layer_fn({
            let (table, stamp) = (Arc::clone(&table), stamp(gate));
            move |inner| Answers {
                inner,
                table: Arc::clone(&table),
                stamp: stamp.clone(),
            }
        }))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(workers)
        .add_service(operators);
    let incoming = crate::conns::limited(incoming, Arc::clone(&table), config.tls.is_none());
    let server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = stopped.await;
    }));
    Ok(Front {
        health,
        ready,
        grpc,
        stop,
        server,
        connections: table,
    })
}

/// The connections accepted on `listener`.
fn tcp_incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    // Without NODELAY, small replies wait ~40 ms for delayed ACKs.
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)))
}

/// Serves `GET /metrics` on `listener`: 503 until the state is recovered.
fn serve_metrics(listener: tokio::net::TcpListener, front: &Front) -> tokio::task::JoinHandle<()> {
    let ready = front.ready.clone();
    let grpc = Arc::clone(&front.grpc);
    tokio::spawn(nqueens_metrics::http::serve(
        listener,
        move || match ready.get() {
            Some(core) => Ok(crate::metrics::render(core, &grpc)),
            None => Err("the coordinator is starting".into()),
        },
    ))
}

/// Logs who must authenticate, and warns when workers must but no worker
/// token exists yet.
fn log_access(access: Access, issued: &Credentials) {
    tracing::info!(access = %access.header(), "access: {}", access.describe());
    if access.workers && !access.shared_worker_token && !issued.any() {
        tracing::warn!(
            "workers must authenticate but no worker token is issued: every worker is refused until \
             `nqueens token issue NAME --data-dir DIR` gives one a token"
        );
    }
}

/// The health status for a journal that can (`true`) or cannot be written.
fn serving(journal_ok: bool) -> tonic_health::ServingStatus {
    match journal_ok {
        true => tonic_health::ServingStatus::Serving,
        false => tonic_health::ServingStatus::NotServing,
    }
}

/// Sets health from the journal's state now and on each change:
/// NOT_SERVING while the journal cannot be written (a full disk), as no
/// result could be acknowledged; SERVING again once a write succeeds.
async fn watch_journal_health(
    core: &Coordinator,
    health: tonic_health::server::HealthReporter,
) -> tokio::task::JoinHandle<()> {
    let mut journal_ok = core.journal_healthy();
    set_health(&health, serving(*journal_ok.borrow_and_update())).await;
    tokio::spawn(async move {
        while journal_ok.changed().await.is_ok() {
            let ok = *journal_ok.borrow_and_update();
            tracing::warn!(journal_writable = ok, "health: {:?}", serving(ok));
            set_health(&health, serving(ok)).await;
        }
    })
}

/// Re-reads the issued worker tokens every second, so revoked tokens stop
/// working within a second or two and the first token issued for open
/// workers protects them as soon ([`Gate::check`]), and gives memory a
/// flood left behind back to the system.
fn spawn_refresher(
    issued: Arc<Credentials>,
    gate: Arc<Gate>,
    core: Arc<Coordinator>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let tokens = async {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Err(e) = issued.refresh() {
                    tracing::error!(error = %e, "cannot re-read the issued worker tokens; keeping the ones known");
                }
                protect_workers_once_issued(&gate, &issued, &core);
                // A revoked credential's workers can report nothing more:
                // their tasks go to others now, not a lease's life later.
                for name in issued.take_revoked() {
                    let released = core.release_credential(&name);
                    tracing::info!(credential = %name, released, "worker token revoked: its workers' leases handed back");
                }
            }
        };
        tokio::join!(tokens, crate::conns::give_back_memory());
    })
}

/// Protects open workers once a token is issued for the data directory,
/// hands back the leases of the workers now refused (their tasks go to
/// others at once, not a lease's life later), and says so.
fn protect_workers_once_issued(gate: &Gate, issued: &Credentials, core: &Coordinator) {
    match gate.check(issued) {
        Ok(false) => {}
        Ok(true) => tracing::warn!(
            access = %gate.access().header(),
            released = core.release_unbound(),
            "a worker token was issued for this data directory: workers must authenticate from \
             now on (access: {}); workers without a token are refused{}, and their leases were \
             handed back",
            gate.access().describe(),
            match gate.access().client_certs {
                true => ", those with a client certificate alone too",
                false => "",
            }
        ),
        Err(e) => tracing::error!(
            error = %e,
            "workers must authenticate from now on (a worker token was issued), but the data \
             directory could not be marked: restart this coordinator once it can be written, or \
             it will start with its workers open again"
        ),
    }
}

/// Expires leases, four times in a lease's life (at most every 10 ms, at
/// least every second); failures are logged once a minute.
fn spawn_sweeper(core: Arc<Coordinator>, lease_ttl_ms: u64) -> tokio::task::JoinHandle<()> {
    let every = Duration::from_millis((lease_ttl_ms / 4).clamp(10, 1_000));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let mut failures = crate::throttle::Throttle::new(crate::throttle::EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = core.sweep().await {
                if let Some(held) = failures.allow() {
                    tracing::error!(error = %e, failures_not_logged = held, "lease sweep failed (logged once a minute)");
                }
            }
        }
    })
}

/// Checkpoints the state when `checkpoints` says it is due (checked every
/// second at most); failures are logged once a minute.
fn spawn_checkpointer(
    core: Arc<Coordinator>,
    checkpoints: Checkpoints,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1).min(checkpoints.interval));
        let mut last = tokio::time::Instant::now();
        let mut failures = crate::throttle::Throttle::new(crate::throttle::EVERY);
        loop {
            tick.tick().await;
            let since = core.records_since_checkpoint();
            let due = since >= checkpoints.records.max(1)
                || (since > 0 && last.elapsed() >= checkpoints.interval);
            if !due {
                continue;
            }
            last = tokio::time::Instant::now();
            if let Err(e) = core.checkpoint(true).await {
                crate::checkpoint::ERRORS.inc();
                if let Some(held) = failures.allow() {
                    tracing::error!(error = %e, failures_not_logged = held, "checkpoint failed; the journal still holds everything (start-up replays more; logged once a minute)");
                }
            }
        }
    })
}

/// The longest a unary call may take, its request's arrival included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What every answer passes through:
/// - the caller's connection is marked busy once one of its calls
///   completes without an error, and kept while a call whose request
///   arrived in full is being answered (see [`crate::conns`]): calls that
///   never finish (half-open streams) do not keep a connection's place;
/// - every answer but a worker call's is stamped: worker calls are nearly
///   all the traffic, no worker reads the stamp, and a clock header that
///   changes on every answer costs HPACK a new table entry each time (a
///   few per cent of the coordinator's time under load).
#[derive(Clone)]
struct Answers<S> {
    inner: S,
    table: Arc<crate::conns::Table>,
    stamp: Stamp,
}

fn peer_of<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

/// Where one call stands, shared by its request body and its answer.
enum Stage {
    /// The request is still arriving.
    Arriving,
    /// It arrived in full: its connection is held while it is answered
    /// (the guard is only ever dropped).
    Arrived(#[allow(dead_code)] crate::conns::InFlight),
    /// Answered (or abandoned): nothing more to hold.
    Over,
}

type CallSlot = Arc<std::sync::Mutex<Stage>>;

/// A request body that marks its call arrived once its last frame is in,
/// and holds the bytes of its frames in the connection table's bounds
/// until then ([`crate::conns::Call::take`]).
struct Arriving {
    inner: tonic::body::Body,
    slot: CallSlot,
    call: Arc<crate::conns::Call>,
    /// Bytes taken and not given back yet, and what the request holds
    /// of the server's memory as it comes.
    held: u64,
    claim: crate::conns::Claim,
}

impl Arriving {
    fn arrived(&mut self) {
        self.give_back();
        let mut slot = self.slot.lock().expect("call lock");
        if matches!(*slot, Stage::Arriving) {
            *slot = Stage::Arrived(self.call.arrived());
        }
    }

    fn give_back(&mut self) {
        self.call.give_back(std::mem::take(&mut self.held));
    }

    /// Holds what a frame makes the request hold (see
    /// [`crate::conns::Claim`]): a refusal ends the call, its bytes given
    /// back.
    fn take(&mut self, frame: &http_body::Frame<bytes::Bytes>) -> Result<(), tonic::Status> {
        let Some(data) = frame.data_ref() else {
            return Ok(());
        };
        let more = self.claim.see(data).saturating_sub(self.held);
        match self.call.take(data.len() as u64, more) {
            Ok(()) => {
                self.held += more;
                Ok(())
            }
            Err(why) => {
                self.give_back();
                Err(nqueens_proto::refusal::Refusal::Full.status(why))
            }
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl http_body::Body for Arriving {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        let frame = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &frame {
            std::task::Poll::Ready(None) => self.arrived(),
            std::task::Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.arrived(),
            std::task::Poll::Ready(Some(Ok(f))) => {
                if let Err(refused) = self.take(f) {
                    return std::task::Poll::Ready(Some(Err(refused)));
                }
            }
            _ => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Ends a call's hold on its connection when its answer is ready or the
/// call is dropped.
struct Answered(CallSlot);

impl Drop for Answered {
    fn drop(&mut self) {
        *self.0.lock().expect("call lock") = Stage::Over;
    }
}

impl<S, R> tower::Service<http::Request<tonic::body::Body>> for Answers<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        use http_body::Body as _;
        let call = peer_of(&req).and_then(|peer| self.table.call(peer).map(Arc::new));
        let stamp = (!req.uri().path().starts_with(WORKER_CALLS)).then(|| self.stamp.clone());
        // A health check needs no token and costs nothing: it keeps no
        // connection's place (see `conns::Table::victim`), so a flood of
        // connections that only check health makes way for clients.
        let keeps_place = !req.uri().path().starts_with(HEALTH_CALLS);
        let slot: CallSlot = Arc::new(std::sync::Mutex::new(Stage::Arriving));
        let req = match &call {
            Some(call) => req.map(|inner| {
                let mut arriving = Arriving {
                    inner,
                    slot: Arc::clone(&slot),
                    call: Arc::clone(call),
                    held: 0,
                    claim: crate::conns::Claim::default(),
                };
                if arriving.is_end_stream() {
                    arriving.arrived();
                }
                tonic::body::Body::new(arriving)
            }),
            None => req,
        };
        let answered = Answered(slot);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            drop(answered);
            if let (Ok(r), Some(call)) = (&answer, call) {
                let status = r.headers().get("grpc-status");
                if status.is_none_or(|s| s == "0") && keeps_place {
                    call.completed();
                }
            }
            Ok(match stamp {
                Some(s) => s.on(answer?),
                None => answer?,
            })
        })
    }
}

/// Headers every answer but a worker call's carries (see `Answers`):
/// this coordinator's version and its clock (Unix ms), so that a client
/// (`nqueens doctor`, any role, health included) can compare them with
/// its own.
pub const VERSION_HEADER: &str = "nqueens-version";
pub const TIME_HEADER: &str = "nqueens-time-ms";

/// The headers' values, made once.
#[derive(Clone)]
struct Stamp {
    gate: Arc<Gate>,
    /// The access header with workers open, and with them protected.
    open: http::HeaderValue,
    protected: http::HeaderValue,
}

fn stamp(gate: &Arc<Gate>) -> Stamp {
    let header = |workers| {
        let access = Access {
            workers,
            ..gate.access()
        };
        http::HeaderValue::from_str(&access.header()).expect("ASCII")
    };
    Stamp {
        gate: Arc::clone(gate),
        open: header(false),
        protected: header(true),
    }
}

impl Stamp {
    fn on<B>(&self, mut answer: http::Response<B>) -> http::Response<B> {
        let headers = answer.headers_mut();
        headers.insert(
            VERSION_HEADER,
            http::HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
        );
        headers.insert(TIME_HEADER, http::HeaderValue::from(SystemClock.now_ms()));
        let access = match self.gate.workers_protected() {
            true => &self.protected,
            false => &self.open,
        };
        headers.insert(ACCESS_HEADER, access.clone());
        answer
    }
}

/// The path of every WorkerService call.
const WORKER_CALLS: &str = "/nqueens.v1.WorkerService/";

/// The path of every health check.
const HEALTH_CALLS: &str = "/grpc.health.v1.Health/";

/// Decides who must authenticate, once: workers when a shared token is
/// given or the data directory was protected before (see
/// [`crate::access`]), which is then marked durably. Refuses to listen
/// beyond loopback with an unprotected role, unless `--insecure`.
fn decide_access(config: &Config) -> Result<Access, StartError> {
    let access = Access {
        workers: config.worker_token.is_some() || crate::access::marked(&config.data_dir),
        shared_worker_token: config.worker_token.is_some(),
        operators: config.operator_token.is_some(),
        client_certs: config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
    };
    // Client certificates authenticate as well as tokens do.
    let protected = (access.workers && access.operators) || access.client_certs;
    if !config.listen.ip().is_loopback() && !protected && !config.insecure {
        return Err(StartError::NoTokens(config.listen));
    }
    if access.workers {
        crate::access::mark(&config.data_dir).map_err(|e| {
            StartError::Credentials(format!(
                "cannot mark {} as protected: {e}",
                config.data_dir.join(crate::access::MARK).display()
            ))
        })?;
    }
    Ok(access)
}

/// Sets every service's health status.
async fn set_health(
    health: &tonic_health::server::HealthReporter,
    status: tonic_health::ServingStatus,
) {
    for name in ["", "nqueens.v1.WorkerService", "nqueens.v1.OperatorService"] {
        health.set_service_status(name, status).await;
    }
}
