//! The state of BBOS, the burst buffer's drain to the PFS [Sung20, ch. 5]:
//! the ten keys of its Table 5.1 behind one trait, [`DrainState`], with
//! three implementations:
//! - [`EmbeddedState`]: a redb file, when no Redis is configured;
//! - [`RedisState`]: a Redis with the table's keys and types under a prefix
//!   per cluster (key names in [`redis_state`]);
//! - [`FailoverState`]: Redis mirrored in the embedded store, which takes
//!   over when Redis fails.
//!
//! [`RedisServer`] runs a `redis-server` of a job's own.
//!
//! docs/bbos-state.md says how to use them. Another backend implements
//! [`DrainState`] (its module doc says what it must keep).

pub mod embedded;
pub mod error;
pub mod failover;
pub mod keys;
pub mod redis_state;
pub mod server;
pub mod state;

pub use embedded::EmbeddedState;
pub use error::StateError;
pub use failover::{FailoverState, OnSwitch, Serving};
pub use redis_state::RedisState;
pub use server::RedisServer;
pub use state::{AppId, Bytes, Calibration, DeviceId, DrainState, Location, Mtbf, Restart, Snapshot, Tier, Version};
