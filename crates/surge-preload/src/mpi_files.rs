//! Which `MPI_File` handles are Surge files: `opened` maps a handle to
//! the Surge file its name leads to (handles of other files are never
//! mapped, so their calls cost one lookup), `recorded` adds a call to that
//! file's MPI-IO counters (`mpiio.rs`), `closed` forgets the handle.

use crate::mpiio::Call;
use crate::paths::Target;
use crate::process::Process;
use crate::profile::FileCounters;
use parking_lot::{const_mutex, Mutex};
use std::collections::HashMap;
use std::sync::Arc;

/// The open `MPI_File` handles on Surge files, by handle value.
static HANDLES: Mutex<Option<HashMap<usize, Arc<Mutex<FileCounters>>>>> = const_mutex(None);

/// The Surge path an `MPI_File_open` name leads to, if any. ROMIO accepts a
/// file system prefix ("ufs:", "lustre:", ...) before the path, which names
/// the driver, not the file: it is dropped.
pub fn surge_path(c: &Process, name: &str) -> Option<String> {
    match c.resolve(libc::AT_FDCWD, strip_driver_prefix(name)).ok()? {
        Target::Surge(path) => Some(path),
        Target::Host | Target::HostPath(_) => None,
    }
}

/// `name` without a ROMIO driver prefix: two or more letters, digits or
/// underscores and a colon at its start (every ROMIO driver name is such a
/// word; a single letter is left, as a name of its own).
pub fn strip_driver_prefix(name: &str) -> &str {
    match name.split_once(':') {
        Some((driver, rest)) if driver.len() > 1 && driver.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            rest
        }
        _ => name,
    }
}

/// `handle` was opened on `name` in `seconds`, ending now: if the file is
/// Surge's, the open is counted and the handle mapped to the file.
pub fn opened(c: &Process, handle: usize, name: &str, collective: bool, mode: u64, seconds: f64) {
    let Some(path) = surge_path(c, name) else { return };
    let counters = c.profile.file(&path);
    counters.lock().mpiio().open(collective, mode, c.profile.span_ending_now(seconds));
    HANDLES.lock().get_or_insert_with(HashMap::new).insert(handle, counters);
}

fn counters_of(handle: usize) -> Option<Arc<Mutex<FileCounters>>> {
    HANDLES.lock().as_ref()?.get(&handle).cloned()
}

/// A call of `bytes` on `handle`, which took `seconds`, ending now.
pub fn recorded(c: &Process, handle: usize, call: Call, bytes: u64, seconds: f64) {
    if let Some(counters) = counters_of(handle) {
        counters.lock().mpiio().record(call, bytes, c.profile.span_ending_now(seconds));
    }
}

/// `handle` was closed in `seconds`, ending now.
pub fn closed(c: &Process, handle: usize, seconds: f64) {
    let counters = HANDLES.lock().as_mut().and_then(|h| h.remove(&handle));
    if let Some(counters) = counters {
        counters.lock().mpiio().close(c.profile.span_ending_now(seconds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_romio_driver_prefix_is_not_part_of_the_file_name() {
        assert_eq!(strip_driver_prefix("ufs:/surge/a"), "/surge/a");
        assert_eq!(strip_driver_prefix("lustre:out/a"), "out/a");
        assert_eq!(strip_driver_prefix("/surge/a:b"), "/surge/a:b");
        assert_eq!(strip_driver_prefix("c:data"), "c:data");
        assert_eq!(strip_driver_prefix("plain"), "plain");
    }
}
