//! The long-running processes: `nqueens coordinator` and `nqueens worker`,
//! with logs on stderr and SIGTERM / Ctrl-C handling.

use crate::environ::{forward_signals, Signals};
use crate::exit::Failure;
use crate::opts::{LogFormat, Logs};
use std::io::{self, Write};

/// Logs on stderr at `level` (`--log-level`) unless RUST_LOG is set (it
/// wins, and can set levels per module), as text or as one JSON object
/// per event (`--log-format`).
pub fn init_logs(level: &str, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(io::stderr)
        // A log write that fails (stderr on a full disk) must not panic the
        // thread that logged: by default the failure is reported with
        // eprintln!, which panics when stderr cannot be written, and so
        // once killed the journal's writer thread.
        .log_internal_errors(false);
    match format {
        // Colours on a terminal only: log files and journald get plain text.
        LogFormat::Text => builder
            .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
            .init(),
        // {"timestamp":..,"level":"INFO","fields":{"message":..,..},"target":..}
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

/// Where a worker serves its metrics (`--metrics`, `--metrics-public`).
#[derive(Clone, Copy, Debug)]
pub struct Metrics {
    pub at: std::net::SocketAddr,
    /// Allowed beyond loopback.
    pub public: bool,
}

/// Binds the worker's metrics endpoint by the coordinator's rule: the
/// page has no authentication, so a non-loopback address needs
/// `--metrics-public`. A refused or busy address is bad input (exit 2),
/// found before the self-test and any work.
async fn worker_metrics(
    m: Metrics,
    stats: std::sync::Arc<nqueens_worker::metrics::Stats>,
) -> Result<(), Failure> {
    if nqueens_metrics::http::beyond_loopback(m.at) {
        if !m.public {
            return Err(Failure::BadInput(format!(
                "refusing to serve metrics on {} without --metrics-public: the page has no \
                 authentication, so anyone who can reach it reads this worker's name and rate. Bind \
                 --metrics to 127.0.0.1:PORT, or add --metrics-public if a firewall or network policy \
                 guards it",
                m.at
            )));
        }
        tracing::warn!(at = %m.at, "--metrics-public: metrics are served without authentication beyond loopback");
    }
    let listener = nqueens_metrics::http::bind(m.at)
        .await
        .map_err(|e| Failure::BadInput(format!("cannot serve metrics on {}: {e}", m.at)))?;
    let at = listener.local_addr()?;
    // Scripts using port 0 read the address here, as from the coordinator.
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "metrics at http://{at}/metrics").and_then(|()| out.flush());
    tokio::spawn(nqueens_metrics::http::serve(listener, move || {
        Ok(stats.render())
    }));
    Ok(())
}

/// Runs a worker until it has drained after SIGTERM or Ctrl-C; a second
/// signal exits at once.
pub fn worker(
    config: nqueens_worker::run::Config,
    metrics: Option<Metrics>,
    logs: Logs,
) -> Result<(), Failure> {
    init_logs(logs.log_level.directive(), logs.log_format);
    // One async thread is plenty for a few calls a second, and fewer
    // threads to wake means fewer interruptions of the counting threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let stats = nqueens_worker::metrics::Stats::new();
        if let Some(m) = metrics {
            worker_metrics(m, std::sync::Arc::clone(&stats)).await?;
        }
        nqueens_worker::run::run_with(config, forward_signals(), stats)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                nqueens_worker::run::WorkerError::Refused(m) => Failure::Refused(m),
                // Its address, CA or certificate files: as an operator's.
                e @ nqueens_worker::run::WorkerError::Client(_) => Failure::BadInput(e.to_string()),
                e => Failure::Failed(e.to_string()),
            })
    })
}

/// Serves until Ctrl-C or SIGTERM. Prints the bound address on stdout
/// first, so scripts (and tests) using port 0 can find it.
/// A write past a file-size limit (`ulimit -f`) sends SIGXFSZ, which kills
/// by default. Handled, the write fails with EFBIG instead: the journal
/// stops acknowledging and says why, as for a full disk, and nothing
/// acknowledged is lost.
fn survive_file_size_limit() {
    #[cfg(target_os = "linux")]
    {
        const SIGXFSZ: i32 = 25;
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut s) = signal(SignalKind::from_raw(SIGXFSZ)) {
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    tracing::error!("a write went past the file-size limit (SIGXFSZ)");
                }
            });
        }
    }
}

pub fn coordinator(config: nqueens_coordinator::server::Config, logs: Logs) -> Result<(), Failure> {
    init_logs(logs.log_level.directive(), logs.log_format);
    // A bad configuration is bad input (exit 2), before anything is opened.
    nqueens_coordinator::server::check_tokens(
        config.worker_token.as_deref(),
        config.operator_token.as_deref(),
    )
    .map_err(|e| Failure::BadInput(e.to_string()))?;
    let runtime = tokio::runtime::Runtime::new()?;
    let served = runtime.block_on(async {
        survive_file_size_limit();
        // Listening from the start: a signal sent the moment the
        // coordinator is ready (or while it recovers) is never missed.
        let mut signals = Signals::new();
        let clock = std::sync::Arc::new(nqueens_coordinator::hub::SystemClock);
        // Scripts (and tests) read these lines; a closed stdout must not
        // stop the coordinator, so write errors are ignored.
        let say = |line: String| {
            let mut out = io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        };
        let started = nqueens_coordinator::server::start_announced(config, clock, |at| {
            say(format!("nqueens coordinator listening on {}", at.addr));
            if let Some(m) = at.metrics_addr {
                say(format!("metrics at http://{m}/metrics"));
            }
            say(format!("access: {}", at.access.describe()));
        });
        // Recovery (replay, re-planning) can take a while: a signal
        // during it exits at once; nothing of it is durable until done.
        let running = tokio::select! {
            started = started => started.map_err(|e| match e.is_configuration() {
                true => Failure::BadInput(e.to_string()),
                false => Failure::Failed(e.to_string()),
            })?,
            () = signals.recv() => {
                tracing::info!("stopped while recovering its state");
                return Ok(());
            }
        };
        say("nqueens coordinator ready".into());
        signals.recv().await;
        tracing::info!("shutting down");
        running
            .shutdown()
            .await
            .map_err(|e| Failure::Failed(e.to_string()))
    });
    // Planning threads stop between slices of their enumeration; do not
    // wait long for one.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    served
}
