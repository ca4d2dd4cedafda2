//! The job a request is charged to, as the request path hands it to the
//! parts that serve the request (the data manager's books among them). It
//! lives below both the request path and `drain`, so the data manager takes
//! a job without depending on the request path that calls it.

use crate::handles::ClientId;
use crate::peers::BACKGROUND_JOB;
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
    pub const BACKGROUND: Job<'static> = Job { id: BACKGROUND_JOB, label: "", client: ClientId::DAEMON, space: None };
}
