//! `nqueens doctor`: a self-check of this machine's setup against a
//! coordinator, one line per check, before a long run depends on it.

use crate::bench::cpu_model;
use crate::environ::read_token;
use crate::exit::Failure;
use crate::format::json_line;
use crate::format::{dec_opt, si, thousands};
use crate::opts::{Connect, Role};
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::solve::solve_on;
use nqueens_common::Size;
use nqueens_proto::client::{connect_tls, Authed};
use nqueens_proto::refusal::Refusal;
use nqueens_proto::v1;
use nqueens_proto::worker_client::WorkerClient;
use serde::Serialize;
use std::io::{self, Write};
use std::time::{Duration, Instant, SystemTime};
use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};

/// How one check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    /// Something to fix: the exit code is 1.
    Fail,
    /// Not checked, because an earlier check failed.
    Skip,
    /// Worth knowing, neither right nor wrong.
    Info,
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    /// How long it took, in milliseconds.
    pub ms: f64,
    /// The speed sample's nodes per second (one thread), else null.
    pub nodes_per_second: Option<f64>,
    /// The speed sample's nodes, else null.
    #[serde(serialize_with = "dec_opt")]
    pub nodes: Option<u128>,
}

impl Check {
    fn new(
        check: &'static str,
        outcome: Outcome,
        detail: impl Into<String>,
        took: Duration,
    ) -> Check {
        Check {
            check,
            outcome,
            detail: detail.into(),
            ms: took.as_secs_f64() * 1e3,
            nodes_per_second: None,
            nodes: None,
        }
    }

    /// A check not made, because an earlier one failed.
    fn skipped(check: &'static str, why: &str) -> Check {
        Check::new(check, Outcome::Skip, why, Duration::ZERO)
    }

    fn line(&self) -> String {
        let mark = match self.outcome {
            Outcome::Ok => "ok  ",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "skip",
            Outcome::Info => "info",
        };
        format!("{mark}  {:<11}  {}", self.check, self.detail)
    }
}

/// Board size of the speed sample: counted again and again on one thread
/// (a fraction of a second each), every count checked.
const SAMPLE_N: u32 = 15;

/// Runs every check, prints each as it ends, and fails (exit 1) if any did.
pub fn doctor(c: &Connect, role: Role, seconds: f64, core: Option<Path>) -> Result<(), Failure> {
    let mut checks = Vec::new();
    let mut out = io::stdout().lock();
    let mut say = |check: Check, out: &mut io::StdoutLock| -> io::Result<()> {
        if !c.json {
            writeln!(out, "{}", check.line())?;
            out.flush()?;
        }
        checks.push(check);
        Ok(())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for check in runtime.block_on(coordinator_checks(c, role)) {
        say(check, &mut out)?;
    }
    say(machine(core), &mut out)?;
    say(speed(core, seconds), &mut out)?;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .map(|c| c.check)
        .collect();
    if c.json {
        let v = serde_json::json!({
            "coordinator": c.coordinator,
            "passed": failed.is_empty(),
            "checks": checks,
        });
        json_line(&mut out, &v)?;
    }
    out.flush()?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "{} of {} checks failed: {} (see above)",
            failed.len(),
            checks.len(),
            failed.join(", ")
        )))
    }
}

/// Reachability and transport, health, the token's role, versions.
async fn coordinator_checks(c: &Connect, role: Role) -> Vec<Check> {
    let url = &c.coordinator;
    let (var, _) = token_names(role);
    let token = match read_token(c.token_file.as_ref(), var) {
        Ok(t) => t,
        Err(f) => {
            return vec![
                Check::new("token", Outcome::Fail, f.message(), Duration::ZERO),
                Check::skipped("coordinator", "not asked: fix the token first"),
            ]
        }
    };
    let identity = c.tls_cert.as_deref().zip(c.tls_key.as_deref());
    let channel = match connect_tls(url, token.as_deref(), c.tls_ca.as_deref(), identity) {
        Ok(ch) => ch,
        Err(e) => {
            return vec![Check::new(
                "coordinator",
                Outcome::Fail,
                format!("{url}: {e}"),
                Duration::ZERO,
            )]
        }
    };
    let health = match ask_health(url, channel.clone()).await {
        Ok(h) => h,
        Err(checks) => return checks,
    };
    let mut checks = health.checks(url);
    let start = Instant::now();
    let answer = role_call(channel.clone(), role).await;
    let took = start.elapsed();
    // An operator token refused: perhaps it is the worker's.
    let workers_protected = health
        .access
        .as_deref()
        .is_some_and(|a| a.contains("workers need a token"));
    let worker_token = role == Role::Operator
        && token.is_some()
        && workers_protected
        && answer
            .as_ref()
            .is_err_and(|s| Refusal::of(s).about_the_token())
        && role_call(channel, Role::Worker)
            .await
            .is_err_and(|s| Refusal::of(&s) == Refusal::BadRequest);
    let mut check = token_check(url, role, token.is_some(), answer, took);
    if worker_token {
        check.detail = "the token given is a worker token, refused for operator calls: check a \
                        worker's setup with --role worker, or give the operator token \
                        (--token-file or NQUEENS_OPERATOR_TOKEN)"
            .into();
    }
    checks.push(check);
    checks.push(version_check(health.version));
    checks.push(clock_check(health.clock, health.sent, health.took));
    checks
}

/// The variable a role's token may come from, and the role's name.
fn token_names(role: Role) -> (&'static str, &'static str) {
    match role {
        Role::Operator => ("NQUEENS_OPERATOR_TOKEN", "operator"),
        Role::Worker => ("NQUEENS_WORKER_TOKEN", "worker"),
    }
}

/// What the coordinator's health call answered.
struct Health {
    status: ServingStatus,
    /// When the call left.
    sent: SystemTime,
    /// Its round trip.
    took: Duration,
    /// The coordinator's release, from the answer's headers (as the next
    /// two; an older release sends none).
    version: Option<String>,
    /// The coordinator's clock, in unix milliseconds.
    clock: Option<i128>,
    /// Who may call the coordinator, described.
    access: Option<String>,
}

/// The health call: it needs no token, so it tells the network (and TLS)
/// from the credentials. When it fails, the checks it leaves: the
/// coordinator's failure and every later check skipped.
async fn ask_health(url: &str, channel: Authed) -> Result<Health, Vec<Check>> {
    let start = Instant::now();
    let sent = SystemTime::now();
    let answer = HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await;
    let took = start.elapsed();
    match answer {
        Ok(r) => {
            let header = |name| r.metadata().get(name).and_then(|v| v.to_str().ok());
            let version = header(nqueens_coordinator::server::VERSION_HEADER).map(str::to_string);
            let access = header(nqueens_coordinator::server::ACCESS_HEADER)
                .map(nqueens_coordinator::access::describe_header);
            let clock = header(nqueens_coordinator::server::TIME_HEADER)
                .and_then(|v| v.parse::<i128>().ok());
            Ok(Health {
                status: r.into_inner().status(),
                sent,
                took,
                version,
                clock,
                access,
            })
        }
        Err(s) => {
            let f = Failure::from_status(url, &s);
            let mut checks = vec![Check::new("coordinator", Outcome::Fail, f.message(), took)];
            for name in ["health", "access", "token", "version", "clock"] {
                checks.push(Check::skipped(name, "the coordinator did not answer"));
            }
            Err(checks)
        }
    }
}

impl Health {
    /// The coordinator reached (and over what), its health, who may call it.
    fn checks(&self, url: &str) -> Vec<Check> {
        let transport = if url.starts_with("https://") {
            "TLS"
        } else {
            "plain text (no TLS)"
        };
        let serving = self.status == ServingStatus::Serving;
        vec![
            Check::new(
                "coordinator",
                Outcome::Ok,
                format!(
                    "{url} answered in {:.1} ms over {transport}",
                    self.took.as_secs_f64() * 1e3
                ),
                self.took,
            ),
            Check::new(
                "health",
                if serving { Outcome::Ok } else { Outcome::Fail },
                if serving {
                    "SERVING".to_string()
                } else {
                    format!(
                        "{} (still recovering its state after a start, or shutting down)",
                        self.status.as_str_name()
                    )
                },
                Duration::ZERO,
            ),
            Check::new(
                "access",
                Outcome::Info,
                self.access
                    .clone()
                    .unwrap_or_else(|| "the coordinator does not say (an older release)".into()),
                Duration::ZERO,
            ),
        ]
    }
}

/// A call only `role` may make: the operator lists the jobs; the worker
/// sends a heartbeat naming no worker, refused as invalid after the token
/// is checked, so it records nothing.
async fn role_call(channel: Authed, role: Role) -> Result<(), tonic::Status> {
    match role {
        Role::Operator => v1::operator_service_client::OperatorServiceClient::new(channel)
            .list_jobs(v1::ListJobsRequest {})
            .await
            .map(|_| ()),
        Role::Worker => WorkerClient::new(channel, "")
            .heartbeat(Vec::new(), 0, false)
            .await
            .map(|_| ()),
    }
}

/// The token, judged by how the coordinator answered [`role_call`].
fn token_check(
    url: &str,
    role: Role,
    has_token: bool,
    answer: Result<(), tonic::Status>,
    took: Duration,
) -> Check {
    let (var, role_name) = token_names(role);
    let given = if has_token {
        format!("the {role_name} token")
    } else {
        format!("no token (none in --token-file or {var})")
    };
    let (outcome, said) = match answer {
        Err(s) if Refusal::of(&s).about_the_token() => (
            Outcome::Fail,
            format!("{given} was refused: {}", s.message()),
        ),
        Err(s) if role == Role::Operator || Refusal::of(&s) != Refusal::BadRequest => (
            Outcome::Fail,
            format!(
                "the {role_name} call failed: {}",
                Failure::from_status(url, &s).message()
            ),
        ),
        _ if !has_token => (
            Outcome::Ok,
            format!("{given}, and the coordinator needs none for {role_name} calls"),
        ),
        _ => (
            Outcome::Ok,
            format!("{given} is accepted for {role_name} calls"),
        ),
    };
    Check::new("token", outcome, said, took)
}

/// The coordinator's release (`theirs`, if it reports it) against this one.
fn version_check(theirs: Option<String>) -> Check {
    let mine = env!("CARGO_PKG_VERSION");
    let (outcome, said) = match theirs {
        Some(v) if v == mine => (
            Outcome::Ok,
            format!("the coordinator and this nqueens are both {mine} (workers show theirs in `nqueens workers`)"),
        ),
        Some(v) => (
            Outcome::Fail,
            format!(
                "the coordinator is {v} and this nqueens is {mine}: run one release on every machine \
                 of a run (the journal records which solver version counted each task)"
            ),
        ),
        None => (
            Outcome::Info,
            format!(
                "this nqueens is {mine}; the coordinator does not report its version (an older \
                 release: compare `nqueens --version` on its host)"
            ),
        ),
    };
    Check::new("version", outcome, said, Duration::ZERO)
}

/// This machine's clock against the coordinator's, read halfway through
/// the health call (`sent` is when it left, `took` its round trip).
fn clock_check(theirs: Option<i128>, sent: std::time::SystemTime, took: Duration) -> Check {
    let Some(theirs) = theirs else {
        return Check::new(
            "clock",
            Outcome::Info,
            "the coordinator does not report its clock (an older release)",
            Duration::ZERO,
        );
    };
    let ours = sent
        .checked_add(took / 2)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i128);
    let skew = theirs - ours;
    let (word, by) = if skew >= 0 {
        ("ahead of", skew)
    } else {
        ("behind", -skew)
    };
    let said = format!(
        "the coordinator's clock is {by} ms {word} this machine's (± {} ms of network)",
        took.as_millis() / 2 + 1
    );
    // Leases are timed on the coordinator's clock alone, so skew never
    // loses work; but logs, `last seen` and timestamps then disagree.
    let outcome = match by {
        0..=2_000 => Outcome::Ok,
        2_001..=30_000 => Outcome::Info,
        _ => Outcome::Fail,
    };
    let said = match outcome {
        Outcome::Fail => format!(
            "{said}: times in logs and `nqueens workers` disagree; synchronise the clocks (NTP)"
        ),
        _ => said,
    };
    Check::new("clock", outcome, said, Duration::ZERO)
}

/// The CPU and the engine path a worker here would count with, and the
/// graphics devices it could count on (`--gpus`).
fn machine(core: Option<Path>) -> Check {
    let path = cpu_path(core).unwrap_or_else(Path::fastest);
    let forced = if core.is_some() {
        "forced by --core"
    } else {
        "the fastest it has"
    };
    Check::new(
        "cpu",
        Outcome::Info,
        format!(
            "{}; counts with the {path} path ({forced}); {}; {}",
            cpu_model(),
            nqueens_gpu::describe(&nqueens_gpu::adapters()),
            nqueens_gpu::cuda::describe()
        ),
        Duration::ZERO,
    )
}

/// The CPU path `--core` forces (none for `--core gpu`, which names a card).
fn cpu_path(core: Option<Path>) -> Option<Path> {
    core.filter(|p| *p != Path::Gpu)
}

/// Counts N=15 on one thread again and again for about `seconds`, each
/// count checked against the published one.
fn speed(core: Option<Path>, seconds: f64) -> Check {
    let n = Size::new(SAMPLE_N).expect("a valid size");
    let want = nqueens_common::known::known(SAMPLE_N).map(|k| k.total);
    let start = Instant::now();
    let (mut nodes, mut counts) = (0u128, 0u32);
    while counts == 0 || start.elapsed().as_secs_f64() < seconds {
        let s = match solve_on(n, 1, cpu_path(core)) {
            Ok(s) => s,
            Err(e) => {
                return Check::new("speed", Outcome::Fail, e.to_string(), start.elapsed());
            }
        };
        let total = s.total().ok();
        if total != want {
            return Check::new(
                "speed",
                Outcome::Fail,
                format!(
                    "N={SAMPLE_N} counted {total:?} on the {} path, not {want:?}: this machine \
                     (or this build) miscounts; do not let it work",
                    s.core
                ),
                start.elapsed(),
            );
        }
        nodes += s.counts.nodes;
        counts += 1;
    }
    let took = start.elapsed();
    let rate = nodes as f64 / took.as_secs_f64();
    let mut check = Check::new(
        "speed",
        Outcome::Ok,
        format!(
            "{}nodes/s on one thread ({} nodes, {counts} counts of N={SAMPLE_N} in {:.1} s, \
             each one right)",
            si(rate),
            thousands(nodes),
            took.as_secs_f64()
        ),
        took,
    );
    check.nodes_per_second = Some(rate);
    check.nodes = Some(nodes);
    check
}
