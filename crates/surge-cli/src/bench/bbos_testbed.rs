//! `surge bench bbos --testbed`: a case of the measured policy comparison
//! (or of the direct part) on the multi-host test bed (docs/testbed.md).
//! Each case brings up a test bed of its own: two daemon hosts sharing the
//! buffer capacity S (each `--capacity` S/2, draining by the policy under
//! test), their buffers in `--buffer-dir` (memory) and the PFS in the test
//! bed's state dir under `--scratch` (the disk), and a client host per
//! application, every link shaped to `--link-rate`. Each application is a
//! process of its own on its host (`surge bench-bbos-app`, hidden) that
//! writes its checkpoints on the schedule of the localhost run and prints
//! one line per checkpoint; once all are done, one more on a client host
//! (`--tally`) reads the drain report and the tier of each application's
//! latest checkpoint. The bench itself stays outside the namespaces and
//! only reads these lines. The restart runs (`--part restarts`) go the
//! same way: a test bed per eviction order, each application a process
//! running `bbos_restarts::run_app` (its checkpoints and restarts) and
//! printing what it counted. [`OnTestbed`] is this module's
//! `bbos_measured::Place` and `bbos_restarts::RestartPlace`.

use super::bbos_measured::{self, AppRun, Arrivals, MeasuredArgs, Place, Tally};
use super::bbos_restarts::{self, RestartArgs, RestartCase, RestartPlace};
use crate::cmd::CmdResult;
use crate::drain_settings::DrainArgs;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_bbos::sim::PolicyKind;
use surge_testbed::{Spec, Testbed};

/// Daemon hosts of a case, as in the localhost run.
const DAEMON_HOSTS: u32 = 2;
/// How long after the last process started the applications begin: every
/// one of them must be connected by then.
const START_DELAY: Duration = Duration::from_secs(2);

/// (internal) `surge bench-bbos-app`: one application of a test-bed case, or its tally.
#[derive(Args, Debug)]
pub struct AppArgs {
    #[command(flatten)]
    pub measured: MeasuredArgs,
    #[command(flatten)]
    pub restarts: RestartArgs,
    /// The case's cluster file.
    #[arg(long, value_name = "FILE")]
    pub cluster_file: PathBuf,
    /// This application's index (job `ckpt-appN`, or `restart-appN` with --restart-seed;
    /// directory /appN).
    #[arg(long, required_unless_present = "tally")]
    pub app: Option<u32>,
    /// DWPP the applications write together per period, in units of S.
    #[arg(long, default_value_t = 1.0)]
    pub share: f64,
    #[arg(long, value_enum, default_value_t = Arrivals::Low)]
    pub arrivals: Arrivals,
    /// Wall-clock time (ns since the epoch) at which every application's schedule starts.
    #[arg(long, default_value_t = 0)]
    pub go_at_ns: u128,
    /// Instead of writing: print what the daemons hold after the run.
    #[arg(long, conflicts_with = "app")]
    pub tally: bool,
    /// Run the application of a restart case instead: its checkpoints and, at the failures
    /// of this run's seed, its restarts.
    #[arg(long, conflicts_with = "tally")]
    pub restart_seed: Option<u64>,
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// Prints "ok LATENCY_S MB_S PERIOD" or "fail WHY" per checkpoint, or the tally line
/// "tally DEMOTED PENDING DIRECT INFEASIBLE HITS" (bytes, 0/1, applications),
/// or, for a restart case, "restarts RESTARTS HITS".
pub fn run_worker(a: AppArgs) -> CmdResult {
    if a.tally {
        let t = bbos_measured::tally(&a.cluster_file, a.measured.apps)?;
        println!(
            "tally {} {} {} {} {}",
            t.demoted_bytes,
            t.pending_bytes,
            t.direct_bytes,
            u8::from(t.infeasible),
            t.hits
        );
        return Ok(ExitCode::SUCCESS);
    }
    let app = a.app.ok_or("--app or --tally is needed")?;
    let wait = a.go_at_ns.saturating_sub(now_ns());
    let start = Instant::now() + Duration::from_nanos(u64::try_from(wait).map_err(|_| "--go-at-ns is too far ahead")?);
    if let Some(seed) = a.restart_seed {
        let t = bbos_restarts::run_app(&a.measured, &a.restarts, &a.cluster_file, seed, app, start)?;
        println!("restarts {} {}", t.restarts, t.hits);
        return Ok(ExitCode::SUCCESS);
    }
    let seen = bbos_measured::run_app(&a.measured, &a.cluster_file, a.share, a.arrivals, app, start)?;
    for ((latency, mbps), period) in seen.latencies.iter().zip(&seen.mbps).zip(&seen.periods) {
        println!("ok {latency} {mbps} {period}");
    }
    for failure in &seen.failures {
        println!("fail {}", failure.replace('\n', " "));
    }
    Ok(ExitCode::SUCCESS)
}

/// A case's test bed, taken down (and its buffers removed) when dropped.
struct Bed {
    testbed: Testbed,
    buffers: PathBuf,
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Err(e) = surge_testbed::down(&self.testbed.name, Some(&self.testbed.state_dir)) {
            note!("surge bench bbos: {e}; run `surge testbed down --name {}`", self.testbed.name);
        }
        std::fs::remove_dir_all(&self.buffers).ok();
    }
}

/// Two daemon hosts sharing `capacity_mib`, draining by `drain`, and a client host per application.
fn bring_up(a: &MeasuredArgs, apps: u32, capacity_mib: u64, drain: &DrainArgs, exe: &Path) -> Result<Bed, String> {
    let name = format!("bb{}", std::process::id() % 1_000_000);
    let mut spec = Spec::new(&name, DAEMON_HOSTS + apps, exe);
    spec.daemon_hosts = DAEMON_HOSTS;
    spec.rate = Some(a.link_rate.parse().map_err(|e: surge_testbed::Error| e.to_string())?);
    spec.state_dir = a.scratch.join(format!("surge-bench-bbos-{name}"));
    let buffers = a.buffer_dir.join(format!("surge-bench-bbos-{name}"));
    spec.buffer_dir = Some(buffers.clone());
    let capacity = (capacity_mib << 20) / u64::from(DAEMON_HOSTS);
    spec.start_args = vec!["--capacity".into(), capacity.to_string()];
    let mut options = Command::new("");
    drain.apply(&mut options);
    spec.start_args.extend(options.get_args().map(|arg| arg.to_string_lossy().into_owned()));
    let testbed = surge_testbed::up(&spec).map_err(|e| format!("the test bed did not come up: {e}"))?;
    Ok(Bed { testbed, buffers })
}

/// `surge ARGS` on client host `nth` (0 for the first).
fn on_client(bed: &Testbed, nth: u32, exe: &Path) -> Command {
    let host = bed.client_hosts().nth(nth as usize).expect("a client host per application").index;
    let mut cmd = bed.command(host, exe);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// A finished process's stdout, or why it failed.
fn output(child: Child, what: &str) -> Result<String, String> {
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One application's lines.
fn parse_app(text: &str) -> Result<AppRun, String> {
    let mut seen = AppRun::default();
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("ok", figures)) => {
                let figures: Vec<&str> = figures.split(' ').collect();
                let [latency, mbps, period] = figures[..] else {
                    return Err(format!("unexpected application output {line:?}"));
                };
                let bad = || format!("unexpected application output {line:?}");
                seen.latencies.push(latency.parse().map_err(|_| bad())?);
                seen.mbps.push(mbps.parse().map_err(|_| bad())?);
                seen.periods.push(period.parse().map_err(|_| bad())?);
            }
            Some(("fail", why)) => seen.failures.push(why.to_string()),
            _ => return Err(format!("unexpected application output {line:?}")),
        }
    }
    Ok(seen)
}

fn parse_tally(text: &str) -> Result<Tally, String> {
    let figures: Vec<u64> = text
        .strip_prefix("tally ")
        .map(|rest| rest.split_whitespace().filter_map(|f| f.parse().ok()).collect())
        .unwrap_or_default();
    let [demoted_bytes, pending_bytes, direct_bytes, infeasible, hits] = figures[..] else {
        return Err(format!("unexpected tally output {text:?}"));
    };
    let hits = u32::try_from(hits).map_err(|_| format!("unexpected tally output {text:?}"))?;
    Ok(Tally { demoted_bytes, pending_bytes, direct_bytes, infeasible: infeasible == 1, hits, ..Tally::default() })
}

/// The test bed as the place of the measured cases.
pub(super) struct OnTestbed;

impl Place for OnTestbed {
    fn describe(&self, a: &MeasuredArgs) -> String {
        format!("on the test bed (a host per daemon and per application, {} links)", a.link_rate)
    }

    /// A test bed per case (the name tells cases apart, not `tag`).
    fn run_case(
        &self,
        a: &MeasuredArgs,
        policy: PolicyKind,
        arrivals: Arrivals,
        _tag: &str,
        mtbfs: bool,
    ) -> Result<(Vec<AppRun>, Tally), String> {
        run_case(a, policy, arrivals, mtbfs)
    }
}

fn run_case(
    a: &MeasuredArgs,
    policy: PolicyKind,
    arrivals: Arrivals,
    mtbfs: bool,
) -> Result<(Vec<AppRun>, Tally), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bed = bring_up(a, a.apps, a.capacity_mib, &bbos_measured::drain_args(a, policy), &exe)?;
    let tb = &bed.testbed;
    if mtbfs {
        for app in 0..a.apps {
            set_mtbf(tb, &exe, &format!("ckpt-app{app}"), bbos_measured::app_mtbf(app, a.apps))?;
        }
    }
    let arrivals = arrivals.to_possible_value().expect("every arrival pattern has a name");
    let share = bbos_measured::dwpp(a, policy).to_string();
    let outputs = run_apps(tb, &exe, a.apps, |app| {
        let mut args = scale_args(a);
        args.extend(
            ["--app", &app.to_string(), "--share", &share, "--arrivals", arrivals.get_name()].map(String::from),
        );
        args
    })?;
    let per_app = outputs.iter().map(|text| parse_app(text)).collect::<Result<Vec<_>, _>>()?;
    let tally = on_client(tb, 0, &exe)
        .arg("bench-bbos-app")
        .args(scale_args(a))
        .arg("--cluster-file")
        .arg(&tb.cluster_file)
        .arg("--tally")
        .spawn()
        .map_err(|e| format!("cannot start the tally: {e}"))?;
    let tally = parse_tally(output(tally, "the tally")?.trim())?;
    Ok((per_app, tally))
}

/// `surge ckpt mtbf JOB SECONDS` from the first client host.
fn set_mtbf(tb: &Testbed, exe: &Path, job: &str, mtbf: u64) -> Result<(), String> {
    let set = on_client(tb, 0, exe).args(["ckpt", "mtbf", job, &mtbf.to_string()]).spawn();
    output(set.map_err(|e| e.to_string())?, "surge ckpt mtbf").map(drop)
}

/// `surge bench-bbos-app ARGS(N)` for every application N on its own
/// client host, all starting their schedules at one time: their outputs.
fn run_apps(tb: &Testbed, exe: &Path, apps: u32, args: impl Fn(u32) -> Vec<String>) -> Result<Vec<String>, String> {
    let go_at = now_ns() + START_DELAY.as_nanos();
    let mut children = Vec::new();
    for app in 0..apps {
        let child = on_client(tb, app, exe)
            .arg("bench-bbos-app")
            .args(args(app))
            .arg("--cluster-file")
            .arg(&tb.cluster_file)
            .args(["--go-at-ns", &go_at.to_string()])
            .spawn()
            .map_err(|e| format!("cannot start application {app}: {e}"))?;
        children.push(child);
    }
    children.into_iter().enumerate().map(|(app, child)| output(child, &format!("application {app}"))).collect()
}

/// The options of `a` an application's schedule depends on.
fn scale_args(a: &MeasuredArgs) -> Vec<String> {
    flags(&[
        ("--period-secs", a.period),
        ("--measured-periods", u64::from(a.measured_periods)),
        ("--apps", u64::from(a.apps)),
        ("--checkpoint-mib", a.checkpoint_mib),
        ("--capacity-mib", a.capacity_mib),
    ])
}

/// The options of a restart case an application's checkpoints and failures depend on.
fn restart_args(a: &MeasuredArgs, r: &RestartArgs, seed: u64) -> Vec<String> {
    flags(&[
        ("--checkpoint-mib", a.checkpoint_mib),
        ("--restart-apps", u64::from(r.restart_apps)),
        ("--restart-period-secs", r.restart_period_secs),
        ("--restart-periods", u64::from(r.restart_periods)),
        ("--mtbf-max-secs", r.mtbf_max_secs),
        ("--restart-seed", seed),
    ])
}

fn flags(pairs: &[(&str, u64)]) -> Vec<String> {
    pairs.iter().flat_map(|(flag, value)| [flag.to_string(), value.to_string()]).collect()
}

/// A restart application's line.
fn parse_restart(text: &str) -> Result<bbos_restarts::Tally, String> {
    let figures: Vec<u32> = text
        .trim()
        .strip_prefix("restarts ")
        .map(|rest| rest.split_whitespace().filter_map(|f| f.parse().ok()).collect())
        .unwrap_or_default();
    let [restarts, hits] = figures[..] else {
        return Err(format!("unexpected restart application output {text:?}"));
    };
    Ok(bbos_restarts::Tally { restarts, hits })
}

impl RestartPlace for OnTestbed {
    /// A test bed per case (the name tells cases apart, not `case.tag`).
    fn run_restarts(
        &self,
        a: &MeasuredArgs,
        r: &RestartArgs,
        case: &RestartCase,
    ) -> Result<Vec<bbos_restarts::Tally>, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let bed = bring_up(a, r.restart_apps, r.restart_capacity_mib, &case.drain, &exe)?;
        let tb = &bed.testbed;
        for (app, &mtbf) in (0..).zip(&case.mtbfs) {
            set_mtbf(tb, &exe, &bbos_restarts::job_label(app), mtbf)?;
        }
        let outputs = run_apps(tb, &exe, r.restart_apps, |app| {
            let mut args = restart_args(a, r, case.seed);
            args.extend(["--app".to_string(), app.to_string()]);
            args
        })?;
        outputs.iter().map(|text| parse_restart(text)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_lines_give_latencies_throughputs_and_failures() {
        let seen =
            parse_app("ok 0.5 70.1 0\nfail /app0/ckpt_00001.dat: No space left on device\nok 1.25 60 1\n").unwrap();
        assert_eq!(seen.latencies, [0.5, 1.25]);
        assert_eq!(seen.mbps, [70.1, 60.0]);
        assert_eq!(seen.periods, [0, 1]);
        assert_eq!(seen.failures, ["/app0/ckpt_00001.dat: No space left on device"]);
        for bad in ["ok 0.5\n", "ok 0.5 70.1\n", "ok 0.5 70.1 -1\n"] {
            let err = parse_app(bad).err().unwrap();
            assert!(err.contains("unexpected application output"), "{err}");
        }
    }

    #[test]
    fn a_tally_line_needs_all_five_figures() {
        let t = parse_tally("tally 1048576 2 3 1 4").unwrap();
        assert_eq!((t.demoted_bytes, t.pending_bytes, t.direct_bytes, t.infeasible, t.hits), (1 << 20, 2, 3, true, 4));
        assert!(parse_tally("tally 1 2 3").err().unwrap().contains("unexpected tally output"));
        assert!(parse_tally("").is_err());
    }

    #[test]
    fn a_restart_line_needs_the_restarts_and_the_hits() {
        assert_eq!(parse_restart("restarts 7 3\n").unwrap(), bbos_restarts::Tally { restarts: 7, hits: 3 });
        assert!(parse_restart("restarts 7").err().unwrap().contains("unexpected restart application output"));
        assert!(parse_restart("ok 0.5 70").is_err());
    }
}
