//! Holes through the Rust API on a real three-daemon cluster: SEEK_DATA and
//! SEEK_HOLE over striped objects agree with a local file written alike,
//! fallocate's modes, and st_blocks from the objects' allocation.

mod common;

use common::TestCluster;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use surge_client::Layout;
use surge_testkit::pattern;

const KIB: u64 = 1 << 10;

/// What lseek(2) says of `file` from `offset` with SEEK_DATA (or SEEK_HOLE): the offset or the errno.
fn local_seek(file: &fs::File, offset: u64, hole: bool) -> Result<u64, i32> {
    let whence = if hole { libc::SEEK_HOLE } else { libc::SEEK_DATA };
    // SAFETY: lseek on a descriptor the test owns.
    match unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, whence) } {
        found if found >= 0 => Ok(found as u64),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

#[test]
fn seek_data_and_seek_hole_over_striped_objects_agree_with_a_local_file() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let local_dir = tempfile::tempdir().unwrap();
    // Writes inside units, across unit and stripe boundaries, and a tail past a long hole.
    let writes = [(0u64, 100usize), (70 * KIB, 8192), (190 * KIB, 70_000), (1 << 20, 5), (3 << 20, 4096)];
    let layouts = [
        Layout { stripe_count: 3, stripe_size: 64 * KIB, first: 1 },
        Layout { stripe_count: 2, stripe_size: 1 << 20, first: 0 },
    ];
    for (i, layout) in layouts.into_iter().enumerate() {
        let path = format!("/holes{i}");
        let file = client.create(&path, 0o644, layout).unwrap();
        let local = fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(local_dir.path().join(&path[1..]))
            .unwrap();
        for (k, &(offset, len)) in writes.iter().enumerate() {
            let data = pattern(k as u64, len);
            assert_eq!(file.write_at(&data, offset).unwrap(), len);
            local.write_all_at(&data, offset).unwrap();
        }
        let size = local.metadata().unwrap().len();
        assert_eq!(file.attr().unwrap().size, size);
        for offset in (0..size + 2 * KIB).step_by(2 * KIB as usize).chain([size - 1, size, 65 * KIB + 1]) {
            for hole in [false, true] {
                let got = file.seek_data_or_hole(offset, hole).map_err(|e| e.errno());
                assert_eq!(got, local_seek(&local, offset, hole), "{layout:?} from {offset}, hole {hole}");
            }
        }
        // Data takes blocks, holes none: within a few blocks of the local file.
        let (blocks, local_blocks) = (file.attr().unwrap().blocks, local.metadata().unwrap().blocks());
        assert!(blocks.abs_diff(local_blocks) <= 8 * 8, "{layout:?}: {blocks} blocks, locally {local_blocks}");
    }
}

#[test]
fn fallocate_punches_zeroes_and_preallocates_across_stripes() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let layout = Layout { stripe_count: 3, stripe_size: 64 * KIB, first: 0 };
    let file = client.create("/f", 0o644, layout).unwrap();
    let mut model = pattern(1, 600 * KIB as usize);
    file.write_at(&model, 0).unwrap();
    let dense = file.attr().unwrap().blocks;
    // Across every stripe, ragged at both ends.
    file.fallocate(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 30 * KIB + 5, 400 * KIB).unwrap();
    model[(30 * KIB + 5) as usize..(430 * KIB + 5) as usize].fill(0);
    let attr = file.attr().unwrap();
    assert_eq!(attr.size, model.len() as u64);
    assert!(attr.blocks + 390 * 2 <= dense, "{} blocks after the punch, {dense} before", attr.blocks);
    assert_eq!(file.seek_data_or_hole(0, true).unwrap(), 32 * KIB);
    assert_eq!(file.seek_data_or_hole(32 * KIB, false).unwrap(), 428 * KIB);
    file.fallocate(libc::FALLOC_FL_ZERO_RANGE, 590 * KIB, 20 * KIB).unwrap();
    model[590 * KIB as usize..].fill(0);
    model.resize(610 * KIB as usize, 0);
    let mut buf = vec![0xeeu8; model.len() + 1];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), model.len());
    assert_eq!(&buf[..model.len()], &model[..]);
    let before = file.attr().unwrap().blocks;
    file.fallocate(libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 256 * KIB).unwrap();
    let attr = file.attr().unwrap();
    assert_eq!(attr.size, model.len() as u64, "KEEP_SIZE keeps it");
    assert!(attr.blocks >= before + 256 * 2, "{} blocks after preallocating, {before} before", attr.blocks);
    file.fallocate(0, 2 << 20, 1).unwrap();
    assert_eq!(file.attr().unwrap().size, (2 << 20) + 1, "mode 0 grows the file");
    for (mode, errno) in [
        (libc::FALLOC_FL_COLLAPSE_RANGE, libc::EOPNOTSUPP),
        (libc::FALLOC_FL_INSERT_RANGE, libc::EOPNOTSUPP),
        (libc::FALLOC_FL_PUNCH_HOLE, libc::EOPNOTSUPP),
    ] {
        assert_eq!(file.fallocate(mode, 0, 4096).unwrap_err().errno(), errno, "mode {mode:#x}");
    }
    assert_eq!(file.fallocate(0, 0, 0).unwrap_err().errno(), libc::EINVAL);
    let reader = client.open("/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(reader.fallocate(0, 0, 4096).unwrap_err().errno(), libc::EBADF);
}
