//! The Rust API against a real three-daemon cluster.

mod common;

use common::{RawConn, TestCluster};
use std::io::SeekFrom;
use std::path::Path;
use surge_testkit::{flip_byte, pattern};

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_client::{AttrUpdate, Client, FileKind, Layout, Tier};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn layout(stripe_count: u32, stripe_size: usize, first: u32) -> Layout {
    Layout { stripe_count, stripe_size: stripe_size as u64, first }
}

fn read_all(client: &Client, path: &str) -> Vec<u8> {
    let f = client.open(path, libc::O_RDONLY, 0).unwrap();
    let size = f.attr().unwrap().size as usize;
    // One byte more than the size: the read must stop at end of file.
    let mut buf = vec![0xee; size + 1];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(n, size, "{path}: read returned {n} of {size} bytes");
    buf.truncate(n);
    buf
}

fn errno<T: std::fmt::Debug>(r: surge_client::Result<T>) -> i32 {
    r.unwrap_err().errno()
}

#[test]
fn files_of_many_sizes_and_layouts_read_back_byte_for_byte() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let layouts = [
        layout(1, 64 * KIB, 0),
        layout(2, 64 * KIB, 2),
        layout(3, 64 * KIB, 0),
        layout(1, MIB, 2),
        layout(2, MIB, 0),
        layout(3, MIB, 2),
    ];
    let sizes = [0, 1, 4095, 64 * KIB, MIB - 1, MIB, MIB + 1, 5 * MIB + 13];
    for (li, l) in layouts.iter().enumerate() {
        for (si, &size) in sizes.iter().enumerate() {
            let path = format!("/f{li}-{si}");
            let data = pattern((li * 100 + si) as u64, size);
            let f = client.create(&path, 0o644, *l).unwrap();
            assert_eq!(f.layout(), *l);
            // Odd-sized sequential writes cross stripe boundaries everywhere.
            for chunk in data.chunks(300 * KIB + 7) {
                assert_eq!(f.write(chunk).unwrap(), chunk.len());
            }
            let attr = client.stat(&path).unwrap();
            assert_eq!((attr.size, attr.kind, attr.layout), (size as u64, FileKind::File, *l), "{path}");
            assert!(read_all(&client, &path) == data, "{path}: data differs");
            // Unaligned reads in the middle.
            if size > 3 {
                let mut part = vec![0; size / 2];
                assert_eq!(f.read_at(&mut part, 3).unwrap(), (size - 3).min(size / 2));
                assert!(part[..] == data[3..3 + part.len()], "{path}: partial read differs");
            }
        }
    }
}

#[test]
fn concurrent_positional_writes_from_eight_threads() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let f = Arc::new(client.create("/shared", 0o644, layout(3, 64 * KIB, 0)).unwrap());
    let block = 100 * KIB + 3;
    let blocks_per_thread = 6;
    let data = pattern(8, block * blocks_per_thread * 8);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (f, data) = (&f, &data);
            s.spawn(move || {
                // Interleaved: thread t owns blocks t, t + 8, t + 16, ...
                for b in 0..blocks_per_thread {
                    let at = (b * 8 + t) * block;
                    assert_eq!(f.write_at(&data[at..at + block], at as u64).unwrap(), block);
                }
            });
        }
    });
    assert!(read_all(&client, "/shared") == data);
}

#[test]
fn sparse_files_read_holes_as_zeros_and_stop_at_eof() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let f = client.create("/sparse", 0o644, layout(3, 64 * KIB, 1)).unwrap();
    f.write_at(b"head", 0).unwrap();
    let far = 3 * MIB as u64 + 17;
    f.write_at(b"tail", far).unwrap();
    let size = far as usize + 4;
    assert_eq!(f.attr().unwrap().size, size as u64);
    let all = read_all(&client, "/sparse");
    assert_eq!(&all[..4], b"head");
    assert_eq!(&all[size - 4..], b"tail");
    assert!(all[4..size - 4].iter().all(|&b| b == 0));
    // A read across EOF is short, one at or past EOF returns 0.
    let mut buf = [0xffu8; 10];
    assert_eq!(f.read_at(&mut buf, far + 2).unwrap(), 2);
    assert_eq!(&buf[..2], b"il");
    assert_eq!(f.read_at(&mut buf, size as u64).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 1 << 40).unwrap(), 0);
    // A hole in the middle of one stripe unit, read on its own.
    let mut hole = [0xffu8; 1000];
    assert_eq!(f.read_at(&mut hole, MIB as u64).unwrap(), 1000);
    assert!(hole.iter().all(|&b| b == 0));
}

#[test]
fn truncate_shrinks_and_extends() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let data = pattern(3, MIB + 5);
    let f = client.create("/t", 0o644, layout(3, 64 * KIB, 0)).unwrap();
    f.write_at(&data, 0).unwrap();
    client.truncate("/t", 100 * KIB as u64 + 1).unwrap();
    assert_eq!(client.stat("/t").unwrap().size, 100 * KIB as u64 + 1);
    assert!(read_all(&client, "/t") == data[..100 * KIB + 1]);
    f.set_len(2 * MIB as u64).unwrap();
    let all = read_all(&client, "/t");
    assert_eq!(all.len(), 2 * MIB);
    assert!(all[..100 * KIB + 1] == data[..100 * KIB + 1]);
    assert!(all[100 * KIB + 1..].iter().all(|&b| b == 0), "extension reads as zeros");
    f.set_len(0).unwrap();
    assert_eq!(f.attr().unwrap().size, 0);
    // O_TRUNC on open empties an existing file.
    f.write_at(b"again", 0).unwrap();
    drop(client.open("/t", libc::O_WRONLY | libc::O_TRUNC, 0).unwrap());
    assert_eq!(client.stat("/t").unwrap().size, 0);
}

/// A `set_attr` of the mode alone.
fn mode(mode: u32) -> AttrUpdate {
    AttrUpdate { mode: Some(mode), ..Default::default() }
}

#[test]
fn chmod_and_utimens_stick_until_the_next_write() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let f = client.create("/m", 0o644, layout(2, 64 * KIB, 0)).unwrap();
    f.write_at(&pattern(5, 200 * KIB), 0).unwrap();
    let written = client.stat("/m").unwrap().mtime_ns;
    // chmod alone keeps the mtime of the last write.
    assert_eq!(client.set_attr("/m", &mode(0o600)).unwrap().mode, 0o600);
    let after_chmod = client.stat("/m").unwrap();
    assert_eq!((after_chmod.mode, after_chmod.mtime_ns), (0o600, written));
    // utimens to a time in the past, as tar x does: it holds.
    let past = 1_000_000_000_123_456_789;
    client.set_attr("/m", &AttrUpdate { mtime_ns: Some(past), ..Default::default() }).unwrap();
    assert_eq!(client.stat("/m").unwrap().mtime_ns, past);
    // The access time is kept apart, and an owner set by the caller holds.
    let atime = 2_000_000_000_000_000_000;
    let owned = AttrUpdate { uid: Some(1000), gid: Some(100), atime_ns: Some(atime), ..Default::default() };
    let set = client.set_attr("/m", &owned).unwrap();
    assert_eq!((set.uid, set.gid, set.atime_ns, set.mtime_ns), (1000, 100, atime, past));
    assert_eq!(f.attr().unwrap().mtime_ns, past);
    // A later write moves it on.
    std::thread::sleep(Duration::from_millis(20));
    f.write_at(b"later", 0).unwrap();
    assert!(client.stat("/m").unwrap().mtime_ns > written);
    assert_eq!(errno(client.set_attr("/nope", &mode(0o600))), libc::ENOENT);
}

#[test]
fn append_and_shared_position() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let f = client.open("/log", libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND, 0o600).unwrap();
    f.write(b"one,").unwrap();
    // Another writer extends the file; append must land after it.
    let other = client.open("/log", libc::O_RDWR, 0).unwrap();
    other.write_at(&pattern(1, 70 * KIB), 4).unwrap();
    f.write(b"two").unwrap();
    let all = read_all(&client, "/log");
    assert_eq!(all.len(), 4 + 70 * KIB + 3);
    assert_eq!(&all[..4], b"one,");
    assert_eq!(&all[all.len() - 3..], b"two");

    let r = client.open("/log", libc::O_RDONLY, 0).unwrap();
    let mut four = [0u8; 4];
    assert_eq!(r.read(&mut four).unwrap(), 4);
    assert_eq!(&four, b"one,");
    assert_eq!(r.seek(SeekFrom::End(-3)).unwrap(), all.len() as u64 - 3);
    let mut three = [0u8; 8];
    assert_eq!(r.read(&mut three).unwrap(), 3);
    assert_eq!(&three[..3], b"two");
    assert_eq!(r.read(&mut three).unwrap(), 0);
    assert_eq!(r.seek(SeekFrom::Current(-5)).unwrap(), all.len() as u64 - 5);
    assert_eq!(errno(r.seek(SeekFrom::Current(-(all.len() as i64)))), libc::EINVAL);
}

#[test]
fn unlink_and_rename_delete_the_objects() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let l = layout(3, 64 * KIB, 0);
    let a = client.create("/a", 0o644, l).unwrap();
    a.write_at(&pattern(1, 300 * KIB), 0).unwrap();
    let b = client.create("/b", 0o644, l).unwrap();
    b.write_at(&pattern(2, 300 * KIB), 0).unwrap();
    let (ino_a, ino_b) = (a.ino(), b.ino());
    // Closed: an open file's data would stay until its last close.
    drop((a, b));
    for d in 0..3 {
        // first = 0: stripe k is on daemon k.
        assert_eq!(cluster.object_size(d, ino_a), l.object_len(d, 300 * KIB as u64));
        assert!(cluster.object_size(d, ino_b) > 0);
    }
    // Renaming a over b replaces b: b's objects go, a's data stays.
    client.rename("/a", "/b").unwrap();
    assert_objects_deleted(&cluster, 0..3, ino_b, "the replaced file's");
    assert_eq!(errno(client.stat("/a")), libc::ENOENT);
    assert!(read_all(&client, "/b") == pattern(1, 300 * KIB));
    client.unlink("/b").unwrap();
    assert_objects_deleted(&cluster, 0..3, ino_a, "the unlinked file's");
    assert_eq!(errno(client.stat("/b")), libc::ENOENT);
}

/// Waits (a bounded time) until daemon 0's deleter, which runs in the
/// background, removed the objects of `ino` from `daemons`.
fn assert_objects_deleted(cluster: &TestCluster, daemons: std::ops::Range<u32>, ino: u64, whose: &str) {
    for d in daemons {
        let what = format!("{whose} object on daemon {d} deleted");
        surge_testkit::eventually(&what, Duration::from_secs(20), || cluster.object_size(d, ino) == 0);
    }
}

#[test]
fn errors_are_errno_faithful() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    client.create("/d/f", 0o644, Layout::INHERIT).unwrap().write_at(b"x", 0).unwrap();

    assert_eq!(errno(client.stat("/nope")), libc::ENOENT);
    assert_eq!(errno(client.open("/nope", libc::O_RDONLY, 0)), libc::ENOENT);
    assert_eq!(errno(client.open("/nope/x", libc::O_CREAT | libc::O_WRONLY, 0o644)), libc::ENOENT);
    assert_eq!(errno(client.unlink("/nope")), libc::ENOENT);
    assert_eq!(errno(client.create("/d/f", 0o644, Layout::INHERIT)), libc::EEXIST);
    assert_eq!(errno(client.mkdir("/d", 0o755)), libc::EEXIST);
    assert_eq!(errno(client.mkdir("/d/f/sub", 0o755)), libc::ENOTDIR);
    assert_eq!(errno(client.open("/d/f", libc::O_RDONLY | libc::O_DIRECTORY, 0)), libc::ENOTDIR);
    assert_eq!(errno(client.readdir("/d/f")), libc::ENOTDIR);
    assert_eq!(errno(client.open("/d", libc::O_WRONLY, 0)), libc::EISDIR);
    assert_eq!(errno(client.unlink("/d")), libc::EISDIR);
    assert_eq!(errno(client.rmdir("/d")), libc::ENOTEMPTY);
    assert_eq!(errno(client.rmdir("/d/f")), libc::ENOTDIR);

    let dir = client.open("/d", libc::O_RDONLY, 0).unwrap();
    assert_eq!(errno(dir.read_at(&mut [0; 4], 0)), libc::EISDIR);
    let ro = client.open("/d/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(errno(ro.write_at(b"y", 0)), libc::EBADF);
    assert_eq!(errno(ro.write(b"y")), libc::EBADF);
    let wo = client.open("/d/f", libc::O_WRONLY, 0).unwrap();
    assert_eq!(errno(wo.read_at(&mut [0; 4], 0)), libc::EBADF);

    let too_many = layout(4, 64 * KIB, 0);
    assert_eq!(errno(client.create("/wide", 0o644, too_many)), libc::EINVAL);
    assert_eq!(errno(client.set_layout("/d", layout(0, 1000, 0))), libc::EINVAL);
}

#[test]
fn directories_listings_layout_inheritance_and_status() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    client.mkdir("/ckpt", 0o755).unwrap();
    client.set_layout("/ckpt", layout(2, 128 * KIB, 0)).unwrap();
    client.mkdir("/ckpt/sub", 0o700).unwrap();
    for name in ["b", "a", "c"] {
        client.create(&format!("/ckpt/{name}"), 0o644, Layout::INHERIT).unwrap();
    }
    let names: Vec<_> = client.readdir("/ckpt").unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("a".to_string(), FileKind::File),
            ("b".to_string(), FileKind::File),
            ("c".to_string(), FileKind::File),
            ("sub".to_string(), FileKind::Dir),
        ]
    );
    let inherited = client.stat("/ckpt/a").unwrap().layout;
    assert_eq!((inherited.stripe_count, inherited.stripe_size), (2, 128 * KIB as u64));
    assert_eq!(client.stat("/ckpt/sub").unwrap().kind, FileKind::Dir);

    // Many entries: the listing pages through Readdir.
    client.mkdir("/many", 0o755).unwrap();
    for i in 0..1500 {
        client.mkdir(&format!("/many/{i:05}"), 0o755).unwrap();
    }
    let many = client.readdir("/many").unwrap();
    assert_eq!(many.len(), 1500);
    assert!(many.windows(2).all(|w| w[0].name < w[1].name));

    let status = client.status();
    assert_eq!(status.len(), 3);
    for (i, (entry, st)) in status.iter().enumerate() {
        let st = st.as_ref().unwrap();
        assert_eq!((entry.index, st.index), (i as u32, i as u32));
        assert_eq!(st.is_metadata, i == 0);
    }
}

#[test]
fn stage_out_of_a_run_directory_recreates_its_relative_links_on_the_pfs() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    client.mkdir("/tables", 0o755).unwrap();
    client.create("/tables/RRTM_DATA", 0o644, Layout::INHERIT).unwrap().write_at(b"table", 0).unwrap();
    client.mkdir("/run", 0o755).unwrap();
    client.symlink("../tables/RRTM_DATA", "/run/RRTM_DATA").unwrap();
    client.symlink("../tables", "/run/tables").unwrap();
    for path in ["/tables/RRTM_DATA", "/run/RRTM_DATA", "/run/tables"] {
        client.stage_out(path, &mut |_| {}).unwrap();
    }
    let pfs = cluster.pfs();
    assert_eq!(std::fs::read_link(pfs.join("run/RRTM_DATA")).unwrap(), Path::new("../tables/RRTM_DATA"));
    assert_eq!(std::fs::read_link(pfs.join("run/tables")).unwrap(), Path::new("../tables"));
    assert_eq!(std::fs::read(pfs.join("run/RRTM_DATA")).unwrap(), b"table", "the link leads to the staged table");
    let link = client.stat("/run/RRTM_DATA").unwrap();
    assert_eq!((link.kind, link.tier), (FileKind::Symlink, Tier::Staged));
}

#[test]
fn stage_out_makes_a_verified_pfs_copy() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    client.mkdir("/out", 0o755).unwrap();
    let data = pattern(5, 5 * MIB + 13);
    let f = client.create("/out/ckpt", 0o644, layout(3, 64 * KIB, 1)).unwrap();
    f.write_at(&data, 0).unwrap();
    let mut seen = Vec::new();
    let report = client.stage_out("/out/ckpt", &mut |done| seen.push(done)).unwrap();
    assert_eq!((report.bytes, report.stripes, report.path.as_str()), (data.len() as u64, 3, "/out/ckpt"));
    assert_eq!(seen.last(), Some(&(data.len() as u64)));
    // The report's CRC combines the per-object CRCs (one 64 MiB chunk each here).
    let object_crcs: Vec<u8> = (0..3)
        .flat_map(|stripe| {
            let object: Vec<u8> = data.chunks(64 * KIB).skip(stripe).step_by(3).flatten().copied().collect();
            crc32c::crc32c(&object).to_le_bytes()
        })
        .collect();
    assert_eq!(report.crc, crc32c::crc32c(&object_crcs));
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    assert!(std::fs::read(cluster.pfs().join("out/ckpt")).unwrap() == data, "PFS copy differs");
    assert_eq!(client.stat("/out/ckpt").unwrap().tier, Tier::Staged);
    assert!(read_all(&client, "/out/ckpt") == data);

    // Opening it for writing makes it a buffer file again.
    drop(client.open("/out/ckpt", libc::O_WRONLY, 0).unwrap());
    assert_eq!(client.stat("/out/ckpt").unwrap().tier, Tier::Buffer);
}

/// A descriptor opened before a stage-out keeps writing: the file is a
/// buffer file again at once (its PFS copy is not current), and staging it
/// again brings the PFS copy up to date. Truncation and chmod count too.
#[test]
fn a_write_after_stage_out_makes_the_file_dirty_again() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let mut data = pattern(11, 300 * KIB);
    let f = client.create("/ckpt", 0o644, layout(3, 64 * KIB, 0)).unwrap();
    f.write_at(&data, 0).unwrap();
    let stage = |expected: &[u8]| {
        client.stage_out("/ckpt", &mut |_| {}).unwrap();
        assert_eq!(client.stat("/ckpt").unwrap().tier, Tier::Staged);
        assert!(std::fs::read(cluster.pfs().join("ckpt")).unwrap() == expected, "PFS copy differs");
    };
    let tier = || client.stat("/ckpt").unwrap().tier;
    stage(&data);

    // Same size, one stripe, right after the stage-out.
    f.write_at(b"late bytes", 70 * KIB as u64).unwrap();
    data[70 * KIB..70 * KIB + 10].copy_from_slice(b"late bytes");
    assert_eq!(tier(), Tier::Buffer);
    assert_eq!(f.attr().unwrap().tier, Tier::Buffer);
    stage(&data);

    // A tail appended through the old descriptor.
    f.write_at(b"tail", data.len() as u64).unwrap();
    data.extend_from_slice(b"tail");
    assert_eq!(tier(), Tier::Buffer);
    stage(&data);

    f.set_len(1000).unwrap();
    data.truncate(1000);
    assert_eq!(tier(), Tier::Buffer);
    stage(&data);

    client.set_attr("/ckpt", &mode(0o600)).unwrap();
    assert_eq!(tier(), Tier::Buffer);
}

/// A write that lands while a stage-out copies the file (here from another
/// client, between the copy and the commit) fails that stage-out: the file
/// is never marked staged with a PFS copy that lacks the write, and no
/// partial copy appears under the final name.
#[test]
fn a_write_during_a_stage_out_fails_it_and_the_file_stays_in_the_buffer() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let mut data = pattern(31, 200 * KIB);
    client.create("/racing", 0o644, layout(3, 64 * KIB, 0)).unwrap().write_at(&data, 0).unwrap();
    let other = cluster.client();
    let late = other.open("/racing", libc::O_WRONLY, 0).unwrap();
    let mut raced = false;
    let err = client
        .stage_out("/racing", &mut |_| {
            if !raced {
                late.write_at(b"late", 130 * KIB as u64).unwrap();
                raced = true;
            }
        })
        .unwrap_err();
    assert!(raced, "the copy never reported progress");
    assert!(err.to_string().contains("changed during stage-out"), "{err}");
    assert_eq!(client.stat("/racing").unwrap().tier, Tier::Buffer);
    assert!(!cluster.pfs().join("racing").exists(), "a copy appeared under the final name");
    data[130 * KIB..130 * KIB + 4].copy_from_slice(b"late");
    client.stage_out("/racing", &mut |_| {}).unwrap();
    assert!(std::fs::read(cluster.pfs().join("racing")).unwrap() == data, "the PFS copy lacks the late write");
}

/// A stage-out whose directory cannot be made on the PFS (a regular file
/// took its name there after the buffer's directory was made) fails with
/// an error naming the path, and the file stays in the buffer, readable.
#[test]
fn a_stage_out_whose_pfs_directory_cannot_be_made_fails_and_keeps_the_file() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let data = pattern(41, 100 * KIB);
    client.mkdir("/run", 0o755).unwrap();
    client.create("/run/out.dat", 0o644, layout(2, 64 * KIB, 0)).unwrap().write_at(&data, 0).unwrap();
    std::fs::write(cluster.pfs().join("run"), b"someone else's file").unwrap();
    let err = client.stage_out("/run/out.dat", &mut |_| {}).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("/run/out.dat") && text.contains("not a directory"), "unclear error: {text}");
    assert_eq!(client.stat("/run/out.dat").unwrap().tier, Tier::Buffer);
    assert!(read_all(&client, "/run/out.dat") == data);
    assert_eq!(std::fs::read(cluster.pfs().join("run")).unwrap(), b"someone else's file");
}

/// Objects shorter than the file size implies (holes at the end of a
/// stripe, writes that reached some daemons only) stage out byte-exact,
/// with zeros in the holes.
#[test]
fn sparse_and_torn_files_stage_out_with_zeros_in_their_holes() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    // One byte at 10 MiB with 4 MiB stripes: stripes 0 and 1 hold nothing.
    let sparse = client.create("/sparse", 0o644, layout(3, 4 * MIB, 0)).unwrap();
    sparse.write_at(b"!", 10 * MIB as u64).unwrap();
    let mut sparse_bytes = vec![0u8; 10 * MIB + 1];
    sparse_bytes[10 * MIB] = b'!';
    // As a crash leaves it: a later write reached one daemon (unit 7, stripe 1), not the others.
    let torn = client.create("/torn", 0o644, layout(3, 64 * KIB, 1)).unwrap();
    let mut torn_bytes = pattern(3, 192 * KIB);
    torn.write_at(&torn_bytes, 0).unwrap();
    let tail = pattern(4, 1000);
    torn.write_at(&tail, 7 * 64 * KIB as u64).unwrap();
    torn_bytes.resize(7 * 64 * KIB, 0);
    torn_bytes.extend_from_slice(&tail);
    for (path, expected) in [("/sparse", &sparse_bytes), ("/torn", &torn_bytes)] {
        let report = client.stage_out(path, &mut |_| {}).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(report.bytes, expected.len() as u64);
        assert_eq!(client.stat(path).unwrap().tier, Tier::Staged);
        assert!(std::fs::read(cluster.pfs().join(&path[1..])).unwrap() == *expected, "PFS copy of {path} differs");
        assert!(read_all(&client, path) == *expected);
    }
}

/// With a stripe's daemon down, a staged file reads from its verified PFS
/// copy; a buffer file, which has none, fails with EIO.
#[test]
fn a_staged_file_is_read_from_its_pfs_copy_while_a_daemon_is_down() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.client();
    let data = pattern(21, 2 * MIB + 77);
    for path in ["/staged", "/unstaged"] {
        client.create(path, 0o644, layout(3, 64 * KIB, 0)).unwrap().write_at(&data, 0).unwrap();
    }
    client.stage_out("/staged", &mut |_| {}).unwrap();
    let opened_before = client.open("/staged", libc::O_RDONLY, 0).unwrap();
    cluster.kill(2);

    let mut buf = vec![0xee; data.len() + 10];
    assert_eq!(opened_before.read_at(&mut buf, 0).unwrap(), data.len());
    assert!(buf[..data.len()] == data[..], "read from the PFS copy differs");
    let opened_after = client.open("/staged", libc::O_RDONLY, 0).unwrap();
    let at = 2 * 64 * KIB + 5; // in stripe 2, on the dead daemon
    assert_eq!(opened_after.read_at(&mut buf[..1000], at as u64).unwrap(), 1000);
    assert!(buf[..1000] == data[at..at + 1000]);

    let unstaged = client.open("/unstaged", libc::O_RDONLY, 0).unwrap();
    let err = unstaged.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
}

#[test]
fn pfs_only_files_are_read_through_and_copied_up_when_changed() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let legacy = pattern(6, 3 * MIB + 1);
    std::fs::write(cluster.pfs().join("legacy.dat"), &legacy).unwrap();
    let attr = client.stat("/legacy.dat").unwrap();
    assert_eq!((attr.tier, attr.size), (Tier::Pfs, legacy.len() as u64));
    assert!(read_all(&client, "/legacy.dat") == legacy);
    let nothing = client.stage_out("/legacy.dat", &mut |_| {}).unwrap();
    assert_eq!((nothing.bytes, nothing.stripes), (legacy.len() as u64, 0));

    // Writing into it copies it up into the buffer first.
    let rw = client.open("/legacy.dat", libc::O_RDWR, 0).unwrap();
    rw.write_at(b"PATCH", MIB as u64).unwrap();
    let mut expected = legacy.clone();
    expected[MIB..MIB + 5].copy_from_slice(b"PATCH");
    assert!(read_all(&client, "/legacy.dat") == expected);
    assert_eq!(client.stat("/legacy.dat").unwrap().tier, Tier::Buffer);

    // O_TRUNC starts an empty buffer file; appending copies up first.
    std::fs::write(cluster.pfs().join("old.dat"), b"old contents").unwrap();
    let t = client.open("/old.dat", libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
    t.write(b"new").unwrap();
    assert_eq!(read_all(&client, "/old.dat"), b"new");
    std::fs::write(cluster.pfs().join("log.txt"), b"line 1\n").unwrap();
    client.open("/log.txt", libc::O_WRONLY | libc::O_APPEND, 0).unwrap().write(b"line 2\n").unwrap();
    assert_eq!(read_all(&client, "/log.txt"), b"line 1\nline 2\n");

    // Truncation copies up only what stays.
    std::fs::write(cluster.pfs().join("cut.dat"), &legacy).unwrap();
    client.truncate("/cut.dat", 1000).unwrap();
    assert!(read_all(&client, "/cut.dat") == legacy[..1000]);
    std::fs::write(cluster.pfs().join("zero.dat"), &legacy).unwrap();
    client.truncate("/zero.dat", 0).unwrap();
    assert_eq!(client.stat("/zero.dat").unwrap().size, 0);
}

#[test]
fn appends_from_many_clients_are_atomic_and_none_is_lost() {
    let cluster = TestCluster::start(3);
    cluster.client().create("/log", 0o644, Layout { stripe_count: 3, stripe_size: 64 << 10, first: 0 }).unwrap();
    let appenders: Vec<_> = (0..4)
        .map(|who| {
            let client = cluster.client();
            std::thread::spawn(move || {
                let f = client.open("/log", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
                for line in 0..300 {
                    // Lines of varying length, so they straddle stripe boundaries.
                    let text = format!("{who} {line} {}\n", "x".repeat((line * 37 + who * 11) % 300));
                    assert_eq!(f.write(text.as_bytes()).unwrap(), text.len());
                }
            })
        })
        .collect();
    for a in appenders {
        a.join().unwrap();
    }
    let text = String::from_utf8(read_all(&cluster.client(), "/log")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1200, "appends were lost or torn");
    lines.sort();
    let mut expected: Vec<String> = (0..4)
        .flat_map(|who| (0..300).map(move |line| format!("{who} {line} {}", "x".repeat((line * 37 + who * 11) % 300))))
        .collect();
    expected.sort();
    assert!(lines == expected, "a line was torn or duplicated");
}

#[test]
fn a_file_unlinked_while_open_keeps_its_data_until_the_last_close() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let data = pattern(11, 3 * MIB);
    let f = client.create("/tmp", 0o644, layout(2, MIB, 0)).unwrap();
    f.write_at(&data, 0).unwrap();
    let reader = client.open("/tmp", libc::O_RDONLY, 0).unwrap();
    let ino = f.ino();
    client.unlink("/tmp").unwrap();
    assert_eq!(errno(client.stat("/tmp")), libc::ENOENT);
    // Both handles still see and change the data.
    f.write_at(b"after unlink", 0).unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(reader.read_at(&mut back, 0).unwrap(), data.len());
    assert_eq!(&back[..12], b"after unlink");
    assert!(back[12..] == data[12..]);
    drop(f);
    // The deleter is woken by every removal and release: give it a round.
    let other = client.create("/other", 0o644, layout(2, MIB, 0)).unwrap();
    other.write_at(&data, 0).unwrap();
    let other_ino = other.ino();
    drop(other);
    client.unlink("/other").unwrap();
    assert_objects_deleted(&cluster, 0..2, other_ino, "an unrelated removed file's");
    assert!(cluster.object_size(0, ino) > 0, "the first close deleted data another handle still reads");
    drop(reader);
    assert_objects_deleted(&cluster, 0..2, ino, "the last close left the data behind: the");
}

#[test]
fn a_stat_that_meets_retired_objects_asks_the_name_again_instead_of_calling_the_file_empty() {
    // Between a stat's `Stat` and its objects' sizes, another process's
    // rename may remove the file and its deleter retire and delete the
    // objects (which then say size 0). Here the objects are retired while
    // the name still leads to them, so every attempt meets them.
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let f = client.create("/cfg", 0o644, layout(2, MIB, 0)).unwrap();
    f.write_at(&pattern(14, 3 * MIB), 0).unwrap();
    let ino = f.ino();
    drop(f);
    let on_every_daemon = |req: &surge_proto::Request<'_>| {
        for daemon in 0..2 {
            RawConn::dial_as_peer(&cluster, daemon).call::<()>(req).unwrap();
        }
    };
    on_every_daemon(&surge_proto::Request::ObjRetire { ino, checked: false, size: 0, mtime_ns: 0 });
    assert_eq!(errno(client.stat("/cfg")), libc::ESTALE, "a retired file's stat must not say size 0");
    on_every_daemon(&surge_proto::Request::ObjReinstate { ino });
    assert_eq!(client.stat("/cfg").unwrap().size, 3 * MIB as u64);
}

#[test]
fn a_removed_file_opened_again_by_its_objects_stays_until_that_handle_closes_too() {
    // What the interposer does for a descriptor a program inherited across
    // exec: the new program is another client, and the name went.
    let cluster = TestCluster::start(2);
    let (parent, child) = (cluster.client(), cluster.client());
    let f = parent.create("/shared", 0o600, layout(2, MIB, 1)).unwrap();
    let data = pattern(13, 3 * MIB);
    f.write_at(&data, 0).unwrap();
    let buffer_file = f.buffer_file().expect("a buffer file");
    parent.unlink("/shared").unwrap();
    let adopted = child.open_held("/shared", buffer_file, libc::O_RDWR).unwrap();
    drop(f);
    // The deleter is woken by every removal and release: give it a round.
    let other = parent.create("/other", 0o644, layout(2, MIB, 0)).unwrap();
    other.write_at(&data, 0).unwrap();
    let other_ino = other.ino();
    drop(other);
    parent.unlink("/other").unwrap();
    assert_objects_deleted(&cluster, 0..2, other_ino, "an unheld removed file's");

    adopted.write_at(b"child", 0).unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(adopted.read_at(&mut back, 0).unwrap(), data.len());
    assert!(&back[..5] == b"child" && back[5..] == data[5..], "the removed file lost data while held");
    let attr = adopted.attr().unwrap();
    assert_eq!((attr.size, attr.mode & 0o777, attr.ino), (data.len() as u64, 0o600, buffer_file.ino));
    drop(adopted);
    assert_objects_deleted(&cluster, 0..2, buffer_file.ino, "the last holder's close left the removed file's");

    // Deleted before it was opened again: its I/O fails, it reads no zeros.
    let late = child.open_held("/shared", buffer_file, libc::O_RDONLY).unwrap();
    assert_eq!(errno(late.read_at(&mut back, 0)), libc::ESTALE);
}

#[test]
fn a_file_removed_by_another_client_serves_the_holder_whole_until_its_last_close() {
    let cluster = TestCluster::start(2);
    let (holder, remover) = (cluster.client(), cluster.client());
    let f = holder.create("/shared", 0o644, layout(2, MIB, 0)).unwrap();
    let data = pattern(12, 3 * MIB);
    f.write_at(&data, 0).unwrap();
    let ino = f.ino();
    // The remover has nothing open; daemon 0 knows the holder has.
    remover.unlink("/shared").unwrap();
    let other = remover.create("/other", 0o644, layout(2, MIB, 0)).unwrap();
    other.write_at(&data, 0).unwrap();
    let other_ino = other.ino();
    drop(other);
    remover.unlink("/other").unwrap();
    assert_objects_deleted(&cluster, 0..2, other_ino, "an unheld removed file's");

    f.write_at(b"still mine", 0).unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
    assert!(&back[..10] == b"still mine" && back[10..] == data[10..], "the holder lost data of the removed file");
    drop(f);
    assert_objects_deleted(&cluster, 0..2, ino, "the holder's close left the removed file's");
}

/// A buffer file whose objects are fenced (`ObjRetire`) though it was
/// neither evicted nor removed, as while an eviction of it is tried and
/// undone: the handle's request is sent once more, and fails with ESTALE
/// while the fence stands; reinstated, the same handle reads and writes.
#[test]
fn a_fenced_file_still_at_its_path_is_retried_once_and_stays_loud_until_reinstated() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let f = client.create("/fenced", 0o644, layout(2, MIB, 0)).unwrap();
    let data = pattern(13, 2 * MIB);
    f.write_at(&data, 0).unwrap();
    let ino = f.ino();
    let mut raw: Vec<RawConn> = (0..2).map(|d| RawConn::dial_as_peer(&cluster, d)).collect();
    for conn in &mut raw {
        let retire = surge_proto::Request::ObjRetire { ino, checked: false, size: 0, mtime_ns: 0 };
        conn.call::<()>(&retire).unwrap();
    }
    for failure in [f.read_at(&mut [0; 4096], 0).map(drop), f.write_at(b"fenced", 0).map(drop)] {
        let e = failure.expect_err("a fenced object is never read or written");
        assert_eq!(e.errno(), libc::ESTALE, "{e}");
    }
    for conn in &mut raw {
        conn.call::<()>(&surge_proto::Request::ObjReinstate { ino }).unwrap();
    }
    f.write_at(b"back", 0).unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
    assert_eq!(&back[..4], b"back");
    assert!(back[4..] == data[4..]);
}

#[test]
fn a_new_namespace_never_serves_the_objects_of_a_lost_one() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.client();
    for i in 0..6 {
        client.create(&format!("/old{i}"), 0o644, Layout::INHERIT).unwrap().write(&pattern(i, MIB)).unwrap();
    }
    drop(client);
    // The metadata daemon's namespace is lost, the loss accepted; the data daemons keep theirs.
    cluster.kill(0);
    std::fs::remove_file(cluster.daemon_dir(0).join("namespace.redb")).unwrap();
    cluster.restart_with(0, &["--store-start", "accept-loss"]);
    let client = cluster.client();
    for i in 0..6 {
        let path = format!("/new{i}");
        client.create(&path, 0o644, Layout::INHERIT).unwrap().write(b"fresh").unwrap();
        assert_eq!(read_all(&client, &path), b"fresh", "{path} shows a lost namespace's bytes");
    }
}

#[test]
fn a_handle_on_a_pfs_only_file_follows_the_buffer_copy_another_writer_made() {
    // As the FUSE server sees `open(O_TRUNC)` of a staged-out file: it opens
    // the file, the kernel truncates it by path, and the program writes
    // through the interposer; the first handle must not report the old size.
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    std::fs::write(cluster.pfs().join("old.dat"), pattern(7, 3 * MIB)).unwrap();
    let first = client.open("/old.dat", libc::O_RDONLY, 0).unwrap();
    assert_eq!(first.attr().unwrap().size, 3 * MIB as u64);
    client.truncate("/old.dat", 0).unwrap();
    client.open("/old.dat", libc::O_WRONLY, 0).unwrap().write(b"fresh bytes").unwrap();
    let now = first.attr().unwrap();
    assert_eq!((now.size, now.tier), (11, Tier::Buffer));
    let mut buf = [0u8; 64];
    let n = first.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"fresh bytes");
}

#[test]
fn a_killed_daemon_fails_writers_fast_and_comes_back_after_restart() {
    let mut cluster = TestCluster::start(3);
    let timeout = Duration::from_secs(2);
    let client = Arc::new(cluster.client_with_timeout(timeout));
    let f = Arc::new(client.create("/durable", 0o644, layout(3, 64 * KIB, 0)).unwrap());
    let synced = pattern(9, 2 * MIB);
    f.write_at(&synced, 0).unwrap();
    f.fsync().unwrap();

    let (done_tx, done_rx) = mpsc::channel();
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            let chunk = pattern(10, MIB);
            let mut offset = 2 * MIB as u64;
            let _ = done_tx.send(None); // writing has started
            loop {
                match f.write_at(&chunk, offset) {
                    Ok(_) => offset += MIB as u64,
                    Err(e) => {
                        let _ = done_tx.send(Some((e, Instant::now())));
                        return;
                    }
                }
            }
        })
    };
    assert!(done_rx.recv().unwrap().is_none());
    std::thread::sleep(Duration::from_millis(100));
    cluster.kill(2);
    let killed_at = Instant::now();
    let (err, failed_at) = done_rx.recv_timeout(timeout * 3).expect("the writer hung").unwrap();
    writer.join().unwrap();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    assert!(err.message().contains("daemon 2"), "{err}");
    assert!(failed_at.duration_since(killed_at) <= timeout + Duration::from_millis(500));
    // Other calls fail fast too while it is down.
    let started = Instant::now();
    assert_eq!(f.fsync().unwrap_err().errno(), libc::EIO);
    assert!(started.elapsed() <= timeout + Duration::from_millis(500));

    cluster.restart(2);
    let mut back = vec![0; synced.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), synced.len());
    assert!(back == synced, "fsync'd data did not survive the crash");
    f.write_at(b"alive", 0).unwrap();
}

#[test]
fn a_write_that_runs_out_of_space_part_way_returns_the_landed_prefix_and_does_not_grow_the_file() {
    let cluster = TestCluster::start_with(2, &std::env::temp_dir(), &["--capacity", "8000000"]);
    // Daemon 0 has room for 1.5 MiB more, daemon 1 for all of it.
    let filler = pattern(1, 6 * MIB);
    let reply: surge_proto::msg::WriteReply = RawConn::dial(&cluster, 0)
        .call(&surge_proto::Request::Write { ino: 1 << 40, offset: 0, data: &filler })
        .unwrap();
    assert_eq!(reply.written, filler.len() as u64);
    let client = cluster.client();
    let f = client.create("/f", 0o644, layout(2, MIB, 0)).unwrap();
    // Units of 1 MiB alternate daemons 0, 1, 0, 1: the third fails part way
    // while the fourth lands on daemon 1.
    let data = pattern(2, 4 * MIB);
    let n = f.write_at(&data, 0).unwrap();
    assert!(n > 2 * MIB && n < 3 * MIB, "short count {n}");
    assert_eq!(f.attr().unwrap().size, n as u64, "bytes past the short count grew the file");
    assert_eq!(read_all(&client, "/f"), &data[..n]);
    // Writing the rest fails outright and changes nothing.
    assert_eq!(errno(f.write_at(&data[n..], n as u64)), libc::ENOSPC);
    assert_eq!(f.attr().unwrap().size, n as u64);
    assert_eq!(read_all(&client, "/f"), &data[..n]);
}

#[test]
fn a_byte_flipped_on_a_daemons_device_is_eio_fails_its_stage_out_and_is_found_by_scrub() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let l = layout(3, 64 * KIB, 0);
    client.mkdir("/d", 0o755).unwrap();
    let bad = client.create("/d/bad", 0o644, l).unwrap();
    bad.write_at(&pattern(1, 300 * KIB), 0).unwrap();
    // Sparse: a head, then a whole row of stripes at 159 units (every object ends there).
    let sparse = client.create("/d/sparse", 0o644, l).unwrap();
    sparse.write_at(&pattern(2, 100), 0).unwrap();
    sparse.write_at(&pattern(3, 192 * KIB), 159 * 64 * KIB as u64).unwrap();
    let mut sparse_bytes = pattern(2, 100);
    sparse_bytes.resize(159 * 64 * KIB, 0);
    sparse_bytes.extend(pattern(3, 192 * KIB));
    // Cut into the middle of a block, then grown back with zeros.
    let cut = client.create("/d/cut", 0o644, l).unwrap();
    cut.write_at(&pattern(4, 200 * KIB), 0).unwrap();
    cut.set_len(100 * KIB as u64 + 5).unwrap();
    cut.set_len(150 * KIB as u64).unwrap();
    let mut cut_bytes = pattern(4, 100 * KIB + 5);
    cut_bytes.resize(150 * KIB, 0);

    // File offset 70 KiB + 3 is stripe 1 (daemon 1), object offset 6 KiB + 3:
    // the block at object offset 4096, file offset 68 KiB.
    flip_byte(&cluster.object_file(1, bad.ino()), 6 * KIB as u64 + 3);
    let mut buf = vec![0u8; 300 * KIB];
    let err = bad.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    let text = err.to_string();
    assert!(text.contains("/d/bad") && text.contains("daemon 1") && text.contains("object offset 4096"), "{text}");
    assert_eq!(bad.read_at(&mut buf[..4], 70 * KIB as u64).unwrap_err().errno(), libc::EIO);
    assert_eq!(bad.read_at(&mut buf[..64 * KIB], 0).unwrap(), 64 * KIB, "other stripes read fine");
    let log = cluster.log(1);
    assert!(log.contains(&format!("object offset 4096 of inode {}", bad.ino())), "{log}");

    assert_eq!(read_all(&client, "/d/sparse"), sparse_bytes);
    assert_eq!(read_all(&client, "/d/cut"), cut_bytes);

    let staged = client.stage_out("/d/bad", &mut |_| {});
    assert_eq!(staged.unwrap_err().errno(), libc::EIO);
    assert!(!cluster.pfs().join("d/bad").exists(), "a damaged file is never staged out");
    for (path, bytes) in [("/d/sparse", &sparse_bytes), ("/d/cut", &cut_bytes)] {
        client.stage_out(path, &mut |_| {}).unwrap();
        assert_eq!(&std::fs::read(cluster.pfs().join(&path[1..])).unwrap(), bytes, "{path}");
    }

    let report = client.scrub("/d/bad").unwrap();
    assert_eq!(report.checked, 300 * KIB as u64);
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.damaged[0].offset, 68 * KIB as u64);
    assert!(report.damaged[0].daemon.starts_with("daemon 1 ("), "{report:?}");
    for path in ["/d/sparse", "/d/cut"] {
        assert_eq!(client.scrub(path).unwrap().damaged, vec![], "{path}");
    }
    // Rewriting the file from its source heals it.
    bad.write_at(&pattern(1, 300 * KIB), 0).unwrap();
    assert!(client.scrub("/d/bad").unwrap().damaged.is_empty());
    assert_eq!(read_all(&client, "/d/bad"), pattern(1, 300 * KIB));
}

#[test]
fn appends_stalled_longer_than_their_lock_lease_never_overwrite_an_acknowledged_line() {
    // Daemon 1 holds the whole file and hangs for longer than the lock's
    // lease (half of the 4 s timeout): an append must keep its lock while
    // its write waits, or fail, never let another append land at its end.
    let cluster = TestCluster::start(2);
    cluster.client().create("/stalled.log", 0o644, layout(1, 64 * KIB, 1)).unwrap();
    let appenders: Vec<_> = (0..3)
        .map(|who| {
            let client = cluster.client_with_timeout(Duration::from_secs(4));
            std::thread::spawn(move || {
                let f = client.open("/stalled.log", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
                let mut acknowledged = Vec::new();
                for line in 0..40 {
                    // Lengths differ, so a line written over another leaves a torn one.
                    let text = format!("{who} {line:03} {}\n", "y".repeat(100 + 37 * who + line % 7));
                    match f.write(text.as_bytes()) {
                        Ok(n) => {
                            assert_eq!(n, text.len());
                            acknowledged.push(text.trim_end().to_string());
                        }
                        // Failing before writing (the lock stayed busy) is allowed;
                        // learning afterwards that it may overlap another is not.
                        Err(e) => {
                            eprintln!("appender {who}, line {line}: {e}");
                            assert!(!e.to_string().contains("overlap"), "{e}");
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                acknowledged
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    cluster.signal(1, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    cluster.signal(1, libc::SIGCONT);
    let mut acknowledged: Vec<String> = appenders.into_iter().flat_map(|a| a.join().unwrap()).collect();
    let text = String::from_utf8(read_all(&cluster.client(), "/stalled.log")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    acknowledged.sort();
    assert!(acknowledged.len() >= 60, "only {} appends succeeded", acknowledged.len());
    assert!(lines == acknowledged, "the file's lines are not the acknowledged appends:\n{text:.3000}");
}
