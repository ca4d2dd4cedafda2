//! What the data objects of one file say about it (size, mtime, version, blocks),
//! summed up from their `ObjStat` replies. `Shared` asks every stripe's
//! daemon for them (`Shared::glimpse`).

use surge_proto::msg::{file_mtime, objects_mtime, objects_version, ObjStatReply};
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
        let size = stats.iter().zip(0..).map(|(st, stripe)| layout.file_end(stripe, st.size)).max().unwrap_or(0);
        let allocated = stats.iter().map(|st| st.allocated).sum();
        ObjectsSummary { size, mtime_ns: objects_mtime(stats), version, allocated }
    }

    /// Fills in a buffer file's size, blocks and times ([`file_mtime`]; a
    /// write moves the change time too, as write(2) and truncate(2) do). A staged
    /// file whose objects changed since their stage-out is `Buffer` again:
    /// its PFS copy is not current.
    pub fn apply_to(&self, attr: &mut Attr) {
        attr.size = self.size;
        attr.blocks = self.allocated.div_ceil(512);
        attr.mtime_ns = file_mtime(attr.mtime_ns, attr.ctime_ns, self.mtime_ns);
        attr.ctime_ns = attr.ctime_ns.max(self.mtime_ns);
        if attr.tier == Tier::Staged && attr.staged_version != self.version {
            attr.tier = Tier::Buffer;
            attr.staged_version = 0;
        }
    }
}
