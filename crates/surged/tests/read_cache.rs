//! The registry's `lru` read cache (`surged --cache lru`) in a real daemon:
//! a reread is served from it, and no change of an object's bytes (write,
//! truncate, punch, removal, retirement by the fence) lets it serve the
//! bytes from before the change.

mod common;

use common::{Client, Fixture};
use surge_proto::msg::{AllocateMode, DaemonStatus, WriteReply};
use surge_proto::{Errno, Request};
use surge_testkit::pattern;

const INO: u64 = 5;
const LEN: u32 = 3 * 4096;

fn hits(c: &mut Client) -> u64 {
    c.ok::<DaemonStatus>(&Request::Status).cache_hits
}

/// Reads the object twice: the first read goes to the store (the change
/// before it dropped what was cached), the second comes from the cache;
/// both must be `expected`.
fn read_twice(c: &mut Client, expected: &[u8]) {
    let read = Request::Read { ino: INO, offset: 0, len: LEN };
    let before = hits(c);
    assert!(c.read(&read) == expected, "the read after the change got other bytes");
    assert_eq!(hits(c), before, "the read after the change was served by the cache");
    assert!(c.read(&read) == expected, "the reread got other bytes");
    assert_eq!(hits(c), before + 1, "the reread missed the cache");
}

#[test]
fn no_change_of_an_object_lets_the_cache_serve_its_old_bytes() {
    let f = Fixture::new();
    let daemon = f.spawn(0, 1, &["--cache", "lru", "--cache-size", "1M"]);
    let status: DaemonStatus = daemon.client(&f).ok(&Request::Status);
    assert!(status.stages.contains("cache=lru(1048576)"), "{}", status.stages);
    // `ObjRemove`, `ObjRetire` and `ObjReinstate` are peer operations.
    let mut c = daemon.peer(&f);
    let mut model = pattern(1, LEN as usize);
    c.ok::<WriteReply>(&Request::Write { ino: INO, offset: 0, data: &model });
    read_twice(&mut c, &model);

    c.ok::<WriteReply>(&Request::Write { ino: INO, offset: 100, data: b"overwritten" });
    model[100..111].copy_from_slice(b"overwritten");
    read_twice(&mut c, &model);

    c.ok::<()>(&Request::ObjAllocate { ino: INO, offset: 4096, len: 4096, mode: AllocateMode::PunchHole });
    model[4096..8192].fill(0);
    read_twice(&mut c, &model);

    c.ok::<()>(&Request::ObjTruncate { ino: INO, len: 5000 });
    model.truncate(5000);
    read_twice(&mut c, &model);

    c.ok::<()>(&Request::ObjRetire { ino: INO, checked: false, size: 0, mtime_ns: 0 });
    let (errno, _) = c.fails(&Request::Read { ino: INO, offset: 0, len: LEN });
    assert_eq!(errno, Errno(libc::ESTALE), "a retired object's cached bytes were served");
    c.ok::<()>(&Request::ObjReinstate { ino: INO });
    read_twice(&mut c, &model);

    c.ok::<()>(&Request::ObjRemove { ino: INO });
    read_twice(&mut c, b"");
}
