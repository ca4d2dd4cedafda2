//! `surge bench bbos --part trim`: what a TRIM pass costs the checkpoints
//! written meanwhile, unlimited against paced (`surged --drain-trim-rate`;
//! the seed holds the TRIM down with blkio [Sung20, §5.2.4]). A cluster of
//! one daemon has its buffer in `--trim-buffer`, a directory on a file
//! system that takes FITRIM (ext4 on a loop disk, or on an SSD); its PFS
//! is in `--scratch`. Before each run `fstrim` trims the whole file
//! system, so that ext4 has marked every group trimmed and both sides
//! discard only what their run freed. A run writes [`OLD_FILES`] checkpoints of an
//! earlier job and removes them, which starts the daemon's trimmer within
//! its drain period (1 s); from the removal on, a checkpoint writer
//! rewrites one checkpoint in place (no block freed, so no second pass),
//! fsync'ed each time, for a window that holds the paced pass: 1 s for the
//! trimmer's look, the file system's size at the paced rate, and
//! [`SLACK`]. It reports the writer's throughput over the window, its
//! slowest checkpoint, and when the pass ended (`surge drain status`
//! polled). The two sides take turns run by run.

use super::bbos_measured::{checkpoint_pattern, client_config, write_checkpoint, CaseCluster, MeasuredArgs};
use super::{ratios, rotated, show, show_ratio};
use crate::drain_settings::{DrainArgs, DrainPolicyKind};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, JobIdentity};
use surge_proto::drain::DrainTrim;

#[derive(Args, Debug, Clone)]
pub struct TrimArgs {
    /// Trim part: where the buffer goes, a directory on a file system that takes FITRIM (ext4 or
    /// XFS over a device with discard, such as a loop disk; needs root).
    #[arg(long, value_name = "DIR")]
    pub trim_buffer: Option<PathBuf>,
    /// Trim part: the paced side's --drain-trim-rate, MB/s (the daemons' default; the other side
    /// is unlimited).
    #[arg(long, value_name = "MB/s", default_value = "1000", value_parser = parse_paced_rate)]
    pub trim_mbps: u64,
}

/// A TRIM rate above 0, as bytes/s: the paced side.
fn parse_paced_rate(text: &str) -> Result<u64, String> {
    match surge_cluster::parse_mbps_limit(text)? {
        0 => Err("the paced side needs a rate above 0 MB/s (the other side is the unlimited one)".into()),
        rate => Ok(rate),
    }
}

/// Checkpoints of the earlier job, removed to start the pass, and their size (MiB): 512 MiB,
/// eight times the trimmer's threshold.
const OLD_FILES: u64 = 32;
const OLD_MIB: u64 = 16;
/// The checkpoint the writer rewrites (MiB), in 1 MiB writes.
const CHECKPOINT_MIB: u64 = 64;
/// The daemon's capacity (MiB): its trimmer waits for 64 MiB removed.
const CAPACITY_MIB: u64 = 2048;
/// The trimmer's look (the drain period), and what the window holds past the paced pass.
const LOOK: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_secs(3);
/// Time between two looks at the report.
const POLL: Duration = Duration::from_millis(50);

/// One run of one side.
struct RunFigures {
    /// The writer's MB/s over the window, and its slowest checkpoint's.
    write_mbps: f64,
    slowest_mbps: f64,
    /// Seconds from the removal to the pass's end, and the bytes it discarded.
    pass_ended_s: f64,
    discarded: u64,
}

pub(super) fn run(a: &MeasuredArgs, t: &TrimArgs) -> Result<(), String> {
    let Some(dir) = &t.trim_buffer else {
        return Err("--part trim needs --trim-buffer DIR: a directory on ext4 or XFS over a device with discard, \
                    such as a loop disk (docs/bbos.md, \"TRIM\")"
            .into());
    };
    let size = file_system_size(dir)?;
    let window = LOOK + Duration::from_secs_f64(size as f64 / t.trim_mbps as f64) + SLACK;
    let sides = [0, t.trim_mbps];
    let mut figures: Vec<(u64, RunFigures)> = Vec::new();
    for run in 0..a.runs as usize {
        for rate in rotated(&sides, run) {
            note!("surge bench bbos: trim, run {} of {}, {}…", run + 1, a.runs, side_name(rate));
            figures.push((rate, run_case(a, dir, rate, window, run)?));
        }
    }
    println!(
        "surge bench bbos --part trim: MEASURED, one daemon, buffer in {} ({:.1} GiB file system), {OLD_FILES} \
         checkpoints of {OLD_MIB} MiB removed, then one {CHECKPOINT_MIB} MiB checkpoint rewritten and fsync'ed \
         for {:.1} s while the trimmer's pass runs, unlimited against {}; {} run(s) per side, alternating; median \
         (min–max) over runs",
        dir.display(),
        size as f64 / f64::from(1 << 30),
        window.as_secs_f64(),
        side_name(t.trim_mbps),
        a.runs
    );
    println!("| TRIM rate | checkpoint writes MB/s | slowest checkpoint MB/s | pass ended (s after removal) | discarded MiB |");
    println!("|---|---:|---:|---:|---:|");
    let column = |rate: u64, pick: fn(&RunFigures) -> f64| -> Vec<f64> {
        figures.iter().filter(|(r, _)| *r == rate).map(|(_, f)| pick(f)).collect()
    };
    for rate in sides {
        println!(
            "| {} | {} | {} | {} | {} |",
            side_name(rate),
            show(&column(rate, |f| f.write_mbps), 1.0, 1),
            show(&column(rate, |f| f.slowest_mbps), 1.0, 1),
            show(&column(rate, |f| f.pass_ended_s), 1.0, 2),
            show(&column(rate, |f| f.discarded as f64), f64::from(1 << 20), 0),
        );
    }
    let (paced, unlimited) = (t.trim_mbps, 0);
    println!(
        "paced / unlimited, per run: checkpoint write throughput {}, slowest checkpoint {}",
        show_ratio(&ratios(&column(paced, |f| f.write_mbps), &column(unlimited, |f| f.write_mbps))),
        show_ratio(&ratios(&column(paced, |f| f.slowest_mbps), &column(unlimited, |f| f.slowest_mbps))),
    );
    Ok(())
}

fn side_name(rate: u64) -> String {
    match rate {
        0 => "unlimited".into(),
        rate => format!("{} MB/s", rate as f64 / 1e6),
    }
}

fn run_case(a: &MeasuredArgs, dir: &Path, rate: u64, window: Duration, run: usize) -> Result<RunFigures, String> {
    let fstrim = Command::new("fstrim").arg(dir).output().map_err(|e| format!("fstrim {}: {e}", dir.display()))?;
    if !fstrim.status.success() {
        return Err(format!("fstrim {}: {}", dir.display(), String::from_utf8_lossy(&fstrim.stderr).trim()));
    }
    let on_disk = MeasuredArgs { buffer_dir: dir.to_path_buf(), ..a.clone() };
    let drain = DrainArgs {
        // MaxBW demotes only while no checkpoint is written, here at 1 MB/s: the writer and the
        // trimmer have the device to themselves, and checkpoint writes are not held down.
        drain: Some(DrainPolicyKind::MaxBw),
        drain_period: Some(LOOK.as_secs()),
        drain_rates: Some("10000,9000,1,0.5".into()),
        drain_trim_rate: Some((rate as f64 / 1e6).to_string()),
        ..DrainArgs::default()
    };
    let cluster = CaseCluster::start_daemons(&on_disk, 1, CAPACITY_MIB, drain, &format!("trim-{run}-{rate}"))?;
    let client = Client::connect_with(&cluster.cluster_file, client_config()?).map_err(|e| e.to_string())?;
    let before = trim_known(&client)?;
    if before.state != "on" {
        return Err(format!("{}: the buffer's file system does not trim ({})", dir.display(), before.state));
    }
    let data = checkpoint_pattern(1 << 20);
    client.mkdir("/trim", 0o755).map_err(|e| format!("/trim: {e}"))?;
    let old: Vec<String> = (0..OLD_FILES).map(|k| format!("/trim/old_{k:03}")).collect();
    for path in &old {
        write_checkpoint(&client, path, OLD_MIB << 20, &data)?;
    }
    let checkpoint = "/trim/ckpt";
    write_checkpoint(&client, checkpoint, CHECKPOINT_MIB << 20, &data)?;
    for path in &old {
        client.unlink(path).map_err(|e| format!("{path}: {e}"))?;
    }
    let removed = Instant::now();
    let writer_config = ClientConfig { job: JobIdentity::named("trim-writer"), ..client_config()? };
    let (pass, writes) = thread::scope(|s| {
        let writer = s.spawn(|| rewrite(&cluster.cluster_file, writer_config, checkpoint, &data, removed + window));
        let pass = watch_pass(&client, &before, removed, window);
        (pass, writer.join().unwrap_or_else(|_| Err("the checkpoint writer panicked".into())))
    });
    let (pass_ended, after) = pass?;
    let (bytes, seconds) = writes?;
    let Some(slowest) = seconds.iter().copied().reduce(f64::max) else {
        return Err("the checkpoint writer wrote nothing in the window".into());
    };
    Ok(RunFigures {
        write_mbps: (bytes as f64 / 1e6) / seconds.iter().sum::<f64>(),
        slowest_mbps: (CHECKPOINT_MIB << 20) as f64 / 1e6 / slowest,
        pass_ended_s: pass_ended.as_secs_f64(),
        discarded: after.bytes - before.bytes,
    })
}

/// The trimmer's figures once the daemon's first tick has told them.
fn trim_known(client: &Client) -> Result<DrainTrim, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let trim = client.drain_status().map_err(|e| format!("drain status: {e}"))?.trim;
        if !trim.state.starts_with("not known") {
            return Ok(trim);
        }
        if Instant::now() >= deadline {
            return Err("the daemon's trimmer did not report within 30 s".into());
        }
        thread::sleep(POLL);
    }
}

/// Polls the report until the pass after `before` has ended: how long after `removed` it was
/// seen, and the figures then. The window ending first is an error (the pass is slower than
/// its rate allows for).
fn watch_pass(
    client: &Client,
    before: &DrainTrim,
    removed: Instant,
    window: Duration,
) -> Result<(Duration, DrainTrim), String> {
    while removed.elapsed() < window {
        let trim = client.drain_status().map_err(|e| format!("drain status: {e}"))?.trim;
        if trim.trims > before.trims {
            return Ok((removed.elapsed(), trim));
        }
        thread::sleep(POLL);
    }
    Err(format!("no TRIM pass ended within the window of {window:?} after the removal"))
}

/// Rewrites `path` in place in 1 MiB writes, fsync'ed, until `until`: the bytes written, and the
/// seconds each rewrite took.
fn rewrite(
    cluster_file: &Path,
    config: ClientConfig,
    path: &str,
    data: &[u8],
    until: Instant,
) -> Result<(u64, Vec<f64>), String> {
    let client = Client::connect_with(cluster_file, config).map_err(|e| e.to_string())?;
    let file = client.open(path, libc::O_WRONLY, 0).map_err(|e| format!("{path}: {e}"))?;
    let (mut bytes, mut seconds) = (0, Vec::new());
    while Instant::now() < until {
        let began = Instant::now();
        for offset in (0..CHECKPOINT_MIB << 20).step_by(data.len()) {
            file.write_at(data, offset).map_err(|e| format!("{path} at {offset}: {e}"))?;
        }
        file.fsync().map_err(|e| format!("{path}: fsync: {e}"))?;
        seconds.push(began.elapsed().as_secs_f64());
        bytes += CHECKPOINT_MIB << 20;
    }
    Ok((bytes, seconds))
}

/// The size of the file system `dir` is on (statvfs), what a pass covers.
fn file_system_size(dir: &Path) -> Result<u64, String> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", dir.display()))?;
    // SAFETY: statvfs is plain data; statvfs(3) fills it or fails.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` writable for the call.
    match unsafe { libc::statvfs(path.as_ptr(), &mut stat) } {
        0 => Ok(stat.f_blocks * stat.f_frsize),
        _ => Err(format!("--trim-buffer {}: {}", dir.display(), std::io::Error::last_os_error())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_paced_side_needs_a_rate_above_zero() {
        assert_eq!(super::parse_paced_rate("250"), Ok(250_000_000));
        assert!(super::parse_paced_rate("0").unwrap_err().contains("above 0"));
        assert!(super::parse_paced_rate("-3").unwrap_err().contains("not 0 or more"));
    }
}
