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
/// Daemon 0's namespace database, part of its store.
pub const NAMESPACE: &str = "namespace.redb";
const HEADER: &str = "surge-daemon-identity 1";

/// How a daemon treats its directory's store when it starts (`--store-start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
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

/// What a daemon found of its store in its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A new directory: the identity of a new store.
    New(Identity),
    /// Its store (whose objects the store itself then checks).
    Existing(Identity),
    /// Its directory without its store, or without the store's inventory,
    /// and the loss accepted: the identity to come back under (a new epoch).
    WholeLoss(Identity),
}

/// Decides from daemon directory `dir` (of daemon `index` of `daemons`)
/// how the daemon may start. An error says what was lost and what to do.
pub fn examine(dir: &Path, index: u32, daemons: u32, start: StoreStart) -> Result<Found, String> {
    let found = Identity::read(dir).map_err(|e| format!("cannot read the identity of {}: {e}", dir.display()))?;
    let inventory = dir.join("objects").join(crate::inventory::FILE);
    let inventoried = inventory.exists();
    // A store's files without an identity to say whose: a namespace or an inventory (a symbolic
    // link in their place is no store, and is refused when they are opened).
    let is_file = |path: &Path| fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file());
    let held = is_file(&dir.join(NAMESPACE)) || is_file(&inventory);
    // Daemon 0's store includes the namespace: without it every name and layout is gone.
    let namespace_gone = index == 0 && fs::symlink_metadata(dir.join(NAMESPACE)).is_err();
    match found {
        Some(id) if id.daemon == index && id.daemons != daemons => Err(format!(
            "{} was made for a cluster of {} daemons, not {daemons}: start the cluster again with {} daemons in \
             all, or use a new buffer directory",
            dir.display(),
            id.daemons,
            id.daemons
        )),
        Some(id) if (id.daemon, id.daemons) != (index, daemons) => Err(format!(
            "{} holds the store of daemon {} of a {}-daemon cluster, not of daemon {index} of {daemons}: \
             give each daemon its own directory",
            dir.display(),
            id.daemon,
            id.daemons
        )),
        Some(_) if inventoried && namespace_gone && start != StoreStart::AcceptLoss => Err(format!(
            "daemon 0 lost its namespace: {} is missing, so every file's name and layout is gone. \
             `surge start --daemon 0 --accept-loss` starts it with an empty namespace (the data daemons' \
             objects then name no file, and the orphan collector deletes them after --orphan-grace); or \
             restore the file and start it again",
            dir.join(NAMESPACE).display()
        )),
        Some(id) if inventoried => Ok(Found::Existing(id)),
        None if !held && !inventoried && start == StoreStart::New => {
            Ok(Found::New(Identity::new(index, daemons).map_err(|e| e.to_string())?))
        }
        found if start == StoreStart::AcceptLoss => {
            let id = match found {
                Some(id) => Identity { epoch: id.epoch + 1, ..id },
                None => Identity::new(index, daemons).map_err(|e| e.to_string())?,
            };
            Ok(Found::WholeLoss(id))
        }
        found => Err(format!(
            "daemon {index} lost its store: {} has {}. Files with stripes on daemon {index} cannot be read \
             back whole. `surge start --daemon {index} --accept-loss` brings it back empty and marks those \
             files lost (surge ls -l shows them; reads fail until they are removed or rewritten); or restore \
             the directory and start it again",
            dir.display(),
            if found.is_some() {
                "an identity but no object inventory"
            } else {
                "no identity (wiped, a node reboot emptied a tmpfs buffer, or made by a Surge from before identities)"
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_its_identity_is_refused_unless_new_and_empty_or_the_loss_is_accepted() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let new = examine(dir, 1, 3, StoreStart::New).unwrap();
        let Found::New(id) = new else { panic!("{new:?}") };
        assert_eq!((id.daemon, id.daemons, id.epoch), (1, 3, 1));
        // An empty directory is no store to a restart.
        let refused = examine(dir, 1, 3, StoreStart::Existing).unwrap_err();
        assert!(refused.contains("daemon 1 lost its store") && refused.contains("--accept-loss"), "{refused}");
        // A namespace or an inventory without an identity is a store someone took the identity of.
        fs::write(dir.join(NAMESPACE), b"").unwrap();
        assert!(examine(dir, 1, 3, StoreStart::New).is_err());
        id.write(dir).unwrap();
        fs::create_dir_all(dir.join("objects")).unwrap();
        fs::write(dir.join("objects").join(crate::inventory::FILE), b"").unwrap();
        assert_eq!(examine(dir, 1, 3, StoreStart::Existing).unwrap(), Found::Existing(id.clone()));
        assert!(examine(dir, 2, 3, StoreStart::New).unwrap_err().contains("not of daemon 2"));
        // The inventory gone: the store is gone, whatever the identity says.
        fs::remove_file(dir.join("objects").join(crate::inventory::FILE)).unwrap();
        assert!(examine(dir, 1, 3, StoreStart::Existing).is_err());
        let back = examine(dir, 1, 3, StoreStart::AcceptLoss).unwrap();
        assert_eq!(back, Found::WholeLoss(Identity { epoch: 2, ..id }));
    }

    #[test]
    fn daemon_0_without_its_namespace_is_refused_unless_the_loss_is_accepted() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let id = Identity::new(0, 2).unwrap();
        id.write(dir).unwrap();
        fs::create_dir_all(dir.join("objects")).unwrap();
        fs::write(dir.join("objects").join(crate::inventory::FILE), b"").unwrap();
        let refused = examine(dir, 0, 2, StoreStart::Existing).unwrap_err();
        assert!(refused.contains("daemon 0 lost its namespace") && refused.contains("--accept-loss"), "{refused}");
        assert!(examine(dir, 0, 2, StoreStart::New).is_err());
        assert_eq!(examine(dir, 0, 2, StoreStart::AcceptLoss).unwrap(), Found::Existing(id.clone()));
        fs::write(dir.join(NAMESPACE), b"").unwrap();
        assert_eq!(examine(dir, 0, 2, StoreStart::Existing).unwrap(), Found::Existing(id));
    }

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
