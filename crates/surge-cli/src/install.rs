//! Where the parts of an installed Surge are: `surged` and the interposer
//! are found relative to the `surge` binary that runs, so a build tree
//! (cargo puts every part in target/<profile>/) and an installed prefix
//! (`make install`: bin/ and lib/, FHS places) both work without set-up;
//! `SURGE_PREFIX` names an install prefix to look in last.

use std::path::{Path, PathBuf};

/// The storage daemon: beside `surge`, then `$SURGE_PREFIX/bin`.
pub fn surged() -> Result<PathBuf, String> {
    let exe_dir = exe_dir()?;
    find("the storage daemon surged", &candidates(&exe_dir, prefix().as_deref(), "surged", &["."], "bin"))
}

/// The interposer shim (which loads its handler from its own directory):
/// `$SURGE_PRELOAD` when set, else beside `surge`, then `../lib` from it,
/// then `$SURGE_PREFIX/lib`.
pub fn preload_library() -> Result<PathBuf, String> {
    if let Some(named) = std::env::var_os("SURGE_PRELOAD") {
        let lib = PathBuf::from(named);
        return if lib.is_file() {
            Ok(lib)
        } else {
            Err(format!(
                "the interposer {} named by SURGE_PRELOAD is missing: unset SURGE_PRELOAD or point it at \
                 libsurge_preload.so",
                lib.display()
            ))
        };
    }
    let exe_dir = exe_dir()?;
    let places = candidates(&exe_dir, prefix().as_deref(), "libsurge_preload.so", &[".", "../lib"], "lib");
    find("the interposer libsurge_preload.so", &places)
}

fn exe_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the surge binary: {e}"))?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

fn prefix() -> Option<PathBuf> {
    std::env::var_os("SURGE_PREFIX").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// The places to look for `name`, in order: each of `beside` (directories
/// relative to the running binary's), then `prefix/<prefix_dir>`.
fn candidates(exe_dir: &Path, prefix: Option<&Path>, name: &str, beside: &[&str], prefix_dir: &str) -> Vec<PathBuf> {
    let mut places: Vec<PathBuf> = beside.iter().map(|rel| exe_dir.join(rel).join(name)).collect();
    if let Some(prefix) = prefix {
        places.push(prefix.join(prefix_dir).join(name));
    }
    places.iter().map(|p| normalized(p)).collect()
}

/// `p` without `.` and `dir/..` components (for error messages a reader can follow).
fn normalized(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in p.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn find(what: &str, places: &[PathBuf]) -> Result<PathBuf, String> {
    if let Some(found) = places.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "{what} is missing (looked in {}): install Surge with `make install PREFIX=<dir>` and run <dir>/bin/surge, \
         or set SURGE_PREFIX=<dir> to the prefix it was installed to (in a build tree, `make build` builds every part)",
        looked.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_looked_for_beside_the_binary_then_in_lib_then_under_the_prefix() {
        let places =
            candidates(Path::new("/opt/surge/bin"), Some(Path::new("/usr")), "libx.so", &[".", "../lib"], "lib");
        assert_eq!(
            places,
            [PathBuf::from("/opt/surge/bin/libx.so"), "/opt/surge/lib/libx.so".into(), "/usr/lib/libx.so".into()]
        );
        assert_eq!(candidates(Path::new("/b"), None, "surged", &["."], "bin"), [PathBuf::from("/b/surged")]);
    }

    #[test]
    fn a_missing_part_names_every_place_looked_in_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let places = candidates(dir.path(), Some(Path::new("/nowhere")), "surged", &["."], "bin");
        let err = find("the storage daemon surged", &places).unwrap_err();
        assert!(err.contains(&dir.path().join("surged").display().to_string()), "{err}");
        assert!(err.contains("/nowhere/bin/surged"), "{err}");
        assert!(err.contains("make install") && err.contains("SURGE_PREFIX"), "{err}");
        std::fs::write(dir.path().join("surged"), b"").unwrap();
        assert_eq!(find("surged", &places).unwrap(), dir.path().join("surged"));
    }
}
