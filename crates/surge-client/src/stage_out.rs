//! Stage-out: a verified copy of a buffer file on the PFS. Each stripe's
//! daemon copies its own object into a temporary PFS file (in chunks, all
//! stripes at once); daemon 0 then commits the copy under the file's name.

use crate::client::{wire_path, Client};
use crate::error::{Error, Result};
use crate::objects::ObjectsSummary;
use crate::shared::Shared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use surge_proto::msg::StagedObject;
use surge_proto::{Attr, FileKind, Layout, Request, Tier};

/// Object bytes one `ObjStage` request copies.
const STAGE_CHUNK: u64 = 64 << 20;

/// What a stage-out did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageReport {
    pub path: String,
    pub bytes: u64,
    /// CRC-32C over the little-endian concatenation of the CRCs the daemons
    /// verified for each staged chunk (stripe by stripe, chunks in object
    /// order). 0 when nothing was copied (the file was only on the PFS).
    pub crc: u32,
    /// Stripes copied (0 when the file was only on the PFS).
    pub stripes: u32,
}

/// One file being staged.
struct Staging<'a> {
    shared: &'a Shared,
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

impl Client {
    /// Copies a buffer file to the PFS, verified, and marks it staged.
    /// `progress` is called on this thread with the bytes copied so far.
    pub fn stage_out(&self, path: &str, progress: &mut dyn FnMut(u64)) -> Result<StageReport> {
        let shared = self.shared();
        let path = wire_path(path)?;
        let attr = shared.stat(&path)?;
        if attr.kind == FileKind::Dir {
            return Err(Error::new(libc::EISDIR, format!("{path} is a directory; stage out its files")));
        }
        if attr.tier == Tier::Pfs {
            return Ok(StageReport { path, bytes: attr.size, crc: 0, stripes: 0 });
        }
        let layout = shared.file_layout(&attr)?;
        let stats = shared.object_stats(attr.ino, &layout)?;
        let before = ObjectsSummary::of(&layout, &stats);
        let temp: String = shared.meta(&Request::StageBegin { path: &path, size: before.size })?;
        let object_sizes = stats.iter().map(|st| st.size).collect();
        let staging =
            Staging { shared, ino: attr.ino, layout, object_sizes, temp: &temp, failed: AtomicBool::new(false) };
        let staged = staging.copy_stripes(progress).and_then(|crcs| {
            // A write that landed during the copy changed the version. One
            // that lands after this check changes it too, and the file then
            // shows as `Buffer` again (see `ObjectsSummary::apply_to`).
            if shared.glimpse(attr.ino, &layout)? != before {
                return Err(changed_during_stage_out(&path));
            }
            let commit = Request::StageCommit {
                path: &path,
                ino: attr.ino,
                temp: &temp,
                size: before.size,
                version: before.version,
            };
            let _: Attr = shared.meta(&commit)?;
            Ok(crcs)
        });
        match staged {
            Ok(crcs) => {
                Ok(StageReport { path, bytes: before.size, crc: combine_crcs(&crcs), stripes: layout.stripe_count })
            }
            Err(e) => Err(match shared.meta::<()>(&Request::StageAbort { temp: &temp }) {
                Ok(()) => e,
                Err(abort) => e.context(format!("(and the partial copy {temp} could not be removed: {abort})")),
            }),
        }
    }
}

impl Staging<'_> {
    /// Copies every stripe in parallel; returns the chunk CRCs, stripe by stripe.
    fn copy_stripes(&self, progress: &mut dyn FnMut(u64)) -> Result<Vec<u32>> {
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
                let copied = match worker {
                    Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(e) => Err(Error::new(libc::EAGAIN, format!("cannot start a stage-out thread: {e}"))),
                };
                match copied {
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
    fn copy_stripe(&self, stripe: u32, done: &mpsc::Sender<u64>) -> Result<Option<Vec<u32>>> {
        let want = self.object_sizes[stripe as usize];
        let mut conn = self.shared.pool.get(self.layout.daemon_of(stripe, self.shared.daemon_count()))?;
        let mut crcs = Vec::new();
        let mut copied = 0;
        while copied < want {
            if self.failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let len = (want - copied).min(STAGE_CHUNK);
            let staged: StagedObject = conn.call(&Request::ObjStage {
                ino: self.ino,
                layout: self.layout,
                stripe,
                temp: self.temp,
                object_offset: copied,
                len,
            })?;
            crcs.push(staged.crc);
            copied += staged.bytes;
            // The receiver lives until every worker has finished.
            let _ = done.send(staged.bytes);
            if staged.bytes < len {
                break;
            }
        }
        if copied != want {
            return Err(Error::new(
                libc::EIO,
                format!("file changed during stage-out: stripe {stripe} holds {copied} bytes, expected {want}"),
            ));
        }
        Ok(Some(crcs))
    }
}

fn changed_during_stage_out(path: &str) -> Error {
    Error::new(libc::EIO, format!("{path} changed during stage-out; stage it again once it is quiet"))
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
}
