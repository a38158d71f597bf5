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
use std::path::Path;

/// How rows are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A header line, then one comma-separated line per task.
    Csv,
    /// One JSON object per task; every integer is a decimal string.
    Jsonl,
}

/// The columns, in order (CSV header, JSON keys).
pub const COLUMNS: [&str; 19] = [
    "task",
    "lo",
    "hi",
    "skip",
    "take",
    "subproblems",
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

/// A row's values as text, in [`COLUMNS`] order.
fn values(row: &v1::ExportRow) -> [String; 19] {
    let t = row.task.unwrap_or_default();
    let r = row.result.clone().unwrap_or_default();
    let big = |x: Option<&v1::U128>| u128_from_wire(x).to_string();
    [
        t.index.to_string(),
        t.lo.to_string(),
        t.hi.to_string(),
        t.skip.to_string(),
        t.take.to_string(),
        t.subproblems.to_string(),
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

fn write_row(out: &mut dyn Write, format: Format, row: &v1::ExportRow) -> io::Result<()> {
    let v = values(row);
    match format {
        Format::Csv => {
            let fields: Vec<String> = v.iter().map(|s| csv_field(s)).collect();
            writeln!(out, "{}", fields.join(","))
        }
        Format::Jsonl => {
            let map: serde_json::Map<String, serde_json::Value> = COLUMNS
                .iter()
                .zip(v)
                .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
                .collect();
            writeln!(out, "{}", serde_json::Value::Object(map))
        }
    }
}

/// Streams job `job`'s counted tasks to `output` (standard output if
/// none); then says on standard error what their sum gives.
pub fn export(job: u64, format: Format, output: Option<&Path>, c: &Connect) -> Result<(), Failure> {
    on_runtime(async {
        let mut op = Operator::new(c)?;
        let info = op.job(job).await?;
        let mut rows = op.export(job).await?;
        // A file is written as FILE.partial and renamed once whole: an
        // export cut short is never taken for a complete one.
        let partial = output.map(|p| {
            let mut name = p.as_os_str().to_owned();
            name.push(".partial");
            std::path::PathBuf::from(name)
        });
        let mut out: Box<dyn Write> = match &partial {
            Some(path) => Box::new(io::BufWriter::new(std::fs::File::create(path).map_err(
                |e| Failure::BadInput(format!("cannot write {}: {e}", path.display())),
            )?)),
            None => Box::new(io::BufWriter::new(io::stdout().lock())),
        };
        if format == Format::Csv {
            writeln!(out, "{}", COLUMNS.join(","))?;
        }
        let (mut sum, mut n, mut spec) = (Tally::default(), 0u64, None::<PlanSpec>);
        while let Some(row) = rows.message().await.map_err(|s| op.fail(&s))? {
            if let Some(p) = row.task.as_ref().and_then(|t| t.plan.as_ref()) {
                spec = PlanSpec::try_from(p).ok();
            }
            if let Some(r) = &row.result {
                sum.merge(&nqueens_common::plan::Tally::from(r))
                    .map_err(|e| Failure::Failed(format!("re-adding the rows: {e}")))?;
            }
            write_row(&mut out, format, &row)?;
            n += 1;
        }
        out.flush()?;
        drop(out);
        if let (Some(from), Some(to)) = (&partial, output) {
            std::fs::rename(from, to)?;
        }
        let mut said = format!(
            "exported {} counted tasks of job {job} ({} in the plan)",
            thousands(n.into()),
            thousands(info.tasks.into())
        );
        let finished = spec
            .filter(|_| n == info.tasks)
            .and_then(|s| Plan::new(s).ok())
            .map(|p| p.finish(&sum));
        match finished {
            Some(Ok(t)) => {
                let (total, unique) = (t.total().unwrap_or(0), t.unique().unwrap_or(0));
                let agree = total == info.total && unique == info.unique;
                said += &format!(
                    "; re-added: total {}, unique {} ({} the job's)",
                    thousands(total),
                    thousands(unique),
                    if agree { "equal to" } else { "DIFFERENT from" }
                );
                eprintln!("{said}");
                if !agree {
                    return Err(Failure::Failed(
                        "the exported rows do not add up to the job's counts".into(),
                    ));
                }
            }
            Some(Err(e)) => return Err(Failure::Failed(format!("re-adding the rows: {e}"))),
            None => eprintln!("{said}; not all tasks have a result yet, so no final counts"),
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(csv_field("w1"), "w1");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
