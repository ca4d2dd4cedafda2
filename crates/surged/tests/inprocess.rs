//! The library API: daemons started in this process with `surged::start`.

mod common;

use common::{Client, Fixture};
use std::time::Duration;
use surge_proto::msg::DaemonStatus;
use surge_proto::{Attr, Request};
use surged::{DaemonConfig, StartError};

fn config(f: &Fixture, index: u32, daemons: u32) -> DaemonConfig {
    DaemonConfig {
        register_dir: Some(f.registrations()),
        frame_timeout: Duration::from_secs(2),
        ..DaemonConfig::new(index, daemons, f.buffer(index), f.pfs(), f.path("secret"), &f.cluster_id)
    }
}

#[test]
fn daemons_start_serve_and_stop_in_process() {
    let f = Fixture::new();
    let d0 = surged::start(config(&f, 0, 2)).unwrap();
    let d1 = surged::start(config(&f, 1, 2)).unwrap();
    let registered = surge_cluster::registrations(&f.registrations());
    assert_eq!(registered.len(), 2);
    assert_eq!(registered[0].addr, d0.addr().to_string());
    assert_eq!(registered[1].pid, std::process::id());

    match surged::start(config(&f, 1, 2)) {
        Err(StartError::BufferInUse { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
        Err(other) => panic!("expected BufferInUse, got {other}"),
        Ok(_) => panic!("two daemons on one buffer directory"),
    }

    let mut c0 = Client::authenticated(d0.addr(), &f.secret);
    c0.ok::<Attr>(&Request::Mkdir { path: "/d", mode: 0o755 });
    let mut c1 = Client::authenticated(d1.addr(), &f.secret);
    let status: DaemonStatus = c1.ok(&Request::Status);
    assert_eq!((status.index, status.is_metadata), (1, false));

    // A Shutdown request stops daemon 1; `wait` returns once it is down.
    assert_eq!(c1.call(&Request::Shutdown).errno(), None);
    d1.wait();
    assert!(c1.is_closed());
    let left = surge_cluster::registrations(&f.registrations());
    assert_eq!(left.iter().map(|e| e.index).collect::<Vec<_>>(), [0]);

    // `shutdown` from the owner ends open connections too.
    d0.shutdown();
    d0.wait();
    assert!(c0.is_closed());
    assert!(surge_cluster::registrations(&f.registrations()).is_empty());

    // Both directories are free again and the namespace is intact.
    let d0 = surged::start(config(&f, 0, 2)).unwrap();
    let mut c0 = Client::authenticated(d0.addr(), &f.secret);
    assert_eq!(c0.ok::<Attr>(&Request::Stat { path: "/d" }).kind, surge_proto::FileKind::Dir);
}

#[test]
fn settings_are_checked_before_anything_is_touched() {
    let f = Fixture::new();
    let bad = DaemonConfig {
        root_layout: surge_proto::Layout { stripe_count: 5, ..surge_proto::Layout::ROOT_DEFAULT },
        ..config(&f, 0, 2)
    };
    assert!(matches!(surged::start(bad), Err(StartError::Config(why)) if why.contains("stripe count 5")));
    let bad = DaemonConfig { index: 2, ..config(&f, 0, 2) };
    assert!(matches!(surged::start(bad), Err(StartError::Config(_))));
    let bad = DaemonConfig { conn_rate: Some(0), ..config(&f, 0, 2) };
    assert!(matches!(surged::start(bad), Err(StartError::Config(why)) if why.contains("rate cap must be positive")));
    assert!(!f.buffer(0).exists());
}
