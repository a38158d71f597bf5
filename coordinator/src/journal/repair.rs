//! Rebuilding the records of a journal that no longer read, when no
//! backup holds them: a sealed segment deleted, damaged or out of place,
//! or damage inside the live file.
//!
//! A [`survey`] reads every file of the journal, keeping every record
//! that reads (its CRC and its sequence number both check, found again
//! past damage by scanning for the next one) at its own number, whatever
//! file holds it, and finds which numbers are lost. A file whose head
//! carries another journal's identity, files that hold different records
//! under one number, and a sealed segment numbered past the live file's
//! records (or past the start its head gives) are refused as another
//! journal's.
//! [`Survey::rebuild`] then makes the journal whole, each record at its
//! number: the records that read as they were, and in the slots of the
//! lost ones records that stand for them:
//!
//! - the submission (and plan) of every job a checkpoint holds whose own
//!   record was lost, placed before its first surviving record, so no
//!   later record names a job the journal does not define (after the last
//!   record, for a job whose records were all cut off the end);
//! - a deletion for a job whose submission was lost and that no
//!   checkpoint holds (its later records are then passed over: it is
//!   submitted again), and for a job a checkpoint says was deleted;
//! - boots, raising the epoch past any a lost record could have held,
//!   in every other slot;
//! - after the last record, what the operator set for a job (a pause, a
//!   cancellation, a resume) as a checkpoint holds it, where the record
//!   that set it was lost (no surviving record after that checkpoint
//!   setting the job otherwise) and the job was not done.
//!
//! A lost result stands for nothing: its task has no result, and is
//! counted again. The rebuilt sequence is replayed in memory before
//! anything is written ([`Rebuild::write`]); new files are written before
//! any old one moves, and every file replaced or removed is first linked
//! aside (`*.damaged-UNIXTIME`), so nothing that was on disk is deleted.

use super::head::{self, Head, Identity};
use super::{codec, frame, record_at, segments, sync_dir, JournalError};
use crate::state::{Event, JobState, Limits, State};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// What a journal holds and what it lost.
#[derive(Debug)]
pub struct Survey {
    journal: PathBuf,
    /// Every record that reads, by its own number, whatever file holds it.
    records: BTreeMap<u64, Event>,
    /// The sealed segments kept as they are (their records are those their
    /// names say, whole), in order, none overlapping another.
    kept: Vec<(u64, u64)>,
    /// Sealed files that do not read as their names say: damaged, cut,
    /// renamed, or a copy under another name.
    misfits: Vec<PathBuf>,
    /// The live file reads as it is, from the record after the last kept.
    live_whole: bool,
    /// The journal's identity, for the files written.
    id: Identity,
}

/// What a checkpoint says of the jobs, to restate those whose records
/// were lost.
#[derive(Debug, Default)]
pub struct Known {
    /// Each job's submission and, once planned, its plan.
    pub jobs: BTreeMap<u64, (Event, Option<Event>)>,
    pub deleted: BTreeSet<u64>,
    pub epoch: u64,
    /// What the operator last set for each job not done (running, paused,
    /// cancelled), and the last record the checkpoint that says so holds;
    /// from checkpoints of the journal as it is numbered now.
    pub controls: BTreeMap<u64, (JobState, u64)>,
}

/// What a rebuild did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// The ranges of lost records rebuilt.
    pub lost: Vec<(u64, u64)>,
    /// Jobs restated from the checkpoint.
    pub restated: Vec<u64>,
    /// Jobs whose submission was lost and that no checkpoint holds: their
    /// surviving records are passed over; they must be submitted again.
    pub gone: Vec<u64>,
    /// Jobs set again as a checkpoint says the operator set them (paused,
    /// cancelled, resumed), where the records that did it were lost.
    pub controlled: Vec<(u64, JobState)>,
    /// Files rewritten, and where the old ones were linked aside.
    pub files: Vec<(PathBuf, PathBuf)>,
}

/// Reads every file of the journal at `path`, keeping every record that
/// reads at its own number. Changes nothing. A file whose head names
/// another journal, and two files that hold different records under one
/// number, are refused: one of them is not this journal's.
pub fn survey(path: &Path) -> Result<Survey, JournalError> {
    let mut found = Found::default();
    let (mut kept, mut misfits) = (Vec::<(u64, u64)>::new(), Vec::new());
    // The highest number each sealed file holds.
    let mut highest = Vec::new();
    let every = segments::list_every(path)?;
    let bytes = match std::fs::read(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        r => r.map_err(super::io_err(path))?,
    };
    let want = segments::expected((path, Head::of(&bytes)), &every)?;
    for s in every {
        let unpacked = unpacked(&s.path, s.compressed);
        let (Ok(b) | Err(b)) = &unpacked;
        head::check(want.as_ref(), &s.path, Head::of(b))?;
        let records = salvage(b, 1, u64::MAX);
        highest.push((s.path.clone(), records.last().map_or(0, |r| r.0)));
        found.take(&s.path, records)?;
        let whole = s.last >= s.first
            && unpacked.is_ok_and(|b| {
                super::parse(&b, &s.path, s.first).is_ok_and(|p| {
                    p.records.len() as u64 == s.last - s.first + 1 && p.good == b.len()
                })
            });
        match whole && kept.last().is_none_or(|&(_, last)| s.first > last) {
            true => kept.push((s.first, s.last)),
            false => misfits.push(s.path),
        }
    }
    let due = kept.last().map_or(1, |&(_, last)| last + 1);
    let live_whole = match super::parse(&bytes, path, due) {
        // The first format, whole: its records carry no numbers.
        Ok(p) if p.head == Head::V1 => {
            found.take(path, (due..).zip(p.records).collect())?;
            true
        }
        parsed => {
            let records = salvage(&bytes, 1, u64::MAX);
            // Sealed segments all precede the live file (which, empty,
            // starts where its head says): one holding a record past its
            // last is another journal's.
            let first = Head::of(&bytes).first().filter(|&f| f > 0);
            let last = records.last().map(|r| r.0).or(first.map(|f| f - 1));
            if let Some(last) = last {
                if let Some((file, seq)) = highest.iter().find(|(_, seq)| *seq > last) {
                    return Err(JournalError::Beyond {
                        path: file.clone(),
                        seq: *seq,
                        last,
                    });
                }
            }
            found.take(path, records)?;
            parsed.is_ok()
        }
    };
    Ok(Survey {
        journal: path.to_path_buf(),
        records: found.records,
        kept,
        misfits,
        live_whole,
        id: segments::identity(want.as_ref()),
    })
}

/// Records gathered from every file, each number once.
#[derive(Default)]
struct Found {
    records: BTreeMap<u64, Event>,
    /// Where each number was read first.
    from: BTreeMap<u64, PathBuf>,
}

impl Found {
    /// Takes the records read in `file`; the same number read before must
    /// be the same record.
    fn take(&mut self, file: &Path, records: Vec<(u64, Event)>) -> Result<(), JournalError> {
        for (seq, r) in records {
            match self.records.get(&seq) {
                Some(before) if *before != r => {
                    return Err(JournalError::Conflicting {
                        seq,
                        first: self.from[&seq].clone(),
                        second: file.to_path_buf(),
                    })
                }
                Some(_) => {}
                None => {
                    self.records.insert(seq, r);
                    self.from.insert(seq, file.to_path_buf());
                }
            }
        }
        Ok(())
    }
}

/// A file's bytes, uncompressed; as much as decompresses of a damaged
/// compressed one (the error, if it is all unreadable).
fn unpacked(path: &Path, compressed: bool) -> Result<Vec<u8>, Vec<u8>> {
    let Ok(raw) = std::fs::read(path) else {
        return Err(Vec::new());
    };
    if !compressed {
        return Ok(raw);
    }
    let mut bytes = Vec::new();
    match flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut bytes) {
        Ok(_) => Ok(bytes),
        Err(_) => Err(bytes),
    }
}

/// Every record in `bytes` numbered `lo..=hi`, in increasing order: after
/// bytes that do not read, the next offset where a whole record does
/// (its CRC covers its number, so a record found is the one written).
fn salvage(bytes: &[u8], lo: u64, hi: u64) -> Vec<(u64, Event)> {
    let mut at = Head::of(bytes).size();
    let (mut next, mut out) = (lo, Vec::new());
    while at < bytes.len() {
        match record_at(&bytes[at..], false) {
            Ok((r, seq, size)) if (next..=hi).contains(&seq) => {
                out.push((seq, r));
                next = seq + 1;
                at += size;
            }
            _ => at += 1,
        }
    }
    out
}

impl Survey {
    /// The ranges of numbers lost: no file holds a record of that number
    /// that reads.
    pub fn lost(&self) -> Vec<(u64, u64)> {
        let (mut lost, mut due) = (Vec::new(), 1);
        for &seq in self.records.keys() {
            if seq > due {
                lost.push((due, seq - 1));
            }
            due = seq + 1;
        }
        lost
    }

    /// The ranges below the last kept segment that no kept segment holds:
    /// each is written as a new segment.
    fn gaps(&self) -> Vec<(u64, u64)> {
        let (mut gaps, mut due) = (Vec::new(), 1);
        for &(first, last) in &self.kept {
            if first > due {
                gaps.push((due, first - 1));
            }
            due = last + 1;
        }
        gaps
    }

    /// The lost ranges in words: `#5..#9, #12`, the first five.
    pub fn ranges(&self) -> String {
        let lost = self.lost();
        let mut ranges: Vec<String> = lost
            .iter()
            .take(5)
            .map(|&(a, b)| match a == b {
                true => format!("#{a}"),
                false => format!("#{a}..#{b}"),
            })
            .collect();
        if lost.len() > 5 {
            ranges.push(format!("and {} more ranges", lost.len() - 5));
        }
        match ranges.is_empty() {
            true => "none (only files out of place, or bytes after the last whole record)".into(),
            false => ranges.join(", "),
        }
    }

    /// Whether the journal does not read as it is: records lost, files
    /// that are not what their names say, bytes that are not records
    /// before the end.
    pub fn damaged(&self) -> bool {
        !self.misfits.is_empty()
            || !self.live_whole
            || !self.gaps().is_empty()
            || !self.lost().is_empty()
    }

    /// How many records are lost.
    pub fn lost_records(&self) -> u64 {
        self.lost().iter().map(|(a, b)| b - a + 1).sum()
    }

    /// The number of the journal's last record that reads (0: none).
    pub fn last(&self) -> u64 {
        self.records.keys().next_back().copied().unwrap_or(0)
    }

    /// Every record from 1 to [`Survey::last`]: read, or lost.
    fn slots(&self) -> Vec<Option<Event>> {
        let mut slots = vec![None; self.last() as usize];
        for (seq, r) in &self.records {
            slots[*seq as usize - 1] = Some(r.clone());
        }
        slots
    }

    /// The journal whole again, the lost records' slots filled from
    /// `known` (see the module doc), once the whole sequence replays in
    /// memory; `now_ms` dates the records it makes. Changes nothing:
    /// [`Rebuild::write`] does.
    pub fn rebuild(self, known: &Known, now_ms: u64) -> Result<Rebuild, String> {
        let mut slots = self.slots();
        let mut rebuilt = fill(&mut slots, known, now_ms)?;
        let mut records: Vec<Event> = slots.into_iter().map(|s| s.expect("filled")).collect();
        let mut state = State::new(Limits::default());
        let replay = |state: &mut State, records: &[Event], from: usize| {
            records.iter().enumerate().skip(from).try_for_each(|(i, r)| {
                state.apply(r).map(|_| ()).map_err(|e| {
                    format!(
                        "the rebuilt journal does not replay at record {}: {e}; nothing was changed",
                        i + 1
                    )
                })
            })
        };
        replay(&mut state, &records, 0)?;
        let replayed = records.len();
        for (job, control) in self.controls_lost(known, &state) {
            records.push(Event::JobControlled {
                job,
                state: control,
            });
            rebuilt.controlled.push((job, control));
        }
        replay(&mut state, &records, replayed)?;
        rebuilt.lost = self.lost();
        Ok(Rebuild {
            survey: self,
            records,
            rebuilt,
            stamp: now_ms / 1000,
        })
    }
}

impl Survey {
    /// What the operator set for each job (run, pause, cancel) as a
    /// checkpoint in `known` holds it, where the rebuilt journal, replayed
    /// into `state`, says otherwise and no surviving record after that
    /// checkpoint sets the job: the record that set it was lost, and it is
    /// set again after the last record.
    fn controls_lost(&self, known: &Known, state: &State) -> Vec<(u64, JobState)> {
        let set_since = |job: u64, upto: u64| {
            self.records
                .range(upto + 1..)
                .any(|(_, r)| matches!(r, Event::JobControlled { job: j, .. } if *j == job))
        };
        known
            .controls
            .iter()
            .filter(|(&job, &(c, upto))| {
                !state.deleted(job)
                    && state.job(job).is_ok_and(|j| j.control() != c)
                    && !set_since(job, upto)
            })
            .map(|(&job, &(c, _))| (job, c))
            .collect()
    }
}

/// A journal rebuilt in memory, to write.
#[derive(Debug)]
pub struct Rebuild {
    survey: Survey,
    /// Every record from 1.
    records: Vec<Event>,
    rebuilt: Rebuilt,
    stamp: u64,
}

impl Rebuild {
    /// What the rebuild does.
    pub fn rebuilt(&self) -> &Rebuilt {
        &self.rebuilt
    }

    /// Writes the journal whole: a new segment for each range the kept
    /// segments do not hold, the live file from the record after the last
    /// kept one (where it does not read as it is), and only then moves the
    /// files that are not what their names say out of the way; every file
    /// replaced or removed is linked aside first. Killed at any point, it
    /// leaves every record that read readable.
    pub fn write(mut self) -> io::Result<Rebuilt> {
        let s = &self.survey;
        let dir = segments::dir_of(&s.journal);
        let mut files = Vec::new();
        let mut written = Vec::new();
        for (a, b) in s.gaps() {
            crate::owner_only::create_dir_all(&dir)?;
            let path = dir.join(segments::name(a, b));
            self.put(&path, (a, b), &mut files)?;
            written.push(path);
        }
        // Records restated after the last one go at the live file's end.
        let end = self.records.len() as u64;
        if !s.live_whole || end > s.last() {
            let first = s.kept.last().map_or(1, |&(_, last)| last + 1);
            self.put(&s.journal, (first, end), &mut files)?;
        }
        for m in s.misfits.iter().filter(|m| !written.contains(m)) {
            let aside = aside(m, self.stamp);
            std::fs::hard_link(m, &aside)?;
            std::fs::remove_file(m)?;
            sync_dir(m)?;
            files.push((m.clone(), aside));
        }
        self.rebuilt.files = files;
        Ok(self.rebuilt)
    }

    /// Writes records `range` to `path` (through a synced temporary file
    /// renamed over it), an existing file linked aside first.
    fn put(
        &self,
        path: &Path,
        range: (u64, u64),
        files: &mut Vec<(PathBuf, PathBuf)>,
    ) -> io::Result<()> {
        if path.exists() {
            let aside = aside(path, self.stamp);
            std::fs::hard_link(path, &aside)?;
            files.push((path.to_path_buf(), aside));
        }
        let mut bytes = head::bytes(self.survey.id, range.0).to_vec();
        for seq in range.0..=range.1 {
            let payload = codec::encode(&self.records[seq as usize - 1]);
            bytes.extend_from_slice(&frame(seq, &payload));
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".rebuilt.tmp");
        let tmp = path.with_file_name(name);
        let mut f = crate::owner_only::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(path)
    }
}

/// `path.damaged-STAMP`, or `path.damaged-STAMP.K` with the first K
/// free (a rebuild may run again within the second).
fn aside(path: &Path, stamp: u64) -> PathBuf {
    let name = format!(
        "{}.damaged-{stamp}",
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    free_name(&path.with_file_name(name))
}

/// `path` if nothing is there, else `path.K` with the first K free.
pub fn free_name(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    std::iter::once(path.to_path_buf())
        .chain((1..).map(|k| path.with_file_name(format!("{name}.{k}"))))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .expect("a free name")
}

/// A record to place in a lost slot: after slot `release`, before slot
/// `deadline`, and after need `after` where set.
#[derive(Debug)]
struct Need {
    event: Event,
    release: u64,
    deadline: u64,
    after: Option<usize>,
    placed: Option<u64>,
}

/// Fills every lost slot (see the module doc); earliest deadline first,
/// which places every need whose lost record it stands for was somewhere
/// before that deadline.
fn fill(slots: &mut Vec<Option<Event>>, known: &Known, now_ms: u64) -> Result<Rebuilt, String> {
    let mut needs = needs(slots, known, now_ms);
    // Jobs the surviving records delete: none of them is gone by the loss.
    let deleted: BTreeSet<u64> = slots
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Event::JobDeleted { job, .. } => Some(*job),
            _ => None,
        })
        .chain(known.deleted.iter().copied())
        .collect();
    let lost = slots.iter().filter(|s| s.is_none()).count() as u64;
    let epoch = slots
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Event::Boot { epoch, .. } => Some(*epoch),
            _ => None,
        })
        .chain([known.epoch])
        .max()
        .unwrap_or(0)
        + lost;
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.is_some() {
            continue;
        }
        let seq = i as u64 + 1;
        let pick = (0..needs.len())
            .filter(|&n| {
                let need = &needs[n];
                need.placed.is_none()
                    && need.release < seq
                    && seq < need.deadline
                    && need
                        .after
                        .is_none_or(|a| needs[a].placed.is_some_and(|p| p < seq))
            })
            .min_by_key(|&n| needs[n].deadline);
        *slot = Some(match pick {
            Some(n) => {
                needs[n].placed = Some(seq);
                needs[n].event.clone()
            }
            None => Event::Boot {
                epoch,
                unix_ms: now_ms,
            },
        });
    }
    if let Some(n) = needs
        .iter()
        .find(|n| n.placed.is_none() && n.deadline < u64::MAX)
    {
        return Err(format!(
            "no lost record comes before record {} to stand for {:?}; nothing was changed",
            n.deadline, n.event
        ));
    }
    // What no lost slot could take (a job defined only in records cut off
    // the end) is restated after the last record, in order: no job a
    // checkpoint holds goes, and no id is given twice.
    for need in needs.iter_mut().filter(|n| n.placed.is_none()) {
        slots.push(Some(need.event.clone()));
        need.placed = Some(slots.len() as u64);
    }
    let mut rebuilt = Rebuilt::default();
    for n in needs.iter().filter(|n| n.placed.is_some()) {
        match &n.event {
            Event::JobSubmitted { job, .. } => rebuilt.restated.push(*job),
            Event::JobDeleted { job, .. } if !deleted.contains(job) => rebuilt.gone.push(*job),
            _ => {}
        }
    }
    Ok(rebuilt)
}

/// How the surviving records refer to each job.
#[derive(Default)]
struct Refs {
    first: Option<u64>,
    last: u64,
    submitted: Option<u64>,
    planned: bool,
    /// Where its deletion survives.
    deleted: Option<u64>,
}

/// The records that must stand in lost slots, for `known`'s jobs and
/// those the surviving records name.
fn needs(slots: &[Option<Event>], known: &Known, now_ms: u64) -> Vec<Need> {
    let mut refs: BTreeMap<u64, Refs> = BTreeMap::new();
    for (i, r) in slots.iter().enumerate() {
        let seq = i as u64 + 1;
        let job = match r {
            Some(Event::JobDeleted { job, .. }) => *job,
            Some(r) => match r.job() {
                Some(job) => job,
                None => continue,
            },
            None => continue,
        };
        let e = refs.entry(job).or_default();
        e.first.get_or_insert(seq);
        e.last = seq;
        match r {
            Some(Event::JobSubmitted { .. }) => e.submitted = Some(seq),
            Some(Event::JobPlanned { .. }) => e.planned = true,
            Some(Event::JobDeleted { .. }) => e.deleted = Some(seq),
            _ => {}
        }
    }
    for &job in known.jobs.keys().chain(&known.deleted) {
        refs.entry(job).or_default();
    }
    let mut needs = Vec::new();
    let need = |event, release, deadline, after| Need {
        event,
        release,
        deadline,
        after,
        placed: None,
    };
    for (&job, r) in &refs {
        let deadline = r.first.unwrap_or(u64::MAX);
        let deleted = Event::JobDeleted {
            job,
            unix_ms: now_ms,
        };
        // Its records before a surviving deletion need it defined, or
        // deleted before them.
        let defined_before_use = r.deleted.is_some_and(|at| r.first == Some(at));
        match (r.submitted, known.jobs.get(&job)) {
            (Some(_), _) if r.deleted.is_some() => {}
            (Some(at), _) if known.deleted.contains(&job) => {
                needs.push(need(deleted, r.last.max(at), u64::MAX, None))
            }
            (Some(at), Some((_, Some(plan)))) if !r.planned => {
                needs.push(need(plan.clone(), at, u64::MAX, None))
            }
            (Some(_), _) => {}
            (None, Some((submitted, plan))) => {
                needs.push(need(submitted.clone(), 0, deadline, None));
                if let Some(plan) = plan.as_ref().filter(|_| !r.planned) {
                    let after = Some(needs.len() - 1);
                    needs.push(need(plan.clone(), 0, u64::MAX, after));
                }
            }
            (None, None) if !defined_before_use => needs.push(need(deleted, 0, deadline, None)),
            (None, None) => {}
        }
    }
    needs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Checking, Done, Outcome};
    use nqueens_common::plan::{Mode, PlanSpec, Strategy, Tally};
    use nqueens_common::Size;

    fn submitted() -> Event {
        Event::JobSubmitted {
            job: 1,
            spec: PlanSpec {
                n: Size::new(8).unwrap(),
                strategy: Strategy::Prefix,
                depth: 2,
                tasks: 8,
                mode: Mode::Backtrack,
                cut: nqueens_common::plan::CUT,
            },
            unix_ms: 5,
            checking: Checking {
                redundancy: 1,
                fraction: 0.0,
                cross_device: false,
            },
        }
    }

    fn planned() -> Event {
        Event::JobPlanned {
            job: 1,
            tasks: 40,
            digest: 9,
        }
    }

    fn done(task: u64) -> Event {
        Event::TaskDone(Done {
            job: 1,
            task,
            outcome: Outcome {
                tally: Tally {
                    weighted: u128::from(task) + 1,
                    ..Tally::default()
                },
                ..Outcome::default()
            },
            worker: "w".into(),
            lease_id: task,
            unix_ms: 1,
            credential: String::new(),
        })
    }

    /// Records 1..=12: a boot, job 1 submitted and planned, then results
    /// for tasks 0..=8.
    fn records() -> Vec<Event> {
        let mut r = vec![Event::Boot {
            epoch: 1,
            unix_ms: 1,
        }];
        r.extend([submitted(), planned()]);
        r.extend((0..9).map(done));
        r
    }

    /// A file of journal `id` of `records`, the first numbered `first`.
    fn file_of(id: Identity, records: &[Event], first: u64) -> Vec<u8> {
        let mut b = head::bytes(id, first).to_vec();
        for (seq, r) in (first..).zip(records) {
            b.extend_from_slice(&frame(seq, &codec::encode(r)));
        }
        b
    }

    /// A file of the journal of [`journal`].
    fn bytes(records: &[Event], first: u64) -> Vec<u8> {
        file_of(Identity::fixed(1), records, first)
    }

    /// The journal at `dir/journal` of [`records`]: sealed segments 1-3
    /// and 4-8, live file 9-12.
    fn journal(dir: &Path) -> PathBuf {
        let path = dir.join("journal");
        let sealed = segments::dir_of(&path);
        std::fs::create_dir_all(&sealed).unwrap();
        let r = records();
        std::fs::write(sealed.join(segments::name(1, 3)), bytes(&r[..3], 1)).unwrap();
        std::fs::write(sealed.join(segments::name(4, 8)), bytes(&r[3..8], 4)).unwrap();
        std::fs::write(&path, bytes(&r[8..], 9)).unwrap();
        path
    }

    /// [`journal`] after a clean stop: every record sealed (9-12 too),
    /// the live file a head only.
    fn stopped(dir: &Path) -> PathBuf {
        let path = journal(dir);
        let sealed = segments::dir_of(&path).join(segments::name(9, 12));
        std::fs::write(sealed, bytes(&records()[8..], 9)).unwrap();
        std::fs::write(&path, head::bytes(Identity::fixed(1), 13)).unwrap();
        path
    }

    /// What the journal at `path` reads now, whole.
    fn read_back(path: &Path) -> Vec<Event> {
        let mut out = Vec::new();
        super::super::scan(path, |r| out.push(r)).unwrap();
        out
    }

    /// The journal at `path` surveyed, rebuilt from `known` and written.
    fn rebuilt(path: &Path, known: &Known) -> Rebuilt {
        survey(path)
            .unwrap()
            .rebuild(known, 1)
            .unwrap()
            .write()
            .unwrap()
    }

    fn known() -> Known {
        Known {
            jobs: [(1, (submitted(), Some(planned())))].into(),
            ..Known::default()
        }
    }

    /// The survey refuses a sealed file holding record `seq`, past the
    /// live file's `last`.
    fn refused_beyond(path: &Path, seq: u64, last: u64) {
        match survey(path) {
            Err(JournalError::Beyond {
                seq: s, last: l, ..
            }) if (s, l) == (seq, last) => {}
            other => panic!("{other:?}"),
        }
    }

    /// Every record of [`records`] outside `lost` reads back unchanged.
    fn intact_but(got: &[Event], lost: &[u64]) {
        assert_eq!(got.len(), 12);
        for (seq, (got, was)) in (1..).zip(got.iter().zip(records())) {
            if !lost.contains(&seq) {
                assert_eq!(*got, was, "record {seq}");
            }
        }
    }

    #[test]
    fn a_deleted_segment_that_defined_a_job_is_rebuilt_from_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(1, 3))).unwrap();
        assert!(segments::list(&path).is_err());
        let s = survey(&path).unwrap();
        assert!(s.damaged());
        assert_eq!(
            (s.lost(), s.lost_records(), s.last()),
            (vec![(1, 3)], 3, 12)
        );
        let done = s.rebuild(&known(), 77_000).unwrap().write().unwrap();
        assert_eq!(done.restated, vec![1]);
        assert!(done.gone.is_empty());
        let got = read_back(&path);
        intact_but(&got, &[1, 2, 3]);
        assert_eq!(got[0], submitted());
        assert_eq!(got[1], planned());
        // The boot standing for the third raises the epoch past any a lost
        // record could hold (each boot raises it by one; here none is
        // known, and 3 records were lost).
        assert!(
            matches!(got[2], Event::Boot { epoch: 3, .. }),
            "{:?}",
            got[2]
        );
    }

    #[test]
    fn a_job_no_checkpoint_holds_is_deleted_where_its_submission_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(1, 3))).unwrap();
        let done = rebuilt(&path, &Known::default());
        assert_eq!(done.gone, vec![1]);
        let got = read_back(&path);
        intact_but(&got, &[1, 2, 3]);
        let mut state = State::new(Limits::default());
        for r in &got {
            state.apply(r).unwrap();
        }
        assert!(state.deleted(1));
    }

    #[test]
    fn records_past_damage_in_a_compressed_segment_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let seg = segments::dir_of(&path).join(segments::name(4, 8));
        let mut b = std::fs::read(&seg).unwrap();
        // One byte of record 6's payload flipped.
        let at = b.len() - 2 * (b.len() - head::LEN) / 5 - 3;
        b[at] ^= 0x40;
        std::fs::write(&seg, &b).unwrap();
        assert_eq!(segments::compress(&path).unwrap(), 2);
        let s = survey(&path).unwrap();
        assert_eq!(s.lost(), vec![(6, 6)]);
        let done = s.rebuild(&known(), 1).unwrap().write().unwrap();
        assert!(done.restated.is_empty(), "{done:?}");
        // Its records now follow the last whole segment in the live file;
        // the damaged one, and the live file as it was, are kept aside.
        assert_eq!(done.files.len(), 2, "{done:?}");
        let (_, kept) = done
            .files
            .iter()
            .find(|(was, _)| was.to_string_lossy().ends_with(".seg.gz"))
            .unwrap();
        assert_eq!(unpacked(kept, true), Ok(b), "kept aside");
        assert!(segments::list(&path).unwrap().iter().all(|s| s.last <= 3));
        let got = read_back(&path);
        intact_but(&got, &[6]);
        assert!(matches!(got[5], Event::Boot { .. }));
    }

    #[test]
    fn damage_inside_the_live_file_loses_only_the_records_it_hit() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let mut b = std::fs::read(&path).unwrap();
        // Record 10's header (the second record of the live file).
        let first = frame(9, &codec::encode(&records()[8])).len();
        b[head::LEN + first + 1] ^= 0xff;
        std::fs::write(&path, &b).unwrap();
        let s = survey(&path).unwrap();
        assert_eq!((s.lost(), s.last()), (vec![(10, 10)], 12));
        let done = s.rebuild(&known(), 1).unwrap().write().unwrap();
        assert_eq!(done.files.len(), 1);
        intact_but(&read_back(&path), &[10]);
        let again = survey(&path).unwrap();
        assert!(!again.damaged(), "{again:?}");
    }

    /// A copy of a segment under a later name, and two segments' names
    /// swapped: every record reads at its own number, so none is lost; the
    /// files out of place are set aside and the journal reads whole.
    #[test]
    fn records_are_placed_by_their_own_numbers_not_their_files_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let sealed = segments::dir_of(&path);
        std::fs::copy(
            sealed.join(segments::name(4, 8)),
            sealed.join(segments::name(13, 17)),
        )
        .unwrap();
        let s = survey(&path).unwrap();
        assert!(s.damaged());
        assert_eq!((s.lost_records(), s.last()), (0, 12));
        s.rebuild(&Known::default(), 1).unwrap().write().unwrap();
        intact_but(&read_back(&path), &[]);
        assert!(!survey(&path).unwrap().damaged());

        let (a, b) = (
            sealed.join(segments::name(1, 3)),
            sealed.join(segments::name(4, 8)),
        );
        let t = sealed.join("t");
        for (from, to) in [(&a, &t), (&b, &a), (&t, &b)] {
            std::fs::rename(from, to).unwrap();
        }
        let s = survey(&path).unwrap();
        assert!(s.damaged());
        assert_eq!((s.lost_records(), s.last()), (0, 12));
        let done = s.rebuild(&Known::default(), 1).unwrap().write().unwrap();
        assert!(done.restated.is_empty() && done.gone.is_empty(), "{done:?}");
        intact_but(&read_back(&path), &[]);
        assert!(!survey(&path).unwrap().damaged());
    }

    /// A file whose records differ from this journal's under the same
    /// numbers is refused, and nothing is changed.
    #[test]
    fn a_file_from_another_journal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let other: Vec<Event> = (20..25).map(done).collect();
        // Numbered 4..=8 as this journal's second segment is.
        let stray = segments::dir_of(&path).join(segments::name(13, 17));
        std::fs::write(&stray, bytes(&other, 4)).unwrap();
        let before = std::fs::read(&stray).unwrap();
        match survey(&path) {
            Err(e @ JournalError::Conflicting { .. }) => {
                assert!(e.to_string().contains("not this journal's"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(&stray).unwrap(), before);
    }

    /// A job whose submission was lost and whose deletion survives (no
    /// checkpoint holds a deleted job): deleted before its first
    /// surviving record, which is then passed over; not reported gone.
    #[test]
    fn a_deleted_job_whose_submission_was_lost_stays_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let mut live = records()[8..].to_vec();
        live.push(Event::JobDeleted { job: 1, unix_ms: 9 });
        std::fs::write(&path, bytes(&live, 9)).unwrap();
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(1, 3))).unwrap();
        let done = rebuilt(&path, &Known::default());
        assert!(done.gone.is_empty(), "{done:?}");
        assert!(matches!(
            read_back(&path)[0],
            Event::JobDeleted { job: 1, .. }
        ));
    }

    /// A job a checkpoint holds whose records were all cut off the end is
    /// restated after the last record: it does not go, and its id is not
    /// given again.
    #[test]
    fn a_job_cut_off_the_end_is_restated_after_the_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let mut known = known();
        let (mut second, mut plan) = (submitted(), planned());
        for e in [&mut second, &mut plan] {
            match e {
                Event::JobSubmitted { job, .. } | Event::JobPlanned { job, .. } => *job = 2,
                _ => unreachable!(),
            }
        }
        known.jobs.insert(2, (second.clone(), Some(plan.clone())));
        let s = survey(&path).unwrap();
        assert!(!s.damaged());
        let done = s.rebuild(&known, 1).unwrap().write().unwrap();
        assert_eq!(done.restated, vec![2]);
        let got = read_back(&path);
        assert_eq!(&got[12..], &[second, plan]);
        intact_but(&got[..12], &[]);
    }

    /// A segment of another journal numbered past this one's live records
    /// is refused (sealed segments all come before the live file); a plain
    /// copy cut short beside its intact compressed twin loses nothing.
    #[test]
    fn a_segment_past_the_live_file_is_refused_and_a_twin_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let sealed = segments::dir_of(&path);
        let far = sealed.join(segments::name(13, 17));
        let other: Vec<Event> = (20..25).map(done).collect();
        std::fs::write(&far, bytes(&other, 13)).unwrap();
        refused_beyond(&path, 17, 12);
        std::fs::remove_file(&far).unwrap();
        segments::compress(&path).unwrap();
        let plain = sealed.join(segments::name(4, 8));
        let gz = unpacked(&sealed.join(format!("{}.gz", segments::name(4, 8))), true).unwrap();
        std::fs::write(&plain, &gz[..gz.len() / 2]).unwrap();
        let s = survey(&path).unwrap();
        assert!(s.damaged());
        assert_eq!(s.lost_records(), 0);
        s.rebuild(&Known::default(), 1).unwrap().write().unwrap();
        intact_but(&read_back(&path), &[]);
        assert!(!survey(&path).unwrap().damaged());
    }

    #[test]
    fn files_set_aside_within_one_second_keep_their_own_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let first = aside(&path, 9);
        assert_eq!(first, dir.path().join("journal.damaged-9"));
        std::fs::write(&first, b"1").unwrap();
        let second = aside(&path, 9);
        assert_eq!(second, dir.path().join("journal.damaged-9.1"));
    }

    #[test]
    fn an_intact_journal_has_nothing_to_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let mut b = std::fs::read(&path).unwrap();
        b.extend_from_slice(&[40, 0, 0, 0, 1, 2]);
        std::fs::write(&path, &b).unwrap();
        let s = survey(&path).unwrap();
        assert!(!s.damaged(), "a torn tail is not damage");
        assert_eq!((s.lost_records(), s.last()), (0, 12));
    }

    /// After a clean stop every record is sealed and the live file holds
    /// none. A segment copied in from another data directory and named to
    /// continue the numbers is refused by its identity, or, of the second
    /// format (no identity), by the live file's first number; every reader
    /// refuses it, and with it moved out as the advice says, the journal
    /// reads whole again.
    #[tokio::test]
    async fn a_segment_copied_in_after_the_last_record_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = stopped(dir.path());
        let far = segments::dir_of(&path).join(segments::name(13, 17));
        let other: Vec<Event> = (20..25).map(done).collect();

        std::fs::write(&far, file_of(Identity::fixed(2), &other, 13)).unwrap();
        let foreign = |e: &JournalError| {
            let text = e.to_string();
            assert!(
                text.contains("13-") && text.contains("move it out"),
                "{text}"
            );
            matches!(e, JournalError::Foreign { .. })
        };
        assert!(foreign(
            &super::super::Journal::open(&path, 0, 0).err().unwrap()
        ));
        assert!(foreign(&super::super::scan(&path, |_| {}).unwrap_err()));
        assert!(foreign(&survey(&path).unwrap_err()));

        let mut old = head::MAGIC_V2.to_vec();
        old.extend_from_slice(&bytes(&other, 13)[head::LEN..]);
        std::fs::write(&far, old).unwrap();
        match super::super::Journal::open(&path, 0, 0).err().unwrap() {
            e @ JournalError::Overlaps {
                seq: 17, next: 13, ..
            } => {
                assert!(e.to_string().contains("most likely the segment"), "{e}")
            }
            e => panic!("{e}"),
        }
        refused_beyond(&path, 17, 12);
        std::fs::remove_file(&far).unwrap();
        intact_but(&read_back(&path), &[]);
        let (j, r) = super::super::Journal::open(&path, 0, 0).unwrap();
        assert_eq!((r.first, r.last), (1, 12));
        assert_eq!(j.append(&done(9)).await.unwrap(), 13);
    }

    /// A pause whose record was lost is set again as the checkpoint holds
    /// it, after the last record; not where a surviving record after that
    /// checkpoint set the job otherwise.
    #[test]
    fn a_lost_pause_is_set_again_from_the_checkpoint() {
        let replayed = |path: &Path| {
            let mut state = State::new(Limits::default());
            read_back(path).iter().for_each(|r| {
                state.apply(r).unwrap();
            });
            state.job(1).unwrap().control()
        };
        let mut known = known();
        // A checkpoint holding records up to 8 says job 1 was paused: the
        // pause was among the records lost with segment 4-8.
        known.controls.insert(1, (JobState::Paused, 8));
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(4, 8))).unwrap();
        let done = rebuilt(&path, &known);
        assert_eq!(done.controlled, vec![(1, JobState::Paused)]);
        assert_eq!(replayed(&path), JobState::Paused);
        assert_eq!(read_back(&path).len(), 13);

        // Resumed after that checkpoint, in a record that survives.
        let dir = tempfile::tempdir().unwrap();
        let path = journal(dir.path());
        let mut live = records()[8..].to_vec();
        live.push(Event::JobControlled {
            job: 1,
            state: JobState::Running,
        });
        std::fs::write(&path, bytes(&live, 9)).unwrap();
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(4, 8))).unwrap();
        let done = rebuilt(&path, &known);
        assert!(done.controlled.is_empty(), "{done:?}");
        assert_eq!(replayed(&path), JobState::Running);
    }

    /// [`journal`] of the second format: no file carries an identity.
    fn second_format(dir: &Path) -> PathBuf {
        let path = journal(dir);
        let files = segments::list(&path).unwrap();
        for file in files.iter().map(|s| s.path.clone()).chain([path.clone()]) {
            let b = std::fs::read(&file).unwrap();
            let mut old = head::MAGIC_V2.to_vec();
            old.extend_from_slice(&b[head::LEN..]);
            std::fs::write(&file, old).unwrap();
        }
        path
    }

    /// A rebuild of a journal of the second format writes its segments in
    /// the current format between older ones: every later start, seal,
    /// audit, backup and rebuild takes the identity they carry, so the
    /// journal never refuses its own files.
    #[tokio::test]
    async fn a_journal_of_the_second_format_rebuilt_keeps_one_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = second_format(dir.path());
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(1, 3))).unwrap();
        rebuilt(&path, &known());
        let rebuilt_id = segments::head_of(&segments::list(&path).unwrap()[0]).id();
        assert!(rebuilt_id.is_some());
        assert_eq!(Head::of(&std::fs::read(&path).unwrap()), Head::V2);
        let (j, _) = super::super::Journal::open(&path, 0, 0).unwrap();
        j.append(&done(9)).await.unwrap();
        j.rotate().await.unwrap();
        drop(j);
        assert_eq!(Head::of(&std::fs::read(&path).unwrap()).id(), rebuilt_id);
        assert_eq!(read_back(&path).len(), 13);
        let copy = dir.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        super::super::copy::copy(&path, &copy.join("journal")).unwrap();
        assert!(!survey(&path).unwrap().damaged());

        // Damage in the live file of a journal whose live file is of the
        // second format still: the second rebuild takes the same identity.
        let dir = tempfile::tempdir().unwrap();
        let path = second_format(dir.path());
        std::fs::remove_file(segments::dir_of(&path).join(segments::name(1, 3))).unwrap();
        rebuilt(&path, &known());
        let mut b = std::fs::read(&path).unwrap();
        b[head::MAGIC_V2.len() + 30] ^= 0xff;
        std::fs::write(&path, b).unwrap();
        let done = rebuilt(&path, &known());
        assert_eq!(done.lost, vec![(9, 9)], "{done:?}");
        super::super::Journal::open(&path, 0, 0).unwrap();
        assert_eq!(read_back(&path).len(), 12);
    }

    /// A journal of the second format stopped cleanly (its live file the
    /// magic alone) cannot have a newest segment that carries an identity:
    /// one copied in, named to continue its numbers, is refused by every
    /// reader, and the journal reads whole once it is moved out.
    #[tokio::test]
    async fn a_segment_with_an_identity_after_an_older_live_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = second_format(dir.path());
        let sealed = segments::dir_of(&path);
        let live = std::fs::read(&path).unwrap();
        std::fs::write(sealed.join(segments::name(9, 12)), &live).unwrap();
        std::fs::write(&path, head::MAGIC_V2).unwrap();
        let far = sealed.join(segments::name(13, 17));
        let other: Vec<Event> = (20..25).map(done).collect();
        std::fs::write(&far, file_of(Identity::fixed(2), &other, 13)).unwrap();
        let newer = |e: JournalError| {
            assert!(e.to_string().contains("move it out"), "{e}");
            matches!(e, JournalError::Newer { .. })
        };
        assert!(newer(
            super::super::Journal::open(&path, 0, 0).err().unwrap()
        ));
        assert!(newer(super::super::scan(&path, |_| {}).unwrap_err()));
        assert!(newer(survey(&path).unwrap_err()));
        std::fs::remove_file(&far).unwrap();
        intact_but(&read_back(&path), &[]);
        let (j, _) = super::super::Journal::open(&path, 0, 0).unwrap();
        assert_eq!(j.append(&done(9)).await.unwrap(), 13);
    }

    /// A live file of another journal, numbered to follow the last
    /// segment, is refused even by a start whose checkpoint covers every
    /// segment (it reads none of their records): the newest segment's head
    /// disagrees, and the one before it says which of the two is odd. A
    /// live file whose head is zeros only never reached the disk.
    #[tokio::test]
    async fn a_live_file_of_another_journal_is_refused_past_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = stopped(dir.path());
        let other: Vec<Event> = (20..25).map(done).collect();
        std::fs::write(&path, file_of(Identity::fixed(2), &other, 13)).unwrap();
        match super::super::Journal::open(&path, 12, 12).err().unwrap() {
            JournalError::Foreign { path: odd, .. } => assert_eq!(odd, path),
            e => panic!("{e}"),
        }
        std::fs::write(&path, [0; head::LEN]).unwrap();
        let (j, r) = super::super::Journal::open(&path, 12, 12).unwrap();
        assert_eq!((r.last, j.append(&done(9)).await.unwrap()), (12, 13));
        drop(j);
        intact_but(&read_back(&path)[..12], &[]);
    }
}
