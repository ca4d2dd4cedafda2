//! Skips that show. A test that cannot run here (no root, no iproute2)
//! says "SKIPPED: <test>: <reason>" on the terminal, past the test
//! harness's output capture, instead of passing silently. Under `CI=true`
//! as root nothing is skipped: a test that cannot run there fails.

use std::fmt::Display;
use std::io::Write;

/// `ready` unwrapped, or `None` after reporting the skip (see the module).
pub fn skip_unless_ready<T, E: Display>(test: &str, ready: Result<T, E>) -> Option<T> {
    match ready {
        Ok(value) => Some(value),
        Err(why) if must_run() => panic!("{test} must run under CI=true as root, but cannot: {why}"),
        Err(why) => {
            // io::stderr is not captured by the test harness (eprintln! is).
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
            None
        }
    }
}

/// CI=true and running as root: where every test is expected to run.
fn must_run() -> bool {
    // SAFETY: geteuid cannot fail.
    std::env::var("CI").is_ok_and(|v| v == "true") && unsafe { libc::geteuid() } == 0
}
