//! The read-back of a copy into Surge where it rests (`ObjSums`, see
//! `transfer.rs`): each daemon re-reads its stripe, checks every block
//! against its checksum at rest and answers each stripe unit's CRC-32C; a
//! damaged block is EIO, never a CRC; a stage-in whose file ends in zeros
//! (objects shorter than the file) still verifies.

mod common;

use common::{RawConn, TestCluster};
use std::fs;
use surge_client::Layout;
use surge_proto::msg::{ObjSumsReply, MAX_SUMS};
use surge_proto::Request;
use surge_testkit::{flip_byte, pattern};

const KIB: usize = 1024;
const UNIT: usize = 64 * KIB;

#[test]
fn obj_sums_answers_each_units_crc_from_the_store_and_eio_for_a_damaged_block() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let layout = Layout { stripe_count: 2, stripe_size: UNIT as u64, first: 0 };
    let file = client.create("/f", 0o600, layout).unwrap();
    let bytes = pattern(7, 5 * UNIT + 100);
    file.write_at(&bytes, 0).unwrap();
    file.fsync().unwrap();
    // Stripe 0 holds file units 0, 2 and 4 (its objects' units 0, 1 and 2).
    let units: Vec<&[u8]> = bytes.chunks(UNIT).collect();
    let mut conn = RawConn::dial(&cluster, 0);
    let sums: ObjSumsReply =
        conn.call(&Request::ObjSums { ino: file.ino(), offset: 0, len: u64::MAX, piece: UNIT as u64 }).unwrap();
    assert_eq!(sums.bytes, 3 * UNIT as u64);
    assert_eq!(sums.crcs, [units[0], units[2], units[4]].map(crc32c::crc32c));
    // Stripe 1 ends inside its last unit: a short last piece; asking from its end gives nothing.
    let mut conn1 = RawConn::dial(&cluster, 1);
    let tail: ObjSumsReply = conn1
        .call(&Request::ObjSums { ino: file.ino(), offset: UNIT as u64, len: u64::MAX, piece: UNIT as u64 })
        .unwrap();
    assert_eq!(
        (tail.bytes, tail.crcs),
        ((UNIT + 100) as u64, vec![crc32c::crc32c(units[3]), crc32c::crc32c(units[5])])
    );
    let past: ObjSumsReply =
        conn1.call(&Request::ObjSums { ino: file.ino(), offset: 1 << 30, len: 10, piece: 4096 }).unwrap();
    assert_eq!((past.bytes, past.crcs.len()), (0, 0));
    // One request answers at most MAX_SUMS pieces; a zero piece is refused.
    let bounded: ObjSumsReply =
        conn.call(&Request::ObjSums { ino: file.ino(), offset: 0, len: u64::MAX, piece: 1 }).unwrap();
    assert_eq!((bounded.bytes, bounded.crcs.len()), (MAX_SUMS as u64, MAX_SUMS));
    let zero = conn.call::<ObjSumsReply>(&Request::ObjSums { ino: file.ino(), offset: 0, len: 10, piece: 0 });
    assert_eq!(zero.unwrap_err(), libc::EINVAL);

    flip_byte(&cluster.object_file(0, file.ino()), UNIT as u64 + 9);
    let damaged =
        conn.call::<ObjSumsReply>(&Request::ObjSums { ino: file.ino(), offset: 0, len: u64::MAX, piece: UNIT as u64 });
    assert_eq!(damaged.unwrap_err(), libc::EIO);
}

#[test]
fn a_stage_in_ending_in_zeros_verifies_where_its_objects_rest() {
    let cluster = TestCluster::start(3);
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("tail-of-zeros.dat");
    // Data over a few units, then 5 MiB of zeros: left as holes, past some objects' ends.
    let mut bytes = pattern(3, 3 * 1024 * KIB + 17);
    bytes.resize(bytes.len() + 5 * 1024 * KIB, 0);
    fs::write(&source, &bytes).unwrap();
    let copied = client.stage_in(&source, "/tail.dat", &mut |_| {}).unwrap();
    assert_eq!((copied.bytes, copied.crc), (bytes.len() as u64, crc32c::crc32c(&bytes)));
    let mut back = vec![0u8; bytes.len()];
    let f = client.open("/tail.dat", libc::O_RDONLY, 0).unwrap();
    assert_eq!(f.read_at(&mut back, 0).unwrap(), bytes.len());
    assert!(back == bytes, "the staged-in bytes differ");
}
