//! `nqueens export`: every counted task of a job, streamed from the
//! coordinator as CSV or JSON lines, so that a third party can re-add the
//! counts (and re-audit a record) without the coordinator. At the end the
//! rows are re-added here too, and the sum is compared with the job's.

use crate::client::Operator;
use crate::exit::Failure;
use crate::format::thousands;
use crate::operator::on_runtime;
use crate::opts::Connect;
use nqueens_common::plan::{Plan, PlanSpec, Tally};
use nqueens_proto::u128_from_wire;
use nqueens_proto::v1;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How rows are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A header line, then one comma-separated line per task.
    Csv,
    /// One JSON object per task; every integer is a decimal string.
    Jsonl,
}

/// The columns, in order (CSV header, JSON keys). `total` is the task's
/// share of the job's total: the column sums to it. `take` is `all` when
/// a task takes every subproblem of its range.
pub const COLUMNS: [&str; 20] = [
    "task",
    "lo",
    "hi",
    "skip",
    "take",
    "subproblems",
    "total",
    "c1",
    "c2",
    "c4",
    "c8",
    "weighted",
    "half",
    "quarter",
    "nodes",
    "checksum",
    "worker",
    "unix_ms",
    "elapsed_ms",
    "solver_version",
];

/// A row's values as text, in [`COLUMNS`] order, with its share of the
/// total.
fn values(row: &v1::ExportRow, total: u128) -> [String; 20] {
    let t = row.task.unwrap_or_default();
    let r = row.result.clone().unwrap_or_default();
    let big = |x: Option<&v1::U128>| u128_from_wire(x).to_string();
    [
        t.index.to_string(),
        t.lo.to_string(),
        t.hi.to_string(),
        t.skip.to_string(),
        match t.take {
            u64::MAX => "all".to_string(),
            take => take.to_string(),
        },
        t.subproblems.to_string(),
        total.to_string(),
        big(r.c1.as_ref()),
        big(r.c2.as_ref()),
        big(r.c4.as_ref()),
        big(r.c8.as_ref()),
        big(r.weighted.as_ref()),
        big(r.half.as_ref()),
        big(r.quarter.as_ref()),
        big(r.nodes.as_ref()),
        r.checksum.to_string(),
        row.worker_id.clone(),
        row.unix_ms.to_string(),
        r.elapsed_ms.to_string(),
        r.solver_version.clone(),
    ]
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_row(out: &mut dyn Write, format: Format, values: [String; 20]) -> io::Result<()> {
    match format {
        Format::Csv => {
            let fields: Vec<String> = values.iter().map(|s| csv_field(s)).collect();
            writeln!(out, "{}", fields.join(","))
        }
        Format::Jsonl => {
            let map: serde_json::Map<String, serde_json::Value> = COLUMNS
                .iter()
                .zip(values)
                .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
                .collect();
            writeln!(out, "{}", serde_json::Value::Object(map))
        }
    }
}

/// The rows streamed so far: their count, their sum, and the plan (from
/// the first row, which carries it).
#[derive(Default)]
struct Rows {
    n: u64,
    sum: Tally,
    total: u128,
    plan: Option<Plan>,
}

impl Rows {
    /// Takes one row in; its share of the total.
    fn add(&mut self, row: &v1::ExportRow) -> Result<u128, Failure> {
        if let Some(p) = row.task.as_ref().and_then(|t| t.plan.as_ref()) {
            let spec = PlanSpec::try_from(p)
                .map_err(|e| Failure::Failed(format!("the export's plan: {e}")))?;
            self.plan = Some(Plan::new(spec).map_err(|e| Failure::Failed(e.to_string()))?);
        }
        let tally = row.result.as_ref().map(Tally::from).unwrap_or_default();
        let readding =
            |e: &dyn std::fmt::Display| Failure::Failed(format!("re-adding the rows: {e}"));
        self.sum.merge(&tally).map_err(|e| readding(&e))?;
        let plan = self
            .plan
            .as_ref()
            .ok_or_else(|| readding(&"no plan came first"))?;
        let total = plan.total_of(&tally).map_err(|e| readding(&e))?;
        self.total = self
            .total
            .checked_add(total)
            .ok_or_else(|| readding(&"overflow"))?;
        self.n += 1;
        Ok(total)
    }
}

/// Where rows go: a file written as FILE.partial and renamed once whole
/// (an export cut short is never taken for a complete one), or standard
/// output.
fn open_output(output: Option<&Path>) -> Result<(Box<dyn Write>, Option<PathBuf>), Failure> {
    let Some(p) = output else {
        return Ok((Box::new(io::BufWriter::new(io::stdout().lock())), None));
    };
    let mut name = p.as_os_str().to_owned();
    name.push(".partial");
    let partial = PathBuf::from(name);
    let file = std::fs::File::create(&partial)
        .map_err(|e| Failure::BadInput(format!("cannot write {}: {e}", partial.display())))?;
    Ok((Box::new(io::BufWriter::new(file)), Some(partial)))
}

/// Streams job `job`'s counted tasks to `output` (standard output if
/// none); then says on standard error what their sum gives. JSON lines end
/// with a trailer object saying the export is complete.
pub fn export(job: u64, format: Format, output: Option<&Path>, c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let info = op.job(job).await?;
        let mut stream = op.export(job).await?;
        let (mut out, partial) = open_output(output)?;
        if format == Format::Csv {
            writeln!(out, "{}", COLUMNS.join(","))?;
        }
        let mut rows = Rows::default();
        while let Some(row) = stream.message().await.map_err(|s| op.fail(&s))? {
            let total = rows.add(&row)?;
            write_row(&mut out, format, values(&row, total))?;
        }
        whole(job, &rows, &info)?;
        if format == Format::Jsonl {
            let end = serde_json::json!({
                "complete": true,
                "rows": rows.n.to_string(),
                "total": rows.total.to_string(),
            });
            writeln!(out, "{end}")?;
        }
        out.flush()?;
        drop(out);
        if let (Some(from), Some(to)) = (&partial, output) {
            std::fs::rename(from, to)?;
        }
        check_sum(job, &rows, &info)
    })
}

/// A done job has a row for each task: fewer is a short export (from a
/// coordinator that did not check its store), never a whole one.
fn whole(job: u64, rows: &Rows, info: &crate::human::JobInfo) -> Result<(), Failure> {
    if info.state != "done" || rows.n == info.tasks {
        return Ok(());
    }
    Err(Failure::Failed(format!(
        "job {job} is done with {} tasks, but the export holds {} rows: the coordinator's \
         store is missing some (`nqueens audit {job}` checks the journal, which holds them \
         all); nothing was written as complete",
        thousands(info.tasks.into()),
        thousands(rows.n.into())
    )))
}

/// Says on standard error how many rows were exported and, once every
/// task is there, whether they re-add to the job's counts.
fn check_sum(job: u64, rows: &Rows, info: &crate::human::JobInfo) -> Result<(), Failure> {
    let said = format!(
        "exported {} counted tasks of job {job} ({} in the plan)",
        thousands(rows.n.into()),
        thousands(info.tasks.into())
    );
    let finished = rows
        .plan
        .as_ref()
        .filter(|_| rows.n == info.tasks)
        .map(|p| p.finish(&rows.sum));
    match finished {
        Some(Ok(t)) => {
            let (total, unique) = (t.total().unwrap_or(0), t.unique().unwrap_or(0));
            let agree = total == info.total && unique == info.unique && total == rows.total;
            say!(
                "{said}; re-added: total {}, unique {} ({} the job's)",
                thousands(total),
                thousands(unique),
                if agree { "equal to" } else { "DIFFERENT from" }
            );
            match agree {
                true => Ok(()),
                false => Err(Failure::Failed(
                    "the exported rows do not add up to the job's counts".into(),
                )),
            }
        }
        Some(Err(e)) => Err(Failure::Failed(format!("re-adding the rows: {e}"))),
        None => {
            say!("{said}; not all tasks have a result yet, so no final counts");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_jobs_export_short_of_its_tasks_is_refused() {
        let job = |state: v1::JobState, tasks| {
            crate::human::JobInfo::new(&v1::Job {
                state: state as i32,
                tasks,
                ..v1::Job::default()
            })
        };
        let rows = Rows {
            n: 18,
            ..Rows::default()
        };
        let e = whole(1, &rows, &job(v1::JobState::Done, 20)).unwrap_err();
        assert!(e
            .message()
            .contains("done with 20 tasks, but the export holds 18 rows"));
        assert!(whole(1, &rows, &job(v1::JobState::Done, 18)).is_ok());
        assert!(whole(1, &rows, &job(v1::JobState::Running, 20)).is_ok());
    }

    #[test]
    fn csv_fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(csv_field("w1"), "w1");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
