//! Every resource of a daemon is bounded against floods: request bodies
//! left one byte short on many connections hold no more memory than
//! `--max-body-memory`, and a client is still served meanwhile; 10,000 idle
//! connections to the metrics port take a few descriptors, not the file
//! service's; a daemon out of descriptors backs off accepting, and serves
//! again once they are free.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::WriteReply;
use surge_proto::{frame, Attr, Encoder, Errno, Layout, Op, Request};

const MIB: usize = 1 << 20;

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    kb.trim().trim_end_matches("kB").trim().parse::<usize>().unwrap() * 1024
}

/// A `Write` frame of `len` data bytes, whole.
fn write_frame(ino: u64, len: usize) -> Vec<u8> {
    let data = vec![7; len];
    let mut head = Encoder::new();
    let bulk = Request::Write { ino, offset: 0, data: &data }.encode(&mut head);
    let mut wire = Vec::new();
    frame::write_request(&mut wire, Op::Write as u8, 1, 7, len as u64, &head.buf, bulk).unwrap();
    wire
}

#[test]
fn bodies_left_one_byte_short_on_many_connections_hold_at_most_the_budget_and_a_client_is_served() {
    let f = Fixture::new();
    let budget = 64 * MIB;
    let d = f.spawn(0, 1, &["--max-body-memory", &budget.to_string()]);
    let pid = d.child.id();
    let mut c = d.client(&f);
    let layout = Layout { stripe_count: 1, stripe_size: 4 << 20, first: 0 };
    let attr: Attr =
        c.ok(&Request::Open { path: "/served", flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    let before = rss(pid);

    // 30 connections, each sending all but the last byte of an 8 MiB write:
    // 240 MiB the daemon would hold until their frames time out.
    let wire = std::sync::Arc::new(write_frame(1000, 8 * MIB));
    let (stop, stopped) = mpsc::channel::<()>();
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(stopped));
    let (sent, all_sent) = mpsc::channel::<()>();
    let flood: Vec<_> = (0..30)
        .map(|_| {
            let (addr, secret, stopped, wire, sent) =
                (d.addr, f.secret.clone(), stopped.clone(), wire.clone(), sent.clone());
            thread::spawn(move || {
                let conn = Client::authenticated(addr, &secret);
                let mut stream: &TcpStream = &conn.stream;
                // Refused bodies are read and thrown away: the write completes either way.
                let _ = stream.write_all(&wire[..wire.len() - 1]);
                let _ = sent.send(());
                let _ = stopped.lock().unwrap().recv();
                drop(conn);
            })
        })
        .collect();
    let (started, mut peak, mut landed) = (Instant::now(), 0, 0);
    while landed < 30 && started.elapsed() < Duration::from_secs(30) {
        peak = peak.max(rss(pid));
        landed += all_sent.try_iter().count();
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(landed, 30, "every flooding body was read or skipped");
    eprintln!(
        "figures: 30 connections each 1 byte short of an 8 MiB write: daemon RSS {} MiB before, peak {} MiB \
         (budget {} MiB)",
        before / MIB,
        peak / MIB,
        budget / MIB
    );
    assert!(peak > before + 16 * MIB, "the flood held some memory: {peak} bytes");
    assert!(peak < before + budget + 24 * MIB, "RSS rose from {before} to {peak} bytes");

    // Meanwhile a client's pieces (at most 256 KiB) are served...
    let data = surge_testkit::pattern(5, 256 << 10);
    let reply: WriteReply = c.ok(&Request::Write { ino: attr.ino, offset: 0, data: &data });
    assert_eq!(reply.written, data.len() as u64);
    assert_eq!(c.read(&Request::Read { ino: attr.ino, offset: 0, len: data.len() as u32 }), data);
    // ...and a large body that finds no room is refused, saying why.
    // (Five 8 MiB bodies fit in the 48 MiB large bodies may take: 8 MiB are left.)
    let large = surge_testkit::pattern(6, 12 * MIB);
    let refused = c.call(&Request::Write { ino: attr.ino, offset: 0, data: &large });
    let message = refused.message();
    assert_eq!(refused.errno(), Some(Errno(libc::EAGAIN)), "{message}");
    assert!(message.contains("--max-body-memory"), "{message}");
    let _: WriteReply = c.ok(&Request::Write { ino: attr.ino, offset: 0, data: &data });

    drop(stop);
    flood.into_iter().for_each(|t| t.join().unwrap());
    // The flood gone, large bodies fit again.
    surge_testkit::eventually("the flood's room given back", Duration::from_secs(10), || {
        c.call(&Request::Write { ino: attr.ino, offset: 0, data: &large }).errno().is_none()
    });
}

/// The clock ticks process `pid` ran, in user and kernel mode.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name, which ends with the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The descriptors process `pid` holds open.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// A file written and read back whole over a new connection: the file service works.
fn file_service_works(d: &Daemon, f: &Fixture, path: &str) {
    let mut c = d.client(f);
    let layout = Layout { stripe_count: 1, stripe_size: 4 << 20, first: 0 };
    let attr: Attr = c.ok(&Request::Open { path, flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    let data = surge_testkit::pattern(attr.ino, MIB);
    write_object(&mut c, attr.ino, &data);
    assert!(c.read(&Request::Read { ino: attr.ino, offset: 0, len: MIB as u32 }) == data, "{path} reads back whole");
}

/// The status line of a `GET /metrics` to `addr`, if one came back within 5 s.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_string)
}

#[test]
fn ten_thousand_idle_connections_to_the_metrics_port_leave_the_file_service_alone_and_the_endpoint_recovers() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--metrics", "127.0.0.1:0"]);
    let log = d.log();
    let at = log.split("serving metrics on http://").nth(1).and_then(|rest| rest.split('/').next());
    let metrics: SocketAddr = at.unwrap_or_else(|| panic!("no metrics address in the log:\n{log}")).parse().unwrap();
    let pid = d.child.id();
    assert_eq!(scrape(metrics).as_deref(), Some("HTTP/1.1 200 OK"));

    let started = Instant::now();
    let idle: Vec<TcpStream> =
        (0..10_000).filter_map(|_| TcpStream::connect_timeout(&metrics, Duration::from_millis(200)).ok()).collect();
    let held = open_descriptors(pid);
    eprintln!(
        "figures: {} idle connections to the metrics port in {:.1?}; the daemon holds {held} descriptors",
        idle.len(),
        started.elapsed()
    );
    assert!(idle.len() > 5_000, "only {} connections were made", idle.len());
    assert!(held < 100, "the daemon holds {held} descriptors");
    file_service_works(&d, &f, "/during");
    // The oldest idle connections give way to a scraper.
    surge_testkit::eventually("a scrape during the flood", Duration::from_secs(20), || {
        scrape(metrics).as_deref() == Some("HTTP/1.1 200 OK")
    });

    drop(idle);
    surge_testkit::eventually("a scrape after the flood", Duration::from_secs(10), || {
        scrape(metrics).as_deref() == Some("HTTP/1.1 200 OK")
    });
    file_service_works(&d, &f, "/after");
}

#[test]
fn out_of_descriptors_a_daemon_backs_off_accepting_logs_once_and_serves_again_once_they_are_free() {
    let f = Fixture::new();
    let d = f.spawn_with(0, 1, &["--handshake-timeout", "60"], |cmd| {
        // SAFETY: setrlimit is async-signal-safe; only this child's limits change.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit { rlim_cur: 64, rlim_max: 64 };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
    });
    let pid = d.child.id();
    // Connections that never authenticate, until the daemon has no descriptor left for them.
    let strangers: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(d.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_secs(1));
    let (ticks, watched) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let spent = cpu_ticks(pid) - ticks;
    let failures = d.log().matches("accepting a connection failed").count();
    eprintln!("figures: out of descriptors, the daemon ran {spent} clock ticks in {:.1?}", watched.elapsed());
    // Once, and again only if a descriptor freed for a moment let one connection in.
    assert!((1..=3).contains(&failures), "logged {failures} times, not once per try:\n{}", d.log());
    assert!(spent < 30, "{spent} clock ticks in 3 s: accepting spins");

    // Waiting at most 2 s between tries, it takes the next connection.
    drop(strangers);
    file_service_works(&d, &f, "/after");
    assert!(d.log().contains("accepting connections again"), "{}", d.log());
}
