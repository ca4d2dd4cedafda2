//! The wire format against its description, docs/protocol.md.
//!
//! The unit tests in `src/` round-trip through the same code, so they pass
//! whatever the bytes are. These tests pin the bytes: the expected frames and
//! bodies below are written out by hand from the tables of docs/protocol.md,
//! and the op list is read from the document itself, so a change on either
//! side that the other does not follow fails here.

use std::collections::BTreeMap;
use surge_proto::frame::{self, ReplyHeader, RequestHeader};
use surge_proto::msg::{Attr, FileKind, Op, Reply, Request, Tier, WriteReply};
use surge_proto::{Encoder, Layout};

const PROTOCOL_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");

/// Every `name → code` the document gives: the rows of its op tables
/// (`| Open | 0x10 | ...`) and the session ops named in prose (`` `Hello` (0x01) ``).
fn documented_ops(doc: &str) -> BTreeMap<String, u8> {
    let mut ops = BTreeMap::new();
    let mut add = |name: &str, code: &str| {
        let code = u8::from_str_radix(code.trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("docs/protocol.md: op {name} has a bad code {code}"));
        if let Some(old) = ops.insert(name.to_string(), code) {
            assert_eq!(old, code, "docs/protocol.md gives op {name} two codes");
        }
    };
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if line.starts_with('|') && cells.len() > 3 && cells[2].starts_with("0x") {
            add(cells[1], cells[2]);
        }
        // Prose: `Name` (0xNN)
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            let after = &rest[start + 1..];
            let Some(end) = after.find('`') else { break };
            let (name, tail) = (&after[..end], &after[end + 1..]);
            if let Some(code) = tail.strip_prefix(" (0x").and_then(|t| t.split(')').next()) {
                add(name, &format!("0x{code}"));
            }
            rest = tail;
        }
    }
    ops
}

#[test]
fn the_documented_op_list_equals_the_protocols_ops() {
    let doc = std::fs::read_to_string(PROTOCOL_MD).expect("read docs/protocol.md");
    let documented = documented_ops(&doc);
    let code: BTreeMap<String, u8> = Op::ALL.iter().map(|op| (format!("{op:?}"), *op as u8)).collect();
    assert_eq!(documented, code, "docs/protocol.md (left) and Op::ALL (right) disagree");
}

#[test]
fn the_op_list_parser_reads_tables_and_prose() {
    let doc = "1. `Hello` (0x01) `str client`\n| Open | 0x10 | `str path` | attr |\n| op | code | body |\n";
    let ops = documented_ops(doc);
    assert_eq!(ops, BTreeMap::from([("Hello".to_string(), 0x01), ("Open".to_string(), 0x10)]));
}

#[test]
fn a_request_header_is_the_documented_40_bytes() {
    let hdr = RequestHeader {
        op: Op::Open as u8,
        body_len: 42,
        request_id: 0x0102_0304_0506_0708,
        job_id: 0x1112_1314_1516_1718,
        io_size: 0x2122_2324_2526_2728,
        body_crc: 0xdead_beef,
    };
    #[rustfmt::skip]
    let expected: [u8; 40] = [
        b'S', b'G',                                     // magic
        11,                                             // version
        0x10,                                           // op (Open)
        42, 0, 0, 0,                                    // body_len
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // request_id
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, // job_id
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, // io_size
        0xef, 0xbe, 0xad, 0xde,                         // body_crc
        0, 0, 0, 0,                                     // reserved
    ];
    assert_eq!(hdr.encode(), expected);
    assert_eq!(RequestHeader::decode(&expected).unwrap(), hdr);
}

#[test]
fn a_reply_header_is_the_documented_24_bytes() {
    let hdr = ReplyHeader {
        op: Op::Stat as u8,
        status: 2, // ENOENT on Linux: status carries the errno itself
        request_id: 0x0102_0304_0506_0708,
        body_len: 5,
        body_crc: 0xdead_beef,
    };
    #[rustfmt::skip]
    let expected: [u8; 24] = [
        b'S', b'G',                                     // magic
        11,                                             // version
        0x11,                                           // op (Stat)
        2, 0, 0, 0,                                     // status: ENOENT
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // request_id
        5, 0, 0, 0,                                     // body_len
        0xef, 0xbe, 0xad, 0xde,                         // body_crc
    ];
    assert_eq!(hdr.encode(), expected);
    assert_eq!(ReplyHeader::decode(&expected).unwrap(), hdr);
}

#[test]
fn a_frame_carries_the_crc32c_of_its_whole_body() {
    // "123456789" is CRC-32C's (Castagnoli) check string: its CRC is 0xe3069283.
    let mut wire = Vec::new();
    frame::write_request(&mut wire, Op::Write as u8, 1, 2, 4, b"12345", b"6789").unwrap();
    assert_eq!(&wire[32..36], &[0x83, 0x92, 0x06, 0xe3], "body_crc");
    assert_eq!(&wire[4..8], &[9, 0, 0, 0], "body_len");
    assert_eq!(&wire[40..], b"123456789");
}

/// The body a request encodes to: its fields, then its bulk tail.
fn body(req: &Request<'_>) -> Vec<u8> {
    let mut e = Encoder::new();
    let bulk = req.encode(&mut e);
    let mut body = e.buf;
    body.extend_from_slice(bulk);
    body
}

#[test]
fn an_open_body_is_path_flags_mode_and_layout() {
    let req = Request::Open {
        path: "/a",
        flags: 1 | 4, // create, write
        mode: 0o644,
        layout: Layout { stripe_count: 2, stripe_size: 1 << 20, first: 1 },
    };
    #[rustfmt::skip]
    let expected = [
        2, 0, 0, 0, b'/', b'a',                // str path: u32 length, bytes
        5, 0, 0, 0,                            // u32 flags
        0xa4, 0x01, 0, 0,                      // u32 mode 0o644
        2, 0, 0, 0,                            // layout: u32 stripe_count
        0, 0, 0x10, 0, 0, 0, 0, 0,             //         u64 stripe_size (1 MiB)
        1, 0, 0, 0,                            //         u32 first
    ];
    assert_eq!(body(&req), expected);
    assert_eq!(Request::decode(Op::Open, &expected).unwrap(), req);
}

#[test]
fn a_write_body_is_ino_offset_then_the_data_without_a_length() {
    let req = Request::Write { ino: 7, offset: 0x1000, data: b"xyz" };
    #[rustfmt::skip]
    let expected = [
        7, 0, 0, 0, 0, 0, 0, 0,                // u64 ino
        0, 0x10, 0, 0, 0, 0, 0, 0,             // u64 offset
        b'x', b'y', b'z',                      // data, the body's tail
    ];
    assert_eq!(body(&req), expected);
    assert_eq!(Request::decode(Op::Write, &expected).unwrap(), req);
    assert_eq!(req.io_size(), 3);

    let reply = WriteReply { written: 3, size_before: 0x1000 };
    #[rustfmt::skip]
    let expected_reply = [
        3, 0, 0, 0, 0, 0, 0, 0,                // u64 written
        0, 0x10, 0, 0, 0, 0, 0, 0,             // u64 size_before
    ];
    assert_eq!(reply.to_body(), expected_reply);
}

#[test]
fn a_hello_body_ends_with_the_client_instance_and_a_close_body_is_the_inode() {
    let hello = Request::Hello { client: "c", job_label: "", pid: 7, host: "h", instance: 0x0102_0304_0506_0708 };
    #[rustfmt::skip]
    let expected = [
        1, 0, 0, 0, b'c',                              // str client
        0, 0, 0, 0,                                    // str job_label
        7, 0, 0, 0,                                    // u32 pid
        1, 0, 0, 0, b'h',                              // str host
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // u64 instance
    ];
    assert_eq!(body(&hello), expected);
    assert_eq!(Request::decode(Op::Hello, &expected).unwrap(), hello);

    let close = Request::Close { ino: 0x1234 };
    let expected = [0x34, 0x12, 0, 0, 0, 0, 0, 0]; // u64 ino
    assert_eq!((close.op() as u8, body(&close)), (0x07, expected.to_vec()));
    assert_eq!(Request::decode(Op::Close, &expected).unwrap(), close);
    assert!(Request::decode(Op::Close, &expected[..7]).is_err(), "a short body is refused");
}

#[test]
fn a_pfs_write_body_is_path_offset_then_the_data_and_a_pfs_sync_body_the_path() {
    let req = Request::PfsWrite { path: "/c", offset: 0x1000, data: b"xy" };
    #[rustfmt::skip]
    let expected = [
        2, 0, 0, 0, b'/', b'c',                // str path
        0, 0x10, 0, 0, 0, 0, 0, 0,             // u64 offset
        b'x', b'y',                            // data, the body's tail
    ];
    assert_eq!(body(&req), expected);
    assert_eq!(Request::decode(Op::PfsWrite, &expected).unwrap(), req);
    assert_eq!((req.op() as u8, req.io_size()), (0x08, 2));
    let sync = Request::PfsSync { path: "/c" };
    assert_eq!(body(&sync), [2, 0, 0, 0, b'/', b'c']);
    assert_eq!(sync.op() as u8, 0x09);
}

#[test]
fn an_attr_reply_is_the_documented_field_sequence() {
    let attr = Attr {
        ino: 9,
        kind: FileKind::File,
        mode: 0o600,
        size: 10,
        atime_ns: 2,
        mtime_ns: 1,
        ctime_ns: -1,
        uid: 1000,
        gid: 0xffff_ffff,
        nlink: 3,
        rdev: 0x0801,
        layout: Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0xffff_ffff },
        tier: Tier::Staged,
        created: false,
        staged_version: 42,
        blocks: 16,
    };
    #[rustfmt::skip]
    let expected = [
        9, 0, 0, 0, 0, 0, 0, 0,                // u64 ino
        1,                                     // u8 kind: file
        0x80, 0x01, 0, 0,                      // u32 mode 0o600
        10, 0, 0, 0, 0, 0, 0, 0,               // u64 size
        2, 0, 0, 0, 0, 0, 0, 0,                // i64 atime_ns
        1, 0, 0, 0, 0, 0, 0, 0,                // i64 mtime_ns
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // i64 ctime_ns: -1
        0xe8, 0x03, 0, 0,                      // u32 uid 1000
        0xff, 0xff, 0xff, 0xff,                // u32 gid: the cluster's user
        3, 0, 0, 0,                            // u32 nlink
        0x01, 0x08, 0, 0, 0, 0, 0, 0,          // u64 rdev
        1, 0, 0, 0,                            // layout: u32 stripe_count
        0, 0, 0x10, 0, 0, 0, 0, 0,             //         u64 stripe_size
        0xff, 0xff, 0xff, 0xff,                //         u32 first: the daemon chooses
        1,                                     // u8 tier: staged
        0,                                     // u8 created: no
        42, 0, 0, 0, 0, 0, 0, 0,               // u64 staged_version
        16, 0, 0, 0, 0, 0, 0, 0,               // u64 blocks
    ];
    assert_eq!(attr.to_body(), expected);
    assert_eq!(Attr::from_body(&expected).unwrap(), attr);
}
