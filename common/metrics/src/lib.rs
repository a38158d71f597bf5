//! Prometheus metrics for every nqueens process, in one place so that the
//! coordinator and the worker expose them the same way:
//!
//! - [`Page`]: a page in the text exposition format (`# HELP`, `# TYPE`,
//!   samples with escaped labels, histograms, `nqueens_build_info`).
//! - [`Histogram`]: fixed buckets, lock-free, usable from a `static`.
//! - [`http`]: `GET /metrics` over HTTP/1, rendered on each scrape.
//! - [`grpc`]: a tower layer counting a tonic server's requests by method
//!   and status code, with their latency.
//!
//! Conventions followed (<https://prometheus.io/docs/practices/naming/>):
//! base units (seconds), `_total` on counters, `_timestamp_seconds` for Unix
//! times, `_info` metrics with the value 1 carrying labels, and no label
//! named `job` or `instance` (Prometheus sets those itself).

pub mod grpc;
pub mod http;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a metric family is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Escapes a label value (backslash, quote, newline).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A number as the text format writes it (`+Inf`, `-Inf`, `NaN`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// A metrics page being written: families in order, each a `# HELP` and
/// `# TYPE` line followed by its samples.
#[derive(Debug, Default)]
pub struct Page {
    out: String,
}

impl Page {
    pub fn new() -> Page {
        Page::default()
    }

    /// Starts a family; its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Page {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.name()
        );
        self
    }

    /// One sample of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Page {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", number(value));
        self
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Page {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// The samples of one histogram (`_bucket` with `le`, `_sum`,
    /// `_count`) in the current family.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) -> &mut Page {
        let (buckets, count, sum) = h.snapshot();
        for (le, n) in buckets
            .iter()
            .map(|&(b, n)| (number(b), n))
            .chain([("+Inf".to_string(), count)])
        {
            self.out.push_str(name);
            self.out.push_str("_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {n}");
        }
        for (suffix, v) in [("_sum", number(sum)), ("_count", count.to_string())] {
            self.out.push_str(name);
            self.out.push_str(suffix);
            self.labels(labels, None);
            let _ = writeln!(self.out, " {v}");
        }
        self
    }

    /// `nqueens_build_info{version,role,arch} 1`: which build each process
    /// runs, to join on (`* on(instance) group_left(version)`) or to count.
    pub fn build_info(&mut self, role: &str) -> &mut Page {
        self.family(
            "nqueens_build_info",
            Kind::Gauge,
            "The build of this process (always 1): version, role (coordinator or worker), CPU architecture.",
        )
        .sample(
            "nqueens_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("role", role),
                ("arch", std::env::consts::ARCH),
            ],
            1.0,
        )
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let all = labels.iter().map(|&(k, v)| (k, escape(v)));
        let all = all.chain(le.map(|le| ("le", le.to_string())));
        for (i, (k, v)) in all.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{k}=\"{v}\"");
        }
        self.out.push('}');
    }

    /// The page's text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The most buckets a [`Histogram`] has (besides `+Inf`).
pub const MAX_BUCKETS: usize = 16;

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

/// A histogram with fixed upper bounds, updated with atomics only, so a
/// hot thread (the journal's writer) never waits for a scrape. A `const`
/// constructor lets it live in a `static`.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last is above every bound.
    counts: [AtomicU64; MAX_BUCKETS + 1],
    /// The sum of the observations, as f64 bits.
    sum: AtomicU64,
}

impl Histogram {
    /// `bounds` ascending, at most [`MAX_BUCKETS`] of them.
    pub const fn new(bounds: &'static [f64]) -> Histogram {
        assert!(bounds.len() <= MAX_BUCKETS, "too many buckets");
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; MAX_BUCKETS + 1],
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// An observation of `d` in seconds.
    pub fn observe_duration(&self, d: std::time::Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Cumulative counts per bound, the count of all, and the sum.
    pub fn snapshot(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let mut seen = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(&b, c)| {
                seen += c.load(Ordering::Relaxed);
                (b, seen)
            })
            .collect();
        let count = seen + self.counts[self.bounds.len()].load(Ordering::Relaxed);
        (
            buckets,
            count,
            f64::from_bits(self.sum.load(Ordering::Relaxed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_escapes_labels_and_writes_histograms_cumulatively() {
        static H: Histogram = Histogram::new(&[0.001, 0.01]);
        for v in [0.0005, 0.005, 0.005, 2.0] {
            H.observe(v);
        }
        let mut page = Page::new();
        page.family("x_total", Kind::Counter, "Xs.")
            .sample("x_total", &[("worker", "a\"b\\c\nd")], 3.0)
            .family("lat_seconds", Kind::Histogram, "Latency.")
            .histogram("lat_seconds", &[("method", "m")], &H)
            .single("g", Kind::Gauge, "G.", f64::INFINITY);
        let text = page.finish();
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
        let mut page = Page::new();
        page.build_info("worker");
        let text = page.finish();
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
