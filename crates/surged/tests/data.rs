//! Data objects on real daemons: reads and writes, the quota, durability
//! across kill -9, and a striped stage-out over three daemons.

mod common;

use common::{Client, Fixture};
use std::fs;
use surge_proto::layout::FIRST_AUTO;
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::{AllocateMode, DaemonStatus, ObjStatReply, Removed, SeekReply, StagedObject, WriteReply};
use surge_proto::{Attr, Errno, Layout, Request, Tier};
use surge_testkit::pattern;

#[test]
fn objects_read_back_what_was_written_at_any_size_and_offset() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);
    let mut model = Vec::new();
    let writes = [(0u64, 1usize), (1, 4095), (4096, 65536), (100_000, 1 << 20), (10, 3), (3 << 20, 777)];
    for (i, &(offset, len)) in writes.iter().enumerate() {
        let data = pattern(i as u64, len);
        let n: WriteReply = c.ok(&Request::Write { ino: 77, offset, data: &data });
        assert_eq!(n, WriteReply { written: len as u64, size_before: model.len() as u64 });
        let end = offset as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
    }
    let st: ObjStatReply = c.ok(&Request::ObjStat { ino: 77 });
    assert_eq!(st.size, model.len() as u64);
    assert!(st.mtime_ns > 0);
    for &(offset, len) in &[(0u64, 1u32), (4000, 200), (99_999, 1 << 20), (3 << 20, 1000), (model.len() as u64, 10)] {
        let got = c.read(&Request::Read { ino: 77, offset, len });
        let end = (offset as usize + len as usize).min(model.len());
        assert_eq!(got, &model[(offset as usize).min(end)..end], "read {offset}+{len}");
    }
    assert!(c.read(&Request::Read { ino: 999, offset: 0, len: 100 }).is_empty());
    assert_eq!(
        c.ok::<ObjStatReply>(&Request::ObjStat { ino: 999 }),
        ObjStatReply { size: 0, mtime_ns: 0, allocated: 0 }
    );

    c.ok::<()>(&Request::ObjTruncate { ino: 77, len: 5000 });
    assert_eq!(c.ok::<ObjStatReply>(&Request::ObjStat { ino: 77 }).size, 5000);
    assert_eq!(c.read(&Request::Read { ino: 77, offset: 4990, len: 100 }), &model[4990..5000]);
    c.ok::<()>(&Request::ObjTruncate { ino: 77, len: 9000 });
    assert_eq!(c.read(&Request::Read { ino: 77, offset: 4999, len: 3 }), [model[4999], 0, 0]);
    c.ok::<()>(&Request::ObjSync { ino: 77 });
    let mut daemon0 = d.peer(&f);
    daemon0.ok::<()>(&Request::ObjRemove { ino: 77 });
    daemon0.ok::<()>(&Request::ObjRemove { ino: 77 });
    assert!(c.read(&Request::Read { ino: 77, offset: 0, len: 10 }).is_empty());
    assert_eq!(c.fails(&Request::Write { ino: 1, offset: u64::MAX - 1, data: b"xyz" }).0, Errno::EFBIG);
}

#[test]
fn a_punched_hole_is_found_by_seek_frees_its_blocks_and_changes_the_version() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);
    let data = pattern(3, 1 << 20);
    let _: WriteReply = c.ok(&Request::Write { ino: 5, offset: 0, data: &data });
    let before: ObjStatReply = c.ok(&Request::ObjStat { ino: 5 });
    assert!(before.allocated >= 1 << 20, "{before:?}");
    let seek = |c: &mut Client, offset, hole| c.ok::<SeekReply>(&Request::ObjSeek { ino: 5, offset, hole }).0;
    assert_eq!(seek(&mut c, 0, true), Some(1 << 20), "the end is a hole");
    c.ok::<()>(&Request::ObjAllocate { ino: 5, offset: 65536, len: 262_144, mode: AllocateMode::PunchHole });
    let after: ObjStatReply = c.ok(&Request::ObjStat { ino: 5 });
    assert_eq!(after.size, 1 << 20);
    assert!(after.allocated + 262_144 <= before.allocated, "{after:?} after {before:?}");
    assert_ne!(after.mtime_ns, before.mtime_ns, "a punch is a change: the file's version moves on");
    assert_eq!((seek(&mut c, 0, true), seek(&mut c, 65536, false)), (Some(65536), Some(327_680)));
    assert_eq!(seek(&mut c, 1 << 20, false), None);
    let got = c.read(&Request::Read { ino: 5, offset: 60_000, len: 300_000 });
    let mut want = data[60_000..360_000].to_vec();
    want[65536 - 60_000..327_680 - 60_000].fill(0);
    assert_eq!(got, want);
    let bad = Request::ObjAllocate { ino: 5, offset: u64::MAX - 10, len: 100, mode: AllocateMode::ZeroRange };
    assert_eq!(c.fails(&bad).0, Errno::EFBIG);
}

/// A file's version is digested from its objects' sizes and modification
/// times, so every change must give the object a time it never had, even
/// many changes within one tick of the kernel's clock.
#[test]
fn every_write_and_truncate_gives_the_object_a_new_modification_time() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);
    let mut seen = Vec::new();
    for i in 0..50u64 {
        if i % 5 == 4 {
            c.ok::<()>(&Request::ObjTruncate { ino: 3, len: 100 });
        } else {
            c.ok::<WriteReply>(&Request::Write { ino: 3, offset: 0, data: b"same size, other bytes" });
        }
        seen.push(c.ok::<ObjStatReply>(&Request::ObjStat { ino: 3 }).mtime_ns);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "modification times repeat: {seen:?}");
}

#[test]
fn the_capacity_quota_refuses_growth_and_keeps_what_was_written() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--capacity", "1000000"]);
    let mut c = d.client(&f);
    let first = pattern(1, 900_000);
    c.ok::<WriteReply>(&Request::Write { ino: 1, offset: 0, data: &first });
    let (errno, _) = c.fails(&Request::Write { ino: 2, offset: 0, data: &[7; 200_000] });
    assert_eq!(errno, Errno::ENOSPC);
    assert_eq!(c.fails(&Request::Write { ino: 1, offset: 899_000, data: &[7; 101_001] }).0, Errno::ENOSPC);
    // Extending by truncation allocates nothing: no room needed.
    c.ok::<()>(&Request::ObjTruncate { ino: 1, len: 1 << 40 });
    c.ok::<()>(&Request::ObjTruncate { ino: 1, len: 900_000 });
    // Overwriting needs no room; the connection is still fine after ENOSPC.
    c.ok::<WriteReply>(&Request::Write { ino: 1, offset: 0, data: &first[..1000] });
    assert_eq!(c.read(&Request::Read { ino: 1, offset: 0, len: 900_000 }), first);
    c.ok::<WriteReply>(&Request::Write { ino: 2, offset: 0, data: &[7; 90_000] });
    assert_eq!(c.ok::<ObjStatReply>(&Request::ObjStat { ino: 2 }).size, 90_000);
}

#[test]
fn synced_data_and_the_namespace_survive_kill_9() {
    let f = Fixture::new();
    let mut d = f.spawn(0, 1, &["--capacity", "10000000"]);
    let mut c = d.client(&f);
    c.ok::<Attr>(&Request::Mkdir { path: "/ckpt", mode: 0o755 });
    let file: Attr = c.ok(&Request::Open {
        path: "/ckpt/step1",
        flags: CREATE | WRITE,
        mode: 0o600,
        layout: Layout::INHERIT,
        local: vec![],
    });
    let data = pattern(9, 1 << 20);
    c.ok::<WriteReply>(&Request::Write { ino: file.ino, offset: 4096, data: &data });
    // A client's fsync: the data, then the namespace (the file's name).
    c.ok::<()>(&Request::ObjSync { ino: file.ino });
    c.ok::<()>(&Request::Sync);
    d.kill9();

    let d = f.spawn(0, 1, &["--capacity", "10000000"]);
    let mut c = d.client(&f);
    let again: Attr = c.ok(&Request::Stat { path: "/ckpt/step1" });
    assert_eq!((again.ino, again.mode, again.layout), (file.ino, 0o600, file.layout));
    assert_eq!(c.read(&Request::Read { ino: file.ino, offset: 4096, len: 1 << 20 }), data);
    let status: DaemonStatus = c.ok(&Request::Status);
    // The leading 4 KiB hole takes no space.
    assert_eq!((status.objects, status.bytes_used, status.files, status.dirs), (1, 1 << 20, 1, 1));
    // New files do not reuse inode numbers.
    let next: Attr = c.ok(&Request::Open {
        path: "/ckpt/step2",
        flags: CREATE,
        mode: 0o600,
        layout: Layout::INHERIT,
        local: vec![],
    });
    assert!(next.ino > file.ino);
}

#[test]
fn stage_out_over_three_daemons_makes_a_byte_identical_pfs_copy() {
    let f = Fixture::new();
    let daemons: Vec<_> = (0..3).map(|i| f.spawn(i, 3, &[])).collect();
    let mut clients: Vec<Client> = daemons.iter().map(|d| d.client(&f)).collect();
    let requested = Layout { stripe_count: 3, stripe_size: 64 << 10, first: FIRST_AUTO };
    clients[0].ok::<Attr>(&Request::Mkdir { path: "/out", mode: 0o755 });
    let file: Attr = clients[0].ok(&Request::Open {
        path: "/out/field.dat",
        flags: CREATE | WRITE,
        mode: 0o644,
        layout: requested,
        local: vec![],
    });
    let layout = file.layout;
    assert!(layout.is_concrete() && layout.stripe_count == 3);

    let data = pattern(3, 10 * (64 << 10) + 12_345);
    for piece in layout.pieces(0, data.len()) {
        let daemon = layout.daemon_of(piece.stripe, 3) as usize;
        let bytes = &data[piece.buf_offset..piece.buf_offset + piece.len];
        clients[daemon].ok::<WriteReply>(&Request::Write { ino: file.ino, offset: piece.object_offset, data: bytes });
    }

    let size = data.len() as u64;
    let temp: String = clients[0].ok(&Request::StageBegin { path: "/out/field.dat", size });
    let mut copied = 0;
    for stripe in 0..3 {
        let daemon = layout.daemon_of(stripe, 3) as usize;
        let staged: StagedObject = clients[daemon].ok(&Request::ObjStage {
            ino: file.ino,
            layout,
            stripe,
            temp: &temp,
            object_offset: 0,
            len: u64::MAX,
        });
        let object = clients[daemon].read(&Request::Read { ino: file.ino, offset: 0, len: 1 << 20 });
        assert_eq!((staged.bytes, staged.crc), (object.len() as u64, crc32c::crc32c(&object)));
        copied += staged.bytes;
    }
    assert_eq!(copied, size);
    let committed: Attr = clients[0].ok(&Request::StageCommit {
        path: "/out/field.dat",
        ino: file.ino,
        temp: &temp,
        size,
        version: 5,
        objects_mtime_ns: 0,
    });
    assert_eq!(committed.tier, Tier::Staged);
    assert_eq!(fs::read(f.pfs().join("out/field.dat")).unwrap(), data);
    assert_eq!(fs::read_dir(f.pfs().join("out")).unwrap().count(), 1, "the temp is gone");
    assert_eq!(clients[0].ok::<Attr>(&Request::Stat { path: "/out/field.dat" }).tier, Tier::Staged);

    // An aborted stage-out leaves nothing behind; the staged copy stays.
    let temp: String = clients[0].ok(&Request::StageBegin { path: "/out/field.dat", size });
    clients[0].ok::<()>(&Request::StageAbort { temp: &temp });
    assert_eq!(fs::read_dir(f.pfs().join("out")).unwrap().count(), 1);
    // A data daemon refuses to write anything but a stage temp of that inode.
    let (errno, _) = clients[1].fails(&Request::ObjStage {
        ino: file.ino,
        layout,
        stripe: 0,
        temp: "/out/field.dat",
        object_offset: 0,
        len: 10,
    });
    assert_eq!(errno, Errno::EINVAL);
    assert_eq!(fs::read(f.pfs().join("out/field.dat")).unwrap(), data);
}

#[test]
fn usage_counts_the_blocks_objects_take_not_their_sparse_lengths() {
    let f = Fixture::new();
    let d = f.spawn(0, 1, &["--capacity", "1000000"]);
    let mut c = d.client(&f);
    c.ok::<WriteReply>(&Request::Write { ino: 1, offset: 0, data: &[1; 8192] });
    c.ok::<()>(&Request::ObjTruncate { ino: 1, len: 1 << 40 });
    c.ok::<WriteReply>(&Request::Write { ino: 2, offset: 1 << 30, data: &[2; 4096] });
    let used = |c: &mut Client| c.ok::<DaemonStatus>(&Request::Status).bytes_used;
    assert_eq!(used(&mut c), 12288, "a TiB-long sparse object and a 1 GiB hole cost their blocks only");
    // The capacity counts blocks too: most of it is still free.
    c.ok::<WriteReply>(&Request::Write { ino: 3, offset: 0, data: &[3; 900_000] });
    assert_eq!(used(&mut c), 12288 + 901_120);
    c.ok::<()>(&Request::ObjTruncate { ino: 3, len: 4096 });
    d.peer(&f).ok::<()>(&Request::ObjRemove { ino: 1 });
    assert_eq!(used(&mut c), 4096 + 4096);
    // A restart counts the same.
    drop(c);
    drop(d);
    let d = f.spawn(0, 1, &["--capacity", "1000000"]);
    assert_eq!(used(&mut d.client(&f)), 8192);
}

/// The stage temps in PFS directory `dir`.
fn temps_in(f: &Fixture, dir: &str) -> Vec<String> {
    fs::read_dir(f.pfs().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".surge-stage."))
        .collect()
}

#[test]
fn a_stage_out_its_client_or_daemon_0_abandons_leaves_no_temp_and_a_stale_one_does_not_keep_rmdir_from_working() {
    let f = Fixture::new();
    let mut d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);
    c.ok::<Attr>(&Request::Mkdir { path: "/out", mode: 0o755 });
    let file: Attr = c.ok(&Request::Open {
        path: "/out/ckpt",
        flags: CREATE | WRITE,
        mode: 0o644,
        layout: Layout::INHERIT,
        local: vec![],
    });
    let size = 64 << 20;

    // The client goes (killed mid-copy) with its stage-out under way.
    let mut quitter = d.client(&f);
    let temp: String = quitter.ok(&Request::StageBegin { path: "/out/ckpt", size });
    assert_eq!(fs::metadata(f.pfs().join(&temp[1..])).unwrap().len(), size, "a temp the file's size");
    drop(quitter);
    // The log line follows the removal.
    surge_testkit::eventually("the abandoned temp is removed, and said", std::time::Duration::from_secs(10), || {
        temps_in(&f, "out").is_empty() && d.log().contains("abandoned by its client: the temp is removed")
    });

    // Daemon 0 is killed mid-copy: the temp goes when it starts again, and the copy cannot be committed.
    let temp: String = c.ok(&Request::StageBegin { path: "/out/ckpt", size });
    d.kill9();
    assert_eq!(temps_in(&f, "out").len(), 1);
    d = f.spawn(0, 1, &[]);
    assert!(temps_in(&f, "out").is_empty(), "removed before daemon 0 serves");
    assert!(d.log().contains("removed 1 stage-out temp(s) left by the last run"), "{}", d.log());
    let mut c = d.client(&f);
    let commit =
        Request::StageCommit { path: "/out/ckpt", ino: file.ino, temp: &temp, size, version: 1, objects_mtime_ns: 0 };
    assert_eq!(c.fails(&commit).0, Errno::ENOENT);

    // A finished stage-out keeps its own temp until it commits; a stale one no stage-out records
    // (left by a version of Surge that did not record them) does not keep the directory.
    let temp: String = c.ok(&Request::StageBegin { path: "/out/ckpt", size: 0 });
    fs::write(f.pfs().join("out/.old.surge-stage.5.0badcafe"), b"stale").unwrap();
    c.ok::<Removed>(&Request::Unlink { path: "/out/ckpt", keep: false });
    assert_eq!(c.fails(&Request::Rmdir { path: "/out" }).0, Errno::ENOTEMPTY, "a stage-out under way there");
    c.ok::<()>(&Request::StageAbort { temp: &temp });
    c.ok::<()>(&Request::Rmdir { path: "/out" });
    assert!(!f.pfs().join("out").exists());
}
