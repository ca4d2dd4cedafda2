//! Connections to the daemons, reused across calls.
//!
//! Callers ask for "a connection to daemon d" and give it back by dropping
//! the guard; which connection they get is the pool's business, so
//! connection policies (several connections per daemon, thread-to-single or
//! thread-to-many routing) fit behind [`Pool::get`] without touching callers.

use crate::conn::{Conn, Endpoint, Session};
use crate::error::{Error, Result};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// Idle connections kept per daemon; more are closed when given back, so a
/// burst of threads does not pin sockets forever.
const MAX_IDLE_PER_DAEMON: usize = 32;

pub(crate) struct Pool {
    session: Session,
    daemons: Vec<DaemonSlot>,
}

struct DaemonSlot {
    endpoint: Endpoint,
    idle: Mutex<Vec<Conn>>,
}

impl DaemonSlot {
    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        // The list stays consistent even if a holder panicked: push and pop only.
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Pool {
    pub fn new(session: Session, endpoints: Vec<Endpoint>) -> Pool {
        let daemons =
            endpoints.into_iter().map(|endpoint| DaemonSlot { endpoint, idle: Mutex::new(Vec::new()) }).collect();
        Pool { session, daemons }
    }

    pub fn daemon_count(&self) -> u32 {
        self.daemons.len() as u32
    }

    /// A connection to daemon `index`: an idle one that is still open, else a new one.
    pub fn get(&self, index: u32) -> Result<PooledConn<'_>> {
        let slot = self.daemons.get(index as usize).ok_or_else(|| {
            Error::new(libc::EINVAL, format!("no daemon {index}: the cluster has {} daemons", self.daemons.len()))
        })?;
        let reused = loop {
            let Some(conn) = slot.idle().pop() else { break None };
            if conn.is_usable() {
                break Some(conn);
            }
        };
        let conn = match reused {
            Some(conn) => conn,
            None => Conn::dial(slot.endpoint, &self.session)?,
        };
        Ok(PooledConn { conn: Some(conn), slot })
    }
}

/// A connection on loan; it goes back to the pool when dropped, unless a
/// transport failure broke it.
pub(crate) struct PooledConn<'p> {
    conn: Option<Conn>,
    slot: &'p DaemonSlot,
}

impl Deref for PooledConn<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("a pooled connection is present until drop")
    }
}

impl DerefMut for PooledConn<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("a pooled connection is present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if !conn.is_broken() {
            let mut idle = self.slot.idle();
            if idle.len() < MAX_IDLE_PER_DAEMON {
                idle.push(conn);
            }
        }
    }
}
