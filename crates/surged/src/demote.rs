//! Demotion, run by daemon 0 for the data manager (docs/bbos.md): a buffer
//! file is copied to the PFS by the same verified procedure as `surge
//! stage-out` (`surge_stage`: ObjStat of every stripe, StageBegin, ObjStage
//! per stripe in parallel, re-check, StageCommit), its requests sent
//! through [`Peers`] (daemon 0's own stripes and namespace requests stay in
//! the process). The buffer copy may then be evicted, but only while the
//! objects still hold the version that was copied: a file written during
//! its demotion fails it, one written after it stays in the buffer (its
//! PFS copy is not current) and is demoted again later.

use crate::failure::Failure;
use crate::namespace::Namespace;
use crate::peers::Peers;
use surge_proto::msg::objects_version;
use surge_proto::{Attr, Errno, Reply, Request, Tier};
use surge_stage::{Caller, StageError, StageOut};

pub use surge_stage::Staged;

/// Object bytes one `ObjStage` request copies. A data daemon answers once
/// its chunk is copied at its demotion rate, and peers wait at most
/// `PEER_TIMEOUT` (10 s) for an answer: 4 MiB keeps a chunk within it down
/// to 0.5 MB/s.
const DEMOTE_CHUNK: u64 = 4 << 20;

/// Copies buffer file `path` to the PFS, verified, and marks it staged as
/// of the version copied (see the module doc). Then [`evict`] drops the
/// buffer copy if nothing changed since.
pub(crate) fn stage_file(peers: &Peers, namespace: &Namespace, daemons: u32, path: &str) -> Result<Staged, Failure> {
    let attr = namespace.stat(path)?;
    StageOut { caller: peers, daemons, chunk: DEMOTE_CHUNK }.run(path, &attr, &mut |_| {})
}

/// Drops the buffer copy of `path`, demoted as `staged`: the name then
/// shows the PFS copy (tier `Pfs`) and the objects are doomed (wake the
/// deleter afterwards). ESTALE, and the file stays in the buffer, when it
/// is no longer that file at that version: written since, or replaced.
///
/// Every object is retired first (`ObjRetire`, checked against the stat
/// that gave the staged version), so that a process still holding the
/// file open cannot write to the doomed objects, nor read zeros from them
/// once deleted: it gets ESTALE (docs/core.md, "Failures"). Should a step
/// fail, the objects are reinstated and the file stays as it was.
pub(crate) fn evict(
    peers: &Peers,
    namespace: &Namespace,
    daemons: u32,
    path: &str,
    staged: &Staged,
) -> Result<Attr, Failure> {
    let attr = namespace.stat(path)?;
    if attr.nlink > 1 {
        // Refused before its objects are retired: writes through its other names go on.
        return Err(Failure::new(
            Errno(libc::ESTALE),
            format!("{path} has several names (hard links): it stays in the buffer"),
        ));
    }
    if attr.ino != staged.ino {
        return Err(Failure::new(
            Errno(libc::ESTALE),
            format!("{path} was replaced after its demotion (inode {} then, {} now)", staged.ino, attr.ino),
        ));
    }
    // The stat checked the PFS copy: one changed outside Surge since is no copy to evict to.
    if attr.tier != Tier::Staged {
        return Err(Failure::new(
            Errno(libc::ESTALE),
            format!(
                "{path} is not staged any more (written, or its PFS copy changed outside Surge, as daemon 0's log \
                 says): it stays in the buffer, to be demoted again"
            ),
        ));
    }
    let stats = StageOut { caller: peers, daemons, chunk: DEMOTE_CHUNK }.object_stats(attr.ino, &attr.layout)?;
    let written_since = || {
        Failure::new(
            Errno(libc::ESTALE),
            format!("{path} was written after its demotion: it stays in the buffer, to be demoted again"),
        )
    };
    if objects_version(&stats) != staged.version {
        return Err(written_since());
    }
    let daemon_of = |stripe: usize| attr.layout.daemon_of(stripe as u32, daemons);
    let retired = stats.iter().enumerate().try_for_each(|(stripe, stat)| {
        let retire = Request::ObjRetire { ino: attr.ino, checked: true, size: stat.size, mtime_ns: stat.mtime_ns };
        peers.call::<()>(daemon_of(stripe), &retire).map_err(|failure| match failure.errno {
            Errno(libc::ESTALE) => written_since(),
            _ => failure,
        })
    });
    let evicted = retired.and_then(|()| namespace.evict(path, staged.ino, staged.version));
    evicted.map_err(|failure| {
        // A retire that failed may still have taken effect (a lost reply): undo on every stripe.
        let undone: Result<(), Failure> = (0..stats.len())
            .try_for_each(|stripe| peers.call::<()>(daemon_of(stripe), &Request::ObjReinstate { ino: attr.ino }));
        match undone {
            Ok(()) => failure,
            Err(undo) => Failure::new(
                failure.errno,
                format!(
                    "{}; and {path}'s objects could not all be reinstated ({}): writes to it fail with ESTALE \
                     until a later demotion evicts it",
                    failure.text(),
                    undo.text()
                ),
            ),
        }
    })
}

impl Caller for Peers {
    type Error = Failure;

    fn call<R: Reply>(&self, daemon: u32, req: &Request<'_>) -> Result<R, Failure> {
        Peers::call(self, daemon, req)
    }
}

impl StageError for Failure {
    fn new(errno: i32, message: String) -> Failure {
        Failure::new(Errno(errno), message)
    }

    fn context(self, context: String) -> Failure {
        Failure::new(self.errno, format!("{context}: {}", self.text()))
    }
}

/// Daemon 0's demotion driven by hand, for tests (`RunningDaemon::demotion`):
/// what the data manager does, one step at a time.
#[cfg(any(test, feature = "testing"))]
pub struct Demotion {
    pub(crate) peers: std::sync::Arc<Peers>,
    pub(crate) namespace: std::sync::Arc<Namespace>,
    pub(crate) deleter: crate::background::Wake,
    pub(crate) daemons: u32,
}

#[cfg(any(test, feature = "testing"))]
impl Demotion {
    /// [`stage_file`].
    pub fn stage(&self, path: &str) -> Result<Staged, Failure> {
        stage_file(&self.peers, &self.namespace, self.daemons, path)
    }

    /// [`evict`], then the deleter is woken.
    pub fn evict(&self, path: &str, staged: &Staged) -> Result<Attr, Failure> {
        let evicted = evict(&self.peers, &self.namespace, self.daemons, path, staged)?;
        self.deleter.wake();
        Ok(evicted)
    }
}
