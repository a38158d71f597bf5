//! A Prometheus endpoint: `GET /metrics` in the text exposition format,
//! rendered from a snapshot of the state on each scrape.

use crate::core::Coordinator;
use crate::service::Ready;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use std::fmt::Write;
use std::net::SocketAddr;

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metrics text.
pub fn render(core: &Coordinator) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    let jobs = core.jobs();
    let tasks: Vec<(String, f64)> = jobs
        .iter()
        .flat_map(|j| {
            [
                ("pending", j.pending),
                ("leased", j.leased),
                ("done", j.done),
                ("failed", j.failed),
                ("dead", j.dead),
            ]
            .map(|(s, n)| (format!("{{job=\"{}\",state=\"{s}\"}}", j.id), n as f64))
        })
        .collect();
    family(
        "nqueens_tasks",
        "gauge",
        "Tasks of each job by state.",
        &tasks,
    );
    let work: Vec<(String, f64)> = jobs
        .iter()
        .map(|j| {
            (
                format!("{{job=\"{}\"}}", j.id),
                if j.work_total > 0.0 {
                    j.work_done / j.work_total
                } else {
                    0.0
                },
            )
        })
        .collect();
    family(
        "nqueens_job_work_done_ratio",
        "gauge",
        "Share of a job's estimated work that is done.",
        &work,
    );
    let rate: Vec<(String, f64)> = jobs
        .iter()
        .map(|j| (format!("{{job=\"{}\"}}", j.id), j.work_per_second))
        .collect();
    family(
        "nqueens_job_work_per_second",
        "gauge",
        "Estimated work done per second over the latest results.",
        &rate,
    );
    let c = core.counters();
    let results = [
        ("accepted", c.accepted),
        ("duplicate", c.duplicates),
        ("conflict", c.conflicts),
    ]
    .map(|(o, n)| (format!("{{outcome=\"{o}\"}}"), n as f64));
    family(
        "nqueens_results_total",
        "counter",
        "Task results by outcome.",
        &results,
    );
    family(
        "nqueens_leases_granted_total",
        "counter",
        "Leases granted.",
        &[(String::new(), c.leases_granted as f64)],
    );
    family(
        "nqueens_lease_expiries_total",
        "counter",
        "Leases that expired without a heartbeat.",
        &[(String::new(), c.lease_expiries as f64)],
    );
    family(
        "nqueens_lease_releases_total",
        "counter",
        "Leases handed back by workers.",
        &[(String::new(), c.releases as f64)],
    );
    let workers = core.workers();
    let per = |f: &dyn Fn(&crate::state::WorkerInfo) -> f64| -> Vec<(String, f64)> {
        workers
            .iter()
            .map(|(w, _)| (format!("{{worker=\"{}\"}}", label(&w.id)), f(w)))
            .collect()
    };
    family(
        "nqueens_worker_tasks_done_total",
        "counter",
        "Tasks each worker completed.",
        &per(&|w| w.tasks_done as f64),
    );
    family(
        "nqueens_worker_subproblems_done_total",
        "counter",
        "Subproblems each worker reported finished.",
        &per(&|w| w.subproblems_done as f64),
    );
    family(
        "nqueens_worker_errors_total",
        "counter",
        "Expired leases and conflicts per worker.",
        &per(&|w| w.errors as f64),
    );
    family(
        "nqueens_worker_last_seen_seconds",
        "gauge",
        "Unix time of each worker's last call.",
        &per(&|w| w.last_seen_ms as f64 / 1000.0),
    );
    let leases: Vec<(String, f64)> = workers
        .iter()
        .map(|(w, n)| (format!("{{worker=\"{}\"}}", label(&w.id)), *n as f64))
        .collect();
    family(
        "nqueens_worker_leases",
        "gauge",
        "Leases each worker holds.",
        &leases,
    );
    out
}

/// Serves `/metrics` on `listener` until the task is dropped: 503 while the
/// coordinator is still recovering its state.
pub async fn serve(listener: tokio::net::TcpListener, ready: Ready) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let ready = ready.clone();
                async move {
                    let response = match (req.uri().path(), ready.get()) {
                        ("/metrics", Some(core)) => Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(render(core)))),
                        ("/metrics", None) => Response::builder()
                            .status(StatusCode::SERVICE_UNAVAILABLE)
                            .body(Full::new(Bytes::from("the coordinator is starting\n"))),
                        _ => Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::from("try /metrics\n"))),
                    };
                    response.map_err(|e| std::io::Error::other(e.to_string()))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
