//! Which paths are Surge's: those under the mount prefix (`SURGE_MOUNT`,
//! default `/surge`), named absolutely, relative to a Surge directory
//! descriptor, or relative to a Surge working directory (after chdir).

use surge_client::{Error, Result};

pub const DEFAULT_MOUNT: &str = "/surge";

/// Where a path the program named leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A path in the Surge namespace ("/" is the mount point itself).
    Surge(String),
    /// Not Surge's: the call goes to libc with the path as given.
    Host,
    /// Not Surge's, but only this absolute host path names it (a path
    /// relative to a Surge directory that climbs out of the mount).
    HostPath(String),
}

#[derive(Debug, Clone)]
pub struct Mount {
    /// Lexically canonical, without a trailing slash ("/surge").
    prefix: String,
}

impl Mount {
    pub fn new(prefix: &str) -> Result<Mount> {
        let canonical = normalize(prefix).filter(|p| p != "/").ok_or_else(|| {
            Error::new(libc::EINVAL, format!("SURGE_MOUNT={prefix:?} must be an absolute path other than /"))
        })?;
        Ok(Mount { prefix: canonical })
    }

    pub fn from_env() -> Result<Mount> {
        Mount::new(&std::env::var("SURGE_MOUNT").unwrap_or_else(|_| DEFAULT_MOUNT.to_string()))
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// An absolute host path as a target. A path that names the mount but
    /// climbs out of it ("/surge/../etc") is handed to libc resolved, as
    /// the mount point need not exist on the host.
    pub fn classify(&self, host_path: &str) -> Target {
        let Some(path) = normalize(host_path) else { return Target::Host };
        match path.strip_prefix(&self.prefix) {
            Some("") => Target::Surge("/".to_string()),
            Some(rest) if rest.starts_with('/') => Target::Surge(rest.to_string()),
            _ if self.names_mount(host_path) => Target::HostPath(path),
            _ => Target::Host,
        }
    }

    /// The part of absolute `host_path` after the mount prefix, as written,
    /// when it starts with the prefix.
    pub fn inside<'a>(&self, host_path: &'a str) -> Option<&'a str> {
        host_path.strip_prefix(&self.prefix).filter(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    fn names_mount(&self, host_path: &str) -> bool {
        self.inside(host_path).is_some()
    }

    /// `path` relative to the Surge directory `base`.
    pub fn join(&self, base: &str, path: &str) -> Target {
        self.classify(&format!("{}{base}/{path}", self.prefix))
    }

    /// The host-side name of Surge path `path` (for getcwd and realpath).
    pub fn host_name(&self, path: &str) -> String {
        if path == "/" {
            self.prefix.clone()
        } else {
            format!("{}{path}", self.prefix)
        }
    }
}

/// Resolves `.`, `..` and repeated slashes of an absolute path without
/// touching any file system; `None` for a relative path.
pub fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_prefix_are_surge_paths() {
        let m = Mount::new("/surge/").unwrap();
        assert_eq!(m.classify("/surge"), Target::Surge("/".into()));
        assert_eq!(m.classify("/surge/"), Target::Surge("/".into()));
        assert_eq!(m.classify("/surge//ckpt/./a"), Target::Surge("/ckpt/a".into()));
        assert_eq!(m.classify("/surge/ckpt/../b"), Target::Surge("/b".into()));
        assert_eq!(m.classify("/surgeon/x"), Target::Host);
        assert_eq!(m.classify("/surge/../etc/passwd"), Target::HostPath("/etc/passwd".into()));
        assert_eq!(m.classify("/surge/.."), Target::HostPath("/".into()));
        assert_eq!(m.classify("/tmp/x"), Target::Host);
        assert_eq!(m.classify("relative"), Target::Host);
    }

    #[test]
    fn relative_paths_join_their_surge_directory() {
        let m = Mount::new("/surge").unwrap();
        assert_eq!(m.join("/ckpt", "a/b"), Target::Surge("/ckpt/a/b".into()));
        assert_eq!(m.join("/", "."), Target::Surge("/".into()));
        assert_eq!(m.join("/ckpt", "../../tmp/x"), Target::HostPath("/tmp/x".into()));
        assert_eq!(m.host_name("/"), "/surge");
        assert_eq!(m.host_name("/a"), "/surge/a");
    }

    #[test]
    fn the_prefix_must_be_absolute_and_not_the_root() {
        assert!(Mount::new("surge").is_err());
        assert!(Mount::new("/").is_err());
        assert!(Mount::new("/..").is_err());
        assert_eq!(Mount::new("/scratch//bb/").unwrap().prefix(), "/scratch/bb");
    }
}
