//! The verified stage-out of one buffer file to the PFS: the one procedure
//! that `surge stage-out` (the client library) and daemon 0's demotion (the
//! data manager, docs/bbos.md) both run, so that a demoted file is exactly
//! as safe as one a user staged out.
//!
//! 1. `ObjStat` of every stripe: the file's size and version now;
//! 2. `StageBegin` on daemon 0: a temp file beside the destination on the PFS;
//! 3. `ObjStage` on every stripe's daemon, all stripes at once, each in
//!    chunks: the daemon copies its object's range into the temp at the
//!    file offsets the layout gives, re-reads the copy and returns the
//!    CRC-32C both sides agree on;
//! 4. `ObjStat` again: a write that landed during the copy changed the
//!    version, and the stage-out fails (the file is left as it was);
//! 5. `StageCommit` on daemon 0: the temp becomes the PFS copy and the file
//!    is marked staged as of that version. Any failure ends with `StageAbort`.
//!
//! A symbolic link is staged by its `StageBegin` alone: daemon 0 puts a
//! link with the same target on the PFS (the target is never followed or
//! copied) and replies with an empty temp path.
//!
//! The procedure is generic over how a request reaches daemon N
//! ([`Caller`]): the client sends it over its connection pool, daemon 0
//! through its peers (its calls to itself stay in the process).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use surge_proto::msg::{objects_version, ObjStatReply, StagedObject};
use surge_proto::{Attr, FileKind, Layout, Reply, Request, Tier};

/// The daemon that serves the namespace.
pub const METADATA_DAEMON: u32 = 0;

/// How a request reaches daemon `daemon`.
pub trait Caller: Sync {
    /// The caller's error type: what it reports, with an errno and a message.
    type Error: StageError;

    /// Sends `req` to daemon `daemon` and decodes its reply; a failed
    /// request comes back as the daemon's errno and message.
    fn call<R: Reply>(&self, daemon: u32, req: &Request<'_>) -> Result<R, Self::Error>;
}

/// What the procedure needs of a caller's error type.
pub trait StageError: fmt::Display + Send + Sized {
    fn new(errno: i32, message: String) -> Self;
    /// The same errno, with `context` before the message.
    fn context(self, context: String) -> Self;
}

/// What a stage-out did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staged {
    pub ino: u64,
    /// The file's size, all of it on the PFS now.
    pub bytes: u64,
    /// The version of the contents copied ([`objects_version`]), which the
    /// namespace records as the file's `staged_version`; 0 when nothing was
    /// copied (the file was only on the PFS).
    pub version: u64,
    /// CRC-32C over the little-endian concatenation of the CRCs the daemons
    /// verified for each staged chunk (stripe by stripe, chunks in object
    /// order). 0 when nothing was copied.
    pub crc: u32,
    /// Stripes copied (0 when the file was only on the PFS).
    pub stripes: u32,
}

/// The stage-out procedure, as one caller runs it.
pub struct StageOut<'a, C: Caller> {
    pub caller: &'a C,
    /// Daemons in the cluster (where each stripe lives).
    pub daemons: u32,
    /// Object bytes one `ObjStage` request copies.
    pub chunk: u64,
}

/// One file being copied.
struct Copying<'a, C: Caller> {
    stage: &'a StageOut<'a, C>,
    ino: u64,
    layout: Layout,
    /// Bytes each stripe's object held when the stage-out began. Holes
    /// make an object shorter than the file size implies (a sparse file,
    /// or one torn by a crash): the PFS copy has zeros there already.
    object_sizes: Vec<u64>,
    temp: &'a str,
    /// Set by the first stripe that fails, so the others stop early.
    failed: AtomicBool,
}

impl<'a, C: Caller> StageOut<'a, C> {
    /// Copies buffer file `path` (`attr`, as daemon 0 gives it) to the
    /// PFS, verified, and marks it staged. `progress` is called on this
    /// thread with the bytes copied so far.
    pub fn run(&self, path: &str, attr: &Attr, progress: &mut dyn FnMut(u64)) -> Result<Staged, C::Error> {
        if attr.kind == FileKind::Dir {
            return Err(C::Error::new(libc::EISDIR, format!("{path} is a directory; stage out its files")));
        }
        if attr.tier == Tier::Pfs {
            return Ok(Staged { ino: attr.ino, bytes: attr.size, version: 0, crc: 0, stripes: 0 });
        }
        if attr.kind == FileKind::Symlink {
            // Daemon 0 puts a link with the same target in place at once
            // (never following it): there is nothing to copy or commit.
            let temp: String = self.caller.call(METADATA_DAEMON, &Request::StageBegin { path, size: 0 })?;
            if !temp.is_empty() {
                let _: Result<(), _> = self.caller.call(METADATA_DAEMON, &Request::StageAbort { temp: &temp });
                return Err(C::Error::new(libc::EPROTO, format!("daemon 0 began copying the link {path} as a file")));
            }
            return Ok(Staged { ino: attr.ino, bytes: 0, version: 0, crc: 0, stripes: 0 });
        }
        let layout = attr.layout;
        let stats = self.object_stats(attr.ino, &layout)?;
        let (size, version) = (file_size(&layout, &stats), objects_version(&stats));
        let temp: String = self.caller.call(METADATA_DAEMON, &Request::StageBegin { path, size })?;
        let object_sizes = stats.iter().map(|st| st.size).collect();
        let copy =
            Copying { stage: self, ino: attr.ino, layout, object_sizes, temp: &temp, failed: AtomicBool::new(false) };
        let staged = copy.copy_stripes(progress).and_then(|crcs| {
            // A write that landed during the copy changed the version. One
            // that lands after this check changes it too, and the file then
            // shows as `Buffer` again (its objects' version differs from the
            // one staged).
            if self.version(attr.ino, &layout)? != version {
                return Err(changed_during_stage_out(path));
            }
            let commit = Request::StageCommit { path, ino: attr.ino, temp: &temp, size, version };
            let _: Attr = self.caller.call(METADATA_DAEMON, &commit)?;
            Ok(crcs)
        });
        match staged {
            Ok(crcs) => Ok(Staged {
                ino: attr.ino,
                bytes: size,
                version,
                crc: combine_crcs(&crcs),
                stripes: layout.stripe_count,
            }),
            Err(e) => Err(match self.caller.call::<()>(METADATA_DAEMON, &Request::StageAbort { temp: &temp }) {
                Ok(()) => e,
                Err(abort) => e.context(format!("(and the partial copy {temp} could not be removed: {abort})")),
            }),
        }
    }

    /// The version of file `ino`'s contents now, from its objects.
    pub fn version(&self, ino: u64, layout: &Layout) -> Result<u64, C::Error> {
        Ok(objects_version(&self.object_stats(ino, layout)?))
    }

    /// Every object's `ObjStat`, asked of all stripes' daemons at once, in stripe order.
    pub fn object_stats(&self, ino: u64, layout: &Layout) -> Result<Vec<ObjStatReply>, C::Error> {
        let ask = |stripe: u32| self.caller.call(layout.daemon_of(stripe, self.daemons), &Request::ObjStat { ino });
        thread::scope(|scope| {
            let others: Vec<_> = (1..layout.stripe_count)
                .map(|stripe| thread::Builder::new().spawn_scoped(scope, move || ask(stripe)))
                .collect();
            let mut stats = vec![ask(0)?];
            for other in others {
                stats.push(joined(other)?);
            }
            Ok(stats)
        })
    }
}

impl<C: Caller> Copying<'_, C> {
    /// Copies every stripe in parallel; returns the chunk CRCs, stripe by stripe.
    fn copy_stripes(&self, progress: &mut dyn FnMut(u64)) -> Result<Vec<u32>, C::Error> {
        let (done_tx, done_rx) = mpsc::channel::<u64>();
        thread::scope(|scope| {
            let workers: Vec<_> = (0..self.layout.stripe_count)
                .map(|stripe| {
                    let done_tx = done_tx.clone();
                    thread::Builder::new().spawn_scoped(scope, move || {
                        let copied = self.copy_stripe(stripe, &done_tx);
                        if copied.is_err() {
                            self.failed.store(true, Ordering::Relaxed);
                        }
                        copied
                    })
                })
                .collect();
            drop(done_tx);
            let mut total = 0;
            for bytes in done_rx {
                total += bytes;
                progress(total);
            }
            let mut crcs = Vec::new();
            let mut first_error = None;
            for worker in workers {
                match joined(worker) {
                    Ok(Some(stripe_crcs)) => crcs.extend(stripe_crcs),
                    // Stopped because another stripe failed: that error is the one to report.
                    Ok(None) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            first_error.map_or(Ok(crcs), Err)
        })
    }

    /// Copies one stripe's object chunk by chunk; `None` if it stopped
    /// because another stripe failed.
    fn copy_stripe(&self, stripe: u32, done: &mpsc::Sender<u64>) -> Result<Option<Vec<u32>>, C::Error> {
        let want = self.object_sizes[stripe as usize];
        let daemon = self.layout.daemon_of(stripe, self.stage.daemons);
        let mut crcs = Vec::new();
        let mut copied = 0;
        while copied < want {
            if self.failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let len = (want - copied).min(self.stage.chunk);
            let order = Request::ObjStage {
                ino: self.ino,
                layout: self.layout,
                stripe,
                temp: self.temp,
                object_offset: copied,
                len,
            };
            let staged: StagedObject = self.stage.caller.call(daemon, &order)?;
            crcs.push(staged.crc);
            copied += staged.bytes;
            // The receiver lives until every worker has finished.
            let _ = done.send(staged.bytes);
            if staged.bytes < len {
                break;
            }
        }
        if copied != want {
            return Err(C::Error::new(
                libc::EIO,
                format!("file changed during stage-out: stripe {stripe} holds {copied} bytes, expected {want}"),
            ));
        }
        Ok(Some(crcs))
    }
}

/// The result of a scoped thread, or the error of not having one.
fn joined<T, E: StageError>(spawned: std::io::Result<thread::ScopedJoinHandle<'_, Result<T, E>>>) -> Result<T, E> {
    match spawned {
        Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(e) => Err(E::new(libc::EAGAIN, format!("cannot start a stage-out thread: {e}"))),
    }
}

/// The file size the objects give: the furthest byte any of them holds.
fn file_size(layout: &Layout, stats: &[ObjStatReply]) -> u64 {
    stats.iter().zip(0..).map(|(st, stripe)| layout.file_end(stripe, st.size)).max().unwrap_or(0)
}

fn changed_during_stage_out<E: StageError>(path: &str) -> E {
    E::new(libc::EIO, format!("{path} changed during stage-out; stage it again once it is quiet"))
}

fn combine_crcs(crcs: &[u32]) -> u32 {
    let bytes: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
    crc32c::crc32c(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_crc_is_crc32c_of_the_little_endian_chunk_crcs() {
        assert_eq!(combine_crcs(&[]), 0);
        let crcs = [0x1234_5678, 0xdead_beef];
        assert_eq!(combine_crcs(&crcs), crc32c::crc32c(&[0x78, 0x56, 0x34, 0x12, 0xef, 0xbe, 0xad, 0xde]));
    }

    #[test]
    fn the_file_size_is_the_furthest_byte_of_any_object() {
        let layout = Layout { stripe_count: 3, stripe_size: 100, first: 1 };
        let st = |size| ObjStatReply { size, mtime_ns: 1, allocated: 0 };
        assert_eq!(file_size(&layout, &[st(0), st(0), st(0)]), 0);
        // Stripe 1 holds file bytes 100..200 and 400..450: the file ends at 450.
        assert_eq!(file_size(&layout, &[st(100), st(150), st(0)]), 450);
        // A hole at the end of stripe 0's share: stripe 2's 30 bytes end at 230.
        assert_eq!(file_size(&layout, &[st(0), st(0), st(30)]), 230);
    }

    /// Daemons in memory: each stripe's object a size and a stamp, the
    /// requests they got, and a write that lands during the copy, if asked.
    struct FakeCluster {
        objects: std::sync::Mutex<Vec<ObjStatReply>>,
        write_during_copy: bool,
        requests: std::sync::Mutex<Vec<String>>,
    }

    #[derive(Debug)]
    struct FakeError(i32, String);

    impl fmt::Display for FakeError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} (errno {})", self.1, self.0)
        }
    }

    impl StageError for FakeError {
        fn new(errno: i32, message: String) -> Self {
            FakeError(errno, message)
        }
        fn context(self, context: String) -> Self {
            FakeError(self.0, format!("{context}: {}", self.1))
        }
    }

    impl Caller for FakeCluster {
        type Error = FakeError;
        fn call<R: Reply>(&self, daemon: u32, req: &Request<'_>) -> Result<R, FakeError> {
            self.requests.lock().unwrap().push(format!("{:?}@{daemon}", req.op()));
            let mut objects = self.objects.lock().unwrap();
            let mut body = surge_proto::Encoder::new();
            match *req {
                Request::ObjStat { .. } => objects[daemon as usize - 1].encode(&mut body),
                // Daemon 0 stages a link at once.
                Request::StageBegin { path: "/link", .. } => String::new().encode(&mut body),
                Request::StageBegin { .. } => "/.f.stage".to_string().encode(&mut body),
                Request::ObjStage { stripe, object_offset, len, .. } => {
                    if self.write_during_copy {
                        objects[stripe as usize].mtime_ns += 1;
                    }
                    let bytes = len.min(objects[stripe as usize].size - object_offset);
                    StagedObject { bytes, crc: stripe }.encode(&mut body)
                }
                Request::StageCommit { .. } => attr(Tier::Staged).encode(&mut body),
                Request::StageAbort { .. } => {}
                _ => return Err(FakeError(libc::ENOSYS, format!("{:?}", req.op()))),
            }
            Ok(R::from_body(&body.buf).unwrap())
        }
    }

    fn attr(tier: Tier) -> Attr {
        Attr {
            ino: 7,
            kind: FileKind::File,
            mode: 0o644,
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            layout: Layout { stripe_count: 2, stripe_size: 10, first: 1 },
            tier,
            created: false,
            staged_version: 0,
            blocks: 0,
        }
    }

    fn cluster(write_during_copy: bool) -> FakeCluster {
        let objects = vec![
            ObjStatReply { size: 25, mtime_ns: 1, allocated: 0 },
            ObjStatReply { size: 20, mtime_ns: 2, allocated: 0 },
        ];
        FakeCluster { objects: objects.into(), write_during_copy, requests: Vec::new().into() }
    }

    #[test]
    fn every_stripe_is_copied_in_chunks_on_its_daemon_and_committed_as_the_version_seen() {
        let fake = cluster(false);
        let stage = StageOut { caller: &fake, daemons: 3, chunk: 8 };
        let mut seen = Vec::new();
        let staged = stage.run("/f", &attr(Tier::Buffer), &mut |done| seen.push(done)).unwrap();
        let version = objects_version(&fake.objects.lock().unwrap());
        // Stripe 0 (daemon 1) holds file bytes 0..10, 20..30, 40..45; stripe 1 (daemon 2) 10..20, 30..40.
        assert_eq!((staged.bytes, staged.version, staged.stripes), (45, version, 2));
        assert_eq!(staged.crc, combine_crcs(&[0, 0, 0, 0, 1, 1, 1]), "4 chunks of stripe 0, then 3 of stripe 1");
        assert_eq!(seen.last(), Some(&45));
        let requests = fake.requests.lock().unwrap();
        assert_eq!(requests.iter().filter(|r| *r == "ObjStage@1").count(), 4);
        assert_eq!(requests.iter().filter(|r| *r == "ObjStage@2").count(), 3);
        assert_eq!(requests.last().map(String::as_str), Some("StageCommit@0"));
    }

    #[test]
    fn a_link_is_staged_by_its_stage_begin_alone_and_a_temp_for_one_is_refused() {
        let fake = cluster(false);
        let stage = StageOut { caller: &fake, daemons: 3, chunk: 8 };
        let link = Attr { kind: FileKind::Symlink, size: 5, ..attr(Tier::Buffer) };
        let staged = stage.run("/link", &link, &mut |_| {}).unwrap();
        assert_eq!((staged.bytes, staged.stripes, staged.crc), (0, 0, 0));
        assert_eq!(*fake.requests.lock().unwrap(), ["StageBegin@0"]);
        let err = stage.run("/f", &link, &mut |_| {}).unwrap_err();
        assert_eq!(err.0, libc::EPROTO);
        assert_eq!(fake.requests.lock().unwrap().last().map(String::as_str), Some("StageAbort@0"));
    }

    #[test]
    fn a_write_during_the_copy_fails_the_stage_out_and_removes_the_partial_copy() {
        let fake = cluster(true);
        let stage = StageOut { caller: &fake, daemons: 3, chunk: 64 };
        let err = stage.run("/f", &attr(Tier::Buffer), &mut |_| {}).unwrap_err();
        assert_eq!(err.0, libc::EIO);
        assert!(err.1.contains("/f changed during stage-out"), "{err}");
        let requests = fake.requests.lock().unwrap();
        assert_eq!(requests.last().map(String::as_str), Some("StageAbort@0"));
        assert!(!requests.iter().any(|r| r.starts_with("StageCommit")));
    }

    #[test]
    fn a_directory_is_refused_and_a_pfs_only_file_needs_no_copy() {
        let fake = cluster(false);
        let stage = StageOut { caller: &fake, daemons: 3, chunk: 64 };
        let dir = Attr { kind: FileKind::Dir, ..attr(Tier::Buffer) };
        assert_eq!(stage.run("/d", &dir, &mut |_| {}).unwrap_err().0, libc::EISDIR);
        let pfs = Attr { size: 9, ..attr(Tier::Pfs) };
        let staged = stage.run("/p", &pfs, &mut |_| {}).unwrap();
        assert_eq!((staged.bytes, staged.version, staged.stripes), (9, 0, 0));
        assert!(fake.requests.lock().unwrap().is_empty());
    }
}
