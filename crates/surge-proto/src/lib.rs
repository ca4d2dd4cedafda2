//! The Surge wire protocol, shared by the daemon (`surged`), the client
//! library and the CLI. See `docs/protocol.md` for the byte-level format.
//!
//! Modules: [`codec`] (field encoding), [`frame`] (headers, limits, framed
//! I/O), [`msg`] (requests and replies), [`drain`] (the data manager's
//! report), [`layout`] (striping arithmetic), [`auth`] (secret handshake),
//! [`path`] (namespace path rules), [`shards`] (the namespace spread over
//! the daemons), [`link`] (symbolic links), [`changes`]
//! (what a request changes, for caches), [`errno`], [`sums`] (the format of
//! the checksums at rest).

pub mod auth;
pub mod changes;
pub mod codec;
pub mod drain;
pub mod errno;
pub mod frame;
pub mod layout;
pub mod link;
pub mod msg;
pub mod path;
pub mod shards;
pub mod sums;

pub use codec::{DecodeError, Decoder, Encoder};
pub use errno::Errno;
pub use frame::{FrameError, ReplyHeader, RequestHeader, MAX_FRAME_DEFAULT, PROTOCOL_VERSION};
pub use layout::Layout;
pub use msg::{Attr, DirEntry, FileKind, Op, Reply, Request, Tier};
