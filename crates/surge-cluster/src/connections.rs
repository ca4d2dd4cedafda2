//! How many connections a client keeps to each daemon and how it spreads
//! requests over them (Mulconn, [Sung20, ch. 4] in docs/references.md). The cluster file carries
//! the cluster's defaults (`surge start --conns --conn-policy`); clients may
//! override them with `SURGE_CONNS` and `SURGE_CONN_POLICY`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Most connections a client opens to one daemon.
pub const MAX_CONNS: u32 = 16;

/// Connections per daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ConnCount {
    Fixed(u32),
    /// Picked from the measured per-connection rate against the daemon's store rate.
    #[default]
    Auto,
}

/// Which connection a request goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ConnPolicy {
    /// Thread to single connection: an open file is bound, at open, to
    /// connection `thread slot mod N`.
    Ttos,
    /// Thread to many connections: an open file's requests take the
    /// connections in turn.
    Ttom,
    /// Mulconn's rule: TtoS for writes, TtoM for reads.
    #[default]
    Auto,
}

impl FromStr for ConnCount {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("auto") {
            return Ok(ConnCount::Auto);
        }
        match text.parse::<u32>() {
            Ok(n) if (1..=MAX_CONNS).contains(&n) => Ok(ConnCount::Fixed(n)),
            _ => Err(format!("{text:?} is not a connection count: give 1 to {MAX_CONNS}, or auto")),
        }
    }
}

impl FromStr for ConnPolicy {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ttos" => Ok(ConnPolicy::Ttos),
            "ttom" => Ok(ConnPolicy::Ttom),
            "auto" => Ok(ConnPolicy::Auto),
            _ => Err(format!("{text:?} is not a connection policy: give ttos, ttom or auto")),
        }
    }
}

impl fmt::Display for ConnCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnCount::Fixed(n) => write!(f, "{n}"),
            ConnCount::Auto => f.write_str("auto"),
        }
    }
}

impl fmt::Display for ConnPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnPolicy::Ttos => "ttos",
            ConnPolicy::Ttom => "ttom",
            ConnPolicy::Auto => "auto",
        })
    }
}

macro_rules! string_serde {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(text: String) -> Result<Self, String> {
                text.parse()
            }
        }
        impl From<$t> for String {
            fn from(value: $t) -> String {
                value.to_string()
            }
        }
    };
}
string_serde!(ConnCount);
string_serde!(ConnPolicy);

/// Parses a byte count with an optional binary suffix (K, M, G, T; "KiB"/"KB" alike).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    let n: u64 = num.parse().map_err(|_| format!("{text:?} is not a size (try 1048576, 64K, 1M, 4G)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown size suffix {other:?} in {text:?} (use K, M, G or T)")),
    };
    n.checked_shl(shift).filter(|v| v >> shift == n).ok_or_else(|| format!("{text:?} is too large"))
}

/// Parses a data rate in bytes/s with an optional decimal suffix, as
/// storage benchmarks quote rates: "600M", "600MB/s" and "600000000" are
/// all 600 MB/s; K, M, G are powers of 1000.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let unit = t.trim_end_matches("/s").trim_end_matches(['B', 'b']);
    let digits_end = unit.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unit.len());
    let (num, suffix) = unit.split_at(digits_end);
    let bad = || format!("{text:?} is not a rate in bytes/s (try 600M, 600MB/s or 1.5G)");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let scale = match suffix.trim().to_ascii_lowercase().as_str() {
        "" => 1e0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(bad()),
    };
    let rate = n * scale;
    if !(1.0..1e15).contains(&rate) {
        return Err(format!("{text:?}: a rate must be at least 1 byte/s and below 1 PB/s"));
    }
    Ok(rate as u64)
}

/// Parses a rate limit in MB/s (10^6 bytes), 0 for unlimited, as bytes/s:
/// "200", "0.5" and "0" are 200 MB/s, 500 kB/s and no limit.
pub fn parse_mbps_limit(text: &str) -> Result<u64, String> {
    let usage = "expected MB/s, such as 200 or 0.5 (0: unlimited)";
    let mbps: f64 = text.trim().parse().map_err(|_| format!("{usage}: {text:?} is not a number"))?;
    if !mbps.is_finite() || mbps < 0.0 {
        return Err(format!("{usage}: {text:?} is not 0 or more"));
    }
    if mbps >= 1e9 {
        return Err(format!("{usage}: {text:?} is 1 PB/s or more"));
    }
    Ok((mbps * 1e6) as u64)
}

/// The cluster file's `[connections]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConnectionDefaults {
    #[serde(default)]
    pub count: ConnCount,
    #[serde(default)]
    pub policy: ConnPolicy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("4g").unwrap(), 4 << 30);
        assert!(parse_size("1X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn parsing_and_display_round_trip() {
        assert_eq!("auto".parse::<ConnCount>().unwrap(), ConnCount::Auto);
        assert_eq!(" 4 ".parse::<ConnCount>().unwrap(), ConnCount::Fixed(4));
        for bad in ["0", "17", "-1", "four", ""] {
            let err = bad.parse::<ConnCount>().unwrap_err();
            assert!(err.contains("1 to 16, or auto"), "{err}");
        }
        assert_eq!("TtoM".parse::<ConnPolicy>().unwrap(), ConnPolicy::Ttom);
        assert!("fastest".parse::<ConnPolicy>().unwrap_err().contains("ttos, ttom or auto"));
        for count in [ConnCount::Auto, ConnCount::Fixed(8)] {
            assert_eq!(count.to_string().parse::<ConnCount>().unwrap(), count);
        }
        for policy in [ConnPolicy::Ttos, ConnPolicy::Ttom, ConnPolicy::Auto] {
            assert_eq!(policy.to_string().parse::<ConnPolicy>().unwrap(), policy);
        }
    }

    #[test]
    fn rates_parse_with_decimal_suffixes() {
        assert_eq!(parse_rate("600M").unwrap(), 600_000_000);
        assert_eq!(parse_rate("600MB/s").unwrap(), 600_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate(" 4096 ").unwrap(), 4096);
        assert_eq!(parse_rate("50kB/s").unwrap(), 50_000);
        for bad in ["", "fast", "10X", "0", "-5M", "0.1"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rate_limit_is_a_number_of_mb_s_zero_or_more() {
        assert_eq!(parse_mbps_limit("200").unwrap(), 200_000_000);
        assert_eq!(parse_mbps_limit(" 0.5 ").unwrap(), 500_000);
        assert_eq!(parse_mbps_limit("0").unwrap(), 0);
        for (bad, why) in [("-1", "not 0 or more"), ("fast", "not a number"), ("", "not a number"), ("NaN", "not 0")] {
            let error = parse_mbps_limit(bad).unwrap_err();
            assert!(error.contains(why) && error.contains("MB/s"), "{bad:?}: {error}");
        }
        assert!(parse_mbps_limit("1e9").unwrap_err().contains("1 PB/s"));
    }

    #[test]
    fn toml_table_with_defaults_and_errors() {
        let d: ConnectionDefaults = toml::from_str("count = \"4\"\npolicy = \"ttos\"").unwrap();
        assert_eq!(d, ConnectionDefaults { count: ConnCount::Fixed(4), policy: ConnPolicy::Ttos });
        let d: ConnectionDefaults = toml::from_str("").unwrap();
        assert_eq!(d, ConnectionDefaults::default());
        let err = toml::from_str::<ConnectionDefaults>("count = \"99\"").unwrap_err();
        assert!(err.message().contains("not a connection count"), "{err}");
        assert_eq!(toml::from_str::<ConnectionDefaults>(&toml::to_string(&d).unwrap()).unwrap(), d);
    }
}
