//! Pure arithmetic of the I/O fan-out: cutting an extent into requests,
//! grouping them per stripe, and making sense of short reads.

use surge_proto::layout::Piece;
use surge_proto::msg::WriteReply;
use surge_proto::Layout;

/// Largest data payload of one request, well inside the daemons' frame limit.
pub(crate) const MAX_TRANSFER: usize = 8 << 20;
/// Data payload of one pipelined request: small enough that sending one
/// overlaps the daemon storing the one before, large enough to amortize
/// the per-request cost.
pub(crate) const REQUEST_SIZE: usize = 256 << 10;

/// The extent `[offset, offset + len)` as per-object requests in file order,
/// none larger than [`REQUEST_SIZE`] but those of the stripes `whole` names
/// (whose daemons are reached over the node-local data path, where no
/// bytes cross a socket and pipelining gains nothing: one grant per
/// stripe unit).
pub(crate) fn pieces(layout: &Layout, offset: u64, len: usize, whole: impl Fn(u32) -> bool) -> Vec<Piece> {
    let mut out = Vec::new();
    for p in layout.pieces(offset, len) {
        if whole(p.stripe) {
            out.push(p);
            continue;
        }
        let mut done = 0;
        while done < p.len {
            let n = (p.len - done).min(REQUEST_SIZE);
            out.push(Piece {
                stripe: p.stripe,
                object_offset: p.object_offset + done as u64,
                buf_offset: p.buf_offset + done,
                len: n,
            });
            done += n;
        }
    }
    out
}

/// Groups items by stripe, stripes in order of first appearance and items in
/// their original order within a stripe. A file has few stripes, so a linear
/// search beats hashing.
pub(crate) fn by_stripe<T>(items: impl IntoIterator<Item = (u32, T)>) -> Vec<(u32, Vec<T>)> {
    let mut groups: Vec<(u32, Vec<T>)> = Vec::new();
    for (stripe, item) in items {
        match groups.iter_mut().find(|(s, _)| *s == stripe) {
            Some((_, group)) => group.push(item),
            None => groups.push((stripe, vec![item])),
        }
    }
    groups
}

/// Cuts `buf` into the disjoint slices `pieces` (in file order, covering it) describe.
pub(crate) fn split_mut<'b>(mut buf: &'b mut [u8], pieces: &[Piece]) -> Vec<&'b mut [u8]> {
    pieces
        .iter()
        .map(|p| {
            let (head, tail) = std::mem::take(&mut buf).split_at_mut(p.len);
            buf = tail;
            head
        })
        .collect()
}

/// After a read whose piece `i` delivered only `got[i]` bytes: the bytes
/// missing below `file_size` are holes and read as zeros; the read returns
/// the bytes up to end of file.
pub(crate) fn settle_short_read(pieces: &[Piece], got: &[usize], offset: u64, file_size: u64, buf: &mut [u8]) -> usize {
    let valid = file_size.saturating_sub(offset).min(buf.len() as u64) as usize;
    for (p, &n) in pieces.iter().zip(got) {
        let hole_start = p.buf_offset + n;
        let hole_end = (p.buf_offset + p.len).min(valid);
        if hole_start < hole_end {
            buf[hole_start..hole_end].fill(0);
        }
    }
    valid
}

/// The bytes of a partly failed write that count as written: those
/// contiguous from its start. `landed[i]` is what piece `i` (in file order)
/// wrote, `None` where its daemon refused it or it was never sent.
pub(crate) fn written_prefix(pieces: &[Piece], landed: &[Option<WriteReply>]) -> usize {
    let mut prefix = 0;
    for (p, reply) in pieces.iter().zip(landed) {
        let written = reply.map_or(0, |r| (r.written as usize).min(p.len));
        prefix += written;
        if written < p.len {
            break;
        }
    }
    prefix
}

/// After a write at `offset` of which only the first `prefix` bytes count:
/// the objects that pieces beyond grew, each with the length to cut it back
/// to (its size before the write, or what the prefix needs, whichever is larger).
pub(crate) fn growth_beyond(
    layout: &Layout,
    pieces: &[Piece],
    landed: &[Option<WriteReply>],
    offset: u64,
    prefix: usize,
) -> Vec<(u32, u64)> {
    let landed: Vec<(&Piece, WriteReply)> = pieces.iter().zip(landed).filter_map(|(p, r)| Some((p, (*r)?))).collect();
    let groups = by_stripe(landed.iter().map(|&(p, r)| (p.stripe, (p, r))));
    let mut cuts = Vec::new();
    for (stripe, writes) in groups {
        // The first write to reach the object saw the smallest size before.
        let size_before = writes.iter().map(|(_, r)| r.size_before).min().unwrap_or(0);
        let keep = size_before.max(layout.object_len(stripe, offset + prefix as u64));
        let end = writes.iter().map(|(p, r)| p.object_offset + r.written).max().unwrap_or(0);
        if end > keep {
            cuts.push((stripe, keep));
        }
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout { stripe_count: 3, stripe_size: 4, first: 1 };

    #[test]
    fn large_pieces_are_cut_into_pipelined_requests() {
        let big = Layout { stripe_count: 1, stripe_size: 64 << 20, first: 0 };
        let p = pieces(&big, 5, 2 * REQUEST_SIZE + 100, |_| false);
        assert_eq!(p.iter().map(|p| p.len).collect::<Vec<_>>(), vec![REQUEST_SIZE, REQUEST_SIZE, 100]);
        assert_eq!((p[1].object_offset, p[1].buf_offset), (5 + REQUEST_SIZE as u64, REQUEST_SIZE));
        assert_eq!(pieces(&L, 3, 10, |_| false), L.pieces(3, 10));
        // Over the node-local path a stripe unit is one piece, however large.
        assert_eq!(
            pieces(&big, 5, 2 * REQUEST_SIZE + 100, |stripe| stripe == 0),
            big.pieces(5, 2 * REQUEST_SIZE + 100)
        );
        assert!(pieces(&L, 3, 0, |_| false).is_empty());
    }

    #[test]
    fn grouping_keeps_first_appearance_and_inner_order() {
        let p = pieces(&L, 0, 30, |_| false);
        let groups = by_stripe(p.iter().map(|p| (p.stripe, p.buf_offset)));
        assert_eq!(groups, vec![(0, vec![0, 12, 24]), (1, vec![4, 16, 28]), (2, vec![8, 20])]);
        let groups = by_stripe(pieces(&L, 5, 4, |_| false).into_iter().map(|p| (p.stripe, p.len)));
        assert_eq!(groups, vec![(1, vec![3]), (2, vec![1])]);
    }

    #[test]
    fn split_mut_follows_the_pieces() {
        let mut buf: Vec<u8> = (0..10).collect();
        let p = pieces(&L, 3, 10, |_| false);
        let slices = split_mut(&mut buf, &p);
        assert_eq!(
            slices.iter().map(|s| s.to_vec()).collect::<Vec<_>>(),
            vec![vec![0], vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9]]
        );
    }

    #[test]
    fn a_partly_failed_write_counts_its_prefix_and_cuts_back_what_lies_beyond() {
        // Extent [2, 14) over units of 4: pieces [2,4) [4,8) [8,12) [12,14) on stripes 0, 1, 2, 0.
        let p = pieces(&L, 2, 12, |_| false);
        let r = |written, size_before| Some(WriteReply { written, size_before });
        // The second piece wrote 1 byte of 4; the third landed whole on a new object.
        let landed = [r(2, 0), r(1, 0), r(4, 0), None];
        assert_eq!(written_prefix(&p, &landed), 3);
        // File bytes [0, 5): stripe 1's object keeps 1 byte; stripe 2's goes back to empty.
        assert_eq!(growth_beyond(&L, &p, &landed, 2, 3), vec![(2, 0)]);
        // An object that was longer before keeps its length.
        let landed = [None, r(4, 0), r(4, 9), None];
        assert_eq!(written_prefix(&p, &landed), 0);
        assert_eq!(growth_beyond(&L, &p, &landed, 2, 0), vec![(1, 0)]);
        // A write that landed whole cuts nothing.
        let whole = [r(2, 0), r(4, 0), r(4, 0), r(2, 4)];
        assert_eq!(written_prefix(&p, &whole), 12);
        assert!(growth_beyond(&L, &p, &whole, 2, 12).is_empty());
    }

    #[test]
    fn short_pieces_are_holes_below_eof_and_the_end_above_it() {
        // Extent [2, 14) over units of 4: pieces [2,4) [4,8) [8,12) [12,14).
        let p = pieces(&L, 2, 12, |_| false);
        let mut buf = vec![7u8; 12];
        // The middle object has nothing (a hole), the last ends early.
        let got = [2, 0, 4, 1];
        assert_eq!(settle_short_read(&p, &got, 2, 13, &mut buf), 11);
        assert_eq!(&buf[..11], &[7, 7, 0, 0, 0, 0, 7, 7, 7, 7, 7]);
        // Reading wholly beyond EOF returns 0 and touches nothing.
        let mut buf = vec![9u8; 4];
        assert_eq!(settle_short_read(&p[..1], &[0], 40, 13, &mut buf), 0);
        assert_eq!(buf, vec![9; 4]);
        // A sparse tail: EOF beyond every object's data reads as zeros.
        let mut buf = vec![7u8; 12];
        assert_eq!(settle_short_read(&p, &[0, 0, 0, 0], 2, 100, &mut buf), 12);
        assert_eq!(buf, vec![0; 12]);
    }
}
