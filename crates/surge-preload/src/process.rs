//! The interposer's process-wide state, made on the first Surge call.

use crate::descriptor::{Descriptor, Table};
use crate::links;
use crate::paths::{Mount, Target};
use crate::profile::Profile;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use surge_client::{Client, Error, JobIdentity, Result};

pub struct Process {
    pub mount: Mount,
    pub table: Table,
    pub profile: Profile,
    client: OnceLock<Client>,
    connecting: Mutex<()>,
    /// The Surge working directory after a chdir into the mount.
    cwd: Mutex<Option<String>>,
    /// Connection trouble is reported on stderr once per process.
    reported: AtomicBool,
}

static PROCESS: OnceLock<Process> = OnceLock::new();

pub fn process() -> &'static Process {
    PROCESS.get_or_init(|| {
        let job = JobIdentity::from_env();
        Process {
            // The shim checked SURGE_MOUNT before sending any call here.
            mount: Mount::from_env()
                .unwrap_or_else(|_| Mount::new(crate::paths::DEFAULT_MOUNT).expect("valid default")),
            table: Table::new(),
            profile: Profile::from_env(&job.label),
            client: OnceLock::new(),
            connecting: Mutex::new(()),
            cwd: Mutex::new(None),
            reported: AtomicBool::new(false),
        }
    })
}

/// Is the handler up (without bringing it up)?
pub fn loaded() -> Option<&'static Process> {
    PROCESS.get()
}

impl Process {
    /// The cluster connection, made on first use.
    pub fn client(&self) -> Result<&Client> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let _one_at_a_time = self.connecting.lock();
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let file = surge_cluster::default_path();
        let client = Client::connect(&file).map_err(|e| {
            Error::new(
                e.errno(),
                format!(
                    "no Surge cluster is reachable for the files under SURGE_MOUNT={} ({}; cluster file {}). \
                     Start one with `surge start`, run the program under `surge run`, or set SURGE_CLUSTER",
                    self.mount.prefix(),
                    e.message(),
                    file.display()
                ),
            )
        })?;
        Ok(self.client.get_or_init(|| client))
    }

    /// The cluster connection if one is made (never connects).
    pub fn connected(&self) -> Option<&Client> {
        self.client.get()
    }

    pub fn descriptor(&self, fd: i32) -> Result<Arc<Descriptor>> {
        self.table.lookup(fd, |record| {
            let counters = self.profile.file(&record.path);
            Descriptor::inherited(record, counters)
        })
    }

    /// Where `path` leads, relative to `dirfd` (AT_FDCWD: the working directory).
    pub fn resolve(&self, dirfd: i32, path: &str) -> Result<Target> {
        if path.starts_with('/') {
            return match self.mount.inside(path) {
                Some(rest) if links::climbs_after_a_name(rest) => self.climb("/", rest),
                _ => Ok(self.mount.classify(path)),
            };
        }
        let surge_base = if dirfd == libc::AT_FDCWD {
            self.cwd.lock().clone()
        } else {
            self.descriptor(dirfd).ok().map(|d| d.path.clone())
        };
        if let Some(base) = surge_base {
            if links::climbs_after_a_name(path) {
                return self.climb(&base, path);
            }
            return Ok(self.mount.join(&base, path));
        }
        // A host directory, and a path the shim found may lead into the
        // mount ("bb/x" from the mount's parent, as coreutils' `mkdir -p`
        // walks; or one climbing with ".."): where it leads decides.
        Ok(host_directory(dirfd).map_or(Target::Host, |base| self.mount.classify(&format!("{base}/{path}"))))
    }

    /// `rest` from Surge directory `base` (the working directory, a
    /// directory descriptor's, the root: each reached without links) with
    /// `..` climbing from where the names before it lead.
    fn climb(&self, base: &str, rest: &str) -> Result<Target> {
        Ok(match links::climb(&self.mount, self, base, rest)? {
            links::Next::Surge(path) => Target::Surge(path),
            links::Next::Host(path) => Target::HostPath(path),
            links::Next::NotOnPath => Target::Host,
        })
    }

    pub fn set_cwd(&self, cwd: Option<String>) {
        *self.cwd.lock() = cwd;
    }

    pub fn cwd(&self) -> Option<String> {
        self.cwd.lock().clone()
    }

    /// Prints a failure that means the cluster is unreachable, once.
    pub fn report(&self, what: &str, error: &Error) {
        let unreachable = [libc::ENOTCONN, libc::ECONNREFUSED, libc::ETIMEDOUT, libc::EIO, libc::EHOSTUNREACH];
        if unreachable.contains(&error.errno()) && !self.reported.swap(true, Ordering::Relaxed) {
            eprintln!("surge: {what}: {error}");
        }
    }
}

/// The host path of directory `dirfd` (AT_FDCWD: the working directory),
/// as the kernel resolves it; None when it has none (removed, not a
/// directory).
fn host_directory(dirfd: i32) -> Option<String> {
    let path = if dirfd == libc::AT_FDCWD {
        std::env::current_dir().ok()?
    } else {
        let link = format!("/proc/self/fd/{dirfd}");
        if !std::fs::metadata(&link).ok()?.is_dir() {
            return None;
        }
        std::fs::read_link(link).ok()?
    };
    path.to_str().filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)")).map(str::to_string)
}
