//! A node-local connection's grants: the descriptors it was handed are the
//! client's own, the write grants it holds are listed here until their
//! commit, and those left open when the connection ends (the client was
//! killed between a `LocalWriteBegin` and its `LocalWriteCommit`) are
//! reclaimed: the daemon checksums the granted range itself from the file
//! (any bytes are acceptable there, none was acknowledged, but every byte
//! keeps a checksum), and releases the object's lock, the fence's pass,
//! the scheduling ticket and the space taken ahead.

use crate::failure::Failure;
use crate::fence::Pass;
use crate::job::Job;
use crate::logging::log;
use crate::request_path::{DataHandler, ReplyBody};
use crate::sched::Ticket;
use crate::store::WriteGrant;
use std::collections::HashMap;
use std::fs::File;
use surge_proto::msg::{HandlesReply, ReadGrant, WriteReply};
use surge_proto::{msg, Errno, Request};

/// Most write grants one connection holds at once (a client holds one per
/// extent in flight).
const MAX_OPEN_GRANTS: usize = 64;

/// One write grant and what it holds until its commit.
struct OpenGrant<'a> {
    grant: WriteGrant,
    job: u64,
    /// Retiring the inode waits for the commit.
    _pass: Pass<'a>,
    /// Its place at the scheduling point: the extent is in service until committed.
    ticket: Option<Ticket<'a>>,
}

/// The node-local state of one connection.
#[derive(Default)]
pub struct LocalSession<'a> {
    last_grant: u64,
    open: HashMap<u64, OpenGrant<'a>>,
    /// Descriptors to pass with the reply being built (`ObjHandles`).
    pub handing: Vec<File>,
}

impl<'a> LocalSession<'a> {
    /// Does the client hold write grants (and so objects' locks)?
    pub fn holds_grants(&self) -> bool {
        !self.open.is_empty()
    }

    /// Serves a node-local op of `job`, admitted with `ticket` (which a
    /// write grant keeps until its commit).
    pub fn handle(
        &mut self,
        data: &'a DataHandler,
        job: Job<'_>,
        req: &Request<'_>,
        ticket: &mut Option<Ticket<'a>>,
        out: &mut ReplyBody,
    ) -> Result<(), Failure> {
        match *req {
            Request::ObjHandles { ino } => {
                let _pass = data.fence.pass(ino)?;
                let (file, sums, identity) = data.store.handles(ino)?;
                self.handing = vec![file, sums];
                out.put(&HandlesReply(identity));
            }
            Request::LocalReadBegin { ino, offset, len } => {
                let _pass = data.fence.pass(ino)?;
                let found = data.store.local_read(ino)?;
                let length = found.map_or(0, |(_, length)| length);
                // Charged to the job as the `Read` it stands for: the bytes the object holds there.
                if let Some(ticket) = ticket.as_mut() {
                    ticket.moved(length.saturating_sub(offset).min(len));
                }
                out.put(&ReadGrant { file: found.map(|(file, _)| file), len: length });
            }
            Request::LocalWriteBegin { ino, offset, len } => {
                if self.open.len() >= MAX_OPEN_GRANTS {
                    return Err(Failure::new(
                        Errno(libc::EBUSY),
                        format!("this connection holds {MAX_OPEN_GRANTS} write grants already; commit some first"),
                    ));
                }
                let pass = data.fence.pass(ino)?;
                let grant = data.begin_local_write(job, ino, offset, len)?;
                self.last_grant += 1;
                out.put(&msg::WriteGrant { grant: self.last_grant, file: grant.file, size_before: grant.size_before });
                let open = OpenGrant { grant, job: job.id, _pass: pass, ticket: ticket.take() };
                self.open.insert(self.last_grant, open);
            }
            Request::LocalWriteCommit { grant, ref crcs } => {
                let Some(open) = self.open.remove(&grant) else {
                    return Err(Failure::new(Errno::EINVAL, format!("no write grant {grant} on this connection")));
                };
                let len = open.grant.len;
                let written = data.commit_local_write(open.job, open.grant, Some(crcs))?;
                if let Some(mut ticket) = open.ticket {
                    ticket.moved(len);
                }
                out.put(&WriteReply { written: written.bytes as u64, size_before: written.size_before });
            }
            _ => return Err(Failure::new(Errno::EPROTO, format!("{:?} is not a node-local op", req.op()))),
        }
        Ok(())
    }

    /// The connection ended: its open grants are committed with the
    /// checksums of what the file holds, computed here.
    pub fn reclaim(&mut self, data: &DataHandler, index: u32, peer: &str) {
        for (_, open) in self.open.drain() {
            let (ino, offset, len) = (open.grant.ino, open.grant.offset, open.grant.len);
            match data.commit_local_write(open.job, open.grant, None) {
                Ok(_) => log!(
                    Warn,
                    index,
                    "{peer} went away holding a write grant of object {ino} ({len} bytes at {offset}); \
                     the daemon checksummed the range as the file holds it"
                ),
                Err(failure) => log!(
                    Error,
                    index,
                    "{peer} went away holding a write grant of object {ino} ({len} bytes at {offset}), \
                     whose reclaim failed: {failure}"
                ),
            }
        }
    }
}
