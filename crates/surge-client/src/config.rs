//! Client settings: timeouts, connections and job identity, normally from the environment.

use crate::error::{Error, Result};
use crate::job::JobIdentity;
use std::time::Duration;
use surge_cluster::{ConnCount, ConnPolicy};

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a cached name or attribute may be served (`crate::names`):
/// the bound on seeing a change another client made, should daemon 0's
/// change feed not bring it sooner (it does, one round trip after the
/// change), and on changes made outside Surge to PFS-only names.
pub const DEFAULT_META_CACHE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// How long dialling a daemon may take.
    pub connect_timeout: Duration,
    /// How long one operation (stat, read, write, ...) may go without an
    /// answer from a daemon, retries included, before it fails with EIO
    /// (`SURGE_TIMEOUT`, seconds; see `deadline`).
    pub io_timeout: Duration,
    pub job: JobIdentity,
    /// Connections per daemon (`SURGE_CONNS`); `None`: the cluster file's default.
    pub conns: Option<ConnCount>,
    /// Which connection a request takes (`SURGE_CONN_POLICY`); `None`: the cluster file's default.
    pub conn_policy: Option<ConnPolicy>,
    /// How long cached names and attributes may be served
    /// (`SURGE_META_CACHE`, seconds; 0: nothing is cached).
    pub meta_cache: Duration,
    /// The file in shared memory all clients of one node tick after each
    /// namespace change (`crate::names`); clients with different ones
    /// see each other's changes as another node's (a test's "nodes").
    pub node_clock: std::path::PathBuf,
    /// Whether the daemons of this node are reached over the node-local
    /// data path (their Unix sockets, moving the bytes through the object
    /// files they hand out); `SURGE_LOCAL=0` turns it off (TCP only).
    pub local: bool,
}

impl ClientConfig {
    /// Settings from the environment; an unusable `SURGE_CONNS` or
    /// `SURGE_CONN_POLICY` is an error (EINVAL) rather than silently ignored,
    /// since it decides how the job's I/O performs.
    pub fn from_env() -> Result<ClientConfig> {
        let io_timeout = parse_timeout(std::env::var("SURGE_TIMEOUT").ok().as_deref());
        Ok(ClientConfig {
            // A short SURGE_TIMEOUT bounds dialling too: no call outlasts it.
            connect_timeout: DEFAULT_CONNECT_TIMEOUT.min(io_timeout),
            io_timeout,
            job: JobIdentity::from_env(),
            conns: env_setting("SURGE_CONNS")?,
            conn_policy: env_setting("SURGE_CONN_POLICY")?,
            meta_cache: meta_cache(std::env::var("SURGE_META_CACHE").ok().as_deref())?,
            node_clock: crate::names::node_clock_path(),
            local: std::env::var("SURGE_LOCAL").map_or(true, |v| v.trim() != "0"),
        })
    }
}

/// A setting from the environment: unset or empty means "not given".
fn env_setting<T: std::str::FromStr<Err = String>>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            text.parse().map(Some).map_err(|why| Error::new(libc::EINVAL, format!("{name}: {why}")))
        }
        _ => Ok(None),
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

/// Seconds (fractions allowed; 0 turns the cache off); unset or empty means the default.
fn meta_cache(value: Option<&str>) -> Result<Duration> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_META_CACHE),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| Error::new(libc::EINVAL, format!("SURGE_META_CACHE: {v:?} is not a number of seconds"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_cache_lifetime_is_seconds_and_a_bad_one_is_refused() {
        assert_eq!(meta_cache(None).unwrap(), DEFAULT_META_CACHE);
        assert_eq!(meta_cache(Some("0")).unwrap(), Duration::ZERO);
        assert_eq!(meta_cache(Some(" 2.5 ")).unwrap(), Duration::from_millis(2500));
        for bad in ["-1", "soon", "inf"] {
            assert_eq!(meta_cache(Some(bad)).unwrap_err().errno(), libc::EINVAL, "{bad}");
        }
    }

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
