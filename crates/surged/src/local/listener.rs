//! The daemon's Unix stream socket (`<buffer>/local.sock`, mode 0600 in
//! the 0700 buffer directory), beside its TCP listener: the node-local
//! data path's way in. Only peers of the daemon's own uid are taken
//! (`SO_PEERCRED`, checked before a byte is read), and they still prove
//! the cluster secret as TCP clients do: the connection is served by the
//! same handler (`server::admit`), the descriptors it may be handed being
//! the difference.

use crate::logging::log;
use crate::server::{self, Control, Server};
use crate::stream::Stream;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// The socket's name in the buffer directory.
pub const SOCKET_NAME: &str = "local.sock";

/// Binds the socket at `path`, replacing a socket a stopped daemon left
/// (the buffer directory's lock says none runs), never another file.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket; remove it", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Why a peer of uid `peer` may not use a daemon running as `own`, if it may not.
pub fn refusal(peer: u32, own: u32) -> Option<String> {
    (peer != own).then(|| {
        format!("refused a local connection from uid {peer}: the daemon runs as uid {own} and serves only its own user here")
    })
}

/// Accepts node-local connections until the daemon stops, then removes
/// the socket. Holds the server weakly: a stopped daemon's store and
/// namespace close with the last connection, as without this listener.
pub fn run(index: u32, control: Arc<Control>, server: Weak<Server>, listener: UnixListener, path: PathBuf) {
    // SAFETY: geteuid cannot fail.
    let own = unsafe { libc::geteuid() };
    for incoming in listener.incoming() {
        if control.stopping() {
            break;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(e) => {
                log!(Debug, index, "accepting a local connection failed: {e}");
                // Out of descriptors: the open connections must end first.
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        match peer_uid(&stream).map(|uid| refusal(uid, own)) {
            Ok(None) => match server.upgrade() {
                Some(server) => server::admit(&server, Stream::Unix(stream)),
                None => break,
            },
            Ok(Some(why)) => log!(Warn, index, "{why}"),
            Err(e) => log!(Warn, index, "refused a local connection whose peer cannot be told: {e}"),
        }
    }
    let _ = fs::remove_file(&path);
}

fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    Ok(getsockopt(stream, PeerCredentials).map_err(io::Error::from)?.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_of_another_uid_is_refused_and_one_of_the_daemons_uid_is_not() {
        assert_eq!(refusal(1000, 1000), None);
        let why = refusal(1001, 1000).unwrap();
        assert!(why.contains("uid 1001") && why.contains("uid 1000"), "{why}");
    }

    #[test]
    fn the_socket_is_private_replaces_a_stale_socket_and_never_another_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SOCKET_NAME);
        drop(bind(&path).unwrap());
        let listener = bind(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let client = UnixStream::connect(&path).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        // SAFETY: geteuid cannot fail.
        assert_eq!(peer_uid(&accepted).unwrap(), unsafe { libc::geteuid() });
        drop(client);
        let file = dir.path().join("other");
        fs::write(&file, b"x").unwrap();
        assert_eq!(bind(&file).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&file).unwrap(), b"x");
    }
}
