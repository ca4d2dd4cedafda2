//! The link between a process that changes the namespace through this
//! library beside a FUSE mount of the same cluster (the interposer's
//! metadata fast path, as DAOS's libpil4dfs works beside dfuse) and that
//! mount's server: before the call that made a change returns, the server
//! is told the names it changed and drops what the kernel caches of them,
//! so every process of the node that goes through the kernel sees the
//! change at once (the mount caches entries for the lifetime of the
//! cache of names, and may cache a name's absence).
//!
//! The server listens on the abstract Unix socket [`socket_name`] of its
//! process id, which the mount's source in /proc/self/mountinfo names
//! (`surge:<cluster>:<pid>`): nothing is left on disk by a server that was
//! killed, and a client needs nothing but the mount to find it. The
//! server answers only peers of its own user (or root).
//!
//! One message per change made: what moved ([`Moved`]: `u8` 0 nothing, 1
//! a removal and its path, 2 a rename and its two paths), then `u32`
//! count and per changed name `u8` subtree and the path; a path is `u32`
//! length and the Surge path's bytes (little-endian). The answer is one
//! byte, 0, sent once the kernel has dropped them.
//!
//! How to plug in: the client side is [`MountLink`], which
//! `Client::tell_mount_of_own_changes` hands every change this client makes;
//! the server reads with [`read_changes`] and answers with [`ANSWER`].

use std::io::{self, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::Mutex;

/// Changed paths, each with whether everything under it changed too.
pub type Changes = [(String, bool)];

/// The answer to a message once the kernel has dropped its names.
pub const ANSWER: u8 = 0;
/// Most names one message may carry, and longest path, so a bad peer cannot make the server allocate much.
const MOST_NAMES: u32 = 64;
const LONGEST_PATH: u32 = 4096;

/// What a change did to the names the mount's server keeps for the
/// kernel's nodes (which it updates as for its own unlink or rename).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    Nothing,
    Removed(String),
    Renamed(String, String),
}

impl Moved {
    /// What `req` moves when it succeeds.
    pub fn by(req: &surge_proto::Request<'_>) -> Moved {
        use surge_proto::Request;
        match *req {
            Request::Unlink { path, .. } | Request::Rmdir { path } => Moved::Removed(path.to_string()),
            Request::Rename { from, to, .. } => Moved::Renamed(from.to_string(), to.to_string()),
            _ => Moved::Nothing,
        }
    }
}

/// The abstract socket name of the mount served by process `server_pid`.
pub fn socket_name(server_pid: u32) -> String {
    format!("surge-mount-{server_pid}")
}

/// The address of that socket.
pub fn socket_addr(server_pid: u32) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(server_pid))
}

fn put_path(out: &mut Vec<u8>, path: &str) {
    out.extend_from_slice(&(path.len() as u32).to_le_bytes());
    out.extend_from_slice(path.as_bytes());
}

fn encode(moved: &Moved, changes: &Changes) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + changes.iter().map(|(p, _)| 5 + p.len()).sum::<usize>());
    match moved {
        Moved::Nothing => out.push(0),
        Moved::Removed(path) => {
            out.push(1);
            put_path(&mut out, path);
        }
        Moved::Renamed(from, to) => {
            out.push(2);
            put_path(&mut out, from);
            put_path(&mut out, to);
        }
    }
    out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
    for (path, subtree) in changes {
        out.push(u8::from(*subtree));
        put_path(&mut out, path);
    }
    out
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut byte = [0u8; 1];
    r.read_exact(&mut byte)?;
    Ok(byte[0])
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut word = [0u8; 4];
    r.read_exact(&mut word)?;
    Ok(u32::from_le_bytes(word))
}

fn read_path(r: &mut impl Read) -> io::Result<String> {
    let len = read_u32(r)?;
    if len > LONGEST_PATH {
        return Err(bad(format!("a path of {len} bytes (at most {LONGEST_PATH})")));
    }
    let mut path = vec![0u8; len as usize];
    r.read_exact(&mut path)?;
    String::from_utf8(path).map_err(|_| bad("a path that is not UTF-8".into()))
}

/// The next message: what moved and the changed names; `UnexpectedEof`
/// when the peer closed.
pub fn read_changes(r: &mut impl Read) -> io::Result<(Moved, Vec<(String, bool)>)> {
    let moved = match read_u8(r)? {
        0 => Moved::Nothing,
        1 => Moved::Removed(read_path(r)?),
        2 => Moved::Renamed(read_path(r)?, read_path(r)?),
        other => return Err(bad(format!("an unknown change kind {other}"))),
    };
    let count = read_u32(r)?;
    if count > MOST_NAMES {
        return Err(bad(format!("{count} names in one message (at most {MOST_NAMES})")));
    }
    let mut changes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let subtree = read_u8(r)? != 0;
        changes.push((read_path(r)?, subtree));
    }
    Ok((moved, changes))
}

/// A connection to the mount's server.
pub struct MountLink {
    stream: Mutex<UnixStream>,
}

impl MountLink {
    /// Connects to the server of the mount whose server is process `server_pid`.
    pub fn connect(server_pid: u32) -> io::Result<MountLink> {
        let stream = UnixStream::connect_addr(&socket_addr(server_pid)?)?;
        Ok(MountLink { stream: Mutex::new(stream) })
    }

    /// Tells the server of `changes` (and of what `moved`) and waits until
    /// the kernel has dropped them.
    pub fn tell(&self, moved: &Moved, changes: &Changes) -> io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut stream = self.stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        stream.write_all(&encode(moved, changes))?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer)?;
        if answer[0] != ANSWER {
            return Err(io::Error::other(format!("the mount's server answered {}", answer[0])));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_what_moved_and_the_changes_it_carries() {
        let changes = vec![("/d".to_string(), false), ("/d/ünï".to_string(), true)];
        for moved in [Moved::Nothing, Moved::Removed("/d/x".into()), Moved::Renamed("/a".into(), "/d/b".into())] {
            let bytes = encode(&moved, &changes);
            assert_eq!(read_changes(&mut bytes.as_slice()).unwrap(), (moved, changes.clone()));
        }
    }

    #[test]
    fn oversized_unknown_or_cut_messages_are_refused() {
        let mut too_many = encode(&Moved::Nothing, &[]);
        too_many[1..5].copy_from_slice(&(MOST_NAMES + 1).to_le_bytes());
        assert_eq!(read_changes(&mut too_many.as_slice()).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut unknown = encode(&Moved::Nothing, &[]);
        unknown[0] = 7;
        assert_eq!(read_changes(&mut unknown.as_slice()).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let whole = encode(&Moved::Removed("/a/b".into()), &[("/a/b".to_string(), false)]);
        let cut = &whole[..whole.len() - 1];
        assert_eq!(read_changes(&mut &cut[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }
}
