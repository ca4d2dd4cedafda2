//! Following symbolic links for the interposer alone, as the kernel does.
//!
//! Daemon 0 never follows a link: a call whose path crosses one fails with
//! the link and its target (`surge_proto::link`), which `px` keeps here
//! and reports as errno [`ELINK`]. The shim then asks [`follow`] for the
//! path to try next and makes the call again (`ROUTE` in `shim/route.h`),
//! up to [`MAX_LINKS`] links, then ELOOP. A relative target is resolved
//! against the link's directory, an absolute one from the host's root:
//! back into the mount it is a Surge path again, elsewhere the call goes
//! to libc with the resolved host path. A path without links costs
//! nothing more: the daemon's answer is the only sign of a link.
//!
//! `..` in a target climbs the directory actually reached: a component
//! before it is looked up first, and followed if it is a link. Above the
//! mount's root, `..` leaves the mount for its parent directory on the host.
//! So does `..` after a name in a path the program gives ([`climb`]); a
//! path without one resolves from its text alone, with no lookup.

use crate::paths::Mount;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use surge_client::{Error, Result};
use surge_proto::link::{LinkMet, LINK_MET};
use surge_proto::path;

/// The errno of a call that met a link (the shim's SURGE_ELINK).
pub const ELINK: i32 = LINK_MET.0;
/// Most links one call follows: the kernel's limit.
pub const MAX_LINKS: u32 = 40;

thread_local! {
    /// The link the last failed call of this thread met.
    static MET: RefCell<Option<LinkMet>> = const { RefCell::new(None) };
    /// Links the current call followed so far.
    static FOLLOWED: Cell<u32> = const { Cell::new(0) };
}

/// Keeps the link `e` met, if any, for the `follow` that comes next.
pub fn note(e: &Error) {
    if let Some(met) = e.link_met() {
        MET.with(|m| *m.borrow_mut() = Some(met));
    }
}

/// The error that makes the shim follow link `at` (a last component that
/// is one, for a call that follows it).
pub fn met(at: &str, target: String) -> Error {
    Error::new(ELINK, LinkMet { at: at.to_string(), target }.message())
}

/// Where a call goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A Surge path, to try again.
    Surge(String),
    /// A host path, for libc.
    Host(String),
    /// The link met is not on this path (a rename's other one).
    NotOnPath,
}

/// What `follow` asks of the namespace about a directory on the way.
pub trait Lookup {
    /// `None` if `path` is a directory without links on the way; the link
    /// met otherwise (`path` itself, or one on the way to it).
    fn link_on(&self, path: &str) -> Result<Option<LinkMet>>;
}

/// The next path of a call on Surge path `path` that met the link kept by
/// `note`; `first`: the call's first link (the count starts again).
pub fn follow(mount: &Mount, lookup: &dyn Lookup, path: &str, first: bool) -> Result<Next> {
    if first {
        FOLLOWED.with(|n| n.set(0));
    }
    let met = MET
        .with(|m| m.borrow().clone())
        .ok_or_else(|| Error::new(libc::EIO, "no symbolic link to follow: the daemon answered out of turn"))?;
    if !path::is_within(path, &met.at) || met.at == "/" {
        return Ok(Next::NotOnPath);
    }
    let rest: VecDeque<String> = components(&path[met.at.len()..]).collect();
    Resolver { mount, lookup }.splice(&met, rest)
}

/// Does `path` (as a program wrote it) have a `..` after a name? Only
/// then can its text alone mislead: the name may be a link.
pub fn climbs_after_a_name(path: &str) -> bool {
    let mut named = false;
    for name in path.split('/') {
        match name {
            "" | "." => {}
            ".." if named => return true,
            ".." => {}
            _ => named = true,
        }
    }
    false
}

/// Resolves `rest` (relative, as the program wrote it) from Surge
/// directory `base` (reached without links) as the kernel does: each `..`
/// after a name climbs from where the name leads, links followed.
pub fn climb(mount: &Mount, lookup: &dyn Lookup, base: &str, rest: &str) -> Result<Next> {
    FOLLOWED.with(|n| n.set(0));
    Resolver { mount, lookup }.walk(base.to_string(), components(rest).collect())
}

fn components(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string)
}

fn join(dir: &str, names: &[String]) -> String {
    let mut out = dir.trim_end_matches('/').to_string();
    for name in names {
        out.push('/');
        out.push_str(name);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

struct Resolver<'a> {
    mount: &'a Mount,
    lookup: &'a dyn Lookup,
}

impl Resolver<'_> {
    /// Goes on from link `met` with the components `rest` after it.
    fn splice(&self, met: &LinkMet, mut rest: VecDeque<String>) -> Result<Next> {
        let followed = FOLLOWED.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        if followed > MAX_LINKS {
            return Err(Error::new(libc::ELOOP, format!("more than {MAX_LINKS} symbolic links met at {}", met.at)));
        }
        for name in components(&met.target).collect::<Vec<_>>().into_iter().rev() {
            rest.push_front(name);
        }
        if !met.target.starts_with('/') {
            let (dir, _) = path::split(&met.at).unwrap_or(("/", ""));
            return self.walk(dir.to_string(), rest);
        }
        // An absolute target is a host path; into the mount, a Surge one.
        let prefix = self.mount.prefix();
        match met.target.strip_prefix(prefix) {
            Some(inside) if inside.is_empty() || inside.starts_with('/') => {
                let depth = components(prefix).count();
                self.walk("/".to_string(), rest.split_off(depth))
            }
            _ => Ok(Next::Host(join("", &Vec::from(rest)))),
        }
    }

    /// Resolves the components `rest` from directory `done` (a Surge
    /// path already known to be a directory reached without links).
    fn walk(&self, mut done: String, mut rest: VecDeque<String>) -> Result<Next> {
        let mut pending: Vec<String> = Vec::new();
        while let Some(name) = rest.pop_front() {
            if name != ".." {
                pending.push(name);
                continue;
            }
            if !pending.is_empty() {
                let reached = join(&done, &pending);
                if let Some(met) = self.lookup.link_on(&reached)? {
                    // The rest of `reached` after the link, then this "..", then the rest.
                    let mut after: VecDeque<String> = components(&reached[met.at.len()..]).collect();
                    after.push_back(name);
                    after.extend(rest);
                    return self.splice(&met, after);
                }
                done = reached;
                pending.clear();
            }
            match path::split(&done) {
                Some((parent, _)) => done = parent.to_string(),
                // Above the mount's root: its parent directory on the host.
                None => {
                    let host_parent = path::split(self.mount.prefix()).map_or("/", |(parent, _)| parent);
                    return Ok(Next::Host(join(host_parent, &Vec::from(rest))));
                }
            }
        }
        Ok(Next::Surge(join(&done, &pending)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A namespace of directories and links: `links` maps a link's path to its target.
    struct Tree {
        links: HashMap<&'static str, &'static str>,
    }

    impl Lookup for Tree {
        fn link_on(&self, path: &str) -> Result<Option<LinkMet>> {
            let mut at = String::new();
            for name in components(path) {
                at = format!("{at}/{name}");
                if let Some(target) = self.links.get(at.as_str()) {
                    return Ok(Some(LinkMet { at: at.clone(), target: target.to_string() }));
                }
            }
            Ok(None)
        }
    }

    fn resolve(tree: &Tree, path: &str) -> Result<Next> {
        let mount = Mount::new("/surge").unwrap();
        let mut first = true;
        let mut path = path.to_string();
        loop {
            let Some(met) = tree.link_on(&path)? else { return Ok(Next::Surge(path)) };
            note(&met_error(&met));
            match follow(&mount, tree, &path, first)? {
                Next::Surge(next) => path = next,
                other => return Ok(other),
            }
            first = false;
        }
    }

    fn met_error(met: &LinkMet) -> Error {
        met_of(&met.at, &met.target)
    }

    fn met_of(at: &str, target: &str) -> Error {
        super::met(at, target.to_string())
    }

    fn tree(links: &[(&'static str, &'static str)]) -> Tree {
        Tree { links: links.iter().copied().collect() }
    }

    #[test]
    fn relative_targets_resolve_against_the_links_directory_and_absolute_ones_from_the_root() {
        let t = tree(&[
            ("/run/RRTM_DATA", "../tables/RRTM_DATA"),
            ("/run/tables", "../tables"),
            ("/run/abs", "/surge/tables"),
            ("/run/out", "/etc/services"),
            ("/run/up", "../../../home/user"),
            ("/run/deep", "a/b/../../c"),
        ]);
        let surge = |p: &str| Ok(Next::Surge(p.to_string()));
        assert_eq!(resolve(&t, "/run/RRTM_DATA"), surge("/tables/RRTM_DATA"));
        assert_eq!(resolve(&t, "/run/tables/x/y"), surge("/tables/x/y"));
        assert_eq!(resolve(&t, "/run/abs/x"), surge("/tables/x"));
        assert_eq!(resolve(&t, "/run/out"), Ok(Next::Host("/etc/services".into())));
        // Out of the mount, the kernel resolves the rest (host links included).
        assert_eq!(resolve(&t, "/run/up/f"), Ok(Next::Host("/../home/user/f".into())));
        assert_eq!(resolve(&t, "/run/deep"), surge("/run/c"));
        assert_eq!(resolve(&t, "/plain/path"), surge("/plain/path"));
    }

    #[test]
    fn dot_dot_after_a_link_climbs_from_where_the_link_leads() {
        // /run/t -> ../data/deep/tables: "t2/../x" in a target climbs from there.
        let t = tree(&[("/run/t", "../data/deep/tables"), ("/run/via", "t/../other")]);
        assert_eq!(resolve(&t, "/run/via"), Ok(Next::Surge("/data/deep/other".into())));
    }

    #[test]
    fn a_programs_dot_dot_after_a_link_climbs_from_where_the_link_leads() {
        let t = tree(&[("/run/tables", "../data/deep/tables")]);
        let mount = Mount::new("/surge").unwrap();
        assert!(climbs_after_a_name("tables/../x") && climbs_after_a_name("/a/b/../c"));
        assert!(!climbs_after_a_name("../../x") && !climbs_after_a_name("a/./b"));
        assert_eq!(climb(&mount, &t, "/run", "tables/../x"), Ok(Next::Surge("/data/deep/x".into())));
        assert_eq!(climb(&mount, &t, "/", "run/x/../y"), Ok(Next::Surge("/run/y".into())));
        assert_eq!(climb(&mount, &t, "/", "run/../../etc"), Ok(Next::Host("/etc".into())));
    }

    #[test]
    fn a_cycle_gives_eloop_after_forty_links() {
        let t = tree(&[("/a", "b"), ("/b", "a")]);
        assert_eq!(resolve(&t, "/a").unwrap_err().errno(), libc::ELOOP);
        let chain: Vec<(&'static str, &'static str)> = (0..40)
            .map(|i| {
                let from: &'static str = Box::leak(format!("/l{i}").into_boxed_str());
                let to: &'static str = Box::leak(format!("l{}", i + 1).into_boxed_str());
                (from, to)
            })
            .collect();
        assert_eq!(resolve(&tree(&chain), "/l0"), Ok(Next::Surge("/l40".into())), "40 links are fine");
    }

    #[test]
    fn a_link_on_another_path_is_not_followed_here() {
        let mount = Mount::new("/surge").unwrap();
        note(&met_of("/a/link", "x"));
        assert_eq!(follow(&mount, &tree(&[]), "/b/file", true), Ok(Next::NotOnPath));
        assert_eq!(follow(&mount, &tree(&[]), "/a/link2", true), Ok(Next::NotOnPath));
        assert_eq!(follow(&mount, &tree(&[]), "/a/link/f", true), Ok(Next::Surge("/a/x/f".into())));
    }
}
