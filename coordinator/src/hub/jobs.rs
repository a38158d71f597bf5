//! Jobs: submission, planning, control (pause, resume, cancel, retry,
//! delete), views and the audit when a job ends.

use super::*;

impl Coordinator {
    /// Audits a job that just finished, off the async threads, and logs its
    /// digest and verdict. An audit holds every counted result's counts,
    /// so a job past [`AUDIT_AT_DONE_MAX`] tasks is left to the operator.
    pub(super) fn audit_in_background(&self, id: u64, tasks: u64) {
        if tasks > AUDIT_AT_DONE_MAX {
            tracing::info!(job = id, tasks, "job not audited inside the coordinator (too large): run `nqueens audit {id} --data-dir DIR` on a machine with the memory");
            return;
        }
        let journal = self.data_dir.join("journal");
        let started = std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || match crate::audit::audit(&journal, id) {
                Ok(a) => tracing::info!(
                    job = id,
                    digest = %a.digest,
                    passed = a.passed(),
                    complete = a.complete(),
                    problems = a.problems.len(),
                    "job audited"
                ),
                Err(e) => tracing::warn!(job = id, error = %e, "job audit failed"),
            });
        if let Err(e) = started {
            tracing::warn!(job = id, error = %e, "cannot start the job's audit");
        }
    }

    /// Attaches a job's tasks: from the store when they match the journal's
    /// digest, else computed off the async threads (and stored). A job
    /// planned for the first time gets its JobPlanned record. True when
    /// the tasks were computed.
    pub(super) async fn plan_job(
        &self,
        id: u64,
        spec: PlanSpec,
        planned: Option<(u64, u64)>,
    ) -> Result<bool, CoordError> {
        let derived = Plan::new(spec)?.derived_tasks().is_some();
        if let (Some((count, want)), false) = (planned, derived) {
            let stored = self.store.table(id).map(TaskList::Listed);
            if let Some(tasks) = stored.filter(|t| t.count() == count && t.matches(want)) {
                self.lock().attach_tasks(id, tasks)?;
                self.bump();
                return Ok(false);
            }
            tracing::info!(job = id, "task list not in the store; re-planning");
        }
        let stop = Arc::new(AtomicBool::new(self.stopping.load(Ordering::Relaxed)));
        self.planning_flags().insert(id, Arc::clone(&stop));
        let scheduled = self
            .blocking("planning thread", move || {
                Plan::new(spec).and_then(|p| TaskList::of(&p, &stop))
            })
            .await;
        self.planning_flags().remove(&id);
        let tasks = scheduled?;
        // A listed plan is kept in the store (a derived one needs nothing).
        if let TaskList::Listed(table) = &tasks {
            match self.writes.get() {
                Some(w) => w.table(id, table.clone()),
                // Start-up: nothing else uses the store yet.
                None => self.store.put_table(id, table)?,
            }
        }
        if planned.is_none() {
            self.write(Event::JobPlanned {
                job: id,
                tasks: tasks.count(),
                digest: tasks.digest(),
            })
            .await?;
        }
        self.lock().attach_tasks(id, tasks)?;
        self.bump();
        Ok(true)
    }

    /// Accepts a job; planning continues in the background.
    pub async fn submit(
        self: &Arc<Self>,
        spec: PlanSpec,
        checking: Checking,
    ) -> Result<JobView, CoordError> {
        // A plan too large to schedule is refused now, with its size,
        // rather than planned without bound.
        let plan = Plan::new(spec)?;
        let plan_listed = plan.derived_tasks().is_none();
        self.blocking("size check", move || plan.check_size())
            .await?;
        let max = self.limits().max_tasks;
        if spec.tasks > max && plan_listed {
            return Err(CoordError::TooManyTasks {
                asked: spec.tasks,
                max,
            });
        }
        let _one_at_a_time = self.submit.lock().await;
        let id = self.lock().next_job_id();
        self.write(Event::JobSubmitted {
            job: id,
            spec,
            unix_ms: self.now_ms(),
            checking,
        })
        .await?;
        tracing::info!(job = id, n = spec.n.get(), strategy = %spec.strategy, depth = spec.depth, tasks = spec.tasks, redundancy = checking.redundancy, cross_device = checking.cross_device, "job submitted");
        self.plan_in_background(id, spec);
        self.job(id)
    }

    /// Plans a job on a blocking thread; cancel and shutdown stop it.
    pub(super) fn plan_in_background(self: &Arc<Self>, id: u64, spec: PlanSpec) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            match me.plan_job(id, spec, None).await {
                Ok(_) => {
                    let tasks = me.job(id).map_or(0, |j| j.tasks);
                    tracing::info!(job = id, tasks, "job planned")
                }
                Err(CoordError::Plan(PlanError::Stopped)) => {
                    tracing::info!(
                        job = id,
                        "planning stopped (job cancelled, or shutting down)"
                    )
                }
                Err(e) => tracing::error!(job = id, error = %e, "planning failed"),
            }
        });
    }

    pub(super) fn planning_flags(
        &self,
    ) -> MutexGuard<'_, std::collections::HashMap<u64, Arc<AtomicBool>>> {
        self.planning.lock().expect("planning lock poisoned")
    }

    /// Whether a job that finishes is audited in the background (on by
    /// default; see [`crate::server::Config::audit_when_done`]).
    pub fn set_audit_when_done(&self, on: bool) {
        self.audit_when_done.store(on, Ordering::Relaxed);
    }

    /// Stops every plan being computed, and any later one (at shutdown:
    /// a plan can take minutes, and nothing of it is durable until done).
    pub fn stop_planning(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for flag in self.planning_flags().values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether job `id` is being planned now.
    pub fn is_planning(&self, id: u64) -> bool {
        self.planning_flags().contains_key(&id)
    }

    pub fn job(&self, id: u64) -> Result<JobView, CoordError> {
        Ok(self.lock().job_view(id, self.now_ms())?)
    }

    /// A page of job `id`'s counted results from task `from` on, in task
    /// order, each with its task (`None` while the job is not planned),
    /// read from the store: call [`Coordinator::sync_store`] first so that
    /// every result counted so far is there.
    pub fn export_page(
        &self,
        id: u64,
        from: u64,
        max: usize,
    ) -> Result<Vec<(Option<Task>, Done)>, CoordError> {
        self.lock().job(id)?;
        let rows = self.store.results_from(id, from, max);
        let state = self.lock();
        let job = state.job(id)?;
        Ok(rows.into_iter().map(|d| (job.task(d.task), d)).collect())
    }

    /// Writes every result row the store's thread holds: an error if the
    /// store is still behind the records applied before the call (a store
    /// write failed, e.g. on a full disk, and its rows are only in the
    /// journal until a restart rebuilds them).
    pub async fn sync_store(&self) -> Result<(), CoordError> {
        let needed = self.applied.lock().expect("applied lock").last();
        let synced = self.store_writer().sync().await;
        if synced < needed {
            return Err(CoordError::Store(crate::store::StoreError::Behind {
                synced,
                needed,
            }));
        }
        Ok(())
    }

    pub fn jobs(&self) -> Vec<JobView> {
        let state = self.lock();
        let now = self.now_ms();
        state
            .jobs()
            .filter_map(|j| state.job_view(j.id, now).ok())
            .collect()
    }

    /// Deletes a done or cancelled job (durably): it leaves the state, its
    /// rows and task list leave the store. Returns its counted results.
    pub async fn delete(&self, id: u64) -> Result<u64, CoordError> {
        let view = self.lock().job(id)?.view();
        if !matches!(view.state, JobState::Done | JobState::Cancelled) {
            return Err(StateError::NotDeletable {
                job: id,
                state: view.state,
            }
            .into());
        }
        self.write(Event::JobDeleted {
            job: id,
            unix_ms: self.now_ms(),
        })
        .await?;
        self.store_writer().delete_job(id);
        tracing::info!(job = id, results = view.done, total = %view.total, unique = %view.unique, "job deleted");
        Ok(view.done)
    }

    /// Puts a job's dead tasks back in its schedule (durably): refused for a
    /// cancelled job, or one without dead tasks.
    pub async fn retry(&self, id: u64) -> Result<JobView, CoordError> {
        let view = self.lock().job(id)?.view();
        if view.state == JobState::Cancelled {
            return Err(StateError::Finished {
                job: id,
                state: view.state,
                action: "retried",
            }
            .into());
        }
        if view.dead == 0 {
            return Err(StateError::NothingToRetry { job: id }.into());
        }
        self.write(Event::TasksRetried {
            job: id,
            unix_ms: self.now_ms(),
        })
        .await?;
        tracing::info!(job = id, tasks = view.dead, "dead tasks retried");
        self.job(id)
    }

    /// Pauses, resumes or cancels a job. Asked of a job already so, it
    /// answers the job and journals nothing (a script may ask twice).
    pub async fn set_state(&self, id: u64, to: JobState) -> Result<JobView, CoordError> {
        let to = match to {
            JobState::Paused | JobState::Running => to,
            _ => JobState::Cancelled,
        };
        let now = self.lock().job(id)?.state();
        if now == to {
            return self.job(id);
        }
        let action = match to {
            JobState::Paused => "paused",
            JobState::Running => "resumed",
            _ => "cancelled",
        };
        if matches!(now, JobState::Cancelled | JobState::Done) {
            return Err(StateError::Finished {
                job: id,
                state: now,
                action,
            }
            .into());
        }
        self.write(Event::JobControlled { job: id, state: to })
            .await?;
        tracing::info!(job = id, "job {action}");
        if to == JobState::Cancelled {
            if let Some(flag) = self.planning_flags().get(&id) {
                flag.store(true, Ordering::Relaxed);
            }
        }
        self.job(id)
    }
}
