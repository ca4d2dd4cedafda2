//! The network front of a real `surged` process: handshake, malformed
//! frames, limits, status, shutdown and start-up errors.

mod common;

use common::{Client, Fixture};
use std::io::Write;
use std::time::{Duration, Instant};
use surge_proto::frame::{self, RequestHeader};
use surge_proto::msg::{DaemonStatus, Op, WriteReply};
use surge_proto::{auth, Errno, Request};

fn status_works(client: &mut Client) {
    let status: DaemonStatus = client.ok(&Request::Status);
    assert_eq!(status.index, 0);
}

#[test]
fn handshake_accepts_the_secret_and_refuses_everything_else() {
    let f = Fixture::new();
    let d = f.spawn(0, 2, &[]);

    let mut good = Client::connect(d.addr);
    let hello = good.hello();
    assert_eq!((hello.daemon_index, hello.daemon_count, hello.cluster_id.as_str()), (0, 2, "test-cluster"));
    let answer = good.call(&Request::Auth { proof: auth::prove(&f.secret, &hello.nonce) });
    assert_eq!(answer.errno(), None);
    status_works(&mut good);

    let mut wrong = Client::connect(d.addr);
    let hello = wrong.hello();
    let (errno, message) = wrong.fails(&Request::Auth { proof: auth::prove(b"not the secret", &hello.nonce) });
    assert_eq!((errno, message.as_str()), (Errno::EACCES, "wrong cluster secret"));
    assert!(wrong.is_closed());

    let mut early = Client::connect(d.addr);
    let (errno, message) = early.fails(&Request::Stat { path: "/" });
    assert_eq!((errno, message.as_str()), (Errno::EACCES, "authentication required"));
    assert!(early.is_closed());

    // A proof for another connection's nonce does not work either.
    let mut replay = Client::connect(d.addr);
    replay.hello();
    let (errno, _) = replay.fails(&Request::Auth { proof: auth::prove(&f.secret, &hello.nonce) });
    assert_eq!(errno, Errno::EACCES);

    let mut skip_hello = Client::connect(d.addr);
    assert_eq!(skip_hello.fails(&Request::Auth { proof: [0; 32] }).0, Errno::EACCES);

    // A big request before authentication is refused before it is read.
    let mut big = Client::connect(d.addr);
    big.send_raw(Op::Write as u8, &[0; 16], &vec![0; 1 << 20]).unwrap_or_default();
    let answer = big.recv().unwrap();
    assert_eq!(answer.errno(), Some(Errno::EACCES), "{}", answer.message());

    status_works(&mut good);
    let log = d.log();
    assert!(log.contains("surged[0]: refused Auth from") && log.contains("wrong cluster secret"), "{log}");
}

#[test]
fn malformed_frames_close_only_their_own_connection() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--max-frame", "1048576"]);
    let mut bystander = d.client(&f);
    let mut good_header = [0u8; 40];
    good_header.copy_from_slice(
        &RequestHeader { op: Op::Stat as u8, body_len: 0, request_id: 9, job_id: 1, io_size: 0, body_crc: 0 }.encode(),
    );

    // (what, how to send it, the error reply expected before the close)
    type Case = (&'static str, Box<dyn Fn(&mut Client)>, Option<Errno>);
    let cases: Vec<Case> = vec![
        ("garbage", Box::new(|c| c.stream.write_all(&[b'x'; 64]).unwrap()), Some(Errno::EPROTO)),
        (
            "bad magic",
            Box::new(move |c| {
                let mut h = good_header;
                h[0] = b'Z';
                c.stream.write_all(&h).unwrap();
            }),
            Some(Errno::EPROTO),
        ),
        (
            "bad version",
            Box::new(move |c| {
                let mut h = good_header;
                h[2] = 99;
                c.stream.write_all(&h).unwrap();
            }),
            Some(Errno::EPROTO),
        ),
        (
            "oversize body",
            Box::new(|c| {
                let hdr = RequestHeader {
                    op: Op::Write as u8,
                    body_len: (1 << 20) + 1,
                    request_id: 1,
                    job_id: 1,
                    io_size: 0,
                    body_crc: 0,
                };
                c.stream.write_all(&hdr.encode()).unwrap();
            }),
            Some(Errno::EMSGSIZE),
        ),
        ("unknown opcode", Box::new(|c| drop(c.send_raw(0x7f, b"", b""))), Some(Errno::ENOSYS)),
        (
            "bad crc",
            Box::new(|c| {
                let body = b"\x01\x00\x00\x00/";
                let hdr = RequestHeader {
                    op: Op::Stat as u8,
                    body_len: body.len() as u32,
                    request_id: 1,
                    job_id: 1,
                    io_size: 0,
                    body_crc: crc32c::crc32c(body) ^ 1,
                };
                frame::write_frame(&mut c.stream, &hdr.encode(), body, b"").unwrap();
            }),
            Some(Errno::EIO),
        ),
        ("undecodable body", Box::new(|c| drop(c.send_raw(Op::Stat as u8, b"\xff\xff", b""))), Some(Errno::EPROTO)),
        (
            "truncated frame",
            Box::new(move |c| {
                c.stream.write_all(&good_header[..17]).unwrap();
                c.close_write();
            }),
            None,
        ),
    ];
    for (name, send, errno) in cases {
        let mut victim = d.client(&f);
        send(&mut victim);
        if let Some(errno) = errno {
            let answer = victim.recv().unwrap_or_else(|e| panic!("{name}: no error reply: {e}"));
            assert_eq!(answer.errno(), Some(errno), "{name}: {}", answer.message());
            assert!(!answer.message().is_empty(), "{name}");
        }
        assert!(victim.is_closed(), "{name}: connection left open");
        status_works(&mut bystander);
    }
    // A normal file-system error keeps the connection.
    let (errno, _) = bystander.fails(&Request::Stat { path: "/missing" });
    assert_eq!(errno, Errno::ENOENT);
    status_works(&mut bystander);
    assert!(d.log().contains("closing connection from"), "{}", d.log());
}

#[test]
fn a_stalled_frame_times_out_but_an_idle_connection_stays() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--frame-timeout", "1"]);
    let mut idle = d.client(&f);
    let mut stalled = d.client(&f);
    let started = Instant::now();
    stalled.stream.write_all(b"SG\x01\x11").unwrap();
    let answer = stalled.recv().unwrap();
    assert_eq!(answer.errno(), Some(Errno(libc::ETIMEDOUT)), "{}", answer.message());
    assert!(started.elapsed() >= Duration::from_millis(900) && started.elapsed() < Duration::from_secs(5));
    assert!(stalled.is_closed());
    std::thread::sleep(Duration::from_millis(300)); // idle for longer than the frame timeout overall
    status_works(&mut idle);
}

#[test]
fn connections_beyond_the_limit_are_refused_until_one_ends() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--max-connections", "2"]);
    let mut first = d.client(&f);
    let second = d.client(&f);
    let mut third = Client::connect(d.addr);
    let answer = third.recv().unwrap();
    assert_eq!(answer.errno(), Some(Errno(libc::EAGAIN)), "{}", answer.message());
    assert!(third.is_closed());
    status_works(&mut first);
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = Client::connect(d.addr);
        c.send(&Request::Hello { client: "t", job_label: "", pid: 1, host: "h", instance: 1 });
        // Until the slot is free, the refusal may also come as a closed connection.
        if c.recv().is_ok_and(|hello| hello.errno().is_none()) {
            break;
        }
        assert!(Instant::now() < deadline, "the freed connection slot was not reused");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn namespace_requests_go_to_daemon_0_and_status_reports_the_daemon() {
    let f = Fixture::new();
    let d0 = f.spawn(0, 2, &[]);
    let d1 = f.spawn(1, 2, &["--capacity", "123456789"]);
    let mut c1 = d1.client(&f);
    let (errno, message) = c1.fails(&Request::Stat { path: "/" });
    assert_eq!((errno, message.as_str()), (Errno::EINVAL, "namespace requests go to daemon 0"));
    let (errno, _) = c1.fails(&Request::Hold { inos: vec![5] });
    assert_eq!(errno, Errno::EINVAL, "only daemon 0 counts held files");
    c1.ok::<WriteReply>(&Request::Write { ino: 5, offset: 0, data: b"hello" });
    let s1: DaemonStatus = c1.ok(&Request::Status);
    // Usage is the blocks the 5 bytes take.
    assert_eq!((s1.index, s1.is_metadata, s1.objects, s1.bytes_used, s1.capacity), (1, false, 1, 4096, 123456789));
    assert_eq!(s1.pid, d1.child.id());
    assert_eq!(s1.connections, 1);
    assert!(s1.requests >= 3 && s1.device_free > 0);
    assert_eq!(std::path::Path::new(&s1.buffer_dir), f.buffer(1).canonicalize().unwrap());

    let mut c0 = d0.client(&f);
    c0.ok::<surge_proto::Attr>(&Request::Mkdir { path: "/d", mode: 0o755 });
    c0.ok::<()>(&Request::Hold { inos: vec![5, 5] });
    let s0: DaemonStatus = c0.ok(&Request::Status);
    assert!(s0.is_metadata);
    assert_eq!((s0.files, s0.dirs), (0, 1));
    assert!(s0.capacity > 0);
}

#[test]
fn shutdown_exits_cleanly_and_removes_the_registration() {
    let f = Fixture::new();
    let mut d = f.spawn(0, 1, &[]);
    let mut other = d.client(&f);
    let mut c = d.client(&f);
    assert_eq!(c.call(&Request::Shutdown).errno(), None);
    let status = d.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}\n{}", d.log());
    assert!(other.is_closed());
    assert!(surge_cluster::registrations(&f.registrations()).is_empty());
    let log = d.log();
    assert!(log.contains("surged[0]: shutdown requested by") && log.contains("surged[0]: stopped"), "{log}");
    // The directories are free again: the same daemon starts on them.
    let mut again = f.spawn(0, 1, &[]);
    drop(again.client(&f));
    again.kill9();
}

#[test]
fn bad_arguments_and_unusable_directories_fail_with_a_clear_message() {
    let f = Fixture::new();
    let running = f.spawn(0, 1, &[]);
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.stderr(std::process::Stdio::piped()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&mut f.command(0, 1, &[]));
    assert_eq!(code, Some(1));
    assert!(err.contains("is in use by another surged") && err.contains(&running.child.id().to_string()), "{err}");

    let (code, err) = run(&mut f.command(3, 2, &[]));
    assert_eq!(code, Some(2));
    assert!(err.contains("index 3 is not in 0..2"), "{err}");

    let (code, err) = run(&mut f.command(1, 2, &["--bogus"]));
    assert_eq!(code, Some(2), "{err}");

    let (code, err) = run(&mut f.command(1, 2, &["--stripe-size", "1000"]));
    assert_eq!(code, Some(2));
    assert!(err.contains("64 KiB"), "{err}");

    let missing = f.path("no-such-pfs");
    let (code, err) = run(&mut f.command(1, 2, &["--pfs", missing.to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot use PFS directory") && err.contains("no-such-pfs"), "{err}");

    let (code, err) = run(&mut f.command(1, 2, &["--listen", "0.0.0.0:0"]));
    assert_eq!(code, Some(2));
    assert!(err.contains("--advertise"), "{err}");

    let loose = f.path("loose-secret");
    std::fs::write(&loose, hex_secret()).unwrap();
    let (code, err) = run(&mut f.command(1, 2, &["--secret-file", loose.to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(err.contains("chmod 600"), "{err}");

    let help = std::process::Command::new(env!("CARGO_BIN_EXE_surged")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--frame-timeout", "--max-connections", "--stripe-count", "--advertise", "--capacity"] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

fn hex_secret() -> String {
    "ab".repeat(32)
}
