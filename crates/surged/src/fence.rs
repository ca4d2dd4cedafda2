//! The fence: a data daemon's list of retired inodes, whose objects must
//! never be written or read again (docs/core.md, "Failures").
//!
//! A file the data manager evicted from the buffer, or one that was
//! removed, may still be open on a client that does not know it: daemon 0
//! sees opens, not closes. Without a fence, that client's writes would land
//! on objects the deleter removes (or recreate them as orphans), and its
//! reads of removed objects would return zeros: acknowledged data lost,
//! silently. Once retired (`ObjRetire`), an inode's `Write`, `Read` and
//! `ObjTruncate` fail with ESTALE instead.
//!
//! Retirement checks the object's version and takes effect atomically with
//! respect to the inode's writes on this daemon: it waits for the requests
//! holding a [`Pass`] for the inode to end, and new ones wait for it. It is
//! durable: an append-only record, one line per change (`<ino>` retires,
//! `-<ino>` reinstates), fsynced before the reply and replayed at start.
//! Inode numbers are never reused, so a retired inode stays retired.

use crate::failure::Failure;
use crate::locking::lock;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use surge_proto::Errno;

/// The record's name in the buffer directory.
pub const RECORD: &str = "retired";

pub struct Fence {
    state: Mutex<State>,
    /// Signalled when a pass ends or a retirement settles.
    changed: Condvar,
    record: Mutex<File>,
    path: PathBuf,
}

#[derive(Default)]
struct State {
    retired: HashSet<u64>,
    /// Requests in progress per inode (their passes).
    busy: HashMap<u64, usize>,
    /// Inodes being retired: new passes wait.
    retiring: HashSet<u64>,
}

/// Leave for one request to use an inode's object; the inode cannot be
/// retired while it is held.
pub struct Pass<'a> {
    fence: &'a Fence,
    ino: u64,
}

impl Fence {
    /// Opens (creating) the record at `path` and replays it. A last line
    /// cut short by a crash is dropped: its change was never acknowledged.
    pub fn open(path: &Path) -> io::Result<Fence> {
        let mut file = OpenOptions::new().read(true).append(true).create(true).mode(0o600).open(path)?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        if complete < text.len() {
            file.set_len(complete as u64)?;
        }
        let mut retired = HashSet::new();
        for (number, line) in text[..complete].lines().enumerate() {
            let bad = || {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "line {} of {} is {line:?}, not an inode number: restore the file or remove the line",
                        number + 1,
                        path.display()
                    ),
                )
            };
            match line.strip_prefix('-') {
                Some(ino) => retired.remove(&ino.parse::<u64>().map_err(|_| bad())?),
                None => retired.insert(line.parse::<u64>().map_err(|_| bad())?),
            };
        }
        Ok(Fence {
            state: Mutex::new(State { retired, ..State::default() }),
            changed: Condvar::new(),
            record: Mutex::new(file),
            path: path.to_path_buf(),
        })
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(state).unwrap_or_else(PoisonError::into_inner)
    }

    /// Leave to write, read or truncate `ino`'s object; ESTALE once it is retired.
    pub fn pass(&self, ino: u64) -> Result<Pass<'_>, Failure> {
        let mut state = lock(&self.state);
        while state.retiring.contains(&ino) {
            state = self.wait(state);
        }
        if state.retired.contains(&ino) {
            return Err(retired_failure(ino));
        }
        *state.busy.entry(ino).or_default() += 1;
        Ok(Pass { fence: self, ino })
    }

    /// Retires `ino` once no request uses its object, if `unchanged` (asked
    /// then, with every writer of `ino` held off) says the object is still
    /// the version meant; else ESTALE. Already retired: done.
    pub fn retire(&self, ino: u64, unchanged: impl FnOnce() -> Result<bool, Failure>) -> Result<(), Failure> {
        let mut state = lock(&self.state);
        while state.retiring.contains(&ino) {
            state = self.wait(state);
        }
        if state.retired.contains(&ino) {
            return Ok(());
        }
        state.retiring.insert(ino);
        while state.busy.contains_key(&ino) {
            state = self.wait(state);
        }
        drop(state);
        let result = match unchanged() {
            Ok(true) => self.append(&format!("{ino}\n")),
            Ok(false) => Err(Failure::new(
                Errno(libc::ESTALE),
                format!("inode {ino} was written since the version to retire: it stays in use"),
            )),
            Err(failure) => Err(failure),
        };
        let mut state = lock(&self.state);
        state.retiring.remove(&ino);
        if result.is_ok() {
            state.retired.insert(ino);
        }
        self.changed.notify_all();
        result
    }

    /// Undoes the retirement of `ino` (an eviction that did not happen).
    pub fn reinstate(&self, ino: u64) -> Result<(), Failure> {
        let mut state = lock(&self.state);
        while state.retiring.contains(&ino) {
            state = self.wait(state);
        }
        if state.retired.contains(&ino) {
            // Recorded under the state lock: no retirement of `ino` can interleave.
            self.append(&format!("-{ino}\n"))?;
            state.retired.remove(&ino);
        }
        Ok(())
    }

    /// Appends `line` to the record, durably.
    fn append(&self, line: &str) -> Result<(), Failure> {
        let mut record = lock(&self.record);
        record.write_all(line.as_bytes()).and_then(|()| record.sync_data()).map_err(|e| {
            Failure::new(
                Errno::from_io(&e),
                format!("could not record a retired inode in {}: {e}", self.path.display()),
            )
        })
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.fence.state);
        if let Some(count) = state.busy.get_mut(&self.ino) {
            *count -= 1;
            if *count == 0 {
                state.busy.remove(&self.ino);
                if state.retiring.contains(&self.ino) {
                    self.fence.changed.notify_all();
                }
            }
        }
    }
}

/// What a request for a retired inode's object fails with.
pub fn retired_failure(ino: u64) -> Failure {
    Failure::new(
        Errno(libc::ESTALE),
        format!(
            "inode {ino} was evicted from the buffer or removed: reopen the file (its PFS copy, if it was evicted)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn fence_in(dir: &tempfile::TempDir) -> Fence {
        Fence::open(&dir.path().join(RECORD)).unwrap()
    }

    #[test]
    fn a_retired_inode_refuses_passes_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let fence = fence_in(&dir);
        fence.retire(7, || Ok(true)).unwrap();
        assert_eq!(fence.pass(7).err().map(|f| f.errno), Some(Errno(libc::ESTALE)));
        assert!(fence.pass(8).is_ok());
    }

    #[test]
    fn a_changed_object_is_not_retired() {
        let dir = tempfile::tempdir().unwrap();
        let fence = fence_in(&dir);
        let refused = fence.retire(7, || Ok(false)).unwrap_err();
        assert_eq!(refused.errno, Errno(libc::ESTALE));
        assert!(fence.pass(7).is_ok());
    }

    #[test]
    fn retirement_and_reinstatement_survive_a_reopen_and_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let fence = fence_in(&dir);
        for ino in [3, 4, 5] {
            fence.retire(ino, || Ok(true)).unwrap();
        }
        fence.reinstate(4).unwrap();
        drop(fence);
        let mut record = OpenOptions::new().append(true).open(dir.path().join(RECORD)).unwrap();
        record.write_all(b"6").unwrap();
        let fence = fence_in(&dir);
        let refused = |ino| fence.pass(ino).is_err();
        assert_eq!([3, 4, 5, 6].map(refused), [true, false, true, false]);
        fence.retire(9, || Ok(true)).unwrap();
        drop(fence);
        assert_eq!(std::fs::read_to_string(dir.path().join(RECORD)).unwrap(), "3\n4\n5\n-4\n9\n");
    }

    #[test]
    fn a_record_with_a_bad_line_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECORD), "3\nthree\n").unwrap();
        let error = Fence::open(&dir.path().join(RECORD)).err().unwrap();
        assert!(error.to_string().contains("line 2"), "{error}");
    }

    #[test]
    fn retirement_waits_for_the_request_in_progress_and_sees_its_change() {
        let dir = tempfile::tempdir().unwrap();
        let fence = fence_in(&dir);
        let pass = fence.pass(7).unwrap();
        let (checked, check_seen) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| fence.retire(7, || Ok(checked.send(()).is_ok())));
            assert!(check_seen.recv_timeout(Duration::from_millis(200)).is_err(), "the check waits for the pass");
            drop(pass);
            check_seen.recv_timeout(Duration::from_secs(5)).expect("the check runs once the pass ends");
        });
        assert!(fence.pass(7).is_err());
    }
}
