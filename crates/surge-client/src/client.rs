//! The client: cluster membership, the namespace (served by daemon 0) and
//! the per-file object bookkeeping namespace changes imply.

use crate::config::ClientConfig;
use crate::conn::{Endpoint, Session};
use crate::error::{Error, Result};
use crate::fanout::in_parallel;
use crate::file::{BufferFile, File};
use crate::local::LocalFiles;
use crate::mount_link::MountLink;
use crate::names::{Listener, Names};
use crate::open_files::OpenFiles;
use crate::pool::Pool;
use crate::routing::Routing;
use crate::shared::Shared;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use surge_cluster::{ClusterError, ClusterFile, DaemonEntry};
use surge_proto::drain::DrainReport;
use surge_proto::msg::{DaemonStatus, FsckReply, ReaddirReply, Removed, KEEP_ID, KEEP_MODE, KEEP_MTIME};
use surge_proto::{Attr, DirEntry, FileKind, Layout, Request};
/// Directory entries asked for per `Readdir` page.
const READDIR_PAGE: u32 = 1024;

/// A connection to a Surge cluster. Cheap to share (`Arc<Client>`); every
/// method may be called from many threads at once.
/// What [`Client::set_attr`] changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttrUpdate {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
}

pub struct Client {
    shared: Arc<Shared>,
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
        let open_files = Arc::new(OpenFiles::default());
        let local_daemons = if config.local { cluster.local_daemons() } else { Vec::new() };
        let local_sockets = cluster
            .daemons
            .iter()
            .map(|d| d.local_socket.clone().filter(|_| local_daemons.contains(&d.index)))
            .collect();
        let session = Session {
            local_sockets,
            secret,
            secret_file: cluster.secret_file.clone(),
            cluster_id: cluster.cluster_id.clone(),
            daemon_count: endpoints.len() as u32,
            job: config.job.clone(),
            host: surge_cluster::hostname(),
            instance: surge_proto::msg::new_client_instance(),
            open_files: Arc::clone(&open_files),
            shards: cluster.namespace.shards(cluster.daemons.len() as u32),
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            late_failures: Arc::default(),
        };
        let count = config.conns.unwrap_or(cluster.connections.count);
        let conn_policy = config.conn_policy.unwrap_or(cluster.connections.policy);
        let session_shards = session.shards;
        let pool = Pool::new(session, endpoints, count);
        let append_lease = config.io_timeout / 2;
        let routing = Routing { shards: session_shards };
        // The cache follows daemon 0's change feed alone: with the namespace
        // spread over the daemons, names are not cached (yet).
        let meta_cache = if routing.is_spread() { Duration::ZERO } else { config.meta_cache };
        let names = Arc::new(Names::new(meta_cache, pool.instance(), &config.node_clock));
        let local_daemons = cluster.local_daemons();
        let shared = Arc::new_cyclic(|me| Shared {
            cluster,
            pool,
            job: config.job,
            conn_policy,
            append_lease,
            open_files,
            names,
            me: me.clone(),
            local_daemons,
            local: LocalFiles::default(),
            routing,
            mount_link: std::sync::OnceLock::new(),
        });
        Ok(Client { shared })
    }

    /// How long cached names and attributes may be served
    /// (`SURGE_META_CACHE`; zero: none are cached), the bound on seeing
    /// another client's change (docs/core.md, "Cached names and attributes").
    pub fn meta_cache(&self) -> Duration {
        self.shared.names.lifetime()
    }

    /// Calls `listener` with the paths other clients change (`None`: anything
    /// may have changed), as daemon 0's change feed brings them; the FUSE
    /// mount passes them on to the kernel's caches. Nothing happens when
    /// the cache is off (`meta_cache` zero).
    pub fn on_changes(&self, listener: impl Fn(Option<&[(String, bool)]>) + Send + Sync + 'static) {
        let listener: Listener = Box::new(listener);
        self.shared.listen_to_changes(listener);
    }

    /// From now on, every namespace change this client makes is told to
    /// the FUSE mount served by process `server_pid` before the call that
    /// made it returns, so the kernel's caches never show what it changed
    /// (`crate::mount_link`). Fails when the server cannot be reached.
    pub fn tell_mount_of_own_changes(&self, server_pid: u32) -> Result<()> {
        let link = MountLink::connect(server_pid).map_err(|e| {
            Error::new(
                libc::ENOTCONN,
                format!("the Surge mount's server (process {server_pid}) cannot be reached: {e}"),
            )
        })?;
        // A second call keeps the first link: both reach the one server of the mount.
        let _ = self.shared.mount_link.set(link);
        Ok(())
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.shared.cluster
    }

    pub fn job_id(&self) -> u64 {
        self.shared.job.id
    }

    /// Opens like open(2): `flags` are `libc::O_*`, `mode` applies to a file
    /// this call creates.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> Result<File> {
        let _op = self.shared.pool.operation();
        File::open(self.shared.clone(), wire_path(path)?, flags, mode, Layout::INHERIT)
    }

    /// Opens buffer file `file`, which another handle had open as `path`,
    /// by its objects: `path` may name it no more (removed or replaced
    /// since). It stays while this handle is open; one deleted meanwhile
    /// answers ESTALE to the first read or write.
    pub fn open_held(&self, path: &str, file: BufferFile, flags: i32) -> Result<File> {
        let _op = self.shared.pool.operation();
        File::open_held(self.shared.clone(), wire_path(path)?, file, flags)
    }

    /// Creates a new file (`O_CREAT|O_EXCL|O_RDWR`) with `layout`; its unset
    /// fields inherit from the directory's default.
    pub fn create(&self, path: &str, mode: u32, layout: Layout) -> Result<File> {
        let _op = self.shared.pool.operation();
        self.check_layout(&layout)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
        File::open(self.shared.clone(), wire_path(path)?, flags, mode, layout)
    }

    /// Attributes, with a file's size and mtime taken from its objects.
    pub fn stat(&self, path: &str) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        self.shared.stat(&wire_path(path)?)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let _op = self.shared.pool.operation();
        let _: Attr = self.shared.meta(&Request::Mkdir { path: &wire_path(path)?, mode: mode & 0o7777 })?;
        Ok(())
    }

    /// Creates the symbolic link `path` holding `target`, as symlink(2).
    pub fn symlink(&self, target: &str, path: &str) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::Symlink { path: &wire_path(path)?, target })
    }

    /// The target of the symbolic link `path`; EINVAL if it is not one.
    pub fn readlink(&self, path: &str) -> Result<String> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::Readlink { path: &wire_path(path)? })
    }

    /// Gives the PFS copy of directory `path` its mode, times and extended
    /// attributes: the last step of staging out a tree, once everything in
    /// it is staged.
    pub fn stage_dir(&self, path: &str) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::StageDir { path: &wire_path(path)? })
    }

    /// The value of extended attribute `name` of `path` (a link itself is
    /// not followed); ENODATA if it has none. Only `user.*` names are kept
    /// (EOPNOTSUPP for others).
    pub fn get_xattr(&self, path: &str, name: &str) -> Result<Vec<u8>> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::GetXattr { path: &wire_path(path)?, name })
    }

    /// Sets extended attribute `name` of `path`; `flags` as setxattr(2)'s.
    pub fn set_xattr(&self, path: &str, name: &str, value: &[u8], flags: u32) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::SetXattr { path: &wire_path(path)?, name, value, flags })
    }

    /// The names of `path`'s extended attributes, each ended by a NUL, as listxattr(2) gives them.
    pub fn list_xattr(&self, path: &str) -> Result<Vec<u8>> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::ListXattr { path: &wire_path(path)? })
    }

    pub fn remove_xattr(&self, path: &str, name: &str) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::RemoveXattr { path: &wire_path(path)?, name })
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::Rmdir { path: &wire_path(path)? })
    }

    pub fn unlink(&self, path: &str) -> Result<()> {
        let _op = self.shared.pool.operation();
        let path = wire_path(path)?;
        let keep = self.shared.open_files.any();
        let removed: Removed = self.shared.meta(&Request::Unlink { path: &path, keep })?;
        self.shared.keep_if_open(removed, keep)
    }

    /// Renames like rename(2); a file the rename replaces is deleted.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _op = self.shared.pool.operation();
        let (from, to) = (wire_path(from)?, wire_path(to)?);
        let keep = self.shared.open_files.any();
        let removed: Removed = self.shared.meta(&Request::Rename { from: &from, to: &to, keep })?;
        self.shared.keep_if_open(removed, keep)
    }

    /// Makes every namespace change made so far durable (what fsync of a
    /// directory asks; the namespace's changes are durable within its
    /// commit interval otherwise, docs/core.md "Durability").
    pub fn sync(&self) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.shared.sync_namespace()
    }

    /// All entries of a directory, in name order.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let _op = self.shared.pool.operation();
        let path = wire_path(path)?;
        let mut entries: Vec<DirEntry> = Vec::new();
        loop {
            let after = entries.last().map_or("", |e| e.name.as_str());
            let page: ReaddirReply = self.shared.meta(&Request::Readdir { path: &path, after, max: READDIR_PAGE })?;
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
        let _op = self.shared.pool.operation();
        // To zero, O_TRUNC does it in the same request (and copies nothing up from the PFS).
        let flags = if len == 0 { libc::O_WRONLY | libc::O_TRUNC } else { libc::O_WRONLY };
        self.open(path, flags, 0)?.set_len(len)
    }

    /// chmod, chown and utimens in one: sets what `change` names, leaving
    /// a `None` as it is. Who may is the caller's to check.
    pub fn set_attr(&self, path: &str, change: &AttrUpdate) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        let path = wire_path(path)?;
        let mtime_ns = match change.mtime_ns {
            Some(t) => t,
            // The namespace takes this change's time as the point after which
            // object writes count as newer: pin the current mtime first.
            None => self.shared.stat(&path)?.mtime_ns,
        };
        self.shared.meta(&Request::SetAttr {
            path: &path,
            mode: change.mode.map_or(KEEP_MODE, |m| m & 0o7777),
            uid: change.uid.unwrap_or(KEEP_ID),
            gid: change.gid.unwrap_or(KEEP_ID),
            atime_ns: change.atime_ns.unwrap_or(KEEP_MTIME),
            mtime_ns,
        })
    }

    /// Creates the FIFO, socket or device node `path` (mknod(2); a regular
    /// file is made by `open` with `O_CREAT|O_EXCL`), owned by `uid`:`gid`.
    pub fn mknod(&self, path: &str, kind: FileKind, mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        let path = wire_path(path)?;
        self.shared.meta(&Request::Mknod { path: &path, kind, mode: mode & 0o7777, rdev, uid, gid })
    }

    /// Gives the file `from` the further name `to`, as link(2) (a link at
    /// `from` is not followed).
    pub fn link(&self, from: &str, to: &str) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        let (from, to) = (wire_path(from)?, wire_path(to)?);
        self.shared.meta(&Request::Link { from: &from, to: &to })
    }

    /// Sets a directory's default layout for the files created in it.
    pub fn set_layout(&self, path: &str, layout: Layout) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.check_layout(&layout)?;
        let _: Attr = self.shared.meta(&Request::SetLayout { path: &wire_path(path)?, layout })?;
        Ok(())
    }

    /// Every daemon's status, in index order, asked in parallel.
    pub fn status(&self) -> Vec<(DaemonEntry, Result<DaemonStatus>)> {
        let _op = self.shared.pool.operation();
        let daemons = self.shared.cluster.daemons.clone();
        let indices = daemons.iter().map(|d| d.index).collect();
        let answers = in_parallel(indices, |index| self.shared.pool.get(index)?.call(&Request::Status));
        daemons.into_iter().zip(answers).collect()
    }

    /// What the data manager of daemon 0 does (`surge drain status`).
    pub fn drain_status(&self) -> Result<DrainReport> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::DrainStatus)
    }

    /// Sets job `job`'s mean time between failures, which orders its
    /// checkpoints' demotion (`surge ckpt mtbf`).
    pub fn set_mtbf(&self, job: u64, seconds: u64) -> Result<()> {
        let _op = self.shared.pool.operation();
        self.shared.meta(&Request::SetMtbf { job, seconds })
    }

    /// Asks daemon `index` to exit.
    /// Daemon 0's check of the namespace against every daemon's objects
    /// (`surge fsck`); with `repair`, its safe repairs done too.
    pub fn fsck(&self, repair: bool) -> Result<FsckReply> {
        // Each shard checks its own inodes against every daemon's objects.
        let replies: Vec<FsckReply> =
            self.shared.routing.on_every_shard(&self.shared.pool, &Request::Fsck { repair })?;
        Ok(replies.into_iter().fold(FsckReply { files: 0, objects: 0, findings: Vec::new() }, |mut all, one| {
            all.files += one.files;
            all.objects += one.objects;
            all.findings.extend(one.findings);
            all
        }))
    }

    pub fn shutdown_daemon(&self, index: u32) -> Result<()> {
        let _op = self.shared.pool.operation();
        let mut conn = self.shared.pool.get(index)?;
        conn.call::<()>(&Request::Shutdown)?;
        // The daemon closes its connections as it goes.
        conn.retire();
        Ok(())
    }

    fn check_layout(&self, layout: &Layout) -> Result<()> {
        layout.validate(self.shared.daemon_count()).map_err(|why| Error::new(libc::EINVAL, why))
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
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
