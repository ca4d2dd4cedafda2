//! What the profile's modules (POSIX, MPI-IO) share with Darshan's: the
//! access-size histogram's buckets, and when a call ran.

/// Darshan's access-size buckets: upper bounds (inclusive) and names.
pub const SIZE_BUCKETS: [(u64, &str); 10] = [
    (100, "0_100"),
    (1 << 10, "100_1K"),
    (10 << 10, "1K_10K"),
    (100 << 10, "10K_100K"),
    (1 << 20, "100K_1M"),
    (4 << 20, "1M_4M"),
    (10 << 20, "4M_10M"),
    (100 << 20, "10M_100M"),
    (1 << 30, "100M_1G"),
    (u64::MAX, "1G_PLUS"),
];

pub fn bucket(size: u64) -> usize {
    SIZE_BUCKETS.iter().position(|&(bound, _)| size <= bound).unwrap_or(SIZE_BUCKETS.len() - 1)
}

/// When an operation ran, in seconds since the job started.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub start: f64,
    pub end: f64,
}
