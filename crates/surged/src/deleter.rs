//! The deleter, a background task of daemon 0: deletes the objects of
//! removed files. `Unlink`, a `Rename` over a file and `evict` record the
//! removed file (inode and layout) in the namespace's `doomed` table in the
//! transaction that removes it; the deleter removes its object on every
//! stripe's daemon (through [`crate::peers`]), then drops the record. So
//! deletion survives a client or daemon crash at any point: a record stays
//! until every object is gone, and removing an object twice is harmless.
//!
//! Each object is retired before it is removed (`crate::fence`): whoever
//! still has the file open elsewhere gets ESTALE from then on. A file
//! removed with `keep` (its remover has it open) waits for the remover's
//! `Release` or the end of its hold lease (`namespace::HOLD_LEASE`), so
//! POSIX's unlink-while-open keeps working for the remover.
//! Requests that doom or release a file wake the deleter; its period only
//! paces retries after a failure (a data daemon down).

use crate::background::{Context, Task};
use crate::failure::Failure;
use crate::namespace::{Doomed, Namespace};
use crate::peers::Peers;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::Request;

/// Time between rounds when no request wakes the deleter.
const PERIOD: Duration = Duration::from_secs(10);
/// Doomed files read from the namespace at once.
const BATCH: usize = 256;

pub struct Deleter {
    pub namespace: Arc<Namespace>,
    pub peers: Arc<Peers>,
    pub daemons: u32,
}

impl Deleter {
    /// Removes the objects of `doomed` on every daemon holding a stripe,
    /// retiring them first: a client on another node that still has the
    /// file open then gets ESTALE, instead of reading zeros or writing
    /// orphans (`crate::fence`).
    fn delete_objects(&self, doomed: &Doomed) -> Result<(), Failure> {
        let retire = Request::ObjRetire { ino: doomed.ino, checked: false, size: 0, mtime_ns: 0 };
        for stripe in 0..doomed.layout.stripe_count {
            let daemon = doomed.layout.daemon_of(stripe, self.daemons);
            self.peers.call::<()>(daemon, &retire)?;
            self.peers.call::<()>(daemon, &Request::ObjRemove { ino: doomed.ino })?;
        }
        Ok(())
    }
}

impl Task for Deleter {
    fn name(&self) -> &'static str {
        "deleter"
    }

    fn period(&self) -> Duration {
        PERIOD
    }

    /// Deletes every doomed file that is due; a file whose objects cannot
    /// all be removed now ends the round (the next one tries again).
    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        loop {
            let batch = self.namespace.doomed_due(BATCH)?;
            if batch.is_empty() {
                return Ok(());
            }
            for doomed in &batch {
                if cx.stopping() {
                    return Ok(());
                }
                self.delete_objects(doomed).map_err(|f| {
                    Failure::new(
                        f.errno,
                        format!("the objects of removed inode {} stay for now: {}", doomed.ino, f.text()),
                    )
                })?;
                self.namespace.forget_doomed(doomed.ino)?;
            }
        }
    }
}
