//! `surge drain status` and `surge ckpt mtbf`: what the data manager of
//! daemon 0 does [Sung20, ch. 5] — its policy, the period's model and
//! thresholds, the rates in force and each application's checkpoints —
//! and the failure rate that orders an application's demotion.

use super::{CmdResult, Ctx};
use crate::units::listing_size;
use clap::{Args, Subcommand};
use serde_json::json;
use std::process::ExitCode;
use surge_client::JobIdentity;
use surge_proto::drain::{AppDrain, DrainReport};

#[derive(Subcommand)]
pub enum DrainCommand {
    /// The data manager's policy, period model, thresholds and rates in force, and per
    /// application (job) the checkpoint bytes pending demotion and demoted.
    Status(DrainStatusArgs),
}

#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct DrainStatusArgs {
    /// Print JSON instead of text (sizes in bytes, rates in bytes/s).
    #[arg(long)]
    pub json: bool,
    /// Sizes as 1.5K, 768M, 2.0G (powers of 1024) instead of bytes.
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    #[command(flatten)]
    pub help: super::LongHelpOnly,
}

#[derive(Subcommand)]
pub enum CkptCommand {
    /// Set a job's mean time between failures: the longer it is, the colder the job's latest
    /// checkpoint, and the sooner the data manager demotes it (older versions go first anyway).
    Mtbf(MtbfArgs),
}

#[derive(Args)]
#[command(after_help = "Example: surge ckpt mtbf 4242 3600   (job 4242 fails about once an hour)")]
pub struct MtbfArgs {
    /// The job: its SURGE_JOB_ID or SLURM_JOB_ID, as its clients give it.
    pub job: String,
    /// Mean time between failures, in seconds.
    #[arg(value_parser = clap::value_parser!(u64).range(1..))]
    pub seconds: u64,
}

pub fn drain(ctx: &Ctx, command: DrainCommand) -> CmdResult {
    match command {
        DrainCommand::Status(a) => status(ctx, &a),
    }
}

pub fn ckpt(ctx: &Ctx, command: CkptCommand) -> CmdResult {
    match command {
        CkptCommand::Mtbf(a) => {
            let job = JobIdentity::named(&a.job);
            ctx.client()?.set_mtbf(job.id, a.seconds).map_err(|e| format!("setting job {}'s MTBF: {e}", a.job))?;
            println!("surge: job {} (id {}) has an MTBF of {} s", job.label, job.id, a.seconds);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn status(ctx: &Ctx, a: &DrainStatusArgs) -> CmdResult {
    let report = ctx.client()?.drain_status().map_err(|e| format!("asking daemon 0 for the drain status: {e}"))?;
    if a.json {
        println!("{:#}", as_json(&report));
    } else {
        print!("{}", as_text(&report, a.human_readable));
    }
    Ok(ExitCode::SUCCESS)
}

fn rate(bytes_per_s: u64) -> String {
    match bytes_per_s {
        0 => "unlimited".into(),
        r => format!("{:.1} MB/s", r as f64 / 1e6),
    }
}

fn as_text(r: &DrainReport, human_readable: bool) -> String {
    let size = |bytes: u64| listing_size(bytes, human_readable);
    let mut out = String::new();
    let health = if r.state_healthy { String::new() } else { format!(" (degraded: {})", r.state_note) };
    out += &format!("policy: {}   state: {}{health}\n", r.policy, r.state_backend);
    if r.policy == "off" {
        out += "the data manager is off: files stay in the buffer until `surge stage-out` (start the cluster \
                with --drain bbos to drain it while jobs run)\n";
        return out;
    }
    out += &format!("eviction order: {}\n", r.evict_order);
    out += &format!(
        "period {} ({} s, {} s in): DWSF {}, DWPP last {}, predicted {}; buffer {} used of S = {}\n",
        r.period_index,
        r.period_s,
        r.period_elapsed_ms / 1000,
        size(r.dwsf),
        size(r.dwpp_last),
        size(r.dwpp_predicted),
        size(r.used),
        size(r.capacity)
    );
    if !r.pattern.is_empty() {
        let threshold = |t: u64| if t == u64::MAX { "never".to_string() } else { format!("DWSF {}", size(t)) };
        out += &format!(
            "schedule: pattern {}; demotion beside checkpoints from {}, at full speed from {}\n",
            r.pattern,
            threshold(r.threshold_start),
            threshold(r.threshold_full)
        );
    }
    if !r.schedule_note.is_empty() {
        out += &format!("schedule note: {}\n", r.schedule_note);
    }
    out += &format!(
        "in force: checkpoint writes {}, demotion {} (held by: {}); a writer that finds the buffer full waits {}\n",
        rate(r.checkpoint_bps),
        rate(r.demote_bps),
        r.rate_control,
        match r.wait_for_space_ms {
            0 => "not at all (ENOSPC at once)".to_string(),
            ms => format!("up to {:.1} s for space", f64::from(ms) / 1000.0),
        }
    );
    let d = &r.rates;
    out += &format!(
        "device rates ({}): writes {} alone, {} beside full demotion; demotion {} alone, {} beside full \
         writes (BW_w = {:.3} BW_r + {:.1} MB/s)\n",
        d.source,
        rate(d.write_max),
        rate(d.write_min),
        rate(d.read_max),
        rate(d.read_min),
        d.m,
        d.b / 1e6
    );
    out += &format!(
        "demoted {} file(s), {}; evicted {} file(s), {}; {} demotion(s) failed; {} file(s) held open (not evicted)\n",
        r.demoted_files,
        size(r.demoted_bytes),
        r.evicted_files,
        size(r.evicted_bytes),
        r.failed_demotions,
        r.files_held
    );
    out += &format!(
        "placement: {}; {} file(s) placed on the PFS directly, {} written there\n",
        r.placement,
        r.direct_files,
        size(r.direct_bytes)
    );
    let t = &r.trim;
    out += &format!(
        "trim: {}, rate cap {}; {} pass(es), {} discarded{}\n",
        t.state,
        rate(r.trim_rate_bps),
        t.trims,
        size(t.bytes),
        match t.last_unix_s {
            0 => String::new(),
            at => format!(", last at {} UTC", super::files::utc_time(at as i64 * 1_000_000_000)),
        }
    );
    let replicas = &r.replicas;
    out += &match replicas.dir.is_empty() {
        true => "replicas: off (--drain-replica DIR keeps a second copy of every demoted file)\n".to_string(),
        false => format!(
            "replicas in {}: {} file(s), {} replicated and verified; {} waiting; {} failure(s); {} achieved, cap {}\n",
            replicas.dir,
            replicas.files,
            size(replicas.bytes),
            replicas.pending,
            replicas.failures,
            rate(replicas.rate_bps),
            rate(replicas.rate_limit_bps)
        ),
    };
    if !r.last_error.is_empty() {
        out += &format!("last error: {}\n", r.last_error);
    }
    if r.apps.is_empty() {
        out += "no checkpoints recorded yet\n";
        return out;
    }
    out += &format!(
        "{:<20} {:<16} {:>14} {:>14} {:>10} {:>10} {:>8}  versions in buffer\n",
        "job", "label", "pending", "demoted", "files", "MTBF s", "restarts"
    );
    for app in &r.apps {
        out += &app_line(app, &size);
    }
    out
}

fn app_line(app: &AppDrain, size: &dyn Fn(u64) -> String) -> String {
    let versions: Vec<String> = app.versions.iter().map(u64::to_string).collect();
    format!(
        "{:<20} {:<16} {:>14} {:>14} {:>10} {:>10} {:>8}  {}\n",
        app.job,
        if app.label.is_empty() { "-" } else { &app.label },
        size(app.pending_bytes),
        size(app.demoted_bytes),
        format!("{}/{}", app.pending_files, app.demoted_files),
        app.mtbf_s,
        app.restarts,
        if versions.is_empty() { "-".to_string() } else { versions.join(",") }
    )
}

fn as_json(r: &DrainReport) -> serde_json::Value {
    let apps: Vec<_> = r
        .apps
        .iter()
        .map(|a| {
            json!({
                "job": a.job, "label": a.label, "pending_files": a.pending_files, "pending_bytes": a.pending_bytes,
                "demoted_files": a.demoted_files, "demoted_bytes": a.demoted_bytes, "versions": a.versions,
                "mtbf_s": a.mtbf_s, "restarts": a.restarts,
            })
        })
        .collect();
    let d = &r.rates;
    let mut report = json!({
        "policy": r.policy, "evict_order": r.evict_order, "state_backend": r.state_backend, "state_healthy": r.state_healthy,
        "state_note": r.state_note, "period_s": r.period_s, "period_index": r.period_index,
        "period_elapsed_ms": r.period_elapsed_ms, "capacity": r.capacity, "used": r.used, "dwsf": r.dwsf,
        "dwpp_last": r.dwpp_last, "dwpp_predicted": r.dwpp_predicted, "pattern": r.pattern,
        "threshold_start": r.threshold_start, "threshold_full": r.threshold_full,
        "schedule_note": r.schedule_note, "checkpoint_bps": r.checkpoint_bps, "demote_bps": r.demote_bps,
        "wait_for_space_ms": r.wait_for_space_ms,
        "rates": {
            "write_max": d.write_max, "write_min": d.write_min, "read_max": d.read_max, "read_min": d.read_min,
            "m": d.m, "b": d.b, "source": d.source,
        },
        "demoted_files": r.demoted_files, "demoted_bytes": r.demoted_bytes, "evicted_files": r.evicted_files,
        "evicted_bytes": r.evicted_bytes, "failed_demotions": r.failed_demotions, "placement": r.placement,
        "direct_files": r.direct_files, "direct_bytes": r.direct_bytes, "files_held": r.files_held,
        "last_error": r.last_error, "rate_control": r.rate_control,
        "apps": apps,
        "replicas": {
            "dir": r.replicas.dir, "rate_limit_bps": r.replicas.rate_limit_bps, "files": r.replicas.files,
            "bytes": r.replicas.bytes, "pending": r.replicas.pending, "failures": r.replicas.failures,
            "rate_bps": r.replicas.rate_bps,
        },
    });
    // Apart: one json! of it all passes serde_json's recursion limit.
    report["trim"] = json!({
        "state": r.trim.state, "trims": r.trim.trims, "bytes": r.trim.bytes, "last_unix_s": r.trim.last_unix_s,
        "rate_bps": r.trim_rate_bps,
    });
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::drain::{DrainRates, DrainReplicas, DrainTrim};

    #[test]
    fn the_text_report_names_the_schedule_rates_and_each_application() {
        let report = DrainReport {
            policy: "bbos".into(),
            evict_order: "fifo".into(),
            state_backend: "redis://:***@127.0.0.1:6390".into(),
            state_healthy: true,
            period_s: 600,
            capacity: 4 << 30,
            pattern: "partial".into(),
            threshold_start: 1 << 30,
            threshold_full: u64::MAX,
            checkpoint_bps: 80_000_000,
            rates: DrainRates { source: "given".into(), ..DrainRates::default() },
            rate_control: "blkio".into(),
            apps: vec![AppDrain { job: 42, label: "ckpt".into(), versions: vec![3, 4], ..AppDrain::default() }],
            replicas: DrainReplicas { dir: "/replica".into(), files: 2, pending: 1, failures: 3, ..Default::default() },
            trim: DrainTrim { state: "on".into(), trims: 2, bytes: 3 << 30, last_unix_s: 1_800_000_000 },
            trim_rate_bps: 1_000_000_000,
            ..DrainReport::default()
        };
        let text = as_text(&report, true);
        let trim = "trim: on, rate cap 1000.0 MB/s; 2 pass(es), 3.0G discarded, last at 2027-01-15 08:00 UTC";
        assert!(text.contains(trim), "{text}");
        assert_eq!(as_json(&report)["trim"]["bytes"], json!(3u64 << 30));
        assert_eq!(as_json(&report)["trim"]["rate_bps"], json!(1_000_000_000u64));
        let unsupported =
            DrainTrim { state: "unsupported (ENOTTY: the file system has no FITRIM)".into(), ..DrainTrim::default() };
        let text_unsupported = as_text(&DrainReport { trim: unsupported, trim_rate_bps: 0, ..report.clone() }, true);
        assert!(
            text_unsupported.contains(
                "trim: unsupported (ENOTTY: the file system has no FITRIM), rate cap unlimited; 0 pass(es), 0"
            ),
            "{text_unsupported}"
        );
        assert!(text.contains("replicas in /replica: 2 file(s)") && text.contains("1 waiting; 3 failure(s)"), "{text}");
        assert_eq!(as_json(&report)["replicas"]["failures"], json!(3));
        let unreplicated = DrainReport { replicas: DrainReplicas::default(), ..report.clone() };
        assert!(as_text(&unreplicated, true).contains("replicas: off"));
        for expected in [
            "policy: bbos",
            "eviction order: fifo",
            "pattern partial",
            "from DWSF 1.0G",
            "at full speed from never",
            "80.0 MB/s",
            "(held by: blkio)",
        ] {
            assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
        }
        assert!(text.lines().any(|l| l.starts_with("42 ") && l.contains("ckpt") && l.ends_with("3,4")), "{text}");
        assert_eq!(as_json(&report)["apps"][0]["versions"], json!([3, 4]));
    }

    #[test]
    fn an_off_manager_says_how_to_turn_it_on() {
        let text = as_text(&DrainReport { policy: "off".into(), ..DrainReport::default() }, false);
        assert!(text.contains("--drain bbos"), "{text}");
    }
}
