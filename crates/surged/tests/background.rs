//! Daemon 0's background work on real daemons: the deleter removes the
//! objects of removed files (a client that crashes mid-unlink leaves
//! nothing), a kept file waits for its `Release`, a file removed or
//! replaced while another client holds it waits for that client's last
//! close (or its end, or across a restart of daemon 0), the orphan collector
//! deletes objects of no file after the grace period and counts them, and
//! a Shutdown stops the tasks promptly.

mod common;

use common::{object_size, Client, Daemon, Fixture};
use std::time::{Duration, Instant};
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::{DaemonStatus, ObjListReply, Removed, WriteReply};
use surge_proto::{Attr, Errno, Layout, Request};

/// A two-stripe file with `data` written to both of its objects, over raw
/// connections (as a client would, but with no client library to clean
/// up), and closed.
fn file_with_objects(meta: &mut Client, data: &mut [Client], path: &str) -> Attr {
    let layout = Layout { stripe_count: 2, stripe_size: 64 << 10, first: 0 };
    let attr: Attr = meta.ok(&Request::Open { path, flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    for conn in data.iter_mut() {
        let _: WriteReply = conn.ok(&Request::Write { ino: attr.ino, offset: 0, data: b"stripe data" });
    }
    let _: () = meta.ok(&Request::Close { ino: attr.ino });
    attr
}

/// Opens `path` for reading, as a client's handle: daemon 0 counts it until its `Close`.
fn hold(holder: &mut Client, path: &str) -> u64 {
    holder.ok::<Attr>(&Request::Open { path, flags: 0, mode: 0, layout: Layout::INHERIT, local: vec![] }).ino
}

/// Does every stripe of `ino` still read whole?
fn reads_whole(data: &mut [Client], ino: u64) -> bool {
    data.iter_mut().all(|c| c.read(&Request::Read { ino, offset: 0, len: 64 }) == b"stripe data")
}

fn doomed_and_held(meta: &mut Client) -> (u64, u64) {
    let status: DaemonStatus = meta.ok(&Request::Status);
    (status.doomed, status.held)
}

/// Polls `done` until it holds, for at most 20 s.
fn eventually(what: &str, done: impl FnMut() -> bool) {
    surge_testkit::eventually(what, Duration::from_secs(20), done);
}

struct Cluster {
    fixture: Fixture,
    daemons: Vec<Daemon>,
}

impl Cluster {
    /// Two daemons, daemon 0 with `extra` arguments.
    fn start(extra: &[&str]) -> Cluster {
        let fixture = Fixture::new();
        let daemons = vec![fixture.spawn(0, 2, extra), fixture.spawn(1, 2, &[])];
        Cluster { fixture, daemons }
    }

    fn client(&self, index: usize) -> Client {
        self.daemons[index].client(&self.fixture)
    }

    fn clients(&self) -> Vec<Client> {
        (0..self.daemons.len()).map(|i| self.client(i)).collect()
    }
}

#[test]
fn a_client_that_crashes_mid_unlink_leaves_no_objects_behind() {
    let cluster = Cluster::start(&[]);
    let (mut meta, mut data) = (cluster.client(0), cluster.clients());
    let unlinked = file_with_objects(&mut meta, &mut data, "/unlinked");
    let replaced = file_with_objects(&mut meta, &mut data, "/replaced");
    file_with_objects(&mut meta, &mut data, "/mover");
    // The "client" removes both files, then is gone: no ObjRemove ever comes.
    let _: Removed = meta.ok(&Request::Unlink { path: "/unlinked", keep: false });
    let _: Removed = meta.ok(&Request::Rename { from: "/mover", to: "/replaced", keep: false });
    for ino in [unlinked.ino, replaced.ino] {
        for (d, conn) in data.iter_mut().enumerate() {
            eventually(&format!("inode {ino}'s object on daemon {d} deleted"), || object_size(conn, ino) == 0);
        }
    }
    eventually("no removed file left to delete", || meta.ok::<DaemonStatus>(&Request::Status).doomed == 0);
}

#[test]
fn a_file_removed_with_keep_stays_until_its_release() {
    let cluster = Cluster::start(&[]);
    let (mut meta, mut data) = (cluster.client(0), cluster.clients());
    let kept = file_with_objects(&mut meta, &mut data, "/kept");
    let gone = file_with_objects(&mut meta, &mut data, "/gone");
    let _: Removed = meta.ok(&Request::Unlink { path: "/kept", keep: true });
    let _: Removed = meta.ok(&Request::Unlink { path: "/gone", keep: false });
    // The deleter handled what was due (objects first, then the record)...
    eventually("the unkept file's objects deleted", || data.iter_mut().all(|c| object_size(c, gone.ino) == 0));
    eventually("only the kept file left doomed", || doomed_and_held(&mut meta) == (1, 1));
    // ... and left the kept one for its holder.
    assert!(data.iter_mut().all(|c| object_size(c, kept.ino) > 0), "a kept file's objects were deleted");
    let _: () = meta.ok(&Request::Release { ino: kept.ino });
    eventually("the released file's objects deleted", || data.iter_mut().all(|c| object_size(c, kept.ino) == 0));
    eventually("nothing left doomed", || doomed_and_held(&mut meta) == (0, 0));
    // Releasing again (or what was never kept) is harmless.
    let _: () = meta.ok(&Request::Release { ino: kept.ino });
}

#[test]
fn a_file_removed_or_replaced_while_another_client_holds_it_reads_whole_until_its_last_close() {
    let cluster = Cluster::start(&[]);
    let (mut remover, mut data) = (cluster.client(0), cluster.clients());
    let (mut holder, mut killed) = (cluster.client(0), cluster.client(0));
    let unlinked = file_with_objects(&mut remover, &mut data, "/unlinked");
    let replaced = file_with_objects(&mut remover, &mut data, "/cfg");
    file_with_objects(&mut remover, &mut data, "/cfg.tmp");
    assert_eq!(hold(&mut holder, "/unlinked"), unlinked.ino);
    assert_eq!(hold(&mut holder, "/cfg"), replaced.ino);
    assert_eq!(hold(&mut killed, "/cfg"), replaced.ino);
    // The remover has nothing open (no `keep`): daemon 0 knows who holds them.
    let _: Removed = remover.ok(&Request::Unlink { path: "/unlinked", keep: false });
    let _: Removed = remover.ok(&Request::Rename { from: "/cfg.tmp", to: "/cfg", keep: true });
    // A remover that sent `keep` releases what it removed: not while others hold it.
    let _: () = remover.ok(&Request::Release { ino: replaced.ino });
    assert_eq!(doomed_and_held(&mut remover), (2, 2));
    // The deleter had its rounds (it is woken by every removal), and left both.
    std::thread::sleep(Duration::from_millis(500));
    assert!(reads_whole(&mut data, unlinked.ino) && reads_whole(&mut data, replaced.ino));

    let _: () = holder.ok(&Request::Close { ino: unlinked.ino });
    eventually("the unlinked file's objects deleted at its last close", || {
        data.iter_mut().all(|c| object_size(c, unlinked.ino) == 0)
    });
    let _: () = holder.ok(&Request::Close { ino: replaced.ino });
    assert!(reads_whole(&mut data, replaced.ino), "deleted while another client still held it");
    // A client killed while holding it: its connection ends, and its handles with it.
    drop(killed);
    eventually("the replaced file's objects deleted once its last holder was gone", || {
        data.iter_mut().all(|c| object_size(c, replaced.ino) == 0)
    });
    eventually("nothing left doomed", || doomed_and_held(&mut remover) == (0, 0));
}

#[test]
fn a_file_kept_for_its_holder_stays_kept_across_a_restart_of_daemon_0_until_the_holder_closes_it() {
    let mut cluster = Cluster::start(&[]);
    let (mut remover, mut data) = (cluster.client(0), cluster.clients());
    let mut holder = cluster.client(0);
    let file = file_with_objects(&mut remover, &mut data, "/held");
    hold(&mut holder, "/held");
    let _: Removed = remover.ok(&Request::Unlink { path: "/held", keep: false });
    // What a client's fsync of the directory sends: the removal is durable.
    let _: () = remover.ok(&Request::Sync);
    cluster.daemons[0].kill9();
    cluster.daemons[0] = cluster.fixture.spawn(0, 2, &[]);
    let (mut meta, mut data) = (cluster.client(0), cluster.clients());
    // The restarted daemon 0 counts no handle, but the record says kept.
    assert_eq!(doomed_and_held(&mut meta), (1, 1));
    std::thread::sleep(Duration::from_millis(500));
    assert!(reads_whole(&mut data, file.ino), "deleted after the restart, before its holder came back");
    // The holder's new connection announces its handle, then closes it.
    let mut holder = cluster.client(0);
    let _: () = holder.ok(&Request::Hold { inos: vec![file.ino] });
    let _: () = holder.ok(&Request::Close { ino: file.ino });
    eventually("the file's objects deleted at its holder's close", || {
        data.iter_mut().all(|c| object_size(c, file.ino) == 0)
    });
}

#[test]
fn orphans_are_collected_after_the_grace_period_and_counted_while_files_keep_theirs() {
    let cluster = Cluster::start(&["--collect-every", "1", "--orphan-grace", "3"]);
    let (mut meta, mut data) = (cluster.client(0), cluster.clients());
    let live = file_with_objects(&mut meta, &mut data, "/live");
    // Objects of inodes the namespace never handed out, on both daemons.
    let orphans = [0x0bad_0000_0001_u64, 0x0bad_0000_0002];
    for (conn, &ino) in data.iter_mut().zip(&orphans) {
        let _: WriteReply = conn.ok(&Request::Write { ino, offset: 0, data: b"nobody's" });
    }
    let planted = Instant::now();
    let (mut daemon1, orphan1) = (cluster.daemons[1].peer(&cluster.fixture), orphans[1]);
    let page: ObjListReply = daemon1.ok(&Request::ObjList { after: 0, max: 0 });
    let mut listed: Vec<u64> = page.objects.iter().map(|o| o.ino).collect();
    listed.sort_unstable();
    let mut want = vec![live.ino, orphan1];
    want.sort_unstable();
    assert_eq!((listed, page.end), (want, true));
    // Within the grace the collector leaves them.
    assert!(object_size(&mut daemon1, orphan1) > 0 && planted.elapsed() < Duration::from_secs(3));
    for (d, (conn, &ino)) in data.iter_mut().zip(&orphans).enumerate() {
        eventually(&format!("the orphan on daemon {d} collected"), || object_size(conn, ino) == 0);
    }
    assert!(planted.elapsed() >= Duration::from_secs(3), "collected before the grace period");
    let status: DaemonStatus = meta.ok(&Request::Status);
    assert_eq!((status.orphans_found, status.orphans_collected), (2, 2));
    assert!(data.iter_mut().all(|c| object_size(c, live.ino) > 0), "a live file's objects were collected");
}

#[test]
fn shutdown_stops_the_background_tasks_promptly() {
    let mut cluster = Cluster::start(&["--collect-every", "1", "--orphan-grace", "0"]);
    let mut meta = cluster.client(0);
    let _: Attr = meta.ok(&Request::Open {
        path: "/f",
        flags: CREATE | WRITE,
        mode: 0o644,
        layout: Layout::INHERIT,
        local: vec![],
    });
    let _: Removed = meta.ok(&Request::Unlink { path: "/f", keep: false });
    let asked = Instant::now();
    let _: () = meta.ok(&Request::Shutdown);
    let status = cluster.daemons[0].wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{}", cluster.daemons[0].log());
    assert!(asked.elapsed() < Duration::from_secs(3), "stopping took {:?}", asked.elapsed());
    assert!(cluster.daemons[0].log().contains("stopped"));
}

#[test]
fn object_listing_pages_need_a_cursor_and_refuse_namespace_requests_elsewhere() {
    let cluster = Cluster::start(&[]);
    let mut daemon1 = cluster.daemons[1].peer(&cluster.fixture);
    for ino in 1..=5u64 {
        let _: WriteReply = daemon1.ok(&Request::Write { ino: ino << 8, offset: 0, data: b"x" });
    }
    let first: ObjListReply = daemon1.ok(&Request::ObjList { after: 0, max: 2 });
    assert_eq!((first.objects.len(), first.end), (2, false));
    let rest: ObjListReply = daemon1.ok(&Request::ObjList { after: first.objects[1].ino, max: 10 });
    assert_eq!((rest.objects.len(), rest.end), (3, true));
    assert_eq!(daemon1.fails(&Request::Release { ino: 1 }).0, Errno::EINVAL);
}
