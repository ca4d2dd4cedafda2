//! The one rule by which every command reads a path argument (docs/core.md,
//! "Paths"). A path names something in Surge when it is written under the
//! mount prefix (`/surge/ckpt/a`, SURGE_MOUNT, default /surge), as
//! `surge:/ckpt/a`, or relative from a working directory under the mount.
//! Commands that only take Surge paths also read any other absolute path as
//! a namespace path (`/ckpt/a`). `surge cp`, which takes local paths too,
//! reads a relative path as local and an absolute path outside the mount by
//! where it exists, and refuses one it cannot place instead of guessing.

use std::path::Path;

/// The mount prefix the interposer and the CLI recognise (SURGE_MOUNT, default /surge).
pub fn mount_prefix() -> String {
    std::env::var("SURGE_MOUNT").ok().filter(|m| m.starts_with('/')).unwrap_or_else(|| "/surge".into())
}

/// A mount prefix as given (--mount / SURGE_MOUNT): absolute, not "/".
pub fn validated_mount(mount: &str) -> Result<String, String> {
    let trimmed = mount.trim_end_matches('/');
    if !mount.starts_with('/') || trimmed.is_empty() {
        return Err(format!("the mount prefix {mount:?} must be an absolute path other than /"));
    }
    Ok(trimmed.to_string())
}

/// The namespace path of `arg` when its spelling says it is in Surge:
/// "surge:/a", "<mount>/a", or a relative path from a directory under the mount.
pub fn spelled_in_surge(arg: &str, mount: &str) -> Option<Result<String, String>> {
    let mount = mount.trim_end_matches('/');
    let under_mount = |p: &str| -> Option<String> {
        p.strip_prefix(mount).filter(|r| r.is_empty() || r.starts_with('/')).map(str::to_string)
    };
    let inner = if let Some(rest) = arg.strip_prefix("surge:") {
        rest.to_string()
    } else if arg.starts_with('/') {
        under_mount(arg)?
    } else {
        let cwd = std::env::current_dir().ok()?;
        under_mount(cwd.to_str()?).map(|dir| format!("{dir}/{arg}"))?
    };
    Some(namespace(arg, &inner))
}

fn namespace(arg: &str, inner: &str) -> Result<String, String> {
    let inner = if inner.is_empty() { "/" } else { inner };
    surge_proto::path::resolve("/", inner).map_err(|e| format!("{arg}: not a valid Surge path ({e})"))
}

/// A path argument of a command that only takes Surge paths: any spelling
/// [`spelled_in_surge`] knows, or an absolute namespace path.
pub fn ns_path(arg: &str) -> Result<String, String> {
    if let Some(path) = spelled_in_surge(arg, &mount_prefix()) {
        return path;
    }
    if !arg.starts_with('/') {
        let mount = mount_prefix();
        return Err(format!(
            "{arg}: a relative path names a Surge file only from a directory under {mount}: write it as \
             {mount}/{arg} or /{arg}"
        ));
    }
    namespace(arg, arg)
}

/// Which end of a copy an operand is: a destination that does not exist yet
/// is placed by its parent directory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Operand {
    Source,
    Destination,
}

/// A `surge cp` operand: `Some(namespace path)` for Surge, `None` for the
/// local path as written. `in_surge` tells whether a namespace path exists.
pub fn cp_operand(
    arg: &str,
    operand: Operand,
    in_surge: &dyn Fn(&str) -> Result<bool, String>,
) -> Result<Option<String>, String> {
    let mount = mount_prefix();
    if let Some(path) = spelled_in_surge(arg, &mount) {
        return path.map(Some);
    }
    if !arg.starts_with('/') {
        return Ok(None);
    }
    let ns = namespace(arg, arg)?;
    let in_local = |p: &Path| p.symlink_metadata().is_ok();
    let ambiguous = |what: &str| {
        format!(
            "{arg} is ambiguous: {what}. Write {mount}{ns} (or surge:{ns}) for the Surge path, or a path \
             relative to the current directory for the local one"
        )
    };
    match (in_local(Path::new(arg)), in_surge(&ns)?) {
        (true, false) => return Ok(None),
        (false, true) => return Ok(Some(ns)),
        (true, true) => return Err(ambiguous("it exists both on this machine and in Surge")),
        (false, false) => {}
    }
    let parents = (Path::new(arg).parent(), surge_proto::path::split(&ns).map(|(dir, _)| dir));
    let (Operand::Destination, (Some(local_dir), Some(surge_dir))) = (operand, parents) else {
        return Err(ambiguous("it exists neither on this machine nor in Surge"));
    };
    match (local_dir.is_dir(), in_surge(surge_dir)?) {
        (true, false) => Ok(None),
        (false, true) => Ok(Some(ns)),
        (true, true) => {
            Err(ambiguous(&format!("its directory {} exists both on this machine and in Surge", surge_dir)))
        }
        (false, false) => {
            Err(ambiguous(&format!("its directory {} exists neither on this machine nor in Surge", surge_dir)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_paths_are_recognised_in_every_spelling() {
        assert_eq!(spelled_in_surge("surge:/a/b", "/surge").unwrap().unwrap(), "/a/b");
        assert_eq!(spelled_in_surge("/surge/a/../b", "/surge").unwrap().unwrap(), "/b");
        assert_eq!(spelled_in_surge("/surge", "/surge/").unwrap().unwrap(), "/");
        assert!(spelled_in_surge("/surgeon/x", "/surge").is_none());
        assert!(spelled_in_surge("./local", "/surge").is_none());
        assert_eq!(ns_path("/ckpt").unwrap(), "/ckpt");
        assert!(ns_path("ckpt").unwrap_err().contains("write it as"));
    }

    #[test]
    fn cp_places_an_absolute_path_by_where_it_exists_and_refuses_to_guess() {
        let local = tempfile::tempdir().unwrap();
        let dir = local.path().to_str().unwrap().to_string();
        std::fs::write(local.path().join("here"), b"x").unwrap();
        let surge_has = |p: &str| Ok(p == "/ckpt" || p == format!("{dir}/both") || p == "/");
        std::fs::write(local.path().join("both"), b"x").unwrap();

        let here = format!("{dir}/here");
        assert_eq!(cp_operand(&here, Operand::Source, &surge_has).unwrap(), None);
        assert_eq!(cp_operand("/ckpt", Operand::Destination, &surge_has).unwrap(), Some("/ckpt".into()));
        assert_eq!(cp_operand("/ckpt/new", Operand::Destination, &surge_has).unwrap(), Some("/ckpt/new".into()));
        assert_eq!(cp_operand(&format!("{dir}/new"), Operand::Destination, &surge_has).unwrap(), None);
        assert_eq!(cp_operand("rel/x", Operand::Source, &surge_has).unwrap(), None);

        let both = cp_operand(&format!("{dir}/both"), Operand::Source, &surge_has).unwrap_err();
        assert!(both.contains("ambiguous") && both.contains("both on this machine and in Surge"), "{both}");
        let nowhere = cp_operand("/nowhere/x", Operand::Source, &surge_has).unwrap_err();
        assert!(nowhere.contains("neither on this machine nor in Surge") && nowhere.contains("/surge/nowhere/x"));
        let new_nowhere = cp_operand("/nowhere/x", Operand::Destination, &surge_has).unwrap_err();
        assert!(new_nowhere.contains("its directory /nowhere exists neither"), "{new_nowhere}");
    }
}
