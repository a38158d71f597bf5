//! The coordinator's own types on the wire: jobs, workers, leases, report
//! verdicts and audits. They stay here, not in `nqueens_proto::convert`
//! (which holds every conversion of the common domain types), because
//! the proto crate cannot depend on the coordinator; they are built from
//! those common conversions. `From` impls where the orphan rule allows
//! (one side is a coordinator type).
//!
//! Two more mappings of [`JobState`] live elsewhere: the
//! journal's record of a state change, written in `hub/jobs.rs`
//! (`set_state`) and read back in `state/mod.rs` (`apply`).

use crate::audit::Audit;
use crate::state::{CountOn, Granted, JobState, JobView, LeaseRef, Outcome, Verdict, WorkerInfo};
use nqueens_common::plan::Tally;
use nqueens_proto::v1;
use nqueens_proto::{known_to_wire, task_to_wire};

/// A job's state as operators see it (planning shows as running; its task
/// count of 0 tells them apart).
impl From<JobState> for v1::JobState {
    fn from(s: JobState) -> Self {
        match s {
            JobState::Planning | JobState::Running => v1::JobState::Running,
            JobState::Paused => v1::JobState::Paused,
            JobState::Cancelled => v1::JobState::Cancelled,
            JobState::Done => v1::JobState::Done,
        }
    }
}

/// A job as operators see it.
impl From<&JobView> for v1::Job {
    fn from(j: &JobView) -> Self {
        v1::Job {
            job_id: j.id,
            plan: Some((&j.spec).into()),
            state: v1::JobState::from(j.state) as i32,
            tasks: j.tasks,
            pending: j.pending,
            leased: j.leased,
            done: j.done,
            failed: j.failed,
            dead: j.dead,
            work_total: j.work_total,
            work_done: j.work_done,
            total: Some(v1::U128::from(j.total)),
            unique: Some(v1::U128::from(j.unique)),
            conflicts: j.conflicts,
            submitted_unix_ms: j.submitted_ms,
            work_per_second: j.work_per_second,
            eta_seconds: j.eta_seconds.unwrap_or(0.0),
            eta_error_seconds: j.eta_error_seconds.unwrap_or(0.0),
            waiting_for: j.waiting_for.clone().unwrap_or_default(),
            active_workers: j.workers,
            redundancy: j.redundancy,
            verify_fraction: j.verify_fraction,
            cross_device: j.cross_device,
            checking: j.checking,
        }
    }
}

/// A worker and the number of leases it holds.
pub fn worker_to_wire(w: &WorkerInfo, leases: usize) -> v1::Worker {
    v1::Worker {
        worker_id: w.id.clone(),
        host: w.host.clone(),
        cores: w.cores,
        solver_version: w.solver_version.clone(),
        last_seen_unix_ms: w.last_seen_ms,
        leases: leases as u32,
        tasks_done: w.tasks_done,
        subproblems_done: w.subproblems_done,
        errors: w.errors,
        conflicts: w.conflicts,
        quarantined: w.quarantined(),
        checked: w.checked,
        name: w.name.clone(),
        draining: w.draining,
        subproblems_per_second: w.rate,
        // Known to the caller, who has the leases and the clock.
        lost: false,
        unheard: !w.heard,
        in_hand: None,
    }
}

/// A lease granted to a worker, with its task.
impl From<&Granted> for v1::Lease {
    fn from(g: &Granted) -> Self {
        v1::Lease {
            job_id: g.job,
            task: Some(task_to_wire(&g.spec, &g.task)),
            lease_id: g.lease_id,
            deadline_unix_ms: g.deadline,
            count_on: match g.count_on {
                CountOn::Any => v1::CountOn::Any,
                CountOn::Card => v1::CountOn::Card,
                CountOn::Cpu => v1::CountOn::Cpu,
            } as i32,
        }
    }
}

impl From<&LeaseRef> for v1::LeaseRef {
    fn from(r: &LeaseRef) -> Self {
        v1::LeaseRef {
            job_id: r.job,
            task_index: r.task,
            lease_id: r.lease_id,
        }
    }
}

impl From<&v1::LeaseRef> for LeaseRef {
    fn from(r: &v1::LeaseRef) -> Self {
        LeaseRef {
            job: r.job_id,
            task: r.task_index,
            lease_id: r.lease_id,
        }
    }
}

impl From<&v1::TaskResult> for Outcome {
    fn from(r: &v1::TaskResult) -> Self {
        Outcome {
            tally: Tally::from(r),
            checksum: r.checksum,
            elapsed_ms: r.elapsed_ms,
            solver_version: r.solver_version.clone(),
        }
    }
}

impl From<&Outcome> for v1::TaskResult {
    fn from(o: &Outcome) -> Self {
        v1::TaskResult {
            elapsed_ms: o.elapsed_ms,
            solver_version: o.solver_version.clone(),
            checksum: o.checksum,
            ..v1::TaskResult::from(&o.tally)
        }
    }
}

impl From<Verdict> for v1::ReportOutcome {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::New => v1::ReportOutcome::Accepted,
            Verdict::Duplicate => v1::ReportOutcome::Duplicate,
            Verdict::Conflict => v1::ReportOutcome::Conflict,
            Verdict::AwaitingCheck => v1::ReportOutcome::AwaitingCheck,
            Verdict::NotCounted => v1::ReportOutcome::NotCounted,
        }
    }
}

/// An audit's findings as the operator service and `nqueens audit
/// --data-dir` print them.
impl From<&Audit> for v1::AuditReport {
    fn from(a: &Audit) -> Self {
        v1::AuditReport {
            job_id: a.job,
            plan: Some((&a.spec).into()),
            state: v1::JobState::from(a.state) as i32,
            journal_records: a.journal_records,
            journal_bytes: a.journal_bytes,
            torn_bytes: a.torn_bytes,
            tasks: a.tasks,
            result_records: a.result_records,
            counted: a.counted,
            total: a.total.map(v1::U128::from),
            unique: a.unique.map(v1::U128::from),
            known: known_to_wire(a.matches_known) as i32,
            digest: a.digest.clone(),
            problems: a.problems.clone(),
            disagreements: a.disagreements.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each conversion read back with the proto crate's conversions (the
    //! ones the CLI and the worker use), through encoded bytes.

    use super::*;
    use nqueens_common::plan::{Mode, Plan, PlanSpec, Strategy};
    use nqueens_common::Size;
    use nqueens_proto::{known_from_wire, task_from_wire, u128_from_wire};
    use prost::Message;

    fn through_bytes<M: Message + Default>(m: &M) -> M {
        M::decode(m.encode_to_vec().as_slice()).unwrap()
    }

    fn spec() -> PlanSpec {
        PlanSpec {
            n: Size::new(11).unwrap(),
            strategy: Strategy::Prefix,
            depth: 3,
            tasks: 20,
            mode: Mode::Backtrack,
            cut: nqueens_common::plan::CUT,
        }
    }

    const STATES: [(JobState, v1::JobState); 5] = [
        (JobState::Planning, v1::JobState::Running),
        (JobState::Running, v1::JobState::Running),
        (JobState::Paused, v1::JobState::Paused),
        (JobState::Cancelled, v1::JobState::Cancelled),
        (JobState::Done, v1::JobState::Done),
    ];

    #[test]
    fn a_job_view_round_trips_through_the_wire() {
        for (state, wire_state) in STATES {
            let view = JobView {
                id: u64::MAX - 3,
                spec: spec(),
                state,
                tasks: 20,
                pending: 11,
                leased: 2,
                done: 5,
                failed: 1,
                dead: 1,
                work_total: 123.5,
                work_done: 40.25,
                total: u128::from(u64::MAX) * 3 + 1,
                unique: 1 << 70,
                conflicts: 4,
                submitted_ms: 1_700_000_000_123,
                workers: 3,
                redundancy: 2,
                verify_fraction: 0.25,
                cross_device: true,
                checking: 6,
                work_per_second: 9.5,
                eta_seconds: Some(12.0),
                eta_error_seconds: Some(1.5),
                waiting_for: Some("workers".into()),
            };
            let w = through_bytes(&v1::Job::from(&view));
            assert_eq!(
                PlanSpec::try_from(w.plan.as_ref().unwrap()).unwrap(),
                view.spec
            );
            assert_eq!(w.state, wire_state as i32);
            assert_eq!(
                (
                    u128_from_wire(w.total.as_ref()),
                    u128_from_wire(w.unique.as_ref())
                ),
                (view.total, view.unique)
            );
            assert_eq!(
                (w.job_id, w.tasks, w.pending, w.leased, w.done, w.failed, w.dead),
                (view.id, 20, 11, 2, 5, 1, 1)
            );
            assert_eq!(
                (
                    w.conflicts,
                    w.submitted_unix_ms,
                    w.active_workers,
                    w.checking
                ),
                (4, view.submitted_ms, 3, 6)
            );
            assert_eq!(
                (w.redundancy, w.verify_fraction, w.cross_device),
                (2, 0.25, true)
            );
            assert_eq!(
                (w.work_total, w.work_done, w.work_per_second),
                (123.5, 40.25, 9.5)
            );
            assert_eq!((w.eta_seconds, w.waiting_for.as_str()), (12.0, "workers"));
            assert_eq!(w.eta_error_seconds, 1.5);
            // Absent values: no ETA reads as 0, nothing waited for as "".
            let idle = JobView {
                eta_seconds: None,
                eta_error_seconds: None,
                waiting_for: None,
                ..view
            };
            let w = through_bytes(&v1::Job::from(&idle));
            assert_eq!((w.eta_seconds, w.waiting_for.as_str()), (0.0, ""));
        }
    }

    #[test]
    fn leases_and_their_references_round_trip() {
        let spec = spec();
        let plan = Plan::new(spec).unwrap();
        for task in &plan.schedule().tasks {
            let g = Granted {
                job: 7,
                spec,
                task,
                lease_id: 0xdead_beef_0000 + task.index,
                deadline: 99,
                count_on: [CountOn::Any, CountOn::Card, CountOn::Cpu][task.index as usize % 3],
            };
            let w = through_bytes(&v1::Lease::from(&g));
            let on = [v1::CountOn::Any, v1::CountOn::Card, v1::CountOn::Cpu];
            assert_eq!(w.count_on, on[task.index as usize % 3] as i32);
            assert_eq!(
                task_from_wire(w.task.as_ref().unwrap()).unwrap(),
                (spec, task)
            );
            assert_eq!(
                (w.job_id, w.lease_id, w.deadline_unix_ms),
                (7, g.lease_id, 99)
            );
            // The worker names it back by the reference the lease carries.
            let r = LeaseRef::from(&through_bytes(&w.lease_ref()));
            assert_eq!(
                r,
                LeaseRef {
                    job: 7,
                    task: task.index,
                    lease_id: g.lease_id
                }
            );
            assert_eq!(LeaseRef::from(&v1::LeaseRef::from(&r)), r);
        }
    }

    #[test]
    fn a_worker_round_trips_through_the_wire() {
        let info = WorkerInfo {
            id: "w-1".into(),
            host: "host".into(),
            cores: 64,
            solver_version: "0.1.0".into(),
            last_seen_ms: 1_700_000_000_000,
            tasks_done: 10,
            subproblems_done: 1 << 40,
            errors: 2,
            conflicts: 1,
            checked: 3,
            name: "rack-7".into(),
            draining: true,
            rate: 12.5,
            ..WorkerInfo::default()
        };
        let w = through_bytes(&worker_to_wire(&info, 5));
        assert_eq!(
            (w.name.as_str(), w.draining, w.subproblems_per_second),
            ("rack-7", true, 12.5)
        );
        assert_eq!(
            (
                w.worker_id.as_str(),
                w.host.as_str(),
                w.solver_version.as_str()
            ),
            ("w-1", "host", "0.1.0")
        );
        assert_eq!(
            (w.cores, w.leases, w.last_seen_unix_ms),
            (64, 5, info.last_seen_ms)
        );
        assert_eq!(
            (
                w.tasks_done,
                w.subproblems_done,
                w.errors,
                w.conflicts,
                w.checked
            ),
            (10, 1 << 40, 2, 1, 3)
        );
        assert!(w.quarantined, "a conflict quarantines");
        let clean = WorkerInfo {
            conflicts: 0,
            ..info
        };
        assert!(!worker_to_wire(&clean, 0).quarantined);
    }

    #[test]
    fn every_verdict_has_its_own_outcome() {
        let all = [
            Verdict::New,
            Verdict::AwaitingCheck,
            Verdict::Duplicate,
            Verdict::Conflict,
            Verdict::NotCounted,
        ];
        let outcomes: std::collections::BTreeSet<i32> = all
            .iter()
            .map(|&v| v1::ReportOutcome::from(v) as i32)
            .collect();
        assert_eq!(outcomes.len(), all.len());
        assert!(!outcomes.contains(&(v1::ReportOutcome::Unspecified as i32)));
        assert_eq!(
            v1::ReportOutcome::from(Verdict::New),
            v1::ReportOutcome::Accepted
        );
    }

    #[test]
    fn an_audit_round_trips_through_the_wire() {
        for (state, wire_state) in STATES {
            for (counts, known) in [
                (Some((2680, 341)), Some(true)),
                (Some((2688, 341)), Some(false)),
                (None, None),
            ] {
                let a = Audit {
                    job: 3,
                    spec: spec(),
                    state,
                    journal_records: 50,
                    journal_bytes: 4096,
                    torn_bytes: 7,
                    tasks: 20,
                    result_records: 22,
                    counted: 20,
                    total: counts.map(|c| c.0),
                    unique: counts.map(|c| c.1),
                    matches_known: known,
                    digest: "ab".repeat(32),
                    problems: vec!["one".into()],
                    disagreements: vec!["task 4: w reported other counts".into()],
                };
                let w = through_bytes(&v1::AuditReport::from(&a));
                assert_eq!(
                    PlanSpec::try_from(w.plan.as_ref().unwrap()).unwrap(),
                    a.spec
                );
                assert_eq!(w.state, wire_state as i32);
                assert_eq!(w.total.as_ref().map(u128::from), a.total);
                assert_eq!(w.unique.as_ref().map(u128::from), a.unique);
                assert_eq!(known_from_wire(w.known), a.matches_known);
                assert_eq!(
                    (w.job_id, w.journal_records, w.journal_bytes, w.torn_bytes),
                    (3, 50, 4096, 7)
                );
                assert_eq!((w.tasks, w.result_records, w.counted), (20, 22, 20));
                assert_eq!(
                    (w.digest, w.problems, w.disagreements),
                    (
                        a.digest.clone(),
                        a.problems.clone(),
                        a.disagreements.clone()
                    )
                );
            }
        }
    }
}
