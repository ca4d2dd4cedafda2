//! The node-local data path's client side (docs/core.md, "Node-local data
//! path"): over a daemon's Unix socket (`conn`), this client writes and
//! reads the daemon's object files itself, one copy between the
//! application's buffer and the page cache, as direct I/O does, instead
//! of sending the bytes through a socket for the daemon to copy again.
//!
//! A write is a grant (`LocalWriteBegin`: the daemon admits it, checks and
//! readies the object, holds its lock), a `pwrite` into the object's file,
//! the CRC-32C of every block the extent touches (its partial edge blocks
//! read back whole from the file), and `LocalWriteCommit` with them, whose
//! reply is read behind the connection's next request
//! (`Conn::send_unanswered`): one round trip waited for per extent, no
//! byte on the socket; a failure it answers late is the file's next
//! write's or fsync's error (`LateFailures`). A read is `LocalReadBegin` (the
//! daemon admits it and gives the object's length), a `pread`, and the
//! check of every block against the sidecar's entry (`surge_proto::sums`);
//! a block that disagrees (a write racing the read, or damage) sends the
//! piece through the daemon's `Read`, which looks again under the object's
//! lock and answers EIO only for real damage.
//!
//! The descriptors (`ObjHandles`) are kept per daemon and object until the
//! file's last handle closes (`LocalFiles::forget`), and used only while
//! the daemon's grants name the same file: an object removed and made
//! again is written through its new file, never the old one.
//!
//! To plug in: `file.rs` calls [`LocalFiles::write`] and
//! [`LocalFiles::read`] where a piece goes to a daemon, when the
//! connection `is_local`.

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::extent::REQUEST_SIZE;
use std::collections::HashMap;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError};
use surge_proto::msg::{FileIdentity, HandlesReply, ReadGrant, WriteGrant, WriteReply, MAX_COMMIT_CRCS};
use surge_proto::sums::{self, BLOCK, ENTRY, HEADER_LEN};
use surge_proto::{Errno, Request};

const BLOCK_LEN: u64 = BLOCK as u64;
/// Longest extent one grant covers: its checksums fit one commit.
pub(crate) const MAX_EXTENT: usize = MAX_COMMIT_CRCS * BLOCK - BLOCK;

/// One object's descriptors, as a daemon of this node handed them.
struct ObjectFiles {
    /// The object's bytes, read-write.
    data: ManuallyDrop<File>,
    /// Its checksum sidecar, read-only.
    sums: ManuallyDrop<File>,
    identity: FileIdentity,
    /// The process they were received by: a forked child leaves them
    /// alone (the numbers may name its own files by now, as for sockets).
    pid: u32,
}

impl Drop for ObjectFiles {
    fn drop(&mut self) {
        if self.pid == crate::pid::current() {
            // SAFETY: dropped once, here, and never used again.
            unsafe {
                ManuallyDrop::drop(&mut self.data);
                ManuallyDrop::drop(&mut self.sums);
            }
        }
    }
}

/// Most objects whose descriptors a client keeps (two each, in the
/// program's own descriptor table: the interposer runs inside it); past
/// it, one is let go (a transfer using it keeps it until done) and asked
/// for again when needed.
const MAX_HELD: usize = 64;

/// The descriptors this client holds, by (daemon, inode).
#[derive(Default)]
pub(crate) struct LocalFiles {
    by_object: Mutex<HashMap<(u32, u64), Arc<ObjectFiles>>>,
}

impl LocalFiles {
    /// Lets go of the descriptors of `ino`'s objects (its last handle closed).
    pub fn forget(&self, ino: u64) {
        self.objects().retain(|&(_, object), _| object != ino);
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, u64), Arc<ObjectFiles>>> {
        self.by_object.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The descriptors of `ino`'s object on `conn`'s daemon if they are
    /// those of `file`, asked for when not held yet; `None` when the
    /// daemon hands another file (the object was replaced meanwhile).
    fn files(&self, conn: &mut Conn, ino: u64, file: FileIdentity) -> Result<Option<Arc<ObjectFiles>>> {
        let key = (conn.endpoint().index, ino);
        let pid = crate::pid::current();
        if let Some(held) = self.objects().get(&key).filter(|f| f.identity == file && f.pid == pid) {
            return Ok(Some(Arc::clone(held)));
        }
        let (HandlesReply(identity), fds) = conn.call_with_fds(&Request::ObjHandles { ino })?;
        let [data, sums]: [_; 2] = fds.try_into().map_err(|fds: Vec<_>| {
            Error::new(
                libc::EIO,
                format!("{} handed {} descriptors for object {ino}, not 2", conn.endpoint(), fds.len()),
            )
        })?;
        let files = Arc::new(ObjectFiles {
            data: ManuallyDrop::new(File::from(data)),
            sums: ManuallyDrop::new(File::from(sums)),
            identity,
            pid,
        });
        let mut held = self.objects();
        if held.len() >= MAX_HELD && !held.contains_key(&key) {
            let other = *held.keys().next().expect("the map is full");
            held.remove(&other);
        }
        held.insert(key, Arc::clone(&files));
        drop(held);
        Ok((identity == file).then_some(files))
    }

    /// Writes `data` at `offset` of object `ino` through `conn`'s daemon's
    /// node-local path; the reply a `Write` would give (short only when
    /// the daemon's device filled up part way).
    pub fn write(&self, conn: &mut Conn, ino: u64, offset: u64, data: &[u8]) -> Result<WriteReply> {
        self.write_in(conn, ino, offset, data, MAX_EXTENT)
    }

    /// `write` in grants of `extent` bytes at most; one refused for want
    /// of space is tried again in request-sized grants, so that what still
    /// fits lands as it would over TCP.
    fn write_in(&self, conn: &mut Conn, ino: u64, offset: u64, data: &[u8], extent: usize) -> Result<WriteReply> {
        let mut done = WriteReply { written: 0, size_before: 0 };
        for (k, chunk) in data.chunks(extent).enumerate() {
            let at = offset + (k * extent) as u64;
            let attempt = match self.write_extent(conn, ino, at, chunk) {
                Err(e) if e.errno() == libc::ENOSPC && chunk.len() > REQUEST_SIZE => {
                    self.write_in(conn, ino, at, chunk, REQUEST_SIZE)
                }
                other => other,
            };
            let reply = match attempt {
                Err(e) if e.errno() == libc::ENOSPC && done.written > 0 => break,
                other => other?,
            };
            if k == 0 {
                done.size_before = reply.size_before;
            }
            done.written += reply.written;
            if reply.written < chunk.len() as u64 {
                break;
            }
        }
        Ok(done)
    }

    /// One grant's extent. Its commit is sent and its reply left to be read
    /// before the connection's next one (`Conn::send_unanswered`): the next
    /// grant goes out behind it without waiting, and a failure it answers
    /// is this file's next write's, fsync's or close's error. An earlier
    /// such failure of this file is this write's error.
    fn write_extent(&self, conn: &mut Conn, ino: u64, offset: u64, data: &[u8]) -> Result<WriteReply> {
        conn.late_failures().take(ino)?;
        let len = data.len() as u64;
        let grant: WriteGrant = match conn.call(&Request::LocalWriteBegin { ino, offset, len }) {
            Err(e) if e.errno() == libc::EOPNOTSUPP => return conn.call(&Request::Write { ino, offset, data }),
            granted => granted?,
        };
        // Whatever happens next, the grant is committed: with no checksums
        // the daemon computes them from the file and answers EIO.
        let written = self.files(conn, ino, grant.file).and_then(|files| match files {
            Some(files) => {
                files.data.write_all_at(data, offset).map_err(|e| {
                    Error::new(Errno::from_io(&e).0, format!("writing object {ino} on {}: {e}", conn.endpoint()))
                })?;
                block_crcs(&files.data, offset, data).map(Some)
            }
            None => Ok(None),
        });
        match written {
            Ok(Some(crcs)) => {
                conn.send_unanswered(&Request::LocalWriteCommit { grant: grant.grant, crcs }, ino)?;
                Ok(WriteReply { written: len, size_before: grant.size_before })
            }
            written => {
                let committed: Result<WriteReply> =
                    conn.call(&Request::LocalWriteCommit { grant: grant.grant, crcs: Vec::new() });
                written?;
                // The object's file changed under the handles: its daemon writes it.
                committed.ok();
                conn.call(&Request::Write { ino, offset, data })
            }
        }
    }

    /// Reads object `ino` at `offset` into `buf` through `conn`'s daemon's
    /// node-local path: the bytes read (short at the object's end, 0 when
    /// it does not exist), each block checked against its checksum.
    pub fn read(&self, conn: &mut Conn, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let len = buf.len() as u64;
        let grant: ReadGrant = match conn.call(&Request::LocalReadBegin { ino, offset, len }) {
            Err(e) if e.errno() == libc::EOPNOTSUPP => return conn.read_piece(ino, offset, buf),
            granted => granted?,
        };
        let Some(file) = grant.file else { return Ok(0) };
        let want = grant.len.saturating_sub(offset).min(len) as usize;
        if want == 0 {
            return Ok(0);
        }
        let Some(files) = self.files(conn, ino, file)? else { return conn.read_piece(ino, offset, buf) };
        let n = pread_full(&files.data, &mut buf[..want], offset)?;
        if n == want && verified(&files, offset, &buf[..n], grant.len)? {
            return Ok(n);
        }
        // A write under way, or damage: the daemon looks again under the object's lock.
        conn.read_piece(ino, offset, buf)
    }
}

/// Reads at `offset` until `buf` is full or the file ends.
fn pread_full(file: &File, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::new(Errno::from_io(&e).0, format!("reading an object file: {e}"))),
        }
    }
    Ok(done)
}

/// The checksums of the blocks `data`, just written at `offset` of
/// `file`, touches: the blocks it covers from its bytes, the one or two it
/// covers in part read back whole from the file (as it now is, up to its end).
fn block_crcs(file: &File, offset: u64, data: &[u8]) -> Result<Vec<u32>> {
    let end = offset + data.len() as u64;
    let (first, last) = (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN);
    let mut scratch = [0u8; BLOCK];
    (first..=last)
        .map(|block| {
            let start = block * BLOCK_LEN;
            if start >= offset && start + BLOCK_LEN <= end {
                return Ok(sums::block_crc(&data[(start - offset) as usize..][..BLOCK]));
            }
            let n = pread_full(file, &mut scratch, start)?;
            Ok(sums::block_crc(&scratch[..n]))
        })
        .collect()
}

/// Whether `bytes`, read at `offset` of an object of `len` bytes, agree
/// with their blocks' entries in the sidecar; a block they hold only in
/// part is read whole from the file.
fn verified(files: &ObjectFiles, offset: u64, bytes: &[u8], len: u64) -> Result<bool> {
    let end = offset + bytes.len() as u64;
    let first = offset / BLOCK_LEN;
    let blocks = (end.div_ceil(BLOCK_LEN) - first) as usize;
    let mut raw = vec![0u8; blocks * ENTRY as usize];
    // Entries past the sidecar's end are holes (zeros), as the daemon reads them.
    pread_full(&files.sums, &mut raw, HEADER_LEN + first * ENTRY)?;
    let mut scratch = [0u8; BLOCK];
    for (block, entry) in (first..).zip(raw.chunks_exact(ENTRY as usize)) {
        let entry = u32::from_le_bytes(entry.try_into().expect("4-byte entries"));
        let (start, stop) = (block * BLOCK_LEN, ((block + 1) * BLOCK_LEN).min(len));
        let held = if start >= offset && stop <= end {
            &bytes[(start - offset) as usize..(stop - offset) as usize]
        } else {
            let n = pread_full(&files.data, &mut scratch[..(stop - start) as usize], start)?;
            &scratch[..n]
        };
        if !sums::agrees(entry, held) {
            return Ok(false);
        }
    }
    Ok(true)
}
