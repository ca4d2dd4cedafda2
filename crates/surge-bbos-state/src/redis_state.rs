//! The Redis backend: the ten keys of Table 5.1 [Sung20, ch. 5] with the
//! table's Redis types, under a prefix per cluster (see [`crate::keys`]),
//! so that an operator can read them with redis-cli and several clusters
//! can share one Redis:
//!
//! | key | type | commands |
//! |---|---|---|
//! | `surge:SCOPE:V-order` | sorted set (MTBF, application) | ZADD, ZPOPMAX |
//! | `surge:SCOPE:Clean` | list of applications | RPUSH, LPOP |
//! | `surge:SCOPE:app:APP:restart` | sorted set (MTBF, time in ms) | ZADD, ZRANGE |
//! | `surge:SCOPE:app:APP:dev:DEVICE` | sorted set (version, file) | ZADD; WATCH, ZRANGE, ZREMRANGEBYSCORE |
//! | `surge:SCOPE:file:FILE` | string `buffer:PATH` or `pfs:PATH` | SET, GET |
//! | `surge:SCOPE:app:APP:BB` | empty string, present or not | SET, DEL, EXISTS |
//! | `surge:SCOPE:E-order` | list of applications | RPUSH, LPOP |
//! | `surge:SCOPE:DWSF` | string (bytes) | INCRBY, GET |
//! | `surge:SCOPE:R-order` | list of files | RPUSH, LPOP |
//! | `surge:SCOPE:DWPP` | string (bytes) | WATCH, GET, SET |
//! | `surge:SCOPE:Calibration` | string `BWMAX,BWMIN,BRMAX,BRMIN` (bytes/s) | SET, GET |
//!
//! A removed checkpoint file leaves its sorted set by ZREM and its
//! location by DEL. `Calibration` is Surge's key beyond the table.
//!
//! One connection, with time limits, so that a Redis that went away gives
//! an error instead of a hang; after a failure the next operation connects
//! again. A Redis that came back without its data is not noticed here:
//! [`crate::FailoverState`] notices it (its answers differ from the
//! embedded store's), which is why the daemons use that. Versions and MTBFs
//! are sorted-set scores (doubles): exact up to 2^53.

use crate::error::StateError;
use crate::keys::{Key, Keys, CALIBRATION, CLEAN, DWPP, DWSF, EVICT_ORDER, REPLICATE_ORDER, VICTIMS};
use crate::server::redacted;
use crate::state::{
    AppId, Bytes, Calibration, DeviceId, DrainState, Location, Mtbf, Restart, Result, Snapshot, Version,
};
use redis::{cmd, Client, Connection, RedisResult};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long connecting, and then each command, may take.
const TIME_LIMIT: Duration = Duration::from_secs(2);

pub struct RedisState {
    /// Redacted (`server::redacted`).
    url: String,
    client: Client,
    keys: Keys,
    /// `None` after a failure: the next operation connects again.
    connection: Mutex<Option<Connection>>,
}

impl RedisState {
    /// Connects to the Redis at `url` (`redis://HOST:PORT`) and keeps the
    /// state under `surge:SCOPE:` (the cluster's name: one writer per
    /// scope).
    pub fn connect(url: &str, scope: &str) -> Result<RedisState> {
        let client =
            Client::open(url).map_err(|e| StateError::BadRedisUrl { url: redacted(url), why: e.to_string() })?;
        let state = RedisState { url: redacted(url), client, keys: Keys::new(scope), connection: Mutex::new(None) };
        state.run("answer a PING", |con| cmd("PING").query::<String>(con))?;
        Ok(state)
    }

    /// The address, its password (if any) hidden: for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `body` on the connection (made first if there is none); drops
    /// the connection when it fails.
    fn run<T>(&self, op: &'static str, body: impl FnOnce(&mut Connection) -> RedisResult<T>) -> Result<T> {
        let mut slot = self.connection.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match slot.as_mut() {
            Some(con) => body(con),
            None => self.open().and_then(|con| body(slot.insert(con))),
        };
        result.map_err(|e| {
            *slot = None;
            StateError::Redis { addr: self.url.clone(), op, why: e.to_string() }
        })
    }

    fn open(&self) -> RedisResult<Connection> {
        let con = self.client.get_connection_with_timeout(TIME_LIMIT)?;
        con.set_read_timeout(Some(TIME_LIMIT))?;
        con.set_write_timeout(Some(TIME_LIMIT))?;
        Ok(con)
    }

    fn corrupt(&self, key: &str, value: impl ToString) -> StateError {
        StateError::Corrupt { store: format!("Redis at {}", self.url), key: key.to_string(), value: value.to_string() }
    }

    fn push(&self, op: &'static str, list: &str, entry: &str) -> Result<()> {
        self.run(op, |con| cmd("RPUSH").arg(self.keys.fixed(list)).arg(entry).exec(con))
    }

    fn pop_app(&self, op: &'static str, list: &str) -> Result<Option<AppId>> {
        let key = self.keys.fixed(list);
        let entry: Option<String> = self.run(op, |con| cmd("LPOP").arg(&key).query(con))?;
        entry.map(|entry| self.app(&key, &entry)).transpose()
    }

    fn app(&self, key: &str, entry: &str) -> Result<AppId> {
        crate::keys::parse_app(entry).ok_or_else(|| self.corrupt(key, entry))
    }

    fn counter(&self, op: &'static str, name: &str) -> Result<Bytes> {
        let total: Option<u64> = self.run(op, |con| cmd("GET").arg(self.keys.fixed(name)).query(con))?;
        Ok(Bytes(total.unwrap_or(0)))
    }

    /// Replaces whatever this scope holds by `snapshot`, in one MULTI (the
    /// failover does so when it starts, from the embedded store).
    pub fn replace_with(&self, snapshot: &Snapshot) -> Result<()> {
        let old = self.scope_keys()?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in &old {
            pipe.cmd("DEL").arg(key).ignore();
        }
        for (app, mtbf) in &snapshot.victims {
            pipe.cmd("ZADD").arg(self.keys.fixed(VICTIMS)).arg(mtbf.0).arg(app.0).ignore();
        }
        for (list, apps) in [(CLEAN, &snapshot.clean), (EVICT_ORDER, &snapshot.evict_order)] {
            for app in apps {
                pipe.cmd("RPUSH").arg(self.keys.fixed(list)).arg(app.0).ignore();
            }
        }
        for file in &snapshot.replicate_order {
            pipe.cmd("RPUSH").arg(self.keys.fixed(REPLICATE_ORDER)).arg(file).ignore();
        }
        for (app, restarts) in &snapshot.restarts {
            for restart in restarts {
                pipe.cmd("ZADD").arg(self.keys.restarts(*app)).arg(restart.mtbf.0).arg(restart.at_ms).ignore();
            }
        }
        for ((app, device), files) in &snapshot.checkpoints {
            for (version, file) in files {
                pipe.cmd("ZADD").arg(self.keys.checkpoints(*app, *device)).arg(version.0).arg(file).ignore();
            }
        }
        for (file, location) in &snapshot.locations {
            pipe.cmd("SET").arg(self.keys.location(file)).arg(location.to_string()).ignore();
        }
        for app in &snapshot.in_buffer {
            pipe.cmd("SET").arg(self.keys.in_buffer(*app)).arg("").ignore();
        }
        pipe.cmd("SET").arg(self.keys.fixed(DWSF)).arg(snapshot.written_so_far.0).ignore();
        pipe.cmd("SET").arg(self.keys.fixed(DWPP)).arg(snapshot.last_period.0).ignore();
        if let Some(calibration) = &snapshot.calibration {
            pipe.cmd("SET").arg(self.keys.fixed(CALIBRATION)).arg(calibration.to_string()).ignore();
        }
        self.run("replace the drain state", |con| pipe.exec(con))
    }

    fn scope_keys(&self) -> Result<Vec<String>> {
        self.run("list the drain state's keys", |con| {
            let mut scan = cmd("SCAN");
            scan.cursor_arg(0).arg("MATCH").arg(self.keys.pattern()).arg("COUNT").arg(1000);
            scan.iter::<String>(con)?.collect()
        })
    }

    fn scores(&self, key: &str) -> Result<Vec<(String, u64)>> {
        let members: Vec<(String, f64)> =
            self.run("read a sorted set", |con| cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(con))?;
        Ok(members.into_iter().map(|(member, score)| (member, score as u64)).collect())
    }

    fn entries(&self, key: &str) -> Result<Vec<String>> {
        self.run("read a list", |con| cmd("LRANGE").arg(key).arg(0).arg(-1).query(con))
    }

    fn apps(&self, key: &str) -> Result<Vec<AppId>> {
        self.entries(key)?.iter().map(|entry| self.app(key, entry)).collect()
    }
}

impl DrainState for RedisState {
    fn add_victim(&self, app: AppId, mtbf: Mtbf) -> Result<()> {
        self.run("add a victim to V-order", |con| {
            cmd("ZADD").arg(self.keys.fixed(VICTIMS)).arg(mtbf.0).arg(app.0).exec(con)
        })
    }

    fn pop_victim(&self) -> Result<Option<(AppId, Mtbf)>> {
        let key = self.keys.fixed(VICTIMS);
        let popped: Vec<(String, f64)> =
            self.run("pop a victim from V-order", |con| cmd("ZPOPMAX").arg(&key).arg(1).query(con))?;
        popped.first().map(|(app, mtbf)| Ok((self.app(&key, app)?, Mtbf(*mtbf as u64)))).transpose()
    }

    fn push_clean(&self, app: AppId) -> Result<()> {
        self.push("push to Clean", CLEAN, &app.0.to_string())
    }

    fn pop_clean(&self) -> Result<Option<AppId>> {
        self.pop_app("pop from Clean", CLEAN)
    }

    fn record_restart(&self, app: AppId, restart: Restart) -> Result<()> {
        self.run("record a restart", |con| {
            cmd("ZADD").arg(self.keys.restarts(app)).arg(restart.mtbf.0).arg(restart.at_ms).exec(con)
        })
    }

    fn restarts(&self, app: AppId) -> Result<Vec<Restart>> {
        let key = self.keys.restarts(app);
        let mut restarts = self
            .scores(&key)?
            .into_iter()
            .map(|(at, mtbf)| Ok(Restart { at_ms: at.parse().map_err(|_| self.corrupt(&key, &at))?, mtbf: Mtbf(mtbf) }))
            .collect::<Result<Vec<_>>>()?;
        restarts.sort();
        Ok(restarts)
    }

    fn add_checkpoint(&self, app: AppId, device: DeviceId, version: Version, file: &str) -> Result<()> {
        self.run("add a checkpoint file", |con| {
            cmd("ZADD").arg(self.keys.checkpoints(app, device)).arg(version.0).arg(file).exec(con)
        })
    }

    fn pop_oldest_version(&self, app: AppId, device: DeviceId) -> Result<Option<(Version, Vec<String>)>> {
        let key = self.keys.checkpoints(app, device);
        self.run("pop the oldest checkpoint version", |con| {
            // WATCH: a file added or popped meanwhile makes EXEC fail, and the
            // transaction starts again.
            redis::transaction(con, &[&key], |con, pipe| {
                let oldest: Vec<(String, f64)> = cmd("ZRANGE").arg(&key).arg(0).arg(0).arg("WITHSCORES").query(con)?;
                let Some(&(_, version)) = oldest.first() else {
                    return Ok(Some(None));
                };
                let files: Vec<String> = cmd("ZRANGEBYSCORE").arg(&key).arg(version).arg(version).query(con)?;
                let done: Option<redis::Value> =
                    pipe.cmd("ZREMRANGEBYSCORE").arg(&key).arg(version).arg(version).query(con)?;
                Ok(done.map(|_| Some((Version(version as u64), files))))
            })
        })
    }

    fn forget_file(&self, app: AppId, device: DeviceId, file: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("ZREM").arg(self.keys.checkpoints(app, device)).arg(file).ignore();
        pipe.cmd("DEL").arg(self.keys.location(file)).ignore();
        self.run("forget a checkpoint file", |con| pipe.exec(con))
    }

    fn set_location(&self, file: &str, location: &Location) -> Result<()> {
        self.run("record a file's location", |con| {
            cmd("SET").arg(self.keys.location(file)).arg(location.to_string()).exec(con)
        })
    }

    fn location(&self, file: &str) -> Result<Option<Location>> {
        let key = self.keys.location(file);
        let stored: Option<String> = self.run("read a file's location", |con| cmd("GET").arg(&key).query(con))?;
        stored.map(|value| Location::parse(&value).ok_or_else(|| self.corrupt(&key, &value))).transpose()
    }

    fn set_in_buffer(&self, app: AppId, in_buffer: bool) -> Result<()> {
        let key = self.keys.in_buffer(app);
        self.run("set the in-buffer flag", |con| match in_buffer {
            true => cmd("SET").arg(&key).arg("").exec(con),
            false => cmd("DEL").arg(&key).exec(con),
        })
    }

    fn is_in_buffer(&self, app: AppId) -> Result<bool> {
        self.run("read the in-buffer flag", |con| cmd("EXISTS").arg(self.keys.in_buffer(app)).query(con))
    }

    fn push_evict(&self, app: AppId) -> Result<()> {
        self.push("push to E-order", EVICT_ORDER, &app.0.to_string())
    }

    fn pop_evict(&self) -> Result<Option<AppId>> {
        self.pop_app("pop from E-order", EVICT_ORDER)
    }

    fn add_written(&self, bytes: Bytes) -> Result<Bytes> {
        let total = self.run("add to DWSF", |con| cmd("INCRBY").arg(self.keys.fixed(DWSF)).arg(bytes.0).query(con))?;
        Ok(Bytes(total))
    }

    fn written_so_far(&self) -> Result<Bytes> {
        self.counter("read DWSF", DWSF)
    }

    fn push_replication(&self, file: &str) -> Result<()> {
        let key = self.keys.fixed(REPLICATE_ORDER);
        self.run("push to R-order", |con| {
            redis::pipe().atomic().cmd("LREM").arg(&key).arg(0).arg(file).cmd("RPUSH").arg(&key).arg(file).exec(con)
        })
    }

    fn next_replication(&self) -> Result<Option<String>> {
        let key = self.keys.fixed(REPLICATE_ORDER);
        self.run("rotate R-order", |con| cmd("LMOVE").arg(&key).arg(&key).arg("LEFT").arg("RIGHT").query(con))
    }

    fn remove_replication(&self, file: &str) -> Result<()> {
        self.run("remove from R-order", |con| {
            cmd("LREM").arg(self.keys.fixed(REPLICATE_ORDER)).arg(0).arg(file).exec(con)
        })
    }

    fn replications(&self) -> Result<Vec<String>> {
        self.entries(&self.keys.fixed(REPLICATE_ORDER))
    }

    fn end_period(&self) -> Result<Bytes> {
        let (dwsf, dwpp) = (self.keys.fixed(DWSF), self.keys.fixed(DWPP));
        let written = self.run("move DWSF to DWPP", |con| {
            // WATCH: an INCRBY between the GET and the EXEC starts it again.
            redis::transaction(con, &[&dwsf], |con, pipe| {
                let written: Option<u64> = cmd("GET").arg(&dwsf).query(con)?;
                let written = written.unwrap_or(0);
                let done: Option<redis::Value> =
                    pipe.cmd("SET").arg(&dwpp).arg(written).cmd("SET").arg(&dwsf).arg(0).query(con)?;
                Ok(done.map(|_| written))
            })
        })?;
        Ok(Bytes(written))
    }

    fn last_period(&self) -> Result<Bytes> {
        self.counter("read DWPP", DWPP)
    }

    fn set_calibration(&self, calibration: &Calibration) -> Result<()> {
        self.run("record the calibration", |con| {
            cmd("SET").arg(self.keys.fixed(CALIBRATION)).arg(calibration.to_string()).exec(con)
        })
    }

    fn calibration(&self) -> Result<Option<Calibration>> {
        let key = self.keys.fixed(CALIBRATION);
        let stored: Option<String> = self.run("read the calibration", |con| cmd("GET").arg(&key).query(con))?;
        stored.map(|value| Calibration::parse(&value).ok_or_else(|| self.corrupt(&key, &value))).transpose()
    }

    /// Not atomic across keys (SCAN, then a read per key): take it while no
    /// one changes the state, as the tests and the failover do.
    fn snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        for key in self.scope_keys()? {
            match self.keys.parse(&key).ok_or_else(|| self.corrupt(&key, "(a key Surge does not write)"))? {
                Key::Fixed(VICTIMS) => {
                    for (app, mtbf) in self.scores(&key)? {
                        snapshot.victims.insert(self.app(&key, &app)?, Mtbf(mtbf));
                    }
                }
                Key::Fixed(CLEAN) => snapshot.clean = self.apps(&key)?,
                Key::Fixed(EVICT_ORDER) => snapshot.evict_order = self.apps(&key)?,
                Key::Fixed(REPLICATE_ORDER) => snapshot.replicate_order = self.entries(&key)?,
                Key::Fixed(DWSF) => snapshot.written_so_far = self.written_so_far()?,
                Key::Fixed(CALIBRATION) => snapshot.calibration = self.calibration()?,
                Key::Fixed(_) => snapshot.last_period = self.last_period()?,
                Key::Restarts(app) => {
                    snapshot.restarts.insert(app, self.restarts(app)?);
                }
                Key::Checkpoints(app, device) => {
                    let mut files: Vec<(Version, String)> =
                        self.scores(&key)?.into_iter().map(|(file, version)| (Version(version), file)).collect();
                    files.sort();
                    snapshot.checkpoints.insert((app, device), files);
                }
                Key::Location(file) => {
                    if let Some(location) = self.location(file)? {
                        snapshot.locations.insert(file.to_string(), location);
                    }
                }
                Key::InBuffer(app) => {
                    snapshot.in_buffer.insert(app);
                }
            }
        }
        Ok(snapshot)
    }
}
