//! The evicter, the deleters of [Sung20, §5.2.1]. Every round it evicts the
//! demoted files of outdated versions (a version became outdated after its
//! files were demoted and kept). And when a daemon is fuller
//! than its high watermark (the throttler wakes it; a writer waiting for
//! space finds its daemon full, hence above it), it takes the jobs listed
//! in `Clean` and evicts their demoted files in the eviction order
//! (`evict_order`; BBOS's: older versions first, then the latest versions
//! of the coldest jobs, highest MTBF), until what it evicted brings the
//! daemons down to the low watermark. An eviction is
//! `demote::evict`: only while the file still is the version demoted; one
//! written since goes back to the demoters. A file a client holds open
//! (`handles`) is left for a later round, and opens of a file wait while
//! it is evicted; where an evicted file went is recorded (`evictions`) for
//! the clients that held it unannounced. Evicted objects are deleted by the deleter, which the
//! evicter wakes.

use super::books::FileStatus;
use super::manager::DrainManager;
use super::plan::{Usage, HIGH_WATERMARK, LOW_WATERMARK};
use crate::background::{Context, Task};
use crate::demote::{self, Staged};
use crate::failure::Failure;
use crate::locking::lock;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_bbos_state::AppId;
use surge_proto::{Attr, Errno};

/// Time between rounds when the throttler does not wake the evicter.
const PERIOD: Duration = Duration::from_secs(1);

pub struct Evicter {
    pub manager: Arc<DrainManager>,
}

impl Evicter {
    /// Bytes to evict: what brings every daemon above the high watermark down to the low one.
    fn to_free(&self) -> u64 {
        let plan = lock(&self.manager.plan);
        if !plan.usage.iter().any(|u| u.above(HIGH_WATERMARK)) {
            return 0;
        }
        let over = |u: &Usage| u.used.saturating_sub((LOW_WATERMARK * u.capacity as f64) as u64);
        plan.usage.iter().map(over).sum()
    }
}

impl DrainManager {
    /// Evicts the demoted file `path` unless a client holds it or is
    /// opening it (then `None`); opens of it wait meanwhile.
    pub(super) fn evict_unheld(&self, path: &str, staged: &Staged) -> Option<Result<Attr, Failure>> {
        let _evicting = self.handles.evicting(path, staged.ino)?;
        let setting = &self.setting;
        let evicted = demote::evict(&setting.peers, &setting.namespace, setting.daemons, path, staged);
        // Recorded before the eviction ends: `Evicted` waits for that.
        if let Ok(copy) = &evicted {
            self.evictions.record(staged.ino, path, copy.ino);
        }
        Some(evicted)
    }
}

impl Evicter {
    /// Evicts one demoted file; the bytes it frees (0 when it stays), or
    /// the failure that ends the round (the evicter backs off).
    fn evict(&self, path: &str, ino: u64, version: u64, bytes: u64) -> Result<u64, Failure> {
        let manager = &*self.manager;
        // A demoted file found by `resume` has its size to learn.
        let bytes = if bytes == 0 { manager.object_bytes(path).unwrap_or(0) } else { bytes };
        let staged = Staged { ino, version, bytes, crc: 0, stripes: 0 };
        // Held open: a later round.
        let Some(evicted) = manager.evict_unheld(path, &staged) else { return Ok(0) };
        match evicted {
            Ok(_) => {
                manager.evicted(path, bytes);
                Ok(bytes.max(1))
            }
            Err(failure) if failure.errno == Errno::ENOENT => {
                manager.removed(path);
                Ok(0)
            }
            // Written since its demotion: to be demoted again.
            Err(failure) if failure.errno == Errno(libc::ESTALE) => {
                manager.back_to_buffer(path);
                Ok(0)
            }
            Err(failure) => {
                let message = format!("evicting {path} failed: {}", failure.text());
                manager.remember_error(&format!("drain: {message}"));
                Err(Failure::new(failure.errno, message))
            }
        }
    }
}

impl Task for Evicter {
    fn name(&self) -> &'static str {
        "evicter"
    }

    fn period(&self) -> Duration {
        PERIOD
    }

    /// Evicts the outdated demoted files, then, above the high watermark,
    /// the `Clean` jobs' files down to the low one.
    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        let manager = &*self.manager;
        let outdated = lock(&manager.books).outdated_demoted();
        for (path, ino, version, bytes) in outdated {
            if cx.stopping() {
                return Ok(());
            }
            self.evict(&path, ino, version, bytes)?;
        }
        let needed = self.to_free();
        if needed == 0 {
            return Ok(());
        }
        let mut clean = BTreeSet::new();
        while let Some(job) = manager.with_state("pop from Clean", |s| s.pop_clean()).flatten() {
            clean.insert(job.0);
        }
        let order = lock(&manager.books).eviction_order(manager.setting.config.evict.order(), Instant::now());
        let (mut freed, mut failed) = (0, None);
        for (path, ino, version, bytes) in order {
            if freed >= needed || cx.stopping() {
                break;
            }
            if lock(&manager.books).files.get(&path).is_some_and(|f| clean.contains(&f.job)) {
                match self.evict(&path, ino, version, bytes) {
                    Ok(bytes) => freed += bytes,
                    Err(failure) => {
                        failed = Some(failure);
                        break;
                    }
                }
            }
        }
        // Jobs with demoted files left stay in Clean.
        let books = lock(&manager.books);
        let left: BTreeSet<u64> = books
            .files
            .values()
            .filter(|f| matches!(f.status, FileStatus::Demoted { .. }))
            .map(|f| f.job)
            .filter(|job| clean.contains(job))
            .collect();
        drop(books);
        for job in left {
            manager.with_state("push back to Clean", |s| s.push_clean(AppId(job)));
        }
        failed.map_or(Ok(()), Err)
    }
}
