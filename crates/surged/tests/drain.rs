//! The data manager (BBOS, docs/bbos.md) of a real `surged`: its flags,
//! `DrainStatus` and `SetMtbf`.

mod common;

use common::Fixture;
use surge_proto::drain::DrainReport;
use surge_proto::{Errno, Request};

#[test]
fn drain_flags_with_bad_values_stop_the_daemon_with_a_clear_message() {
    let f = Fixture::new();
    let run = |extra: &[&str]| {
        let out = f.command(0, 1, extra).stderr(std::process::Stdio::piped()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (extra, says) in [
        (&["--drain", "fastest"][..], "possible values: off, bbos, maxeff, maxbw, dedicated"),
        (&["--drain-period", "0"][..], "--drain-period"),
        (&["--drain-rates", "40,30,16"][..], "BWMAX,BWMIN,BRMAX,BRMIN"),
        (&["--drain-rates", "40,30,1,16"][..], "BRMIN (16 MB/s"),
        (&["--drain-state", "localhost:6379"][..], "redis://127.0.0.1:6379"),
    ] {
        let (code, err) = run(extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?} should say {says:?}:\n{err}");
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_surged")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--drain ", "--drain-period", "--drain-rates", "--drain-state"] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn daemon_0_reports_the_drain_and_takes_mtbfs_and_other_daemons_refuse() {
    let f = Fixture::new();
    let d0 = f.spawn(0, 2, &["--drain-period", "30"]);
    let d1 = f.spawn(1, 2, &[]);
    let mut c0 = d0.client(&f);
    let report: DrainReport = c0.ok(&Request::DrainStatus);
    assert_eq!((report.policy.as_str(), report.period_s), ("off", 30));
    let () = c0.ok(&Request::SetMtbf { job: 42, seconds: 3600 });
    let report: DrainReport = c0.ok(&Request::DrainStatus);
    let app = report.apps.iter().find(|a| a.job == 42).expect("job 42 in the report");
    assert_eq!(app.mtbf_s, 3600);
    let (errno, message) = d1.client(&f).fails(&Request::DrainStatus);
    assert_eq!((errno, message.as_str()), (Errno::EINVAL, "drain status is kept by daemon 0"));
}
