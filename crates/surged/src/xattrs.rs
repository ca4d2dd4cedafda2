//! Extended attributes of the namespace's files and directories: the
//! `user.*` namespace, kept by daemon 0 in the namespace database's table
//! `xattrs`, keyed by (inode, name), apart from the entries (a record's
//! format does not change), and removed with the inode. Stage-out puts them
//! on the PFS copy.
//!
//! The rules are Linux's (xattr(7), and ext4's and tmpfs's limits): a name
//! is at most 255 bytes with its prefix (ERANGE beyond), a value at most
//! 64 KiB (E2BIG), the list of one inode's names at most 64 KiB (ENOSPC
//! when a new name would pass it); XATTR_CREATE of an existing name is
//! EEXIST, XATTR_REPLACE or removal of a missing one ENODATA. The other
//! namespaces (`security.*`, `trusted.*`, `system.*`: SELinux labels,
//! capabilities, POSIX ACLs) are EOPNOTSUPP, as on a file system without
//! them; so is a name with no namespace. A symbolic link has none (EPERM
//! to set one, as Linux refuses `user.*` on links).

use crate::failure::Failure;
use redb::{ReadableTable, Table, TableDefinition};
use surge_proto::msg::{xattr_flags, XATTR_KEPT_PREFIX as USER};
use surge_proto::Errno;

pub const XATTRS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("xattrs");

/// XATTR_NAME_MAX: longest name, prefix included.
pub const NAME_MAX: usize = 255;
/// XATTR_SIZE_MAX: largest value.
pub const VALUE_MAX: usize = surge_proto::msg::XATTR_SIZE_MAX;
/// XATTR_LIST_MAX: largest list of one inode's names (each with its NUL).
pub const LIST_MAX: usize = 64 << 10;

/// Checks `name` for any request; the errno of one Linux refuses.
pub fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() || name.len() > NAME_MAX {
        let errno = if name.is_empty() { Errno::EINVAL } else { Errno(libc::ERANGE) };
        return Err(Failure::new(errno, format!("extended attribute names have 1 to {NAME_MAX} bytes")));
    }
    match name.strip_prefix(USER) {
        Some("") => Err(Failure::new(Errno::EINVAL, "an extended attribute name needs a name after \"user.\"")),
        Some(_) => Ok(()),
        None => Err(Failure::new(
            Errno(libc::EOPNOTSUPP),
            format!("{name}: Surge keeps only user.* extended attributes (docs/fuse.md)"),
        )),
    }
}

/// The value of `name` of inode `ino`; ENODATA when it has none.
pub fn get(
    table: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    ino: u64,
    name: &str,
) -> Result<Vec<u8>, Failure> {
    check_name(name)?;
    match table.get((ino, name))? {
        Some(value) => Ok(value.value().to_vec()),
        None => Err(Errno(libc::ENODATA).into()),
    }
}

/// Every attribute of inode `ino`, in name order.
pub fn all(
    table: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    ino: u64,
) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let mut out = Vec::new();
    for item in table.range::<(u64, &str)>((ino, "")..(ino.saturating_add(1), ""))? {
        let (key, value) = item?;
        out.push((key.value().1.to_string(), value.value().to_vec()));
    }
    Ok(out)
}

/// The names of inode `ino`'s attributes, each ended by a NUL (listxattr(2)).
pub fn list(table: &impl ReadableTable<(u64, &'static str), &'static [u8]>, ino: u64) -> Result<Vec<u8>, Failure> {
    Ok(names_list(all(table, ino)?.iter().map(|(name, _)| name.as_str())))
}

/// Names joined as listxattr(2) gives them.
pub fn names_list<'a>(names: impl Iterator<Item = &'a str>) -> Vec<u8> {
    names.flat_map(|name| name.bytes().chain([0])).collect()
}

/// Sets `name` of inode `ino` to `value`, with setxattr(2)'s `flags`.
pub fn set(
    table: &mut Table<'_, (u64, &'static str), &'static [u8]>,
    ino: u64,
    name: &str,
    value: &[u8],
    flags: u32,
) -> Result<(), Failure> {
    check_name(name)?;
    if flags & !(xattr_flags::CREATE | xattr_flags::REPLACE) != 0 {
        return Err(Failure::new(Errno::EINVAL, format!("unknown setxattr flags {flags:#x}")));
    }
    if value.len() > VALUE_MAX {
        return Err(Failure::new(
            Errno(libc::E2BIG),
            format!("extended attribute values have at most {VALUE_MAX} bytes"),
        ));
    }
    let exists = table.get((ino, name))?.is_some();
    if exists && flags & xattr_flags::CREATE != 0 {
        return Err(Errno::EEXIST.into());
    }
    if !exists && flags & xattr_flags::REPLACE != 0 {
        return Err(Errno(libc::ENODATA).into());
    }
    if !exists && list(table, ino)?.len() + name.len() + 1 > LIST_MAX {
        return Err(Failure::new(
            Errno::ENOSPC,
            format!("the names of one file's extended attributes fill {LIST_MAX} bytes"),
        ));
    }
    table.insert((ino, name), value)?;
    Ok(())
}

/// Removes `name` of inode `ino`; ENODATA if it has none.
pub fn remove(table: &mut Table<'_, (u64, &'static str), &'static [u8]>, ino: u64, name: &str) -> Result<(), Failure> {
    check_name(name)?;
    match table.remove((ino, name))? {
        Some(_) => Ok(()),
        None => Err(Errno(libc::ENODATA).into()),
    }
}

/// Removes every attribute of inode `ino` (removed from the namespace);
/// whether it had any.
pub fn remove_all(table: &mut Table<'_, (u64, &'static str), &'static [u8]>, ino: u64) -> Result<bool, Failure> {
    let names: Vec<String> = all(table, ino)?.into_iter().map(|(name, _)| name).collect();
    for name in &names {
        table.remove((ino, name.as_str()))?;
    }
    Ok(!names.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::Database;

    fn errno<T: std::fmt::Debug>(r: Result<T, Failure>) -> i32 {
        r.unwrap_err().errno.0
    }

    #[test]
    fn names_follow_linux_limits_and_only_the_user_namespace_is_kept() {
        assert!(check_name("user.a").is_ok());
        assert!(check_name(&format!("user.{}", "n".repeat(NAME_MAX - 5))).is_ok());
        assert_eq!(errno(check_name(&format!("user.{}", "n".repeat(NAME_MAX - 4)))), libc::ERANGE);
        assert_eq!(errno(check_name("")), libc::EINVAL);
        assert_eq!(errno(check_name("user.")), libc::EINVAL);
        for other in ["security.selinux", "trusted.x", "system.posix_acl_access", "plain"] {
            assert_eq!(errno(check_name(other)), libc::EOPNOTSUPP, "{other}");
        }
    }

    #[test]
    fn create_replace_remove_and_limits_give_the_errnos_of_linux() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("x.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(XATTRS).unwrap();
            assert_eq!(errno(get(&t, 7, "user.a")), libc::ENODATA);
            assert_eq!(errno(set(&mut t, 7, "user.a", b"1", xattr_flags::REPLACE)), libc::ENODATA);
            set(&mut t, 7, "user.a", b"1", xattr_flags::CREATE).unwrap();
            assert_eq!(errno(set(&mut t, 7, "user.a", b"2", xattr_flags::CREATE)), libc::EEXIST);
            set(&mut t, 7, "user.a", b"", xattr_flags::REPLACE).unwrap();
            set(&mut t, 7, "user.b", &[0, 255], 0).unwrap();
            set(&mut t, 8, "user.a", b"other inode", 0).unwrap();
            assert_eq!(get(&t, 7, "user.a").unwrap(), b"");
            assert_eq!(list(&t, 7).unwrap(), b"user.a\0user.b\0");
            assert_eq!(errno(set(&mut t, 7, "user.big", &vec![0; VALUE_MAX + 1], 0)), libc::E2BIG);
            set(&mut t, 7, "user.big", &vec![1; VALUE_MAX], 0).unwrap();
            // Both flags, as the kernel's simple_xattr_set: each refuses what it refuses.
            assert_eq!(errno(set(&mut t, 7, "user.a", b"", 3)), libc::EEXIST);
            assert_eq!(errno(set(&mut t, 7, "user.c", b"", 3)), libc::ENODATA);
            assert_eq!(errno(set(&mut t, 7, "user.c", b"", 4)), libc::EINVAL);
            remove(&mut t, 7, "user.big").unwrap();
            assert_eq!(errno(remove(&mut t, 7, "user.big")), libc::ENODATA);
            assert!(remove_all(&mut t, 7).unwrap());
            assert!(list(&t, 7).unwrap().is_empty());
            assert_eq!(get(&t, 8, "user.a").unwrap(), b"other inode");
            for n in 0.. {
                let name = format!("user.{n:0>240}");
                if let Err(e) = set(&mut t, 9, &name, b"", 0) {
                    assert_eq!(e.errno, Errno::ENOSPC);
                    break;
                }
            }
            assert!(list(&t, 9).unwrap().len() <= LIST_MAX);
        }
        txn.commit().unwrap();
    }
}
