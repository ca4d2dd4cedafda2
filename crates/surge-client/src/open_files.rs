//! Files this client has open, by inode, so that removing one that is
//! still open keeps its data until the last close, as POSIX asks. Daemon 0
//! deletes a removed file's objects in the background, except those of a
//! file a client holds (it counts every client's `Open`s and `Close`s):
//! those it keeps until their last close anywhere, on every node. A client
//! that has files open still removes with `keep`, and releases what it
//! removed (`Release`) at its last close of the file here, or at once when
//! the removed file was not among those open; daemon 0 ignores a release
//! of a file another client still holds.
//!
//! It also knows which of those handles daemon 0 counts as held (those an
//! `Open` or a copy-up gave), so that the data manager does not evict the
//! file under them, nor the deleter delete it once removed: a new
//! connection to daemon 0 announces them again (`Hold`, `conn`), since a
//! daemon 0 that restarted lost its count.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

#[derive(Default)]
pub(crate) struct OpenFiles {
    by_ino: Mutex<HashMap<u64, Opened>>,
}

struct Opened {
    count: usize,
    /// The handles among them daemon 0 counts as held.
    held: usize,
    /// Removed while open (with `keep`): released at the last close.
    removed: bool,
}

impl OpenFiles {
    fn by_ino(&self) -> MutexGuard<'_, HashMap<u64, Opened>> {
        self.by_ino.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A `File` of `ino` opened; `held` when daemon 0 counts its handle.
    pub fn opened(&self, ino: u64, held: bool) {
        let mut by_ino = self.by_ino();
        let opened = by_ino.entry(ino).or_insert(Opened { count: 0, held: 0, removed: false });
        opened.count += 1;
        opened.held += usize::from(held);
    }

    /// A `File` of `ino` closed (`held`: one daemon 0 counted); true when
    /// it was the last one of a file removed meanwhile, whose objects this
    /// client must now `Release`.
    pub fn closed(&self, ino: u64, held: bool) -> bool {
        let mut by_ino = self.by_ino();
        let Some(opened) = by_ino.get_mut(&ino) else { return false };
        opened.count -= 1;
        opened.held = opened.held.saturating_sub(usize::from(held));
        if opened.count > 0 {
            return false;
        }
        by_ino.remove(&ino).is_some_and(|o| o.removed)
    }

    /// Does this client hold a `File` of `ino`?
    pub fn is_open(&self, ino: u64) -> bool {
        self.by_ino().contains_key(&ino)
    }

    /// The handles daemon 0 counts as held, one inode per handle (`Hold`).
    pub fn held(&self) -> Vec<u64> {
        self.by_ino().iter().flat_map(|(&ino, opened)| std::iter::repeat_n(ino, opened.held)).collect()
    }

    /// Is any file open here? Then a removal asks daemon 0 to `keep` the
    /// objects of what it removes, in case it is one of them.
    pub fn any(&self) -> bool {
        !self.by_ino().is_empty()
    }

    /// The namespace dropped `ino` (kept for us): true if it is open here,
    /// and the last close then releases it; false if this client must
    /// release it now.
    pub fn removed(&self, ino: u64) -> bool {
        match self.by_ino().get_mut(&ino) {
            Some(opened) => {
                opened.removed = true;
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
    fn a_removed_file_is_released_at_its_last_close_only() {
        let open = OpenFiles::default();
        open.opened(5, true);
        open.opened(5, true);
        assert!(open.any());
        assert!(open.removed(5));
        assert!(!open.closed(5, true));
        assert!(open.closed(5, true));
        assert!(!open.removed(5), "nothing of it is open any more");
        assert!(!open.any());
    }

    #[test]
    fn closing_a_file_nobody_removed_releases_nothing() {
        let open = OpenFiles::default();
        open.opened(9, true);
        assert!(!open.closed(9, true));
        assert!(!open.closed(9, true), "a second close of an unknown inode is ignored");
    }

    #[test]
    fn the_handles_daemon_0_counts_are_announced_one_inode_per_handle_until_closed() {
        let open = OpenFiles::default();
        open.opened(4, true);
        open.opened(4, true);
        open.opened(6, false); // a buffer copy another writer made: its `Open` was not this handle's
        open.opened(8, true);
        let mut held = open.held();
        held.sort_unstable();
        assert_eq!(held, [4, 4, 8]);
        open.closed(4, true);
        open.closed(8, true);
        assert_eq!(open.held(), [4]);
        open.closed(4, true);
        assert!(open.held().is_empty());
        assert!(open.any(), "6 is still open");
    }
}
