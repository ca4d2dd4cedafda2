//! Every resource of a daemon is bounded against floods: request bodies
//! left one byte short on many connections hold no more memory than
//! `--max-body-memory`, and a client is still served meanwhile.

mod common;

use common::*;
use std::io::Write;
use std::net::TcpStream;
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
    let attr: Attr = c.ok(&Request::Open { path: "/served", flags: CREATE | WRITE, mode: 0o644, layout });
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
