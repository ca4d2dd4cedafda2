//! `surge bench ...`: each benchmark runs Surge and its baseline in the
//! same run, in client processes, and prints medians and ratios.

pub mod core;
pub mod worker;

/// Median of a non-empty sample.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
