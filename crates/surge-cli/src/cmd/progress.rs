//! The progress of a long transfer (`surge cp`, `surge stage-out`, the
//! stage-out of `surge run`), on stderr: a bar while stderr is a terminal,
//! and one closing line either way, so a log shows what was moved.

use crate::units::{human, mbps};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Instant;

/// Transfers smaller than this finish before a bar would be of use: no bar,
/// no closing line (as `cp` says nothing).
pub const LONG_TRANSFER: u64 = 8 << 20;

/// A transfer of `total` bytes under way.
pub struct Transfer {
    bar: ProgressBar,
    started: Instant,
}

impl Transfer {
    /// A bar drawn on stderr when it is a terminal (never when `quiet`).
    pub fn new(total: u64, quiet: bool) -> Transfer {
        let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Transfer { bar, started: Instant::now() }
    }

    /// Names the file being moved.
    pub fn set_file(&self, name: &str) {
        self.bar.set_message(name.to_string());
    }

    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    pub fn set_position(&self, done: u64) {
        self.bar.set_position(done);
    }

    pub fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    /// A diagnostic on stderr that the bar does not overwrite.
    pub fn note(&self, line: &str) {
        self.bar.suspend(|| note!("{line}"));
    }

    /// Removes the bar; returns "<size> in <secs> s (<rate> MB/s)" for `bytes`.
    pub fn finish(self, bytes: u64) -> String {
        self.bar.finish_and_clear();
        let secs = self.started.elapsed().as_secs_f64();
        format!("{} in {secs:.2} s ({:.0} MB/s)", human(bytes), mbps(bytes, secs))
    }
}
