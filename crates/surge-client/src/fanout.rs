//! Running one piece of work per daemon at the same time.

use crate::error::{Error, Result};
use crate::{deadline, job};
use std::thread;

/// Runs `work` on every item concurrently and returns the results in item
/// order. The first item runs on the calling thread (so a single item costs
/// no thread at all), the others on scoped threads, under the caller's
/// operation deadline and charged to the caller's job.
pub(crate) fn in_parallel<I, T, F>(items: Vec<I>, work: F) -> Vec<Result<T>>
where
    I: Send,
    T: Send,
    F: Fn(I) -> Result<T> + Sync,
{
    let mut items = items.into_iter();
    let Some(first) = items.next() else { return Vec::new() };
    let work = &work;
    let deadline = deadline::current();
    let charged = job::charged();
    thread::scope(|scope| {
        let others: Vec<_> = items
            .map(|item| {
                let deadline = deadline.clone();
                thread::Builder::new()
                    .spawn_scoped(scope, move || job::charged_to(charged, || deadline::within(deadline, || work(item))))
            })
            .collect();
        let mut out = Vec::with_capacity(others.len() + 1);
        out.push(work(first));
        for spawned in others {
            out.push(match spawned {
                Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(e) => Err(Error::new(libc::EAGAIN, format!("cannot start an I/O thread: {e}"))),
            });
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_item_order_from_distinct_threads() {
        assert!(in_parallel(Vec::<u32>::new(), Ok).is_empty());
        let caller = thread::current().id();
        let out = in_parallel(vec![1u64, 2, 3, 4], |x| Ok((x * 10, thread::current().id())));
        let out: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(out.iter().map(|r| r.0).collect::<Vec<_>>(), vec![10, 20, 30, 40]);
        assert_eq!(out[0].1, caller);
        assert!(out[1..].iter().all(|r| r.1 != caller));
    }
}
