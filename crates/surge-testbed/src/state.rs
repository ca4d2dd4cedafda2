//! Where a testbed's files are, and its state file: what `up` made, so
//! `status`, `exec` and `down` work from another shell or after a crash.
//!
//! * `<state dir>/testbed.toml`: the state file, written once `up` succeeded.
//! * `<state dir>/.surge-testbed`: the marker, written when `up` creates the
//!   state dir; `down` removes a state dir only if it holds the marker for
//!   its testbed, so a mistyped `--state-dir` never deletes someone's files.
//! * `/run/surge-testbed/<name>`: the state dir of testbed `name` when it is
//!   not the default, so commands that take only `--name` find it. Under
//!   /run, like the namespaces' own /run/netns, so neither outlives a reboot.

use crate::{Error, Testbed};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const STATE_FILE_VERSION: u32 = 1;
const STATE_FILE: &str = "testbed.toml";
const MARKER: &str = ".surge-testbed";
const POINTER_DIR: &str = "/run/surge-testbed";

#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    testbed: Testbed,
}

pub fn default_state_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/surge-testbed-{name}"))
}

pub fn state_file(state_dir: &Path) -> PathBuf {
    state_dir.join(STATE_FILE)
}

fn pointer(name: &str) -> PathBuf {
    Path::new(POINTER_DIR).join(name)
}

/// The state dir of testbed `name`: as given, else the one `up` recorded, else the default.
pub fn resolve_state_dir(name: &str, given: Option<&Path>) -> PathBuf {
    if let Some(dir) = given {
        return dir.to_path_buf();
    }
    fs::read_to_string(pointer(name))
        .ok()
        .map(|text| PathBuf::from(text.trim_end_matches('\n')))
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or_else(|| default_state_dir(name))
}

pub fn save(testbed: &Testbed) -> Result<(), Error> {
    let path = state_file(&testbed.state_dir);
    let file = StateFile { version: STATE_FILE_VERSION, testbed: testbed.clone() };
    let text = toml::to_string_pretty(&file).map_err(|e| Error::State { path: path.clone(), why: e.to_string() })?;
    surge_cluster::write_atomically(&path, text.as_bytes(), 0o644)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

pub fn load(name: &str, state_dir: &Path) -> Result<Testbed, Error> {
    let path = state_file(state_dir);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NotUp { name: name.into(), state_file: path })
        }
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    let file: StateFile =
        toml::from_str(&text).map_err(|e| Error::State { path: path.clone(), why: e.message().to_string() })?;
    if file.version != STATE_FILE_VERSION {
        let why = format!("version {}, this surge reads version {STATE_FILE_VERSION}", file.version);
        return Err(Error::State { path, why });
    }
    if file.testbed.name != name {
        let why = format!("it describes testbed {:?}, not {name:?}", file.testbed.name);
        return Err(Error::State { path, why });
    }
    Ok(file.testbed)
}

/// Creates the state dir for testbed `name` and marks it as the testbed's.
/// Refuses a directory that holds anything: `down` will delete it whole.
pub fn create_state_dir(name: &str, dir: &Path) -> Result<(), Error> {
    let occupied = fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(Error::InvalidSpec(format!(
            "state dir {} is not empty and `surge testbed down` deletes it whole: give an empty or new --state-dir",
            dir.display()
        )));
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create state dir {}", dir.display()), e))?;
    fs::write(dir.join(MARKER), format!("{name}\n"))
        .map_err(|e| Error::io(format!("cannot write in {}", dir.display()), e))
}

/// Does `dir` hold the marker of testbed `name`?
pub fn is_state_dir_of(name: &str, dir: &Path) -> bool {
    fs::read_to_string(dir.join(MARKER)).is_ok_and(|text| text.trim() == name)
}

/// Records a state dir other than the default so `--name` alone finds it.
pub fn record_state_dir(name: &str, dir: &Path) -> Result<(), Error> {
    if dir == default_state_dir(name) {
        return Ok(());
    }
    let path = pointer(name);
    fs::create_dir_all(POINTER_DIR).map_err(|e| Error::io(format!("cannot create {POINTER_DIR}"), e))?;
    fs::write(&path, format!("{}\n", dir.display()))
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

pub fn has_pointer(name: &str) -> bool {
    pointer(name).exists()
}

/// Removes the pointer of testbed `name`; true if there was one.
pub fn remove_pointer(name: &str) -> bool {
    fs::remove_file(pointer(name)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Daemon, Host, Role};
    use std::net::Ipv4Addr;

    fn sample(dir: &Path) -> Testbed {
        Testbed {
            name: "tb".into(),
            hub_netns: "surge-tb-hub".into(),
            rate: Some("200mbit".parse().unwrap()),
            mtu: 9000,
            surge_bin: "/opt/surge/bin/surge".into(),
            cluster_file: dir.join("cluster.toml"),
            state_dir: dir.to_path_buf(),
            hosts: vec![
                Host { index: 0, netns: "surge-tb-h0".into(), ip: Ipv4Addr::new(10, 70, 1, 1), role: Role::Daemon },
                Host { index: 1, netns: "surge-tb-h1".into(), ip: Ipv4Addr::new(10, 70, 1, 2), role: Role::Client },
            ],
            daemons: vec![Daemon { index: 0, host: 0, addr: "10.70.1.1:40111".parse().unwrap(), pid: 4242 }],
        }
    }

    #[test]
    fn state_file_round_trips() {
        let t = tempfile::tempdir().unwrap();
        let tb = sample(t.path());
        save(&tb).unwrap();
        assert_eq!(load("tb", t.path()).unwrap(), tb);
        let mut unshaped = tb.clone();
        unshaped.rate = None;
        save(&unshaped).unwrap();
        assert_eq!(load("tb", t.path()).unwrap(), unshaped);
    }

    #[test]
    fn missing_wrong_and_foreign_state_files_say_what_to_do() {
        let t = tempfile::tempdir().unwrap();
        let e = load("tb", t.path()).unwrap_err().to_string();
        assert!(e.contains("not up") && e.contains("surge testbed up"), "{e}");
        save(&sample(t.path())).unwrap();
        let e = load("other", t.path()).unwrap_err().to_string();
        assert!(e.contains("describes testbed \"tb\"") && e.contains("surge testbed down"), "{e}");
        fs::write(state_file(t.path()), "version = 7\n[testbed]\n").unwrap();
        assert!(matches!(load("tb", t.path()), Err(Error::State { .. })));
    }

    #[test]
    fn state_dir_must_be_empty_and_is_marked() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("new");
        create_state_dir("tb", &dir).unwrap();
        assert!(is_state_dir_of("tb", &dir));
        assert!(!is_state_dir_of("tb2", &dir));
        let e = create_state_dir("tb", t.path()).unwrap_err().to_string();
        assert!(e.contains("not empty"), "{e}");
        assert!(!is_state_dir_of("tb", t.path()));
    }

    #[test]
    fn explicit_state_dir_wins_and_default_is_per_name() {
        assert_eq!(resolve_state_dir("zz9", Some(Path::new("/x"))), PathBuf::from("/x"));
        assert_eq!(default_state_dir("tb"), PathBuf::from("/tmp/surge-testbed-tb"));
    }
}
