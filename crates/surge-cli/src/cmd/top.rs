//! `surge top`: a live view of a running cluster, per daemon and per job:
//! read and write bandwidth, requests per second, queue depth, buffer
//! space and stage-out progress, refreshed every interval.
//!
//! It asks every daemon for its `Status` (what `surge status` shows) once
//! per interval; the daemons report totals since they started, so each
//! rate is the difference of two snapshots over the time between them. On
//! a terminal the screen is redrawn; otherwise (a pipe, a file, a test)
//! one table is printed per interval.

use super::{CmdResult, Ctx};
use crate::units::{human, listing_size};
use clap::Args;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use surge_client::DaemonStatus;
use surge_proto::Op;

#[derive(Args)]
pub struct TopArgs {
    /// Seconds between snapshots (fractions allowed, at least 0.1).
    #[arg(long, default_value_t = 1.0, value_name = "SECS", value_parser = parse_interval)]
    pub interval: f64,
    /// Take N snapshots, then exit (rates need two: the first shows queues and space only).
    /// Runs until interrupted without it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,
}

fn parse_interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if (0.1..=86_400.0).contains(&secs) => Ok(secs),
        _ => Err(format!("expected a number of seconds from 0.1 to 86400, not {text:?}")),
    }
}

pub fn top(ctx: &Ctx, a: TopArgs) -> CmdResult {
    let client = ctx.client()?;
    let cluster_id = client.cluster().cluster_id.clone();
    let terminal = std::io::stdout().is_terminal();
    let interval = Duration::from_secs_f64(a.interval);
    let mut previous: Option<Snapshot> = None;
    let mut taken = 0;
    loop {
        let snapshot = Snapshot {
            at: Instant::now(),
            daemons: client.status().into_iter().map(|(d, s)| (d.index, s.map_err(|e| e.to_string()))).collect(),
        };
        taken += 1;
        let mut screen = String::new();
        if terminal {
            // Home and clear: the view replaces the last one.
            screen.push_str("\x1b[H\x1b[2J");
        }
        let _ = writeln!(screen, "surge top: cluster {cluster_id}, every {} s", a.interval);
        screen.push_str(&render(previous.as_ref(), &snapshot));
        if !terminal {
            screen.push('\n');
        }
        let mut out = std::io::stdout().lock();
        if out.write_all(screen.as_bytes()).and_then(|()| out.flush()).is_err() {
            // The reader went away (`surge top | head`): nothing left to show.
            return Ok(ExitCode::SUCCESS);
        }
        drop(out);
        if a.iterations.is_some_and(|n| taken >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(interval.saturating_sub(snapshot.at.elapsed()));
        previous = Some(snapshot);
    }
}

/// Every daemon's status at one moment, in index order.
struct Snapshot {
    at: Instant,
    daemons: Vec<(u32, Result<DaemonStatus, String>)>,
}

impl Snapshot {
    fn status(&self, index: u32) -> Option<&DaemonStatus> {
        self.daemons.iter().find(|(i, _)| *i == index).and_then(|(_, s)| s.as_ref().ok())
    }

    /// Each job's queue over every daemon that answered, in job order.
    fn queues(&self) -> BTreeMap<u64, Queue> {
        let mut jobs: BTreeMap<u64, Queue> = BTreeMap::new();
        for status in self.daemons.iter().filter_map(|(_, s)| s.as_ref().ok()) {
            for j in &status.jobs {
                let queue = jobs.entry(j.job).or_default();
                queue.waiting += j.waiting;
                queue.in_service += j.in_service;
            }
        }
        jobs
    }

    /// Each job's rates since `before`, `secs` earlier, over the daemons
    /// that answered both times (a daemon's totals are since its start, so
    /// one seen once has nothing to compare with).
    fn job_rates(&self, before: &Snapshot, secs: f64) -> BTreeMap<u64, Rates> {
        let mut rates: BTreeMap<u64, Rates> = BTreeMap::new();
        for (index, status) in &self.daemons {
            let (Ok(now), Some(then)) = (status, before.status(*index)) else { continue };
            let then = Totals::of_jobs(then);
            for (job, totals) in Totals::of_jobs(now) {
                let delta = totals.rates_since(&then.get(&job).copied().unwrap_or_default(), secs);
                rates.entry(job).and_modify(|r| *r = r.plus(&delta)).or_insert(delta);
            }
        }
        rates
    }
}

/// Counters a daemon keeps from its start: what rates are made of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    read_bytes: u64,
    write_bytes: u64,
    requests: u64,
    staged_bytes: u64,
}

impl Totals {
    fn of_daemon(status: &DaemonStatus) -> Totals {
        let mut totals = Totals { staged_bytes: status.staged_bytes, ..Totals::default() };
        for j in &status.job_ops {
            totals.add(j.op, j.requests, j.bytes);
        }
        totals
    }

    /// A daemon's totals per job (stage-out is not a job's).
    fn of_jobs(status: &DaemonStatus) -> BTreeMap<u64, Totals> {
        let mut jobs: BTreeMap<u64, Totals> = BTreeMap::new();
        for j in &status.job_ops {
            jobs.entry(j.job).or_default().add(j.op, j.requests, j.bytes);
        }
        jobs
    }

    fn add(&mut self, op: u8, requests: u64, bytes: u64) {
        self.requests += requests;
        match Op::from_u8(op) {
            Some(Op::Write) => self.write_bytes += bytes,
            Some(Op::Read | Op::PfsRead) => self.read_bytes += bytes,
            _ => {}
        }
    }

    /// Per second since `before`, `secs` earlier. A counter that went
    /// back (its daemon restarted) counts from zero.
    fn rates_since(&self, before: &Totals, secs: f64) -> Rates {
        let per_second = |now: u64, then: u64| {
            let delta = if now >= then { now - then } else { now };
            delta as f64 / secs.max(1e-3)
        };
        Rates {
            read: per_second(self.read_bytes, before.read_bytes),
            write: per_second(self.write_bytes, before.write_bytes),
            requests: per_second(self.requests, before.requests),
            staged: per_second(self.staged_bytes, before.staged_bytes),
        }
    }
}

/// Bytes and requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rates {
    read: f64,
    write: f64,
    requests: f64,
    staged: f64,
}

impl Rates {
    const NONE: Rates = Rates { read: 0.0, write: 0.0, requests: 0.0, staged: 0.0 };

    fn plus(&self, other: &Rates) -> Rates {
        Rates {
            read: self.read + other.read,
            write: self.write + other.write,
            requests: self.requests + other.requests,
            staged: self.staged + other.staged,
        }
    }

    /// Read MB/s, write MB/s and requests/s as table cells.
    fn cells(rates: Option<Rates>) -> [String; 3] {
        match rates {
            Some(r) => [format!("{:.1}", r.read / 1e6), format!("{:.1}", r.write / 1e6), format!("{:.0}", r.requests)],
            None => ["-".into(), "-".into(), "-".into()],
        }
    }
}

/// One job's requests waiting and in service, summed over the daemons.
#[derive(Debug, Clone, Copy, Default)]
struct Queue {
    waiting: u64,
    in_service: u64,
}

/// The tables for `now`, with rates since `before` when there is one.
fn render(before: Option<&Snapshot>, now: &Snapshot) -> String {
    let secs = before.map(|b| now.at.duration_since(b.at).as_secs_f64());
    let mut out = String::new();
    let up = now.daemons.iter().filter(|(_, s)| s.is_ok()).count();
    let _ = writeln!(out, "{up}/{} daemons up; rates in MB/s (10^6 bytes) and requests/s", now.daemons.len());
    let _ = writeln!(
        out,
        "{:>6} {:<5} {:>9} {:>9} {:>8} {:>6} {:>6} {:>10} {:>7} {:>7}",
        "daemon", "state", "read", "write", "req/s", "queue", "in-svc", "stage-out", "used", "free"
    );
    for (index, status) in &now.daemons {
        let s = match status {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(out, "{index:>6} {:<5} {e}", "DOWN");
                continue;
            }
        };
        let totals = Totals::of_daemon(s);
        let rates = before
            .and_then(|b| b.status(*index))
            .zip(secs)
            .map(|(b, secs)| totals.rates_since(&Totals::of_daemon(b), secs));
        let [read, write, requests] = Rates::cells(rates);
        let staged = rates.map_or_else(|| "-".into(), |r| format!("{:.1}", r.staged / 1e6));
        let queue: u64 = s.jobs.iter().map(|j| j.waiting).sum();
        let in_service: u64 = s.jobs.iter().map(|j| j.in_service).sum();
        // Room left for objects: the capacity not used, unless the device has less.
        let free = s.capacity.saturating_sub(s.bytes_used).min(s.device_free);
        let _ = writeln!(
            out,
            "{index:>6} {:<5} {read:>9} {write:>9} {requests:>8} {queue:>6} {in_service:>6} {staged:>10} {:>7} {:>7}",
            "up",
            listing_size(s.bytes_used, true),
            listing_size(free, true)
        );
    }
    let queues = now.queues();
    if !queues.is_empty() {
        let rates = before.zip(secs).map(|(before, secs)| now.job_rates(before, secs));
        let _ =
            writeln!(out, "\n{:<20} {:>9} {:>9} {:>8} {:>6} {:>6}", "job", "read", "write", "req/s", "queue", "in-svc");
        for (job, queue) in &queues {
            let job_rates = rates.as_ref().map(|r| r.get(job).copied().unwrap_or(Rates::NONE));
            let [read, write, requests] = Rates::cells(job_rates);
            let _ = writeln!(
                out,
                "{job:<20} {read:>9} {write:>9} {requests:>8} {:>6} {:>6}",
                queue.waiting, queue.in_service
            );
        }
    }
    let staged: u64 = now.daemons.iter().filter_map(|(_, s)| s.as_ref().ok()).map(|s| s.staged_bytes).sum();
    match now.daemons.iter().filter_map(|(_, s)| s.as_ref().ok()).find(|s| s.is_metadata) {
        Some(m) => {
            let _ = writeln!(
                out,
                "\nstage-out: {} file(s) in the buffer only, not yet staged; {} staged since the daemons started",
                m.unstaged_files,
                human(staged)
            );
        }
        None => out.push_str("\nstage-out: daemon 0 (the namespace) does not answer\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::msg::{JobOpStatus, JobStatus};

    fn daemon(index: u32, written: u64, read: u64, staged: u64) -> DaemonStatus {
        DaemonStatus {
            index,
            is_metadata: index == 0,
            bytes_used: written,
            capacity: 10 << 30,
            device_free: 1 << 30,
            jobs: vec![JobStatus { job: 7, waiting: 3, in_service: 1, requests: 4, bytes: written + read }],
            job_ops: vec![
                JobOpStatus { job: 7, op: Op::Write as u8, requests: written / 1_000_000, bytes: written },
                JobOpStatus { job: 7, op: Op::Read as u8, requests: read / 1_000_000, bytes: read },
            ],
            staged_bytes: staged,
            unstaged_files: 5,
            ..DaemonStatus::default()
        }
    }

    #[test]
    fn rates_are_the_difference_of_two_snapshots_over_the_time_between() {
        let start = Instant::now();
        let first = Snapshot { at: start, daemons: vec![(0, Ok(daemon(0, 0, 0, 0))), (1, Err("refused".into()))] };
        let second = Snapshot {
            at: start + Duration::from_secs(2),
            daemons: vec![(0, Ok(daemon(0, 40_000_000, 8_000_000, 2_000_000))), (1, Ok(daemon(1, 20_000_000, 0, 0)))],
        };
        let table = render(Some(&first), &second);
        let row = |first: &str| -> Vec<String> {
            let line =
                table.lines().find(|l| l.split_whitespace().next() == Some(first)).unwrap_or_else(|| panic!("{table}"));
            line.split_whitespace().map(str::to_string).collect()
        };
        // Daemon 0: 40 MB written and 8 MB read in 2 s, 1 MB a request; 2 MB staged.
        assert_eq!(row("0")[1..8], ["up", "4.0", "20.0", "24", "3", "1", "1.0"], "{table}");
        // Daemon 1 was down at the first snapshot: no rates yet.
        assert_eq!(row("1")[1..5], ["up", "-", "-", "-"], "{table}");
        // Job 7: its rates from daemon 0 only (daemon 1's totals have nothing to
        // compare with), its queue over both daemons.
        assert_eq!(row("7")[1..6], ["4.0", "20.0", "24", "6", "2"], "{table}");
        assert!(table.contains("stage-out: 5 file(s) in the buffer only"), "{table}");
        assert!(table.starts_with("2/2 daemons up"), "{table}");
    }

    #[test]
    fn the_first_snapshot_has_no_rates_and_a_restarted_daemon_counts_from_zero() {
        let start = Instant::now();
        let first = Snapshot { at: start, daemons: vec![(0, Ok(daemon(0, 90_000_000, 0, 0)))] };
        let table = render(None, &first);
        assert!(
            table.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..4] == ["0", "up", "-", "-"]),
            "{table}"
        );
        let restarted =
            Snapshot { at: start + Duration::from_secs(1), daemons: vec![(0, Ok(daemon(0, 5_000_000, 0, 0)))] };
        let table = render(Some(&first), &restarted);
        assert!(
            table.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..4] == ["0", "up", "0.0", "5.0"]),
            "{table}"
        );
    }
}
