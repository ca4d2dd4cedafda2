//! The job a request is charged to, which the scheduling point, the request
//! path and the data manager all take. Kept out of the request path so that
//! those below it (the drain accounting and placement) need not import it:
//! this module uses only the low modules that define what a job holds
//! (`handles`, `rates`, `peers`), none of which reaches back up.

use crate::handles::ClientId;
use crate::rates::SpaceWait;

/// The job a request is charged to: the header's id and the label its
/// client gave in `Hello`, and the client that sent it (whose open files
/// daemon 0 counts), and the wait for space its connection's writes share.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub id: u64,
    pub label: &'a str,
    pub client: ClientId,
    /// `None`: the daemon's own calls, which write nothing.
    pub space: Option<&'a SpaceWait>,
}

impl Job<'_> {
    /// The daemon's own work (`peers::BACKGROUND_JOB`).
    pub const BACKGROUND: Job<'static> =
        Job { id: crate::peers::BACKGROUND_JOB, label: "", client: ClientId::DAEMON, space: None };
}
