//! Namespace requests to a real metadata daemon: every operation, its errno
//! cases, the union view with the PFS and path escapes.

mod common;

use common::{Client, Fixture};
use std::fs;
use std::os::unix::fs::symlink;
use surge_proto::link::LINK_MET;
use surge_proto::msg::open_flags::{CREATE, DIRECTORY, EXCL, TRUNC, WRITE};
use surge_proto::msg::{ReaddirReply, Removed};
use surge_proto::{Attr, Errno, FileKind, Layout, Request, Tier};
use surge_testkit::pattern;

fn open(c: &mut Client, path: &str, flags: u32) -> Result<Attr, Errno> {
    let answer = c.call(&Request::Open { path, flags, mode: 0o644, layout: Layout::INHERIT, local: vec![] });
    match answer.errno() {
        None => Ok(surge_proto::msg::Reply::from_body(&answer.body).unwrap()),
        Some(errno) => Err(errno),
    }
}

fn names(c: &mut Client, path: &str) -> Vec<String> {
    let reply: ReaddirReply = c.ok(&Request::Readdir { path, after: "", max: 0 });
    assert!(reply.end);
    reply.entries.into_iter().map(|e| e.name).collect()
}

fn errno(c: &mut Client, req: Request<'_>) -> Errno {
    c.fails(&req).0
}

#[test]
fn every_namespace_operation_and_its_errors() {
    let f = Fixture::new();
    let d = f.spawn(0, 3, &["--stripe-count", "2", "--stripe-size", "131072"]);
    let mut c = d.client(&f);

    let root: Attr = c.ok(&Request::Stat { path: "/" });
    assert_eq!((root.kind, root.layout.stripe_count, root.layout.stripe_size), (FileKind::Dir, 2, 131072));

    let dir: Attr = c.ok(&Request::Mkdir { path: "/ckpt", mode: 0o750 });
    assert_eq!((dir.kind, dir.mode, dir.created), (FileKind::Dir, 0o750, true));
    assert_eq!(errno(&mut c, Request::Mkdir { path: "/ckpt", mode: 0o750 }), Errno::EEXIST);
    assert_eq!(errno(&mut c, Request::Mkdir { path: "/no/parent", mode: 0o750 }), Errno::ENOENT);

    let file = open(&mut c, "/ckpt/rank0", CREATE | WRITE).unwrap();
    assert!(file.created);
    assert_eq!((file.layout.stripe_count, file.layout.stripe_size, file.tier), (2, 131072, Tier::Buffer));
    assert_eq!(open(&mut c, "/ckpt/rank0", CREATE | EXCL | WRITE), Err(Errno::EEXIST));
    assert_eq!(open(&mut c, "/ckpt/rank0", DIRECTORY), Err(Errno::ENOTDIR));
    assert_eq!(open(&mut c, "/ckpt", WRITE), Err(Errno::EISDIR));
    assert_eq!(open(&mut c, "/ckpt/none", 0), Err(Errno::ENOENT));
    assert_eq!(open(&mut c, "/ckpt/rank0/x", CREATE), Err(Errno::ENOTDIR));
    let (e, message) = c.fails(&Request::Open {
        path: "/ckpt/bad",
        flags: CREATE,
        mode: 0o644,
        layout: Layout { stripe_count: 4, ..Layout::INHERIT },
        local: vec![],
    });
    assert_eq!(e, Errno::EINVAL);
    assert!(message.contains("exceeds the 3 daemons"), "{message}");

    let layout = Layout { stripe_count: 1, stripe_size: 65536, first: 2 };
    let set: Attr = c.ok(&Request::SetLayout { path: "/ckpt", layout });
    assert_eq!(set.layout, layout);
    assert_eq!(open(&mut c, "/ckpt/rank1", CREATE).unwrap().layout, layout);
    assert_eq!(errno(&mut c, Request::SetLayout { path: "/ckpt/rank0", layout }), Errno::EINVAL);

    let stat: Attr = c.ok(&Request::Stat { path: "/ckpt/rank0" });
    assert_eq!((stat.ino, stat.size, stat.created), (file.ino, 0, false));
    assert_eq!(errno(&mut c, Request::Stat { path: "/ckpt/rank9" }), Errno::ENOENT);

    for i in 2..10 {
        open(&mut c, &format!("/ckpt/rank{i}"), CREATE).unwrap();
    }
    let page: ReaddirReply = c.ok(&Request::Readdir { path: "/ckpt", after: "rank3", max: 3 });
    let got: Vec<&str> = page.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!((got, page.end), (vec!["rank4", "rank5", "rank6"], false));
    assert_eq!(errno(&mut c, Request::Readdir { path: "/ckpt/rank0", after: "", max: 1 }), Errno::ENOTDIR);

    assert_eq!(errno(&mut c, Request::Rmdir { path: "/ckpt" }), Errno::ENOTEMPTY);
    assert_eq!(errno(&mut c, Request::Rmdir { path: "/ckpt/rank0" }), Errno::ENOTDIR);
    assert_eq!(errno(&mut c, Request::Unlink { path: "/ckpt", keep: false }), Errno::EISDIR);
    let removed: Removed = c.ok(&Request::Unlink { path: "/ckpt/rank0", keep: false });
    assert_eq!(removed.0.map(|a| a.ino), Some(file.ino));
    assert_eq!(errno(&mut c, Request::Unlink { path: "/ckpt/rank0", keep: false }), Errno::ENOENT);

    // Rename: a directory with descendants, then rename(2)'s refusals.
    c.ok::<Attr>(&Request::Mkdir { path: "/ckpt/sub", mode: 0o755 });
    let deep = open(&mut c, "/ckpt/sub/deep", CREATE).unwrap();
    c.ok::<Attr>(&Request::Mkdir { path: "/ckpt-old", mode: 0o755 });
    let replaced: Removed = c.ok(&Request::Rename { from: "/ckpt", to: "/run1", keep: false });
    assert_eq!(replaced, Removed(None));
    assert_eq!(c.ok::<Attr>(&Request::Stat { path: "/run1/sub/deep" }).ino, deep.ino);
    assert_eq!(errno(&mut c, Request::Stat { path: "/ckpt/sub" }), Errno::ENOENT);
    assert_eq!(names(&mut c, "/"), ["ckpt-old", "run1"]);
    assert_eq!(errno(&mut c, Request::Rename { from: "/run1", to: "/run1/sub/x", keep: false }), Errno::EINVAL);
    assert_eq!(errno(&mut c, Request::Rename { from: "/run1", to: "/run1/rank1", keep: false }), Errno::EINVAL);
    assert_eq!(errno(&mut c, Request::Rename { from: "/ckpt-old", to: "/run1/rank1", keep: false }), Errno::ENOTDIR);
    assert_eq!(errno(&mut c, Request::Rename { from: "/run1/rank1", to: "/ckpt-old", keep: false }), Errno::EISDIR);
    assert_eq!(errno(&mut c, Request::Rename { from: "/ckpt-old", to: "/run1", keep: false }), Errno::ENOTEMPTY);
    assert_eq!(errno(&mut c, Request::Rename { from: "/nope", to: "/x", keep: false }), Errno::ENOENT);
    let r2 = c.ok::<Attr>(&Request::Stat { path: "/run1/rank2" });
    let replaced: Removed = c.ok(&Request::Rename { from: "/run1/rank1", to: "/run1/rank2", keep: false });
    assert_eq!(replaced.0.map(|a| a.ino), Some(r2.ino));

    c.ok::<()>(&Request::Rmdir { path: "/ckpt-old" });
    assert_eq!(errno(&mut c, Request::Rmdir { path: "/" }), Errno::EBUSY);
}

#[test]
fn the_union_view_serves_pfs_only_files_and_directories() {
    let f = Fixture::new();
    fs::create_dir_all(f.pfs().join("results/run7")).unwrap();
    let payload = pattern(7, 300_000);
    fs::write(f.pfs().join("results/run7/out.h5"), &payload).unwrap();
    fs::write(f.pfs().join("results/readme"), b"x").unwrap();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);

    let st: Attr = c.ok(&Request::Stat { path: "/results/run7/out.h5" });
    assert_eq!((st.kind, st.size, st.tier), (FileKind::File, payload.len() as u64, Tier::Pfs));
    assert_eq!(open(&mut c, "/results/run7/out.h5", 0).unwrap().tier, Tier::Pfs);
    let chunk = c.read(&Request::PfsRead { path: "/results/run7/out.h5", offset: 1000, len: 5000 });
    assert_eq!(chunk, &payload[1000..6000]);
    let tail = c.read(&Request::PfsRead { path: "/results/run7/out.h5", offset: 299_990, len: 100 });
    assert_eq!(tail, &payload[299_990..]);
    assert_eq!(errno(&mut c, Request::PfsRead { path: "/results/none", offset: 0, len: 1 }), Errno::ENOENT);

    // A buffer file beside the PFS ones; readdir merges both, in name order.
    open(&mut c, "/results/mine", CREATE | WRITE).unwrap();
    assert_eq!(names(&mut c, "/results"), ["mine", "readme", "run7"]);
    assert_eq!(names(&mut c, "/"), ["results"]);
    assert_eq!(errno(&mut c, Request::Mkdir { path: "/results", mode: 0o755 }), Errno::EEXIST);

    // Replacing a PFS-only file with O_TRUNC makes a buffer file over it.
    let shadow = open(&mut c, "/results/readme", WRITE | TRUNC).unwrap();
    assert_eq!(shadow.tier, Tier::Buffer);

    let gone: Removed = c.ok(&Request::Unlink { path: "/results/run7/out.h5", keep: false });
    assert_eq!(gone.0.unwrap().tier, Tier::Pfs);
    assert!(!f.pfs().join("results/run7/out.h5").exists());
    c.ok::<()>(&Request::Rmdir { path: "/results/run7" });
    assert!(!f.pfs().join("results/run7").exists());
}

#[test]
fn paths_that_try_to_escape_touch_nothing_outside() {
    let f = Fixture::new();
    let outside = f.path("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("passwd"), b"root:x:0:0").unwrap();
    symlink(&outside, f.pfs().join("etc")).unwrap();
    symlink(outside.join("passwd"), f.pfs().join("pw")).unwrap();
    let d = f.spawn(0, 1, &[]);
    let mut c = d.client(&f);

    for path in ["/../x", "/a/../../etc", "relative", "/.."] {
        assert_eq!(open(&mut c, path, CREATE | WRITE), Err(Errno::EINVAL), "{path}");
        assert_eq!(errno(&mut c, Request::Stat { path }), Errno::EINVAL, "{path}");
        assert_eq!(errno(&mut c, Request::PfsRead { path, offset: 0, len: 10 }), Errno::EINVAL, "{path}");
        assert_eq!(errno(&mut c, Request::Mkdir { path, mode: 0o755 }), Errno::EINVAL, "{path}");
    }
    assert_eq!(errno(&mut c, Request::Rename { from: "/pw", to: "/../pw", keep: false }), Errno::EINVAL);
    // PFS links show as links, for the client to follow with its own rights; the daemon never does.
    assert_eq!(errno(&mut c, Request::Stat { path: "/etc/passwd" }), LINK_MET);
    assert_eq!(errno(&mut c, Request::PfsRead { path: "/etc/passwd", offset: 0, len: 10 }), Errno::ENOENT);
    assert_eq!(errno(&mut c, Request::PfsRead { path: "/pw", offset: 0, len: 10 }), Errno::ENOENT);
    assert_eq!(errno(&mut c, Request::Unlink { path: "/etc/passwd", keep: false }), LINK_MET);
    assert_eq!(open(&mut c, "/etc/new", CREATE | WRITE), Err(LINK_MET));
    assert_eq!(open(&mut c, "/pw", 0), Err(LINK_MET));
    assert_eq!(names(&mut c, "/"), ["etc", "pw"]);
    // Stage temps cannot be aimed outside either.
    assert_eq!(errno(&mut c, Request::StageAbort { temp: "/etc/passwd" }), Errno::EINVAL);
    assert_eq!(errno(&mut c, Request::StageAbort { temp: "/../outside/passwd" }), Errno::EINVAL);
    assert_eq!(fs::read(outside.join("passwd")).unwrap(), b"root:x:0:0");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
}
