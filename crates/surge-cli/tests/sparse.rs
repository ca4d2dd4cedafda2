//! Sparse files through the CLI on a real cluster: `surge cp` into and out
//! of Surge copies only data extents, and `surge stage-out` leaves a sparse
//! PFS copy.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use surge_testkit::cluster::Cluster;
use surge_testkit::pattern;

/// Bytes the file's blocks take.
fn allocated(path: &std::path::Path) -> u64 {
    fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn surge_cp_in_and_out_and_stage_out_keep_a_sparse_files_holes() {
    let c = Cluster::start(2, &[]);
    let size = 64u64 << 20;
    let data = pattern(5, 100_000);
    let source = c.local("sparse");
    let file = fs::File::create(&source).unwrap();
    file.write_all_at(&data, 3 << 20).unwrap();
    file.write_all_at(&data[..10], size - 10).unwrap();
    file.set_len(size).unwrap();
    drop(file);
    let mut want = vec![0u8; size as usize];
    want[3 << 20..(3 << 20) + data.len()].copy_from_slice(&data);
    want[size as usize - 10..].copy_from_slice(&data[..10]);
    assert_eq!(fs::read(&source).unwrap(), want);

    c.ok(&["mkdir", "/t"]);
    c.ok(&["cp", source.to_str().unwrap(), "/surge/t/f"]);
    let back = c.local("back");
    c.ok(&["cp", "/surge/t/f", back.to_str().unwrap()]);
    assert_eq!(fs::read(&back).unwrap(), want);
    assert!(allocated(&back) < 1 << 20, "surge cp wrote the holes: {} bytes allocated", allocated(&back));
    // The size is the file's, holes included.
    let stored = c.ok(&["ls", "-l", "/t"]);
    assert!(stored.contains(&size.to_string()), "{stored}");

    c.ok(&["stage-out", "--quiet", "/t"]);
    let staged = c.pfs().join("t/f");
    assert_eq!(fs::read(&staged).unwrap(), want);
    assert!(allocated(&staged) < 1 << 20, "the stage-out wrote the holes: {} bytes allocated", allocated(&staged));
}
