//! Client settings: timeouts and job identity, normally from the environment.

use crate::job::JobIdentity;
use std::time::Duration;

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// How long dialling a daemon may take.
    pub connect_timeout: Duration,
    /// How long one send or receive on a connection may stall before the
    /// daemon is considered down (`SURGE_TIMEOUT`, seconds).
    pub io_timeout: Duration,
    pub job: JobIdentity,
}

impl ClientConfig {
    pub fn from_env() -> ClientConfig {
        let io_timeout = parse_timeout(std::env::var("SURGE_TIMEOUT").ok().as_deref());
        ClientConfig {
            // A short SURGE_TIMEOUT bounds dialling too: no call outlasts it.
            connect_timeout: DEFAULT_CONNECT_TIMEOUT.min(io_timeout),
            io_timeout,
            job: JobIdentity::from_env(),
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

/// Seconds (fractions allowed); anything unusable means the default.
fn parse_timeout(value: Option<&str>) -> Duration {
    value
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_IO_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_parsing() {
        assert_eq!(parse_timeout(None), DEFAULT_IO_TIMEOUT);
        assert_eq!(parse_timeout(Some(" 2 ")), Duration::from_secs(2));
        assert_eq!(parse_timeout(Some("0.5")), Duration::from_millis(500));
        for bad in ["", "0", "-3", "soon", "inf", "NaN"] {
            assert_eq!(parse_timeout(Some(bad)), DEFAULT_IO_TIMEOUT, "{bad}");
        }
    }
}
