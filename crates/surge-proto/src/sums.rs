//! The format of the checksums at rest, which the daemon writes and a
//! client on the daemon's node reads itself (the node-local data path):
//! a CRC-32C per 4 KiB block of each object, in a sidecar file of a
//! 16-byte header (magic, recorded length, their CRC) and one 4-byte
//! little-endian entry per block. The daemon's side is
//! `surged::blocksums`; this is the part both sides must agree on.

/// Bytes per checksummed block.
pub const BLOCK: usize = 4096;
/// Bytes of the sidecar's header, before the entry of block 0.
pub const HEADER_LEN: u64 = 16;
/// Bytes of one entry.
pub const ENTRY: u64 = 4;
/// The entry of a block never written: its bytes are zeros.
pub const HOLE: u32 = 0;
/// The entry of a block whose write was under way: served unchecked.
pub const UNSURE: u32 = 1;

/// The entry that stores checksum `crc`: the two values the markers take
/// are moved aside (to 2 and 3, which then stand for two checksums each).
pub fn encode(crc: u32) -> u32 {
    if crc <= UNSURE {
        crc | 2
    } else {
        crc
    }
}

/// A block's checksum: the CRC-32C of its bytes (`data.len() <= BLOCK`),
/// the bytes it lacks (past the object's end) counted as zeros.
pub fn block_crc(data: &[u8]) -> u32 {
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    crc32c::crc32c_append(crc32c::crc32c(data), &ZEROS[..BLOCK - data.len()])
}

/// Whether a block's bytes agree with its entry: a hole must be zeros, an
/// unsure block is taken as it is, any other entry is the checksum.
pub fn agrees(entry: u32, data: &[u8]) -> bool {
    match entry {
        HOLE => data.iter().all(|&b| b == 0),
        UNSURE => true,
        entry => encode(block_crc(data)) == entry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_block_sums_as_if_padded_with_zeros_and_markers_never_stand_for_a_checksum() {
        let mut padded = [0u8; BLOCK];
        padded[..3].copy_from_slice(b"abc");
        assert_eq!(block_crc(b"abc"), crc32c::crc32c(&padded));
        assert!(agrees(encode(block_crc(b"abc")), b"abc"));
        assert!(!agrees(encode(block_crc(b"abc")), b"abd"));
        assert!(agrees(HOLE, &[0; 10]) && !agrees(HOLE, &[0, 1]));
        assert!(agrees(UNSURE, b"anything"));
        assert_ne!(encode(0), HOLE);
        assert_ne!(encode(1), UNSURE);
    }
}
