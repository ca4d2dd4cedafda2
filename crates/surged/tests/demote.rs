//! Daemon 0's demotion on three real daemons (in this process): the
//! verified stage-out procedure run through its peers copies a striped file
//! with a hole byte for byte to the PFS, and the buffer copy is evicted
//! only while it is the version copied.

mod common;

use common::{object_size, Client, Fixture};
use std::sync::Arc;
use std::time::Duration;
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::{WriteReply, KEEP_ID, KEEP_MODE, KEEP_MTIME};
use surge_proto::{Attr, Errno, Layout, Request, Tier};
use surge_testkit::pattern;
use surged::testing::{FailingStore, StoreOp, StoreProbe};
use surged::{DaemonConfig, Demotion, RunningDaemon, Stages};

const DAEMONS: u32 = 3;
const LAYOUT: Layout = Layout { stripe_count: 3, stripe_size: 64 << 10, first: 1 };

/// Three daemons; daemon 1's store calls pass through `probe`.
struct Cluster {
    fixture: Fixture,
    daemons: Vec<RunningDaemon>,
    probe: Arc<StoreProbe>,
}

impl Cluster {
    fn start() -> Cluster {
        let fixture = Fixture::new();
        let probe = Arc::new(StoreProbe::default());
        let daemons = (0..DAEMONS)
            .map(|index| {
                let cfg = DaemonConfig {
                    register_dir: Some(fixture.registrations()),
                    ..DaemonConfig::new(
                        index,
                        DAEMONS,
                        fixture.buffer(index),
                        fixture.pfs(),
                        fixture.path("secret"),
                        &fixture.cluster_id,
                    )
                };
                let stages = match index {
                    1 => Stages { store: FailingStore::around_dir_store(Arc::clone(&probe)), ..Stages::default() },
                    _ => Stages::default(),
                };
                surged::start_with(cfg, stages).unwrap()
            })
            .collect();
        Cluster { fixture, daemons, probe }
    }

    fn client(&self, daemon: u32) -> Client {
        Client::authenticated(self.daemons[daemon as usize].addr(), &self.fixture.secret)
    }

    fn demotion(&self) -> &Demotion {
        self.daemons[0].demotion().expect("daemon 0 demotes")
    }

    /// Creates `path` and writes each `(offset, bytes)` to the daemons of
    /// its stripes; returns the file's attributes and its bytes (zeros in
    /// the holes).
    fn write_file(&self, path: &str, writes: &[(u64, Vec<u8>)]) -> (Attr, Vec<u8>) {
        let attr: Attr = self.client(0).ok(&Request::Open {
            path,
            flags: CREATE | WRITE,
            mode: 0o644,
            layout: LAYOUT,
            local: vec![],
        });
        let mut model = Vec::new();
        for (offset, data) in writes {
            write_at(self, &attr, *offset, data);
            let end = *offset as usize + data.len();
            model.resize(model.len().max(end), 0);
            model[*offset as usize..end].copy_from_slice(data);
        }
        (attr, model)
    }

    fn tier(&self, path: &str) -> Tier {
        self.client(0).ok::<Attr>(&Request::Stat { path }).tier
    }

    /// What the PFS holds under `path`, and any stage-out temps left beside it.
    fn pfs_copy(&self, path: &str) -> (Option<Vec<u8>>, Vec<String>) {
        let copy = std::fs::read(self.fixture.pfs().join(path.trim_start_matches('/'))).ok();
        let temps = std::fs::read_dir(self.fixture.pfs())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with('.'))
            .collect();
        (copy, temps)
    }
}

/// Writes `data` at file offset `offset` of `attr`'s file, each piece to its stripe's daemon.
fn write_at(cluster: &Cluster, attr: &Attr, offset: u64, data: &[u8]) {
    for piece in attr.layout.pieces(offset, data.len()) {
        let bytes = &data[piece.buf_offset..piece.buf_offset + piece.len];
        let write = Request::Write { ino: attr.ino, offset: piece.object_offset, data: bytes };
        let _: WriteReply = cluster.client(attr.layout.daemon_of(piece.stripe, DAEMONS)).ok(&write);
    }
}

fn object_sizes(cluster: &Cluster, attr: &Attr) -> Vec<u64> {
    (0..LAYOUT.stripe_count)
        .map(|stripe| {
            let daemon = attr.layout.daemon_of(stripe, DAEMONS);
            object_size(&mut cluster.client(daemon), attr.ino)
        })
        .collect()
}

#[test]
fn daemon_zero_demotes_a_three_stripe_file_with_a_hole_byte_exact_and_evicts_it() {
    let cluster = Cluster::start();
    // Five stripe units and a bit, with a hole of three units in the middle:
    // some objects end early, one has a hole inside.
    let unit = LAYOUT.stripe_size;
    let (attr, model) = cluster
        .write_file("/ckpt_0001.h5", &[(0, pattern(1, 100_000)), (5 * unit, pattern(2, 2 * unit as usize + 777))]);
    assert!(object_sizes(&cluster, &attr).iter().all(|&size| size > 0), "every stripe holds bytes");

    let staged = cluster.demotion().stage("/ckpt_0001.h5").unwrap();
    assert_eq!((staged.ino, staged.bytes, staged.stripes), (attr.ino, model.len() as u64, 3));
    let (copy, temps) = cluster.pfs_copy("/ckpt_0001.h5");
    assert!(copy.as_ref() == Some(&model), "the PFS copy is the file, zeros in its hole");
    assert!(temps.is_empty(), "no stage-out temp is left: {temps:?}");
    assert_eq!(cluster.tier("/ckpt_0001.h5"), Tier::Staged);

    let evicted = cluster.demotion().evict("/ckpt_0001.h5", &staged).unwrap();
    assert_eq!((evicted.tier, evicted.size), (Tier::Pfs, model.len() as u64));
    surge_testkit::eventually("the deleter removes the buffer copy", Duration::from_secs(10), || {
        object_sizes(&cluster, &attr).iter().all(|&size| size == 0)
    });
    // The name now reads the PFS copy.
    let read = Request::PfsRead { path: "/ckpt_0001.h5", offset: 0, len: model.len() as u32 };
    assert!(cluster.client(0).read(&read) == model);
}

#[test]
fn a_write_during_the_copy_fails_the_demotion_and_leaves_the_file_in_the_buffer() {
    let cluster = Cluster::start();
    let (attr, mut model) = cluster.write_file("/racing", &[(0, pattern(3, 300_000))]);
    // Daemon 1 holds stripe 0: just before it reads its object for the
    // copy, another client writes to the file.
    let addr = cluster.daemons[1].addr();
    let secret = cluster.fixture.secret.clone();
    let ino = attr.ino;
    cluster.probe.before_next(StoreOp::Read, move || {
        let _: WriteReply = Client::authenticated(addr, &secret).ok(&Request::Write { ino, offset: 10, data: b"new" });
    });

    let failed = cluster.demotion().stage("/racing").unwrap_err();
    assert_eq!(failed.errno, Errno::EIO);
    assert!(failed.message.contains("/racing changed during stage-out"), "{}", failed.message);
    assert_eq!(cluster.tier("/racing"), Tier::Buffer);
    let (copy, temps) = cluster.pfs_copy("/racing");
    assert!(copy.is_none() && temps.is_empty(), "no PFS copy, whole or partial: {temps:?}");

    // Once the file is quiet its demotion goes through, with the new bytes.
    model[10..13].copy_from_slice(b"new");
    let staged = cluster.demotion().stage("/racing").unwrap();
    assert!(cluster.pfs_copy("/racing").0 == Some(model));
    cluster.demotion().evict("/racing", &staged).unwrap();
}

#[test]
fn a_file_written_after_its_demotion_is_not_evicted() {
    let cluster = Cluster::start();
    let (attr, model) = cluster.write_file("/later", &[(0, pattern(4, 200_000))]);
    let staged = cluster.demotion().stage("/later").unwrap();
    write_at(&cluster, &attr, 199_999, b"appended");

    let refused = cluster.demotion().evict("/later", &staged).unwrap_err();
    assert_eq!(refused.errno, Errno(libc::ESTALE));
    assert!(refused.message.contains("written after its demotion"), "{}", refused.message);
    // The buffer copy stays, with the new bytes; the PFS copy is the old version.
    let sizes = object_sizes(&cluster, &attr);
    assert_eq!(sizes.iter().sum::<u64>(), 200_007);
    assert!(cluster.pfs_copy("/later").0 == Some(model));
}

#[test]
fn a_pfs_copy_truncated_outside_surge_is_never_evicted_to_nor_read_and_the_file_is_demoted_again_whole() {
    let cluster = Cluster::start();
    let (attr, model) = cluster.write_file("/trusted", &[(0, pattern(5, 300_000))]);
    let staged = cluster.demotion().stage("/trusted").unwrap();
    let copy = cluster.fixture.pfs().join("trusted");
    std::fs::OpenOptions::new().write(true).open(&copy).unwrap().set_len(100).unwrap();

    let kept = cluster.demotion().evict("/trusted", &staged).unwrap_err();
    assert_eq!(kept.errno, Errno(libc::ESTALE));
    assert!(kept.message.contains("not staged any more"), "{}", kept.message);
    assert_eq!(object_sizes(&cluster, &attr).iter().sum::<u64>(), 300_000, "the buffer copy stays whole");
    assert_eq!(cluster.tier("/trusted"), Tier::Buffer);
    // A PFS read (a client's, while a daemon of its stripes is down) is refused by name.
    let read = Request::PfsRead { path: "/trusted", offset: 0, len: 100 };
    let staged_again = cluster.demotion().stage("/trusted").unwrap();
    std::fs::write(&copy, pattern(6, 300_000)).unwrap();
    let (errno, message) = refused(&cluster, 0, &read);
    assert_eq!(errno, Errno::EIO);
    assert!(message.contains("/trusted: its PFS copy is not the one staged"), "{message}");
    assert!(cluster.demotion().evict("/trusted", &staged_again).is_err());
    // Demoted again from the buffer: the PFS copy is the file once more, and evicted to.
    let staged = cluster.demotion().stage("/trusted").unwrap();
    assert!(cluster.pfs_copy("/trusted").0 == Some(model.clone()));
    cluster.demotion().evict("/trusted", &staged).unwrap();
    assert!(cluster.client(0).read(&Request::PfsRead { path: "/trusted", offset: 0, len: 300_000 }) == model);
}

/// What `req` on `daemon` fails with; panics if it succeeds.
fn refused(cluster: &Cluster, daemon: u32, req: &Request<'_>) -> (Errno, String) {
    cluster.client(daemon).fails(req)
}

#[test]
fn a_handle_opened_before_an_eviction_gets_estale_for_its_writes_and_reads_and_nothing_acknowledged_is_lost() {
    let cluster = Cluster::start();
    let (attr, model) = cluster.write_file("/ckpt_0007.h5", &[(0, pattern(7, 300_000))]);
    let staged = cluster.demotion().stage("/ckpt_0007.h5").unwrap();
    cluster.demotion().evict("/ckpt_0007.h5", &staged).unwrap();

    // The old handle's requests, on every stripe's daemon, before and after
    // the deleter removed the objects: refused, never served from (or into) them.
    let check_refused = |when: &str| {
        for stripe in 0..LAYOUT.stripe_count {
            let daemon = attr.layout.daemon_of(stripe, DAEMONS);
            for req in [
                Request::Write { ino: attr.ino, offset: 5, data: b"late" },
                Request::Read { ino: attr.ino, offset: 0, len: 4096 },
                Request::ObjTruncate { ino: attr.ino, len: 1 },
            ] {
                let (errno, message) = refused(&cluster, daemon, &req);
                assert_eq!(errno, Errno(libc::ESTALE), "{when}, daemon {daemon}: {req:?}: {message}");
                assert!(message.contains("evicted from the buffer or removed"), "{message}");
            }
        }
    };
    check_refused("just evicted");
    surge_testkit::eventually("the deleter removes the buffer copy", Duration::from_secs(10), || {
        object_sizes(&cluster, &attr).iter().all(|&size| size == 0)
    });
    check_refused("objects deleted");
    assert!(object_sizes(&cluster, &attr).iter().all(|&size| size == 0), "no refused write recreated an object");
    // Everything acknowledged before the eviction is in the PFS copy the name shows.
    let read = Request::PfsRead { path: "/ckpt_0007.h5", offset: 0, len: model.len() as u32 };
    assert!(cluster.client(0).read(&read) == model);
}

#[test]
fn an_eviction_the_namespace_refuses_leaves_every_object_writable() {
    let cluster = Cluster::start();
    let (attr, _) = cluster.write_file("/lost_copy", &[(0, pattern(8, 200_000))]);
    let staged = cluster.demotion().stage("/lost_copy").unwrap();
    // Someone removed the PFS copy behind Surge's back: nothing to evict to.
    std::fs::remove_file(cluster.fixture.pfs().join("lost_copy")).unwrap();

    let failed = cluster.demotion().evict("/lost_copy", &staged).unwrap_err();
    assert_eq!(failed.errno, Errno(libc::ESTALE), "{}", failed.message);
    assert!(failed.message.contains("not staged any more"), "{}", failed.message);
    write_at(&cluster, &attr, 0, &pattern(9, 200_000));
    assert_eq!(object_sizes(&cluster, &attr).iter().sum::<u64>(), 200_000);
}

#[test]
fn a_write_landing_between_the_version_check_and_a_later_stripes_retirement_keeps_the_file_in_the_buffer() {
    let cluster = Cluster::start();
    let (attr, _) = cluster.write_file("/racing_evict", &[(0, pattern(10, 200_000))]);
    let staged = cluster.demotion().stage("/racing_evict").unwrap();
    // Daemon 1 holds stripe 0, retired first. Its first stat is the version
    // check; at its second (stripe 0's retirement), a client writes to
    // stripe 1 on daemon 2, not yet retired.
    let stripe_1 = attr.layout.daemon_of(1, DAEMONS);
    let addr = cluster.daemons[stripe_1 as usize].addr();
    let secret = cluster.fixture.secret.clone();
    let (probe, ino) = (Arc::clone(&cluster.probe), attr.ino);
    cluster.probe.before_next(StoreOp::Stat, move || {
        probe.before_next(StoreOp::Stat, move || {
            let _: WriteReply = Client::authenticated(addr, &secret).ok(&Request::Write { ino, offset: 0, data: b"x" });
        });
    });

    let stats_before = cluster.probe.calls(StoreOp::Stat);
    let refused = cluster.demotion().evict("/racing_evict", &staged).unwrap_err();
    assert_eq!(refused.errno, Errno(libc::ESTALE), "{}", refused.message);
    assert!(refused.message.contains("written after its demotion"), "{}", refused.message);
    assert_eq!(cluster.probe.calls(StoreOp::Stat) - stats_before, 2, "stripe 0 was retired before the write");
    // Stripe 0's retirement was undone: the file is whole and writable.
    assert_ne!(cluster.tier("/racing_evict"), Tier::Pfs);
    write_at(&cluster, &attr, 0, &pattern(11, 200_000));
    assert_eq!(object_sizes(&cluster, &attr).iter().sum::<u64>(), 200_000);
}

/// A demoted file's PFS copy has the file's mode, mtime (set by utimens,
/// or the time of its last write) and `user.*` extended attributes, and its
/// directory keeps its own time and private mode.
#[test]
fn a_demoted_copy_keeps_the_files_mode_times_and_xattrs_and_its_directory_stays_private() {
    use std::os::unix::fs::MetadataExt;
    let cluster = Cluster::start();
    let mut c = cluster.client(0);
    let _: Attr = c.ok(&Request::Mkdir { path: "/private", mode: 0o700 });
    cluster.write_file("/private/set", &[(0, pattern(3, 70_000))]);
    let (written, _) = cluster.write_file("/private/written", &[(0, pattern(4, 10))]);
    let (old, accessed) = (946_684_800_123_456_789, 978_307_200_000_000_001);
    let times =
        |path, mode, atime_ns| Request::SetAttr { path, mode, uid: KEEP_ID, gid: KEEP_ID, atime_ns, mtime_ns: old };
    let _: Attr = c.ok(&times("/private/set", 0o600, accessed));
    let _: Attr = c.ok(&times("/private", KEEP_MODE, KEEP_MTIME));
    let value = b"\0any bytes";
    let () = c.ok(&Request::SetXattr { path: "/private/set", name: "user.run", value, flags: 0 });
    // Written after its creation: the objects' mtime is the file's.
    write_at(&cluster, &written, 0, &pattern(5, 10));
    let written_mtime = (0..LAYOUT.stripe_count)
        .map(|stripe| {
            let daemon = written.layout.daemon_of(stripe, DAEMONS);
            cluster.client(daemon).ok::<surge_proto::msg::ObjStatReply>(&Request::ObjStat { ino: written.ino }).mtime_ns
        })
        .max()
        .unwrap();
    for path in ["/private/set", "/private/written"] {
        cluster.demotion().stage(path).unwrap();
    }
    let on_pfs = |rel: &str| std::fs::symlink_metadata(cluster.fixture.pfs().join(rel)).unwrap();
    let mtime = |m: &std::fs::Metadata| m.mtime() * 1_000_000_000 + m.mtime_nsec();
    let (set_copy, dir) = (on_pfs("private/set"), on_pfs("private"));
    let atime = set_copy.atime() * 1_000_000_000 + set_copy.atime_nsec();
    assert_eq!((set_copy.mode() & 0o7777, mtime(&set_copy), atime), (0o600, old, accessed));
    assert_eq!(mtime(&on_pfs("private/written")), written_mtime);
    assert_eq!((dir.mode() & 0o7777, mtime(&dir)), (0o700, old), "the directory's own time, after each commit");
    let mut got = vec![0u8; 64];
    let n = rustix::fs::getxattr(cluster.fixture.pfs().join("private/set"), "user.run", &mut got).unwrap();
    assert_eq!(&got[..n], value);
}
