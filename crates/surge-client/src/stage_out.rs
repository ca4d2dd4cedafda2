//! Stage-out: a verified copy of a buffer file on the PFS. Each stripe's
//! daemon copies its own object into a temporary PFS file (in chunks, all
//! stripes at once); daemon 0 then commits the copy under the file's name.
//! The procedure is `surge_stage`'s, which daemon 0's demotion runs too;
//! here its requests go over the client's connection pool.

use crate::client::{wire_path, Client};
use crate::error::{Error, Result};
use crate::pool::thread_slot;
use crate::shared::Shared;
use surge_proto::{Reply, Request};
use surge_stage::{Caller, StageError, StageOut};

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

impl Client {
    /// Copies a buffer file to the PFS, verified, and marks it staged.
    /// `progress` is called on this thread with the bytes copied so far.
    pub fn stage_out(&self, path: &str, progress: &mut dyn FnMut(u64)) -> Result<StageReport> {
        let shared = self.shared();
        let path = wire_path(path)?;
        // Checks the layout of a buffer file before any striping arithmetic relies on it.
        let attr = shared.stat(&path)?;
        let stage = StageOut { caller: shared, daemons: shared.daemon_count(), chunk: STAGE_CHUNK };
        let staged = stage.run(&path, &attr, progress)?;
        Ok(StageReport { path, bytes: staged.bytes, crc: staged.crc, stripes: staged.stripes })
    }
}

/// The client's requests of a stage-out: namespace requests to daemon 0,
/// object requests (idempotent) retried once on a broken connection.
impl Caller for Shared {
    type Error = Error;

    fn call<R: Reply>(&self, daemon: u32, req: &Request<'_>) -> Result<R> {
        if req.op().is_namespace() {
            // Daemon 0's, through `meta`: a commit leaves the cache of names (this client's change).
            return self.meta(req);
        }
        self.pool.with_retry(daemon, thread_slot(), |conn| conn.call(req))
    }
}

impl StageError for Error {
    fn new(errno: i32, message: String) -> Error {
        Error::new(errno, message)
    }

    fn context(self, context: String) -> Error {
        Error::context(self, context)
    }
}
