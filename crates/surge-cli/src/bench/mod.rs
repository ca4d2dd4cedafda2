//! `surge bench ...`: each benchmark runs Surge and its baseline in the
//! same run, in client processes, the side that goes first taking turns
//! ([`rotated`]), and prints medians with their min–max and ratios.

pub mod autotune;
pub mod bbos;
pub mod bbos_measured;
pub mod bbos_rates;
pub mod bbos_restarts;
pub mod bbos_testbed;
pub mod bbos_trim;
pub mod conns;
pub mod copy;
pub mod core;
pub mod fio;
pub mod glusterfs;
pub mod io500;
pub mod worker;

use crate::launch::{self, LaunchPlan, Rank};
use crate::stage_settings::StageArgs;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a benchmark on a local [`Setup`] takes besides its own arguments.
#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// Daemons in the benchmark cluster.
    #[arg(long, default_value_t = 2)]
    pub daemons: u32,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Directory holding the buffer tier and the baseline files (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    pub scratch: PathBuf,
    /// The daemons' request-path stages, as `surge start` takes them (surged's defaults unless named).
    #[command(flatten)]
    pub stages: StageArgs,
}

/// A benchmark cluster and the baseline's directory on the same device,
/// in a scratch directory removed (cluster stopped) on drop.
pub struct Setup {
    pub root: PathBuf,
    pub cluster_file: PathBuf,
    pub direct: PathBuf,
}

impl Setup {
    /// Starts `daemons` daemons running `stages` (surged's defaults for the
    /// kinds it does not name).
    pub fn start(scratch: &Path, daemons: u32, stages: &StageArgs) -> Result<Setup, String> {
        let root = scratch.join(format!("surge-bench-{}", std::process::id()));
        let direct = root.join("direct");
        fs::create_dir_all(&direct).map_err(|e| format!("{}: {e}", direct.display()))?;
        let setup = Setup { cluster_file: root.join("cluster.toml"), direct, root };
        let plan = LaunchPlan {
            timeout: Duration::from_secs(30),
            stages: stages.clone(),
            ..LaunchPlan::local(setup.cluster_file.clone(), daemons, setup.root.join("buffer"), setup.root.join("pfs"))
        };
        launch::start(&plan, &Rank { rank: 0, size: 1, launch_id: format!("bench.{}", std::process::id()) })?;
        Ok(setup)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        launch::stop(&self.cluster_file, Duration::from_secs(10)).ok();
        fs::remove_dir_all(&self.root).ok();
    }
}

/// Set by SIGINT, SIGTERM and SIGHUP: the bench stops at the next step and cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Turns the ending signals into an orderly stop (unmount, stop the cluster).
/// The benchmark programs get default handlers back at exec.
pub fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

pub fn check_interrupted() -> Result<(), String> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err("interrupted; the mount and the cluster are removed".into())
    } else {
        Ok(())
    }
}

/// Paired samples of Surge and its baseline per case, in first-seen order.
pub struct RatioTable<C> {
    pub rows: Vec<(C, Samples)>,
}

impl<C> Default for RatioTable<C> {
    fn default() -> Self {
        RatioTable { rows: Vec::new() }
    }
}

#[derive(Default)]
pub struct Samples {
    pub direct: Vec<f64>,
    pub surge: Vec<f64>,
    pub ratio: Vec<f64>,
}

impl<C: PartialEq> RatioTable<C> {
    pub fn add(&mut self, case: C, direct: f64, surge: f64) {
        let i = self.rows.iter().position(|(c, _)| *c == case).unwrap_or_else(|| {
            self.rows.push((case, Samples::default()));
            self.rows.len() - 1
        });
        let s = &mut self.rows[i].1;
        s.direct.push(direct);
        s.surge.push(surge);
        s.ratio.push(surge / direct);
    }
}

/// Waits for started `bench-worker` processes and returns what they moved
/// per second overall: from the first start to the last end.
pub fn overall_rate(children: Vec<std::process::Child>) -> Result<f64, String> {
    let mut first_start = u128::MAX;
    let mut last_end = 0u128;
    let mut total = 0u64;
    for child in children {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("benchmark worker failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<u128> = text.split_whitespace().filter_map(|t| t.parse().ok()).collect();
        let [s, e, n] = f[..] else { return Err(format!("unexpected worker output {text:?}")) };
        first_start = first_start.min(s);
        last_end = last_end.max(e);
        total += n as u64;
    }
    Ok(total as f64 / ((last_end - first_start) as f64 / 1e9).max(1e-9))
}

/// Median of a non-empty sample.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// `items` with the one at `step` (modulo their count) first: a benchmark
/// that orders its sides by `rotated(sides, step)`, `step` moving on by
/// one each run, lets every side go first equally often, so warm caches
/// and drifting machine load do not favour one side.
pub fn rotated<T: Clone>(items: &[T], step: usize) -> Vec<T> {
    let mut items = items.to_vec();
    if !items.is_empty() {
        let first = step % items.len();
        items.rotate_left(first);
    }
    items
}

/// Median, min and max of a sample (None when empty).
pub fn spread(xs: &[f64]) -> Option<(f64, f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((median(xs.to_vec()), min, max))
}

/// The per-run ratios a / b (runs pair up by index: every run measures every side).
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

pub fn show(xs: &[f64], scale: f64, digits: usize) -> String {
    match spread(xs) {
        Some((m, lo, hi)) => format!("{:.*} ({:.*}–{:.*})", digits, m / scale, digits, lo / scale, digits, hi / scale),
        None => "-".into(),
    }
}

/// Ratios with two decimals, three below 0.1.
pub fn show_ratio(xs: &[f64]) -> String {
    let small = spread(xs).is_some_and(|(m, _, _)| m < 0.1);
    show(xs, 1.0, if small { 3 } else { 2 })
}

/// Whether per-run ratios clear `at_least`: by their whole range, by the median only, or not.
pub fn verdict(xs: &[f64], at_least: f64) -> &'static str {
    match spread(xs) {
        None => "not measured",
        Some((_, lo, _)) if lo >= at_least => "met: the whole range clears it",
        Some((m, _, _)) if m >= at_least => "median meets it, the range does not clear it",
        Some(_) => "not met",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_side_goes_first_in_turn() {
        let sides = ["direct", "surge"];
        let firsts: Vec<_> = (0..4).map(|step| super::rotated(&sides, step)[0]).collect();
        assert_eq!(firsts, ["direct", "surge", "direct", "surge"]);
        assert_eq!(super::rotated(&[1, 2, 3], 4), [2, 3, 1]);
    }

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
