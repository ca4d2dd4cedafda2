//! What the data objects of one file say about it (size, mtime, version, blocks),
//! summed up from their `ObjStat` replies. `Shared` asks every stripe's
//! daemon for them (`Shared::glimpse`).

use surge_proto::msg::{objects_version, ObjStatReply};
use surge_proto::{Attr, Layout, Tier};

/// What a file's objects say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectsSummary {
    /// The file size: the furthest byte any object holds.
    pub size: u64,
    pub mtime_ns: i64,
    /// The contents' version ([`objects_version`]): any write or truncate changes it.
    pub version: u64,
    /// Bytes the objects take on their devices (holes take none).
    pub allocated: u64,
}

impl ObjectsSummary {
    /// The summary of the objects' `ObjStat` replies, in stripe order.
    pub fn of(layout: &Layout, stats: &[ObjStatReply]) -> ObjectsSummary {
        let version = objects_version(stats);
        let start = ObjectsSummary { size: 0, mtime_ns: 0, version, allocated: 0 };
        stats.iter().zip(0..).fold(start, |acc, (st, stripe)| ObjectsSummary {
            size: acc.size.max(layout.file_end(stripe, st.size)),
            mtime_ns: acc.mtime_ns.max(st.mtime_ns),
            version,
            allocated: acc.allocated + st.allocated,
        })
    }

    /// Fills in a buffer file's size and mtime. The namespace's mtime stands
    /// unless the objects changed after the last chmod/utimens (its ctime):
    /// a time set by utimens survives, a later write moves it on. A staged
    /// file whose objects changed since their stage-out is `Buffer` again:
    /// its PFS copy is not current.
    pub fn apply_to(&self, attr: &mut Attr) {
        attr.size = self.size;
        attr.blocks = self.allocated.div_ceil(512);
        if self.mtime_ns > attr.ctime_ns {
            attr.mtime_ns = self.mtime_ns;
        }
        if attr.tier == Tier::Staged && attr.staged_version != self.version {
            attr.tier = Tier::Buffer;
            attr.staged_version = 0;
        }
    }
}
