//! The daemons' request-path stages on `surge start` and `surge run`
//! (`--scheduler`, `--checksum`, `--cache`, `--store` and their options `--cache-size`,
//! `--checksum-threads`, `--queue-depth`), and the namespace's group commit
//! (`--commit-interval`),
//! passed to every `surged` as the same flags, and kept with the rest of
//! its command line in the registration directory, so a restarted daemon
//! (`surge start --daemon N`) runs the same stages.
//!
//! The names are surged's registry's (`surged::stages`, docs/architecture.md
//! "Adding a stage"): this side asks `surged --list-stages` rather than
//! keeping a copy, so a stage registered there is accepted here at once.

use clap::Args;
use std::num::NonZeroUsize;
use std::path::Path;
use std::process::Command;

#[derive(Args, Clone, Debug, Default)]
pub struct StageArgs {
    /// The daemons' scheduling point, by its registered name (`surged --list-stages` lists them;
    /// the daemon's default: fifo).
    #[arg(long, value_name = "NAME")]
    pub scheduler: Option<String>,
    /// The daemons' checksum stage, by its registered name (default: crc32c).
    #[arg(long, value_name = "NAME")]
    pub checksum: Option<String>,
    /// The daemons' read cache, by its registered name: none (the default) or lru, which keeps
    /// recent reads in memory up to --cache-size bytes per daemon.
    #[arg(long, value_name = "NAME")]
    pub cache: Option<String>,
    /// Most bytes each daemon's read cache keeps, such as 256M (the default) or 2G.
    #[arg(long, value_name = "BYTES", value_parser = surge_cluster::parse_size)]
    pub cache_size: Option<u64>,
    /// Threads each daemon's checksum stage spreads a batch over, when it is one that does
    /// (crc32c-threads; default: the CPUs).
    #[arg(long, value_name = "N")]
    pub checksum_threads: Option<NonZeroUsize>,
    /// Most requests each daemon's depth-bounded scheduler (job-rr) runs at once (default: 14).
    #[arg(long, value_name = "N")]
    pub queue_depth: Option<NonZeroUsize>,
    /// The daemons' object store, by its registered name: dir (the default) or dir-sync, which
    /// syncs each change to the device before acknowledging it.
    #[arg(long, value_name = "NAME")]
    pub store: Option<String>,
    /// Longest time, in milliseconds, a namespace change (a create, a removal, a rename) waits to
    /// be made durable with the others of that time (group commit; default: 0 on a tmpfs buffer,
    /// where a flush is free, else 50). fsync of a file
    /// or a directory makes them durable at once; a crash of daemon 0 loses at most the changes
    /// of the last interval that nobody fsynced. 0: every change durable before it is
    /// acknowledged (docs/core.md "Durability").
    #[arg(long, value_name = "MS")]
    pub commit_interval: Option<u64>,
}

impl StageArgs {
    /// The `surged` flags of the stages named; the daemon's defaults for the others.
    pub fn flags(&self) -> Vec<String> {
        let named = [
            ("--scheduler", self.scheduler.clone()),
            ("--checksum", self.checksum.clone()),
            ("--cache", self.cache.clone()),
            ("--cache-size", self.cache_size.map(|bytes| bytes.to_string())),
            ("--checksum-threads", self.checksum_threads.map(|n| n.to_string())),
            ("--queue-depth", self.queue_depth.map(|n| n.to_string())),
            ("--store", self.store.clone()),
            ("--commit-interval", self.commit_interval.map(|ms| ms.to_string())),
        ];
        named.into_iter().filter_map(|(flag, value)| Some([flag.to_string(), value?])).flatten().collect()
    }

    /// The stages named, as their flags, for a benchmark's header: "default
    /// stages" when none is.
    pub fn describe(&self) -> String {
        let flags = self.flags();
        if flags.is_empty() {
            "default stages".into()
        } else {
            flags.join(" ")
        }
    }

    pub fn apply(&self, surged: &mut Command) {
        surged.args(self.flags());
    }

    /// Checks the names against `surged`'s registry, so that a name it does
    /// not know fails here, with the names it does, before any daemon starts.
    pub fn check(&self, surged: &Path) -> Result<(), String> {
        let named = [
            ("scheduler", &self.scheduler),
            ("checksum", &self.checksum),
            ("cache", &self.cache),
            ("store", &self.store),
        ];
        if named.iter().all(|(_, name)| name.is_none()) {
            return Ok(());
        }
        let listed = Command::new(surged)
            .arg("--list-stages")
            .output()
            .map_err(|e| format!("cannot ask {} for its stages: {e}", surged.display()))?;
        let listing = String::from_utf8_lossy(&listed.stdout);
        let registered = |kind: &str| -> Vec<String> {
            let prefix = format!("{kind}=");
            let names = listing.lines().filter_map(|line| line.split('\t').next()?.strip_prefix(&prefix));
            names.map(str::to_string).collect()
        };
        for (kind, name) in named {
            let Some(name) = name else { continue };
            let known = registered(kind);
            if !known.contains(name) {
                return Err(format!(
                    "--{kind} {name}: no such {kind} is registered; choose one of {} (`surged --list-stages` says \
                     what each is)",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stages_named_become_flags() {
        assert!(StageArgs::default().flags().is_empty());
        let named = StageArgs { cache: Some("lru".into()), cache_size: Some(1 << 28), ..StageArgs::default() };
        assert_eq!(named.flags(), ["--cache", "lru", "--cache-size", "268435456"]);
    }
}
