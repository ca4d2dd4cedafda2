//! Which checkpoint version a file is: the largest decimal number in its
//! path (`ckpt_0042.h5` → 42, `step-500/rank3.dat` → 500), the common
//! naming of SCR and of applications' restart files. A path without a
//! number gets none here; the data manager then numbers the job's files in
//! the order it creates them.

/// The largest decimal number in `path`, if it has one (numbers past
/// `u64::MAX` count as `u64::MAX`).
pub fn version_in_path(path: &str) -> Option<u64> {
    path.split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty())
        .map(|run| run.parse::<u64>().unwrap_or(u64::MAX))
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_largest_number_in_the_path() {
        for (path, version) in [
            ("/ckpt_0042.h5", Some(42)),
            ("/step-500/rank3.dat", Some(500)),
            ("/run7/ckpt.12", Some(12)),
            ("/restart/latest", None),
            ("/x/99999999999999999999999", Some(u64::MAX)),
        ] {
            assert_eq!(version_in_path(path), version, "{path}");
        }
    }
}
