//! MPI-IO counters: what a program asked of MPI-IO on a Surge file, beside
//! the POSIX calls its MPI library made for it (docs/profile.md).
//!
//! The shim (`shim/mpiio.c`) wraps the `MPI_File_*` entry points, calls the
//! MPI library's own, and reports each call by its `MPI_File` handle;
//! `mpi_files.rs` finds the handle's file and adds the call to its
//! [`Counters`], which live in the file's profile record (`FileCounters`):
//! a file has its POSIX and its MPI-IO counters in one record, as in a
//! Darshan log. Names and meanings follow Darshan's MPI-IO module.

use crate::darshan::{bucket, Span, SIZE_BUCKETS};
use std::collections::BTreeMap;

/// A call the shim reports (its codes are `SURGE_MPIIO_*` in shim/handler.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A read or a write, of `kind`.
    Access(Kind, Direction),
    Sync,
    View,
    Hints,
}

/// How a read or write was issued (Darshan's INDEP_, COLL_, SPLIT_, NB_).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Independent,
    Collective,
    Split,
    NonBlocking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

impl Call {
    /// The shim's code for a call (shim/handler.h), or None.
    pub fn from_code(code: i32) -> Option<Call> {
        const KINDS: [Kind; 4] = [Kind::Independent, Kind::Collective, Kind::Split, Kind::NonBlocking];
        match code {
            0..=7 => {
                let direction = if code % 2 == 0 { Direction::Read } else { Direction::Write };
                Some(Call::Access(KINDS[code as usize / 2], direction))
            }
            8 => Some(Call::Sync),
            9 => Some(Call::View),
            10 => Some(Call::Hints),
            _ => None,
        }
    }
}

/// One direction's MPI-IO counters.
#[derive(Debug, Default, Clone)]
struct Accesses {
    /// Calls by [`Kind`], in its order.
    calls: [u64; 4],
    bytes: u64,
    sizes: [u64; 10],
    time: f64,
    start: Option<f64>,
    end: f64,
    /// The slowest call's time and size (Darshan's MPIIO_F_MAX_*_TIME and MPIIO_MAX_*_TIME_SIZE).
    max_time: f64,
    max_time_size: u64,
}

/// A file's MPI-IO counters in this process.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    independent_opens: u64,
    collective_opens: u64,
    mode: u64,
    read: Accesses,
    write: Accesses,
    last: Option<Direction>,
    rw_switches: u64,
    syncs: u64,
    views: u64,
    hints: u64,
    meta_time: f64,
    open_start: Option<f64>,
    open_end: f64,
    close_start: f64,
    close_end: f64,
}

impl Counters {
    /// MPI_File_open: collective over a communicator of more than one
    /// process (Darshan counts an open on a communicator of one as
    /// independent), with access mode `mode`.
    pub fn open(&mut self, collective: bool, mode: u64, span: Span) {
        *if collective { &mut self.collective_opens } else { &mut self.independent_opens } += 1;
        self.mode = mode;
        self.open_start.get_or_insert(span.start);
        self.open_end = self.open_end.max(span.end);
        self.meta_time += span.end - span.start;
    }

    pub fn close(&mut self, span: Span) {
        self.close_start = self.close_start.max(span.start);
        self.close_end = self.close_end.max(span.end);
        self.meta_time += span.end - span.start;
    }

    /// A call of `bytes` (reads and writes: the count times the datatype's size).
    pub fn record(&mut self, call: Call, bytes: u64, span: Span) {
        let took = span.end - span.start;
        match call {
            Call::Access(kind, direction) => {
                if self.last.is_some_and(|last| last != direction) {
                    self.rw_switches += 1;
                }
                self.last = Some(direction);
                let a = if direction == Direction::Read { &mut self.read } else { &mut self.write };
                a.calls[kind as usize] += 1;
                a.bytes += bytes;
                a.sizes[bucket(bytes)] += 1;
                a.time += took;
                a.start.get_or_insert(span.start);
                a.end = a.end.max(span.end);
                if took > a.max_time {
                    (a.max_time, a.max_time_size) = (took, bytes);
                }
            }
            // As in Darshan, a sync's time is write time (it waits for what was written).
            Call::Sync => {
                self.syncs += 1;
                self.write.time += took;
            }
            Call::View => {
                self.views += 1;
                self.meta_time += took;
            }
            Call::Hints => {
                self.hints += 1;
                self.meta_time += took;
            }
        }
    }

    /// The counters and fcounters, with Darshan's names.
    pub fn named(&self) -> (BTreeMap<String, u64>, BTreeMap<&'static str, f64>) {
        let mut counters = BTreeMap::from([
            ("MPIIO_INDEP_OPENS".to_string(), self.independent_opens),
            ("MPIIO_COLL_OPENS".to_string(), self.collective_opens),
            ("MPIIO_SYNCS".to_string(), self.syncs),
            ("MPIIO_HINTS".to_string(), self.hints),
            ("MPIIO_VIEWS".to_string(), self.views),
            ("MPIIO_MODE".to_string(), self.mode),
            ("MPIIO_RW_SWITCHES".to_string(), self.rw_switches),
        ]);
        for (name, past, a) in [("READ", "READ", &self.read), ("WRITE", "WRITTEN", &self.write)] {
            for (kind, calls) in ["INDEP", "COLL", "SPLIT", "NB"].iter().zip(a.calls) {
                counters.insert(format!("MPIIO_{kind}_{name}S"), calls);
            }
            counters.insert(format!("MPIIO_BYTES_{past}"), a.bytes);
            counters.insert(format!("MPIIO_MAX_{name}_TIME_SIZE"), a.max_time_size);
            for (count, (_, bucket)) in a.sizes.iter().zip(SIZE_BUCKETS) {
                counters.insert(format!("MPIIO_SIZE_{name}_AGG_{bucket}"), *count);
            }
        }
        let fcounters = BTreeMap::from([
            ("MPIIO_F_OPEN_START_TIMESTAMP", self.open_start.unwrap_or(0.0)),
            ("MPIIO_F_OPEN_END_TIMESTAMP", self.open_end),
            ("MPIIO_F_READ_START_TIMESTAMP", self.read.start.unwrap_or(0.0)),
            ("MPIIO_F_READ_END_TIMESTAMP", self.read.end),
            ("MPIIO_F_WRITE_START_TIMESTAMP", self.write.start.unwrap_or(0.0)),
            ("MPIIO_F_WRITE_END_TIMESTAMP", self.write.end),
            ("MPIIO_F_CLOSE_START_TIMESTAMP", self.close_start),
            ("MPIIO_F_CLOSE_END_TIMESTAMP", self.close_end),
            ("MPIIO_F_READ_TIME", self.read.time),
            ("MPIIO_F_WRITE_TIME", self.write.time),
            ("MPIIO_F_META_TIME", self.meta_time),
            ("MPIIO_F_MAX_READ_TIME", self.read.max_time),
            ("MPIIO_F_MAX_WRITE_TIME", self.write.max_time),
        ]);
        (counters, fcounters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: f64, end: f64) -> Span {
        Span { start, end }
    }

    #[test]
    fn calls_are_counted_by_kind_with_darshans_names() {
        let mut c = Counters::default();
        c.open(true, 37, span(0.0, 0.5));
        c.record(Call::View, 0, span(0.5, 0.75));
        c.record(Call::Access(Kind::Collective, Direction::Write), 1 << 20, span(1.0, 2.0));
        c.record(Call::Access(Kind::Independent, Direction::Write), 64 << 10, span(2.0, 2.5));
        c.record(Call::Access(Kind::NonBlocking, Direction::Read), 100, span(3.0, 3.25));
        c.record(Call::Access(Kind::Split, Direction::Read), 4096, span(3.25, 3.5));
        c.record(Call::Sync, 0, span(4.0, 5.0));
        c.close(span(6.0, 6.5));
        let (n, f) = c.named();
        assert_eq!((n["MPIIO_COLL_OPENS"], n["MPIIO_INDEP_OPENS"], n["MPIIO_MODE"]), (1, 0, 37));
        assert_eq!((n["MPIIO_COLL_WRITES"], n["MPIIO_INDEP_WRITES"]), (1, 1));
        assert_eq!((n["MPIIO_NB_READS"], n["MPIIO_SPLIT_READS"], n["MPIIO_COLL_READS"]), (1, 1, 0));
        assert_eq!((n["MPIIO_BYTES_WRITTEN"], n["MPIIO_BYTES_READ"]), ((1 << 20) + (64 << 10), 4196));
        assert_eq!((n["MPIIO_SIZE_WRITE_AGG_100K_1M"], n["MPIIO_SIZE_WRITE_AGG_10K_100K"]), (1, 1));
        assert_eq!((n["MPIIO_SIZE_READ_AGG_0_100"], n["MPIIO_SIZE_READ_AGG_1K_10K"]), (1, 1));
        assert_eq!((n["MPIIO_SYNCS"], n["MPIIO_VIEWS"], n["MPIIO_RW_SWITCHES"]), (1, 1, 1));
        assert_eq!(n["MPIIO_MAX_WRITE_TIME_SIZE"], 1 << 20);
        assert!((f["MPIIO_F_WRITE_TIME"] - 2.5).abs() < 1e-9, "a sync's time is write time");
        assert!((f["MPIIO_F_META_TIME"] - 1.25).abs() < 1e-9);
        assert_eq!((f["MPIIO_F_WRITE_START_TIMESTAMP"], f["MPIIO_F_WRITE_END_TIMESTAMP"]), (1.0, 2.5));
        assert_eq!((f["MPIIO_F_OPEN_START_TIMESTAMP"], f["MPIIO_F_CLOSE_END_TIMESTAMP"]), (0.0, 6.5));
    }

    #[test]
    fn the_shims_call_codes_map_to_calls_and_unknown_ones_to_none() {
        assert_eq!(Call::from_code(0), Some(Call::Access(Kind::Independent, Direction::Read)));
        assert_eq!(Call::from_code(3), Some(Call::Access(Kind::Collective, Direction::Write)));
        assert_eq!(Call::from_code(7), Some(Call::Access(Kind::NonBlocking, Direction::Write)));
        assert_eq!(Call::from_code(8), Some(Call::Sync));
        assert_eq!(Call::from_code(10), Some(Call::Hints));
        assert_eq!(Call::from_code(11), None);
        assert_eq!(Call::from_code(-1), None);
    }
}
