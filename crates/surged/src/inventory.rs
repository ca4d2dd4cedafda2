//! The inventory of a daemon's objects: the inode numbers this store holds
//! an object for, kept apart from the object files, so that an object
//! removed behind the daemon's back (its file, or its file and sidecar:
//! a hand-made `rm`, a cleaner, a wiped directory) is told from one never
//! written. Without it both read as "absent", which is how a lost stripe
//! used to come back as zeros or as a silently shorter file.
//!
//! The inventory is an append-only log of 9-byte records (`+` listed, `-`
//! gone, `!` lost and the loss accepted; then the inode number,
//! little-endian), rewritten compactly at every open. An object whose loss
//! was accepted (`surge start --daemon N --accept-loss`) stays listed, so
//! it keeps reading as lost, but is not reported again.
//! The record of a new object is appended after its file is created, the
//! record of a removal before its file goes, so a crash between the two
//! leaves an object the inventory does not list (taken in at the next
//! open), never a listed object that was never there. The log is flushed
//! with the objects (`sync`), as their directory entries are.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The inventory's file name in the object directory.
pub const FILE: &str = "inventory";
const RECORD: usize = 9;

pub struct Inventory {
    path: PathBuf,
    log: Mutex<Log>,
}

struct Log {
    file: File,
    listed: HashSet<u64>,
    /// Listed, missing, and the loss accepted.
    accepted: HashSet<u64>,
}

impl Inventory {
    /// Opens the inventory in `dir`, making an empty one when there is none
    /// and `create` is set (a new store), and takes in `present`, the
    /// objects found on disk. Returns it with the listed objects that are
    /// not there: objects lost since the daemon last had them.
    pub fn open(dir: &Path, create: bool, present: &HashSet<u64>) -> io::Result<(Inventory, Vec<u64>)> {
        let path = dir.join(FILE);
        let (mut listed, mut accepted) = match read_log(&path) {
            Ok(log) => log,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => Default::default(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("the object inventory {} is missing", path.display()),
                ))
            }
            Err(e) => return Err(e),
        };
        accepted.retain(|ino| !present.contains(ino));
        let mut lost: Vec<u64> = listed.difference(present).filter(|ino| !accepted.contains(ino)).copied().collect();
        lost.sort_unstable();
        listed.extend(present);
        let file = rewrite(&path, &listed, &accepted)?;
        Ok((Inventory { path, log: Mutex::new(Log { file, listed, accepted }) }, lost))
    }

    /// Records that the loss of the listed objects `inos` was accepted.
    pub fn accept_lost(&self, inos: &[u64]) -> io::Result<()> {
        let mut log = crate::locking::lock(&self.log);
        let records: Vec<u8> = inos.iter().flat_map(|&ino| record(b'!', ino)).collect();
        log.file.write_all(&records)?;
        log.file.sync_data()?;
        log.accepted.extend(inos);
        Ok(())
    }

    /// Is there an object of `ino` in the store, by the inventory?
    pub fn lists(&self, ino: u64) -> bool {
        crate::locking::lock(&self.log).listed.contains(&ino)
    }

    /// Records the new object `ino`.
    pub fn add(&self, ino: u64) -> io::Result<()> {
        let mut log = crate::locking::lock(&self.log);
        if log.listed.insert(ino) {
            if let Err(e) = log.file.write_all(&record(b'+', ino)) {
                log.listed.remove(&ino);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Records that object `ino` is going.
    pub fn remove(&self, ino: u64) -> io::Result<()> {
        let mut log = crate::locking::lock(&self.log);
        log.accepted.remove(&ino);
        if log.listed.remove(&ino) {
            if let Err(e) = log.file.write_all(&record(b'-', ino)) {
                log.listed.insert(ino);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Makes the records so far durable.
    pub fn sync(&self) -> io::Result<()> {
        crate::locking::lock(&self.log).file.sync_data()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn record(op: u8, ino: u64) -> [u8; RECORD] {
    let mut rec = [0u8; RECORD];
    rec[0] = op;
    rec[1..].copy_from_slice(&ino.to_le_bytes());
    rec
}

/// The inodes the log at `path` lists, and those of them whose loss was
/// accepted; a torn last record (a crash while appending) is left out, an
/// unknown record is an error.
fn read_log(path: &Path) -> io::Result<(HashSet<u64>, HashSet<u64>)> {
    let mut raw = Vec::new();
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?.read_to_end(&mut raw)?;
    let (mut listed, mut accepted) = (HashSet::new(), HashSet::new());
    for rec in raw.chunks_exact(RECORD) {
        let ino = u64::from_le_bytes(rec[1..].try_into().expect("8 bytes"));
        match rec[0] {
            b'+' => listed.insert(ino),
            b'!' => listed.insert(ino) | accepted.insert(ino),
            b'-' => listed.remove(&ino) | accepted.remove(&ino),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the object inventory {} is damaged (record kind {other:#x})", path.display()),
                ))
            }
        };
    }
    Ok((listed, accepted))
}

/// Writes `listed` as the whole log (a new file renamed over the old one)
/// and opens it for appending.
fn rewrite(path: &Path, listed: &HashSet<u64>, accepted: &HashSet<u64>) -> io::Result<File> {
    let mut sorted: Vec<u64> = listed.iter().copied().collect();
    sorted.sort_unstable();
    let kind = |ino: &u64| if accepted.contains(ino) { b'!' } else { b'+' };
    let raw: Vec<u8> = sorted.iter().flat_map(|ino| record(kind(ino), *ino)).collect();
    let temp = path.with_extension("new");
    let _ = fs::remove_file(&temp);
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&temp)?;
    file.write_all(&raw)?;
    file.sync_data()?;
    fs::rename(&temp, path)?;
    if let Some(dir) = path.parent() {
        crate::sys::sync_dir(dir)?;
    }
    OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(inos: &[u64]) -> HashSet<u64> {
        inos.iter().copied().collect()
    }

    #[test]
    fn objects_listed_but_gone_are_reported_lost_and_unlisted_ones_are_taken_in() {
        let t = tempfile::tempdir().unwrap();
        let (inv, lost) = Inventory::open(t.path(), true, &set(&[])).unwrap();
        assert!(lost.is_empty());
        for ino in [1, 2, 3, 4] {
            inv.add(ino).unwrap();
        }
        inv.remove(2).unwrap();
        inv.sync().unwrap();
        drop(inv);
        // 3 vanished, 9 appeared (created just before a crash).
        let (inv, lost) = Inventory::open(t.path(), false, &set(&[1, 4, 9])).unwrap();
        assert_eq!(lost, vec![3]);
        assert!(inv.lists(3) && inv.lists(9) && !inv.lists(2));
        // The compacted log keeps the same answer, until the loss is accepted.
        drop(inv);
        let (inv, lost) = Inventory::open(t.path(), false, &set(&[1, 4, 9])).unwrap();
        assert_eq!(lost, vec![3]);
        inv.accept_lost(&lost).unwrap();
        drop(inv);
        let (inv, lost) = Inventory::open(t.path(), false, &set(&[1, 4, 9])).unwrap();
        assert!(lost.is_empty());
        assert!(inv.lists(3), "an accepted loss still reads as lost");
        inv.remove(3).unwrap();
        drop(inv);
        let (inv, _) = Inventory::open(t.path(), false, &set(&[1, 4, 9])).unwrap();
        assert!(!inv.lists(3));
    }

    #[test]
    fn a_missing_inventory_of_an_existing_store_is_an_error_and_a_torn_record_is_ignored() {
        let t = tempfile::tempdir().unwrap();
        let err = Inventory::open(t.path(), false, &set(&[])).err().unwrap();
        assert!(err.to_string().contains("inventory"), "{err}");
        let (inv, _) = Inventory::open(t.path(), true, &set(&[])).unwrap();
        inv.add(5).unwrap();
        drop(inv);
        let mut f = OpenOptions::new().append(true).open(t.path().join(FILE)).unwrap();
        f.write_all(&[b'+', 1, 2]).unwrap();
        let (inv, lost) = Inventory::open(t.path(), false, &set(&[5])).unwrap();
        assert!(lost.is_empty() && inv.lists(5));
        fs::write(t.path().join(FILE), [b'x'; RECORD]).unwrap();
        assert!(Inventory::open(t.path(), false, &set(&[])).is_err());
    }
}
