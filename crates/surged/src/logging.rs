//! The daemon's log line. A leaf module: it uses nothing from the rest of
//! the crate, so any module may import the macro
//! (`use crate::logging::log;`) without making a cycle.

/// Logs one line `surged[<index>]: <message>` at a level of the `log`
/// facade: `log!(Warn, index, "...")`. The `surged` binary writes the lines
/// at its `--log-level` and above to stderr, which the launcher points at
/// the daemon's log file; a line that cannot be written (its device is
/// full) is lost rather than taking the request or the daemon down.
macro_rules! log {
    ($level:ident, $index:expr, $($arg:tt)*) => {
        ::log::log!(::log::Level::$level, "surged[{}]: {}", $index, format_args!($($arg)*))
    };
}
pub(crate) use log;
