//! Verified copies between the host and Surge (`Client::stage_in`,
//! `Client::stage_out_to`) on a real 3-daemon cluster: bytes, holes and
//! modes arrive, and a copy damaged on the way is refused, never used.

mod common;

use common::TestCluster;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use surge_client::Layout;
use surge_testkit::{flip_byte, pattern};

const KIB: usize = 1024;

#[test]
fn a_staged_in_file_reads_back_byte_for_byte_with_its_holes_and_mode() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("input.dat");
    // Data, 40 MiB of zeros (more than a copy chunk: left as a hole), data.
    let mut bytes = pattern(1, 3 * 1024 * KIB + 17);
    bytes.resize(bytes.len() + 40 * 1024 * KIB, 0);
    bytes.extend(pattern(2, 100 * KIB));
    fs::write(&source, &bytes).unwrap();
    fs::set_permissions(&source, fs::Permissions::from_mode(0o640)).unwrap();

    let mut seen = 0;
    let copied = client.stage_in(&source, "/in/input.dat", &mut |done| seen = done).unwrap_err();
    assert_eq!(copied.errno(), libc::ENOENT, "the destination's directory must exist: {copied}");
    client.mkdir("/in", 0o755).unwrap();
    let copied = client.stage_in(&source, "/in/input.dat", &mut |done| seen = done).unwrap();
    assert_eq!((copied.bytes, copied.crc, seen), (bytes.len() as u64, crc32c::crc32c(&bytes), bytes.len() as u64));
    let attr = client.stat("/in/input.dat").unwrap();
    assert_eq!((attr.size, attr.mode & 0o7777), (bytes.len() as u64, 0o640));
    let mut back = vec![0u8; bytes.len()];
    let f = client.open("/in/input.dat", libc::O_RDONLY, 0).unwrap();
    assert_eq!(f.read_at(&mut back, 0).unwrap(), bytes.len());
    assert!(back == bytes, "the staged-in bytes differ");
    let stored: u64 = (0..3)
        .filter_map(|d| fs::metadata(cluster.object_file(d, attr.ino)).ok())
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .sum();
    assert!(stored < 10 * 1024 * KIB as u64, "the zeros were written out: {stored} object bytes");

    // Staging in again replaces the file.
    fs::write(&source, b"shorter").unwrap();
    client.stage_in(&source, "/in/input.dat", &mut |_| {}).unwrap();
    assert_eq!(client.stat("/in/input.dat").unwrap().size, 7);
    let missing = client.stage_in(&dir.path().join("absent"), "/in/x", &mut |_| {}).unwrap_err();
    assert!(missing.errno() == libc::ENOENT && missing.to_string().contains("absent"), "{missing}");
}

#[test]
fn a_file_staged_out_elsewhere_replaces_the_destination_whole_and_a_damaged_one_leaves_it_untouched() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let layout = Layout { stripe_count: 3, stripe_size: 64 * KIB as u64, first: u32::MAX };
    let good = client.create("/good", 0o600, layout).unwrap();
    let bytes = pattern(5, 700 * KIB + 3);
    good.write_at(&bytes, 0).unwrap();
    let bad = client.create("/bad", 0o600, layout).unwrap();
    bad.write_at(&bytes, 0).unwrap();

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("results.dat");
    fs::write(&dest, b"the previous results").unwrap();
    let copied = client.stage_out_to("/good", &dest, &mut |_| {}).unwrap();
    assert_eq!((copied.bytes, copied.crc), (bytes.len() as u64, crc32c::crc32c(&bytes)));
    assert!(fs::read(&dest).unwrap() == bytes);
    assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o7777, 0o600);

    // A flipped byte in a stored block: the read is refused, nothing replaces the destination.
    flip_byte(&cluster.object_file(1, bad.ino()), 5);
    let kept = out.path().join("kept.dat");
    fs::write(&kept, b"the previous results").unwrap();
    let err = client.stage_out_to("/bad", &kept, &mut |_| {}).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    assert_eq!(fs::read(&kept).unwrap(), b"the previous results");
    let names: Vec<_> = fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "a temporary copy was left behind: {names:?}");
}

#[test]
fn symbolic_links_are_staged_in_and_out_as_links_with_their_targets() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("RRTM_DATA");
    std::os::unix::fs::symlink("../tables/RRTM_DATA", &source).unwrap();
    client.mkdir("/run", 0o755).unwrap();
    client.create("/run/RRTM_DATA", 0o644, Layout::INHERIT).unwrap();
    let copied = client.stage_in(&source, "/run/RRTM_DATA", &mut |_| {}).unwrap();
    assert_eq!((copied.bytes, copied.crc), (0, 0));
    assert_eq!(client.readlink("/run/RRTM_DATA").unwrap(), "../tables/RRTM_DATA", "the file was replaced by the link");

    let dest = dir.path().join("out");
    fs::write(&dest, b"an older file").unwrap();
    client.stage_out_to("/run/RRTM_DATA", &dest, &mut |_| {}).unwrap();
    assert_eq!(fs::read_link(&dest).unwrap(), std::path::Path::new("../tables/RRTM_DATA"));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary link left behind");
}
