//! What another local user can and cannot do to a daemon: take over its
//! directories, plant symlinks, forge log lines, or lock clients out; and
//! what a client holding the cluster secret cannot do: send the operations
//! only daemons send each other.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::ObjListReply;
use surge_proto::{auth, Attr, Errno, Layout, Op, Request};

fn mode_of(path: &std::path::Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o777
}

/// Runs a daemon that must refuse to start; its exit code and stderr. One
/// that serves instead is killed after a while (its exit code is then `None`).
fn run(cmd: &mut Command) -> (Option<i32>, String) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_buffer_directory_others_may_write_to_or_another_user_owns_is_refused() {
    let f = Fixture::new();
    fs::create_dir_all(f.buffer(0)).unwrap();
    fs::set_permissions(f.buffer(0), fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = run(&mut f.command(0, 1, &[]));
    assert_eq!(code, Some(1), "{err}");
    let shown = f.buffer(0).display().to_string();
    assert!(err.contains("buffer directory") && err.contains(&shown) && err.contains("mode 777"), "{err}");
    assert!(!f.buffer(0).join("objects").exists(), "the daemon used the directory anyway");

    if unsafe { libc::geteuid() } == 0 {
        fs::set_permissions(f.buffer(0), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(f.buffer(0), Some(65534), None).unwrap();
        let (code, err) = run(&mut f.command(0, 1, &[]));
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("owner uid 65534") && err.contains("another user owns it"), "{err}");
    }
}

#[test]
fn the_daemons_directories_are_0700_and_its_files_0600() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    drop(d.client(&f));
    for dir in
        [f.path("buffer"), f.buffer(0), f.buffer(0).join("objects"), f.buffer(0).join("objects/00"), f.registrations()]
    {
        assert_eq!(mode_of(&dir), 0o700, "{}", dir.display());
    }
    for file in [f.buffer(0).join("namespace.redb"), f.buffer(0).join("LOCK"), f.registrations().join("daemon-0.toml")]
    {
        assert_eq!(mode_of(&file), 0o600, "{}", file.display());
    }
}

#[test]
fn a_symlinked_namespace_database_is_not_followed() {
    let f = Fixture::new();
    fs::create_dir_all(f.buffer(0)).unwrap();
    let victim = f.path("victim");
    fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, f.buffer(0).join("namespace.redb")).unwrap();
    let (code, err) = run(&mut f.command(0, 1, &[]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read(&victim).unwrap(), b"keep me");
}

#[test]
fn a_hello_with_control_characters_is_logged_escaped_on_one_line() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    let mut c = Client::connect(d.addr);
    let forged = "job\nsurged[0]: forged line\x1b[2J";
    let hello: surge_proto::msg::HelloReply =
        c.ok(&Request::Hello { client: forged, job_label: "", pid: 7, host: "host\r\nx", instance: 1 });
    let wrong = auth::prove(b"not the secret at all", &hello.nonce);
    assert!(c.call(&Request::Auth { proof: wrong }).errno().is_some());
    assert!(c.is_closed());
    let log = d.log();
    let refusal: Vec<&str> = log.lines().filter(|l| l.contains("wrong cluster secret")).collect();
    assert_eq!(refusal.len(), 1, "{log}");
    assert!(refusal[0].contains(r#""job\nsurged[0]: forged line\u{1b}[2J" pid 7 on "host\r\nx""#), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("surged[0]: forged")), "{log}");
    assert!(!log.contains('\x1b'), "{log}");
}

#[test]
fn idle_strangers_cannot_keep_authenticated_clients_out() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--max-connections", "4"]);
    let mut before = d.client(&f);
    // Far more idle connections than the daemon keeps for strangers (and
    // than --max-connections): none of them ever says Hello.
    let idle: Vec<std::net::TcpStream> = (0..200).map(|_| std::net::TcpStream::connect(d.addr).unwrap()).collect();
    before.ok::<surge_proto::msg::DaemonStatus>(&Request::Status);
    let mut after = d.client(&f);
    // Strangers dropped to make room finish closing on their own threads:
    // poll until the count settles under the strangers' limit plus ours.
    surge_testkit::eventually(
        "fewer than 100 connections open (the idle ones limited)",
        Duration::from_secs(10),
        || after.ok::<surge_proto::msg::DaemonStatus>(&Request::Status).connections < 100,
    );
    drop(idle);
}

#[test]
fn a_client_over_the_connection_limit_is_told_the_daemon_is_busy() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--max-connections", "2"]);
    let _first = d.client(&f);
    let mut second = Client::connect(d.addr);
    let hello = second.hello();
    let _third = d.client(&f); // takes the last slot while `second` authenticates
    let answer = second.call(&Request::Auth { proof: auth::prove(&f.secret, &hello.nonce) });
    assert_eq!(answer.errno(), Some(surge_proto::Errno(libc::EAGAIN)), "{}", answer.message());
    assert!(answer.message().contains("daemon 0 busy: too many connections (limit 2)"), "{}", answer.message());
    assert!(second.is_closed());

    // Refused at once when the limit is reached before the handshake, with
    // a reply that names no request (docs/protocol.md).
    let mut late = Client::connect(d.addr);
    let answer = late.recv().unwrap();
    assert_eq!((answer.header.op, answer.header.request_id), (0, 0));
    assert!(answer.message().contains("daemon 0 busy: too many connections (limit 2)"), "{}", answer.message());
}

#[test]
fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--handshake-timeout", "1"]);
    let mut silent = Client::connect(d.addr);
    let mut greeted = Client::connect(d.addr);
    greeted.hello();
    let started = Instant::now();
    for c in [&mut silent, &mut greeted] {
        let answer = c.recv().unwrap();
        assert_eq!(answer.errno(), Some(surge_proto::Errno(libc::ETIMEDOUT)), "{}", answer.message());
        assert!(answer.message().contains("not authenticated within 1 s"), "{}", answer.message());
        assert!(c.is_closed());
    }
    assert!(started.elapsed() < Duration::from_secs(4), "closed after {:?}", started.elapsed());
    // An authenticated connection may stay idle for longer.
    let mut idle = d.client(&f);
    std::thread::sleep(Duration::from_millis(1500));
    idle.ok::<surge_proto::msg::DaemonStatus>(&Request::Status);
}

#[test]
fn a_client_is_refused_every_peer_operation_with_eperm_and_nothing_changes() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);
    let layout = Layout { stripe_count: 1, stripe_size: 4 << 20, first: 0 };
    let attr: Attr = c.ok(&Request::Open { path: "/kept", flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    let (ino, data) = (attr.ino, surge_testkit::pattern(3, 3 << 20));
    write_object(&mut c, ino, &data);

    // Each would do harm if served: every file marked lost, a file made
    // ESTALE for good, its bytes gone, every job's writes held to 1,000 B/s.
    let peer_ops = [
        Request::MarkLost { daemon: 0, whole: true, inos: Vec::new() },
        Request::ObjRetire { ino, checked: false, size: 0, mtime_ns: 0 },
        Request::ObjReinstate { ino },
        Request::ObjRemove { ino },
        Request::DrainTick { checkpoint_bps: 1000, demote_bps: 1000, direct_bps: 1000, wait_for_space_ms: 60_000 },
        Request::ObjList { after: 0, max: 0 },
    ];
    let mut sent: Vec<Op> = peer_ops.iter().map(Request::op).collect();
    sent.sort_by_key(|op| *op as u8);
    let peer_only: Vec<Op> = Op::ALL.iter().copied().filter(|op| op.is_peer_only()).collect();
    assert_eq!(sent, peer_only, "every peer operation is tried here");
    for req in &peer_ops {
        let (errno, message) = c.fails(req);
        assert_eq!(errno, Errno(libc::EPERM), "{req:?}: {message}");
        assert!(message.contains("only by the cluster's daemons"), "{message}");
    }

    let mut back = Vec::new();
    while back.len() < data.len() {
        let answer = c.call(&Request::Read { ino, offset: back.len() as u64, len: 1 << 20 });
        assert_eq!(answer.errno(), None, "{}", answer.message());
        assert!(!answer.body.is_empty(), "the object ends at {} bytes", back.len());
        back.extend_from_slice(&answer.body);
    }
    assert!(back == data, "the file reads back whole");
    let started = Instant::now();
    write_object(&mut c, ino, &surge_testkit::pattern(4, 4 << 20));
    assert!(started.elapsed() < Duration::from_secs(3), "writes are not paced: {:?}", started.elapsed());
    let refusals = d.log().matches("only by the cluster's daemons").count();
    assert_eq!(refusals, 1, "logged once per connection:\n{}", d.log());

    // The daemons' own connections are served.
    let page: ObjListReply = d.peer(&f).ok(&Request::ObjList { after: 0, max: 0 });
    assert!(page.objects.iter().any(|o| o.ino == ino));
}
