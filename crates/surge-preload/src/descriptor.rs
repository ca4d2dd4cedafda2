//! The descriptor table: kernel fd number (of the placeholder) to the Surge
//! file it stands for. Dups share one [`Descriptor`], as they share one open
//! file description in the kernel.

use crate::placeholder::{self, Record};
use crate::profile::FileCounters;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use surge_client::{BufferFile, Client, Error, File, Result};

pub struct Descriptor {
    /// The Surge path it was opened with.
    pub path: String,
    /// The open(2) flags it was opened with (access mode, O_APPEND, ...).
    pub flags: i32,
    /// Opened at once, or on first use for a descriptor inherited across exec.
    file: OnceLock<Arc<File>>,
    /// Inherited across exec: the buffer file it was opened on, if it was one.
    inherited_file: Option<BufferFile>,
    pub counters: Arc<Mutex<FileCounters>>,
    /// Serializes read/write/lseek through the shared position (pread and
    /// pwrite do not take it).
    pub position: Mutex<()>,
    /// For a real descriptor on the FUSE mount: the inode it was adopted for.
    pub mount_ino: Option<u64>,
    /// On the FUSE mount: fast-path writes since the kernel last fetched the file's size.
    pub kernel_size_stale: AtomicBool,
}

impl Descriptor {
    fn new(
        path: String,
        flags: i32,
        file: OnceLock<Arc<File>>,
        mount_ino: Option<u64>,
        counters: Arc<Mutex<FileCounters>>,
    ) -> Descriptor {
        Descriptor {
            path,
            flags,
            file,
            inherited_file: None,
            counters,
            position: Mutex::new(()),
            mount_ino,
            kernel_size_stale: AtomicBool::new(false),
        }
    }

    /// Opened here, on `file` (which a reopened descriptor shares).
    pub fn opened(file: Arc<File>, flags: i32, counters: Arc<Mutex<FileCounters>>) -> Descriptor {
        let path = file.path().to_string();
        Descriptor::new(path, flags, OnceLock::from(file), None, counters)
    }

    /// A descriptor a previous program image opened; the file opens on first use.
    pub fn inherited(record: Record, counters: Arc<Mutex<FileCounters>>) -> Descriptor {
        let Record { flags, file, path } = record;
        Descriptor { inherited_file: file, ..Descriptor::new(path, flags, OnceLock::new(), None, counters) }
    }

    /// A kernel descriptor on the FUSE mount, served here on the fast path.
    pub fn on_mount(path: String, flags: i32, ino: u64, counters: Arc<Mutex<FileCounters>>) -> Descriptor {
        Descriptor::new(path, flags, OnceLock::new(), Some(ino), counters)
    }

    pub fn file(&self, client: impl FnOnce() -> Result<&'static Client>) -> Result<&Arc<File>> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        // Opened before an exec: the creating, truncating parts already
        // happened; O_APPEND lives on the placeholder.
        let flags = self.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_APPEND);
        let client = client()?;
        let file = match (client.open(&self.path, flags, 0), self.inherited_file) {
            (Ok(file), Some(was)) if file.buffer_file().map(|now| now.ino) != Some(was.ino) => {
                // The name leads to another file now (replaced, or renamed
                // away and written anew): the one opened is reached by its objects.
                drop(file);
                client.open_held(&self.path, was, flags)?
            }
            (Err(e), Some(was)) if [libc::ENOENT, libc::ENOTDIR, libc::EISDIR].contains(&e.errno()) => {
                client.open_held(&self.path, was, flags)?
            }
            (opened, _) => opened?,
        };
        Ok(self.file.get_or_init(|| Arc::new(file)))
    }

    /// The Surge inode it stands for, when known without asking a daemon
    /// (opened here, or inherited on a buffer file).
    pub fn known_ino(&self) -> Option<u64> {
        self.file.get().map(|f| f.ino()).or(self.inherited_file.map(|f| f.ino))
    }

    pub fn readable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_WRONLY && self.flags & libc::O_PATH == 0
    }

    pub fn writable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_RDONLY && self.flags & libc::O_PATH == 0
    }
}

pub struct Table {
    slots: RwLock<Vec<Option<Arc<Descriptor>>>>,
}

impl Table {
    pub const fn new() -> Table {
        Table { slots: RwLock::new(Vec::new()) }
    }

    pub fn get(&self, fd: i32) -> Option<Arc<Descriptor>> {
        let index = usize::try_from(fd).ok()?;
        self.slots.read().get(index).cloned().flatten()
    }

    /// The descriptor of `fd`, adopting a placeholder this process image
    /// inherited (across exec) on first sight.
    pub fn lookup(&self, fd: i32, adopt: impl FnOnce(Record) -> Descriptor) -> Result<Arc<Descriptor>> {
        if let Some(d) = self.get(fd) {
            return Ok(d);
        }
        let record = placeholder::describe(fd)
            .ok_or_else(|| Error::new(libc::EBADF, format!("descriptor {fd} is not an open Surge file")))?;
        let d = Arc::new(adopt(record));
        self.insert(fd, d.clone());
        Ok(d)
    }

    pub fn insert(&self, fd: i32, d: Arc<Descriptor>) {
        let index = usize::try_from(fd).expect("kernel descriptors are non-negative");
        let mut slots = self.slots.write();
        if slots.len() <= index {
            slots.resize(index + 1, None);
        }
        slots[index] = Some(d);
    }

    /// Every descriptor and what it stands for.
    pub fn entries(&self) -> Vec<(i32, Arc<Descriptor>)> {
        let slots = self.slots.read();
        slots.iter().enumerate().filter_map(|(fd, d)| Some((fd as i32, d.clone()?))).collect()
    }

    pub fn remove(&self, fd: i32) -> Option<Arc<Descriptor>> {
        let index = usize::try_from(fd).ok()?;
        self.slots.write().get_mut(index).and_then(Option::take)
    }

    /// Held across fork by the pthread_atfork handlers, so a child never
    /// inherits the lock mid-update from another thread.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.slots.write());
    }

    /// # Safety
    /// Only after [`Table::lock_for_fork`], once, in the parent or the child.
    pub unsafe fn unlock_after_fork(&self) {
        self.slots.force_unlock_write();
    }
}
