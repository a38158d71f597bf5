//! Waiting for a condition: poll it, with a deadline, and fail naming what
//! was awaited (and the last thing seen) when the deadline passes. The
//! pause between two polls only spaces them out; nothing relies on it.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a condition a test waits for may take by default (a bound,
/// never a pause): far more than any takes here, for slow machines.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// What a probe gives: whether the condition holds, with its value, or
/// what it saw instead (shown if the deadline passes).
pub trait Probe {
    type Out;
    fn ready(self) -> Result<Self::Out, String>;
}

impl Probe for bool {
    type Out = ();
    fn ready(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("not yet".into())
        }
    }
}

impl<T> Probe for Option<T> {
    type Out = T;
    fn ready(self) -> Result<T, String> {
        self.ok_or_else(|| "not yet".into())
    }
}

/// `Err` carries the last state seen, for the failure message.
impl<T, E: Display> Probe for Result<T, E> {
    type Out = T;
    fn ready(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// A wait: at most `limit`, polling every `every`.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    pub limit: Duration,
    pub every: Duration,
}

impl Default for Wait {
    fn default() -> Wait {
        Wait {
            limit: PATIENCE,
            every: Duration::from_millis(20),
        }
    }
}

impl Wait {
    /// At most `limit` (polling every 20 ms).
    pub fn within(limit: Duration) -> Wait {
        Wait {
            limit,
            ..Wait::default()
        }
    }

    /// Polls every `every` instead.
    pub fn every(self, every: Duration) -> Wait {
        Wait { every, ..self }
    }

    fn give_up(&self, what: &str, last: &str) -> ! {
        panic!("waited {:?} for {what}; last seen: {last}", self.limit)
    }

    /// Polls `probe` until it is ready; panics after the limit.
    pub fn until<P: Probe>(&self, what: &str, mut probe: impl FnMut() -> P) -> P::Out {
        let start = Instant::now();
        loop {
            match probe().ready() {
                Ok(v) => return v,
                Err(last) if start.elapsed() >= self.limit => self.give_up(what, &last),
                Err(_) => std::thread::sleep(self.every),
            }
        }
    }

    /// [`Wait::until`] for an async probe, inside a tokio runtime.
    pub async fn until_async<P: Probe>(
        &self,
        what: &str,
        mut probe: impl AsyncFnMut() -> P,
    ) -> P::Out {
        let start = Instant::now();
        loop {
            match probe().await.ready() {
                Ok(v) => return v,
                Err(last) if start.elapsed() >= self.limit => self.give_up(what, &last),
                Err(_) => tokio::time::sleep(self.every).await,
            }
        }
    }
}

/// Polls `probe` until it is ready, at most [`PATIENCE`].
pub fn wait_until<P: Probe>(what: &str, probe: impl FnMut() -> P) -> P::Out {
    Wait::default().until(what, probe)
}

/// Polls the async `probe` until it is ready, at most [`PATIENCE`].
pub async fn eventually<P: Probe>(what: &str, probe: impl AsyncFnMut() -> P) -> P::Out {
    Wait::default().until_async(what, probe).await
}

/// Awaits `f`, at most `limit`; panics naming `what` after.
pub async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, f).await {
        Ok(v) => v,
        Err(_) => panic!("waited {limit:?} for {what}"),
    }
}
