//! A daemon directory's identity: which daemon of which store it holds,
//! written once when the directory's store is made, so that a daemon that
//! comes back to a directory that lost its store (wiped by hand, or by the
//! node reboot that empties a tmpfs buffer) knows it, instead of serving
//! "nothing here" for stripes that were written.
//!
//! The file `identity` beside the objects says: the store id (random, made
//! with the store), the daemon's index and the cluster's daemon count, the
//! epoch (1 for a new store, raised each time a loss is accepted), and
//! `lost-below`: after a whole store was lost, every inode below it had
//! its objects on this daemon lost, and reads them as EIO rather than as
//! never written (see `store::DirStore`).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub const FILE: &str = "identity";
const HEADER: &str = "surge-daemon-identity 1";

/// How a daemon treats its directory's store when it starts (`--store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreStart {
    /// The directory may be new: an empty one gets a new store; one with an
    /// identity must be this daemon's. What `surge start` gives a cluster
    /// it starts.
    #[default]
    New,
    /// The store must be there, whole: a restart (`surge start --daemon N`).
    Existing,
    /// Come back after a loss: a directory without its store gets a new one,
    /// objects missing from an existing store stay missing; either way the
    /// metadata daemon marks the files that lost data, and reads of them fail.
    AcceptLoss,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub store: String,
    pub daemon: u32,
    pub daemons: u32,
    pub epoch: u64,
    pub lost_below: u64,
}

impl Identity {
    /// A new store's identity.
    pub fn new(daemon: u32, daemons: u32) -> io::Result<Identity> {
        let mut raw = [0u8; 16];
        getrandom::getrandom(&mut raw).map_err(|e| io::Error::other(e.to_string()))?;
        let store = raw.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Identity { store, daemon, daemons, epoch: 1, lost_below: 0 })
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// The identity in daemon directory `dir`; `None` when there is none.
    pub fn read(dir: &Path) -> io::Result<Option<Identity>> {
        let path = Identity::path(dir);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Identity::parse(&text)
            .map(Some)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{} is damaged", path.display())))
    }

    fn parse(text: &str) -> Option<Identity> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut field = |name: &str| -> Option<String> {
            let line = lines.next()?;
            line.strip_prefix(name)?.strip_prefix(' ').map(str::to_string)
        };
        Some(Identity {
            store: field("store")?,
            daemon: field("daemon")?.parse().ok()?,
            daemons: field("daemons")?.parse().ok()?,
            epoch: field("epoch")?.parse().ok()?,
            lost_below: field("lost-below")?.parse().ok()?,
        })
    }

    /// Writes the identity into `dir` (a new file renamed into place, 0600).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        surge_cluster::write_atomically(&Identity::path(dir), self.to_string().as_bytes(), 0o600)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{HEADER}")?;
        writeln!(f, "store {}", self.store)?;
        writeln!(f, "daemon {}", self.daemon)?;
        writeln!(f, "daemons {}", self.daemons)?;
        writeln!(f, "epoch {}", self.epoch)?;
        writeln!(f, "lost-below {}", self.lost_below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_reads_back_as_written_and_a_damaged_one_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(Identity::read(t.path()).unwrap(), None);
        let id = Identity { epoch: 3, lost_below: 77, ..Identity::new(2, 4).unwrap() };
        id.write(t.path()).unwrap();
        assert_eq!(Identity::read(t.path()).unwrap(), Some(id.clone()));
        assert_ne!(Identity::new(2, 4).unwrap().store, id.store, "each store is its own");
        fs::write(Identity::path(t.path()), "surge-daemon-identity 1\nstore x\n").unwrap();
        assert!(Identity::read(t.path()).is_err());
    }
}
