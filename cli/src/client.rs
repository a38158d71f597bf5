//! The operator's connection to a coordinator: one [`Operator`] per
//! command, each call's failure turned into a [`Failure`] once.

use crate::environ::read_token;
use crate::exit::Failure;
use crate::human::{JobInfo, WorkerRow};
use crate::opts::{Check, Connect};
use nqueens_common::plan::Plan;
use nqueens_proto::client::{connect_tls, Authed};
use nqueens_proto::v1::{self, operator_service_client::OperatorServiceClient};

/// What an operator can do to a job.
#[derive(Clone, Copy, Debug)]
pub enum Control {
    Pause,
    Resume,
    Cancel,
    Retry,
}

/// A connection to one coordinator, as an operator (made inside a runtime).
pub struct Operator {
    pub url: String,
    client: OperatorServiceClient<Authed>,
}

impl Operator {
    pub fn new(c: &Connect) -> Result<Operator, Failure> {
        let token = read_token(c.token_file.as_ref(), "NQUEENS_OPERATOR_TOKEN")?;
        let identity = c.tls_cert.as_deref().zip(c.tls_key.as_deref());
        let channel = connect_tls(
            &c.coordinator,
            token.as_deref(),
            c.tls_ca.as_deref(),
            identity,
        )
        .map_err(|e| Failure::BadInput(e.to_string()))?;
        Ok(Operator {
            url: c.coordinator.clone(),
            client: OperatorServiceClient::new(channel),
        })
    }

    /// What a status from this coordinator means to the operator.
    pub fn fail(&self, s: &tonic::Status) -> Failure {
        Failure::from_status(&self.url, s)
    }

    /// Deletes a done or cancelled job; returns its counted results.
    pub async fn delete(&mut self, id: u64) -> Result<u64, Failure> {
        let r = self.client.delete_job(v1::JobRef { job_id: id }).await;
        Ok(r.map_err(|s| self.fail(&s))?.into_inner().results)
    }

    /// Every counted task of a job, streamed in task order.
    pub async fn export(&mut self, id: u64) -> Result<tonic::Streaming<v1::ExportRow>, Failure> {
        let r = self.client.export_job(v1::JobRef { job_id: id }).await;
        Ok(r.map_err(|s| self.fail(&s))?.into_inner())
    }

    pub async fn submit(&mut self, plan: &Plan, check: Check) -> Result<JobInfo, Failure> {
        let req = v1::SubmitJobRequest {
            plan: Some((&plan.spec).into()),
            redundancy: check.redundancy,
            verify_fraction: check.verify_fraction,
            cross_device: check.cross_device,
        };
        let r = self.client.submit_job(req).await;
        Ok(JobInfo::new(&r.map_err(|s| self.fail(&s))?.into_inner()))
    }

    pub async fn job(&mut self, id: u64) -> Result<JobInfo, Failure> {
        let r = self.client.get_job(v1::JobRef { job_id: id }).await;
        Ok(JobInfo::new(&r.map_err(|s| self.fail(&s))?.into_inner()))
    }

    pub async fn jobs(&mut self) -> Result<Vec<JobInfo>, Failure> {
        let r = self.client.list_jobs(v1::ListJobsRequest {}).await;
        let r = r.map_err(|s| self.fail(&s))?.into_inner();
        if r.total > r.jobs.len() as u64 {
            say!(
                "note: the coordinator listed the newest {} of its {} jobs",
                r.jobs.len(),
                r.total
            );
        }
        Ok(r.jobs.iter().map(JobInfo::new).collect())
    }

    pub async fn workers(&mut self) -> Result<Vec<WorkerRow>, Failure> {
        let r = self.client.list_workers(v1::ListWorkersRequest {}).await;
        let r = r.map_err(|s| self.fail(&s))?.into_inner();
        if r.total > r.workers.len() as u64 {
            say!(
                "note: the coordinator listed the {} most recently seen of its {} workers",
                r.workers.len(),
                r.total
            );
        }
        Ok(r.workers.iter().map(WorkerRow::new).collect())
    }

    pub async fn control(&mut self, id: u64, action: Control) -> Result<JobInfo, Failure> {
        let job = v1::JobRef { job_id: id };
        let r = match action {
            Control::Pause => self.client.pause_job(job).await,
            Control::Resume => self.client.resume_job(job).await,
            Control::Cancel => self.client.cancel_job(job).await,
            Control::Retry => self.client.retry_job(job).await,
        };
        Ok(JobInfo::new(&r.map_err(|s| self.fail(&s))?.into_inner()))
    }

    pub async fn audit(&mut self, id: u64) -> Result<v1::AuditReport, Failure> {
        let r = self.client.audit_job(v1::JobRef { job_id: id }).await;
        Ok(r.map_err(|s| self.fail(&s))?.into_inner())
    }

    /// A stream of snapshots of the job, one after every change.
    pub async fn watch(&mut self, id: u64) -> Result<tonic::Streaming<v1::Job>, Failure> {
        let r = self.client.watch_job(v1::JobRef { job_id: id }).await;
        Ok(r.map_err(|s| self.fail(&s))?.into_inner())
    }
}
