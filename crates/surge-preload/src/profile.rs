//! The I/O profile: Darshan-like counters per file and process, written as
//! one JSON line per process when it exits (schema `surge-profile/1`,
//! docs/profile.md). Counter names and meanings follow Darshan's POSIX
//! module, so the tuner reads profiles and Darshan logs the same way.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use crate::darshan::Span;
use crate::darshan::{bucket, SIZE_BUCKETS};

pub const SCHEMA: &str = "surge-profile/1";

/// The first word of a writers-journal line about a standard stream
/// (`surge run` reads it: crates/surge-cli/src/cmd/run.rs).
pub const STREAM_NOTE: &str = "stream";

/// Metadata operations counted per file.
#[derive(Debug, Clone, Copy)]
pub enum Meta {
    Open,
    Stat,
    Seek,
    Fsync,
    Rename,
    Unlink,
    Mkdir,
    Readdir,
    Close,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// One direction's counters (reads or writes).
#[derive(Debug, Default, Clone)]
struct Direction {
    ops: u64,
    bytes: u64,
    max_byte: Option<u64>,
    /// One past the last byte the previous operation touched.
    end_of_last: Option<u64>,
    consecutive: u64,
    sequential: u64,
    sizes: [u64; 10],
    time: f64,
    start: Option<f64>,
    end: f64,
}

impl Direction {
    fn record(&mut self, offset: u64, len: u64, start: f64, end: f64) {
        // Darshan: consecutive starts right where the last one ended,
        // sequential anywhere after it.
        if let Some(last) = self.end_of_last {
            if offset == last {
                self.consecutive += 1;
            }
            if offset >= last {
                self.sequential += 1;
            }
        }
        self.ops += 1;
        self.bytes += len;
        if len > 0 {
            let last_byte = offset + len - 1;
            self.max_byte = Some(self.max_byte.map_or(last_byte, |m| m.max(last_byte)));
        }
        self.end_of_last = Some(offset + len);
        self.sizes[bucket(len)] += 1;
        self.time += end - start;
        self.start.get_or_insert(start);
        self.end = self.end.max(end);
    }
}

/// The counters of one file in this process.
#[derive(Debug, Default, Clone)]
pub struct FileCounters {
    read: Direction,
    write: Direction,
    last_access: Option<Access>,
    rw_switches: u64,
    /// Reads and writes not starting on a stripe boundary (Darshan's
    /// POSIX_FILE_NOT_ALIGNED, with the stripe size as the alignment).
    not_aligned: u64,
    meta: BTreeMap<&'static str, u64>,
    meta_time: f64,
    open_start: Option<f64>,
    close_end: f64,
    pub stripe_count: u32,
    pub stripe_size: u64,
    /// What the program asked of MPI-IO on the file, if it used MPI-IO on it.
    mpiio: Option<crate::mpiio::Counters>,
}

impl FileCounters {
    pub fn read(&mut self, offset: u64, len: u64, span: Span) {
        self.access(Access::Read, offset);
        self.read.record(offset, len, span.start, span.end);
    }

    pub fn write(&mut self, offset: u64, len: u64, span: Span) {
        self.access(Access::Write, offset);
        self.write.record(offset, len, span.start, span.end);
    }

    fn access(&mut self, kind: Access, offset: u64) {
        if self.last_access.is_some_and(|last| last != kind) {
            self.rw_switches += 1;
        }
        // A request across a stripe boundary costs a second server (and a
        // read-modify-write of a partial stripe); Darshan counts the same
        // against the file system's block size.
        if self.stripe_size > 0 && !offset.is_multiple_of(self.stripe_size) {
            self.not_aligned += 1;
        }
        self.last_access = Some(kind);
    }

    /// The layout the file was opened with (Darshan's LUSTRE_STRIPE_WIDTH and _SIZE).
    pub fn set_layout(&mut self, layout: &surge_proto::layout::Layout) {
        (self.stripe_count, self.stripe_size) = (layout.stripe_count, layout.stripe_size);
    }

    pub fn meta(&mut self, op: Meta, span: Span) {
        let counter = match op {
            Meta::Open => "POSIX_OPENS",
            Meta::Stat => "POSIX_STATS",
            Meta::Seek => "POSIX_SEEKS",
            Meta::Fsync => "POSIX_FSYNCS",
            Meta::Rename => "POSIX_RENAMES",
            Meta::Unlink => "POSIX_UNLINKS",
            Meta::Mkdir => "POSIX_MKDIRS",
            Meta::Readdir => "POSIX_READDIRS",
            Meta::Close | Meta::Other => "",
        };
        if !counter.is_empty() {
            *self.meta.entry(counter).or_default() += 1;
        }
        match op {
            Meta::Open => {
                self.open_start.get_or_insert(span.start);
            }
            Meta::Close => self.close_end = self.close_end.max(span.end),
            _ => {}
        }
        // Darshan counts a sync's time as write time (the data it waits for was written), not metadata.
        if matches!(op, Meta::Fsync) {
            self.write.time += span.end - span.start;
        } else {
            self.meta_time += span.end - span.start;
        }
    }

    /// The file's MPI-IO counters, from its first MPI-IO call on.
    pub fn mpiio(&mut self) -> &mut crate::mpiio::Counters {
        self.mpiio.get_or_insert_default()
    }

    /// Did this process do anything to the file?
    fn touched(&self) -> bool {
        self.read.ops + self.write.ops > 0
            || !self.meta.is_empty()
            || self.meta_time > 0.0
            || self.close_end > 0.0
            || self.mpiio.is_some()
    }

    fn record(&self, path: &str) -> FileRecord {
        let mut counters: BTreeMap<String, u64> = [
            "POSIX_OPENS",
            "POSIX_STATS",
            "POSIX_SEEKS",
            "POSIX_FSYNCS",
            "POSIX_RENAMES",
            "POSIX_UNLINKS",
            "POSIX_MKDIRS",
            "POSIX_READDIRS",
        ]
        .iter()
        .map(|&name| (name.to_string(), self.meta.get(name).copied().unwrap_or(0)))
        .collect();
        for (name, d) in [("READ", &self.read), ("WRITE", &self.write)] {
            let plural = if name == "READ" { "READS" } else { "WRITES" };
            let past = if name == "READ" { "READ" } else { "WRITTEN" };
            counters.insert(format!("POSIX_{plural}"), d.ops);
            counters.insert(format!("POSIX_BYTES_{past}"), d.bytes);
            counters.insert(format!("POSIX_MAX_BYTE_{past}"), d.max_byte.unwrap_or(0));
            counters.insert(format!("POSIX_CONSEC_{plural}"), d.consecutive);
            counters.insert(format!("POSIX_SEQ_{plural}"), d.sequential);
            for (count, (_, bucket)) in d.sizes.iter().zip(SIZE_BUCKETS) {
                counters.insert(format!("POSIX_SIZE_{name}_{bucket}"), *count);
            }
        }
        counters.insert("POSIX_RW_SWITCHES".into(), self.rw_switches);
        counters.insert("POSIX_FILE_NOT_ALIGNED".into(), self.not_aligned);
        counters.insert("POSIX_FILE_ALIGNMENT".into(), self.stripe_size);
        let mut fcounters = BTreeMap::from([
            ("POSIX_F_OPEN_START_TIMESTAMP", self.open_start.unwrap_or(0.0)),
            ("POSIX_F_READ_START_TIMESTAMP", self.read.start.unwrap_or(0.0)),
            ("POSIX_F_READ_END_TIMESTAMP", self.read.end),
            ("POSIX_F_WRITE_START_TIMESTAMP", self.write.start.unwrap_or(0.0)),
            ("POSIX_F_WRITE_END_TIMESTAMP", self.write.end),
            ("POSIX_F_CLOSE_END_TIMESTAMP", self.close_end),
            ("POSIX_F_READ_TIME", self.read.time),
            ("POSIX_F_WRITE_TIME", self.write.time),
            ("POSIX_F_META_TIME", self.meta_time),
        ]);
        if let Some(mpiio) = &self.mpiio {
            let (more, fmore) = mpiio.named();
            counters.extend(more);
            fcounters.extend(fmore);
        }
        FileRecord {
            path: path.to_string(),
            stripe_count: self.stripe_count,
            stripe_size: self.stripe_size,
            counters,
            fcounters,
        }
    }
}

#[derive(Serialize)]
struct FileRecord {
    path: String,
    stripe_count: u32,
    stripe_size: u64,
    counters: BTreeMap<String, u64>,
    fcounters: BTreeMap<&'static str, f64>,
}

#[derive(Serialize)]
struct ProcessRecord<'a> {
    schema: &'static str,
    job_id: &'a str,
    exe: String,
    argv0: String,
    host: String,
    pid: u32,
    rank: i64,
    nprocs: i64,
    job_start: f64,
    start: f64,
    end: f64,
    files: Vec<FileRecord>,
}

/// This process's profile.
pub struct Profile {
    /// `None` when profiling is off (`SURGE_PROFILE=off`).
    output: Option<PathBuf>,
    job_label: String,
    /// Unix time the job started (`SURGE_JOB_START`, else this process's start).
    job_start: f64,
    clock: Instant,
    /// Job-relative time of `clock`.
    clock_at: f64,
    files: Mutex<BTreeMap<String, Arc<Mutex<FileCounters>>>>,
    /// The process these counters belong to. A vfork child shares the
    /// parent's memory (and no fork handler runs): it must not report them.
    owner: std::sync::atomic::AtomicU32,
    /// The lines this process already put in the writers journal.
    journal_noted: Mutex<std::collections::BTreeSet<String>>,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Profile {
    pub fn from_env(job_label: &str) -> Profile {
        let now = unix_now();
        let job_start = std::env::var("SURGE_JOB_START").ok().and_then(|v| v.parse().ok()).unwrap_or(now);
        let output = match std::env::var("SURGE_PROFILE") {
            Ok(v) if v == "off" || v == "0" => None,
            Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => Some(default_output(job_label)),
        };
        Profile {
            output,
            job_label: job_label.to_string(),
            job_start,
            clock: Instant::now(),
            clock_at: now - job_start,
            files: Mutex::new(BTreeMap::new()),
            journal_noted: Mutex::new(Default::default()),
            owner: std::sync::atomic::AtomicU32::new(surge_client::process_id()),
        }
    }

    /// Notes, once per file and process, "pid path" in `<profile>.writers`
    /// when a file is opened for writing: a writer without a profile record
    /// at the end of the job did not exit cleanly, and `surge run` names
    /// its files as possibly incomplete.
    pub fn note_writer(&self, mount: &str, path: &str) {
        self.note(format!("{} {mount}{path}\n", surge_client::process_id()));
    }

    /// Notes, once per file and process, "stream pid path" in
    /// `<profile>.writers` when a placeholder sits on a standard stream
    /// (descriptor 0-2): stdio reads and writes there reach the kernel,
    /// where the placeholder fails them, so `surge run` reports the file as
    /// suspect.
    pub fn note_stream(&self, mount: &str, path: &str) {
        self.note(format!("{STREAM_NOTE} {} {mount}{path}\n", surge_client::process_id()));
    }

    fn note(&self, line: String) {
        let Some(output) = &self.output else { return };
        if !self.journal_noted.lock().insert(line.clone()) {
            return;
        }
        let journal = surge_cluster::writers_journal(output);
        let noted = append_line(&journal, line.as_bytes());
        if let Err(e) = noted {
            eprintln!("surge: could not note a file in {}: {e}", journal.display());
        }
    }

    /// Held across fork (with the descriptor table), so the child never
    /// inherits the map locked by another thread.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.files.lock());
    }

    /// # Safety
    /// Only after [`Profile::lock_for_fork`], once, in the parent or the child.
    pub unsafe fn unlock_after_fork(&self) {
        self.files.force_unlock();
    }

    /// In a forked child: the counters so far are the parent's, which it
    /// reports itself; the child starts from zero (in place, as its
    /// inherited descriptors share these counters).
    pub fn restart_in_child(&self) {
        for counters in self.files.lock().values() {
            let mut c = counters.lock();
            let layout = (c.stripe_count, c.stripe_size);
            *c = FileCounters::default();
            (c.stripe_count, c.stripe_size) = layout;
        }
        self.journal_noted.lock().clear();
        // Asked of the kernel: the client library's fork handler, which
        // forgets the id it keeps, may run after this one.
        self.owner.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Seconds since the job started.
    pub fn now(&self) -> f64 {
        self.clock_at + self.clock.elapsed().as_secs_f64()
    }

    /// A call that took `seconds` and ended now.
    pub fn span_ending_now(&self, seconds: f64) -> Span {
        let end = self.now();
        Span { start: (end - seconds.max(0.0)).max(0.0), end }
    }

    /// The counters of Surge file `path` (one set per path per process).
    pub fn file(&self, path: &str) -> Arc<Mutex<FileCounters>> {
        self.files.lock().entry(path.to_string()).or_default().clone()
    }

    /// Runs `op`, then records it on `path` with `record(counters, result, span)`.
    pub fn timed<T>(
        &self,
        counters: &Mutex<FileCounters>,
        op: impl FnOnce() -> T,
        record: impl FnOnce(&mut FileCounters, &T, Span),
    ) -> T {
        let start = self.now();
        let result = op();
        let span = Span { start, end: self.now() };
        record(&mut counters.lock(), &result, span);
        result
    }

    /// Appends this process's record to the job's profile (one write of one
    /// line, so the processes of a job never interleave). Once per process
    /// image: the files are taken out.
    pub fn write_out(&self, mount: &str) -> std::io::Result<Option<PathBuf>> {
        let Some(output) = &self.output else { return Ok(None) };
        if self.owner.load(std::sync::atomic::Ordering::Relaxed) != surge_client::process_id() {
            return Ok(None);
        }
        let files = std::mem::take(&mut *self.files.lock());
        let files: BTreeMap<_, _> = files.into_iter().filter(|(_, c)| c.lock().touched()).collect();
        if files.is_empty() {
            return Ok(None);
        }
        let (rank, nprocs) = surge_cluster::launcher_rank().map_or((-1, -1), |(r, n)| (r as i64, n as i64));
        let record = ProcessRecord {
            schema: SCHEMA,
            job_id: &self.job_label,
            exe: std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
            argv0: std::env::args().next().unwrap_or_default(),
            host: surge_cluster::hostname(),
            pid: surge_client::process_id(),
            rank,
            nprocs,
            job_start: self.job_start,
            start: self.clock_at,
            end: self.now(),
            files: files.iter().map(|(path, c)| c.lock().record(&format!("{mount}{path}"))).collect(),
        };
        let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        append_line(output, &line)?;
        Ok(Some(output.clone()))
    }
}

/// Appends `line` to a journal of the job (its directory made when
/// missing) with raw system calls: the journals are Surge's, written from
/// inside the application, and no profiler preloaded with it may count
/// them as its files.
fn append_line(journal: &Path, line: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = journal.parent() {
        surge_cluster::raw::create_dir_all(dir, 0o777)?;
    }
    surge_cluster::raw::append(journal, line, 0o666)
}

/// `~/.surge/profiles/<job>.jsonl`.
pub fn default_output(job_label: &str) -> PathBuf {
    let safe: String =
        job_label.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".surge").join("profiles").join(format!("{safe}.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: f64, end: f64) -> Span {
        Span { start, end }
    }

    #[test]
    fn counters_follow_darshans_definitions() {
        let mut c = FileCounters::default();
        c.meta(Meta::Open, span(0.5, 0.6));
        c.write(0, 100, span(1.0, 1.5));
        c.write(100, 1 << 20, span(1.5, 2.0)); // consecutive and sequential
        c.write(4 << 20, 2 << 20, span(2.0, 2.5)); // sequential only
        c.write(0, 10, span(3.0, 3.1)); // backwards
        c.read(0, 64, span(4.0, 4.25));
        c.meta(Meta::Close, span(5.0, 5.5));
        let r = c.record("/surge/f");
        let n = |k: &str| r.counters[k];
        assert_eq!((n("POSIX_WRITES"), n("POSIX_BYTES_WRITTEN")), (4, 100 + (1 << 20) + (2 << 20) + 10));
        assert_eq!((n("POSIX_CONSEC_WRITES"), n("POSIX_SEQ_WRITES")), (1, 2));
        assert_eq!(n("POSIX_MAX_BYTE_WRITTEN"), (6 << 20) - 1);
        assert_eq!(n("POSIX_SIZE_WRITE_0_100"), 2);
        assert_eq!(n("POSIX_SIZE_WRITE_100K_1M"), 1);
        assert_eq!(n("POSIX_SIZE_WRITE_1M_4M"), 1);
        assert_eq!((n("POSIX_READS"), n("POSIX_SIZE_READ_0_100"), n("POSIX_RW_SWITCHES")), (1, 1, 1));
        assert_eq!(n("POSIX_OPENS"), 1);
        let f = |k: &str| r.fcounters[k];
        assert_eq!(f("POSIX_F_OPEN_START_TIMESTAMP"), 0.5);
        assert_eq!((f("POSIX_F_WRITE_START_TIMESTAMP"), f("POSIX_F_WRITE_END_TIMESTAMP")), (1.0, 3.1));
        assert!((f("POSIX_F_WRITE_TIME") - 1.6).abs() < 1e-9);
        assert!((f("POSIX_F_META_TIME") - 0.6).abs() < 1e-9);
        assert_eq!(f("POSIX_F_CLOSE_END_TIMESTAMP"), 5.5);
        assert_eq!(r.counters.len(), 8 + 2 * 15 + 3);
    }

    #[test]
    fn a_syncs_time_counts_as_write_time_as_in_darshan() {
        let mut c = FileCounters::default();
        c.write(0, 4096, span(0.0, 0.25));
        c.meta(Meta::Fsync, span(0.25, 1.0));
        c.meta(Meta::Stat, span(1.0, 1.5));
        let r = c.record("/surge/f");
        assert_eq!(r.counters["POSIX_FSYNCS"], 1);
        assert!((r.fcounters["POSIX_F_WRITE_TIME"] - 1.0).abs() < 1e-9);
        assert!((r.fcounters["POSIX_F_META_TIME"] - 0.5).abs() < 1e-9);
    }

    #[test]
    fn accesses_off_a_stripe_boundary_are_counted_as_not_aligned() {
        let mut c = FileCounters { stripe_size: 1 << 20, ..Default::default() };
        c.write(0, 1 << 20, span(0.0, 0.1));
        c.write((1 << 20) + 1, 1 << 20, span(0.1, 0.2)); // one byte past the boundary
        c.read(2 << 20, 4096, span(0.2, 0.3));
        c.read(4096, 4096, span(0.3, 0.4)); // inside a stripe
        let r = c.record("/surge/f");
        assert_eq!((r.counters["POSIX_FILE_NOT_ALIGNED"], r.counters["POSIX_FILE_ALIGNMENT"]), (2, 1 << 20));
        let unstriped = FileCounters::default().record("/surge/d");
        assert_eq!(unstriped.counters["POSIX_FILE_NOT_ALIGNED"], 0); // a directory has no stripes
    }

    #[test]
    fn a_file_on_a_standard_stream_is_noted_once_beside_its_writer_note() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("job.jsonl");
        let p = Profile { output: Some(out.clone()), ..Profile::from_env("job") };
        p.note_stream("/surge", "/log file");
        p.note_writer("/surge", "/log file");
        p.note_stream("/surge", "/log file");
        let journal = std::fs::read_to_string(surge_cluster::writers_journal(&out)).unwrap();
        let pid = std::process::id();
        assert_eq!(journal, format!("stream {pid} /surge/log file\n{pid} /surge/log file\n"));
    }

    #[test]
    fn buckets_match_darshan_bounds() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(100), 0);
        assert_eq!(bucket(101), 1);
        assert_eq!(bucket(1 << 20), 4);
        assert_eq!(bucket((1 << 20) + 1), 5);
        assert_eq!(bucket(u64::MAX), 9);
    }

    #[test]
    fn a_profile_is_one_json_line_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p/job.jsonl");
        let p = Profile { output: Some(out.clone()), ..Profile::from_env("job") };
        p.note_writer("/surge", "/a");
        p.note_writer("/surge", "/a");
        let journal = std::fs::read_to_string(surge_cluster::writers_journal(&out)).unwrap();
        assert_eq!(journal, format!("{} /surge/a\n", std::process::id()), "noted once");
        assert_eq!(p.write_out("/surge").unwrap(), None, "nothing touched, nothing written");
        p.timed(&p.file("/a"), || 7, |c, _, s| c.write(0, 7, s));
        p.write_out("/surge").unwrap();
        p.timed(&p.file("/b"), || 1, |c, _, s| c.read(0, 1, s));
        p.write_out("/surge").unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["schema"], SCHEMA);
        assert_eq!(lines[0]["files"][0]["path"], "/surge/a");
        assert_eq!(lines[0]["files"][0]["counters"]["POSIX_BYTES_WRITTEN"], 7);
        assert_eq!(lines[1]["files"][0]["path"], "/surge/b");
        assert_eq!(lines[1]["pid"], std::process::id());
    }
}
