//! Which daemon holds which part of the namespace when it is spread over
//! the daemons (`surge start --namespace hashed`), as GekkoFS spreads its
//! metadata by a hash [GekkoFS]; the one rule the client routes by and each
//! daemon checks its role by. With one shard (`--namespace one`) every
//! answer is daemon 0.
//!
//! The entries of directory `D` (its names and their records) live on the
//! shard `dir_shard(D)`, a CRC-32C of `D`'s canonical path modulo the
//! shard count: a readdir or a create is one shard, and the directories of
//! different processes spread over the daemons. The record of a name is
//! therefore on `entry_shard(path)`, its directory's shard; the root's on
//! `dir_shard("/")`. A directory also has an anchor on its own shard (when
//! that differs from its parent's), so a create in it is checked there.
//!
//! Inode numbers carry the shard that made them in bits 56..62
//! ([`ino_shard`]): the shard holding a file's record (names never move
//! between shards: a rename or link across shards is refused with EXDEV),
//! so requests by inode (close, hold, release, append locks) and each
//! shard's orphan collector know whose inode it is.

use crate::msg::Request;
use crate::path;

/// Where a namespace request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this shard.
    Shard(u32),
    /// A rename or link whose two names are on different shards (`from`'s, `to`'s).
    Across(u32, u32),
    /// To every shard (`Sync`, `Fsck`, `MarkLost`, `SetMtbf`).
    Every,
}

/// The shard of the name `p`, canonical or not (an invalid path goes to
/// shard 0, which refuses it).
fn shard_of_name(p: &str, shards: u32) -> u32 {
    path::canonical(p).map_or(0, |p| entry_shard(&p, shards))
}

/// Where namespace request `req` goes when the namespace is spread over
/// `shards` daemons. `Mkdir` and `Rmdir` go to the name's shard; the
/// client then gives the directory's own shard its anchor, or takes it
/// away first (`surge_client`'s routing, surged's `shard` module).
pub fn route(req: &Request<'_>, shards: u32) -> Route {
    let by_ino = |ino: u64| Route::Shard(ino_shard(ino, shards));
    match *req {
        Request::Readdir { path, .. } => Route::Shard(path::canonical(path).map_or(0, |p| dir_shard(&p, shards))),
        Request::Rename { from, to, .. } | Request::Link { from, to } => {
            match (shard_of_name(from, shards), shard_of_name(to, shards)) {
                (a, b) if a == b => Route::Shard(a),
                (a, b) => Route::Across(a, b),
            }
        }
        Request::Open { path, .. }
        | Request::Stat { path }
        | Request::Mkdir { path, .. }
        | Request::Rmdir { path }
        | Request::Unlink { path, .. }
        | Request::Symlink { path, .. }
        | Request::Readlink { path }
        | Request::Mknod { path, .. }
        | Request::StageDir { path }
        | Request::GetXattr { path, .. }
        | Request::SetXattr { path, .. }
        | Request::ListXattr { path }
        | Request::RemoveXattr { path, .. }
        | Request::SetLayout { path, .. }
        | Request::SetAttr { path, .. }
        | Request::StageBegin { path, .. }
        | Request::StageCommit { path, .. }
        | Request::Evicted { path, .. }
        | Request::PfsRead { path, .. }
        | Request::PfsWrite { path, .. }
        | Request::PfsSync { path } => Route::Shard(shard_of_name(path, shards)),
        // A temp is named beside its file.
        Request::StageAbort { temp } => Route::Shard(shard_of_name(temp, shards)),
        Request::Close { ino }
        | Request::Release { ino }
        | Request::AppendLock { ino, .. }
        | Request::AppendUnlock { ino, .. } => by_ino(ino),
        Request::Hold { ref inos } => inos.first().map_or(Route::Shard(0), |&ino| by_ino(ino)),
        Request::Sync | Request::Fsck { .. } | Request::MarkLost { .. } | Request::SetMtbf { .. } => Route::Every,
        _ => Route::Shard(0),
    }
}

/// Where an inode number keeps its shard.
pub const INO_SHARD_SHIFT: u32 = 56;
/// Most shards: the shard field is 7 bits, below the PFS bit (63).
pub const MAX_SHARDS: u32 = 1 << 7;
const INO_SHARD_MASK: u64 = (MAX_SHARDS as u64 - 1) << INO_SHARD_SHIFT;

/// The shard holding the entries of directory `dir` (a canonical path).
pub fn dir_shard(dir: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    crc32c::crc32c(dir.as_bytes()) % shards
}

/// The shard holding the record of the name `path` (a canonical path):
/// its directory's; the root's is the root directory's.
pub fn entry_shard(path: &str, shards: u32) -> u32 {
    match path::split(path) {
        Some((dir, _)) => dir_shard(dir, shards),
        None => dir_shard(path, shards),
    }
}

/// The shard whose namespace handed out inode `ino` (0 with one shard).
pub fn ino_shard(ino: u64, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    ((ino & INO_SHARD_MASK) >> INO_SHARD_SHIFT) as u32
}

/// The bits of shard `shard`'s inode numbers (none with one shard).
pub fn ino_shard_bits(shard: u32, shards: u32) -> u64 {
    if shards <= 1 {
        return 0;
    }
    u64::from(shard) << INO_SHARD_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_one_shard_everything_is_daemon_0() {
        assert_eq!(dir_shard("/a/b", 1), 0);
        assert_eq!(entry_shard("/a/b", 1), 0);
        assert_eq!(ino_shard(u64::MAX >> 1, 1), 0);
        assert_eq!(ino_shard_bits(0, 1), 0);
    }

    #[test]
    fn a_name_lives_on_its_directorys_shard_and_the_root_on_its_own() {
        for shards in 2..5 {
            assert_eq!(entry_shard("/a/b/c", shards), dir_shard("/a/b", shards));
            assert_eq!(entry_shard("/x", shards), dir_shard("/", shards));
            assert_eq!(entry_shard("/", shards), dir_shard("/", shards));
        }
    }

    #[test]
    fn an_inode_says_which_shard_made_it() {
        for shard in [0, 1, 5, MAX_SHARDS - 1] {
            let ino = ino_shard_bits(shard, MAX_SHARDS) | 0x7fff_ffff_0000_1234 & !INO_SHARD_MASK;
            assert_eq!(ino_shard(ino, MAX_SHARDS), shard);
            assert_eq!(ino & (1 << 63), 0, "the PFS bit stays free");
        }
    }

    #[test]
    fn requests_go_to_their_names_shard_listings_to_the_directorys_and_inodes_to_their_makers() {
        let shards = 3;
        let stat = Request::Stat { path: "/a//b/" };
        assert_eq!(route(&stat, shards), Route::Shard(dir_shard("/a", shards)));
        let readdir = Request::Readdir { path: "/a/b", after: "", max: 0 };
        assert_eq!(route(&readdir, shards), Route::Shard(dir_shard("/a/b", shards)));
        let close = Request::Close { ino: ino_shard_bits(2, shards) | 77 };
        assert_eq!(route(&close, shards), Route::Shard(2));
        assert_eq!(route(&Request::Sync, shards), Route::Every);
        let dirs: Vec<String> = (0..32).map(|i| format!("/d{i}")).collect();
        let (a, b) = (&dirs[0], dirs.iter().find(|d| dir_shard(d, shards) != dir_shard(&dirs[0], shards)).unwrap());
        let (from, to) = (format!("{a}/f"), format!("{b}/f"));
        let across = Request::Rename { from: &from, to: &to, keep: false };
        assert_eq!(route(&across, shards), Route::Across(dir_shard(a, shards), dir_shard(b, shards)));
        let within = Request::Link { from: &from, to: &format!("{a}/g") };
        assert_eq!(route(&within, shards), Route::Shard(dir_shard(a, shards)));
    }

    #[test]
    fn per_process_directories_spread_over_the_shards() {
        // mdtest-easy's per-rank directories, 64 of them over 2 and 3 shards.
        for shards in [2u32, 3] {
            let mut count = vec![0u32; shards as usize];
            for rank in 0..64 {
                count[dir_shard(&format!("/out/test-dir.0-0/mdtest_tree.{rank}.0"), shards) as usize] += 1;
            }
            let most = *count.iter().max().unwrap();
            assert!(most * 100 <= 64 * 60, "{count:?}: no shard holds more than 60%");
        }
    }
}
