//! The levels of a real `surged` process's log: `--log-level` and
//! `SURGE_LOG` (error, warn, info, debug; info by default), each line
//! still `surged[<index>]: message`.

mod common;

use common::{Client, Fixture};
use std::fs::{self, File};
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;
use surge_proto::{auth, Errno, Request};
use surge_testkit::daemon::wait_registered;
use surge_testkit::eventually;

/// Connects with a wrong secret: refused, which is a warning.
fn refused_auth(addr: std::net::SocketAddr) {
    let mut wrong = Client::connect(addr);
    let hello = wrong.hello();
    let (errno, _) = wrong.fails(&Request::Auth { proof: auth::prove(b"not the secret", &hello.nonce) });
    assert_eq!(errno, Errno::EACCES);
}

#[test]
fn info_is_the_default_debug_adds_connections_and_warn_keeps_only_refusals() {
    let f = Fixture::new();
    let info = f.spawn(0, 1, &[]);
    drop(info.client(&f));
    refused_auth(info.addr);
    eventually("the refusal logged", Duration::from_secs(5), || info.log().contains("surged[0]: refused Auth from"));
    let log = info.log();
    assert!(log.contains("surged[0]: serving on ") && !log.contains("surged[0]: connection from"), "{log}");
    drop(info);

    let debug = f.spawn(0, 1, &["--log-level", "debug"]);
    drop(debug.client(&f));
    eventually("the authentication logged", Duration::from_secs(5), || {
        debug.log().contains("surged[0]: authenticated ")
    });
    assert!(debug.log().contains("surged[0]: connection from 127.0.0.1:"), "{}", debug.log());
    drop(debug);

    let mut warn = f.spawn(0, 1, &["--log-level", "WARN"]);
    refused_auth(warn.addr);
    assert_eq!(warn.client(&f).call(&Request::Shutdown).errno(), None);
    assert!(warn.wait_exit(Duration::from_secs(10)).success());
    let log = warn.log();
    assert!(log.contains("surged[0]: refused Auth from") && log.contains("wrong cluster secret"), "{log}");
    for info_line in ["serving on", "shutdown requested", "stopped"] {
        assert!(!log.contains(info_line), "{info_line:?} is info, not warn:\n{log}");
    }
    assert!(log.lines().all(|l| l.starts_with("surged[0]: ")), "{log}");
}

#[test]
fn surge_log_sets_the_level_and_a_level_that_does_not_exist_is_refused() {
    let f = Fixture::new();
    let out = f.command(0, 1, &[]).env("SURGE_LOG", "loud").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("loud") && err.contains("error, warn, info, debug"), "{err}");

    // At `error`, a daemon that starts, serves and stops cleanly writes nothing.
    let log = f.path("quiet.log");
    let mut child = f.command(0, 1, &[]).env("SURGE_LOG", "error").stderr(File::create(&log).unwrap()).spawn().unwrap();
    let read_log = || fs::read_to_string(&log).unwrap_or_default();
    let served = panic::catch_unwind(AssertUnwindSafe(|| {
        let entry = wait_registered(&f.registrations(), 0, &mut child, read_log);
        let mut client = Client::authenticated(entry.addr.parse().unwrap(), &f.secret);
        assert_eq!(client.call(&Request::Shutdown).errno(), None);
        eventually("the daemon exits", Duration::from_secs(10), || child.try_wait().unwrap().is_some());
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(failed) = served {
        panic::resume_unwind(failed);
    }
    assert_eq!(read_log(), "");
}

/// The log on a full device (stderr on /dev/full: every write fails with
/// ENOSPC): the lines are lost, the daemon neither panics nor stops serving.
#[test]
fn a_log_that_cannot_be_written_loses_its_lines_and_the_daemon_keeps_serving() {
    let f = Fixture::new();
    let full = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let mut child = f.command(0, 1, &["--log-level", "debug"]).stderr(full).spawn().unwrap();
    let served = panic::catch_unwind(AssertUnwindSafe(|| {
        let entry = wait_registered(&f.registrations(), 0, &mut child, || "(the log is /dev/full)".into());
        let addr = entry.addr.parse().unwrap();
        // A refusal (warn), connections (debug) and requests, each logged into a full device.
        refused_auth(addr);
        let mut client = Client::authenticated(addr, &f.secret);
        client.ok::<surge_proto::msg::WriteReply>(&Request::Write { ino: 7, offset: 0, data: b"logged nowhere" });
        assert_eq!(client.call(&Request::Status).errno(), None, "the daemon stopped serving");
        assert_eq!(client.call(&Request::Shutdown).errno(), None);
        eventually("the daemon exits", Duration::from_secs(10), || child.try_wait().unwrap().is_some());
    }));
    let _ = child.kill();
    let status = child.wait().unwrap();
    if let Err(failed) = served {
        panic::resume_unwind(failed);
    }
    assert!(status.success(), "the daemon ended with {status} (101: a panic) on a log it cannot write");
}
