//! Prometheus metrics for every nqueens process, in one place so that the
//! coordinator and the worker expose them the same way. The metric types
//! (`Counter`, `Gauge`, `Histogram`) and the text encoder are
//! [`prometheus_client`]'s; this crate adds:
//!
//! - [`render`]: a page of collectors in the Prometheus text format
//!   (version 0.0.4), and [`family`] and [`single`], which write a family
//!   of values read from a snapshot at scrape time.
//! - [`BuildInfo`]: `nqueens_build_info`, on both pages.
//! - Bucket bounds shared by the processes' histograms, and [`histogram`]
//!   to make one.
//! - [`http`]: `GET /metrics` over HTTP/1, rendered on each scrape.
//! - [`grpc`]: a tower layer counting a tonic server's requests by method
//!   and status code, with their latency.
//!
//! Conventions followed (<https://prometheus.io/docs/practices/naming/>):
//! base units (seconds), `_total` on counters, `_timestamp_seconds` for Unix
//! times, `_info` metrics with the value 1 carrying labels, and no label
//! named `job` or `instance` (Prometheus sets those itself). A counter is
//! named in the code without its `_total`: the encoder appends it, to the
//! `# HELP` and `# TYPE` lines as well as to the samples.

pub mod grpc;
pub mod http;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::Registry;
use std::fmt;

/// The page of one scrape: the families of `collectors`, in order, in the
/// Prometheus text format (served as [`http::CONTENT_TYPE`]).
pub fn render(collectors: impl IntoIterator<Item = Box<dyn Collector>>) -> String {
    let mut registry = Registry::default();
    for c in collectors {
        registry.register_collector(c);
    }
    let mut page = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut page, &registry)
        .expect("a page is written to a String, and collectors fail only when their writer does");
    page
}

/// Writes a family: its `# HELP` and `# TYPE` lines (even with no
/// samples), then one sample per label set. A counter's `name` leaves out
/// `_total` (see the crate's documentation).
pub fn family<L, M>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result
where
    L: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    let mut family = encoder.encode_descriptor(name, help, None, M::TYPE)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a family of one unlabelled sample.
pub fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> fmt::Result {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// `nqueens_build_info{version,role,arch} 1`: which build each process
/// runs, to join on (`* on(instance) group_left(version)`) or to count.
/// The role is `coordinator` or `worker`.
#[derive(Debug)]
pub struct BuildInfo(pub &'static str);

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let labels = [
            ("version", env!("CARGO_PKG_VERSION")),
            ("role", self.0),
            ("arch", std::env::consts::ARCH),
        ];
        family(
            &mut encoder,
            "nqueens_build_info",
            "The build of this process (always 1): version, role (coordinator or worker), CPU architecture.",
            [(labels, ConstGauge::new(1i64))],
        )
    }
}

/// Latency buckets from 0.1 ms to 1 s (an fsync: ~0.1 ms on NVMe with a
/// power-loss-protected cache, ~10 ms on a disk, a second when storage
/// stalls).
pub const FSYNC_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Latency buckets from 0.5 ms to 10 s (a gRPC call, most of which wait
/// for at most one fsync).
pub const CALL_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Powers of two up to 1,024 (sizes of groups, batches).
pub const SIZES: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A histogram with `bounds` (and `+Inf`).
pub fn histogram(bounds: &[f64]) -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(bounds.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::histogram::Histogram;

    #[derive(Debug)]
    struct Example(Histogram);

    impl Collector for Example {
        fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
            let worker = [("worker", "a\"b\\c\nd")];
            family(
                &mut encoder,
                "x",
                "Xs.",
                [(worker, ConstCounter::new(3u64))],
            )?;
            let method = [("method", "m")];
            family(
                &mut encoder,
                "lat_seconds",
                "Latency.",
                [(method, self.0.clone())],
            )?;
            single(&mut encoder, "g", "G.", &ConstGauge::new(f64::INFINITY))
        }
    }

    #[test]
    fn a_page_escapes_labels_and_writes_histograms_cumulatively() {
        let h = histogram(&[0.001, 0.01]);
        for v in [0.0005, 0.005, 0.005, 2.0] {
            h.observe(v);
        }
        let text = render([Box::new(Example(h)) as Box<dyn Collector>]);
        let want = "# HELP x_total Xs.\n# TYPE x_total counter\n\
            x_total{worker=\"a\\\"b\\\\c\\nd\"} 3\n\
            # HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
            lat_seconds_bucket{method=\"m\",le=\"0.001\"} 1\n\
            lat_seconds_bucket{method=\"m\",le=\"0.01\"} 3\n\
            lat_seconds_bucket{method=\"m\",le=\"+Inf\"} 4\n\
            lat_seconds_sum{method=\"m\"} 2.0105\n\
            lat_seconds_count{method=\"m\"} 4\n\
            # HELP g G.\n# TYPE g gauge\ng +Inf\n";
        assert_eq!(text, want);
    }

    #[test]
    fn build_info_names_version_and_role() {
        let text = render([Box::new(BuildInfo("worker")) as Box<dyn Collector>]);
        assert!(
            text.contains(&format!(
                "nqueens_build_info{{version=\"{}\",role=\"worker\",arch=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::ARCH
            )),
            "{text}"
        );
    }
}
