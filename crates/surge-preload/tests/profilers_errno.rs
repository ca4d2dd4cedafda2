//! What programs see beyond their bytes: errno after calls that succeeded
//! (netCDF reads it after a short read), netCDF's own tools on its three
//! file formats, and profilers preloaded beside the interposer (Darshan)
//! that must see every byte the program moved on Surge and none of
//! Surge's own files. Each runs on a plain directory and under `surge run`
//! in every mode, through the harness in `common`.

mod common;

use common::{workload, Scenario};

/// workloads/errno_kept.c sets errno to a sentinel before each call the
/// shim wraps and prints whether the call kept it: the output on Surge
/// must be the plain directory's, where libc keeps it.
#[test]
fn every_wrapped_call_that_succeeds_leaves_errno_as_it_was_in_every_mode() {
    let prog = workload("errno_kept");
    Scenario::new("errno").compare(&format!("mkdir -p $D && {} $D > $O/errno", prog.display()));
}
