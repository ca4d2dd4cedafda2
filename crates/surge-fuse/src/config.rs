//! How the mount serves and caches ([`MountConfig`]), given to
//! [`crate::serve`] and kept by the file system for every call. Plain data:
//! the file system (fs.rs) names it without depending on the crate root.

use std::time::Duration;

/// How the mount serves and caches.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Threads serving kernel requests at once (each may wait on the network).
    pub threads: usize,
    /// How long the kernel may trust a file's attributes (size included).
    pub attr_ttl: Duration,
    /// How long the kernel may trust a directory's attributes.
    pub dir_attr_ttl: Duration,
    /// How long the kernel may trust a name lookup.
    pub entry_ttl: Duration,
    /// How long the kernel may trust that a name names nothing (a
    /// negative entry); zero: it asks every time.
    pub missing_ttl: Duration,
    /// Open files with direct I/O (no page cache for file data).
    pub direct_io: bool,
    /// Let users other than the one mounting use the mount (needs
    /// `user_allow_other` in /etc/fuse.conf unless root).
    pub allow_other: bool,
    /// Appends the Surge path of every file opened for writing (once each),
    /// so a job on a shared cluster knows what to stage out, and at unmount
    /// `bytes WRITTEN READ`: what the kernel's writes and reads moved.
    pub writers_journal: Option<std::path::PathBuf>,
}

impl MountConfig {
    /// With the client following daemon 0's change feed (its cache of
    /// names lives `lifetime`; zero: it does not), the mount passes other
    /// clients' changes on to the kernel (`inval_entry`, `inval_inode`),
    /// so the kernel may keep names, missing names and directory
    /// attributes as long as the client keeps them. A file's attributes
    /// stay uncached: its size is its objects', which writes elsewhere
    /// change without a word to daemon 0. Without the feed no missing
    /// name is kept: another client's new file shows at once.
    pub fn following(self, lifetime: Duration) -> MountConfig {
        if lifetime.is_zero() {
            return self;
        }
        MountConfig {
            entry_ttl: self.entry_ttl.max(lifetime),
            missing_ttl: self.missing_ttl.max(lifetime),
            dir_attr_ttl: self.dir_attr_ttl.max(lifetime),
            ..self
        }
    }
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            threads: 8,
            attr_ttl: Duration::ZERO,
            dir_attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            missing_ttl: Duration::ZERO,
            direct_io: true,
            allow_other: false,
            writers_journal: None,
        }
    }
}
