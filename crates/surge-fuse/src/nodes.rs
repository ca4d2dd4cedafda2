//! The kernel knows files by node id; the Surge namespace knows them by
//! path. This table keeps, for every node the kernel holds, its parent and
//! name, so a path is always derived from the current tree: renaming a
//! directory moves every node under it at once.
//!
//! Node ids are Surge inode numbers (the root is 1), so `st_ino` agrees with
//! what the interposer and `surge ls -i` report. A node lives while the
//! kernel holds lookups on it (FUSE's lookup/forget counting). A file with
//! several names (hard links) keeps every name the kernel looked it up by:
//! when one goes, the node is reached through another.
//!
//! Names the kernel was told name nothing (negative entries) are kept
//! until their TTL ends, so a change feed cut off can drop them too.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub const ROOT: u64 = 1;

struct Node {
    parent: u64,
    name: String,
    /// Further names of a hard-linked file, as (parent, name).
    aliases: Vec<(u64, String)>,
    lookups: u64,
    /// Unlinked or replaced by a rename: its old path now names nothing (or another file).
    detached: bool,
    /// A regular file (not a directory or a link).
    regular: bool,
}

#[derive(Default)]
pub struct Nodes {
    map: Mutex<HashMap<u64, Node>>,
    /// Per directory, the names the kernel holds as naming nothing, and until when.
    missing: Mutex<HashMap<u64, HashMap<String, Instant>>>,
}

impl Nodes {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Node>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Surge path of node `ino`, or None when the kernel asks about a
    /// node this table does not know or one whose name is gone.
    pub fn path(&self, ino: u64) -> Option<String> {
        self.path_of(ino, false)
    }

    /// The path regular file `ino` had when its name went (unlinked, or
    /// replaced by a rename), or its path if its name is still its own;
    /// None when the table does not know it as a regular file or a
    /// directory above it is gone.
    pub fn last_path(&self, ino: u64) -> Option<String> {
        self.lock().get(&ino).filter(|n| n.regular)?;
        self.path_of(ino, true)
    }

    fn path_of(&self, ino: u64, detached_leaf: bool) -> Option<String> {
        let map = self.lock();
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = map.get(&at).filter(|n| !n.detached || (detached_leaf && at == ino))?;
            names.push(node.name.as_str());
            at = node.parent;
            if names.len() > 4096 {
                return None; // a cycle would be a bug; never loop forever in the kernel's service
            }
        }
        if names.is_empty() {
            return Some("/".to_string());
        }
        let mut path = String::new();
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        Some(path)
    }

    /// The path of `name` in directory `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> Option<String> {
        let dir = self.path(parent)?;
        Some(if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") })
    }

    /// The parent directory of `ino`, when the table knows it.
    pub fn parent(&self, ino: u64) -> Option<u64> {
        self.lock().get(&ino).map(|n| n.parent)
    }

    /// Records one more kernel lookup of `ino` (`regular`: a regular
    /// file) as `name` in `parent`; `linked`: the file has several names,
    /// and this one is kept beside those known.
    pub fn remember(&self, ino: u64, parent: u64, name: &str, regular: bool, linked: bool) {
        if ino == ROOT {
            return;
        }
        let mut map = self.lock();
        let node = map.entry(ino).or_insert_with(|| Node {
            parent,
            name: String::new(),
            aliases: Vec::new(),
            lookups: 0,
            detached: false,
            regular,
        });
        node.lookups += 1;
        let known = node.parent == parent && node.name == name;
        if linked && !node.detached && !known {
            if !node.aliases.iter().any(|(p, n)| *p == parent && n == name) {
                node.aliases.push((parent, name.to_string()));
            }
            return;
        }
        if !linked {
            node.aliases.clear();
        }
        node.regular = regular;
        node.parent = parent;
        node.name.clear();
        node.name.push_str(name);
        node.detached = false;
    }

    /// The kernel dropped `count` lookups of `ino`.
    pub fn forget(&self, ino: u64, count: u64) {
        let mut map = self.lock();
        if let Some(node) = map.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(count);
            if node.lookups == 0 {
                map.remove(&ino);
            }
        }
    }

    /// `name` in `parent` no longer names the node it named.
    pub fn detach(&self, parent: u64, name: &str) {
        let mut map = self.lock();
        for node in map.values_mut() {
            node.aliases.retain(|(p, n)| !(*p == parent && n == name));
            if !node.detached && node.parent == parent && node.name == name {
                // Another name of the file, if the kernel knows one, takes over.
                match node.aliases.pop() {
                    Some((p, n)) => (node.parent, node.name) = (p, n),
                    None => node.detached = true,
                }
            }
        }
    }

    /// A rename moved `name` in `parent` to `new_name` in `new_parent`
    /// (whatever `new_name` named before is detached).
    pub fn rename(&self, parent: u64, name: &str, new_parent: u64, new_name: &str) {
        let moved: Vec<u64> = self
            .lock()
            .iter()
            .filter(|(_, n)| !n.detached && n.parent == parent && n.name == name)
            .map(|(ino, _)| *ino)
            .collect();
        self.detach(new_parent, new_name);
        let mut map = self.lock();
        for node in map.values_mut() {
            for alias in node.aliases.iter_mut().filter(|(p, n)| *p == parent && n == name) {
                *alias = (new_parent, new_name.to_string());
            }
        }
        for ino in moved {
            let node = map.get_mut(&ino).expect("collected above");
            node.parent = new_parent;
            node.name.clear();
            node.name.push_str(new_name);
        }
    }

    /// The kernel's entries (parent, name, node) that name `paths`, so
    /// that a change made elsewhere can be invalidated in the kernel's
    /// caches: a path whose directory the table does not know has none
    /// (the kernel cannot hold a name below a directory it does not
    /// hold), a name whose node it does not know has `None`.
    pub fn entries_at<'p>(&self, paths: impl IntoIterator<Item = &'p str>) -> Vec<(u64, String, Option<u64>)> {
        let map = self.lock();
        let children: HashMap<(u64, &str), u64> = map
            .iter()
            .filter(|(_, n)| !n.detached)
            .flat_map(|(ino, n)| {
                std::iter::once((n.parent, n.name.as_str()))
                    .chain(n.aliases.iter().map(|(p, a)| (*p, a.as_str())))
                    .map(move |key| (key, *ino))
            })
            .collect();
        let mut found = Vec::new();
        for path in paths {
            let mut names: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
            let Some(last) = names.pop() else { continue };
            let dir = names.iter().try_fold(ROOT, |dir, name| children.get(&(dir, *name)).copied());
            if let Some(dir) = dir {
                found.push((dir, last.to_string(), children.get(&(dir, last)).copied()));
            }
        }
        found
    }

    /// The kernel was told `name` in `parent` names nothing, for `ttl`.
    pub fn remember_missing(&self, parent: u64, name: &str, ttl: Duration) {
        let now = Instant::now();
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        let names = missing.entry(parent).or_default();
        // Amortized: the expired go whenever a directory's count doubles.
        if names.len() >= 64 && names.len().is_power_of_two() {
            names.retain(|_, until| *until > now);
        }
        names.insert(name.to_string(), now + ttl);
    }

    /// Every entry (parent, name, node) the kernel may hold, the names it
    /// holds as naming nothing (node `None`) included.
    pub fn all_entries(&self) -> Vec<(u64, String, Option<u64>)> {
        let now = Instant::now();
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        missing.retain(|_, names| {
            names.retain(|_, until| *until > now);
            !names.is_empty()
        });
        let missing = missing.iter().flat_map(|(parent, names)| names.keys().map(|name| (*parent, name.clone(), None)));
        let map = self.lock();
        map.iter()
            .filter(|(_, n)| !n.detached)
            .flat_map(|(ino, n)| {
                std::iter::once((n.parent, n.name.clone(), Some(*ino)))
                    .chain(n.aliases.iter().map(|(p, a)| (*p, a.clone(), Some(*ino))))
            })
            .chain(missing)
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_entries_are_found_by_path_where_their_directory_is_known() {
        let nodes = Nodes::default();
        nodes.remember(2, ROOT, "d", false, false);
        nodes.remember(3, 2, "f", true, false);
        nodes.remember(3, ROOT, "alias", true, true);
        let found = nodes.entries_at(["/d/f", "/d/new", "/unknown/x", "/", "/alias"]);
        assert_eq!(
            found,
            vec![(2, "f".to_string(), Some(3)), (2, "new".to_string(), None), (ROOT, "alias".to_string(), Some(3))]
        );
        let mut all = nodes.all_entries();
        all.sort();
        assert_eq!(all, vec![(ROOT, "alias".into(), Some(3)), (ROOT, "d".into(), Some(2)), (2, "f".into(), Some(3))]);
    }

    #[test]
    fn names_told_missing_are_every_entry_until_their_ttl_ends() {
        let nodes = Nodes::default();
        nodes.remember(2, ROOT, "d", false, false);
        nodes.remember_missing(2, "gone", Duration::from_secs(60));
        nodes.remember_missing(ROOT, "brief", Duration::ZERO);
        let mut all = nodes.all_entries();
        all.sort();
        assert_eq!(all, vec![(ROOT, "d".into(), Some(2)), (2, "gone".into(), None)], "the expired one is dropped");
        assert_eq!(nodes.entries_at(["/d/gone"]), vec![(2, "gone".to_string(), None)], "found by path as any name");
    }

    #[test]
    fn paths_follow_renames_of_any_ancestor() {
        let nodes = Nodes::default();
        nodes.remember(2, ROOT, "a", false, false);
        nodes.remember(3, 2, "b", false, false);
        nodes.remember(4, 3, "f", true, false);
        assert_eq!(nodes.path(4).as_deref(), Some("/a/b/f"));
        assert_eq!(nodes.child_path(ROOT, "x").as_deref(), Some("/x"));
        nodes.rename(ROOT, "a", ROOT, "z");
        assert_eq!(nodes.path(4).as_deref(), Some("/z/b/f"));
        assert_eq!(nodes.path(ROOT).as_deref(), Some("/"));
    }

    #[test]
    fn a_node_lives_until_every_lookup_is_forgotten() {
        let nodes = Nodes::default();
        nodes.remember(5, ROOT, "f", true, false);
        nodes.remember(5, ROOT, "f", true, false);
        nodes.forget(5, 1);
        assert_eq!(nodes.path(5).as_deref(), Some("/f"));
        nodes.forget(5, 1);
        assert_eq!(nodes.path(5), None);
        assert_eq!(nodes.len(), 0);
    }

    #[test]
    fn a_hard_linked_file_is_reached_through_its_other_name_when_one_goes() {
        let nodes = Nodes::default();
        nodes.remember(2, ROOT, "d", false, false);
        nodes.remember(5, ROOT, "a", true, false);
        nodes.remember(5, 2, "b", true, true);
        assert_eq!(nodes.path(5).as_deref(), Some("/a"));
        nodes.rename(2, "b", ROOT, "c");
        nodes.detach(ROOT, "a");
        assert_eq!(nodes.path(5).as_deref(), Some("/c"), "the other name, renamed meanwhile");
        nodes.detach(ROOT, "c");
        assert_eq!(nodes.path(5), None);
    }

    #[test]
    fn unlinked_and_replaced_names_lead_nowhere() {
        let nodes = Nodes::default();
        nodes.remember(5, ROOT, "old", true, false);
        nodes.remember(6, ROOT, "new", true, false);
        nodes.rename(ROOT, "old", ROOT, "new");
        assert_eq!(nodes.path(5).as_deref(), Some("/new"));
        assert_eq!(nodes.path(6), None, "the file the rename replaced has no path");
        assert_eq!(nodes.last_path(6).as_deref(), Some("/new"), "the name it had");
        nodes.remember(7, ROOT, "dir", false, false);
        nodes.detach(ROOT, "dir");
        assert_eq!(nodes.last_path(7), None, "only a regular file is reached by its last name");
        nodes.detach(ROOT, "new");
        assert_eq!(nodes.path(5), None);
        nodes.remember(5, ROOT, "again", true, false);
        assert_eq!(nodes.path(5).as_deref(), Some("/again"));
    }
}
