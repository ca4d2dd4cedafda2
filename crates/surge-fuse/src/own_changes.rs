//! The mount's side of the interposer's metadata fast path (the model is
//! DAOS's libpil4dfs beside dfuse): a process of this node that creates,
//! removes or renames names on the mount's paths through the client
//! library, without crossing FUSE, tells this server what it changed before
//! its call returns (`surge_client::mount_link`), and the server drops what
//! the kernel caches of those names and of their nodes (`inval_entry`,
//! `inval_inode`) before it answers. Every other process of the node, going
//! through the kernel, then sees the change at once; changes made on other
//! nodes still come on daemon 0's change feed (`SurgeFs::pass_changes_to_kernel`).
//!
//! The socket is abstract (`surge_client::mount_link::socket_name` of this
//! process's id, which the mount's source names), served by a thread per
//! client, and answers only peers of this server's user or root.
//!
//! How to plug in: `serve` binds the socket before the session starts and
//! runs the acceptor on a thread of its own; `drop_from_kernel` is the one
//! place the kernel is told of changed names, for the feed too.

use crate::nodes::Nodes;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, OnceLock};
use surge_client::mount_link::{read_changes, socket_addr, ANSWER};

/// Tells the kernel, through `notifier`, to drop what it caches of the
/// names `changes` name (every name it may hold when `None`) and of the
/// nodes they name. Never called from a request's own thread: the kernel
/// waits for the request while the notification waits for the kernel.
pub fn drop_from_kernel(notifier: &Notifier, nodes: &Nodes, changes: Option<&[(String, bool)]>) {
    let entries = match changes {
        Some(changes) => nodes.entries_at(changes.iter().map(|(path, _)| path.as_str())),
        None => nodes.all_entries(),
    };
    // A name or node the kernel dropped meanwhile answers ENOENT: nothing to invalidate.
    for (parent, name, ino) in entries {
        let _ = notifier.inval_entry(INodeNo(parent), OsStr::new(&name));
        if let Some(ino) = ino {
            let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }
}

/// Binds this server's socket and serves it on a thread of its own for
/// the life of the process; `notifier` is set once the session exists.
pub fn serve(notifier: Arc<OnceLock<Notifier>>, nodes: Arc<Nodes>) -> io::Result<()> {
    let listener = UnixListener::bind_addr(&socket_addr(std::process::id())?)?;
    std::thread::Builder::new().name("surge-own-changes".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            if !same_user(&stream) {
                continue;
            }
            let (notifier, nodes) = (Arc::clone(&notifier), Arc::clone(&nodes));
            let _ = std::thread::Builder::new()
                .name("surge-own-changes-client".into())
                .spawn(move || serve_client(stream, &notifier, &nodes));
        }
    })?;
    Ok(())
}

/// Whether the peer runs as this server's user, or as root.
fn same_user(stream: &UnixStream) -> bool {
    // SAFETY: getsockopt fills a `ucred` of the size given; getuid cannot fail.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let got = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        );
        got == 0 && (cred.uid == 0 || cred.uid == libc::getuid())
    }
}

/// Answers one client's messages until it goes (or sends one that does not parse).
fn serve_client(mut stream: UnixStream, notifier: &OnceLock<Notifier>, nodes: &Nodes) {
    while let Ok(changes) = read_changes(&mut stream) {
        // No session yet: the kernel holds nothing of the mount to drop.
        if let Some(notifier) = notifier.get() {
            drop_from_kernel(notifier, nodes, Some(&changes));
        }
        if stream.write_all(&[ANSWER]).is_err() {
            return;
        }
    }
}
