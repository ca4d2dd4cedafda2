//! What a staged file's PFS copy was when Surge put it in place, so that
//! the staged mark follows the copy: a copy removed, replaced, written,
//! truncated or touched outside Surge is no longer the file's current
//! copy, and the buffer copy (the one Surge wrote) is staged again rather
//! than evicted or skipped (docs/core.md, "Staged means current").
//!
//! The stamp is the copy's inode number, size, mtime and ctime as `lstat`
//! gives them right after the commit. The ctime is the one no user can set
//! back: any change to the copy's contents or attributes, a `touch -r`
//! that restores the mtime included, moves it on. Checking the stamp costs
//! one `lstat`; the contents' CRC-32C is not re-read (that would read the
//! whole copy on every check), and needs not be: the contents cannot
//! change without moving the ctime.

use crate::pfs::PfsNode;
use surge_proto::codec::{Decoder, Encoder};
use surge_proto::DecodeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyStamp {
    /// The PFS inode number: a copy replaced by another file has another.
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl CopyStamp {
    pub fn of(node: &PfsNode) -> CopyStamp {
        CopyStamp { ino: node.ino, size: node.size, mtime_ns: node.mtime_ns, ctime_ns: node.ctime_ns }
    }

    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.ino).u64(self.size).i64(self.mtime_ns).i64(self.ctime_ns);
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<CopyStamp, DecodeError> {
        Ok(CopyStamp { ino: d.u64()?, size: d.u64()?, mtime_ns: d.i64()?, ctime_ns: d.i64()? })
    }

    /// Why the PFS entry `now` (`None`: nothing there) is not the copy
    /// stamped; `None` when it is.
    pub fn changed(&self, now: Option<&PfsNode>) -> Option<String> {
        let Some(now) = now else { return Some("it was removed".to_string()) };
        let seen = CopyStamp::of(now);
        if seen.ino != self.ino {
            Some(format!("another file replaced it (PFS inode {} then, {} now)", self.ino, seen.ino))
        } else if seen.size != self.size {
            Some(format!("its size changed from {} to {} bytes", self.size, seen.size))
        } else if seen.mtime_ns != self.mtime_ns {
            Some("its modification time changed".to_string())
        } else if seen.ctime_ns != self.ctime_ns {
            Some("it was changed (its ctime moved on)".to_string())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::FileKind;

    fn node(ino: u64, size: u64, mtime_ns: i64, ctime_ns: i64) -> PfsNode {
        PfsNode { ino, kind: FileKind::File, mode: 0o644, size, mtime_ns, ctime_ns, blocks: 0 }
    }

    #[test]
    fn a_copy_is_current_only_while_its_inode_size_and_times_are_those_stamped() {
        let stamp = CopyStamp::of(&node(7, 100, 5, 6));
        assert_eq!(stamp.changed(Some(&node(7, 100, 5, 6))), None);
        // The mode is not stamped: a chmod moves the ctime, which is.
        assert_eq!(stamp.changed(Some(&PfsNode { mode: 0o600, ..node(7, 100, 5, 6) })), None);
        for (now, why) in [
            (None, "removed"),
            (Some(node(8, 100, 5, 6)), "another file replaced it"),
            (Some(node(7, 99, 5, 6)), "size changed from 100 to 99"),
            (Some(node(7, 100, 4, 6)), "modification time"),
            (Some(node(7, 100, 5, 7)), "ctime"),
        ] {
            let said = stamp.changed(now.as_ref()).expect("a change is seen");
            assert!(said.contains(why), "{said}");
        }
    }

    #[test]
    fn a_stamp_survives_its_encoding() {
        let stamp = CopyStamp { ino: u64::MAX, size: 1 << 40, mtime_ns: -1, ctime_ns: i64::MAX };
        let mut e = Encoder::new();
        stamp.encode(&mut e);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(CopyStamp::decode(&mut d).unwrap(), stamp);
        assert!(d.finish().is_ok());
    }
}
