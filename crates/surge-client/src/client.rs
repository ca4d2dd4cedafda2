//! The client: cluster membership, the namespace (served by daemon 0) and
//! the per-file object bookkeeping namespace changes imply.

use crate::config::ClientConfig;
use crate::conn::{Endpoint, Session};
use crate::error::{Error, Result};
use crate::extent::MAX_TRANSFER;
use crate::fanout::in_parallel;
use crate::file::File;
use crate::job::JobIdentity;
use crate::pool::{thread_slot, Pool};
use std::path::Path;
use crate::open_files::OpenFiles;
use std::time::Duration;
use std::sync::Arc;
use surge_cluster::{ClusterError, ClusterFile, ConnPolicy, DaemonEntry};
use surge_proto::msg::{open_flags, DaemonStatus, ReaddirReply, Removed, KEEP_MODE};
use surge_proto::{Attr, DirEntry, FileKind, Layout, Reply, Request, Tier};

/// The daemon that serves the namespace.
const METADATA_DAEMON: u32 = 0;
/// Directory entries asked for per `Readdir` page.
const READDIR_PAGE: u32 = 1024;

/// A connection to a Surge cluster. Cheap to share (`Arc<Client>`); every
/// method may be called from many threads at once.
pub struct Client {
    core: Arc<Core>,
}

/// What clients and their open files share.
pub(crate) struct Core {
    pub cluster: ClusterFile,
    pub pool: Pool,
    pub job: JobIdentity,
    pub conn_policy: ConnPolicy,
    /// How long an append may hold its file's append lock: half the
    /// request timeout, so a waiter gives up before its own request does.
    pub append_lease: Duration,
    pub open_files: OpenFiles,
}

impl Client {
    /// Connects to the cluster of `surge_cluster::default_path()`
    /// (`$SURGE_CLUSTER`, else `~/.surge/cluster.toml`).
    pub fn connect_default() -> Result<Client> {
        Self::connect(&surge_cluster::default_path())
    }

    /// Loads the cluster file and secret; daemons are dialled on first use,
    /// so this succeeds before they are all up.
    pub fn connect(cluster_file: &Path) -> Result<Client> {
        Self::connect_with(cluster_file, ClientConfig::from_env()?)
    }

    pub fn connect_with(cluster_file: &Path, config: ClientConfig) -> Result<Client> {
        let cluster = ClusterFile::load(cluster_file).map_err(not_connected)?;
        let secret = cluster.secret().map_err(not_connected)?;
        let endpoints = cluster
            .daemons
            .iter()
            .map(|d| {
                let addr = d.addr.parse().map_err(|_| {
                    Error::new(libc::ENOTCONN, format!("daemon {} address {:?} is not ip:port", d.index, d.addr))
                })?;
                Ok(Endpoint { index: d.index, addr })
            })
            .collect::<Result<Vec<_>>>()?;
        let session = Session {
            secret,
            secret_file: cluster.secret_file.clone(),
            cluster_id: cluster.cluster_id.clone(),
            daemon_count: endpoints.len() as u32,
            job: config.job.clone(),
            host: surge_cluster::hostname(),
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
        };
        let count = config.conns.unwrap_or(cluster.connections.count);
        let conn_policy = config.conn_policy.unwrap_or(cluster.connections.policy);
        let pool = Pool::new(session, endpoints, count);
        let append_lease = config.io_timeout / 2;
        Ok(Client { core: Arc::new(Core { cluster, pool, job: config.job, conn_policy, append_lease, open_files: OpenFiles::default() }) })
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.core.cluster
    }

    pub fn job_id(&self) -> u64 {
        self.core.job.id
    }

    /// Opens like open(2): `flags` are `libc::O_*`, `mode` applies to a file
    /// this call creates.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> Result<File> {
        let _op = self.core.pool.operation();
        File::open(self.core.clone(), wire_path(path)?, flags, mode, Layout::INHERIT)
    }

    /// Creates a new file (`O_CREAT|O_EXCL|O_RDWR`) with `layout`; its unset
    /// fields inherit from the directory's default.
    pub fn create(&self, path: &str, mode: u32, layout: Layout) -> Result<File> {
        let _op = self.core.pool.operation();
        self.check_layout(&layout)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
        File::open(self.core.clone(), wire_path(path)?, flags, mode, layout)
    }

    /// Attributes, with a file's size and mtime taken from its objects.
    pub fn stat(&self, path: &str) -> Result<Attr> {
        let _op = self.core.pool.operation();
        self.core.stat(&wire_path(path)?)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let _op = self.core.pool.operation();
        let _: Attr = self.core.meta(&Request::Mkdir { path: &wire_path(path)?, mode: mode & 0o7777 })?;
        Ok(())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        let _op = self.core.pool.operation();
        self.core.meta(&Request::Rmdir { path: &wire_path(path)? })
    }

    pub fn unlink(&self, path: &str) -> Result<()> {
        let _op = self.core.pool.operation();
        let path = wire_path(path)?;
        let keep = self.core.open_files.any();
        let removed: Removed = self.core.meta(&Request::Unlink { path: &path, keep })?;
        self.core.keep_if_open(removed, keep)
    }

    /// Renames like rename(2); a file the rename replaces is deleted.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _op = self.core.pool.operation();
        let (from, to) = (wire_path(from)?, wire_path(to)?);
        let keep = self.core.open_files.any();
        let removed: Removed = self.core.meta(&Request::Rename { from: &from, to: &to, keep })?;
        self.core.keep_if_open(removed, keep)
    }

    /// All entries of a directory, in name order.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let _op = self.core.pool.operation();
        let path = wire_path(path)?;
        let mut entries: Vec<DirEntry> = Vec::new();
        loop {
            let after = entries.last().map_or("", |e| e.name.as_str());
            let page: ReaddirReply = self.core.meta(&Request::Readdir { path: &path, after, max: READDIR_PAGE })?;
            let progressed = !page.entries.is_empty();
            entries.extend(page.entries);
            if page.end {
                return Ok(entries);
            }
            if !progressed {
                return Err(Error::new(libc::EIO, format!("daemon 0 returned an empty, unfinished listing of {path}")));
            }
        }
    }

    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let _op = self.core.pool.operation();
        // To zero, O_TRUNC does it in the same request (and copies nothing up from the PFS).
        let flags = if len == 0 { libc::O_WRONLY | libc::O_TRUNC } else { libc::O_WRONLY };
        self.open(path, flags, 0)?.set_len(len)
    }

    /// chmod and utimens in one: sets the permission bits and/or the
    /// modification time, leaving a `None` as it is.
    pub fn set_attr(&self, path: &str, mode: Option<u32>, mtime_ns: Option<i64>) -> Result<Attr> {
        let _op = self.core.pool.operation();
        let path = wire_path(path)?;
        let mtime_ns = match mtime_ns {
            Some(t) => t,
            // The namespace takes this change's time as the point after which
            // object writes count as newer: pin the current mtime first.
            None => self.core.stat(&path)?.mtime_ns,
        };
        let mode = mode.map_or(KEEP_MODE, |m| m & 0o7777);
        self.core.meta(&Request::SetAttr { path: &path, mode, mtime_ns })
    }

    /// Sets a directory's default layout for the files created in it.
    pub fn set_layout(&self, path: &str, layout: Layout) -> Result<()> {
        let _op = self.core.pool.operation();
        self.check_layout(&layout)?;
        let _: Attr = self.core.meta(&Request::SetLayout { path: &wire_path(path)?, layout })?;
        Ok(())
    }

    /// Every daemon's status, in index order, asked in parallel.
    pub fn status(&self) -> Vec<(DaemonEntry, Result<DaemonStatus>)> {
        let _op = self.core.pool.operation();
        let daemons = self.core.cluster.daemons.clone();
        let indices = daemons.iter().map(|d| d.index).collect();
        let answers = in_parallel(indices, |index| self.core.pool.get(index)?.call(&Request::Status));
        daemons.into_iter().zip(answers).collect()
    }

    /// Asks daemon `index` to exit.
    pub fn shutdown_daemon(&self, index: u32) -> Result<()> {
        let _op = self.core.pool.operation();
        let mut conn = self.core.pool.get(index)?;
        conn.call::<()>(&Request::Shutdown)?;
        // The daemon closes its connections as it goes.
        conn.retire();
        Ok(())
    }

    fn check_layout(&self, layout: &Layout) -> Result<()> {
        layout.validate(self.core.daemon_count()).map_err(|why| Error::new(libc::EINVAL, why))
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }
}

impl Core {
    pub fn daemon_count(&self) -> u32 {
        self.pool.daemon_count()
    }

    /// A namespace request to the metadata daemon.
    pub fn meta<R: Reply>(&self, req: &Request<'_>) -> Result<R> {
        self.pool.get(METADATA_DAEMON)?.call(req)
    }

    pub fn open_attr(&self, path: &str, flags: u32, mode: u32, layout: Layout) -> Result<Attr> {
        self.meta(&Request::Open { path, flags, mode: mode & 0o7777, layout })
    }

    /// Opens a PFS-only file's buffer shadow (created empty, or the one
    /// another writer already created).
    pub fn open_shadow(&self, path: &str, mode: u32) -> Result<Attr> {
        let flags = open_flags::CREATE | open_flags::WRITE | open_flags::TRUNC;
        self.open_attr(path, flags, mode, Layout::INHERIT)
    }

    /// `Stat` with the size and mtime of a buffer file filled in from its objects.
    pub fn stat(&self, path: &str) -> Result<Attr> {
        let mut attr: Attr = self.meta(&Request::Stat { path })?;
        if attr.kind == FileKind::File && attr.tier != Tier::Pfs {
            self.glimpse(attr.ino, &self.file_layout(&attr)?)?.apply_to(&mut attr);
        }
        Ok(attr)
    }

    /// A file's layout, checked before any striping arithmetic relies on it.
    pub fn file_layout(&self, attr: &Attr) -> Result<Layout> {
        let l = attr.layout;
        if l.is_concrete() && l.stripe_count <= self.daemon_count() {
            Ok(l)
        } else {
            Err(Error::new(libc::EIO, format!("daemon 0 gave file {} the unusable layout {l:?}", attr.ino)))
        }
    }

    /// Reads a PFS-only file through daemon 0; short only at end of file.
    pub fn pfs_read(&self, path: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.pool.with_retry(METADATA_DAEMON, thread_slot(), |conn| {
            // A daemon may serve less than asked (its frame limit): only 0 is the end.
            let mut done = 0;
            while done < buf.len() {
                let want = (buf.len() - done).min(MAX_TRANSFER);
                let req = Request::PfsRead { path, offset: offset + done as u64, len: want as u32 };
                let n = conn.call_read(&req, &mut buf[done..done + want])?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            conn.moved(done as u64);
            Ok(done)
        })
    }

    /// After a removal sent with `keep`: daemon 0 keeps the removed file's
    /// objects until the last close here, or releases them now when the
    /// file is not open here (see `open_files`).
    fn keep_if_open(&self, removed: Removed, keep: bool) -> Result<()> {
        let Removed(Some(attr)) = removed else { return Ok(()) };
        if !keep || attr.kind != FileKind::File || attr.tier == Tier::Pfs || self.open_files.removed(attr.ino) {
            return Ok(());
        }
        self.meta(&Request::Release { ino: attr.ino })
    }
}

/// A Surge namespace path in wire form; relative paths are taken from the root.
pub(crate) fn wire_path(path: &str) -> Result<String> {
    surge_proto::path::resolve("/", path).map_err(|e| {
        let why = if path.is_empty() { "empty path".to_string() } else { format!("invalid Surge path {path:?}") };
        Error::new(e.0, why)
    })
}

fn not_connected(e: ClusterError) -> Error {
    Error::new(libc::ENOTCONN, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_and_canonical() {
        assert_eq!(wire_path("/ckpt//a/").unwrap(), "/ckpt/a");
        assert_eq!(wire_path("ckpt/./a").unwrap(), "/ckpt/a");
        assert_eq!(wire_path("/a/../b").unwrap(), "/b");
        assert_eq!(wire_path("").unwrap_err().errno(), libc::ENOENT);
        assert_eq!(wire_path("/a\0b").unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn missing_cluster_file_says_how_to_start_one() {
        let dir = tempfile::tempdir().unwrap();
        let err = Client::connect(&dir.path().join("cluster.toml")).err().unwrap();
        assert_eq!(err.errno(), libc::ENOTCONN);
        assert!(err.message().contains("surge start"), "{err}");
    }
}
