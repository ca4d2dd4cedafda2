//! Operations on all the data objects of one file at once: one request per
//! stripe, sent to the stripes' daemons in parallel.

use crate::client::Core;
use crate::error::{Error, Result};
use crate::fanout::in_parallel;
use crate::pool::thread_slot;
use surge_proto::msg::{objects_version, ObjStatReply};
use surge_proto::{Attr, Layout, Reply, Request, Tier};

/// What a file's objects say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectsSummary {
    /// The file size: the furthest byte any object holds.
    pub size: u64,
    pub mtime_ns: i64,
    /// The contents' version ([`objects_version`]): any write or truncate changes it.
    pub version: u64,
}

impl ObjectsSummary {
    /// The summary of the objects' `ObjStat` replies, in stripe order.
    pub fn of(layout: &Layout, stats: &[ObjStatReply]) -> ObjectsSummary {
        let version = objects_version(stats);
        stats.iter().zip(0..).fold(ObjectsSummary { size: 0, mtime_ns: 0, version }, |acc, (st, stripe)| {
            ObjectsSummary {
                size: acc.size.max(layout.file_end(stripe, st.size)),
                mtime_ns: acc.mtime_ns.max(st.mtime_ns),
                version,
            }
        })
    }

    /// Fills in a buffer file's size and mtime. The namespace's mtime stands
    /// unless the objects changed after the last chmod/utimens (its ctime):
    /// a time set by utimens survives, a later write moves it on. A staged
    /// file whose objects changed since their stage-out is `Buffer` again:
    /// its PFS copy is not current.
    pub fn apply_to(&self, attr: &mut Attr) {
        attr.size = self.size;
        if self.mtime_ns > attr.ctime_ns {
            attr.mtime_ns = self.mtime_ns;
        }
        if attr.tier == Tier::Staged && attr.staged_version != self.version {
            attr.tier = Tier::Buffer;
            attr.staged_version = 0;
        }
    }
}

impl Core {
    /// Sends `request(stripe)` to every stripe's daemon at once; results in stripe order.
    fn on_every_stripe<T: Reply + Send>(
        &self,
        layout: &Layout,
        request: impl Fn(u32) -> Request<'static> + Sync,
    ) -> Vec<Result<T>> {
        let stripes: Vec<u32> = (0..layout.stripe_count).collect();
        in_parallel(stripes, |stripe| {
            let daemon = layout.daemon_of(stripe, self.daemon_count());
            // Object requests are idempotent: a broken connection is retried.
            self.pool.with_retry(daemon, thread_slot(), |conn| conn.call(&request(stripe)))
        })
    }

    /// Size, modification time and version from the objects (the "glimpse").
    pub(crate) fn glimpse(&self, ino: u64, layout: &Layout) -> Result<ObjectsSummary> {
        Ok(ObjectsSummary::of(layout, &self.object_stats(ino, layout)?))
    }

    /// Every object's `ObjStat`, in stripe order.
    pub(crate) fn object_stats(&self, ino: u64, layout: &Layout) -> Result<Vec<ObjStatReply>> {
        first_error(self.on_every_stripe(layout, |_| Request::ObjStat { ino }))
    }

    /// Sets the file's length to `len`: each object gets exactly the bytes a
    /// file of that length has in it (this shrinks and extends alike).
    pub(crate) fn truncate_objects(&self, ino: u64, layout: &Layout, len: u64) -> Result<()> {
        let done = self
            .on_every_stripe::<()>(layout, |stripe| Request::ObjTruncate { ino, len: layout.object_len(stripe, len) });
        first_error(done).map(drop)
    }

    pub(crate) fn sync_objects(&self, ino: u64, layout: &Layout) -> Result<()> {
        first_error(self.on_every_stripe::<()>(layout, |_| Request::ObjSync { ino })).map(drop)
    }
}

/// All the values, or the error to report: the first one, except that an
/// ENOSPC anywhere wins (the application must learn it is out of space).
pub(crate) fn first_error<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut values = Vec::with_capacity(results.len());
    let mut error: Option<Error> = None;
    for result in results {
        match result {
            Ok(v) => values.push(v),
            Err(e) => match &error {
                Some(first) if first.errno() == libc::ENOSPC || e.errno() != libc::ENOSPC => {}
                _ => error = Some(e),
            },
        }
    }
    error.map_or(Ok(values), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_error_prefers_enospc() {
        let e = |n| Error::new(n, "x");
        assert_eq!(first_error(vec![Ok(1), Ok(2)]), Ok(vec![1, 2]));
        assert_eq!(first_error::<()>(vec![Err(e(libc::EIO)), Err(e(libc::ENOENT))]).unwrap_err().errno(), libc::EIO);
        let got = first_error::<()>(vec![Err(e(libc::EIO)), Err(e(libc::ENOSPC)), Err(e(libc::EIO))]);
        assert_eq!(got.unwrap_err().errno(), libc::ENOSPC);
        assert_eq!(first_error(vec![Ok(1), Err(e(libc::EIO))]).unwrap_err().errno(), libc::EIO);
    }
}
