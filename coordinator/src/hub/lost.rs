//! A start that finds acknowledged records lost (a sealed segment
//! deleted, damaged or out of place, damage inside the live file, records
//! cut off its end): the refusal that counts them, and
//! `--accept-lost-records` rebuilding the journal around every record that
//! still reads ([`crate::journal::repair`]).

use super::recovery::Marks;
use super::CoordError;
use crate::checkpoint;
use crate::journal::repair::{Known, Survey};
use crate::store::{Opened, Store};
use std::path::Path;

/// The refusal of a journal whose `survey` found records lost, `behind`
/// more cut off its end; `cause` says what was found first.
pub(super) fn refusal(cause: String, path: &Path, survey: &Survey, behind: u64) -> CoordError {
    CoordError::JournalLost {
        cause,
        path: path.to_path_buf(),
        lost: survey.lost_records() + behind,
        ranges: survey.ranges(),
        behind: match behind {
            0 => String::new(),
            n => format!("; at its end, {n} cut off"),
        },
    }
}

/// What every readable checkpoint of `data_dir` says of the jobs (those
/// moved aside by an earlier start included, so that a rebuild killed
/// after it moved them finds them again), the newest first for each job,
/// to restate those whose records were lost; `epoch`, the latest boot
/// epoch known otherwise.
fn known(data_dir: &Path, epoch: u64) -> Known {
    let mut known = Known {
        epoch,
        ..Known::default()
    };
    for c in checkpoint::every(data_dir) {
        // A checkpoint an earlier accept moved aside numbers records as
        // the journal did before: its jobs stand, not where they stood.
        let current = c
            .path
            .file_name()
            .is_some_and(|n| n == "checkpoint" || n == "checkpoint.prev");
        for j in c.state.jobs() {
            known.jobs.entry(j.id).or_insert_with(|| j.restated());
            if current && !j.finished() {
                known
                    .controls
                    .entry(j.id)
                    .or_insert((j.control(), c.seen.upto));
            }
        }
        known.deleted.extend(c.state.deleted_jobs());
        known.epoch = known.epoch.max(c.state.epoch());
    }
    for id in &known.deleted {
        known.jobs.remove(id);
    }
    known
}

/// `--accept-lost-records accept` where `survey` found records lost:
/// unless `accept` is their number, refused; else the journal is rebuilt
/// (planned in memory first, nothing changed if that fails), the
/// checkpoints and the store are moved aside, and the journal's commit
/// mark too where records were cut off its end. Returns the new, empty
/// store and the last acknowledged record the journal must reach.
pub(super) fn rebuild(
    data_dir: &Path,
    survey: Survey,
    marks: &Marks,
    accept: u64,
    store: Store,
) -> Result<(Store, Opened, u64), CoordError> {
    let path = data_dir.join("journal");
    let behind = marks.acknowledged().saturating_sub(survey.last());
    let lost = survey.lost_records() + behind;
    if accept != lost {
        let cause = format!(
            "--accept-lost-records {accept} was given, but the number lost is {lost}: nothing \
             was changed"
        );
        return Err(refusal(cause, &path, &survey, behind));
    }
    let failed = |why: String| CoordError::DataDir {
        path: path.clone(),
        why,
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let plan = survey
        .rebuild(&known(data_dir, marks.epoch), now_ms)
        .map_err(failed)?;
    drop(store);
    set_aside(data_dir, &["checkpoint", "checkpoint.prev", "store"])?;
    let rebuilt = plan
        .write()
        .map_err(|e| failed(format!("cannot write the rebuilt journal: {e}")))?;
    if behind > 0 {
        set_aside(data_dir, &["journal.mark"])?;
    }
    for (file, aside) in &rebuilt.files {
        tracing::warn!(file = %file.display(), kept = %aside.display(), "journal file rewritten");
    }
    tracing::warn!(
        lost,
        ranges = ?rebuilt.lost,
        restated = ?rebuilt.restated,
        "--accept-lost-records: the journal was rebuilt around every record that reads; the lost \
         records' tasks are counted again"
    );
    for (job, control) in &rebuilt.controlled {
        tracing::warn!(job, state = %control, "the record that set this job so was lost; set again as the checkpoint holds it");
    }
    if !rebuilt.gone.is_empty() {
        tracing::error!(jobs = ?rebuilt.gone, "these jobs were defined only in the lost records and no checkpoint holds them: their records are passed over; submit them again");
    }
    let (store, opened) = Store::open(&data_dir.join("store"))?;
    Ok((store, opened, if behind > 0 { 0 } else { marks.journal }))
}

/// Moves `names` in the data directory aside (renamed `*.lost-UNIXTIME`,
/// nothing deleted).
pub(super) fn set_aside(data_dir: &Path, names: &[&str]) -> Result<(), CoordError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for name in names {
        let from = data_dir.join(name);
        // Unique: a start moving things aside again within the second
        // must not replace what the last one moved.
        let to = crate::journal::repair::free_name(&data_dir.join(format!("{name}.lost-{stamp}")));
        match std::fs::rename(&from, &to) {
            Ok(()) => tracing::warn!(from = %from.display(), to = %to.display(), "moved aside"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CoordError::DataDir {
                    path: from,
                    why: format!("cannot move it aside to {}: {e}", to.display()),
                })
            }
        }
    }
    crate::journal::sync_dir(&data_dir.join("store")).map_err(|e| CoordError::DataDir {
        path: data_dir.to_path_buf(),
        why: format!("cannot sync it: {e}"),
    })
}
