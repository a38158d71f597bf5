//! Prometheus metrics of the real processes: a coordinator and a worker,
//! each with `--metrics`, count a small job; both pages are scraped and
//! checked against the conventions (`job_id`, `_timestamp_seconds`,
//! `_total` counters, build info), the counters against the job, and the
//! Grafana dashboard in `deploy/grafana/` against what the pages export.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nqueens_testkit::{self as kit, free_addr, nqueens, operator, watchdog};

/// One sample: its name, labels and value.
#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scraped page: the families' types and every sample.
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
    text: String,
}

impl Scrape {
    // Over 80 lines: one pass over the page, a line at a time (a type, or a
    // sample's name, escaped labels and value) into the scrape it fills.
    fn parse(text: &str) -> Scrape {
        let mut s = Scrape {
            text: text.to_string(),
            ..Scrape::default()
        };
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("# TYPE name kind");
                s.types.insert(name.into(), kind.into());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let end = line.find(['{', ' ']).expect("a sample line");
            let name = line[..end].to_string();
            let mut labels = BTreeMap::new();
            let mut rest = &line[end..];
            if let Some(mut l) = rest.strip_prefix('{') {
                // key="value" pairs, values with \\ \" \n escapes.
                while !l.starts_with('}') {
                    let (key, after) = l.split_once("=\"").expect("key=\"");
                    let mut value = String::new();
                    let mut chars = after.char_indices();
                    let close = loop {
                        match chars.next().expect("a closing quote") {
                            (_, '\\') => match chars.next().expect("an escape").1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            (i, '"') => break i,
                            (_, c) => value.push(c),
                        }
                    };
                    labels.insert(key.to_string(), value);
                    l = after[close + 1..].trim_start_matches(',');
                }
                rest = &l[1..];
            }
            let value = rest
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{e}: {line}"));
            s.samples.push(Sample {
                name,
                labels,
                value,
            });
        }
        s
    }

    /// The samples named `name` whose labels include `with`.
    fn find(&self, name: &str, with: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                with.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .collect()
    }

    /// The one sample named `name` with labels `with`.
    fn value(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        match self.find(name, with).as_slice() {
            [one] => one.value,
            other => panic!(
                "{} samples of {name} {with:?}, not one:\n{}",
                other.len(),
                self.text
            ),
        }
    }

    /// Every name a query may use: families and sample names.
    fn names(&self) -> BTreeSet<String> {
        self.types
            .keys()
            .cloned()
            .chain(self.samples.iter().map(|s| s.name.clone()))
            .collect()
    }

    /// The label names seen on a name's samples (a histogram family's
    /// include its buckets').
    fn labels_of(&self, name: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|x| s.name.strip_suffix(x) == Some(name))
            })
            .flat_map(|s| s.labels.keys().cloned())
            .collect()
    }
}

/// `GET /metrics` at `addr`: the status line and the body.
fn get(addr: &str) -> std::io::Result<(String, String)> {
    kit::get_metrics(addr)
}

fn scrape(addr: &str) -> Scrape {
    let (status, body) = get(addr).unwrap_or_else(|e| panic!("scrape {addr}: {e}"));
    assert!(status.contains(" 200 "), "{status}: {body}");
    Scrape::parse(&body)
}

/// Scrapes `addr` until `ready` holds for the page (bounded).
fn scrape_until(addr: &str, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let start = Instant::now();
    loop {
        if let Ok((status, body)) = get(addr) {
            if status.contains(" 200 ") {
                let s = Scrape::parse(&body);
                if ready(&s) {
                    return s;
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{addr} never got ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a small run leaves on both pages.
struct Run {
    coordinator: Scrape,
    worker: Scrape,
    job: String,
    tasks: f64,
    /// The ids the workers call with (never on the coordinator's page).
    worker_ids: Vec<String>,
}

/// A coordinator and a worker, both with `--metrics`, count N=11 (and an
/// operator asks for a job that does not exist); both pages once the
/// worker has heard every answer.
fn run(dir: &Path) -> Run {
    let (c_metrics, w_metrics) = (free_addr(), free_addr());
    let c = kit::start_with(&dir.join("data"), &["--metrics", &c_metrics]);
    let _w = kit::Worker(
        nqueens(&[
            "worker",
            "--coordinator",
            &c.url,
            "--name",
            "metrics-worker",
        ])
        .args(["--threads", "1", "--metrics", &w_metrics])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a worker"),
    );
    let (code, submitted, err) = operator(&c.url, &["submit", "11", "--tasks", "20"]);
    assert_eq!(code, 0, "{err}");
    let job = submitted[0]["job"].as_str().unwrap().to_string();
    let (code, _, err) = operator(&c.url, &["watch", &job, "--interval", "0.1"]);
    assert_eq!(code, 0, "{err}");
    let (code, status, _) = operator(&c.url, &["status", &job]);
    assert_eq!(code, 0);
    let tasks: f64 = status[0]["tasks"].as_str().unwrap().parse().unwrap();
    let (code, _, _) = operator(&c.url, &["status", "999"]);
    assert_eq!(code, 4, "no job 999");
    let worker = scrape_until(&w_metrics, |s| {
        s.find(
            "nqueens_worker_process_results_total",
            &[("outcome", "accepted")],
        )
        .first()
        .is_some_and(|a| a.value >= tasks)
    });
    let coordinator = scrape(&c_metrics);
    let (code, workers, err) = operator(&c.url, &["workers"]);
    assert_eq!(code, 0, "{err}");
    let worker_ids = workers
        .iter()
        .map(|w| w["worker"].as_str().unwrap().to_string())
        .collect();
    Run {
        coordinator,
        worker,
        job,
        tasks,
        worker_ids,
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What every page must follow: counters end in `_total`, no label is
/// named `job` or `instance` (Prometheus's own), no `_last_seen_seconds`,
/// build info with this version and the process's role.
fn conventions(s: &Scrape, role: &str) {
    for (name, kind) in &s.types {
        assert!(name.starts_with("nqueens_"), "{name}");
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "{name} is a {kind}"
        );
        assert!(!name.ends_with("_last_seen_seconds"), "{name}");
    }
    for sample in &s.samples {
        for reserved in ["job", "instance"] {
            assert!(!sample.labels.contains_key(reserved), "{sample:?}");
        }
        assert!(
            s.types.contains_key(&sample.name)
                || s.types.keys().any(|f| {
                    ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|x| sample.name.strip_suffix(x) == Some(f))
                }),
            "{} has no # TYPE",
            sample.name
        );
    }
    let info = s.value(
        "nqueens_build_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("role", role)],
    );
    assert_eq!(info, 1.0);
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn every_process_serves_prometheus_metrics_by_the_conventions() {
    let _watchdog = watchdog("every_process_serves_prometheus_metrics");
    let dir = tempfile::tempdir().unwrap();
    let Run {
        coordinator: c,
        worker: w,
        job,
        tasks,
        worker_ids,
    } = run(dir.path());
    conventions(&c, "coordinator");
    // The page has no authentication: it names workers, and never shows
    // the id a worker calls with.
    assert!(!worker_ids.is_empty());
    for id in &worker_ids {
        assert!(!c.text.contains(id.as_str()), "{id} on the page");
    }
    conventions(&w, "worker");
    let job = [("job_id", job.as_str())];

    // Coordinator: per-job series under job_id, the job's counts.
    assert_eq!(
        c.value("nqueens_tasks", &[job[0], ("state", "done")]),
        tasks
    );
    assert_eq!(c.value("nqueens_job_work_done_ratio", &job), 1.0);
    assert_eq!(c.value("nqueens_job_solutions_total", &job), 2_680.0);
    let info = c.find("nqueens_job_info", &job);
    assert_eq!(info.len(), 1);
    assert_eq!(
        (
            info[0].labels["n"].as_str(),
            info[0].labels["state"].as_str()
        ),
        ("11", "done")
    );
    let nodes = c.value("nqueens_nodes_total", &job);
    assert!(nodes > 0.0);
    assert_eq!(
        c.value("nqueens_results_total", &[("outcome", "accepted")]),
        tasks
    );
    // Worker times are Unix times.
    let seen = c.value(
        "nqueens_worker_last_seen_timestamp_seconds",
        &[("name", "metrics-worker")],
    );
    assert!((seen - now()).abs() < 600.0, "last seen {seen}");
    assert_eq!(
        c.value(
            "nqueens_worker_tasks_done_total",
            &[("name", "metrics-worker")]
        ),
        tasks
    );
    // Every result was fsynced: the histogram saw them, its buckets grow
    // to +Inf = count.
    let fsyncs = c.value("nqueens_journal_fsync_duration_seconds_count", &[]);
    assert!(fsyncs > 0.0, "{}", c.text);
    let buckets = c.find("nqueens_journal_fsync_duration_seconds_bucket", &[]);
    assert!(buckets.windows(2).all(|b| b[0].value <= b[1].value));
    let inf = buckets.last().unwrap();
    assert_eq!((inf.labels["le"].as_str(), inf.value), ("+Inf", fsyncs));
    assert!(c.value("nqueens_journal_fsync_duration_seconds_sum", &[]) > 0.0);
    // Records per fsync: every journaled record (the job, its plan, each
    // result, the boot) in some group.
    assert!(c.value("nqueens_journal_group_records_sum", &[]) >= tasks);
    // gRPC calls by method and code: the worker reports its results in
    // ReportMany calls (several to a call when they finish together), the
    // missing job's NotFound, refused calls apart from OK ones.
    let report = [
        ("method", "nqueens.v1.WorkerService/ReportMany"),
        ("code", "OK"),
    ];
    let calls = c.value("nqueens_grpc_requests_total", &report);
    assert!(
        calls >= 1.0 && calls <= tasks,
        "{calls} calls for {tasks} results"
    );
    assert!(c
        .find(
            "nqueens_grpc_requests_total",
            &[("method", "nqueens.v1.WorkerService/Report")]
        )
        .is_empty());
    let missing = [
        ("method", "nqueens.v1.OperatorService/GetJob"),
        ("code", "NotFound"),
    ];
    assert_eq!(c.value("nqueens_grpc_requests_total", &missing), 1.0);
    assert_eq!(
        c.value(
            "nqueens_grpc_request_duration_seconds_count",
            &[("method", "nqueens.v1.WorkerService/ReportMany")]
        ),
        calls
    );

    // Worker: its counters agree with the coordinator's.
    let me = w.find("nqueens_worker_process_info", &[("name", "metrics-worker")]);
    assert_eq!(me.len(), 1, "{}", w.text);
    assert!(
        ["scalar", "avx2", "avx512"].contains(&me[0].labels["path"].as_str()),
        "{:?}",
        me[0]
    );
    assert_eq!(me[0].labels["threads"], "1");
    assert_eq!(
        w.value("nqueens_worker_process_tasks_counted_total", &[]),
        tasks
    );
    assert_eq!(
        w.value(
            "nqueens_worker_process_results_total",
            &[("outcome", "accepted")]
        ),
        tasks
    );
    assert!(w.value("nqueens_worker_process_subproblems_total", &[]) > 0.0);
    assert_eq!(w.value("nqueens_worker_process_nodes_total", &[]), nodes);
    assert!(w.value("nqueens_worker_process_counting_seconds_total", &[]) > 0.0);
    assert_eq!(w.find("nqueens_worker_process_errors_total", &[]).len(), 5);
    w.value("nqueens_worker_process_leases", &[]);
    let last = w.value("nqueens_worker_process_last_result_timestamp_seconds", &[]);
    assert!((last - now()).abs() < 600.0, "last result {last}");
}

#[test]
fn a_worker_refuses_metrics_beyond_loopback_without_metrics_public() {
    let _watchdog = watchdog("a_worker_refuses_metrics_beyond_loopback");
    let out = nqueens(&["worker", "--metrics", "0.0.0.0:0"])
        .args(["--coordinator", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--metrics-public"), "{err}");
    // A busy port is a configuration error too.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = busy.local_addr().unwrap().to_string();
    let out = nqueens(&["worker", "--metrics", &at])
        .args(["--coordinator", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&at), "{err}");
}

/// Every PromQL expression of the dashboard (and its variables' queries),
/// with the legend of its target.
fn queries(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(o) => {
            if let Some(e) = o.get("expr").and_then(|e| e.as_str()) {
                let legend = o.get("legendFormat").and_then(|l| l.as_str()).unwrap_or("");
                out.push((e.to_string(), legend.to_string()));
            }
            if let Some(d) = o.get("definition").and_then(|d| d.as_str()) {
                out.push((d.to_string(), String::new()));
            }
            o.values().for_each(|v| queries(v, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The identifiers inside the parentheses after each `word(`.
fn clause_labels(expr: &str, word: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find(word) {
        rest = rest[i + word.len()..].trim_start();
        if let Some(inner) = rest.strip_prefix('(') {
            let close = inner.find(')').expect("a closing parenthesis");
            found.extend(
                inner[..close]
                    .split(',')
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty()),
            );
        }
    }
    found
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn the_grafana_dashboard_uses_only_metrics_and_labels_that_exist() {
    let _watchdog = watchdog("the_grafana_dashboard_uses_only_metrics_that_exist");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/nqueens.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "nqueens");
    let panels = dashboard["panels"].as_array().unwrap();
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().map_or(0, Vec::len);
        assert!(targets > 0, "panel {} has no query", p["title"]);
        assert!(p["gridPos"]["w"].as_u64().unwrap() <= 24);
    }
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);

    let dir = tempfile::tempdir().unwrap();
    let run = run(dir.path());
    let names: BTreeSet<String> = run
        .coordinator
        .names()
        .union(&run.worker.names())
        .cloned()
        .collect();
    let labels_of = |name: &str| -> BTreeSet<String> {
        run.coordinator
            .labels_of(name)
            .union(&run.worker.labels_of(name))
            .cloned()
            .collect()
    };
    let mut used = BTreeSet::new();
    for (expr, legend) in &exprs {
        // Labels an expression may use: Prometheus's own, and those of the
        // metrics it reads.
        let mut allowed: BTreeSet<String> = ["job", "instance"].map(String::from).into();
        let mut rest = expr.as_str();
        while let Some(i) = rest.find("nqueens_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            assert!(names.contains(name), "{name} (in {expr}) is not exported");
            used.insert(name.to_string());
            let own = labels_of(name);
            if let Some(selector) = tail[end..].strip_prefix('{') {
                for matcher in selector[..selector.find('}').unwrap()].split(',') {
                    let key = matcher.split(['=', '!']).next().unwrap().trim();
                    assert!(own.contains(key), "{name} has no label {key} (in {expr})");
                }
            }
            allowed.extend(own);
            rest = &tail[end..];
        }
        for word in ["by", "on", "group_left", "without", "ignoring"] {
            for l in clause_labels(expr, word) {
                assert!(
                    allowed.contains(&l),
                    "label {l} of {word}(..) is not on the metrics of {expr}"
                );
            }
        }
        // An aggregation keeps only its `by` labels.
        let by = clause_labels(expr, "by");
        for l in legend.split("{{").skip(1) {
            let l = l.split("}}").next().unwrap().trim();
            let kept = allowed.contains(l) && (by.is_empty() || by.iter().any(|b| b == l));
            assert!(kept, "legend {{{{{l}}}}} is not a label of {expr}");
        }
    }
    // It shows both processes, the journal and gRPC.
    for must in [
        "nqueens_job_work_done_ratio",
        "nqueens_job_eta_seconds",
        "nqueens_worker_leases",
        "nqueens_journal_fsync_duration_seconds_bucket",
        "nqueens_grpc_requests_total",
        "nqueens_worker_process_subproblems_total",
        "nqueens_worker_process_info",
    ] {
        assert!(used.contains(must), "the dashboard does not show {must}");
    }
}
