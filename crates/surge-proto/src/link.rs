//! Symbolic links on the wire: what a link's target may be, and the answer
//! a daemon gives when a path crosses a link.
//!
//! The daemon never follows a link: links are the client's to resolve, as
//! the kernel resolves them, because a target means something only where
//! the program runs (an absolute target names a host path; the mount prefix
//! is the client's). A request whose path has a link before its last
//! component, or whose operation follows a last component that is a link
//! (`Open`, `Readdir`, `SetLayout`), fails with status [`LINK_MET`]; the
//! error message is a [`LinkMet`]: the path of the link met and its target.
//! The client splices the target in and asks again.

use crate::errno::Errno;
use crate::path::PATH_MAX;

/// Longest target in bytes (the kernel's limit: PATH_MAX with its NUL).
pub const SYMLINK_MAX: usize = PATH_MAX - 1;

/// The reply status of a request whose path crosses a symbolic link;
/// beyond every Linux errno, so it is never mistaken for one.
pub const LINK_MET: Errno = Errno(0x1_0000);

/// Checks a new link's target as symlink(2) does: ENOENT when empty,
/// ENAMETOOLONG beyond [`SYMLINK_MAX`], EINVAL with a NUL byte.
pub fn check_target(target: &str) -> Result<(), Errno> {
    if target.is_empty() {
        Err(Errno::ENOENT)
    } else if target.len() > SYMLINK_MAX {
        Err(Errno::ENAMETOOLONG)
    } else if target.contains('\0') {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}

/// A symbolic link a path crossed: `at` (a canonical namespace path, a
/// prefix of the path asked about) holds `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMet {
    pub at: String,
    pub target: String,
}

impl LinkMet {
    /// The error message carrying it: `at`, a NUL, `target` (neither has a NUL).
    pub fn message(&self) -> String {
        format!("{}\0{}", self.at, self.target)
    }

    /// The link in a [`LINK_MET`] error's message; `None` if malformed.
    pub fn parse(message: &str) -> Option<LinkMet> {
        let (at, target) = message.split_once('\0')?;
        (at.starts_with('/') && check_target(target).is_ok())
            .then(|| LinkMet { at: at.to_string(), target: target.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_the_rules_of_symlink_2() {
        assert_eq!(check_target(""), Err(Errno::ENOENT));
        assert_eq!(check_target("a\0b"), Err(Errno::EINVAL));
        assert_eq!(check_target(&"x".repeat(SYMLINK_MAX + 1)), Err(Errno::ENAMETOOLONG));
        assert!(check_target(&"x".repeat(SYMLINK_MAX)).is_ok());
        assert!(check_target("../tables/RRTM_DATA").is_ok());
    }

    #[test]
    fn a_link_met_round_trips_through_its_message_and_malformed_ones_are_refused() {
        let met = LinkMet { at: "/run/tables".into(), target: "/scratch/tables".into() };
        assert_eq!(LinkMet::parse(&met.message()), Some(met));
        assert_eq!(LinkMet::parse("no separator"), None);
        assert_eq!(LinkMet::parse("relative\0x"), None);
        assert_eq!(LinkMet::parse("/a\0"), None);
    }
}
