//! Durable result commits per second through the real gRPC stack on
//! loopback: C concurrent clients lease and report tasks; every report is
//! fsynced (group commit) before it is answered.
//!
//!     cargo bench -p nqueens-coordinator --bench commits -- [CLIENTS] [TASKS]
//!
//! Reports carry all-zero counts (valid for any frame task), so the figure
//! is the coordinator's, not the solver's.

use nqueens_common::plan::{Strategy, Tally};
use nqueens_coordinator::hub::SystemClock;
use nqueens_coordinator::server::start;
use nqueens_proto::v1::ReportOutcome;
use nqueens_testkit as kit;
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let clients: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let tasks: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let dir = kit::tempdir();
    let server = start(kit::config(dir.path()), Arc::new(SystemClock))
        .await
        .unwrap();
    let url = kit::url(&server);
    let mut ops = kit::operators(&url).await;
    let plan = kit::plan_spec(18, Strategy::Frame, 0, tasks);
    let total_tasks = kit::submit_planned(&mut ops, kit::job_request(plan))
        .await
        .tasks;
    let zero = nqueens_proto::v1::TaskResult::from(&Tally::default());
    let start_at = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|k| {
            let (url, zero) = (url.clone(), zero.clone());
            tokio::spawn(async move {
                let (mut w, _) = kit::clients(&url).await;
                let name = format!("bench-{k}");
                let mut reported = 0u64;
                loop {
                    let Some(l) = kit::lease(&mut w, &name, 1).await.pop() else {
                        break;
                    };
                    let outcome = kit::report(&mut w, &name, l.lease_ref(), zero.clone());
                    assert_eq!(outcome.await.unwrap(), ReportOutcome::Accepted);
                    reported += 1;
                }
                reported
            })
        })
        .collect();
    let mut reported = 0;
    for h in handles {
        reported += h.await.unwrap();
    }
    let secs = start_at.elapsed().as_secs_f64();
    assert_eq!(reported, total_tasks);
    println!(
        "{clients} clients, {reported} tasks leased and reported: {secs:.2} s, {:.0} durable commits/s (lease + fsynced report each)",
        reported as f64 / secs
    );
    server.shutdown().await.unwrap();
}
