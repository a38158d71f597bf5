//! A coordinator inside the test process (`server::start`), on a free
//! loopback port, with the data directory and clock the test gives.

use crate::wait::Wait;
use nqueens_coordinator::server::{Config, Running};
use nqueens_coordinator::state::JobView;
use std::path::Path;
use std::time::Duration;

/// A coordinator's configuration: loopback on a free port, data in `dir`,
/// default limits, no tokens, TLS or metrics. Change what a test needs.
pub fn config(dir: &Path) -> Config {
    Config::local(dir)
}

/// The URL of a coordinator started in-process.
pub fn url(r: &Running) -> String {
    format!("http://{}", r.addr)
}

/// Polls the coordinator's core until `until` holds for the job (at most
/// the default patience, every millisecond: a watch stream coalesces
/// snapshots and could skip the moment looked for).
pub async fn poll_until(r: &Running, id: u64, until: impl Fn(&JobView) -> bool) -> JobView {
    Wait::default()
        .every(Duration::from_millis(1))
        .until_async(&format!("job {id} in the coordinator"), async || {
            let j = r.core.job(id).unwrap();
            if until(&j) {
                Ok(j)
            } else {
                Err(format!("{j:?}"))
            }
        })
        .await
}
