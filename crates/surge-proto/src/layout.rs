//! Lustre-like striping: a file's bytes are cut into `stripe_size` units
//! dealt round-robin over `stripe_count` objects, object `k` living on
//! daemon `(first + k) % daemons`. Each object is a plain file on its
//! daemon, so unit `u` of the file sits at object offset
//! `(u / stripe_count) * stripe_size`.
//!
//! Placement: `first` on a directory may also say how its new files choose
//! their first daemon: [`FIRST_AUTO`] spreads them by inode number over the
//! cluster; [`FIRST_LOCAL`] puts them on a daemon of the creating client's
//! node (the creator names its node's daemons in its `Open`), as UnifyFS and
//! GekkoFS keep file-per-process output on the writer's node. Only the first
//! daemon is chosen so: a file of `stripe_count` > 1 still stripes over the
//! daemons that follow it. [`Layout::resolve`] makes both concrete.

/// `stripe_count` value meaning "every daemon" (the CLI's `-c -1`).
pub const STRIPE_ALL: u32 = u32::MAX;
/// `first` value meaning "let the metadata daemon spread files".
pub const FIRST_AUTO: u32 = u32::MAX;
/// `first` value meaning "a daemon of the creating client's node" (`local`
/// placement; automatic when the creator's node runs none).
pub const FIRST_LOCAL: u32 = u32::MAX - 1;
pub const DEFAULT_STRIPE_SIZE: u64 = 1 << 20;
/// Smallest stripe unit accepted, as Lustre's (64 KiB).
pub const MIN_STRIPE_SIZE: u64 = 64 << 10;
pub const MAX_STRIPE_SIZE: u64 = 4 << 30;

/// How a directory's new files choose their first daemon, as
/// `surge setstripe --placement` and `surged --placement` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayoutPlacement {
    /// Spread by inode number over every daemon ([`FIRST_AUTO`]).
    #[default]
    Auto,
    /// On a daemon of the creating client's node ([`FIRST_LOCAL`]).
    Local,
}

impl LayoutPlacement {
    /// The `first` field that says this placement.
    pub fn first(self) -> u32 {
        match self {
            LayoutPlacement::Auto => FIRST_AUTO,
            LayoutPlacement::Local => FIRST_LOCAL,
        }
    }
}

impl std::str::FromStr for LayoutPlacement {
    type Err = String;

    fn from_str(text: &str) -> Result<LayoutPlacement, String> {
        match text {
            "auto" => Ok(LayoutPlacement::Auto),
            "local" => Ok(LayoutPlacement::Local),
            _ => Err(format!("placement {text:?}: use auto (spread over every daemon) or local (the creator's node)")),
        }
    }
}

/// A layout. On a directory it is the default its new files inherit, and
/// zero fields mean "inherit from the parent"; on a file every field is
/// concrete ([`Layout::is_concrete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    pub stripe_count: u32,
    pub stripe_size: u64,
    pub first: u32,
}

/// One contiguous piece of a file extent that lives in a single object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Stripe (object) index, `0..stripe_count`.
    pub stripe: u32,
    /// Offset inside that object.
    pub object_offset: u64,
    /// Offset inside the caller's buffer.
    pub buf_offset: usize,
    pub len: usize,
}

impl Layout {
    /// Inherit everything: the state of a directory with no layout of its own.
    pub const INHERIT: Layout = Layout { stripe_count: 0, stripe_size: 0, first: 0 };

    /// The root directory's default when none was configured: every daemon, 1 MiB units.
    pub const ROOT_DEFAULT: Layout =
        Layout { stripe_count: STRIPE_ALL, stripe_size: DEFAULT_STRIPE_SIZE, first: FIRST_AUTO };

    pub fn is_concrete(&self) -> bool {
        self.stripe_count != 0
            && self.stripe_count != STRIPE_ALL
            && self.stripe_size != 0
            && self.first != FIRST_AUTO
            && self.first != FIRST_LOCAL
    }

    /// Whether new files under this (directory) layout go to their creator's node.
    pub fn is_local(&self) -> bool {
        self.first == FIRST_LOCAL
    }

    /// Fields of `self` that are unset (0) are taken from `parent`.
    pub fn inherit(self, parent: Layout) -> Layout {
        Layout {
            stripe_count: if self.stripe_count == 0 { parent.stripe_count } else { self.stripe_count },
            stripe_size: if self.stripe_size == 0 { parent.stripe_size } else { self.stripe_size },
            first: if self.stripe_count == 0 && self.stripe_size == 0 && self.first == 0 {
                parent.first
            } else {
                self.first
            },
        }
    }

    /// Checks a requested (possibly partial) layout against a cluster of `daemons`.
    pub fn validate(&self, daemons: u32) -> Result<(), String> {
        if self.stripe_size != 0
            && (self.stripe_size < MIN_STRIPE_SIZE
                || self.stripe_size > MAX_STRIPE_SIZE
                || !self.stripe_size.is_multiple_of(MIN_STRIPE_SIZE))
        {
            return Err(format!(
                "stripe size {} must be a multiple of 64 KiB between 64 KiB and 4 GiB",
                self.stripe_size
            ));
        }
        if self.stripe_count != STRIPE_ALL && self.stripe_count > daemons {
            return Err(format!("stripe count {} exceeds the {daemons} daemons of this cluster", self.stripe_count));
        }
        if self.first != FIRST_AUTO && self.first != FIRST_LOCAL && self.first >= daemons {
            return Err(format!("first daemon {} is not in 0..{daemons}", self.first));
        }
        Ok(())
    }

    /// Turns an inherited default into a file's concrete layout. `spread`
    /// (the new file's inode number) picks the first daemon when it is auto,
    /// so single-stripe files spread over the cluster; when it is local, it
    /// picks among `local` (the creator's node's daemons), so the files of
    /// the processes of one node use each of its daemons in turn. With no
    /// local daemon in range, local is auto.
    pub fn resolve(self, daemons: u32, spread: u64, local: &[u32]) -> Layout {
        let daemons = daemons.max(1);
        let count = match self.stripe_count {
            0 | STRIPE_ALL => daemons,
            c => c.min(daemons),
        };
        let size = if self.stripe_size == 0 { DEFAULT_STRIPE_SIZE } else { self.stripe_size };
        let pick = |among: &[u32]| among[(spread % among.len() as u64) as usize];
        let near: Vec<u32> = local.iter().copied().filter(|&d| d < daemons).collect();
        let first = match self.first {
            FIRST_LOCAL if !near.is_empty() => pick(&near),
            FIRST_AUTO | FIRST_LOCAL => (spread % daemons as u64) as u32,
            first => first % daemons,
        };
        Layout { stripe_count: count, stripe_size: size, first }
    }

    /// The daemon that holds object `stripe`.
    pub fn daemon_of(&self, stripe: u32, daemons: u32) -> u32 {
        ((self.first as u64 + stripe as u64) % daemons.max(1) as u64) as u32
    }

    /// Does daemon `daemon` hold a stripe of a file of this layout?
    pub fn has_stripe_on(&self, daemon: u32, daemons: u32) -> bool {
        (0..self.stripe_count.min(daemons)).any(|s| self.daemon_of(s, daemons) == daemon)
    }

    /// Where file offset `offset` lives: (stripe, object offset).
    pub fn locate(&self, offset: u64) -> (u32, u64) {
        let unit = offset / self.stripe_size;
        let within = offset % self.stripe_size;
        let count = self.stripe_count as u64;
        ((unit % count) as u32, (unit / count) * self.stripe_size + within)
    }

    /// The file offset of object offset `object_offset` of object `stripe`
    /// (the inverse of [`Layout::locate`]); `None` past the largest offset.
    pub fn file_offset(&self, stripe: u32, object_offset: u64) -> Option<u64> {
        let unit = self.stripe_size;
        let file_unit = (object_offset / unit).checked_mul(self.stripe_count as u64)?.checked_add(stripe as u64)?;
        file_unit.checked_mul(unit)?.checked_add(object_offset % unit)
    }

    /// Cuts the extent `[offset, offset + len)` into per-object pieces, in file order.
    pub fn pieces(&self, offset: u64, len: usize) -> Vec<Piece> {
        let mut out = Vec::with_capacity(len / self.stripe_size as usize + 2);
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let (stripe, object_offset) = self.locate(pos);
            let left_in_unit = (self.stripe_size - pos % self.stripe_size) as usize;
            let n = left_in_unit.min(len - done);
            out.push(Piece { stripe, object_offset, buf_offset: done, len: n });
            done += n;
        }
        out
    }

    /// Length object `stripe` has when the file is `file_size` bytes long.
    pub fn object_len(&self, stripe: u32, file_size: u64) -> u64 {
        let s = self.stripe_size;
        let count = self.stripe_count as u64;
        let full_rows = file_size / (s * count);
        let tail = file_size % (s * count);
        let in_tail = tail.saturating_sub(stripe as u64 * s).min(s);
        full_rows * s + in_tail
    }

    /// File size implied by object `stripe` holding `object_size` bytes
    /// (the file size is the maximum over its objects).
    pub fn file_end(&self, stripe: u32, object_size: u64) -> u64 {
        if object_size == 0 {
            return 0;
        }
        let s = self.stripe_size;
        let last = object_size - 1;
        let unit = (last / s) * self.stripe_count as u64 + stripe as u64;
        unit * s + last % s + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout { stripe_count: 3, stripe_size: 4, first: 1 };

    #[test]
    fn file_offset_inverts_locate() {
        let layout = Layout { stripe_count: 3, stripe_size: 64 << 10, first: 1 };
        for offset in [0u64, 1, 65535, 65536, 200_000, 3 << 20, (7 << 20) + 12345] {
            let (stripe, pos) = layout.locate(offset);
            assert_eq!(layout.file_offset(stripe, pos), Some(offset));
        }
        assert_eq!(layout.file_offset(2, u64::MAX - 1), None);
    }

    #[test]
    fn locate_deals_units_round_robin() {
        assert_eq!(L.locate(0), (0, 0));
        assert_eq!(L.locate(5), (1, 1));
        assert_eq!(L.locate(12), (0, 4));
        assert_eq!(L.locate(23), (2, 7));
        assert_eq!(L.daemon_of(2, 3), 0);
        assert_eq!(L.daemon_of(0, 4), 1);
    }

    #[test]
    fn pieces_cover_the_extent_exactly() {
        let p = L.pieces(3, 10);
        assert_eq!(p.iter().map(|p| p.len).sum::<usize>(), 10);
        assert_eq!(p[0], Piece { stripe: 0, object_offset: 3, buf_offset: 0, len: 1 });
        assert_eq!(p[1], Piece { stripe: 1, object_offset: 0, buf_offset: 1, len: 4 });
        assert_eq!(p[3], Piece { stripe: 0, object_offset: 4, buf_offset: 9, len: 1 });
    }

    #[test]
    fn object_len_and_file_end_agree_with_a_byte_by_byte_model() {
        for size in 0..60u64 {
            let mut lens = [0u64; 3];
            for off in 0..size {
                let (k, o) = L.locate(off);
                lens[k as usize] = lens[k as usize].max(o + 1);
            }
            for k in 0..3 {
                assert_eq!(L.object_len(k, size), lens[k as usize], "size {size} stripe {k}");
            }
            let end = (0..3).map(|k| L.file_end(k, lens[k as usize])).max().unwrap();
            assert_eq!(end, size);
        }
    }

    #[test]
    fn inherit_resolve_and_validate() {
        let dir = Layout { stripe_count: 2, stripe_size: 0, first: FIRST_AUTO };
        let eff = dir.inherit(Layout::ROOT_DEFAULT);
        assert_eq!(eff.stripe_size, DEFAULT_STRIPE_SIZE);
        let file = eff.resolve(4, 7, &[]);
        assert_eq!(file, Layout { stripe_count: 2, stripe_size: DEFAULT_STRIPE_SIZE, first: 3 });
        assert!(file.is_concrete());
        assert_eq!(Layout::INHERIT.inherit(dir), dir);
        assert_eq!(Layout::ROOT_DEFAULT.resolve(4, 0, &[]).stripe_count, 4);
        assert!(Layout { stripe_count: 5, ..Layout::INHERIT }.validate(4).is_err());
        assert!(Layout { stripe_size: 1000, ..Layout::INHERIT }.validate(4).is_err());
        assert!(Layout { stripe_count: STRIPE_ALL, stripe_size: 128 << 10, first: 3 }.validate(4).is_ok());
    }

    #[test]
    fn a_layout_has_stripes_on_the_daemons_from_its_first_round_the_cluster() {
        let l = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 3 };
        let on: Vec<u32> = (0..4).filter(|&d| l.has_stripe_on(d, 4)).collect();
        assert_eq!(on, [0, 3]);
        assert!((0..4).all(|d| Layout { stripe_count: 4, ..l }.has_stripe_on(d, 4)));
    }

    #[test]
    fn local_placement_deals_new_files_over_the_creators_daemons_only() {
        let per_process = Layout { stripe_count: 1, stripe_size: DEFAULT_STRIPE_SIZE, first: FIRST_LOCAL };
        // Two nodes of two daemons each: node A runs daemons 0 and 1, node B 2 and 3.
        let (node_a, node_b) = ([0u32, 1], [2u32, 3]);
        let firsts =
            |node: &[u32]| (100..108u64).map(|ino| per_process.resolve(4, ino, node).first).collect::<Vec<_>>();
        assert_eq!(firsts(&node_a), [0, 1, 0, 1, 0, 1, 0, 1], "consecutive creates use both of A's daemons");
        assert_eq!(firsts(&node_b), [2, 3, 2, 3, 2, 3, 2, 3]);
        let file = per_process.resolve(4, 5, &node_b);
        assert!(file.is_concrete() && !file.is_local());
        assert_eq!(file.daemon_of(0, 4), 3);
    }

    #[test]
    fn local_placement_without_a_local_daemon_spreads_as_auto() {
        let local = Layout { stripe_count: 1, stripe_size: DEFAULT_STRIPE_SIZE, first: FIRST_LOCAL };
        let auto = Layout { first: FIRST_AUTO, ..local };
        for ino in 0..6 {
            assert_eq!(local.resolve(3, ino, &[]), auto.resolve(3, ino, &[]));
            assert_eq!(local.resolve(3, ino, &[7, 9]), auto.resolve(3, ino, &[]), "out-of-range daemons are not local");
        }
    }

    #[test]
    fn local_placement_fixes_only_the_first_daemon_of_a_striped_file() {
        let shared = Layout { stripe_count: STRIPE_ALL, stripe_size: DEFAULT_STRIPE_SIZE, first: FIRST_LOCAL };
        let file = shared.resolve(4, 6, &[2, 3]);
        assert_eq!((file.stripe_count, file.first), (4, 2));
        assert_eq!((0..4).map(|k| file.daemon_of(k, 4)).collect::<Vec<_>>(), [2, 3, 0, 1]);
        assert!(shared.validate(4).is_ok(), "local is a placement, not a daemon index");
        let dir = Layout { first: FIRST_LOCAL, ..Layout::INHERIT };
        assert!(dir.inherit(Layout::ROOT_DEFAULT).is_local(), "a directory's placement alone is inherited below it");
    }
}
