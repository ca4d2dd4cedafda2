//! The Surge client library: the Rust API the CLI uses and the C ABI
//! (`include/surge.h`, exported by the `cdylib`/`staticlib` builds) that the
//! interposer and C programs use.
//!
//! A [`Client`] reads the cluster file and secret, then talks to the daemons
//! over pooled, authenticated TCP connections: namespace requests go to
//! daemon 0, file data to the daemons holding the file's stripes, in parallel.

mod append;
mod client;
mod config;
mod conn;
mod deadline;
mod error;
mod extent;
mod fanout;
mod ffi;
mod file;
mod job;
mod local;
pub mod mount_link;
mod names;
mod objects;
mod open_files;
mod pid;
mod pool;
pub mod posix;
mod route;
mod routing;
mod scrub;
mod shared;
mod stage_out;
mod transfer;

pub use client::{AttrUpdate, Client};
pub use config::ClientConfig;
pub use error::{Error, Result};
pub use file::{BufferFile, File};
pub use job::{charged_to, JobIdentity};
pub use pid::current as process_id;
pub use scrub::{DamagedBlock, ScrubReport};
pub use stage_out::StageReport;
pub use surge_cluster::{ClusterFile, ConnCount, ConnPolicy, DaemonEntry, NamespacePolicy};
pub use surge_proto::msg::{DaemonStatus, FsckClass, FsckFinding, FsckReply, CLUSTER_USER, FSCK_NO_DAEMON};
pub use surge_proto::{Attr, DirEntry, FileKind, Layout, Tier};
pub use transfer::set_host_mode_and_times;
pub use transfer::Transferred;

#[cfg(test)]
mod tests {
    #[test]
    fn clients_and_files_are_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Client>();
        send_sync::<crate::File>();
    }
}
