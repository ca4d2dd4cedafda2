//! Files this client has open, by inode, so that unlinking one that is
//! still open keeps its data until the last close, as POSIX asks. The
//! namespace forgets the name at once; the objects are deleted when the
//! last `File` of that inode in this client is dropped. Every process on a
//! node reaches Surge through the FUSE server's one client, so this covers
//! a file one process unlinks while another on the node reads it. A file
//! unlinked on another node, or whose holder crashed, is not covered (its
//! objects are then deleted at once, or left behind until collected).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use surge_proto::Layout;

#[derive(Default)]
pub(crate) struct OpenFiles {
    by_ino: Mutex<HashMap<u64, Opened>>,
}

struct Opened {
    count: usize,
    /// Unlinked while open: the layout its objects are to be deleted with.
    unlinked: Option<Layout>,
}

impl OpenFiles {
    fn by_ino(&self) -> MutexGuard<'_, HashMap<u64, Opened>> {
        self.by_ino.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn opened(&self, ino: u64) {
        self.by_ino().entry(ino).or_insert(Opened { count: 0, unlinked: None }).count += 1;
    }

    /// A `File` of `ino` closed; the layout of the objects to delete now
    /// when it was the last one of a file unlinked meanwhile.
    pub fn closed(&self, ino: u64) -> Option<Layout> {
        let mut by_ino = self.by_ino();
        let opened = by_ino.get_mut(&ino)?;
        opened.count -= 1;
        if opened.count > 0 {
            return None;
        }
        by_ino.remove(&ino).and_then(|o| o.unlinked)
    }

    /// The namespace dropped `ino`: true if it is open here, and its objects
    /// are then left for the last close to delete.
    pub fn unlinked(&self, ino: u64, layout: Layout) -> bool {
        match self.by_ino().get_mut(&ino) {
            Some(opened) => {
                opened.unlinked = Some(layout);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlinked_file_is_deleted_at_its_last_close_only() {
        let open = OpenFiles::default();
        let layout = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 0 };
        open.opened(5);
        open.opened(5);
        assert!(open.unlinked(5, layout));
        assert_eq!(open.closed(5), None);
        assert_eq!(open.closed(5), Some(layout));
        assert!(!open.unlinked(5, layout), "nothing of it is open any more");
    }

    #[test]
    fn closing_a_file_nobody_unlinked_deletes_nothing() {
        let open = OpenFiles::default();
        open.opened(9);
        assert_eq!(open.closed(9), None);
        assert_eq!(open.closed(9), None, "a second close of an unknown inode is ignored");
    }
}
