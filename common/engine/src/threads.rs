//! Spreading work over threads: each takes the next item from a shared
//! counter, so a thread that drew cheap items takes more.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The number of threads to use by default: every core. Asked of the
/// system once: the answer reads cgroup files, too slow for a hot path.
pub fn default_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `each(acc, i)` for every i in 0..items on up to `threads` threads.
/// Each thread takes the next index from a shared counter and folds into
/// its own accumulator; the accumulators are returned (or the first error).
pub fn on_threads<A, E>(
    threads: usize,
    items: usize,
    each: impl Fn(&mut A, usize) -> Result<(), E> + Sync,
) -> Result<Vec<A>, E>
where
    A: Default + Send,
    E: Send,
{
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.clamp(1, items.max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut acc = A::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items {
                            return Ok(acc);
                        }
                        each(&mut acc, i)?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("solver thread panicked"))
            .collect()
    })
}
