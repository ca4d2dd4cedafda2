//! Redis with the embedded store behind it: every operation runs on the
//! embedded store first, then on Redis, under one lock (so both see the
//! operations in the same order), and the two answers must agree. When
//! Redis fails (gone, timed out, restarted empty so that it answers
//! differently), the failover reports it once through its callback and
//! carries on with the embedded store alone, which holds the complete
//! state because it saw every change. It does not go back to Redis: a
//! restarted daemon does, and then first copies the embedded store's state
//! into Redis ([`RedisState::replace_with`]).

use crate::embedded::EmbeddedState;
use crate::error::StateError;
use crate::redis_state::RedisState;
use crate::state::{
    AppId, Bytes, Calibration, DeviceId, DrainState, Location, Mtbf, Restart, Result, Snapshot, Version,
};
use std::fmt::Debug;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// Called once, when Redis is given up, with why (naming its address).
pub type OnSwitch = Box<dyn Fn(&StateError) + Send + Sync>;

/// Which store answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    /// Redis at this address, mirrored in the embedded store.
    Redis(String),
    /// The embedded store alone.
    Embedded,
}

pub struct FailoverState {
    embedded: EmbeddedState,
    /// `None` once Redis was given up.
    redis: Mutex<Option<RedisState>>,
    on_switch: OnSwitch,
}

impl FailoverState {
    /// Opens the embedded store in `dir` and the Redis at `url` (scope: see
    /// [`RedisState::connect`]), and copies the embedded store's state into
    /// Redis. A malformed `url` is an error; a Redis that cannot be reached
    /// is reported through `on_switch` and the embedded store serves.
    pub fn open(url: &str, scope: &str, dir: &Path, on_switch: OnSwitch) -> Result<FailoverState> {
        let embedded = EmbeddedState::open(dir)?;
        let redis = match RedisState::connect(url, scope) {
            Ok(redis) => match redis.replace_with(&embedded.snapshot()?) {
                Ok(()) => Some(redis),
                Err(error) => {
                    on_switch(&error);
                    None
                }
            },
            Err(error @ StateError::BadRedisUrl { .. }) => return Err(error),
            Err(error) => {
                on_switch(&error);
                None
            }
        };
        Ok(FailoverState { embedded, redis: Mutex::new(redis), on_switch })
    }

    pub fn serving(&self) -> Serving {
        match &*self.redis.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(redis) => Serving::Redis(redis.url().to_string()),
            None => Serving::Embedded,
        }
    }

    /// Runs `operation` on the embedded store, then on Redis while it is
    /// used; the embedded store's answer is the one returned.
    fn apply<T: PartialEq + Debug>(
        &self,
        op: &'static str,
        operation: impl Fn(&dyn DrainState) -> Result<T>,
    ) -> Result<T> {
        let mut redis = self.redis.lock().unwrap_or_else(PoisonError::into_inner);
        let answer = operation(&self.embedded)?;
        let failure = match redis.as_ref().map(|redis| operation(redis)) {
            None => None,
            Some(Ok(redis_answer)) if redis_answer == answer => None,
            Some(Ok(redis_answer)) => {
                Some(StateError::Diverged { op, redis: format!("{redis_answer:?}"), embedded: format!("{answer:?}") })
            }
            Some(Err(error)) => Some(error),
        };
        if let Some(error) = failure {
            *redis = None;
            // Unlocked first: the callback may ask for `serving()`.
            drop(redis);
            (self.on_switch)(&error);
        }
        Ok(answer)
    }
}

impl DrainState for FailoverState {
    fn add_victim(&self, app: AppId, mtbf: Mtbf) -> Result<()> {
        self.apply("add_victim", |s| s.add_victim(app, mtbf))
    }

    fn pop_victim(&self) -> Result<Option<(AppId, Mtbf)>> {
        self.apply("pop_victim", |s| s.pop_victim())
    }

    fn push_clean(&self, app: AppId) -> Result<()> {
        self.apply("push_clean", |s| s.push_clean(app))
    }

    fn pop_clean(&self) -> Result<Option<AppId>> {
        self.apply("pop_clean", |s| s.pop_clean())
    }

    fn record_restart(&self, app: AppId, restart: Restart) -> Result<()> {
        self.apply("record_restart", |s| s.record_restart(app, restart))
    }

    fn restarts(&self, app: AppId) -> Result<Vec<Restart>> {
        self.apply("restarts", |s| s.restarts(app))
    }

    fn add_checkpoint(&self, app: AppId, device: DeviceId, version: Version, file: &str) -> Result<()> {
        self.apply("add_checkpoint", |s| s.add_checkpoint(app, device, version, file))
    }

    fn pop_oldest_version(&self, app: AppId, device: DeviceId) -> Result<Option<(Version, Vec<String>)>> {
        self.apply("pop_oldest_version", |s| s.pop_oldest_version(app, device))
    }

    fn forget_file(&self, app: AppId, device: DeviceId, file: &str) -> Result<()> {
        self.apply("forget_file", |s| s.forget_file(app, device, file))
    }

    fn set_location(&self, file: &str, location: &Location) -> Result<()> {
        self.apply("set_location", |s| s.set_location(file, location))
    }

    fn location(&self, file: &str) -> Result<Option<Location>> {
        self.apply("location", |s| s.location(file))
    }

    fn set_in_buffer(&self, app: AppId, in_buffer: bool) -> Result<()> {
        self.apply("set_in_buffer", |s| s.set_in_buffer(app, in_buffer))
    }

    fn is_in_buffer(&self, app: AppId) -> Result<bool> {
        self.apply("is_in_buffer", |s| s.is_in_buffer(app))
    }

    fn push_evict(&self, app: AppId) -> Result<()> {
        self.apply("push_evict", |s| s.push_evict(app))
    }

    fn pop_evict(&self) -> Result<Option<AppId>> {
        self.apply("pop_evict", |s| s.pop_evict())
    }

    fn add_written(&self, bytes: Bytes) -> Result<Bytes> {
        self.apply("add_written", |s| s.add_written(bytes))
    }

    fn written_so_far(&self) -> Result<Bytes> {
        self.apply("written_so_far", |s| s.written_so_far())
    }

    fn push_replication(&self, file: &str) -> Result<()> {
        self.apply("push_replication", |s| s.push_replication(file))
    }

    fn next_replication(&self) -> Result<Option<String>> {
        self.apply("next_replication", |s| s.next_replication())
    }

    fn remove_replication(&self, file: &str) -> Result<()> {
        self.apply("remove_replication", |s| s.remove_replication(file))
    }

    fn replications(&self) -> Result<Vec<String>> {
        self.apply("replications", |s| s.replications())
    }

    fn end_period(&self) -> Result<Bytes> {
        self.apply("end_period", |s| s.end_period())
    }

    fn last_period(&self) -> Result<Bytes> {
        self.apply("last_period", |s| s.last_period())
    }

    fn set_calibration(&self, calibration: &Calibration) -> Result<()> {
        self.apply("set_calibration", |s| s.set_calibration(calibration))
    }

    fn calibration(&self) -> Result<Option<Calibration>> {
        self.apply("calibration", |s| s.calibration())
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.apply("snapshot", |s| s.snapshot())
    }
}
