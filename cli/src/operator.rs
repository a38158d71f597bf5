//! The operator's commands: submit, status, jobs, workers, pause, resume,
//! cancel, watch, audit and health, through [`crate::client`].

use crate::client::Operator;
use crate::exit::Failure;
use crate::format::json_line;
use crate::format::{counted, text_width, wrap};
use crate::human::{AuditView, JobInfo, WorkerRow};
use crate::opts::{Check, Connect, PlanShape, Progress};
use crate::progress::{follow, Show};
use nqueens_common::plan::Strategy;
use nqueens_common::Size;
use nqueens_proto::client::connect_tls;
use std::io::{self, Write};
use std::path::Path;

pub use crate::client::Control;

/// Runs one operator command on a small runtime.
pub(crate) fn on_runtime<T>(
    f: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn print_job(job: &JobInfo, json: bool) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    if json {
        json_line(&mut out, job)?;
    } else {
        // Continuation lines under the values column.
        write!(out, "{}", wrap(&job.text(), text_width(), 10))?;
    }
    Ok(out.flush()?)
}

pub fn submit(
    n: Size,
    strategy: Strategy,
    shape: &PlanShape,
    check: Check,
    watch: bool,
    progress: Progress,
    c: &Connect,
) -> Result<(), Failure> {
    // Check the options here, so a bad one is caught before any call.
    let plan = shape.plan(n, strategy)?;
    if check.verify_fraction < 1.0 && check.redundancy < 2 {
        return Err(Failure::BadInput(
            "--verify-fraction chooses which tasks a second worker checks: give --redundancy 2 or 3 with it".into(),
        ));
    }
    if check.cross_device && check.redundancy < 2 {
        return Err(Failure::BadInput(
            "--cross-device has each checked task counted on a GPU and on a CPU: give \
             --redundancy 2 or 3 with it"
                .into(),
        ));
    }
    if check.cross_device && plan.spec.mode == nqueens_common::plan::Mode::Join {
        return Err(Failure::BadInput(
            "--cross-device has each checked task counted on a GPU and on a CPU, and the join \
             counts on CPUs only: add --mode backtrack"
                .into(),
        ));
    }
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let job = op.submit(&plan, check).await?;
        if c.json {
            json_line(&mut io::stdout().lock(), &job)?;
        } else {
            let check = match job.redundancy {
                1 => String::new(),
                r if job.verify_fraction < 1.0 => format!(
                    ", {:.0}% of the tasks checked by {r} workers",
                    job.verify_fraction * 100.0
                ),
                r => format!(", every task checked by {r} workers"),
            };
            let check = if job.cross_device {
                format!("{check}, on a GPU and on a CPU")
            } else {
                check
            };
            let mut out = io::stdout();
            writeln!(out, "submitted job {}: {}{check}", job.job, job.plan())?;
            if !watch {
                writeln!(out, "follow it with: nqueens watch {}", job.job)?;
            }
        }
        if watch {
            let done = follow(&mut op, job.job, progress, Show::pick(c.json)).await?;
            return finished(&done);
        }
        Ok(())
    })
}

/// A finished job whose counts differ from the published ones is a
/// failure (exit 1), whatever else the view shows.
fn wrong_counts(jobs: &[JobInfo]) -> Result<(), Failure> {
    let wrong: Vec<String> = jobs
        .iter()
        .filter(|j| j.matches_known == Some(false))
        .map(|j| j.job.to_string())
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Failure::Failed(format!(
        "job {} finished with counts that DIFFER from the published ones: a worker miscounted or lied. \
         Run `nqueens audit JOB` and `nqueens workers`, and count it again with --redundancy 2",
        wrong.join(", ")
    )))
}

pub fn status(job: Option<u64>, c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        if let Some(id) = job {
            let job = op.job(id).await?;
            print_job(&job, c.json)?;
            return wrong_counts(std::slice::from_ref(&job));
        }
        let (jobs, workers) = (op.jobs().await?, op.workers().await?);
        let mut out = io::stdout().lock();
        if c.json {
            let all = serde_json::json!({"coordinator": op.url, "jobs": jobs, "workers": workers});
            json_line(&mut out, &all)?;
        } else {
            let running = jobs.iter().filter(|j| !j.ended()).count();
            let busy = workers.iter().filter(|w| w.leases > 0).count();
            writeln!(out, "coordinator {}", op.url)?;
            writeln!(
                out,
                "{} ({running} not ended), {} ({busy} holding tasks)",
                counted(jobs.len(), "job"),
                counted(workers.len(), "worker")
            )?;
            if !jobs.is_empty() {
                writeln!(out, "\n{}", JobInfo::table_header())?;
                for j in &jobs {
                    writeln!(out, "{}", j.table_row())?;
                }
            }
        }
        out.flush()?;
        wrong_counts(&jobs)
    })
}

pub fn jobs(c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let jobs = op.jobs().await?;
        let mut out = io::stdout().lock();
        if c.json {
            for j in &jobs {
                json_line(&mut out, j)?;
            }
        } else {
            writeln!(out, "{}", JobInfo::table_header())?;
            for j in &jobs {
                writeln!(out, "{}", j.table_row())?;
            }
        }
        Ok(out.flush()?)
    })
}

pub fn workers(c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let workers = op.workers().await?;
        let mut out = io::stdout().lock();
        if c.json {
            for w in &workers {
                json_line(&mut out, w)?;
            }
        } else {
            writeln!(out, "{}", WorkerRow::table_header())?;
            let mut names = std::collections::HashMap::new();
            for w in &workers {
                *names.entry(w.name.as_str()).or_insert(0) += 1;
            }
            for w in &workers {
                writeln!(out, "{}", w.table_row(names[w.name.as_str()] > 1))?;
            }
        }
        Ok(out.flush()?)
    })
}

pub fn delete(job: u64, yes: bool, c: &Connect) -> Result<(), Failure> {
    if !yes {
        return Err(Failure::BadInput(format!(
            "deleting job {job} removes it and its results from the coordinator for good (save them \
             first with `nqueens export {job}`); add --yes to delete it"
        )));
    }
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let results = op.delete(job).await?;
        let mut out = io::stdout().lock();
        if c.json {
            json_line(
                &mut out,
                &serde_json::json!({"job": job.to_string(), "deleted": true, "results": results.to_string()}),
            )?;
        } else {
            writeln!(out, "deleted job {job} and its {results} counted results")?;
        }
        Ok(out.flush()?)
    })
}

pub fn control(job: u64, action: Control, c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        print_job(&op.control(job, action).await?, c.json)
    })
}

pub fn watch(job: u64, progress: Progress, c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        finished(&follow(&mut op, job, progress, Show::pick(c.json)).await?)
    })
}

/// The exit status of a job that ended: a cancelled job or a count that
/// differs from the published one is a failure.
fn finished(job: &JobInfo) -> Result<(), Failure> {
    if job.state == "cancelled" {
        return Err(Failure::Failed(format!(
            "job {} was cancelled with {} of {} tasks done",
            job.job, job.done, job.tasks
        )));
    }
    if job.strategy == "synthetic" {
        return match job.matches_known {
            Some(false) => Err(Failure::Failed(format!(
                "job {}: the synthetic sum {} is not the sum of its tasks' answers",
                job.job, job.total
            ))),
            _ => Ok(()),
        };
    }
    crate::local::check_known(job.n, job.total, job.unique)
}

/// Audits a job through the coordinator, or from a data directory's
/// journal directly.
pub fn audit(job: u64, data_dir: Option<&Path>, c: &Connect) -> Result<(), Failure> {
    let report = match data_dir {
        Some(dir) => {
            use nqueens_coordinator::audit::{audit, AuditError};
            let path = dir.join("journal");
            if !path.is_file() {
                return Err(Failure::BadInput(format!(
                    "no journal at {}: give a coordinator's --data-dir",
                    path.display()
                )));
            }
            match audit(&path, job) {
                Ok(a) => nqueens_proto::v1::AuditReport::from(&a),
                Err(AuditError::UnknownJob(_)) => {
                    return Err(Failure::UnknownJob(format!(
                        "job {job} is not in {}",
                        path.display()
                    )))
                }
                // As a coordinator answers it: no such job (exit 4).
                Err(e @ AuditError::Deleted(_)) => return Err(Failure::UnknownJob(e.to_string())),
                Err(e) => {
                    return Err(Failure::Failed(format!(
                        "the audit of job {job} cannot vouch for it: {e}"
                    )))
                }
            }
        }
        None => on_runtime(async { Operator::new(c)?.audit(job).await })?,
    };
    let view = AuditView::new(&report);
    let mut out = io::stdout().lock();
    if c.json {
        json_line(&mut out, &view)?;
    } else {
        write!(out, "{}", view.text())?;
    }
    out.flush()?;
    if view.passed {
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "the audit of job {job} found problems (listed above)"
        )))
    }
}

/// Checks the coordinator's gRPC health service (no token needed).
pub fn health(c: &Connect) -> Result<(), Failure> {
    use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};
    on_runtime(async {
        let identity = c.tls_cert.as_deref().zip(c.tls_key.as_deref());
        let asked = async {
            let channel = connect_tls(&c.coordinator, None, c.tls_ca.as_deref(), identity)
                .map_err(|e| Failure::BadInput(e.to_string()))?;
            HealthClient::new(channel)
                .check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .map_err(|s| Failure::from_status(&c.coordinator, &s))
        };
        let r = match asked.await {
            Ok(r) => r,
            // A script asked for JSON: it gets an object, whatever happened.
            Err(f) if c.json => {
                let v = serde_json::json!({
                    "coordinator": c.coordinator,
                    "serving": false,
                    "status": null,
                    "error": f.message(),
                });
                json_line(&mut io::stdout().lock(), &v)?;
                return Err(f);
            }
            Err(f) => return Err(f),
        };
        let status = r.into_inner().status();
        let serving = status == ServingStatus::Serving;
        if c.json {
            let v = serde_json::json!({
                "coordinator": c.coordinator,
                "serving": serving,
                "status": status.as_str_name().to_lowercase(),
                "error": null,
            });
            json_line(&mut io::stdout().lock(), &v)?;
        } else {
            let name = status.as_str_name().to_lowercase();
            writeln!(io::stdout(), "{}: {name}", c.coordinator)?;
        }
        if serving {
            Ok(())
        } else {
            Err(Failure::Failed(format!(
                "the coordinator at {} is not serving",
                c.coordinator
            )))
        }
    })
}
