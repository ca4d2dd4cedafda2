//! Test support shared by Surge's test suites (a dev-dependency only): the
//! `surged` command line and registration wait both daemon harnesses use
//! (`surged/tests/common`, `surge-client/tests/common`), a raw protocol
//! client, a data pattern that catches misplaced bytes, a repeatable dice, damage to a file
//! as a failing device would do it, a small device that fills, ext4 loop
//! disks, skips that show as skips, and a cluster started with `surge
//! start` for the tests of the `surge` command.

pub mod cluster;
pub mod daemon;
pub mod device;
pub mod loop_disk;
pub mod skip;
pub mod wire;

pub use skip::skip_unless_ready;

/// Deterministic, position-dependent bytes (xorshift64), different for
/// every seed, so data put at the wrong offset or in the wrong file shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A small deterministic generator (xorshift64): a test's run is random
/// but repeatable from its seed.
pub struct Dice(pub u64);

impl Dice {
    /// The next number below `below` (not 0).
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Polls `done` until it holds; panics naming `what` once `timeout` passed.
/// For what the code under test does in the background (a deleter, a
/// collector, a scheduler's queue).
pub fn eventually(what: &str, timeout: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Flips one bit of the byte at `offset` of `file` in place, as a failing
/// device would (for tests of the checksums at rest).
pub fn flip_byte(file: &std::path::Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(file).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], offset).unwrap();
}

#[cfg(test)]
mod tests {
    #[test]
    fn patterns_differ_by_seed_and_by_offset() {
        let (a, b) = (super::pattern(1, 4096), super::pattern(2, 4096));
        assert_eq!(a, super::pattern(1, 4096));
        assert_ne!(a, b);
        assert_ne!(a[..2048], a[2048..], "a block moved by 2 KiB would go unnoticed");
    }
}
