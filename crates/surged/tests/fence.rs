//! The fence on a real `surged` process: a retired inode's objects refuse
//! every write, read and truncate with ESTALE, across a crash and restart,
//! until reinstated; a removed file's objects are retired by the deleter
//! once its holders closed it, so a client that uses them after that gets
//! ESTALE instead of zeros.

mod common;

use common::{Daemon, Fixture};
use std::time::Duration;
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::{AllocateMode, ObjListReply, ObjStatReply, Removed, WriteReply};
use surge_proto::{Attr, Errno, Layout, Request};
use surge_testkit::wire::Client;

/// Creates `path` on the one-daemon cluster and writes `data` to it.
fn file_with(c: &mut Client, path: &str, data: &[u8]) -> u64 {
    let attr: Attr =
        c.ok(&Request::Open { path, flags: CREATE | WRITE, mode: 0o644, layout: Layout::INHERIT, local: vec![] });
    let _: WriteReply = c.ok(&Request::Write { ino: attr.ino, offset: 0, data });
    attr.ino
}

/// The errno of each of a write, a read, a stat, a truncate, a seek and a
/// preallocation of `ino` (`None`: it worked).
fn object_use(c: &mut Client, ino: u64) -> [Option<Errno>; 6] {
    [
        Request::Write { ino, offset: 2, data: b"xy" },
        Request::Read { ino, offset: 0, len: 16 },
        // Not the size 0 a deleted object would give.
        Request::ObjStat { ino },
        Request::ObjTruncate { ino, len: 4 },
        // Not the holes of a deleted object.
        Request::ObjSeek { ino, offset: 0, hole: true },
        Request::ObjAllocate { ino, offset: 0, len: 4096, mode: AllocateMode::Preallocate },
    ]
    .map(|req| c.call(&req).errno())
}

const REFUSED: [Option<Errno>; 6] = [Some(Errno(libc::ESTALE)); 6];

fn restart(f: &Fixture, daemon: &mut Daemon) -> Client {
    daemon.kill9();
    *daemon = f.spawn(0, 1, &[]);
    // Retiring is daemon 0's: the tests send it as a peer.
    daemon.peer(f)
}

#[test]
fn a_retired_inode_refuses_its_objects_use_across_a_restart_until_reinstated() {
    let f = Fixture::new();
    let mut daemon = f.spawn(0, 1, &[]);
    let mut c = daemon.peer(&f);
    let ino = file_with(&mut c, "/held", b"0123456789");
    let other = file_with(&mut c, "/other", b"abc");

    let _: () = c.ok(&Request::ObjRetire { ino, checked: false, size: 0, mtime_ns: 0 });
    assert_eq!(object_use(&mut c, ino), REFUSED);
    let (_, message) = c.fails(&Request::Write { ino, offset: 0, data: b"z" });
    assert!(message.contains(&format!("inode {ino} was evicted from the buffer or removed: reopen")), "{message}");
    assert_eq!(object_use(&mut c, other), [None; 6], "other inodes are not fenced");

    let mut c = restart(&f, &mut daemon);
    assert_eq!(object_use(&mut c, ino), REFUSED, "retirement is durable");
    let _: () = c.ok(&Request::ObjReinstate { ino });
    assert_eq!(object_use(&mut c, ino), [None; 6]);
    let mut c = restart(&f, &mut daemon);
    assert_eq!(object_use(&mut c, ino), [None; 6], "reinstatement is durable");
}

#[test]
fn a_checked_retirement_of_an_object_written_since_is_refused_and_leaves_it_writable() {
    let f = Fixture::new();
    let daemon = f.spawn(0, 1, &[]);
    let mut c = daemon.peer(&f);
    let ino = file_with(&mut c, "/busy", b"first");
    let seen: ObjStatReply = c.ok(&Request::ObjStat { ino });
    let _: WriteReply = c.ok(&Request::Write { ino, offset: 0, data: b"again" });

    let stale = Request::ObjRetire { ino, checked: true, size: seen.size, mtime_ns: seen.mtime_ns };
    let (errno, message) = c.fails(&stale);
    assert_eq!(errno, Errno(libc::ESTALE));
    assert!(message.contains("written since"), "{message}");
    assert_eq!(object_use(&mut c, ino), [None; 6]);

    let now: ObjStatReply = c.ok(&Request::ObjStat { ino });
    let _: () = c.ok(&Request::ObjRetire { ino, checked: true, size: now.size, mtime_ns: now.mtime_ns });
    assert_eq!(object_use(&mut c, ino), REFUSED);
}

#[test]
fn a_file_removed_by_another_client_serves_its_holder_until_closed_then_refuses_instead_of_losing_writes() {
    let f = Fixture::new();
    let daemon = f.spawn(0, 1, &[]);
    let mut holder = daemon.client(&f);
    let ino = file_with(&mut holder, "/shared", &[7u8; 8192]);

    let _: Removed = daemon.client(&f).ok(&Request::Unlink { path: "/shared", keep: false });
    assert_eq!(object_use(&mut holder, ino), [None; 6], "the holder's handle keeps the file");
    // The holder's `Close` lets the deleter retire and remove the objects;
    // a use of the inode after that (a client that did not know) is refused.
    let _: () = holder.ok(&Request::Close { ino });
    let mut lister = daemon.peer(&f);
    let mut objects = || -> Vec<u64> {
        let page: ObjListReply = lister.ok(&Request::ObjList { after: 0, max: 0 });
        page.objects.iter().map(|o| o.ino).collect()
    };
    surge_testkit::eventually("the deleter removes the objects", Duration::from_secs(10), || !objects().contains(&ino));
    assert_eq!(object_use(&mut holder, ino), REFUSED);
    assert!(!objects().contains(&ino), "the refused write made no orphan object");
}
