//! The namespace's redb database handle, reopened after an I/O error.
//!
//! redb marks a handle that saw a failed write (a full device, typically)
//! and refuses every later transaction on it with "Previous I/O error
//! occurred"; only a new handle, which reads the file back from its last
//! commit, works again. So a transaction that cannot begin for that reason
//! reopens the database (once no other transaction uses the old handle)
//! and begins again.

use crate::failure::Failure;
use redb::{Database, StorageError, TransactionError};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use surge_proto::Errno;

pub struct NamespaceDb {
    path: PathBuf,
    /// `None` after a reopen failed: the next transaction tries again.
    handle: RwLock<Handle>,
}

struct Handle {
    db: Option<Database>,
    /// Counts reopens, so that threads that saw one broken handle reopen it once.
    generation: u64,
}

/// The open database, kept from being reopened while a transaction uses it.
pub struct InUse<'a>(RwLockReadGuard<'a, Handle>);

impl Deref for InUse<'_> {
    type Target = Database;
    fn deref(&self) -> &Database {
        self.0.db.as_ref().expect("an InUse guard is only made for an open handle")
    }
}

impl NamespaceDb {
    pub fn open(path: &Path) -> Result<NamespaceDb, Failure> {
        Ok(NamespaceDb {
            path: path.to_path_buf(),
            handle: RwLock::new(Handle { db: Some(Database::create(path)?), generation: 0 }),
        })
    }

    /// Begins a transaction with `begin` (`Database::begin_read` or
    /// `begin_write`), reopening the database first if its handle failed.
    /// The guard must live as long as the transaction.
    pub fn begin<T>(
        &self,
        begin: impl Fn(&Database) -> Result<T, TransactionError>,
    ) -> Result<(InUse<'_>, T), Failure> {
        let mut reopened = false;
        loop {
            let handle = self.handle.read().unwrap_or_else(PoisonError::into_inner);
            let generation = handle.generation;
            let error = match &handle.db {
                Some(db) => match begin(db) {
                    Ok(txn) => return Ok((InUse(handle), txn)),
                    Err(e) if !reopened && is_io_failure(&e) => Failure::from(e),
                    Err(e) => return Err(e.into()),
                },
                None if !reopened => Failure::new(Errno::EIO, "namespace database is closed"),
                None => {
                    return Err(Failure::new(
                        Errno::EIO,
                        format!("namespace database {} is closed", self.path.display()),
                    ))
                }
            };
            drop(handle);
            crate::logging::log!(Warn, 0, "{error}: reopening the namespace database {}", self.path.display());
            self.reopen(generation)?;
            reopened = true;
        }
    }

    /// Replaces the handle of `generation` by a new one, unless another
    /// thread did already.
    fn reopen(&self, generation: u64) -> Result<(), Failure> {
        let mut handle: RwLockWriteGuard<'_, Handle> = self.handle.write().unwrap_or_else(PoisonError::into_inner);
        if handle.generation != generation {
            return Ok(());
        }
        handle.generation += 1;
        // The old handle closes first: it holds the file's lock.
        drop(handle.db.take());
        let db = Database::create(&self.path).map_err(|e| {
            let failure = Failure::from(e);
            Failure::new(
                failure.errno,
                format!("cannot reopen the namespace database {}: {}", self.path.display(), failure.message),
            )
        })?;
        handle.db = Some(db);
        Ok(())
    }
}

fn is_io_failure(e: &TransactionError) -> bool {
    matches!(e, TransactionError::Storage(StorageError::Io(_) | StorageError::PreviousIo))
}
