//! This daemon's part of a namespace spread over the daemons
//! (`--namespace hashed`; the rule of who holds what is
//! `surge_proto::shards`): each daemon keeps, in its own namespace
//! database, the entries of the directories that hash to it, with the
//! namespace's background work (deleter, collector, stage-out, stage temps,
//! kept handles, change feed) over that shard.
//!
//! A directory `D` whose name is on another shard than its entries has an
//! *anchor* on its own shard (`Namespace::anchor`): a record there that
//! the creates, listings and removals in `D` find, so each of them is one
//! shard. The client makes a directory in two steps, the name on its
//! directory's shard, then the anchor (a `Mkdir` reaching `D`'s own shard
//! is the anchor: [`Step`]); it removes one the other way round, the
//! anchor first, refused (ENOTEMPTY) while `D` has entries, then the
//! name. Either order leaves, after a crash between the steps, a directory
//! whose creates fail with ENOENT until the step is done again (a `mkdir`
//! or `rmdir` of it), never a name nobody can see.
//!
//! A request whose names are not this shard's is refused (a client
//! routing by a stale cluster file would otherwise be answered from the
//! wrong shard); a rename or hard link between two shards, and a rename of
//! a directory (its subtree's entries would move between shards), are
//! refused with EXDEV, as between two file systems: `mv` copies then.

use crate::failure::Failure;
use crate::namespace::{Namespace, Shard};
use surge_proto::shards::{dir_shard, ino_shard, route, Route};
use surge_proto::{path, Errno, FileKind, Request};

/// A daemon that lost objects tells the namespace which files they were
/// part of (`MarkLost`); with a namespace spread over the daemons that
/// would be every shard, before any of them may serve the files, which is
/// not done yet: such a daemon does not start rather than serve zeros.
pub fn refuse_loss(shard: Option<Shard>, index: u32) -> Result<(), String> {
    match shard {
        None => Ok(()),
        Some(_) => Err(format!(
            "daemon {index} lost objects, and with --namespace hashed the files they belong to cannot be marked \
             lost yet: restore its objects, or start the cluster afresh on new buffer directories"
        )),
    }
}

/// Is inode `ino`'s record this shard's (`None`: the whole namespace's)?
/// Each shard's orphan collector and fsck judge only its own inodes' objects;
/// shard 0 also those of inode numbers no shard hands out.
pub fn owns(shard: Option<Shard>, ino: u64) -> bool {
    let Some(shard) = shard else { return true };
    match ino_shard(ino, shard.count) {
        maker if maker < shard.count => maker == shard.index,
        _ => shard.index == 0,
    }
}

/// What a namespace request is on this shard.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Served as in a namespace of its own.
    Here,
    /// A `Mkdir` of a directory whose name is on another shard: its anchor.
    Anchor,
    /// An `Rmdir` of such a directory: its anchor goes, if it is empty here.
    Unanchor,
}

impl Step {
    /// What `req` is on `shard`; an error if it is not this shard's to serve.
    pub fn of(shard: Shard, req: &Request<'_>) -> Result<Step, Failure> {
        let own_dir = |p: &str| path::canonical(p).is_ok_and(|p| dir_shard(&p, shard.count) == shard.index);
        match (route(req, shard.count), req) {
            (Route::Shard(s), _) if s == shard.index => Ok(Step::Here),
            (Route::Shard(_), Request::Mkdir { path, .. }) if own_dir(path) => Ok(Step::Anchor),
            (Route::Shard(_), Request::Rmdir { path }) if own_dir(path) => Ok(Step::Unanchor),
            // A directory's layout is also its anchor's, which its new files inherit.
            (Route::Shard(_), Request::SetLayout { path, .. }) if own_dir(path) => Ok(Step::Here),
            (Route::Across(..), Request::Rename { from, to, .. } | Request::Link { from, to }) => Err(Failure::new(
                Errno(libc::EXDEV),
                format!(
                    "{from} and {to} are on different daemons of a namespace spread over the daemons \
                     (--namespace hashed): a rename or hard link between their directories is refused as \
                     between file systems (mv copies instead)"
                ),
            )),
            (Route::Every, _) => Ok(Step::Here),
            (Route::Shard(s), _) | (Route::Across(s, _), _) => Err(Failure::new(
                Errno::EINVAL,
                format!(
                    "{:?} belongs to daemon {s}, not {} (the namespace is spread over the daemons: route by the \
                     cluster file's `namespace`)",
                    req.op(),
                    shard.index
                ),
            )),
        }
    }
}

/// A rename of a directory would move its subtree's entries to the
/// shards of their new paths: refused with EXDEV (`mv` copies instead).
pub fn refuse_directory_rename(ns: &Namespace, from: &str) -> Result<(), Failure> {
    match ns.stat(from) {
        Ok(attr) if attr.kind == FileKind::Dir => Err(Failure::new(
            Errno(libc::EXDEV),
            format!(
                "{from} is a directory, and renaming one would move its entries between the daemons of a \
                 namespace spread over them (--namespace hashed): refused as between file systems (mv copies \
                 instead)"
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::shards::entry_shard;

    /// A directory path whose name and entries are on different shards of `count`, and one whose are on the same.
    fn dirs(count: u32) -> (String, String) {
        let split = (0..).map(|i| format!("/p/d{i}")).find(|d| entry_shard(d, count) != dir_shard(d, count));
        let same = (0..).map(|i| format!("/p/d{i}")).find(|d| entry_shard(d, count) == dir_shard(d, count));
        (split.unwrap(), same.unwrap())
    }

    #[test]
    fn a_mkdir_is_the_name_on_its_directorys_shard_and_the_anchor_on_its_own() {
        let count = 3;
        let (split, same) = dirs(count);
        let on = |index| Shard { index, count };
        let mkdir = Request::Mkdir { path: &split, mode: 0o755 };
        assert_eq!(Step::of(on(entry_shard(&split, count)), &mkdir).unwrap(), Step::Here);
        assert_eq!(Step::of(on(dir_shard(&split, count)), &mkdir).unwrap(), Step::Anchor);
        let rmdir = Request::Rmdir { path: &split };
        assert_eq!(Step::of(on(dir_shard(&split, count)), &rmdir).unwrap(), Step::Unanchor);
        let third = (0..count).find(|&s| s != entry_shard(&split, count) && s != dir_shard(&split, count)).unwrap();
        assert_eq!(Step::of(on(third), &mkdir).unwrap_err().errno, Errno::EINVAL);
        // One step when both are on one shard.
        let mkdir = Request::Mkdir { path: &same, mode: 0o755 };
        assert_eq!(Step::of(on(dir_shard(&same, count)), &mkdir).unwrap(), Step::Here);
    }

    #[test]
    fn each_inode_is_judged_by_the_shard_that_made_it_and_unmade_ones_by_shard_0() {
        use surge_proto::shards::ino_shard_bits;
        let count = 2;
        let ino_of = |s| ino_shard_bits(s, 100) | 42;
        assert!(owns(Some(Shard { index: 1, count }), ino_of(1)));
        assert!(!owns(Some(Shard { index: 0, count }), ino_of(1)));
        assert!(owns(Some(Shard { index: 0, count }), ino_of(7)));
        assert!(!owns(Some(Shard { index: 1, count }), ino_of(7)));
        assert!(owns(None, ino_of(7)));
    }

    #[test]
    fn a_rename_between_shards_is_exdev_and_a_misrouted_request_einval() {
        let count = 2;
        let a = "/r0".to_string();
        let b = (1..).map(|i| format!("/r{i}")).find(|d| dir_shard(d, count) != dir_shard(&a, count)).unwrap();
        let (from, to) = (format!("{a}/f"), format!("{b}/f"));
        let rename = Request::Rename { from: &from, to: &to, keep: false };
        let here = Shard { index: dir_shard(&a, count), count };
        assert_eq!(Step::of(here, &rename).unwrap_err().errno, Errno(libc::EXDEV));
        let stat = Request::Stat { path: &to };
        assert_eq!(Step::of(here, &stat).unwrap_err().errno, Errno::EINVAL);
    }
}
