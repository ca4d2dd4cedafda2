//! Directory streams (the `DIR *` of opendir/readdir) over Surge
//! directories. The shim tells them from libc's by the magic in their
//! first word, where a libc `DIR` keeps a descriptor and a lock.

use crate::process::process;
use crate::profile::Meta;
use surge_client::{Error, FileKind, Result};

pub const MAGIC: u64 = u64::from_be_bytes(*b"SURGEDIR");

struct Entry {
    name: Vec<u8>,
    ino: u64,
    kind: u8,
}

#[repr(C)]
pub struct DirStream {
    /// Must stay the first field (the shim reads it).
    magic: u64,
    fd: i32,
    entries: Vec<Entry>,
    next: usize,
    current: libc::dirent64,
}

/// A stream over the directory open as `fd` (which it then owns): its
/// listing, with "." and "..", as of this call.
pub fn open(fd: i32) -> Result<Box<DirStream>> {
    let c = process();
    let d = c.descriptor(fd)?;
    let file = d.file(|| c.client())?;
    if !file.is_dir() {
        return Err(Error::new(libc::ENOTDIR, format!("{} is not a directory", d.path)));
    }
    let listed = c.profile.timed(
        &d.counters,
        || c.client()?.readdir(&d.path),
        |cnt, r, span| {
            if r.is_ok() {
                cnt.meta(Meta::Readdir, span)
            }
        },
    )?;
    let own = file.ino();
    let mut entries = vec![
        Entry { name: b".".to_vec(), ino: own, kind: libc::DT_DIR },
        Entry { name: b"..".to_vec(), ino: own, kind: libc::DT_DIR },
    ];
    entries.extend(listed.into_iter().map(|e| Entry {
        name: e.name.into_bytes(),
        ino: e.ino,
        kind: match e.kind {
            FileKind::File => libc::DT_REG,
            FileKind::Dir => libc::DT_DIR,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::CharDevice => libc::DT_CHR,
            FileKind::BlockDevice => libc::DT_BLK,
            FileKind::Socket => libc::DT_SOCK,
        },
    }));
    // SAFETY: `struct dirent64` is plain integers and bytes; zero is valid.
    let current = unsafe { std::mem::zeroed() };
    Ok(Box::new(DirStream { magic: MAGIC, fd, entries, next: 0, current }))
}

impl DirStream {
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// The next entry, or `None` at the end.
    pub fn read(&mut self) -> Option<*mut libc::dirent64> {
        let entry = self.entries.get(self.next)?;
        self.next += 1;
        let d = &mut self.current;
        let len = entry.name.len().min(d.d_name.len() - 1);
        for (dst, &src) in d.d_name.iter_mut().zip(&entry.name[..len]) {
            *dst = src as libc::c_char;
        }
        d.d_name[len] = 0;
        d.d_ino = entry.ino;
        d.d_off = self.next as i64;
        d.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
        d.d_type = entry.kind;
        Some(d)
    }

    pub fn tell(&self) -> i64 {
        self.next as i64
    }

    pub fn seek(&mut self, position: i64) {
        self.next = usize::try_from(position).unwrap_or(0).min(self.entries.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_as_dirents_and_positions_round_trip() {
        let mut s = DirStream {
            magic: MAGIC,
            fd: 9,
            entries: vec![
                Entry { name: b".".to_vec(), ino: 1, kind: libc::DT_DIR },
                Entry { name: b"file".to_vec(), ino: 7, kind: libc::DT_REG },
            ],
            next: 0,
            // SAFETY: zero is a valid dirent64.
            current: unsafe { std::mem::zeroed() },
        };
        let name = |d: *mut libc::dirent64| {
            // SAFETY: the stream's own entry, NUL-terminated.
            unsafe { std::ffi::CStr::from_ptr((*d).d_name.as_ptr()) }.to_str().unwrap().to_string()
        };
        assert_eq!(name(s.read().unwrap()), ".");
        let pos = s.tell();
        let d = s.read().unwrap();
        // SAFETY: as above.
        assert_eq!((name(d), unsafe { (*d).d_type }, unsafe { (*d).d_ino }), ("file".into(), libc::DT_REG, 7));
        assert!(s.read().is_none());
        s.seek(pos);
        assert_eq!(name(s.read().unwrap()), "file");
        // SAFETY: reading the first word, as the shim does.
        assert_eq!(unsafe { *(&s as *const DirStream as *const u64) }, MAGIC);
    }
}
