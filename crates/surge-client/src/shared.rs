//! What a `Client` and its open `File`s share: the cluster, the connection
//! pool, the job, and the requests every part of the library sends (the
//! namespace on daemon 0, the objects of one file on all its stripes'
//! daemons at once). `Client` (the public API) and `File` are built on it;
//! it depends on neither, so the crate's modules form no import cycle.

use crate::error::{first_error, Error, Result};
use crate::extent::MAX_TRANSFER;
use crate::job::JobIdentity;
use crate::local::LocalFiles;
use crate::mount_link::MountLink;
use crate::names::Names;
use crate::objects::ObjectsSummary;
use crate::open_files::OpenFiles;
use crate::pool::{thread_slot, Pool};
use crate::routing::Routing;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use surge_cluster::{ClusterFile, ConnPolicy};
use surge_proto::msg::{open_flags, AllocateMode, ObjStatReply, Removed, SeekReply};
use surge_proto::{Attr, FileKind, Layout, Reply, Request, Tier};

/// The daemon whose change feed the cache of names follows.
const METADATA_DAEMON: u32 = 0;
/// How many more times a stat asks again when the file its name named went
/// meanwhile (a name replaced as fast as it is stat'ed fails with ESTALE).
const STAT_ATTEMPTS: u32 = 8;

/// What clients and their open files share.
pub(crate) struct Shared {
    pub cluster: ClusterFile,
    pub pool: Pool,
    pub job: JobIdentity,
    pub conn_policy: ConnPolicy,
    /// How long an append may hold its file's append lock: half the
    /// request timeout, so a waiter gives up before its own request does.
    pub append_lease: Duration,
    pub open_files: Arc<OpenFiles>,
    /// Daemon 0's answers about names, cached (`crate::names`).
    pub names: Arc<Names>,
    /// This very `Shared`, for the cache's watcher (which must not keep it alive).
    pub me: Weak<Shared>,
    /// Where namespace requests go (daemon 0, or the daemon holding the name).
    pub routing: Routing,
    /// The daemons of this client's node, named in every `Open` so a file
    /// created under `local` placement starts on one of them.
    pub local_daemons: Vec<u32>,
    /// The object descriptors the daemons of this node handed out.
    pub local: LocalFiles,
    /// The FUSE mount told of this client's changes (`crate::mount_link`).
    pub mount_link: OnceLock<MountLink>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.names.close();
    }
}

impl Shared {
    /// A `File` of `ino` closed (`OpenFiles::closed`); with its last
    /// handle go the object descriptors of the node-local data path.
    pub fn closed(&self, ino: u64, held: bool) -> bool {
        let removed = self.open_files.closed(ino, held);
        if !self.open_files.is_open(ino) {
            self.local.forget(ino);
        }
        removed
    }

    /// Is stripe `stripe` of `layout` on a daemon reached over the node-local data path?
    pub fn is_local(&self, layout: &Layout, stripe: u32) -> bool {
        self.pool.is_local(layout.daemon_of(stripe, self.daemon_count()))
    }

    pub fn daemon_count(&self) -> u32 {
        self.pool.daemon_count()
    }

    /// A namespace request to the metadata daemon; what it changed leaves
    /// the cache of names (`crate::names`).
    pub fn meta<R: Reply>(&self, req: &Request<'_>) -> Result<R> {
        self.meta_forgetting(req).map(|(reply, _)| reply)
    }

    /// `meta`, also saying whether dropping what `req` changed moved the cache's generation on.
    fn meta_forgetting<R: Reply>(&self, req: &Request<'_>) -> Result<(R, bool)> {
        let reply = self.routing.call(&self.pool, req)?;
        let changes = surge_proto::changes::made_by(req);
        if let Some(link) = self.mount_link.get() {
            // The change is made whatever this says: a server that cannot
            // be told is gone, and its mount (ENOTCONN) shows nothing stale.
            let _ = link.tell(&crate::mount_link::Moved::by(req), &changes);
        }
        Ok((reply, self.names.forget_own(&changes)))
    }

    /// A request whose reply is daemon 0's attributes of `path`, which the
    /// cache keeps (an `Open`'s or a `Stat`'s).
    fn meta_attr(&self, path: &str, req: &Request<'_>) -> Result<Attr> {
        let seen = self.names.generation();
        let (attr, moved): (Attr, bool) = self.meta_forgetting(req)?;
        self.names.put(path, &attr, seen + u64::from(moved));
        Ok(attr)
    }

    pub fn open_attr(&self, path: &str, flags: u32, mode: u32, layout: Layout) -> Result<Attr> {
        let local = self.local_daemons.clone();
        self.meta_attr(path, &Request::Open { path, flags, mode: mode & 0o7777, layout, local })
    }

    /// Daemon 0's attributes of `path` (`Stat`: a buffer file's size and
    /// times are its objects'), from the cache while it has them.
    pub fn named_attr(&self, path: &str) -> Result<Attr> {
        if let Some(attr) = self.names.get(path) {
            return Ok(attr);
        }
        if self.names.stat_counted() {
            let me = self.me.clone();
            self.names.watch(move || me.upgrade().map(|shared| shared.pool.dial_own(METADATA_DAEMON)));
        }
        self.meta_attr(path, &Request::Stat { path })
    }

    /// Passes the changes other clients make to `listener` too (the
    /// mount, for the kernel's caches), and follows them from now on.
    pub fn listen_to_changes(&self, listener: crate::names::Listener) {
        let me = self.me.clone();
        self.names.listen(listener, move || me.upgrade().map(|shared| shared.pool.dial_own(METADATA_DAEMON)));
    }

    /// Opens a PFS-only file's buffer shadow (created empty, or the one
    /// another writer already created).
    pub fn open_shadow(&self, path: &str, mode: u32) -> Result<Attr> {
        let flags = open_flags::CREATE | open_flags::WRITE | open_flags::TRUNC;
        self.open_attr(path, flags, mode, Layout::INHERIT)
    }

    /// `Stat` with the size and mtime of a buffer file filled in from its objects.
    pub fn stat(&self, path: &str) -> Result<Attr> {
        let mut attempts = 0;
        loop {
            let mut attr = self.named_attr(path)?;
            // A lost file's objects cannot give its size (daemon 0 says where its data went).
            if attr.kind != FileKind::File || matches!(attr.tier, Tier::Pfs | Tier::Lost) {
                return Ok(attr);
            }
            match self.glimpse(attr.ino, &self.file_layout(&attr)?) {
                Ok(objects) => {
                    objects.apply_to(&mut attr);
                    return Ok(attr);
                }
                // Removed (another process's rename replaced it) or evicted
                // since the `Stat`: its objects are retired. What the name
                // names now answers.
                Err(e) if e.errno() == libc::ESTALE && attempts < STAT_ATTEMPTS => {
                    self.names.forget(&[(path.to_string(), false)]);
                    attempts += 1
                }
                Err(e) => return Err(e),
            }
        }
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
        let shard = self.routing.shard_of(&Request::PfsRead { path, offset, len: 0 });
        self.pool.with_retry(shard, thread_slot(), |conn| {
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

    /// Writes `data` at `offset` into a file daemon 0 placed on the PFS
    /// directly; the bytes written (short only when the PFS filled up).
    pub fn pfs_write(&self, path: &str, offset: u64, data: &[u8]) -> Result<usize> {
        // Writes at given offsets are idempotent: a broken connection is retried.
        let shard = self.routing.shard_of(&Request::PfsSync { path });
        self.pool.with_retry(shard, thread_slot(), |conn| {
            let mut done = 0;
            while done < data.len() {
                let piece = &data[done..data.len().min(done + MAX_TRANSFER)];
                let n = conn.call::<u64>(&Request::PfsWrite { path, offset: offset + done as u64, data: piece })?;
                done += n as usize;
                if n < piece.len() as u64 {
                    break;
                }
            }
            conn.moved(done as u64);
            Ok(done)
        })
    }

    /// Makes the writes to a file placed on the PFS directly durable, verified.
    /// Makes every namespace change so far durable on daemon 0 (`Sync`):
    /// a file's fsync covers its name, a directory's the names in it.
    pub fn sync_namespace(&self) -> Result<()> {
        for shard in self.routing.every_shard() {
            self.pool.with_retry(shard, thread_slot(), |conn| conn.call::<()>(&Request::Sync))?;
        }
        Ok(())
    }

    pub fn pfs_sync(&self, path: &str) -> Result<()> {
        let shard = self.routing.shard_of(&Request::PfsSync { path });
        self.pool.with_retry(shard, thread_slot(), |conn| conn.call(&Request::PfsSync { path }))
    }

    /// After a removal sent with `keep`: daemon 0 keeps the removed file's
    /// objects until the last close here, or releases them now when the
    /// file is not open here (see `open_files`).
    pub fn keep_if_open(&self, removed: Removed, keep: bool) -> Result<()> {
        let Removed(Some(attr)) = removed else { return Ok(()) };
        if !keep || attr.kind != FileKind::File || attr.tier == Tier::Pfs || self.open_files.removed(attr.ino) {
            return Ok(());
        }
        self.meta(&Request::Release { ino: attr.ino })
    }

    /// Sends `request(stripe)` to every stripe's daemon, each sent before
    /// any reply is awaited, so the daemons serve them at once without a
    /// thread per stripe (these requests and replies are small); results
    /// in stripe order. Connections are taken in daemon order, so two
    /// callers never each hold one the other waits for. Object requests are
    /// idempotent: a stripe whose connection broke is sent again on another
    /// (`Pool::with_retry`).
    fn on_every_stripe<T: Reply>(&self, layout: &Layout, request: impl Fn(u32) -> Request<'static>) -> Vec<Result<T>> {
        let count = self.daemon_count();
        let slot = thread_slot();
        let mut stripes: Vec<u32> = (0..layout.stripe_count).collect();
        stripes.sort_by_key(|&stripe| layout.daemon_of(stripe, count));
        let sent: Vec<_> = stripes
            .into_iter()
            .map(|stripe| {
                let daemon = layout.daemon_of(stripe, count);
                let sent = self.pool.lane(daemon, slot).and_then(|mut conn| {
                    let pending = conn.send(&request(stripe))?;
                    Ok((conn, pending))
                });
                (stripe, daemon, sent)
            })
            .collect();
        let mut out: Vec<Option<Result<T>>> = (0..layout.stripe_count).map(|_| None).collect();
        for (stripe, daemon, sent) in sent {
            // A connection that could not be had or could not send never carried the request.
            let (answer, broken) = match sent {
                Ok((mut conn, pending)) => {
                    let answer = conn.receive(pending);
                    (answer, conn.is_broken())
                }
                Err(e) => (Err(e), true),
            };
            out[stripe as usize] = Some(match answer {
                Err(e) if broken && e.errno() == libc::EIO => {
                    self.pool.with_retry(daemon, slot.wrapping_add(1), |conn| conn.call(&request(stripe)))
                }
                answer => answer,
            });
        }
        out.into_iter().map(|answer| answer.expect("every stripe was answered")).collect()
    }

    /// Size, modification time and version from the objects (the "glimpse").
    pub(crate) fn glimpse(&self, ino: u64, layout: &Layout) -> Result<ObjectsSummary> {
        Ok(ObjectsSummary::of(layout, &self.object_stats(ino, layout)?))
    }

    /// Every object's `ObjStat`, in stripe order.
    pub(crate) fn object_stats(&self, ino: u64, layout: &Layout) -> Result<Vec<ObjStatReply>> {
        first_error(self.on_every_stripe(layout, |_| Request::ObjStat { ino }))
    }

    /// Sets the file's length to `len`: each object gets exactly the bytes a
    /// file of that length has in it (this shrinks and extends alike).
    pub(crate) fn truncate_objects(&self, ino: u64, layout: &Layout, len: u64) -> Result<()> {
        let done = self
            .on_every_stripe::<()>(layout, |stripe| Request::ObjTruncate { ino, len: layout.object_len(stripe, len) });
        first_error(done).map(drop)
    }

    /// lseek(2)'s SEEK_DATA (SEEK_HOLE with `hole`) over the objects: the
    /// least file offset at or after `offset` where some stripe's data (hole)
    /// starts; `None` when no data follows. Each object's offsets map to
    /// file offsets in order, so each stripe's first answer is its best.
    pub(crate) fn seek_objects(&self, ino: u64, layout: &Layout, offset: u64, hole: bool) -> Result<Option<u64>> {
        let found = first_error(self.on_every_stripe::<SeekReply>(layout, |stripe| Request::ObjSeek {
            ino,
            offset: layout.object_len(stripe, offset),
            hole,
        }))?;
        Ok(found.iter().zip(0..).filter_map(|(reply, stripe)| layout.file_offset(stripe, reply.0?)).min())
    }

    /// fallocate(2) `mode` of the file range `[offset, offset + len)`: each
    /// object gets the part of it it holds (its lengths unchanged).
    pub(crate) fn allocate_objects(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: u64,
        mode: AllocateMode,
    ) -> Result<()> {
        let done = self.on_every_stripe::<()>(layout, |stripe| {
            let (from, to) = (layout.object_len(stripe, offset), layout.object_len(stripe, offset + len));
            Request::ObjAllocate { ino, offset: from, len: to - from, mode }
        });
        first_error(done).map(drop)
    }

    pub(crate) fn sync_objects(&self, ino: u64, layout: &Layout) -> Result<()> {
        first_error(self.on_every_stripe::<()>(layout, |_| Request::ObjSync { ino })).map(drop)
    }
}
