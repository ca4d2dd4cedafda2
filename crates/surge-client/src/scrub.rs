//! Scrub: every block of a buffer file re-checked, on the daemons that hold
//! it, against the checksums they keep beside the data (`ObjVerify`), so
//! damage at rest is found before a read or a stage-out runs into it.

use crate::client::{wire_path, Client};
use crate::error::{Error, Result};
use crate::fanout::in_parallel;
use crate::pool::thread_slot;
use surge_proto::msg::ObjVerifyReply;
use surge_proto::{FileKind, Request, Tier};

/// A block of a file whose bytes disagree with their checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedBlock {
    /// File offset of the block's first byte.
    pub offset: u64,
    /// "daemon N (ip:port)", the daemon whose device holds it.
    pub daemon: String,
}

/// What a scrub of one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubReport {
    /// Bytes of buffer objects checked (0 for a file only on the PFS).
    pub checked: u64,
    /// In file order.
    pub damaged: Vec<DamagedBlock>,
}

impl Client {
    /// Re-checks every block of the file `path` against its checksums.
    pub fn scrub(&self, path: &str) -> Result<ScrubReport> {
        let shared = self.shared();
        let path = wire_path(path)?;
        let attr = shared.stat(&path)?;
        if attr.kind == FileKind::Dir {
            return Err(Error::new(libc::EISDIR, format!("{path} is a directory; scrub its files")));
        }
        if attr.tier == Tier::Pfs {
            return Ok(ScrubReport { checked: 0, damaged: Vec::new() });
        }
        let layout = shared.file_layout(&attr)?;
        let stripes: Vec<u32> = (0..layout.stripe_count).collect();
        let results = in_parallel(stripes, |stripe| {
            let daemon = layout.daemon_of(stripe, shared.daemon_count());
            shared.pool.with_retry(daemon, thread_slot(), |conn| {
                let (mut checked, mut damaged) = (0u64, Vec::new());
                loop {
                    let req = Request::ObjVerify { ino: attr.ino, offset: checked, len: u64::MAX };
                    let reply: ObjVerifyReply = conn.call(&req)?;
                    if reply.checked == 0 {
                        break;
                    }
                    checked += reply.checked;
                    let daemon = conn.endpoint().to_string();
                    damaged.extend(reply.damaged.into_iter().map(|object_offset| DamagedBlock {
                        // The file offset of the object offset's byte.
                        offset: layout.file_end(stripe, object_offset + 1) - 1,
                        daemon: daemon.clone(),
                    }));
                }
                Ok((checked, damaged))
            })
        });
        let mut report = ScrubReport { checked: 0, damaged: Vec::new() };
        for result in results {
            let (checked, damaged) = result.map_err(|e| e.context(format!("scrubbing {path}")))?;
            report.checked += checked;
            report.damaged.extend(damaged);
        }
        report.damaged.sort_by_key(|block| block.offset);
        Ok(report)
    }
}
