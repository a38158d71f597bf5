//! Worker calls: admission and credential binding, register, lease,
//! heartbeat, release, report, and the sweep that expires leases.

use super::*;

impl Coordinator {
    /// A worker's public tag (see [`crate::state::State::worker_tag`]).
    pub fn worker_tag(&self, worker: &str) -> String {
        self.lock().worker_tag(worker)
    }

    /// Every worker with the leases it holds now (count, and the oldest).
    pub fn workers(&self) -> Vec<(WorkerInfo, usize, Option<LeaseRef>)> {
        let s = self.lock();
        let mut held: std::collections::HashMap<&str, (usize, Option<LeaseRef>)> =
            std::collections::HashMap::new();
        for (lease, worker) in s.all_leases() {
            let h = held.entry(worker).or_default();
            h.0 += 1;
            h.1.get_or_insert(lease);
        }
        s.workers()
            .map(|w| {
                let (n, first) = held.get(w.id.as_str()).copied().unwrap_or_default();
                (w.clone(), n, first)
            })
            .collect()
    }

    /// Admits a worker id, and ties it to the issued credential that first
    /// uses it, durably (a `WorkerBound` record) before the call is
    /// answered: after a restart no other credential can claim it. The id
    /// is claimed while its binding is written, so a call with another
    /// credential meanwhile is refused (as it is once the binding holds).
    pub(super) async fn admit(&self, worker: &str, credential: &str) -> Result<(), CoordError> {
        let (new, claim) = {
            let mut s = self.lock();
            if s.admit(worker).is_err() {
                // Full: forget the longest silent worker that left nothing
                // behind, else whose results are all settled, holding no
                // lease, silent for half a lease's life at least (two of
                // its heartbeats: a live worker is never taken), so that
                // made-up ids hold their places only while each is beaten
                // twice a lease's life. A worker forgotten loses nothing
                // but its figures: its next call's answer asks it to
                // register again.
                // As many as the table holds past its limit (a replay
                // brings back ids forgotten before it), and one more.
                let before = self.silent_before(s.limits().lease_ttl_ms / 2);
                let over = s
                    .workers()
                    .count()
                    .saturating_sub(crate::state::MAX_WORKERS);
                s.forget_workers(before, over + 1, crate::state::Forget::Settled);
            }
            s.admit(worker)?;
            match s.may_bind(worker, credential)? {
                true => (true, self.claim_binding(worker, credential)?),
                false => (false, None),
            }
        };
        if new {
            let bound = Event::WorkerBound {
                worker: worker.to_string(),
                credential: credential.to_string(),
                unix_ms: self.now_ms(),
                claimed: true,
            };
            self.write_holding(bound, claim).await?;
        }
        Ok(())
    }

    /// Claims worker id `worker` for `credential` while its binding is
    /// written (`None`: a call with the same credential is writing it);
    /// refused while a call with another credential is.
    fn claim_binding(
        &self,
        worker: &str,
        credential: &str,
    ) -> Result<Option<claims::Claim<String, String>>, StateError> {
        match self
            .binding
            .claim(worker.to_string(), credential.to_string())
        {
            Ok(claim) => Ok(Some(claim)),
            Err(same) if same == credential => Ok(None),
            Err(bound) => Err(StateError::WrongCredential {
                worker: worker.to_string(),
                bound,
            }),
        }
    }

    /// The time before which a worker silent for `quiet_ms` was last heard
    /// from; 0 (none) until this coordinator has run that long, so that
    /// workers still reconnecting after a restart are not forgotten.
    pub(super) fn silent_before(&self, quiet_ms: u64) -> u64 {
        let now = self.now_ms();
        match now.saturating_sub(self.started_ms) >= quiet_ms {
            true => now - quiet_ms,
            false => 0,
        }
    }

    /// A worker's description (sent again after every reconnect).
    pub async fn register(
        &self,
        worker: &str,
        credential: &str,
        name: &str,
        host: &str,
        cores: u32,
        version: &str,
    ) -> Result<(), CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let mut s = self.lock();
        s.admit(worker)?;
        let w = s.touch_worker(worker, now);
        let again = w.registered;
        w.name = name.to_string();
        w.host = host.to_string();
        w.cores = cores;
        w.solver_version = version.to_string();
        w.registered = true;
        w.draining = false;
        match again {
            false => tracing::info!(worker, name, host, cores, version, "worker joined"),
            true => tracing::debug!(worker, "worker registered again"),
        }
        Ok(())
    }

    /// Whether the coordinator has this worker's description (else it
    /// asks the worker to register again).
    pub fn registered(&self, worker: &str) -> bool {
        self.lock().worker(worker).is_some_and(|w| w.registered)
    }

    pub async fn lease(
        &self,
        worker: &str,
        credential: &str,
        max: usize,
    ) -> Result<Vec<Granted>, CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let g = {
            let mut s = self.lock();
            s.admit(worker)?;
            s.lease(worker, max, now)
        };
        if !g.is_empty() {
            self.bump();
        }
        Ok(g)
    }

    pub async fn heartbeat(
        &self,
        worker: &str,
        credential: &str,
        refs: &[LeaseRef],
        subproblems_done: u64,
        draining: bool,
    ) -> Result<(Vec<LeaseRef>, u64, Vec<LeaseRef>), CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let mut s = self.lock();
        s.admit(worker)?;
        let beat = s.heartbeat(worker, refs, subproblems_done, now);
        s.touch_worker(worker, now).draining = draining;
        Ok(beat)
    }

    /// Hands back every lease of the workers bound to `credential`
    /// (revoked); returns how many.
    pub fn release_credential(&self, credential: &str) -> usize {
        let released = self.lock().release_credential(credential);
        self.bump();
        released
    }

    /// Hands back the leases of workers bound to no issued credential
    /// (workers just protected refuse them); returns how many.
    pub fn release_unbound(&self) -> usize {
        let released = self.lock().release_unbound();
        self.bump();
        released
    }

    pub async fn release(
        &self,
        worker: &str,
        credential: &str,
        refs: &[LeaseRef],
    ) -> Result<u32, CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let n = {
            let mut s = self.lock();
            s.admit(worker)?;
            s.release(worker, refs, now)
        };
        self.bump();
        Ok(n)
    }

    /// Stores a result: on disk before this returns `New`.
    pub async fn report(
        &self,
        worker: &str,
        credential: &str,
        r: LeaseRef,
        result: Outcome,
    ) -> Result<Verdict, CoordError> {
        let mut answers = self
            .report_all(worker, credential, vec![(r, result)])
            .await?;
        answers.pop().expect("one report, one answer")
    }

    /// Stores a worker's results: each one's verdict (`New` once on disk)
    /// or why it was refused; those to journal share one write and one
    /// fsync. Fails as a whole only when the worker is not admitted or the
    /// journal cannot be written.
    pub async fn report_all(
        &self,
        worker: &str,
        credential: &str,
        reports: Vec<(LeaseRef, Outcome)>,
    ) -> Result<Vec<Result<Verdict, CoordError>>, CoordError> {
        self.admit(worker, credential).await?;
        // The credential this call proved (the one its worker id is bound
        // to, `admit` checked), not a lookup a forgotten id would miss.
        let credential = credential.to_string();
        let checked: Vec<_> = {
            let s = self.lock();
            reports
                .iter()
                .map(|(r, o)| s.check_report(worker, r, &o.tally, o.checksum))
                .collect()
        };
        let now = self.now_ms();
        let mut answers = Vec::with_capacity(reports.len());
        let (mut events, mut written) = (Vec::new(), Vec::new());
        // Held until the events are applied, by the write (see `claims.rs`).
        let (mut claims, mut keeping) = (Vec::new(), Vec::new());
        for (i, (checked, (r, result))) in checked.into_iter().zip(reports).enumerate() {
            let verdict = match checked {
                // Counted long ago: compared with the store's row.
                Err(StateError::ResultNotInMemory { job, task }) => {
                    self.compare_with_row(job, task, &result).await
                }
                other => other.map_err(CoordError::from),
            };
            let done = Done {
                job: r.job,
                task: r.task,
                outcome: result,
                worker: worker.to_string(),
                lease_id: r.lease_id,
                unix_ms: now,
                credential: credential.clone(),
            };
            match verdict.map(|v| self.settle(v, done, &mut claims)) {
                Ok((v, None)) => answers.push(Ok(v)),
                Ok((Verdict::NotCounted, Some(event))) => {
                    // With those kept already and those this and other
                    // calls are writing, no more than the ledger keeps of
                    // one worker.
                    let s = self.lock();
                    let room = |writing| s.room_to_keep(r.job, worker, writing);
                    if let Some(kept) = self.keeping.reserve((r.job, worker.to_string()), room) {
                        keeping.push(kept);
                        events.push(event);
                        written.push((i, Verdict::NotCounted));
                    }
                    answers.push(Ok(Verdict::NotCounted));
                }
                Ok((v, Some(event))) => {
                    events.push(event);
                    written.push((i, v));
                    answers.push(Ok(v));
                }
                Err(e) => answers.push(Err(e)),
            }
        }
        if !events.is_empty() {
            let applied = self.write_all(events, (claims, keeping)).await?;
            for ((i, v), applied) in written.into_iter().zip(applied) {
                // A concurrent report may have won meanwhile: `apply` then
                // answers Duplicate or Conflict, and never adds twice.
                answers[i] = match (v, applied) {
                    (Verdict::New, Ok(applied)) => Ok(applied.unwrap_or(Verdict::New)),
                    (v, Ok(_)) => Ok(v),
                    (_, Err(e)) => Err(e.into()),
                };
            }
        }
        Ok(answers)
    }

    /// What a checked report leads to: its answer, and the event to
    /// journal first if any (after which `New` may turn out a duplicate).
    /// A record for the audit alone is journaled once: `claims` holds
    /// those this call writes until they are applied.
    fn settle(
        &self,
        verdict: Verdict,
        d: Done,
        claims: &mut Vec<claims::Claim<claims::Record, ()>>,
    ) -> (Verdict, Option<Event>) {
        let worker = d.worker.as_str();
        match verdict {
            Verdict::Duplicate => {
                self.lock().note_duplicate();
                (verdict, None)
            }
            Verdict::AwaitingCheck => (verdict, None),
            Verdict::NotCounted if !self.lock().quarantined(worker) => (verdict, None),
            Verdict::NotCounted | Verdict::Conflict
                if !self.first_to_record(verdict, &d, claims) =>
            {
                (verdict, None)
            }
            Verdict::NotCounted => {
                // Kept in the journal for the audit, never counted.
                tracing::warn!(
                    job = d.job,
                    task = d.task,
                    worker,
                    "result of a quarantined worker: journaled, not counted"
                );
                (Verdict::NotCounted, Some(Event::TaskDone(d)))
            }
            Verdict::New => {
                tracing::debug!(job = d.job, task = d.task, worker, "result counted");
                (Verdict::New, Some(Event::TaskDone(d)))
            }
            Verdict::Conflict => {
                tracing::warn!(
                    job = d.job,
                    task = d.task,
                    worker,
                    "verification conflict: result differs from the stored one"
                );
                let conflict = Event::TaskConflict {
                    job: d.job,
                    task: d.task,
                    worker: d.worker,
                    outcome: d.outcome,
                    unix_ms: d.unix_ms,
                };
                (Verdict::Conflict, Some(conflict))
            }
        }
    }

    /// Whether this call journals the record that report `d` with verdict
    /// `v` makes for the audit: not when it is on record already, nor
    /// while another call writes it (checked under the state's lock, under
    /// which a record is applied before its claim ends).
    fn first_to_record(
        &self,
        v: Verdict,
        d: &Done,
        claims: &mut Vec<claims::Claim<claims::Record, ()>>,
    ) -> bool {
        let s = self.lock();
        if s.on_record(v, d) {
            return false;
        }
        let Ok(claim) = self.recording.claim(claims::Record::of(v, d), ()) else {
            return false;
        };
        drop(s);
        claims.push(claim);
        true
    }

    /// A report of a task counted long ago, whose result left memory:
    /// a duplicate if the store's row has the same counts and checksum,
    /// else a conflict.
    async fn compare_with_row(
        &self,
        job: u64,
        task: u64,
        result: &Outcome,
    ) -> Result<Verdict, CoordError> {
        match self.store_writer().lookup(job, task).await {
            Some(row)
                if row.outcome.tally == result.tally && row.outcome.checksum == result.checksum =>
            {
                Ok(Verdict::Duplicate)
            }
            Some(_) => Ok(Verdict::Conflict),
            None => Err(StateError::ResultNotInMemory { job, task }.into()),
        }
    }

    /// Expires overdue leases; tasks out of retries are journaled dead.
    pub async fn sweep(&self) -> Result<(), CoordError> {
        let now = self.now_ms();
        // Silent workers are forgotten once a minute, not on every sweep:
        // it walks every worker and lease.
        let forget = now.saturating_sub(self.forgot_ms.load(Ordering::Relaxed)) >= 60_000;
        let forget_before = self.silent_before(crate::state::FORGET_AFTER_MS);
        let (expired, (lost, quarantined)) = {
            let mut s = self.lock();
            let ttl = s.limits().lease_ttl_ms;
            if forget {
                self.forgot_ms.store(now, Ordering::Relaxed);
                s.forget_workers(forget_before, usize::MAX, crate::state::Forget::Idle);
            }
            (s.expire(now), s.workers_news(now.saturating_sub(ttl)))
        };
        self.bump();
        for w in lost {
            match w.draining {
                true => {
                    tracing::info!(worker = %w.id, name = %w.name, host = %w.host, "worker left: silent after draining")
                }
                false => {
                    tracing::warn!(worker = %w.id, name = %w.name, host = %w.host, last_seen_ms = w.last_seen_ms, "worker lost: not heard from within a lease's lifetime")
                }
            }
        }
        for w in quarantined {
            tracing::warn!(worker = %w.id, name = %w.name, host = %w.host, conflicts = w.conflicts, "worker quarantined: a result of it was contradicted; it gets no more work and its results are not counted");
        }
        let mut dying = Vec::new();
        for e in expired {
            match e.dying {
                false => {
                    tracing::info!(job = e.job, task = e.task, worker = %e.worker, "lease expired; task requeued after a backoff")
                }
                true => dying.push((e.job, e.task, e.worker)),
            }
        }
        for (job, task, worker) in dying {
            tracing::warn!(job, task, %worker, "lease expired and the task is out of retries: marked dead");
            self.write(Event::TaskDead {
                job,
                task,
                reason: "out of retries: every lease expired".into(),
            })
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A coordinator on `dir`, its clock stopped, serving nothing.
    async fn open(dir: &Path) -> Arc<Coordinator> {
        open_with(dir, IoMode::Inline).await
    }

    async fn open_with(dir: &Path, io: IoMode) -> Arc<Coordinator> {
        let lock = lock_dir(dir).unwrap();
        let clock = Arc::new(ManualClock::default());
        Coordinator::open(lock, dir, Limits::default(), clock, None, io)
            .await
            .unwrap()
    }

    /// A table full of workers whose results are all counted (a run of
    /// weeks whose worker processes each took a new id), or quarantined
    /// (ids made to lie), and past its limit (a replay brings back ids
    /// forgotten before it): a newcomer takes the place of one silent for
    /// half a lease's life, the table back at its limit, and is refused
    /// while every one is fresher.
    #[tokio::test]
    async fn a_table_full_of_settled_workers_takes_a_newcomer() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let lock = lock_dir(dir.path()).unwrap();
        let limits = Limits::default();
        let core = Coordinator::open(
            lock,
            dir.path(),
            limits,
            clock.clone(),
            None,
            IoMode::Inline,
        )
        .await
        .unwrap();
        let most = crate::state::MAX_WORKERS;
        for i in 0..most + 5 {
            let mut s = core.lock();
            let w = s.touch_worker(&format!("w{i}"), 0);
            w.tasks_done = 1;
            w.conflicts = u64::from(i % 2 == 1);
        }
        let refused = core.admit("newcomer", "").await;
        assert!(
            matches!(
                refused,
                Err(CoordError::State(StateError::TooManyWorkers(_)))
            ),
            "{refused:?}"
        );
        clock.advance(limits.lease_ttl_ms / 2 + 1);
        core.admit("newcomer", "").await.unwrap();
        assert!(core.lock().worker("w0").is_none());
        // The newcomer's place is free: it takes it when it calls.
        assert_eq!(core.lock().workers().count(), most - 1);
    }

    /// A call dropped while its record is being written (its client went
    /// away): the record is applied all the same, so the state holds
    /// every record journaled and checkpoints go on (before, the record
    /// was on disk but never applied, and every later checkpoint failed),
    /// and its claim lasts until then: another credential is refused the
    /// id meanwhile, as after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_dropped_mid_write_leaves_its_record_applied() {
        let dir = tempfile::tempdir().unwrap();
        let core = open_with(dir.path(), IoMode::Threads).await;
        let mut changed = core.subscribe();
        // Polled once (its record handed to the journal's writer), then
        // dropped, as a call is when its client goes.
        let mut call = Box::pin(core.admit("w1", "alice"));
        std::future::poll_fn(|cx| {
            let _ = std::future::Future::poll(call.as_mut(), cx);
            std::task::Poll::Ready(())
        })
        .await;
        drop(call);
        let refused = core.admit("w1", "mallory").await;
        assert!(
            matches!(
                refused,
                Err(CoordError::State(StateError::WrongCredential { .. }))
            ),
            "{refused:?}"
        );
        core.admit("w2", "bob").await.unwrap();
        let checkpointed = async {
            while core.checkpoint(true).await.is_err() {
                changed.changed().await.unwrap();
            }
        };
        let bound = std::time::Duration::from_secs(60);
        assert!(tokio::time::timeout(bound, checkpointed).await.is_ok());
        assert_eq!(core.lock().credential_of("w1"), "alice");
    }

    /// Two calls with one record for the audit alone at once (in one
    /// fsync window: neither applied yet): only the first journals it;
    /// once its claim ends (applied, or its write failed), another may.
    #[tokio::test]
    async fn a_record_being_written_is_not_written_by_a_second_call() {
        let dir = tempfile::tempdir().unwrap();
        let core = open(dir.path()).await;
        let liar = |lease_id| Done {
            job: 1,
            task: 7,
            worker: "liar".into(),
            lease_id,
            ..Done::default()
        };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        let (v, event) = core.settle(Verdict::Conflict, liar(5), &mut first);
        assert!(v == Verdict::Conflict && event.is_some());
        // The same worker's conflict on the same task: one record.
        for lease in [5, 6] {
            let (v, event) = core.settle(Verdict::Conflict, liar(lease), &mut second);
            assert!(v == Verdict::Conflict && event.is_none());
        }
        // Another task's is another record.
        let other = Done { task: 8, ..liar(5) };
        assert!(core
            .settle(Verdict::Conflict, other, &mut second)
            .1
            .is_some());
        drop(first);
        assert!(core
            .settle(Verdict::Conflict, liar(5), &mut Vec::new())
            .1
            .is_some());
    }

    /// While a worker id's binding is written, a call with another
    /// credential is refused, and one with the same credential writes it
    /// too (harmless: the same binding); once written, the id is free
    /// to claim again (the state then says whose it is).
    #[tokio::test]
    async fn an_id_being_bound_is_refused_to_another_credential() {
        let dir = tempfile::tempdir().unwrap();
        let core = open(dir.path()).await;
        let alice = core.claim_binding("w1", "alice").unwrap();
        assert!(alice.is_some());
        let refused = core.claim_binding("w1", "mallory").unwrap_err();
        assert!(
            matches!(&refused, StateError::WrongCredential { bound, .. } if bound == "alice"),
            "{refused}"
        );
        assert!(core.claim_binding("w1", "alice").unwrap().is_none());
        assert!(core.claim_binding("w2", "mallory").unwrap().is_some());
        drop(alice);
        assert!(core.claim_binding("w1", "mallory").unwrap().is_some());
    }
}
