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
//! A removal or rename also updates the names the server keeps for the
//! kernel's nodes, as its own unlink or rename does, so a hard link's
//! other name and a renamed directory's open descriptors keep working.
//!
//! How to plug in: `serve` binds the socket before the session starts and
//! runs the acceptor on a thread of its own; `drop_from_kernel` is the one
//! place the kernel is told of changed names, for the feed too.

use crate::nodes::{Nodes, ROOT};
use fuser::{INodeNo, Notifier};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, OnceLock};
use surge_client::mount_link::{read_changes, socket_addr, Moved, ANSWER};

/// Tells the kernel, through `notifier`, to drop what it caches of the
/// names `changes` name (every name it may hold when `None`) and of the
/// nodes they name. Never called from a request's own thread: the kernel
/// waits for the request while the notification waits for the kernel.
pub fn drop_from_kernel(notifier: &Notifier, nodes: &Nodes, changes: Option<&[(String, bool)]>) {
    invalidate(notifier, entries(nodes, changes));
}

/// The kernel's entries (parent, name, node) that `changes` name; all when `None`.
fn entries(nodes: &Nodes, changes: Option<&[(String, bool)]>) -> Vec<(u64, String, Option<u64>)> {
    match changes {
        Some(changes) => nodes.entries_at(changes.iter().map(|(path, _)| path.as_str())),
        None => nodes.all_entries(),
    }
}

fn invalidate(notifier: &Notifier, entries: Vec<(u64, String, Option<u64>)>) {
    // A name or node the kernel dropped meanwhile answers ENOENT: nothing to invalidate.
    for (parent, name, ino) in entries {
        let _ = notifier.inval_entry(INodeNo(parent), OsStr::new(&name));
        if let Some(ino) = ino {
            let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }
}

/// The directory holding `path` ("/" for a name in the root).
fn parent_of(path: &str) -> Option<&str> {
    match path.rsplit_once('/')? {
        ("", "") => None,
        ("", _) => Some("/"),
        (dir, _) => Some(dir),
    }
}

/// Updates the names kept for the kernel's nodes as this server's own
/// unlink or rename would (another name of a hard-linked file takes over;
/// a renamed directory's nodes keep their paths under its new name).
fn follow_move(nodes: &Nodes, moved: &Moved) {
    let entry = |path: &str| nodes.entries_at([path]).pop().map(|(parent, name, _)| (parent, name));
    match moved {
        Moved::Nothing => {}
        Moved::Removed(path) => {
            if let Some((parent, name)) = entry(path) {
                nodes.detach(parent, &name);
            }
        }
        Moved::Renamed(from, to) => match (entry(from), entry(to)) {
            (Some((parent, name)), Some((new_parent, new_name))) => nodes.rename(parent, &name, new_parent, &new_name),
            // The kernel holds no directory of the other name: what it held goes.
            (Some((parent, name)), None) | (None, Some((parent, name))) => nodes.detach(parent, &name),
            (None, None) => {}
        },
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
    while let Ok((moved, changes)) = read_changes(&mut stream) {
        // A directory named only as the one holding a changed name keeps
        // its entry (dropping it would drop every entry under it, and the
        // kernel's forget of the old node races its next lookup of the
        // same node id): its attributes are dropped.
        let parents: HashSet<&str> = changes.iter().filter_map(|(path, _)| parent_of(path)).collect();
        let (dirs, names): (Vec<_>, Vec<_>) =
            changes.iter().cloned().partition(|(path, _)| parents.contains(path.as_str()));
        // The entries before the move, whose nodes the kernel is to drop too.
        let held = entries(nodes, Some(&names));
        // The root has no entry: the table gives none for it.
        let dirs_named_root = dirs.iter().any(|(path, _)| path == "/");
        let dirs = entries(nodes, Some(&dirs));
        follow_move(nodes, &moved);
        // No session yet: the kernel holds nothing of the mount to drop.
        if let Some(notifier) = notifier.get() {
            invalidate(notifier, held);
            let root = dirs_named_root.then_some(ROOT);
            for ino in dirs.into_iter().filter_map(|(_, _, ino)| ino).chain(root) {
                let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
            }
        }
        if stream.write_all(&[ANSWER]).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_holding_a_name_is_its_path_up_to_the_last_slash() {
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/"), None);
    }

    #[test]
    fn a_removed_hard_link_leaves_its_other_name_and_a_renamed_directory_moves_its_nodes() {
        let nodes = Nodes::default();
        nodes.remember(3, ROOT, "a", true, false);
        nodes.remember(3, ROOT, "c", true, true);
        follow_move(&nodes, &Moved::Removed("/a".into()));
        assert_eq!(nodes.path(3).as_deref(), Some("/c"));
        nodes.remember(2, ROOT, "d", false, false);
        nodes.remember(4, 2, "f", true, false);
        follow_move(&nodes, &Moved::Renamed("/d".into(), "/e".into()));
        assert_eq!(nodes.path(4).as_deref(), Some("/e/f"));
        follow_move(&nodes, &Moved::Removed("/e/f".into()));
        assert_eq!(nodes.path(4), None, "no other name: the node is detached");
        follow_move(&nodes, &Moved::Renamed("/unknown/x".into(), "/c".into()));
        assert_eq!(nodes.path(3), None, "what the new name named before is detached");
    }
}
