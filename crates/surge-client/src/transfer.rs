//! Verified copies between the host's file system (the PFS, or any shared
//! directory) and Surge, for staging a job's data in before it runs and out
//! to destinations of its choosing after (DataWarp's `stage_in` and
//! `stage_out` directives, UnifyFS's transfer API). Each copy is checked
//! end to end: the CRC-32C of the bytes read from the source must equal
//! that of the bytes read back from the destination after the copy is
//! durable, so a copy that was damaged anywhere on the way fails with EIO
//! instead of being used. Stage-out to the file's own PFS path, with tier
//! bookkeeping, is `Client::stage_out`; this is for other destinations.
//!
//! The data passes through this client: the file's stripes are written in
//! parallel on every daemon, and callers copy several files at once. A copy
//! into Surge is read back where it rests: each daemon re-reads its stripe
//! from its store after the fsync, checking every block against its
//! checksum at rest, and answers the CRC-32C of each stripe unit
//! (`ObjSums`); the client combines those in file order (crc32c_combine)
//! and compares the result with the source's, so the read-back costs no
//! network transfer. A copy out of Surge is read back from the host file
//! with its pages dropped from the cache first.
//!
//! A symbolic link is copied as a link with the same target, either way:
//! its target is never followed or copied (a run directory's links into a
//! shared tables directory stay links).

use crate::client::Client;
use crate::error::{Error, Result};
use crate::fanout::in_parallel;
use crate::file::File;
use crate::pool::thread_slot;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use surge_proto::msg::ObjSumsReply;
use surge_proto::{Attr, FileKind, Layout, Request, Tier};

/// Bytes moved per call: several stripes, so every daemon works at once.
const CHUNK: usize = 16 << 20;

/// What a verified copy moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    pub bytes: u64,
    /// CRC-32C of the file's bytes, equal at both ends.
    pub crc: u32,
}

/// The target of `source` when it is a symbolic link.
fn host_link(source: &Path) -> Result<Option<PathBuf>> {
    match fs::symlink_metadata(source) {
        Ok(meta) if meta.file_type().is_symlink() => fs::read_link(source).map(Some).map_err(|e| host_error(source, e)),
        Ok(_) => Ok(None),
        Err(e) => Err(host_error(source, e)),
    }
}

/// Puts a link to `target` at host path `dest` with the link's own
/// `mtime_ns` (and that as its atime), replacing what is there in one
/// rename (made beside it first), durably.
fn link_out(target: &str, mtime_ns: i64, dest: &Path) -> Result<Transferred> {
    let name =
        dest.file_name().ok_or_else(|| Error::new(libc::EINVAL, format!("{}: names no file", dest.display())))?;
    let temp = dest.with_file_name(format!(".{}.surge-{}", name.to_string_lossy(), std::process::id()));
    let placed = std::os::unix::fs::symlink(target, &temp)
        .and_then(|()| set_host_times(&temp, mtime_ns, mtime_ns))
        .and_then(|()| fs::rename(&temp, dest));
    if let Err(e) = placed {
        fs::remove_file(&temp).ok();
        return Err(host_error(dest, e));
    }
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| host_error(dir, e))?;
    }
    Ok(Transferred { bytes: 0, crc: 0 })
}

fn host_error(path: &Path, e: std::io::Error) -> Error {
    Error::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{}: {e}", path.display()))
}

/// Reads until `buf` is full or the end; the count read.
fn read_full(from: &mut dyn FnMut(&mut [u8]) -> Result<usize>, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match from(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// Moves everything `read` gives to `write` (at its offset), chunk by
/// chunk: a thread reads and checksums the next chunk while the calling
/// thread writes the one before, so source and destination work at once
/// (two chunks in memory). Returns the length and CRC-32C of what was read,
/// all of which was written.
fn overlapped(
    read: &mut (dyn FnMut(&mut [u8]) -> Result<usize> + Send),
    write: &mut dyn FnMut(&[u8], u64) -> Result<()>,
    progress: &mut dyn FnMut(u64),
) -> Result<Transferred> {
    let (to_reader, empty) = mpsc::channel::<Vec<u8>>();
    let (to_writer, full) = mpsc::sync_channel::<Result<(Vec<u8>, usize)>>(1);
    for _ in 0..2 {
        to_reader.send(vec![0u8; CHUNK]).expect("the reader's end is here");
    }
    thread::scope(|s| {
        let reader = s.spawn(move || {
            let (mut crc, mut bytes) = (0u32, 0u64);
            // Ends when the writer gives up (no buffer comes back).
            for mut buf in empty.iter() {
                let n = match read_full(read, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = to_writer.send(Err(e));
                        break;
                    }
                };
                if n == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                bytes += n as u64;
                if to_writer.send(Ok((buf, n))).is_err() {
                    break;
                }
            }
            Transferred { bytes, crc }
        });
        let mut offset = 0u64;
        let written = full.iter().try_for_each(|chunk| {
            let (buf, n) = chunk?;
            write(&buf[..n], offset)?;
            offset += n as u64;
            progress(offset);
            let _ = to_reader.send(buf);
            Ok(())
        });
        // The reader stops at its next chunk once the writer's ends are gone.
        drop((full, to_reader));
        let read = reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        written.map(|()| read)
    })
}

/// The CRC-32C and length of everything `from` gives.
fn crc_of(mut from: impl FnMut(&mut [u8]) -> Result<usize>) -> Result<Transferred> {
    let mut buf = vec![0u8; CHUNK];
    let (mut crc, mut bytes) = (0u32, 0u64);
    loop {
        let n = read_full(&mut from, &mut buf)?;
        if n == 0 {
            return Ok(Transferred { bytes, crc });
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        bytes += n as u64;
    }
}

/// Reads `file` from its start, call after call.
fn reader(file: &File) -> impl FnMut(&mut [u8]) -> Result<usize> + '_ {
    let mut position = 0u64;
    move |buf| {
        let n = file.read_at(buf, position)?;
        position += n as u64;
        Ok(n)
    }
}

fn write_all_at(file: &File, buf: &[u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.write_at(&buf[done..], offset + done as u64)? {
            0 => return Err(Error::new(libc::ENOSPC, format!("{}: no space left in the buffer", file.path()))),
            n => done += n,
        }
    }
    Ok(())
}

/// `crc` extended by `len` zero bytes.
fn append_zeros(mut crc: u32, mut len: u64) -> u32 {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while len > 0 {
        let now = len.min(ZEROS.len() as u64) as usize;
        crc = crc32c::crc32c_append(crc, &ZEROS[..now]);
        len -= now as u64;
    }
    crc
}

/// Granule below which zeros are written rather than left as a hole.
const HOLE_GRANULE: usize = 64 << 10;

/// Writes the runs of `buf` that are not all zeros, granule by granule,
/// so a sparse source stays sparse in the buffer.
fn write_data_runs(file: &File, buf: &[u8], offset: u64) -> Result<()> {
    let mut run_start = None;
    for (i, granule) in buf.chunks(HOLE_GRANULE).enumerate() {
        let at = i * HOLE_GRANULE;
        match (granule.iter().any(|&b| b != 0), run_start) {
            (true, None) => run_start = Some(at),
            (false, Some(start)) => {
                write_all_at(file, &buf[start..at], offset + start as u64)?;
                run_start = None;
            }
            _ => {}
        }
    }
    match run_start {
        Some(start) => write_all_at(file, &buf[start..], offset + start as u64),
        None => Ok(()),
    }
}

fn mismatch(what: &str, source: Transferred, copy: Transferred) -> Error {
    Error::new(
        libc::EIO,
        format!(
            "{what} does not match its source ({} bytes, CRC-32C {:08x}, against {} bytes, {:08x})",
            copy.bytes, copy.crc, source.bytes, source.crc
        ),
    )
}

impl Client {
    /// Copies the host file `source` to `path` in Surge (created or
    /// replaced, with the source's mode), verified (see the module). Blocks
    /// of zeros are left as holes. `progress` gets the bytes copied so far.
    pub fn stage_in(&self, source: &Path, path: &str, progress: &mut dyn FnMut(u64)) -> Result<Transferred> {
        if let Some(target) = host_link(source)? {
            let target = target.to_str().ok_or_else(|| {
                Error::new(libc::EINVAL, format!("{}: its link target is not UTF-8", source.display()))
            })?;
            return self.link_in(target, path);
        }
        let mut input = fs::File::open(source).map_err(|e| host_error(source, e))?;
        let meta = input.metadata().map_err(|e| host_error(source, e))?;
        if meta.is_dir() {
            return Err(Error::new(libc::EISDIR, format!("{}: is a directory", source.display())));
        }
        let file = self.open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, meta.mode() & 0o7777)?;
        let copied = overlapped(
            &mut |b| input.read(b).map_err(|e| host_error(source, e)),
            &mut |chunk, offset| write_data_runs(&file, chunk, offset),
            progress,
        )?;
        let offset = copied.bytes;
        file.set_len(offset)?;
        file.fsync()?;
        let read_back = match file.attr()? {
            attr if attr.tier != Tier::Pfs => self.crc_at_rest(attr.ino, &attr.layout, offset)?,
            // Placed on the PFS directly (the data manager's cold placement): read it back whole.
            _ => crc_of(reader(&self.open(path, libc::O_RDONLY, 0)?))?,
        };
        if read_back != copied {
            return Err(mismatch(&format!("the copy of {} in Surge at {path}", source.display()), copied, read_back));
        }
        Ok(copied)
    }

    /// Copies `path` from Surge to the host file `dest` (replaced whole,
    /// atomically: written beside it under a temporary name, made durable,
    /// read back, then renamed), verified (see the module). `progress` gets
    /// the bytes copied so far.
    pub fn stage_out_to(&self, path: &str, dest: &Path, progress: &mut dyn FnMut(u64)) -> Result<Transferred> {
        let link = self.stat(path)?;
        if link.kind == FileKind::Symlink {
            return link_out(&self.readlink(path)?, link.mtime_ns, dest);
        }
        let file = self.open(path, libc::O_RDONLY, 0)?;
        let attr = file.attr()?;
        let mode = attr.mode & 0o7777;
        let name =
            dest.file_name().ok_or_else(|| Error::new(libc::EINVAL, format!("{}: names no file", dest.display())))?;
        let temp: PathBuf = dest.with_file_name(format!(".{}.surge-{}", name.to_string_lossy(), std::process::id()));
        let copied = self.write_host_copy(&file, &temp, mode, progress).and_then(|copied| {
            let read_back = read_back_uncached(&temp)?;
            if read_back != copied {
                return Err(mismatch(&format!("the copy of {path} at {}", dest.display()), copied, read_back));
            }
            self.copy_metadata_to_host(path, &attr, &temp)?;
            fs::rename(&temp, dest).map_err(|e| host_error(dest, e))?;
            if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| host_error(dir, e))?;
            }
            Ok(copied)
        });
        if copied.is_err() {
            fs::remove_file(&temp).ok();
        }
        copied
    }

    /// The CRC-32C of the first `size` bytes of buffer file `ino` as its
    /// daemons re-read them from their stores (see the module): each stripe
    /// answers its units' CRCs, combined here in file order; bytes past an
    /// object's end (a hole at the file's end) count as zeros, as a read
    /// gives them.
    fn crc_at_rest(&self, ino: u64, layout: &Layout, size: u64) -> Result<Transferred> {
        let shared = self.shared();
        let unit = layout.stripe_size;
        let stripes: Vec<u32> = (0..layout.stripe_count).collect();
        let per_stripe = in_parallel(stripes, |stripe| {
            let daemon = layout.daemon_of(stripe, shared.daemon_count());
            let want = layout.object_len(stripe, size);
            shared.pool.with_retry(daemon, thread_slot(), |conn| {
                let mut sums: Vec<(u32, u64)> = Vec::new();
                let mut offset = 0;
                while offset < want {
                    let req = Request::ObjSums { ino, offset, len: want - offset, piece: unit };
                    let reply: ObjSumsReply = conn.call(&req)?;
                    let mut left = reply.bytes;
                    for crc in reply.crcs {
                        let len = left.min(unit);
                        sums.push((crc, len));
                        left -= len;
                    }
                    offset += reply.bytes;
                    if reply.bytes == 0 || !reply.bytes.is_multiple_of(unit) {
                        break; // the object ends here
                    }
                }
                Ok(sums)
            })
        });
        let per_stripe = per_stripe.into_iter().collect::<Result<Vec<_>>>()?;
        let mut crc = 0u32;
        let mut file_offset = 0u64;
        while file_offset < size {
            let (stripe, object_offset) = layout.locate(file_offset);
            let len = unit.min(size - file_offset);
            let (piece_crc, got) =
                per_stripe[stripe as usize].get((object_offset / unit) as usize).copied().unwrap_or((0, 0));
            crc = crc32c::crc32c_combine(crc, piece_crc, got as usize);
            crc = append_zeros(crc, len - got.min(len));
            file_offset += len;
        }
        Ok(Transferred { bytes: size, crc })
    }

    /// Makes `path` a link to `target`, replacing a file or link there.
    fn link_in(&self, target: &str, path: &str) -> Result<Transferred> {
        match self.stat(path) {
            Ok(attr) if attr.kind != FileKind::Dir => self.unlink(path)?,
            _ => {}
        }
        self.symlink(target, path)?;
        Ok(Transferred { bytes: 0, crc: 0 })
    }

    fn write_host_copy(
        &self,
        file: &File,
        temp: &Path,
        mode: u32,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Transferred> {
        let out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(temp)
            .map_err(|e| host_error(temp, e))?;
        let mut buf = vec![0u8; CHUNK];
        let (mut crc, mut offset) = (0u32, 0u64);
        let mut input = reader(file);
        loop {
            let n = read_full(&mut input, &mut buf)?;
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            std::os::unix::fs::FileExt::write_all_at(&out, &buf[..n], offset).map_err(|e| host_error(temp, e))?;
            offset += n as u64;
            progress(offset);
        }
        out.sync_all().map_err(|e| host_error(temp, e))?;
        Ok(Transferred { bytes: offset, crc })
    }
}

impl Client {
    /// Gives the host copy `host` of Surge file or directory `path`
    /// (`attr`) its `user.*` extended attributes, times and mode: what a
    /// stage-out keeps (docs/core.md).
    pub fn copy_metadata_to_host(&self, path: &str, attr: &Attr, host: &Path) -> Result<()> {
        let names = self.list_xattr(path)?;
        for name in names.split(|b| *b == 0).filter_map(|n| std::str::from_utf8(n).ok()).filter(|n| !n.is_empty()) {
            let value = self.get_xattr(path, name)?;
            rustix::fs::lsetxattr(host, name, &value, rustix::fs::XattrFlags::empty())
                .map_err(|e| host_error(host, e.into()))?;
        }
        // Surge keeps no atime yet and shows the mtime as the atime.
        set_host_mode_and_times(host, attr.mode, attr.mtime_ns, attr.mtime_ns)
    }
}

/// Gives the host entry `path` (a link itself, not followed) `atime_ns`
/// and `mtime_ns` (ns since the epoch).
fn set_host_times(path: &Path, atime_ns: i64, mtime_ns: i64) -> std::io::Result<()> {
    let spec = |ns: i64| rustix::fs::Timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as _,
    };
    let times = rustix::fs::Timestamps { last_access: spec(atime_ns), last_modification: spec(mtime_ns) };
    Ok(rustix::fs::utimensat(rustix::fs::CWD, path, &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?)
}

/// Gives the host file or directory `path` the times `atime_ns` and
/// `mtime_ns`, then `mode` (which may take the owner's access away).
pub fn set_host_mode_and_times(path: &Path, mode: u32, atime_ns: i64, mtime_ns: i64) -> Result<()> {
    set_host_times(path, atime_ns, mtime_ns)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777)))
        .map_err(|e| host_error(path, e))
}

/// The CRC-32C of a host file as the device gives it back (its pages
/// dropped from the cache first, where the file system allows).
fn read_back_uncached(path: &Path) -> Result<Transferred> {
    let mut f = fs::File::open(path).map_err(|e| host_error(path, e))?;
    // SAFETY: posix_fadvise on a descriptor we own; a refusal only costs the cache drop.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    crc_of(|b| f.read(b).map_err(|e| host_error(path, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of `data` read in pieces of at most 3 MiB, failing once `fail_at` bytes were read.
    fn source(data: &[u8], fail_at: usize) -> impl FnMut(&mut [u8]) -> Result<usize> + Send + '_ {
        let mut pos = 0;
        move |buf| {
            if pos >= fail_at {
                return Err(Error::new(libc::EIO, "the source failed"));
            }
            let n = buf.len().min(3 << 20).min(data.len() - pos);
            buf[..n].copy_from_slice(&data[pos..pos + n]);
            pos += n;
            Ok(n)
        }
    }

    #[test]
    fn an_overlapped_copy_writes_every_byte_at_its_offset_and_stops_at_either_sides_error() {
        let data: Vec<u8> =
            (0..(2 * CHUNK + 12_345) as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
        let mut copy = vec![0u8; data.len()];
        let mut seen = 0;
        let moved = overlapped(
            &mut source(&data, usize::MAX),
            &mut |chunk, at| {
                copy[at as usize..at as usize + chunk.len()].copy_from_slice(chunk);
                Ok(())
            },
            &mut |done| seen = done,
        )
        .unwrap();
        assert_eq!((moved.bytes, moved.crc, seen), (data.len() as u64, crc32c::crc32c(&data), data.len() as u64));
        assert!(copy == data);

        let read_fails = overlapped(&mut source(&data, CHUNK + 1), &mut |_, _| Ok(()), &mut |_| {});
        assert_eq!(read_fails.unwrap_err().errno(), libc::EIO);
        let mut writes = 0;
        let write_fails = overlapped(
            &mut source(&data, usize::MAX),
            &mut |_, _| {
                writes += 1;
                Err(Error::new(libc::ENOSPC, "full"))
            },
            &mut |_| {},
        );
        assert_eq!((write_fails.unwrap_err().errno(), writes), (libc::ENOSPC, 1), "nothing is written after a failure");
    }
}
