//! The registry of request-path stages, in the manner of [IOR]'s `aiori`
//! table of backends: for each stage kind (scheduler, checksum, read cache,
//! object store) the named real implementations a daemon can run, each
//! with a one-line description, the options it reads and a constructor.
//! `surged --scheduler NAME --checksum NAME --cache NAME --store NAME`
//! picks one of each (`surge start`, `surge run` and the cluster's daemon
//! recipes pass the same flags); [`StageNames::default`] is what runs when
//! none is named.
//!
//! Adding an implementation is one entry in one of [`SCHEDULERS`],
//! [`CHECKSUMS`], [`CACHES`] or [`STORES`]: the flags' accepted values,
//! `surged --help`, the error for an unknown name, `surge status` and the
//! test run of the request-path suite per implementation (`make test`,
//! `SURGED_STAGES`) all read these tables. docs/architecture.md, "Adding a
//! stage", walks through it; the `null_*` modules beside this file are
//! commented templates to copy. Test doubles (`testing`) stay out of the
//! registry: everything here is meant for production.

use crate::synced_store::SyncedStore;
use crate::{cache, checksum, sched, store};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

#[cfg(test)]
mod null_cache;
#[cfg(test)]
mod null_checksum;
#[cfg(test)]
mod null_scheduler;
#[cfg(test)]
mod null_store;

/// Settings an implementation may read, from the daemon's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageOptions {
    /// Most bytes a read cache keeps (`--cache-size`).
    pub cache_size: u64,
    /// Threads a checksum batch may be spread over, the connection's own
    /// among them (`--checksum-threads`).
    pub checksum_threads: NonZeroUsize,
    /// Most requests a depth-bounded scheduler lets run at once (`--queue-depth`).
    pub queue_depth: NonZeroUsize,
}

impl StageOptions {
    /// The value of the option behind `flag`, as `surge status` shows it.
    fn value(&self, flag: &str) -> Option<String> {
        match flag {
            "--cache-size" => Some(self.cache_size.to_string()),
            "--checksum-threads" => Some(self.checksum_threads.to_string()),
            "--queue-depth" => Some(self.queue_depth.to_string()),
            _ => None,
        }
    }
}

/// What `--cache-size` is when not given.
pub const DEFAULT_CACHE_SIZE: u64 = 256 << 20;

impl Default for StageOptions {
    fn default() -> StageOptions {
        StageOptions {
            cache_size: DEFAULT_CACHE_SIZE,
            checksum_threads: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            queue_depth: sched::JobRoundRobin::DEFAULT_DEPTH,
        }
    }
}

/// One registered implementation of a stage kind whose instances are `T`.
pub struct Registered<T> {
    /// What `--<kind> NAME` takes.
    pub name: &'static str,
    /// One line for `--help` and the docs.
    pub about: &'static str,
    /// The flags of [`StageOptions`] it reads, as written on the command line.
    pub options: &'static [&'static str],
    /// Makes the stage, or says why it cannot (threads that do not start, say).
    pub build: fn(&StageOptions) -> Result<T, String>,
}

/// The scheduling points (`sched`).
pub const SCHEDULERS: &[Registered<Arc<dyn sched::Scheduler>>] = &[
    Registered {
        name: "fifo",
        about: "first come, first served: every request is admitted at once",
        options: &[],
        build: |_| Ok(Arc::new(sched::Fifo)),
    },
    Registered {
        name: "job-rr",
        about: "jobs served in turn, at most --queue-depth requests at once (Lustre NRS CRR-N over jobs)",
        options: &["--queue-depth"],
        build: |options| Ok(Arc::new(sched::JobRoundRobin::new(options.queue_depth))),
    },
];

/// The checksum stages (`checksum`).
pub const CHECKSUMS: &[Registered<Arc<dyn checksum::ChecksumStage>>] = &[
    Registered {
        name: "crc32c",
        about: "CRC-32C on the connection's own thread (hardware instructions where the CPU has them)",
        options: &[],
        build: |_| Ok(Arc::new(checksum::InlineCrc32c)),
    },
    Registered {
        name: "crc32c-threads",
        about: "CRC-32C with each large batch of blocks spread over --checksum-threads threads",
        options: &["--checksum-threads"],
        build: |options| Ok(Arc::new(checksum::ThreadedCrc32c::new(options.checksum_threads.get())?)),
    },
];

/// The read caches (`cache`).
pub const CACHES: &[Registered<Arc<dyn cache::ReadCache>>] = &[
    Registered {
        name: "none",
        about: "no cache of the daemon's own: every read goes to the store (the page cache still helps)",
        options: &[],
        build: |_| Ok(Arc::new(cache::NoCache)),
    },
    Registered {
        name: "lru",
        about: "keeps recent reads in memory, least recently used out first, up to --cache-size bytes",
        options: &["--cache-size"],
        build: |options| Ok(Arc::new(cache::Lru::new(usize::try_from(options.cache_size).unwrap_or(usize::MAX)))),
    },
];

/// The object stores (`store`).
pub const STORES: &[Registered<store::OpenStore>] = &[
    Registered {
        name: "dir",
        about: "a file per object with a CRC-32C sidecar, in the buffer directory",
        options: &[],
        build: |_| Ok(Box::new(|site| Ok(Box::new(store::DirStore::open_at(site)?)))),
    },
    Registered {
        name: "dir-sync",
        about: "dir, with each change synced to the device before it is acknowledged (for buffers whose page \
                cache does not survive a node's crash)",
        options: &[],
        build: |_| Ok(Box::new(|site| Ok(Box::new(SyncedStore::new(store::DirStore::open_at(site)?))))),
    },
];

/// The names of the registered implementations of one kind, for clap's
/// `value_parser` (which lists them in `--help` and in its error for a
/// name that is not one of them).
pub fn possible<T>(registry: &'static [Registered<T>]) -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        registry.iter().map(|entry| clap::builder::PossibleValue::new(entry.name).help(entry.about)),
    )
}

/// Which implementation of each stage kind a daemon runs, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageNames {
    pub scheduler: String,
    pub checksum: String,
    pub cache: String,
    pub store: String,
    pub options: StageOptions,
}

impl Default for StageNames {
    /// What `surged` runs unless told: first come first served, inline
    /// CRC-32C, no cache, a directory of object files.
    fn default() -> StageNames {
        StageNames {
            scheduler: SCHEDULERS[0].name.into(),
            checksum: CHECKSUMS[0].name.into(),
            cache: CACHES[0].name.into(),
            store: STORES[0].name.into(),
            options: StageOptions::default(),
        }
    }
}

/// Finds `name` among `registry`'s entries, or says which names there are.
fn find<'r, T>(kind: &str, registry: &'r [Registered<T>], name: &str) -> Result<&'r Registered<T>, String> {
    registry.iter().find(|entry| entry.name == name).ok_or_else(|| {
        let names: Vec<&str> = registry.iter().map(|entry| entry.name).collect();
        format!("no {kind} is registered as {name:?}: choose one of {}", names.join(", "))
    })
}

impl StageNames {
    /// Builds the named stages; an unknown name is an error that lists the
    /// registered ones.
    pub fn build(&self) -> Result<Stages, String> {
        let options = &self.options;
        Ok(Stages {
            scheduler: (find("scheduler", SCHEDULERS, &self.scheduler)?.build)(options)?,
            checksum: (find("checksum", CHECKSUMS, &self.checksum)?.build)(options)?,
            cache: (find("cache", CACHES, &self.cache)?.build)(options)?,
            store: (find("store", STORES, &self.store)?.build)(options)?,
            names: self.clone(),
        })
    }
}

/// One line per registered implementation, `KIND=NAME`, a tab and its
/// description, the defaults marked: what `surged --list-stages` prints,
/// and what `make test` reads to run the request-path suite once per
/// implementation that is not a default.
pub fn listing() -> String {
    fn lines<T>(out: &mut String, kind: &str, registry: &[Registered<T>]) {
        for (i, entry) in registry.iter().enumerate() {
            let default = if i == 0 { " (default)" } else { "" };
            let options = entry.options.iter().map(|o| format!(" [{o}]")).collect::<String>();
            out.push_str(&format!("{kind}={}\t{}{options}{default}\n", entry.name, entry.about));
        }
    }
    let mut out = String::new();
    lines(&mut out, "scheduler", SCHEDULERS);
    lines(&mut out, "checksum", CHECKSUMS);
    lines(&mut out, "cache", CACHES);
    lines(&mut out, "store", STORES);
    out
}

/// What `surge status` shows: `scheduler=fifo checksum=crc32c cache=lru(268435456) store=dir`
/// (in brackets the options an implementation reads: the cache's size in
/// bytes, the checksum threads, the queue depth).
impl fmt::Display for StageNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = [
            ("scheduler", &self.scheduler, options_read("scheduler", SCHEDULERS, &self.scheduler)),
            ("checksum", &self.checksum, options_read("checksum", CHECKSUMS, &self.checksum)),
            ("cache", &self.cache, options_read("cache", CACHES, &self.cache)),
            ("store", &self.store, options_read("store", STORES, &self.store)),
        ];
        for (i, (kind, name, read)) in kinds.into_iter().enumerate() {
            write!(f, "{}{kind}={name}", if i == 0 { "" } else { " " })?;
            let values: Vec<String> = read.iter().filter_map(|flag| self.options.value(flag)).collect();
            if !values.is_empty() {
                write!(f, "({})", values.join(","))?;
            }
        }
        Ok(())
    }
}

/// The option flags the implementation registered as `name` reads (none
/// for a name not registered).
fn options_read<T>(kind: &str, registry: &[Registered<T>], name: &str) -> &'static [&'static str] {
    find(kind, registry, name).map(|entry| entry.options).unwrap_or_default()
}

/// The daemon's request stages, chosen here and nowhere else: the
/// scheduling point, the checksum stage, the read cache and the object
/// store (see the crate doc for the order a request passes them).
/// [`StageNames::build`] makes them from the registry; tests also start
/// daemons with the doubles of `testing`.
pub struct Stages {
    pub scheduler: Arc<dyn sched::Scheduler>,
    pub checksum: Arc<dyn checksum::ChecksumStage>,
    pub cache: Arc<dyn cache::ReadCache>,
    /// Opens the store once the buffer directory is the daemon's.
    pub store: store::OpenStore,
    /// The registry names `surge status` reports (those of the defaults
    /// when a test put a double in).
    pub names: StageNames,
}

impl Default for Stages {
    /// The default of each kind ([`StageNames::default`]).
    fn default() -> Stages {
        StageNames::default().build().expect("the defaults are registered")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Errno, Request};

    #[test]
    fn an_unknown_name_is_refused_with_the_registered_names() {
        let names = StageNames { cache: "arc".into(), ..StageNames::default() };
        let refused = names.build().err().expect("no cache is called arc");
        assert_eq!(refused, "no cache is registered as \"arc\": choose one of none, lru");
    }

    #[test]
    fn the_defaults_are_what_the_daemon_always_ran_and_status_names_them() {
        let names = StageNames::default();
        assert_eq!(names.to_string(), "scheduler=fifo checksum=crc32c cache=none store=dir");
        let lru =
            StageNames { cache: "lru".into(), options: StageOptions { cache_size: 1 << 20, ..names.options }, ..names };
        assert_eq!(lru.to_string(), "scheduler=fifo checksum=crc32c cache=lru(1048576) store=dir");
    }

    #[test]
    fn the_listing_has_every_entry_once_and_marks_one_default_per_kind() {
        let listing = listing();
        let entries = SCHEDULERS.len() + CHECKSUMS.len() + CACHES.len() + STORES.len();
        assert_eq!(listing.lines().count(), entries);
        assert_eq!(listing.lines().filter(|line| line.ends_with("(default)")).count(), 4);
        assert!(listing.contains("cache=lru\tkeeps recent reads"), "{listing}");
        assert!(listing.contains("[--cache-size]"), "{listing}");
    }

    #[test]
    fn a_daemon_runs_on_the_null_templates() {
        let dir = tempfile::tempdir().unwrap();
        let (secret_file, pfs) = (dir.path().join("secret"), dir.path().join("pfs"));
        surge_cluster::generate_secret(&secret_file).unwrap();
        std::fs::create_dir(&pfs).unwrap();
        let stages = Stages {
            scheduler: Arc::new(null_scheduler::NullScheduler),
            checksum: Arc::new(null_checksum::NullChecksum),
            cache: Arc::new(null_cache::NullCache),
            store: Box::new(|_| Ok(Box::new(null_store::NullStore))),
            names: StageNames::default(),
        };
        let cfg = crate::DaemonConfig::new(0, 1, dir.path().join("buffer"), pfs, &secret_file, "null");
        let daemon = crate::start_with(cfg, stages).unwrap();
        let secret = surge_cluster::read_secret(&secret_file).unwrap();
        let mut c = surge_testkit::wire::Client::authenticated(daemon.addr(), &secret);
        let write = c.call(&Request::Write { ino: 9, offset: 0, data: b"kept nowhere" });
        assert_eq!(write.errno(), Some(Errno(libc::EROFS)), "a store that keeps nothing acknowledges nothing");
        assert_eq!(c.read(&Request::Read { ino: 9, offset: 0, len: 12 }), b"");
    }
}
