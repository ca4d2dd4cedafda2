//! What can go wrong with a drain state store, said so that an operator
//! knows which store failed, at which step, and what to do about it.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// The Redis address given (`--drain-state`) is not one.
    BadRedisUrl { url: String, why: String },
    /// The Redis at `addr` could not be reached, or failed `op`.
    Redis { addr: String, op: &'static str, why: String },
    /// The embedded store's file failed `op`.
    Embedded { path: PathBuf, op: &'static str, why: String },
    /// A key holds a value that no backend writes (changed by hand?).
    Corrupt { store: String, key: String, value: String },
    /// Redis and the embedded store gave different answers to `op`.
    Diverged { op: &'static str, redis: String, embedded: String },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::BadRedisUrl { url, why } => write!(
                f,
                "bad Redis address '{url}': {why}; give it as redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT), or leave --drain-state out to keep \
                 the drain state in the embedded store"
            ),
            StateError::Redis { addr, op, why } => write!(
                f,
                "Redis at {addr} failed to {op}: {why}; check that redis-server runs there \
                 (redis-cli -u {addr} ping), or leave --drain-state out to keep the drain state in the embedded store"
            ),
            StateError::Embedded { path, op, why } => write!(
                f,
                "the embedded drain state {} failed to {op}: {why}; check its device (free space, permissions)",
                path.display()
            ),
            StateError::Corrupt { store, key, value } => write!(
                f,
                "{store}: key {key} holds '{value}', which Surge never writes there; delete the key \
                 (the data manager then loses track of that entry) or restore it"
            ),
            StateError::Diverged { op, redis, embedded } => write!(
                f,
                "Redis and the embedded drain state disagree on {op}: Redis says {redis}, the embedded store \
                 {embedded}"
            ),
        }
    }
}

impl std::error::Error for StateError {}
