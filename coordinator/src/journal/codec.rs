//! The journal's codec: each [`Event`] to one `nqueens.v1.JournalRecord`
//! payload and back, the only place either crosses. Its messages
//! (`proto/nqueens/v1/journal.proto`) are the journal's own; the plan spec
//! is the plan's message, read back through the same checks as a
//! submission.

use crate::state::{Checking, Done, Event, JobState, Outcome};
use nqueens_common::plan::{PlanSpec, Tally};
use nqueens_common::Totals;
use nqueens_proto::v1::{self, journal_record::Record, JournalJobState, JournalRecord};
use prost::Message;

/// The bytes of one record.
pub fn encode(event: &Event) -> Vec<u8> {
    JournalRecord {
        record: Some(record(event)),
    }
    .encode_to_vec()
}

/// The event of one record's bytes, or why they are not one.
pub fn decode(payload: &[u8]) -> Result<Event, String> {
    let r = JournalRecord::decode(payload).map_err(|e| format!("it does not decode ({e})"))?;
    event(r.record.ok_or("its record is empty")?)
}

fn record(event: &Event) -> Record {
    match event.clone() {
        Event::Boot { epoch, unix_ms } => Record::Boot(v1::Boot { epoch, unix_ms }),
        Event::JobSubmitted {
            job,
            spec,
            unix_ms,
            checking,
        } => Record::JobSubmitted(v1::JobSubmitted {
            job_id: job,
            plan: Some(v1::PlanSpec::from(&spec)),
            unix_ms,
            redundancy: checking.redundancy,
            verify_fraction: checking.fraction,
            cross_device: checking.cross_device,
        }),
        Event::JobPlanned { job, tasks, digest } => Record::JobPlanned(v1::JobPlanned {
            job_id: job,
            tasks,
            digest,
        }),
        Event::JobControlled { job, state } => Record::JobState(v1::JobStateChanged {
            job_id: job,
            state: control_to_record(state) as i32,
        }),
        Event::TaskDone(d) => Record::TaskDone(v1::TaskDone {
            job_id: d.job,
            task_index: d.task,
            result: Some(outcome_to_record(&d.outcome)),
            worker_id: d.worker,
            lease_id: d.lease_id,
            unix_ms: d.unix_ms,
            credential: d.credential,
        }),
        Event::TaskConflict {
            job,
            task,
            outcome,
            worker,
            unix_ms,
        } => Record::TaskConflict(v1::TaskConflict {
            job_id: job,
            task_index: task,
            result: Some(outcome_to_record(&outcome)),
            worker_id: worker,
            unix_ms,
        }),
        Event::TaskDead { job, task, reason } => Record::TaskDead(v1::TaskDead {
            job_id: job,
            task_index: task,
            reason,
        }),
        Event::TasksRetried { job, unix_ms } => Record::TasksRetried(v1::TasksRetried {
            job_id: job,
            unix_ms,
        }),
        Event::JobDeleted { job, unix_ms } => Record::JobDeleted(v1::JobDeleted {
            job_id: job,
            unix_ms,
        }),
        Event::WorkerBound {
            worker,
            credential,
            unix_ms,
            claimed,
        } => Record::WorkerBound(v1::WorkerBound {
            worker_id: worker,
            credential,
            unix_ms,
            claimed,
        }),
    }
}

fn event(r: Record) -> Result<Event, String> {
    Ok(match r {
        Record::Boot(b) => Event::Boot {
            epoch: b.epoch,
            unix_ms: b.unix_ms,
        },
        Record::JobSubmitted(s) => Event::JobSubmitted {
            job: s.job_id,
            spec: PlanSpec::try_from(s.plan.as_ref().ok_or("a job without a plan")?)
                .map_err(|e| format!("its plan: {e}"))?,
            unix_ms: s.unix_ms,
            checking: Checking {
                redundancy: s.redundancy,
                fraction: s.verify_fraction,
                cross_device: s.cross_device,
            },
        },
        Record::JobPlanned(p) => Event::JobPlanned {
            job: p.job_id,
            tasks: p.tasks,
            digest: p.digest,
        },
        Record::JobState(c) => Event::JobControlled {
            job: c.job_id,
            state: control_from_record(c.state)?,
        },
        Record::TaskDone(d) => Event::TaskDone(Done {
            job: d.job_id,
            task: d.task_index,
            outcome: outcome_from_record(d.result.as_ref())?,
            worker: d.worker_id,
            lease_id: d.lease_id,
            unix_ms: d.unix_ms,
            credential: d.credential,
        }),
        Record::TaskConflict(c) => Event::TaskConflict {
            job: c.job_id,
            task: c.task_index,
            outcome: outcome_from_record(c.result.as_ref())?,
            worker: c.worker_id,
            unix_ms: c.unix_ms,
        },
        Record::TaskDead(d) => Event::TaskDead {
            job: d.job_id,
            task: d.task_index,
            reason: d.reason,
        },
        Record::TasksRetried(t) => Event::TasksRetried {
            job: t.job_id,
            unix_ms: t.unix_ms,
        },
        Record::JobDeleted(d) => Event::JobDeleted {
            job: d.job_id,
            unix_ms: d.unix_ms,
        },
        Record::WorkerBound(b) => Event::WorkerBound {
            worker: b.worker_id,
            credential: b.credential,
            unix_ms: b.unix_ms,
            claimed: b.claimed,
        },
    })
}

fn control_to_record(state: JobState) -> JournalJobState {
    match state {
        JobState::Paused => JournalJobState::Paused,
        JobState::Cancelled => JournalJobState::Cancelled,
        // Only the operator's three states are journaled.
        JobState::Running | JobState::Planning | JobState::Done => JournalJobState::Running,
    }
}

fn control_from_record(state: i32) -> Result<JobState, String> {
    match JournalJobState::try_from(state) {
        Ok(JournalJobState::Running) => Ok(JobState::Running),
        Ok(JournalJobState::Paused) => Ok(JobState::Paused),
        Ok(JournalJobState::Cancelled) => Ok(JobState::Cancelled),
        _ => Err(format!("it sets a job to an unknown state ({state})")),
    }
}

fn outcome_to_record(o: &Outcome) -> v1::JournalResult {
    let t = &o.tally;
    let u = |x: u128| Some(v1::U128::from(x));
    v1::JournalResult {
        c1: u(t.classes.c1),
        c2: u(t.classes.c2),
        c4: u(t.classes.c4),
        c8: u(t.classes.c8),
        nodes: u(t.classes.nodes),
        weighted: u(t.weighted),
        half: u(t.half),
        quarter: u(t.quarter),
        elapsed_ms: o.elapsed_ms,
        solver_version: o.solver_version.clone(),
        checksum: o.checksum,
    }
}

fn outcome_from_record(r: Option<&v1::JournalResult>) -> Result<Outcome, String> {
    let r = r.ok_or("a result without counts")?;
    // Absent counts are zeros (proto3 leaves them out).
    let u = |w: &Option<v1::U128>| w.as_ref().map_or(0, u128::from);
    Ok(Outcome {
        tally: Tally {
            classes: Totals {
                c1: u(&r.c1),
                c2: u(&r.c2),
                c4: u(&r.c4),
                c8: u(&r.c8),
                nodes: u(&r.nodes),
            },
            weighted: u(&r.weighted),
            half: u(&r.half),
            quarter: u(&r.quarter),
        },
        checksum: r.checksum,
        elapsed_ms: r.elapsed_ms,
        solver_version: r.solver_version.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_common::plan::Strategy;
    use nqueens_common::Size;

    fn events() -> Vec<Event> {
        let outcome = Outcome {
            tally: Tally {
                classes: Totals {
                    c1: u128::MAX,
                    c2: 1 << 70,
                    c4: 0,
                    c8: 3,
                    nodes: 5,
                },
                weighted: 7,
                half: 9,
                quarter: 11,
            },
            checksum: 0xfeed,
            elapsed_ms: 12,
            solver_version: "0.1.0 avx2".into(),
        };
        let spec = PlanSpec::backtracking(Size::new(12).unwrap(), Strategy::Frame, 1, 40);
        vec![
            Event::Boot {
                epoch: 3,
                unix_ms: 4,
            },
            Event::JobSubmitted {
                job: 1,
                spec,
                unix_ms: 5,
                checking: Checking {
                    redundancy: 2,
                    fraction: 0.25,
                    cross_device: true,
                },
            },
            Event::JobPlanned {
                job: 1,
                tasks: 40,
                digest: 77,
            },
            Event::JobControlled {
                job: 1,
                state: JobState::Paused,
            },
            Event::JobControlled {
                job: 1,
                state: JobState::Cancelled,
            },
            Event::TaskDone(Done {
                job: 1,
                task: 2,
                outcome: outcome.clone(),
                worker: "w".into(),
                lease_id: 99,
                unix_ms: 6,
                credential: "node1".into(),
            }),
            Event::TaskConflict {
                job: 1,
                task: 2,
                outcome,
                worker: "x".into(),
                unix_ms: 7,
            },
            Event::TaskDead {
                job: 1,
                task: 3,
                reason: "out of retries".into(),
            },
            Event::TasksRetried { job: 1, unix_ms: 8 },
            Event::JobDeleted { job: 1, unix_ms: 9 },
            Event::WorkerBound {
                worker: "w".into(),
                credential: "node1".into(),
                unix_ms: 10,
                claimed: true,
            },
        ]
    }

    #[test]
    fn every_event_reads_back_as_itself() {
        for e in events() {
            assert_eq!(decode(&encode(&e)), Ok(e.clone()), "{e:?}");
        }
    }

    #[test]
    fn records_that_are_no_event_are_refused_with_a_reason() {
        let empty = JournalRecord { record: None }.encode_to_vec();
        assert!(decode(&empty).unwrap_err().contains("empty"));
        assert!(decode(&[0xff, 0xff]).unwrap_err().contains("decode"));
        let state = |s| JournalRecord {
            record: Some(Record::JobState(v1::JobStateChanged {
                job_id: 1,
                state: s,
            })),
        };
        assert!(decode(&state(0).encode_to_vec())
            .unwrap_err()
            .contains("unknown state"));
        assert!(decode(&state(9).encode_to_vec()).is_err());
        let no_plan = JournalRecord {
            record: Some(Record::JobSubmitted(v1::JobSubmitted::default())),
        };
        assert!(decode(&no_plan.encode_to_vec())
            .unwrap_err()
            .contains("plan"));
        let no_result = JournalRecord {
            record: Some(Record::TaskDone(v1::TaskDone::default())),
        };
        assert!(decode(&no_result.encode_to_vec())
            .unwrap_err()
            .contains("counts"));
    }

    /// A result record is the RPC's `TaskResult` on the wire, field for
    /// field: journals written when the journal held `TaskResult` read.
    #[test]
    fn a_result_journaled_as_the_rpc_message_reads() {
        let Event::TaskDone(d) = events().swap_remove(5) else {
            panic!("the sixth event is a result");
        };
        let rpc = v1::TaskResult {
            c1: Some(v1::U128::from(d.outcome.tally.classes.c1)),
            c2: Some(v1::U128::from(d.outcome.tally.classes.c2)),
            c8: Some(v1::U128::from(d.outcome.tally.classes.c8)),
            nodes: Some(v1::U128::from(d.outcome.tally.classes.nodes)),
            weighted: Some(v1::U128::from(d.outcome.tally.weighted)),
            half: Some(v1::U128::from(d.outcome.tally.half)),
            quarter: Some(v1::U128::from(d.outcome.tally.quarter)),
            elapsed_ms: d.outcome.elapsed_ms,
            solver_version: d.outcome.solver_version.clone(),
            checksum: d.outcome.checksum,
            ..Default::default()
        };
        let as_journal = v1::JournalResult::decode(rpc.encode_to_vec().as_slice()).unwrap();
        assert_eq!(outcome_from_record(Some(&as_journal)), Ok(d.outcome));
    }
}
