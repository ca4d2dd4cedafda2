//! The cluster file: which daemons make up a Surge cluster, where they
//! listen, where the PFS tier is, and where the cluster secret is.
//! `surge start` writes it (atomically); clients, the CLI and the
//! interposer read it. Daemons announce themselves by writing one
//! registration file each into `<cluster file>.d/`, so the same start-up
//! works on one host or on many hosts sharing that directory.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod connections;
mod namespace_policy;
mod node;
mod private;
pub mod raw;
pub use connections::{parse_mbps_limit, parse_rate, parse_size, ConnCount, ConnPolicy, ConnectionDefaults, MAX_CONNS};
pub use namespace_policy::NamespacePolicy;
pub use node::this_node;
pub use private::{open_private_file, open_private_log, private_dir, PrivateDirError};

pub const CLUSTER_FILE_VERSION: u32 = 1;
pub const SECRET_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonEntry {
    pub index: u32,
    /// "ip:port" the daemon accepts connections on.
    pub addr: String,
    pub host: String,
    pub pid: u32,
    /// This daemon's buffer directory (its chunk store and, on daemon 0, the namespace).
    pub buffer: PathBuf,
    /// The daemon's node (`this_node`); empty in registrations of older daemons.
    #[serde(default)]
    pub node: String,
    /// The daemon's Unix socket, for clients on its node (the node-local
    /// data path); absent when it has none (older daemons, a path too long).
    #[serde(default)]
    pub local_socket: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    pub version: u32,
    /// Random id of this cluster instance; daemons report it in their Hello reply.
    pub cluster_id: String,
    pub secret_file: PathBuf,
    /// The parallel file system tier (a POSIX directory).
    pub pfs: PathBuf,
    /// Daemon 0 also serves the namespace (the metadata daemon).
    pub daemons: Vec<DaemonEntry>,
    /// Clients' default connection count and policy (absent in older files: auto, auto).
    #[serde(default)]
    pub connections: ConnectionDefaults,
    /// Where the namespace is kept (absent in older files: daemon 0 alone).
    #[serde(default)]
    pub namespace: NamespacePolicy,
}

#[derive(Debug)]
pub enum ClusterError {
    Missing(PathBuf),
    Unreadable(PathBuf, io::Error),
    Malformed(PathBuf, String),
    Secret(PathBuf, String),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Missing(p) => write!(
                f,
                "no Surge cluster file at {}: start a cluster with `surge start`, \
                 or set SURGE_CLUSTER to the cluster file of a running one",
                p.display()
            ),
            ClusterError::Unreadable(p, e) => write!(f, "cannot read cluster file {}: {e}", p.display()),
            ClusterError::Malformed(p, why) => write!(
                f,
                "{} is not a valid Surge cluster file ({why}); check SURGE_CLUSTER, \
                 or restart the cluster with `surge stop; surge start`",
                p.display()
            ),
            ClusterError::Secret(p, why) => write!(f, "cluster secret {}: {why}", p.display()),
        }
    }
}

impl std::error::Error for ClusterError {}

/// `$SURGE_CLUSTER`, else `$HOME/.surge/cluster.toml`.
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SURGE_CLUSTER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".surge").join("cluster.toml")
}

/// The registration directory that belongs to a cluster file.
pub fn registration_dir(cluster_file: &Path) -> PathBuf {
    let mut s = cluster_file.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s)
}

impl ClusterFile {
    pub fn load(path: &Path) -> Result<ClusterFile, ClusterError> {
        // Raw calls: clients read it inside applications, whose profilers must not count it.
        let text = match raw::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ClusterError::Missing(path.into())),
            Err(e) => return Err(ClusterError::Unreadable(path.into(), e)),
        };
        let file: ClusterFile =
            toml::from_str(&text).map_err(|e| ClusterError::Malformed(path.into(), e.message().to_string()))?;
        file.check().map_err(|why| ClusterError::Malformed(path.into(), why))?;
        Ok(file)
    }

    fn check(&self) -> Result<(), String> {
        if self.version != CLUSTER_FILE_VERSION {
            return Err(format!("version {} (this Surge reads version {CLUSTER_FILE_VERSION})", self.version));
        }
        if self.daemons.is_empty() {
            return Err("it lists no daemons".into());
        }
        for (i, d) in self.daemons.iter().enumerate() {
            if d.index as usize != i {
                return Err(format!("daemon {i} has index {}", d.index));
            }
            if d.addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(format!("daemon {i} address {:?} is not ip:port", d.addr));
            }
        }
        Ok(())
    }

    /// Writes the file atomically (temporary file, fsync, rename), readable
    /// by its owner only: it names the buffer directories and the secret.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let text = toml::to_string_pretty(self).map_err(io::Error::other)?;
        write_atomically(path, text.as_bytes(), 0o600)
    }

    pub fn secret(&self) -> Result<Vec<u8>, ClusterError> {
        read_secret(&self.secret_file)
    }
}

/// A new random secret.
pub fn random_secret() -> Vec<u8> {
    let mut raw = vec![0u8; SECRET_BYTES];
    getrandom::getrandom(&mut raw).expect("the OS random source is unavailable");
    raw
}

/// Creates a new random secret file readable by its owner only.
pub fn generate_secret(path: &Path) -> io::Result<()> {
    write_atomically(path, hex::encode(random_secret()).as_bytes(), 0o600)
}

/// Name of the peer secret in a registration directory.
pub const PEER_SECRET_FILE: &str = "peer-secret";

/// The peer secret of the daemons registering in `register_dir`: the
/// secret they prove to each other, so that a daemon takes the operations
/// only daemons send (`Op::is_peer_only`) from them and from no client.
/// Clients read the cluster file and its secret, never this file, which
/// the first daemon to start makes (mode 0600, in the 0700 registration
/// directory that `surge start` makes afresh for every cluster).
pub fn peer_secret(register_dir: &Path) -> Result<Vec<u8>, ClusterError> {
    let path = register_dir.join(PEER_SECRET_FILE);
    if !path.exists() {
        // Written beside, then linked into place: a link never replaces, so
        // daemons starting at once all read the first one made.
        let fresh = path.with_extension(format!("new.{}", std::process::id()));
        let made = generate_secret(&fresh).and_then(|()| match fs::hard_link(&fresh, &path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        });
        let _ = fs::remove_file(&fresh);
        made.map_err(|e| ClusterError::Secret(path.clone(), format!("cannot be made: {e}")))?;
    }
    read_secret(&path)
}

/// Reads a secret file, refusing one that others can read (as ssh does);
/// with raw calls, as the cluster file (`ClusterFile::load`).
pub fn read_secret(path: &Path) -> Result<Vec<u8>, ClusterError> {
    let unreadable = |e: io::Error| ClusterError::Secret(path.into(), e.to_string());
    let file = raw::open(path, raw::OFlags::RDONLY, 0).map_err(unreadable)?;
    let mode = raw::fstat(&file).map_err(unreadable)?.st_mode;
    if mode & 0o077 != 0 {
        return Err(ClusterError::Secret(
            path.into(),
            format!("mode {:o} lets others read it; run `chmod 600 {}`", mode & 0o777, path.display()),
        ));
    }
    let text = raw::read_all(&file).map_err(unreadable)?;
    let raw = hex::decode(text.trim_ascii()).map_err(|_| ClusterError::Secret(path.into(), "not hex".into()))?;
    if raw.len() < 16 {
        return Err(ClusterError::Secret(path.into(), "shorter than 16 bytes".into()));
    }
    Ok(raw)
}

/// This machine's host name ("unknown" if the kernel will not say). Daemons
/// record it in their registration and `surge stop` compares against it to
/// know which daemons it may signal, so every component uses this one.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "unknown".into();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// Size and free space (for unprivileged users) of the file system holding
/// `path`, in bytes. Daemons check it before they use space; `surge start`
/// shares a device among the daemons that keep their buffers on it.
pub fn fs_space(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statvfs fills the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}

/// A unique cluster id.
pub fn new_cluster_id() -> String {
    let mut raw = [0u8; 8];
    getrandom::getrandom(&mut raw).expect("the OS random source is unavailable");
    hex::encode(raw)
}

/// Writes `path` through a new temporary file beside it (fsync, rename);
/// a missing directory is created 0700. The temporary file is created
/// exclusively and never through a symlink, so a name planted in a shared
/// directory cannot redirect the write.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    {
        // A leftover of a crashed process with our pid (or a planted link) goes first.
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| private::refused_symlink(&tmp, e))?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)
}

/// A daemon announces itself: `<dir>/daemon-<index>.toml`.
pub fn register(dir: &Path, entry: &DaemonEntry) -> io::Result<()> {
    let text = toml::to_string(entry).map_err(io::Error::other)?;
    write_atomically(&dir.join(format!("daemon-{}.toml", entry.index)), text.as_bytes(), 0o600)
}

/// Registrations present in `dir`, by index; unreadable files are skipped
/// (a daemon may be writing one right now).
pub fn registrations(dir: &Path) -> Vec<DaemonEntry> {
    let mut out: Vec<DaemonEntry> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("daemon-") && name.ends_with(".toml")
        })
        .filter_map(|e| toml::from_str(&fs::read_to_string(e.path()).ok()?).ok())
        .collect();
    out.sort_by_key(|d: &DaemonEntry| d.index);
    out
}

/// The node-local directory of cluster `cluster_id`'s lock files, one per
/// Surge file locked through the interposer alone (surge-preload's
/// `locks`): in memory (`/dev/shm`) when the node has it, per user.
pub fn lock_dir(cluster_id: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    // SAFETY: getuid cannot fail.
    root.join(format!("surge-locks-{}", unsafe { libc::getuid() })).join(cluster_id)
}

/// The writers journal beside a job profile (`<profile>.writers`): the
/// interposer notes "pid path" there for each file a process opens for
/// writing; `surge run` reads it to name files a crashed writer left.
pub fn writers_journal(profile: &Path) -> PathBuf {
    let mut name = profile.as_os_str().to_owned();
    name.push(".writers");
    PathBuf::from(name)
}

/// This process's rank and the number of ranks, from the launcher's
/// environment (Open MPI, PMI/MPICH, Slurm); `None` outside a launcher.
pub fn launcher_rank() -> Option<(u32, u32)> {
    let get = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")]
        .iter()
        .find_map(|(r, s)| Some((get(r)?, get(s)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dir: &Path) -> ClusterFile {
        ClusterFile {
            version: CLUSTER_FILE_VERSION,
            cluster_id: new_cluster_id(),
            secret_file: dir.join("secret"),
            pfs: dir.join("pfs"),
            daemons: vec![DaemonEntry {
                index: 0,
                addr: "127.0.0.1:4000".into(),
                host: "h".into(),
                pid: 1,
                buffer: dir.join("b0"),
                node: this_node(),
                local_socket: Some(dir.join("b0/local.sock")),
            }],
            connections: ConnectionDefaults::default(),
            namespace: NamespacePolicy::default(),
        }
    }

    #[test]
    fn save_load_round_trip_and_secret_mode() {
        let t = tempfile::tempdir().unwrap();
        let cf = sample(t.path());
        let path = t.path().join("c/cluster.toml");
        cf.save(&path).unwrap();
        assert_eq!(ClusterFile::load(&path).unwrap(), cf);
        generate_secret(&cf.secret_file).unwrap();
        assert_eq!(fs::metadata(&cf.secret_file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(cf.secret().unwrap().len(), SECRET_BYTES);
        fs::set_permissions(&cf.secret_file, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(cf.secret().unwrap_err().to_string().contains("chmod 600"));
    }

    #[test]
    fn the_peer_secret_is_made_once_private_and_then_read_by_every_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let first = peer_secret(dir.path()).unwrap();
        assert_eq!(first.len(), SECRET_BYTES);
        let path = dir.path().join(PEER_SECRET_FILE);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(peer_secret(dir.path()).unwrap(), first, "a second daemon reads the same secret");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");
    }

    #[test]
    fn missing_and_malformed_files_say_what_to_do() {
        let t = tempfile::tempdir().unwrap();
        let missing = ClusterFile::load(&t.path().join("nope")).unwrap_err().to_string();
        assert!(missing.contains("surge start") && missing.contains("SURGE_CLUSTER"), "{missing}");
        let bad = t.path().join("bad.toml");
        fs::write(&bad, "version = 1\ndaemons = 3").unwrap();
        assert!(matches!(ClusterFile::load(&bad), Err(ClusterError::Malformed(..))));
        let mut cf = sample(t.path());
        cf.daemons[0].addr = "nowhere".into();
        cf.save(&bad).unwrap();
        assert!(ClusterFile::load(&bad).unwrap_err().to_string().contains("not ip:port"));
    }

    #[test]
    fn hostname_is_the_kernels_node_name() {
        let kernel = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(hostname(), kernel.trim());
    }

    #[test]
    fn registrations_are_collected_in_index_order() {
        let t = tempfile::tempdir().unwrap();
        let mut e = sample(t.path()).daemons[0].clone();
        for i in [2, 0, 1] {
            e.index = i;
            register(t.path(), &e).unwrap();
        }
        fs::write(t.path().join("daemon-9.toml"), "garbage").unwrap();
        let got: Vec<u32> = registrations(t.path()).iter().map(|d| d.index).collect();
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(registration_dir(Path::new("/x/c.toml")), PathBuf::from("/x/c.toml.d"));
    }
}
