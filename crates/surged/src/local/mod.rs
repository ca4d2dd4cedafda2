//! The node-local data path (docs/core.md, "Node-local data path"): a
//! client on the daemon's node moves its bytes itself, with one copy, into
//! and out of the object files the daemon hands it, as UnifyFS's clients
//! write node-local logs and DAOS's interception library reaches its
//! engine without the kernel's FUSE ([UnifyFS], [DAOS] in
//! docs/references.md). The daemon keeps control of every byte: each
//! extent is a grant admitted at the scheduling point, under the fence,
//! the checkpoint rate and the space accounting, holding the object's lock
//! until the client commits the extent's block checksums.
//!
//! - [`listener`]: the Unix socket beside TCP (peers of the daemon's uid
//!   only), whose connections the server serves as it serves TCP ones;
//! - [`grants`]: a connection's open grants and the four local-only ops,
//!   and the reclaim of the grants of a client that went away.
//!
//! The client side is `surge_client::local`.

pub mod grants;
pub mod listener;

use crate::failure::Failure;
use surge_proto::{Errno, Op};

/// Why a node-local op was refused: it came over TCP.
pub fn only_over_the_local_socket(op: Op) -> Failure {
    Failure::new(
        Errno(libc::EOPNOTSUPP),
        format!("{op:?} is served only over the daemon's Unix socket, to clients on its node"),
    )
}
