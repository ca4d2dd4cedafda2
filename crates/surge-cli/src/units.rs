//! Human byte sizes: parsing "64K", "1MiB", "4g" (`surge_cluster::parse_size`, which
//! `surged` shares), printing "1.5 GiB" in
//! messages, and sizes in listings as coreutils prints them (`ls -l` bytes,
//! `ls -lh` "1.5K", "768M").

pub use surge_cluster::parse_size;

/// A size for a message: "512 B", "1.5 GiB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A size column of a listing: exact bytes, or with `human_readable` as
/// `ls -h` prints it: powers of 1024 with K, M, G, T, P, E, rounded up, one
/// decimal below 10 ("1.5K", "10K", "768M").
pub fn listing_size(bytes: u64, human_readable: bool) -> String {
    if !human_readable || bytes < 1024 {
        return bytes.to_string();
    }
    const SUFFIXES: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    let mut unit = 0;
    while unit + 1 < SUFFIXES.len() && bytes >= 1024u64 << (10 * (unit + 1)) {
        unit += 1;
    }
    let scale = 1u128 << (10 * (unit + 1));
    // In tenths, rounded up, as coreutils rounds sizes.
    let tenths = (u128::from(bytes) * 10).div_ceil(scale);
    if tenths < 100 {
        format!("{}.{}{}", tenths / 10, tenths % 10, SUFFIXES[unit])
    } else {
        let whole = u128::from(bytes).div_ceil(scale);
        // 1023.9K rounds up to 1024K, which coreutils prints as 1.0M.
        if whole >= 1024 && unit + 1 < SUFFIXES.len() {
            return format!("1.0{}", SUFFIXES[unit + 1]);
        }
        format!("{whole}{}", SUFFIXES[unit])
    }
}

/// Bytes per second as MB/s (10^6, as storage benchmarks quote them).
pub fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs.max(1e-9) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }

    #[test]
    fn listing_sizes_are_bytes_or_rounded_up_as_ls_h_prints_them() {
        assert_eq!(listing_size(805_306_368, false), "805306368");
        assert_eq!(listing_size(1023, true), "1023");
        assert_eq!(listing_size(1024, true), "1.0K");
        assert_eq!(listing_size(1025, true), "1.1K");
        assert_eq!(listing_size(1536, true), "1.5K");
        assert_eq!(listing_size(10 << 10, true), "10K");
        assert_eq!(listing_size((10 << 10) + 1, true), "11K");
        assert_eq!(listing_size(768 << 20, true), "768M");
        assert_eq!(listing_size((1 << 20) - 1, true), "1.0M");
        assert_eq!(listing_size(3 << 29, true), "1.5G");
        assert_eq!(listing_size(u64::MAX, true), "16E");
    }
}
