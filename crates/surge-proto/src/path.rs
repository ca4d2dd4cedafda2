//! Namespace paths. On the wire a path is absolute in Surge's own namespace
//! ("/ckpt/rank0"), with no "." or ".." components: the client resolves
//! those lexically, and a daemon refuses any path that still has them, so
//! no request can name anything outside the daemon's directories.

use crate::errno::Errno;

pub const NAME_MAX: usize = 255;
pub const PATH_MAX: usize = 4096;

/// Checks a wire path and returns it in canonical form ("/" or "/a/b").
pub fn canonical(path: &str) -> Result<String, Errno> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if path.len() > PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut out = String::with_capacity(path.len());
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(Errno::EINVAL),
            name if name.len() > NAME_MAX => return Err(Errno::ENAMETOOLONG),
            name => {
                out.push('/');
                out.push_str(name);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Resolves `path` against `cwd` lexically ("a/../b" → "/b"); ".." at the
/// root stays at the root, as in POSIX.
pub fn resolve(cwd: &str, path: &str) -> Result<String, Errno> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    let joined = if path.starts_with('/') { path.to_string() } else { format!("{cwd}/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    canonical(&format!("/{}", parts.join("/")))
}

/// Splits a canonical path into (parent, name); the root has no parent.
pub fn split(path: &str) -> Option<(&str, &str)> {
    if path == "/" {
        return None;
    }
    let cut = path.rfind('/')?;
    Some((if cut == 0 { "/" } else { &path[..cut] }, &path[cut + 1..]))
}

/// Is `path` equal to `dir` or inside it?
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_and_refusals() {
        assert_eq!(canonical("/").unwrap(), "/");
        assert_eq!(canonical("//a/./b/").unwrap(), "/a/b");
        assert_eq!(canonical("/a/../etc/passwd"), Err(Errno::EINVAL));
        assert_eq!(canonical("etc/passwd"), Err(Errno::EINVAL));
        assert_eq!(canonical("/a\0b"), Err(Errno::EINVAL));
        assert_eq!(canonical(&format!("/{}", "x".repeat(256))), Err(Errno::ENAMETOOLONG));
    }

    #[test]
    fn resolve_is_lexical_and_clamped_at_root() {
        assert_eq!(resolve("/a/b", "../c").unwrap(), "/a/c");
        assert_eq!(resolve("/a", "/../../x").unwrap(), "/x");
        assert_eq!(resolve("/", "..").unwrap(), "/");
        assert_eq!(resolve("/", ""), Err(Errno::ENOENT));
    }

    #[test]
    fn split_and_within() {
        assert_eq!(split("/a"), Some(("/", "a")));
        assert_eq!(split("/a/b/c"), Some(("/a/b", "c")));
        assert_eq!(split("/"), None);
        assert!(is_within("/a/b", "/a"));
        assert!(!is_within("/ab", "/a"));
        assert!(is_within("/x", "/"));
    }
}
