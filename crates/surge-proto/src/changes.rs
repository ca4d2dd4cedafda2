//! Which cached names and attributes a namespace request changes: the one
//! rule daemon 0's change feed (`Watch`) publishes by and a client drops
//! its own cache entries by after its request succeeded, so the two never
//! disagree. Each change is a path, with whether everything under it
//! changed too (a rename moves a subtree); a name added or removed changes
//! its directory's entry as well (its times, on the PFS too).

use crate::msg::{open_flags, Request};
use crate::path;

/// The changes `req` makes when it succeeds (none for reads, and for
/// changes that show in no attribute: xattrs, data).
pub fn made_by(req: &Request<'_>) -> Vec<(String, bool)> {
    let mut changes = Vec::new();
    let mut named = |p: &str, subtree: bool, with_dir: bool| {
        let Ok(p) = path::canonical(p) else { return };
        if with_dir {
            if let Some((dir, _)) = path::split(&p) {
                changes.push((dir.to_string(), false));
            }
        }
        changes.push((p, subtree));
    };
    match *req {
        Request::Open { path, flags, .. } if flags & open_flags::CREATE != 0 => named(path, false, true),
        Request::Mkdir { path, .. }
        | Request::Rmdir { path }
        | Request::Unlink { path, .. }
        | Request::Symlink { path, .. }
        | Request::Mknod { path, .. } => named(path, false, true),
        Request::Rename { from, to, .. } => {
            named(from, true, true);
            named(to, true, true);
        }
        Request::Link { from, to } => {
            named(from, false, false);
            named(to, false, true);
        }
        Request::SetAttr { path, .. }
        | Request::SetLayout { path, .. }
        | Request::StageDir { path }
        | Request::StageCommit { path, .. } => named(path, false, false),
        _ => {}
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    #[test]
    fn a_create_changes_its_name_and_its_directory_and_a_rename_both_subtrees() {
        let create = Request::Open {
            path: "/d/f",
            flags: open_flags::CREATE,
            mode: 0o644,
            layout: Layout::INHERIT,
            local: vec![],
        };
        assert_eq!(made_by(&create), vec![("/d".to_string(), false), ("/d/f".to_string(), false)]);
        let rename = Request::Rename { from: "/a/x", to: "/b", keep: false };
        assert_eq!(
            made_by(&rename),
            vec![("/a".into(), false), ("/a/x".into(), true), ("/".into(), false), ("/b".into(), true)]
        );
    }

    #[test]
    fn reads_and_opens_that_create_nothing_change_nothing() {
        let open =
            Request::Open { path: "/f", flags: open_flags::WRITE, mode: 0, layout: Layout::INHERIT, local: vec![] };
        assert!(made_by(&open).is_empty());
        assert!(made_by(&Request::Stat { path: "/f" }).is_empty());
        assert!(made_by(&Request::Readdir { path: "/", after: "", max: 9 }).is_empty());
    }
}
