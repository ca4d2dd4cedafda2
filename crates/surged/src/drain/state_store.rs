//! Where the drain state lives (docs/bbos-state.md): the embedded store
//! `drain.redb` in daemon 0's buffer directory (0600, as the namespace
//! database), or, with `--drain-state redis://HOST:PORT`, that Redis
//! mirrored in the embedded store (`FailoverState`): a Redis that fails is
//! logged once and the embedded store, which saw every change, carries on.

use crate::logging::log;
use std::path::Path;
use std::sync::{Arc, Mutex};
use surge_bbos_state::{embedded, DrainState, EmbeddedState, FailoverState};

/// The opened store and how it fares.
pub struct StateStore {
    pub state: Box<dyn DrainState>,
    /// `embedded PATH`, or the Redis URL.
    pub backend: String,
    /// Why the configured Redis was given up (`None` while all is well).
    pub trouble: Arc<Mutex<Option<String>>>,
}

/// Opens the store for daemon 0 whose buffer directory is `buffer`; Redis
/// keys go under the cluster's id.
pub fn open(redis: Option<&str>, buffer: &Path, cluster_id: &str, index: u32) -> Result<StateStore, String> {
    let file = buffer.join(embedded::FILE_NAME);
    // Created here 0600 and not through a symlink; redb then opens a plain file.
    surge_cluster::open_private_file(&file).map_err(|e| format!("cannot create {}: {e}", file.display()))?;
    let trouble = Arc::new(Mutex::new(None));
    let state: Box<dyn DrainState> = match redis {
        None => Box::new(EmbeddedState::open(buffer).map_err(|e| e.to_string())?),
        Some(url) => {
            let noted = Arc::clone(&trouble);
            let on_switch = Box::new(move |error: &surge_bbos_state::StateError| {
                log!(Warn, index, "drain state: {error}; the embedded store {} carries on", file.display());
                *crate::locking::lock(&noted) = Some(format!("{error}; the embedded store took over"));
            });
            Box::new(FailoverState::open(url, cluster_id, buffer, on_switch).map_err(|e| e.to_string())?)
        }
    };
    let backend = match redis {
        Some(url) => surge_bbos_state::server::redacted(url),
        None => format!("embedded {}", buffer.join(embedded::FILE_NAME).display()),
    };
    Ok(StateStore { state, backend, trouble })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_embedded_store_is_private_and_an_unreachable_redis_hands_over_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(None, dir.path(), "c", 0).unwrap();
        let mode = std::fs::metadata(dir.path().join(embedded::FILE_NAME)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(store.backend.starts_with("embedded "));
        drop(store);
        // Port 1 on 127.0.0.1: nobody listens there.
        let store = open(Some("redis://127.0.0.1:1"), dir.path(), "c", 0).unwrap();
        assert!(crate::locking::lock(&store.trouble).as_deref().is_some_and(|why| why.contains("redis://127.0.0.1:1")));
        assert!(open(Some("redis://[bad"), dir.path(), "c", 0).is_err());
    }
}
