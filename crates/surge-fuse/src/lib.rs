//! The kernel-visible `/surge`: a FUSE file system whose every operation is
//! a call of the Surge client library, so every program (shells, static
//! binaries, `mmap` users, anything that forks, vforks or execs) sees real
//! kernel descriptors. This is the model of DAOS's `dfuse`: the mount is the
//! always-correct path, and the LD_PRELOAD interposer (`surge-preload`) is a
//! fast path over the same descriptors that skips the FUSE round trip.
//!
//! Built on `fuser` (the kernel protocol in Rust, no libfuse needed as
//! root; `fusermount3` for other users).
//!
//! # Coherence
//! - Files are opened with direct I/O by default: no page cache holds file
//!   data, so bytes written through the interposer, through another node or
//!   through this mount are what the next read returns. `mmap` still works
//!   (the kernel's `FUSE_DIRECT_IO_ALLOW_MMAP`); a mapping caches pages until
//!   it is unmapped or synced, as on NFS.
//! - File attributes are not cached by the kernel (`attr_ttl` 0): `stat`
//!   and `lseek(SEEK_END)` see the size the daemons hold, including bytes
//!   the interposer wrote. The server answers them from the client's cache
//!   of names (daemon 0's part) and the objects (the size); the getattr
//!   the kernel sends right after a lookup or create, from what that
//!   lookup or create answered (fs.rs, `Fresh`).
//! - Directory attributes and name lookups are cached by the kernel as
//!   long as the client caches names (`SURGE_META_CACHE`, 10 s by
//!   default; one second with the cache off). Changes through this mount
//!   are the kernel's own; those of other clients (another node, the
//!   `surge` command, an interposer without the mount) arrive on daemon
//!   0's change feed and are passed on to the kernel at once
//!   (`inval_entry`, `inval_inode`), so the cache's lifetime bounds only
//!   changes made outside Surge to PFS-only names, or a feed cut off.
//!   Names that name nothing are cached alike (negative entries), only
//!   while the feed is followed.
//! - Changes a process of this node makes through the client library
//!   beside the mount (the interposer's metadata fast path) are told to
//!   this server before their call returns, and it drops the kernel's
//!   entries for them then (`own_changes`).
//!
//! # Mount lifecycle
//! `mountpoint` finds, checks and removes mounts: a mount whose server died
//! (`ENOTCONN`) is stale, and is lazily unmounted before a new mount.

mod config;
mod fs;
mod jobs;
pub mod mountpoint;
mod nodes;
mod own_changes;

pub use config::MountConfig;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use surge_client::Client;

/// The file-system subtype (`fuse.surge` in /proc/mounts when fusermount3 mounts it).
pub const SUBTYPE: &str = "surge";

/// Mounts the cluster of `client` at `mountpoint` and serves it until it is
/// unmounted (`umount`, `surge umount`, or the returned error).
pub fn serve(client: Client, mountpoint: &Path, config: MountConfig) -> std::io::Result<()> {
    use fuser::MountOption::*;
    let config = config.following(client.meta_cache());
    let options = vec![
        FSName(format!("surge:{}:{}", client.cluster().cluster_id, std::process::id())),
        Subtype(SUBTYPE.into()),
        DefaultPermissions,
        NoSuid,
        NoDev,
        NoAtime,
    ];
    let mut session_config = fuser::Config::default();
    session_config.acl = if config.allow_other { fuser::SessionACL::All } else { fuser::SessionACL::Owner };
    session_config.mount_options = options;
    session_config.n_threads = Some(config.threads.max(1));
    session_config.clone_fd = true;
    let fs = fs::SurgeFs::new(client, config)?;
    let notifier = Arc::new(OnceLock::new());
    fs.pass_changes_to_kernel(Arc::clone(&notifier));
    if let Err(e) = own_changes::serve(Arc::clone(&notifier), fs.nodes()) {
        // The interposer then leaves every metadata call to the kernel.
        eprintln!("surge mount: no socket for the interposer's own changes ({e}); its metadata calls go through FUSE");
    }
    let session = fuser::Session::new(fs, mountpoint, &session_config)?;
    let _ = notifier.set(session.notifier());
    session.run()
}
