//! gRPC requests by method and status code, and their latency: a tower
//! layer for a tonic server (`Server::builder().layer(...)`), outside every
//! service and interceptor, so refused calls (a wrong token) count too.
//!
//! The status of a call is in the response headers when it failed before
//! any message (a "trailers-only" response, how tonic answers errors), else
//! in the trailers after the body; the body is wrapped to read them. A call
//! whose response is dropped before its status (the client went away) is
//! counted as `Canceled`. The latency runs from the request to its status.

use crate::{family, CALL_SECONDS};
use http_body::{Body, Frame, SizeHint};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

/// The status codes' names, as gRPC's own libraries print them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const CANCELED: usize = 1;
const UNKNOWN: usize = 2;

/// Distinct methods kept; calls to others (a client trying names) count
/// under `method="other"`, so nobody can grow the page without bound.
const MAX_METHODS: usize = 128;

/// Counts of one method's calls.
#[derive(Debug)]
struct Method {
    codes: [Counter; CODES.len()],
    latency: Histogram,
}

/// The calls seen by a server; a [`Collector`] of
/// `nqueens_grpc_requests_total{method,code}` (the codes seen) and
/// `nqueens_grpc_request_duration_seconds{method}`.
#[derive(Debug)]
pub struct GrpcMetrics {
    /// Services whose methods get their own label (`package.Service`).
    services: Vec<String>,
    /// A call takes the read lock, and the write lock only for its
    /// method's first call.
    methods: RwLock<BTreeMap<String, Method>>,
}

impl GrpcMetrics {
    /// Counts calls; methods of `services` (e.g. `nqueens.v1.WorkerService`)
    /// are labelled `service/Method`, any other path `other`.
    pub fn new(services: &[&str]) -> Arc<GrpcMetrics> {
        Arc::new(GrpcMetrics {
            services: services.iter().map(|s| s.to_string()).collect(),
            methods: RwLock::default(),
        })
    }

    /// The layer to give `tonic::transport::Server::builder().layer(..)`.
    pub fn layer(self: &Arc<Self>) -> GrpcLayer {
        GrpcLayer(Arc::clone(self))
    }

    /// The label of a request path `/package.Service/Method`.
    fn method(&self, path: &str) -> String {
        let known = path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .filter(|(service, method)| {
                self.services.iter().any(|s| s == service)
                    && (1..=64).contains(&method.len())
                    && method
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        match known {
            Some((service, method)) => format!("{service}/{method}"),
            None => "other".into(),
        }
    }

    fn record(&self, method: &str, code: usize, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        let count = |m: &Method| {
            m.codes[code.min(CODES.len() - 1)].inc();
            m.latency.observe(seconds);
        };
        if let Some(m) = self.methods.read().expect("grpc metrics lock").get(method) {
            count(m);
            return;
        }
        let mut methods = self.methods.write().expect("grpc metrics lock");
        let key = match methods.contains_key(method) || methods.len() < MAX_METHODS {
            true => method,
            false => "other",
        };
        count(methods.entry(key.to_string()).or_insert_with(|| Method {
            codes: Default::default(),
            latency: crate::histogram(CALL_SECONDS),
        }));
    }
}

impl Collector for GrpcMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let methods = self.methods.read().expect("grpc metrics lock");
        let codes = methods.iter().flat_map(|(method, m)| {
            let seen = CODES.iter().zip(&m.codes).filter(|(_, n)| n.get() > 0);
            seen.map(move |(code, n)| ([("method", method.as_str()), ("code", code)], n.clone()))
        });
        family(
            &mut encoder,
            "nqueens_grpc_requests",
            "gRPC calls answered, by method and status code.",
            codes,
        )?;
        family(
            &mut encoder,
            "nqueens_grpc_request_duration_seconds",
            "Time from a gRPC call's request to its status, by method.",
            methods
                .iter()
                .map(|(method, m)| ([("method", method.as_str())], m.latency.clone())),
        )
    }
}

/// A call in progress; counted when its status is known, or as canceled
/// when dropped before.
struct Call {
    metrics: Arc<GrpcMetrics>,
    method: String,
    started: Instant,
    code: Option<usize>,
}

impl Call {
    fn finish(mut self, code: usize) {
        self.code = Some(code);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let code = self.code.unwrap_or(CANCELED);
        self.metrics.record(&self.method, code, self.started);
    }
}

/// The status code in `grpc-status`, when there is one.
fn status(headers: &http::HeaderMap) -> Option<usize> {
    let v = headers.get("grpc-status")?.to_str().ok()?;
    Some(
        v.parse::<usize>()
            .map_or(UNKNOWN, |c| c.min(CODES.len() - 1)),
    )
}

/// See [`GrpcMetrics::layer`].
#[derive(Clone)]
pub struct GrpcLayer(Arc<GrpcMetrics>);

impl<S> tower_layer::Layer<S> for GrpcLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: Arc::clone(&self.0),
        }
    }
}

/// A service whose calls are counted.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<GrpcMetrics>,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for Counted<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: Body + 'static,
{
    type Response = http::Response<Metered<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let call = Call {
            method: self.metrics.method(req.uri().path()),
            metrics: Arc::clone(&self.metrics),
            started: Instant::now(),
            code: None,
        };
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = match answer.await {
                Ok(r) => r,
                Err(e) => {
                    call.finish(UNKNOWN);
                    return Err(e);
                }
            };
            let (parts, body) = response.into_parts();
            let call = match status(&parts.headers) {
                Some(code) => {
                    call.finish(code);
                    None
                }
                None => Some(call),
            };
            Ok(http::Response::from_parts(
                parts,
                Metered { inner: body, call },
            ))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts its call when the trailers pass.
    pub struct Metered<B> {
        #[pin]
        inner: B,
        call: Option<Call>,
    }
}

impl<B: Body> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        let code = match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                frame.trailers_ref().map(|t| status(t).unwrap_or(UNKNOWN))
            }
            Poll::Ready(Some(Err(_))) | Poll::Ready(None) => Some(UNKNOWN),
            Poll::Pending => None,
        };
        // Taken only with a status: a call dropped unfinished counts as canceled.
        if let Some(code) = code {
            if let Some(call) = this.call.take() {
                call.finish(code);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_of_other_services_and_odd_names_are_other() {
        let m = GrpcMetrics::new(&["nqueens.v1.WorkerService"]);
        assert_eq!(
            m.method("/nqueens.v1.WorkerService/Lease"),
            "nqueens.v1.WorkerService/Lease"
        );
        for path in [
            "/nqueens.v1.Other/Lease",
            "/nqueens.v1.WorkerService/",
            "/nqueens.v1.WorkerService/a\"b",
            "/x",
            "",
        ] {
            assert_eq!(m.method(path), "other", "{path}");
        }
    }

    #[test]
    fn calls_are_counted_by_code_and_methods_are_capped() {
        let m = GrpcMetrics::new(&["s"]);
        let now = Instant::now();
        m.record("s/A", 0, now);
        m.record("s/A", 14, now);
        m.record("s/A", 99, now);
        for i in 0..2 * MAX_METHODS {
            m.record(&format!("s/M{i}"), 12, now);
        }
        let text = crate::render([Box::new(Arc::clone(&m)) as Box<dyn Collector>]);
        for line in [
            "# TYPE nqueens_grpc_requests_total counter\n",
            "nqueens_grpc_requests_total{method=\"s/A\",code=\"OK\"} 1\n",
            "nqueens_grpc_requests_total{method=\"s/A\",code=\"Unavailable\"} 1\n",
            "nqueens_grpc_requests_total{method=\"s/A\",code=\"Unauthenticated\"} 1\n",
            "nqueens_grpc_request_duration_seconds_count{method=\"s/A\"} 3\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        let methods = m.methods.read().unwrap();
        assert_eq!(methods.len(), MAX_METHODS + 1);
        assert_eq!(methods["other"].codes[12].get(), MAX_METHODS as u64 + 1);
    }
}
