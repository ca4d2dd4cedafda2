//! The daemon's metrics for Prometheus (docs/operations.md lists them).
//!
//! Two sources, nothing counted twice: what the daemon's `Status` already
//! reports (per-job requests, bytes and queue depth from the scheduling
//! point, the store meter, buffer space, stage-out counts) is read when a
//! scrape comes, and what nothing else keeps, each request's latency and
//! error, is kept here in [`RequestMetrics`]: plain atomic counters indexed
//! by operation code and errno, so the request path takes no lock for them.
//! [`registry`] puts both behind the `prometheus-client` registry the
//! endpoint (`exporter`) encodes. On daemon 0 with a drain policy on, the
//! data manager's report (`DrainStatus`) adds its figures (`surge_drain_*`).

use crate::failure::Failure;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use surge_proto::drain::DrainReport;
use surge_proto::msg::{DaemonStatus, JobOpStatus, JobStatus};
use surge_proto::Op;

/// Upper bounds of the latency buckets, in nanoseconds: 50 µs to 10 s, a
/// 1-2.5-5 series (a cached read to a stage-out of a large object).
const LATENCY_BOUNDS_NS: [u64; 18] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    u64::MAX,
];

/// Slots per operation: one per code up to the highest, and one more for
/// codes that name no operation (refused with ENOSYS).
const OP_SLOTS: usize = crate::sched::OP_SLOTS + 1;
const UNKNOWN_OP: usize = OP_SLOTS - 1;
/// Linux errnos are below this; a larger one is counted as "other".
const ERRNO_SLOTS: usize = 134;

fn op_slot(code: u8) -> usize {
    Op::from_u8(code).map_or(UNKNOWN_OP, |op| op as usize)
}

/// One operation's request latencies: a count per bucket and their sum.
#[derive(Default)]
struct Latencies {
    buckets: [AtomicU64; LATENCY_BOUNDS_NS.len()],
    sum_ns: AtomicU64,
}

/// What the daemon counts per request beyond its status: latency by
/// operation and failures by operation and errno.
pub struct RequestMetrics {
    latency: Vec<Latencies>,
    /// `OP_SLOTS` rows of `ERRNO_SLOTS + 1` (the last: errnos beyond).
    errors: Vec<AtomicU64>,
}

impl Default for RequestMetrics {
    fn default() -> RequestMetrics {
        RequestMetrics {
            latency: (0..OP_SLOTS).map(|_| Latencies::default()).collect(),
            errors: (0..OP_SLOTS * (ERRNO_SLOTS + 1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl RequestMetrics {
    /// A request of operation `code` was answered `took` after its first
    /// byte arrived, with `errno` (0: success).
    pub fn answered(&self, code: u8, took: Duration, errno: i32) {
        let slot = op_slot(code);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let latency = &self.latency[slot];
        let bucket = LATENCY_BOUNDS_NS.iter().position(|&bound| ns <= bound).unwrap_or(LATENCY_BOUNDS_NS.len() - 1);
        latency.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        latency.sum_ns.fetch_add(ns, Ordering::Relaxed);
        if errno != 0 {
            let column = usize::try_from(errno).map_or(ERRNO_SLOTS, |e| e.min(ERRNO_SLOTS));
            self.errors[slot * (ERRNO_SLOTS + 1) + column].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each operation's slot with its label, unknown codes last.
    fn slots() -> impl Iterator<Item = (usize, String)> {
        Op::ALL.iter().map(|&op| (op as usize, op_label(op))).chain([(UNKNOWN_OP, "unknown".to_string())])
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let mut metric = encoder.encode_descriptor(
            "request_duration",
            "Time from a request's first byte to its reply sent, by operation",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (slot, op) in Self::slots() {
            let latency = &self.latency[slot];
            let counts: Vec<u64> = latency.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
            let count: u64 = counts.iter().sum();
            if count == 0 {
                continue;
            }
            let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_NS
                .iter()
                .zip(counts)
                .map(|(&bound, n)| (if bound == u64::MAX { f64::MAX } else { bound as f64 / 1e9 }, n))
                .collect();
            let sum = latency.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            metric.encode_family(&[("op", op.as_str())])?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        let mut metric = encoder.encode_descriptor(
            "request_errors",
            "Requests answered with an error, by operation and errno (Linux numbering)",
            None,
            MetricType::Counter,
        )?;
        for (slot, op) in Self::slots() {
            let row = &self.errors[slot * (ERRNO_SLOTS + 1)..(slot + 1) * (ERRNO_SLOTS + 1)];
            for (errno, count) in row.iter().enumerate() {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let errno = if errno == ERRNO_SLOTS { "other".to_string() } else { errno.to_string() };
                    let labels = [("op", op.as_str()), ("errno", errno.as_str())];
                    ConstCounter::new(count).encode(metric.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// An operation as a label: `Write` is "write", `ObjStage` "obj_stage".
pub fn op_label(op: Op) -> String {
    let mut label = String::new();
    for (i, c) in format!("{op:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    label
}

/// Gives the daemon's status when a scrape comes.
pub type StatusSource = Box<dyn Fn() -> Result<DaemonStatus, Failure> + Send + Sync>;

/// Gives the data manager's report when a scrape comes (daemon 0).
pub type DrainSource = Box<dyn Fn() -> Result<DrainReport, Failure> + Send + Sync>;

/// Encodes the metrics at each scrape.
struct DaemonCollector {
    index: u32,
    status: StatusSource,
    requests: Arc<RequestMetrics>,
    drain: Option<DrainSource>,
}

impl fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaemonCollector").field("index", &self.index).finish_non_exhaustive()
    }
}

/// One sample's value; its kind is the family's type.
enum Value {
    Counter(u64),
    /// A counter of (fractional) seconds.
    Seconds(f64),
    Gauge(i64),
}

impl Value {
    fn kind(&self) -> MetricType {
        match self {
            Value::Counter(_) | Value::Seconds(_) => MetricType::Counter,
            Value::Gauge(_) => MetricType::Gauge,
        }
    }

    fn encode(&self, metric: MetricEncoder<'_>) -> fmt::Result {
        match *self {
            Value::Counter(v) => ConstCounter::new(v).encode(metric),
            Value::Seconds(v) => ConstCounter::new(v).encode(metric),
            Value::Gauge(v) => ConstGauge::new(v).encode(metric),
        }
    }
}

fn gauge(v: u64) -> Value {
    Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX))
}

/// A sample's labels beyond the daemon's.
type Labels = Vec<(&'static str, String)>;

/// What a metric family is called and means.
struct Family<'a> {
    name: &'a str,
    help: &'a str,
    unit: Option<Unit>,
}

impl Family<'_> {
    /// Writes the family's samples (none: the family is left out).
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>, samples: Vec<(Labels, Value)>) -> fmt::Result {
        let Some((_, first)) = samples.first() else { return Ok(()) };
        let mut metric = encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), first.kind())?;
        for (labels, value) in &samples {
            value.encode(metric.encode_family(labels)?)?;
        }
        Ok(())
    }
}

const fn family(name: &'static str, help: &'static str, unit: Option<Unit>) -> Family<'static> {
    Family { name, help, unit }
}

/// The operations that move file data.
const DATA_OPS: [Op; 3] = [Op::Write, Op::Read, Op::PfsRead];

impl DaemonCollector {
    fn encode_status(&self, s: &DaemonStatus, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let job_op = |j: &JobOpStatus| -> Labels {
            vec![("job", j.job.to_string()), ("op", Op::from_u8(j.op).map_or_else(|| "unknown".into(), op_label))]
        };
        let moves_data = |j: &&JobOpStatus| DATA_OPS.iter().any(|&op| op as u8 == j.op);
        let per_job = |value: fn(&JobStatus) -> u64| -> Vec<(Labels, Value)> {
            s.jobs.iter().map(|j| (vec![("job", j.job.to_string())], gauge(value(j)))).collect()
        };
        let one = |value: Value| vec![(Labels::new(), value)];
        let (bytes, seconds) = (|| Some(Unit::Bytes), || Some(Unit::Seconds));
        let mut families = vec![
            (
                family("requests", "Requests served at the scheduling point, by job and operation", None),
                s.job_ops.iter().map(|j| (job_op(j), Value::Counter(j.requests))).collect(),
            ),
            (
                family("io", "Bytes of file data the served requests moved (written, or read and sent)", bytes()),
                s.job_ops.iter().filter(moves_data).map(|j| (job_op(j), Value::Counter(j.bytes))).collect(),
            ),
            (
                family(
                    "requests_waiting",
                    "Requests waiting for their turn at the scheduling point (queue depth)",
                    None,
                ),
                per_job(|j| j.waiting),
            ),
            (
                family("requests_in_service", "Requests admitted whose reply is not sent yet", None),
                per_job(|j| j.in_service),
            ),
            (family("buffer_used", "Bytes of data objects in the buffer directory", bytes()), one(gauge(s.bytes_used))),
            (family("buffer_capacity", "Most bytes the objects may take", bytes()), one(gauge(s.capacity))),
            (family("buffer_device_free", "Free bytes on the buffer device", bytes()), one(gauge(s.device_free))),
            (family("buffer_objects", "Data objects in the buffer directory", None), one(gauge(s.objects))),
            (family("store", "Data bytes the object store moved", bytes()), one(Value::Counter(s.store_bytes))),
            (
                family("store_busy", "Time the object store had a call in progress", seconds()),
                one(Value::Seconds(s.store_busy_ns as f64 / 1e9)),
            ),
            (
                family("stage_out", "Object bytes copied to the PFS and verified (stage-out)", bytes()),
                one(Value::Counter(s.staged_bytes)),
            ),
            (family("stage_out_objects", "Stage-out copies made", None), one(Value::Counter(s.staged_objects))),
            (family("read_cache_hits", "Reads the read cache served", None), one(Value::Counter(s.cache_hits))),
            (
                family("read_cache_misses", "Reads that missed the read cache (every read without one)", None),
                one(Value::Counter(s.cache_misses)),
            ),
            (family("connections", "Client connections open", None), one(gauge(s.connections.into()))),
            (family("uptime", "Time since the daemon started", seconds()), one(gauge(s.uptime_s))),
        ];
        if s.is_metadata {
            families.extend([
                (
                    family("stage_out_pending_files", "Files in the buffer only, not yet staged out", None),
                    one(gauge(s.unstaged_files)),
                ),
                (family("namespace_files", "Files in the namespace", None), one(gauge(s.files))),
                (family("namespace_dirs", "Directories in the namespace", None), one(gauge(s.dirs))),
                (
                    family("removed_files_pending", "Removed files whose objects are still to be deleted", None),
                    one(gauge(s.doomed)),
                ),
            ]);
        }
        for (family, samples) in families {
            family.encode(encoder, samples)?;
        }
        Ok(())
    }
}

/// The data manager's figures: what each job has in the buffer and had
/// demoted, the rates and thresholds in force, the period's pattern.
fn encode_drain(r: &DrainReport, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let per_job = |value: fn(&surge_proto::drain::AppDrain) -> Value| -> Vec<(Labels, Value)> {
        r.apps.iter().map(|a| (vec![("job", a.job.to_string())], value(a))).collect()
    };
    let one = |value: Value| vec![(Labels::new(), value)];
    let bytes = || Some(Unit::Bytes);
    let thresholds = [("start", r.threshold_start), ("full", r.threshold_full)]
        .into_iter()
        .filter(|(_, at)| *at != u64::MAX)
        .map(|(edge, at)| (vec![("edge", edge.to_string())], gauge(at)))
        .collect();
    let pattern =
        if r.pattern.is_empty() { Vec::new() } else { vec![(vec![("pattern", r.pattern.clone())], gauge(1))] };
    let families = [
        (
            family("drain_pending", "Bytes of a job's checkpoints in the buffer not demoted yet", bytes()),
            per_job(|a| gauge(a.pending_bytes)),
        ),
        (
            family("drain_pending_files", "A job's checkpoint files in the buffer not demoted yet", None),
            per_job(|a| gauge(a.pending_files)),
        ),
        (
            family("drain_demoted", "Bytes of a job's checkpoints demoted to the PFS", bytes()),
            per_job(|a| Value::Counter(a.demoted_bytes)),
        ),
        (family("drain_mtbf", "A job's mean time between failures", Some(Unit::Seconds)), per_job(|a| gauge(a.mtbf_s))),
        (
            family("drain_rate", "Rates in force per daemon, bytes/s: checkpoint writes and demotion copies", None),
            vec![
                (vec![("kind", "checkpoint".to_string())], gauge(r.checkpoint_bps)),
                (vec![("kind", "demotion".to_string())], gauge(r.demote_bps)),
            ],
        ),
        (family("drain_threshold", "DWSF at which demotion starts and reaches full speed", bytes()), thresholds),
        (family("drain_pattern", "The period's demotion pattern (1 for the one in force)", None), pattern),
        (family("drain_dwsf", "Checkpoint bytes written this period", bytes()), one(gauge(r.dwsf))),
        (family("drain_dwpp", "Checkpoint bytes written in the last period", bytes()), one(gauge(r.dwpp_last))),
        (
            family("drain_evicted", "Bytes of demoted files evicted from the buffer", bytes()),
            one(Value::Counter(r.evicted_bytes)),
        ),
        (
            family("drain_failed_demotions", "Demotions that failed (their files stay and are retried)", None),
            one(Value::Counter(r.failed_demotions)),
        ),
        (
            family("drain_direct", "Bytes written to checkpoints placed on the PFS directly", bytes()),
            one(Value::Counter(r.direct_bytes)),
        ),
        (
            family("drain_direct_files", "Checkpoints placed on the PFS directly", None),
            one(Value::Counter(r.direct_files)),
        ),
        (family("drain_files_held", "Buffer files clients hold open (not evicted)", None), one(gauge(r.files_held))),
        (
            family(
                "drain_trim_state",
                "The trimmers' state (1 for the one in force: on, off, unsupported (why))",
                None,
            ),
            vec![(vec![("state", r.trim.state.clone())], gauge(1))],
        ),
        (
            family("drain_trim_rounds", "TRIM passes over the buffers' file systems", None),
            one(Value::Counter(r.trim.trims)),
        ),
        (
            family("drain_trim", "Bytes the buffers' file systems discarded on TRIM", bytes()),
            one(Value::Counter(r.trim.bytes)),
        ),
        (
            family(
                "drain_trim_last",
                "When the last TRIM pass ended, since the Unix epoch (0: never)",
                Some(Unit::Seconds),
            ),
            one(gauge(r.trim.last_unix_s)),
        ),
    ];
    for (family, samples) in families {
        family.encode(encoder, samples)?;
    }
    if r.replicas.dir.is_empty() {
        return Ok(());
    }
    let replicas = &r.replicas;
    let families = [
        (
            family("drain_replicated", "Bytes of demoted files replicated and verified", bytes()),
            one(Value::Counter(replicas.bytes)),
        ),
        (
            family("drain_replicated_files", "Demoted files replicated and verified", None),
            one(Value::Counter(replicas.files)),
        ),
        (
            family("drain_replication_pending_files", "Demoted files listed in R-order, waiting for a replica", None),
            one(gauge(replicas.pending)),
        ),
        (
            family("drain_replication_failures", "Replications that failed (retried) or found no PFS copy", None),
            one(Value::Counter(replicas.failures)),
        ),
        (
            family("drain_replication_rate", "Replication bytes/s: achieved so far, and the cap (0: none)", None),
            vec![
                (vec![("kind", "achieved".to_string())], gauge(replicas.rate_bps)),
                (vec![("kind", "limit".to_string())], gauge(replicas.rate_limit_bps)),
            ],
        ),
    ];
    for (family, samples) in families {
        family.encode(encoder, samples)?;
    }
    Ok(())
}

impl Collector for DaemonCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        match (self.status)() {
            Ok(status) => self.encode_status(&status, &mut encoder)?,
            // The scrape still gets the request metrics; the log says why the rest is missing.
            Err(failure) => {
                crate::logging::log!(Error, self.index, "metrics: cannot read the daemon's status: {failure}")
            }
        }
        match self.drain.as_ref().map(|drain| drain()) {
            Some(Ok(report)) if report.policy != "off" => encode_drain(&report, &mut encoder)?,
            Some(Err(failure)) => {
                crate::logging::log!(Error, self.index, "metrics: cannot read the drain report: {failure}")
            }
            _ => {}
        }
        self.requests.encode(&mut encoder)
    }
}

/// The registry a daemon's endpoint serves: every metric named `surge_...`
/// and labelled with the daemon's index.
pub fn registry(
    index: u32,
    status: StatusSource,
    requests: Arc<RequestMetrics>,
    drain: Option<DrainSource>,
) -> Registry {
    let labels = [("daemon".into(), index.to_string().into())];
    let mut registry = Registry::with_prefix_and_labels("surge", labels.into_iter());
    registry.register_collector(Box::new(DaemonCollector { index, status, requests, drain }));
    registry
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn scrape(status: DaemonStatus, requests: Arc<RequestMetrics>) -> String {
        let registry = registry(3, Box::new(move || Ok(status.clone())), requests, None);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn operations_are_labelled_in_snake_case() {
        assert_eq!(op_label(Op::Write), "write");
        assert_eq!(op_label(Op::ObjStage), "obj_stage");
        assert_eq!(op_label(Op::PfsRead), "pfs_read");
    }

    #[test]
    fn latencies_fall_in_their_buckets_and_errors_count_by_errno() {
        let requests = RequestMetrics::default();
        requests.answered(Op::Read as u8, Duration::from_micros(40), 0);
        requests.answered(Op::Read as u8, Duration::from_millis(3), libc::EIO);
        requests.answered(Op::Read as u8, Duration::from_secs(60), 0);
        requests.answered(0x0f, Duration::from_micros(1), libc::ENOSYS); // no such operation
        requests.answered(Op::Stat as u8, Duration::from_micros(1), 4096);
        let read = &requests.latency[Op::Read as usize];
        let counts: Vec<u64> = read.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        assert_eq!((counts[0], counts[6], counts[LATENCY_BOUNDS_NS.len() - 1]), (1, 1, 1), "{counts:?}");
        assert_eq!(read.sum_ns.load(Ordering::Relaxed), 60_003_040_000);
        let text = scrape(DaemonStatus::default(), Arc::new(requests));
        for line in [
            r#"surge_request_errors_total{daemon="3",op="read",errno="5"} 1"#,
            r#"surge_request_errors_total{daemon="3",op="unknown",errno="38"} 1"#,
            r#"surge_request_errors_total{daemon="3",op="stat",errno="other"} 1"#,
            r#"surge_request_duration_seconds_count{daemon="3",op="read"} 3"#,
            r#"surge_request_duration_seconds_bucket{daemon="3",le="0.005",op="read"} 2"#,
            r#"surge_request_duration_seconds_bucket{daemon="3",le="+Inf",op="read"} 3"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"op="write""#), "operations without requests are left out:\n{text}");
    }

    #[test]
    fn the_status_shows_per_job_and_per_daemon_with_units_in_the_names() {
        let status = DaemonStatus {
            is_metadata: true,
            bytes_used: 1000,
            capacity: 5000,
            store_busy_ns: 1_500_000_000,
            jobs: vec![JobStatus { job: 42, waiting: 2, in_service: 1, requests: 4, bytes: 300 }],
            job_ops: vec![
                JobOpStatus { job: 42, op: Op::Write as u8, requests: 3, bytes: 300 },
                JobOpStatus { job: 42, op: Op::Open as u8, requests: 1, bytes: 0 },
            ],
            staged_bytes: 77,
            unstaged_files: 6,
            cache_hits: 8,
            cache_misses: 9,
            ..DaemonStatus::default()
        };
        let text = scrape(status, Arc::default());
        for line in [
            "# TYPE surge_requests counter",
            r#"surge_requests_total{daemon="3",job="42",op="write"} 3"#,
            r#"surge_requests_total{daemon="3",job="42",op="open"} 1"#,
            r#"surge_io_bytes_total{daemon="3",job="42",op="write"} 300"#,
            r#"surge_requests_waiting{daemon="3",job="42"} 2"#,
            r#"surge_requests_in_service{daemon="3",job="42"} 1"#,
            r#"surge_buffer_used_bytes{daemon="3"} 1000"#,
            r#"surge_buffer_capacity_bytes{daemon="3"} 5000"#,
            r#"surge_store_busy_seconds_total{daemon="3"} 1.5"#,
            r#"surge_stage_out_bytes_total{daemon="3"} 77"#,
            r#"surge_stage_out_pending_files{daemon="3"} 6"#,
            r#"surge_read_cache_hits_total{daemon="3"} 8"#,
            r#"surge_read_cache_misses_total{daemon="3"} 9"#,
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"surge_io_bytes_total{daemon="3",job="42",op="open"}"#), "{text}");
    }

    #[test]
    fn the_data_managers_figures_are_labelled_by_job_and_kind_and_off_shows_none() {
        let app = surge_proto::drain::AppDrain {
            job: 42,
            pending_files: 2,
            pending_bytes: 300,
            demoted_bytes: 700,
            mtbf_s: 3600,
            ..Default::default()
        };
        let report = DrainReport {
            policy: "bbos".into(),
            pattern: "partial".into(),
            threshold_start: 1000,
            threshold_full: u64::MAX,
            checkpoint_bps: 30,
            demote_bps: 16,
            dwsf: 5,
            evicted_bytes: 9,
            direct_files: 2,
            direct_bytes: 1234,
            apps: vec![app],
            replicas: surge_proto::drain::DrainReplicas {
                dir: "/replica".into(),
                files: 3,
                bytes: 4096,
                pending: 2,
                failures: 1,
                rate_bps: 500,
                ..Default::default()
            },
            trim: surge_proto::drain::DrainTrim {
                state: "on".into(),
                trims: 2,
                bytes: 1 << 20,
                last_unix_s: 1_800_000_000,
            },
            ..DrainReport::default()
        };
        let text_of = |report: DrainReport| {
            let drain: DrainSource = Box::new(move || Ok(report.clone()));
            let registry = registry(0, Box::new(|| Ok(DaemonStatus::default())), Arc::default(), Some(drain));
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            text
        };
        let text = text_of(report.clone());
        for line in [
            r#"surge_drain_pending_bytes{daemon="0",job="42"} 300"#,
            r#"surge_drain_pending_files{daemon="0",job="42"} 2"#,
            r#"surge_drain_demoted_bytes_total{daemon="0",job="42"} 700"#,
            r#"surge_drain_mtbf_seconds{daemon="0",job="42"} 3600"#,
            r#"surge_drain_rate{daemon="0",kind="checkpoint"} 30"#,
            r#"surge_drain_rate{daemon="0",kind="demotion"} 16"#,
            r#"surge_drain_threshold_bytes{daemon="0",edge="start"} 1000"#,
            r#"surge_drain_pattern{daemon="0",pattern="partial"} 1"#,
            r#"surge_drain_dwsf_bytes{daemon="0"} 5"#,
            r#"surge_drain_evicted_bytes_total{daemon="0"} 9"#,
            r#"surge_drain_direct_bytes_total{daemon="0"} 1234"#,
            r#"surge_drain_direct_files_total{daemon="0"} 2"#,
            r#"surge_drain_replicated_bytes_total{daemon="0"} 4096"#,
            r#"surge_drain_replicated_files_total{daemon="0"} 3"#,
            r#"surge_drain_replication_pending_files{daemon="0"} 2"#,
            r#"surge_drain_replication_failures_total{daemon="0"} 1"#,
            r#"surge_drain_replication_rate{daemon="0",kind="achieved"} 500"#,
            r#"surge_drain_replication_rate{daemon="0",kind="limit"} 0"#,
            r#"surge_drain_trim_state{daemon="0",state="on"} 1"#,
            r#"surge_drain_trim_rounds_total{daemon="0"} 2"#,
            r#"surge_drain_trim_bytes_total{daemon="0"} 1048576"#,
            r#"surge_drain_trim_last_seconds{daemon="0"} 1800000000"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"edge="full""#), "a threshold never reached is left out:\n{text}");
        let unreplicated = DrainReport { replicas: Default::default(), ..report.clone() };
        assert!(!text_of(unreplicated).contains("replicat"), "replication off shows no replication figures");
        assert!(!text_of(DrainReport { policy: "off".into(), ..report }).contains("surge_drain"));
    }

    #[test]
    fn a_status_that_cannot_be_read_leaves_the_request_metrics() {
        let requests = Arc::new(RequestMetrics::default());
        requests.answered(Op::Write as u8, Duration::from_millis(1), 0);
        let failing: StatusSource = Box::new(|| Err(Failure::new(surge_proto::Errno::EIO, "namespace unreadable")));
        let mut text = String::new();
        encode(&mut text, &registry(0, failing, requests, None)).unwrap();
        assert!(text.contains("surge_request_duration_seconds_count") && !text.contains("surge_buffer_used"), "{text}");
    }
}
