//! Where each namespace request goes: daemon 0 when it keeps the whole
//! namespace (the cluster file's `namespace = "one"`), else the daemon
//! holding the names it touches (`"hashed"`, the rule in
//! `surge_proto::shards`). `Shared::meta` sends every namespace request
//! through [`Routing::call`].
//!
//! With the namespace spread over the daemons, a directory whose name and
//! entries are on two daemons is made in two steps (the name, then its
//! anchor on its own daemon) and removed the other way round (the anchor,
//! refused while the directory has entries there, then the name), as
//! surged's `shard` module says; a rename or hard link between two
//! daemons fails here with EXDEV, as between two file systems. A
//! directory's layout is set on both its name and its anchor.

use crate::error::{first_error, Error, Result};
use crate::pool::Pool;
use surge_proto::shards::{dir_shard, route, Route};
use surge_proto::{path, Attr, FileKind, Reply, Request};

/// How many shards the namespace has, and so where its requests go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Routing {
    pub shards: u32,
}

impl Routing {
    pub fn is_spread(&self) -> bool {
        self.shards > 1
    }

    /// The daemons holding the namespace.
    pub fn every_shard(&self) -> std::ops::Range<u32> {
        0..self.shards
    }

    /// Sends namespace request `req` where it goes.
    pub fn call<R: Reply>(&self, pool: &Pool, req: &Request<'_>) -> Result<R> {
        fn on<T: Reply>(pool: &Pool, shard: u32, req: &Request<'_>) -> Result<T> {
            pool.get(shard)?.call(req)
        }
        if !self.is_spread() {
            return on(pool, 0, req);
        }
        match (route(req, self.shards), req) {
            (Route::Shard(shard), &Request::Mkdir { path, .. }) => {
                let made = on(pool, shard, req);
                let Some(own) = self.own_shard(path).filter(|&own| own != shard) else { return made };
                // Made now, or a directory already (which a crash between the
                // two steps may have left without its anchor): anchored.
                let is_dir = match &made {
                    Ok(_) => true,
                    Err(e) if e.errno() == libc::EEXIST => {
                        on::<Attr>(pool, shard, &Request::Stat { path }).is_ok_and(|a| a.kind == FileKind::Dir)
                    }
                    Err(_) => false,
                };
                if is_dir {
                    let _anchor: Attr = on(pool, own, req)?;
                }
                made
            }
            (Route::Shard(shard), &Request::Rmdir { path }) => {
                let Some(own) = self.own_shard(path).filter(|&own| own != shard) else { return on(pool, shard, req) };
                on::<()>(pool, own, req)?;
                on(pool, shard, req).inspect_err(|e| {
                    // Still there (not empty on the PFS, say): its anchor comes back.
                    if ![libc::ENOENT, libc::ENOTDIR].contains(&e.errno()) {
                        let _: Result<Attr> = on(pool, own, &Request::Mkdir { path, mode: 0o755 });
                    }
                })
            }
            (Route::Shard(shard), &Request::SetLayout { path, .. }) => {
                let set = on(pool, shard, req)?;
                // The anchor's, which the directory's new files inherit (a file's own layout is fixed).
                if let Some(own) = self.own_shard(path).filter(|&own| own != shard) {
                    match on::<Attr>(pool, own, req) {
                        Err(e) if e.errno() != libc::ENOENT => return Err(e),
                        _ => {}
                    }
                }
                Ok(set)
            }
            (Route::Shard(shard), _) => on(pool, shard, req),
            (Route::Across(..), Request::Rename { from, to, .. } | Request::Link { from, to }) => Err(Error::new(
                libc::EXDEV,
                format!(
                    "{from} and {to} are in directories kept by different daemons (the cluster's namespace is \
                     hashed): a rename or hard link between them is refused as between file systems (mv copies)"
                ),
            )),
            (Route::Across(shard, _), _) => on(pool, shard, req),
            (Route::Every, _) => {
                let answers = self.on_every_shard(pool, req)?;
                Ok(answers.into_iter().last().expect("a namespace has a shard"))
            }
        }
    }

    /// `req` sent to every shard (requests rare enough to go one by one:
    /// `Sync`, `Fsck`, `SetMtbf`); the answers in shard order.
    pub fn on_every_shard<R: Reply>(&self, pool: &Pool, req: &Request<'_>) -> Result<Vec<R>> {
        first_error(self.every_shard().map(|shard| pool.get(shard)?.call(req)).collect())
    }

    /// The daemon a one-shard request `req` (a PFS read or write, say) goes to.
    pub fn shard_of(&self, req: &Request<'_>) -> u32 {
        match route(req, self.shards) {
            Route::Shard(shard) | Route::Across(shard, _) => shard,
            Route::Every => 0,
        }
    }

    /// The shard holding directory `dir`'s entries.
    fn own_shard(&self, dir: &str) -> Option<u32> {
        path::canonical(dir).ok().map(|dir| dir_shard(&dir, self.shards))
    }
}
