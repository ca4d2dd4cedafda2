//! The embedded backend: the drain state in a redb file of its own (the
//! database Surge's namespace uses), durable across restarts, for a
//! cluster without Redis and as the failover's copy.
//!
//! Redis's types map onto tables: a sorted set onto a table keyed by its
//! member plus an index keyed by (score, member), a list onto a table keyed
//! by (list name, sequence number), strings onto plain tables.

use crate::error::StateError;
use crate::keys::{CALIBRATION, CLEAN, DWPP, DWSF, EVICT_ORDER, REPLICATE_ORDER};
use crate::state::{
    AppId, Bytes, Calibration, DeviceId, DrainState, Location, Mtbf, Restart, Result, Snapshot, Version,
};
use redb::{Database, ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};
use std::path::{Path, PathBuf};

/// #1: application → MTBF, and the order to pop them in.
const VICTIMS: TableDefinition<u64, u64> = TableDefinition::new("v_order");
const VICTIMS_BY_MTBF: TableDefinition<(u64, u64), ()> = TableDefinition::new("v_order_by_mtbf");
/// #2, #7, #9: (list name, sequence) → entry.
const LISTS: TableDefinition<(&str, u64), &str> = TableDefinition::new("lists");
/// #3: (application, time) → MTBF.
const RESTARTS: TableDefinition<(u64, u64), u64> = TableDefinition::new("restarts");
/// #4: (application, device, version, file), and each file's version.
const CHECKPOINTS: TableDefinition<(u64, u32, u64, &str), ()> = TableDefinition::new("checkpoints");
const CHECKPOINT_VERSIONS: TableDefinition<(u64, u32, &str), u64> = TableDefinition::new("checkpoint_versions");
/// #5: file → location.
const LOCATIONS: TableDefinition<&str, &str> = TableDefinition::new("locations");
/// #6: applications with checkpoints in the buffer.
const IN_BUFFER: TableDefinition<u64, ()> = TableDefinition::new("in_buffer");
/// #8, #10: "DWSF", "DWPP" → bytes.
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// "Calibration" → its stored form.
const SETTINGS: TableDefinition<&str, &str> = TableDefinition::new("settings");

/// The file name the store takes in the directory it is given.
pub const FILE_NAME: &str = "drain.redb";

pub struct EmbeddedState {
    path: PathBuf,
    db: Database,
}

impl EmbeddedState {
    /// Opens the store in `dir` (created with its tables if new).
    pub fn open(dir: &Path) -> Result<EmbeddedState> {
        let path = dir.join(FILE_NAME);
        let db = Database::create(&path).map_err(|e| failed(&path, "open", e.into()))?;
        let state = EmbeddedState { path, db };
        state.write("create its tables", |txn| {
            txn.open_table(VICTIMS)?;
            txn.open_table(VICTIMS_BY_MTBF)?;
            txn.open_table(LISTS)?;
            txn.open_table(RESTARTS)?;
            txn.open_table(CHECKPOINTS)?;
            txn.open_table(CHECKPOINT_VERSIONS)?;
            txn.open_table(LOCATIONS)?;
            txn.open_table(IN_BUFFER)?;
            txn.open_table(COUNTERS)?;
            txn.open_table(SETTINGS)?;
            Ok(())
        })?;
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `body` in one write transaction and commits it.
    fn write<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&WriteTransaction) -> std::result::Result<T, DbError>,
    ) -> Result<T> {
        let run = || {
            let txn = self.db.begin_write()?;
            let value = body(&txn)?;
            txn.commit()?;
            Ok(value)
        };
        run().map_err(|e| failed(&self.path, op, e))
    }

    fn read<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&ReadTransaction) -> std::result::Result<T, DbError>,
    ) -> Result<T> {
        let run = || body(&self.db.begin_read()?);
        run().map_err(|e| failed(&self.path, op, e))
    }

    fn push(&self, op: &'static str, list: &str, entry: &str) -> Result<()> {
        self.write(op, |txn| {
            let mut lists = txn.open_table(LISTS)?;
            let next = lists
                .range((list, 0)..=(list, u64::MAX))?
                .next_back()
                .transpose()?
                .map_or(0, |(key, _)| key.value().1 + 1);
            lists.insert((list, next), entry)?;
            Ok(())
        })
    }

    /// Takes the head of `list`, and puts it back at the tail when `rotate`.
    fn take_head(&self, op: &'static str, list: &str, rotate: bool) -> Result<Option<String>> {
        self.write(op, |txn| {
            let mut lists = txn.open_table(LISTS)?;
            let mut entries = lists.range((list, 0)..=(list, u64::MAX))?;
            let head = entries.next().transpose()?.map(|(key, entry)| (key.value().1, entry.value().to_string()));
            let tail = entries.next_back().transpose()?.map(|(key, _)| key.value().1);
            drop(entries);
            let Some((key, entry)) = head else { return Ok(None) };
            lists.remove((list, key))?;
            if rotate {
                lists.insert((list, tail.unwrap_or(key) + 1), entry.as_str())?;
            }
            Ok(Some(entry))
        })
    }

    fn pop(&self, op: &'static str, list: &str) -> Result<Option<String>> {
        self.take_head(op, list, false)
    }

    fn pop_app(&self, op: &'static str, list: &'static str) -> Result<Option<AppId>> {
        self.pop(op, list)?.map(|entry| self.parse_app(list, &entry)).transpose()
    }

    fn parse_app(&self, key: &str, entry: &str) -> Result<AppId> {
        crate::keys::parse_app(entry).ok_or_else(|| StateError::Corrupt {
            store: self.path.display().to_string(),
            key: key.to_string(),
            value: entry.to_string(),
        })
    }

    fn parse_location(&self, file: &str, stored: String) -> Result<Location> {
        Location::parse(&stored).ok_or_else(|| StateError::Corrupt {
            store: self.path.display().to_string(),
            key: format!("file:{file}"),
            value: stored,
        })
    }

    fn parse_calibration(&self, stored: String) -> Result<Calibration> {
        Calibration::parse(&stored).ok_or_else(|| StateError::Corrupt {
            store: self.path.display().to_string(),
            key: CALIBRATION.to_string(),
            value: stored,
        })
    }

    fn counter(&self, op: &'static str, name: &str) -> Result<Bytes> {
        self.read(op, |txn| Ok(Bytes(txn.open_table(COUNTERS)?.get(name)?.map_or(0, |v| v.value()))))
    }
}

/// A list's entries, head first.
fn list(txn: &ReadTransaction, list: &str) -> std::result::Result<Vec<String>, DbError> {
    let lists = txn.open_table(LISTS)?;
    let entries = lists.range((list, 0)..=(list, u64::MAX))?;
    entries.map(|entry| Ok(entry?.1.value().to_string())).collect()
}

/// Removes every `entry` of `list`; the sequence number of the list's tail before, if any.
fn remove_entry(
    lists: &mut redb::Table<(&str, u64), &str>,
    list: &str,
    entry: &str,
) -> std::result::Result<Option<u64>, DbError> {
    let (mut listed, mut tail) = (Vec::new(), None);
    for stored in lists.range((list, 0)..=(list, u64::MAX))? {
        let (key, value) = stored?;
        tail = Some(key.value().1);
        if value.value() == entry {
            listed.push(key.value().1);
        }
    }
    for key in listed {
        lists.remove((list, key))?;
    }
    Ok(tail)
}

/// Any redb error, boxed: redb's own is large, and every transaction body
/// returns one.
struct DbError(Box<redb::Error>);

impl<E: Into<redb::Error>> From<E> for DbError {
    fn from(error: E) -> DbError {
        DbError(Box::new(error.into()))
    }
}

fn failed(path: &Path, op: &'static str, error: DbError) -> StateError {
    StateError::Embedded { path: path.to_path_buf(), op, why: error.0.to_string() }
}

impl DrainState for EmbeddedState {
    fn add_victim(&self, app: AppId, mtbf: Mtbf) -> Result<()> {
        self.write("add a victim to V-order", |txn| {
            let mut by_mtbf = txn.open_table(VICTIMS_BY_MTBF)?;
            if let Some(old) = txn.open_table(VICTIMS)?.insert(app.0, mtbf.0)? {
                by_mtbf.remove((old.value(), app.0))?;
            }
            by_mtbf.insert((mtbf.0, app.0), ())?;
            Ok(())
        })
    }

    fn pop_victim(&self) -> Result<Option<(AppId, Mtbf)>> {
        self.write("pop a victim from V-order", |txn| {
            let Some((mtbf, app)) = txn.open_table(VICTIMS_BY_MTBF)?.pop_last()?.map(|(key, _)| key.value()) else {
                return Ok(None);
            };
            txn.open_table(VICTIMS)?.remove(app)?;
            Ok(Some((AppId(app), Mtbf(mtbf))))
        })
    }

    fn push_clean(&self, app: AppId) -> Result<()> {
        self.push("push to Clean", CLEAN, &app.0.to_string())
    }

    fn pop_clean(&self) -> Result<Option<AppId>> {
        self.pop_app("pop from Clean", CLEAN)
    }

    fn record_restart(&self, app: AppId, restart: Restart) -> Result<()> {
        self.write("record a restart", |txn| {
            txn.open_table(RESTARTS)?.insert((app.0, restart.at_ms), restart.mtbf.0)?;
            Ok(())
        })
    }

    fn restarts(&self, app: AppId) -> Result<Vec<Restart>> {
        self.read("list restarts", |txn| {
            let restarts = txn.open_table(RESTARTS)?;
            let entries = restarts.range((app.0, 0)..=(app.0, u64::MAX))?;
            entries
                .map(|entry| {
                    let (key, mtbf) = entry?;
                    Ok(Restart { at_ms: key.value().1, mtbf: Mtbf(mtbf.value()) })
                })
                .collect()
        })
    }

    fn add_checkpoint(&self, app: AppId, device: DeviceId, version: Version, file: &str) -> Result<()> {
        self.write("add a checkpoint file", |txn| {
            let mut files = txn.open_table(CHECKPOINTS)?;
            if let Some(old) = txn.open_table(CHECKPOINT_VERSIONS)?.insert((app.0, device.0, file), version.0)? {
                files.remove((app.0, device.0, old.value(), file))?;
            }
            files.insert((app.0, device.0, version.0, file), ())?;
            Ok(())
        })
    }

    fn pop_oldest_version(&self, app: AppId, device: DeviceId) -> Result<Option<(Version, Vec<String>)>> {
        self.write("pop the oldest checkpoint version", |txn| {
            let mut files = txn.open_table(CHECKPOINTS)?;
            let mut oldest: Option<(u64, Vec<String>)> = None;
            for entry in files.range((app.0, device.0, 0, "")..)? {
                let key = entry?.0;
                let (entry_app, entry_device, version, file) = key.value();
                if (entry_app, entry_device) != (app.0, device.0) || oldest.as_ref().is_some_and(|o| o.0 != version) {
                    break;
                }
                oldest.get_or_insert_with(|| (version, Vec::new())).1.push(file.to_string());
            }
            let Some((version, names)) = oldest else { return Ok(None) };
            let mut versions = txn.open_table(CHECKPOINT_VERSIONS)?;
            for name in &names {
                files.remove((app.0, device.0, version, name.as_str()))?;
                versions.remove((app.0, device.0, name.as_str()))?;
            }
            Ok(Some((Version(version), names)))
        })
    }

    fn forget_file(&self, app: AppId, device: DeviceId, file: &str) -> Result<()> {
        self.write("forget a checkpoint file", |txn| {
            if let Some(version) = txn.open_table(CHECKPOINT_VERSIONS)?.remove((app.0, device.0, file))? {
                txn.open_table(CHECKPOINTS)?.remove((app.0, device.0, version.value(), file))?;
            }
            txn.open_table(LOCATIONS)?.remove(file)?;
            Ok(())
        })
    }

    fn set_location(&self, file: &str, location: &Location) -> Result<()> {
        self.write("record a file's location", |txn| {
            txn.open_table(LOCATIONS)?.insert(file, location.to_string().as_str())?;
            Ok(())
        })
    }

    fn location(&self, file: &str) -> Result<Option<Location>> {
        let stored = self.read("read a file's location", |txn| {
            Ok(txn.open_table(LOCATIONS)?.get(file)?.map(|v| v.value().to_string()))
        })?;
        stored.map(|value| self.parse_location(file, value)).transpose()
    }

    fn set_in_buffer(&self, app: AppId, in_buffer: bool) -> Result<()> {
        self.write("set the in-buffer flag", |txn| {
            let mut flags = txn.open_table(IN_BUFFER)?;
            if in_buffer {
                flags.insert(app.0, ())?;
            } else {
                flags.remove(app.0)?;
            }
            Ok(())
        })
    }

    fn is_in_buffer(&self, app: AppId) -> Result<bool> {
        self.read("read the in-buffer flag", |txn| Ok(txn.open_table(IN_BUFFER)?.get(app.0)?.is_some()))
    }

    fn push_evict(&self, app: AppId) -> Result<()> {
        self.push("push to E-order", EVICT_ORDER, &app.0.to_string())
    }

    fn pop_evict(&self) -> Result<Option<AppId>> {
        self.pop_app("pop from E-order", EVICT_ORDER)
    }

    fn add_written(&self, bytes: Bytes) -> Result<Bytes> {
        self.write("add to DWSF", |txn| {
            let mut counters = txn.open_table(COUNTERS)?;
            let total = counters.get(DWSF)?.map_or(0, |v| v.value()) + bytes.0;
            counters.insert(DWSF, total)?;
            Ok(Bytes(total))
        })
    }

    fn written_so_far(&self) -> Result<Bytes> {
        self.counter("read DWSF", DWSF)
    }

    fn push_replication(&self, file: &str) -> Result<()> {
        self.write("push to R-order", |txn| {
            let mut lists = txn.open_table(LISTS)?;
            let tail = remove_entry(&mut lists, REPLICATE_ORDER, file)?;
            lists.insert((REPLICATE_ORDER, tail.map_or(0, |t| t + 1)), file)?;
            Ok(())
        })
    }

    fn next_replication(&self) -> Result<Option<String>> {
        self.take_head("rotate R-order", REPLICATE_ORDER, true)
    }

    fn remove_replication(&self, file: &str) -> Result<()> {
        self.write("remove from R-order", |txn| {
            remove_entry(&mut txn.open_table(LISTS)?, REPLICATE_ORDER, file)?;
            Ok(())
        })
    }

    fn replications(&self) -> Result<Vec<String>> {
        self.read("read R-order", |txn| list(txn, REPLICATE_ORDER))
    }

    fn end_period(&self) -> Result<Bytes> {
        self.write("move DWSF to DWPP", |txn| {
            let mut counters = txn.open_table(COUNTERS)?;
            let written = counters.insert(DWSF, 0)?.map_or(0, |v| v.value());
            counters.insert(DWPP, written)?;
            Ok(Bytes(written))
        })
    }

    fn last_period(&self) -> Result<Bytes> {
        self.counter("read DWPP", DWPP)
    }

    fn set_calibration(&self, calibration: &Calibration) -> Result<()> {
        self.write("record the calibration", |txn| {
            txn.open_table(SETTINGS)?.insert(CALIBRATION, calibration.to_string().as_str())?;
            Ok(())
        })
    }

    fn calibration(&self) -> Result<Option<Calibration>> {
        let stored = self.read("read the calibration", |txn| {
            Ok(txn.open_table(SETTINGS)?.get(CALIBRATION)?.map(|v| v.value().to_string()))
        })?;
        stored.map(|value| self.parse_calibration(value)).transpose()
    }

    fn snapshot(&self) -> Result<Snapshot> {
        let calibration = self.calibration()?;
        let (mut snapshot, clean, evict, locations) = self.read("read a snapshot", |txn| {
            let mut snapshot = Snapshot::default();
            for entry in txn.open_table(VICTIMS)?.iter()? {
                let (app, mtbf) = entry?;
                snapshot.victims.insert(AppId(app.value()), Mtbf(mtbf.value()));
            }
            for entry in txn.open_table(RESTARTS)?.iter()? {
                let (key, mtbf) = entry?;
                let (app, at_ms) = key.value();
                snapshot.restarts.entry(AppId(app)).or_default().push(Restart { at_ms, mtbf: Mtbf(mtbf.value()) });
            }
            for entry in txn.open_table(CHECKPOINTS)?.iter()? {
                let key = entry?.0;
                let (app, device, version, file) = key.value();
                let files = snapshot.checkpoints.entry((AppId(app), DeviceId(device))).or_default();
                files.push((Version(version), file.to_string()));
            }
            let mut locations = Vec::new();
            for entry in txn.open_table(LOCATIONS)?.iter()? {
                let (file, location) = entry?;
                locations.push((file.value().to_string(), location.value().to_string()));
            }
            for entry in txn.open_table(IN_BUFFER)?.iter()? {
                snapshot.in_buffer.insert(AppId(entry?.0.value()));
            }
            let counters = txn.open_table(COUNTERS)?;
            snapshot.written_so_far = Bytes(counters.get(DWSF)?.map_or(0, |v| v.value()));
            snapshot.last_period = Bytes(counters.get(DWPP)?.map_or(0, |v| v.value()));
            snapshot.replicate_order = list(txn, REPLICATE_ORDER)?;
            Ok((snapshot, list(txn, CLEAN)?, list(txn, EVICT_ORDER)?, locations))
        })?;
        snapshot.clean = clean.iter().map(|entry| self.parse_app(CLEAN, entry)).collect::<Result<_>>()?;
        snapshot.evict_order = evict.iter().map(|entry| self.parse_app(EVICT_ORDER, entry)).collect::<Result<_>>()?;
        for (file, location) in locations {
            let location = self.parse_location(&file, location)?;
            snapshot.locations.insert(file, location);
        }
        snapshot.calibration = calibration;
        Ok(snapshot)
    }
}
