//! Link rates: parsing tc's rate syntax, and the tbf qdisc that holds each
//! host's link to that rate.

use crate::netns::run_tool;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A link rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rate(u64);

/// Slowest and fastest rates accepted: below 1 kbit/s nothing useful gets
/// through, above 1 Tbit/s the shaper no longer limits a veth.
const MIN_BITS: u64 = 1_000;
const MAX_BITS: u64 = 1_000_000_000_000;

/// tc's rate units (tc(8), "RATES"); `bps` and its multiples are bytes per second.
const UNITS: &[(&str, f64)] = &[
    ("bit", 1.0),
    ("kbit", 1e3),
    ("mbit", 1e6),
    ("gbit", 1e9),
    ("tbit", 1e12),
    ("kibit", 1024.0),
    ("mibit", 1048576.0),
    ("gibit", 1073741824.0),
    ("tibit", 1099511627776.0),
    ("bps", 8.0),
    ("kbps", 8e3),
    ("mbps", 8e6),
    ("gbps", 8e9),
    ("tbps", 8e12),
    ("kibps", 8.0 * 1024.0),
    ("mibps", 8.0 * 1048576.0),
    ("gibps", 8.0 * 1073741824.0),
    ("tibps", 8.0 * 1099511627776.0),
];

impl Rate {
    pub fn from_bits_per_second(bits: u64) -> Result<Rate, Error> {
        if (MIN_BITS..=MAX_BITS).contains(&bits) {
            Ok(Rate(bits))
        } else {
            Err(Error::InvalidSpec(format!("rate {bits} bit/s is out of range: give between 1kbit and 1tbit")))
        }
    }

    pub fn bits_per_second(self) -> u64 {
        self.0
    }

    pub fn bytes_per_second(self) -> u64 {
        self.0 / 8
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(text: &str) -> Result<Rate, Error> {
        let usage = || {
            Error::InvalidSpec(format!(
                "rate {text:?}: give a number and a tc unit, e.g. 10gbit, 800mbit (bits/s) or 500mbps (bytes/s)"
            ))
        };
        let lower = text.trim().to_ascii_lowercase();
        let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(usage)?;
        let (number, unit) = lower.split_at(split);
        let value: f64 = number.parse().map_err(|_| usage())?;
        let scale = UNITS.iter().find(|(name, _)| *name == unit).map(|(_, s)| *s).ok_or_else(usage)?;
        let bits = value * scale;
        // Compared as floats first: a huge value must not wrap when cast.
        if !(MIN_BITS as f64..=MAX_BITS as f64).contains(&bits) {
            return Err(Error::InvalidSpec(format!("rate {text:?} is out of range: give between 1kbit and 1tbit")));
        }
        Rate::from_bits_per_second(bits.round() as u64)
    }
}

/// The largest decimal bit unit that states the rate exactly, as tc would take it.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, scale) =
            [("tbit", 1_000_000_000_000), ("gbit", 1_000_000_000), ("mbit", 1_000_000), ("kbit", 1_000)]
                .into_iter()
                .find(|(_, scale)| self.0.is_multiple_of(*scale))
                .unwrap_or(("bit", 1));
        write!(f, "{}{unit}", self.0 / scale)
    }
}

/// Token-bucket settings for one direction of one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    pub rate: Rate,
    /// Bucket size: the larger of 4 ms at the rate (covers timer slack at
    /// HZ=250, so the shaper reaches its rate) and 4 full frames (a bucket
    /// smaller than one frame would never let a jumbo frame through).
    pub burst_bytes: u64,
    /// How long a packet may wait in the queue before tail drop, like a
    /// switch port's buffer: enough for TCP to fill the link, short enough
    /// that round trips stay realistic.
    pub latency_ms: u32,
}

const ETHERNET_HEADER: u64 = 14;
const BURST_TIME_DIVISOR: u64 = 250; // 1/250 s = 4 ms
const BURST_FRAMES: u64 = 4;
const LATENCY_MS: u32 = 20;

impl Tbf {
    pub fn for_link(rate: Rate, mtu: u32) -> Tbf {
        let by_time = rate.bytes_per_second() / BURST_TIME_DIVISOR;
        let by_frames = BURST_FRAMES * (u64::from(mtu) + ETHERNET_HEADER);
        Tbf { rate, burst_bytes: by_time.max(by_frames), latency_ms: LATENCY_MS }
    }

    /// Replaces the root qdisc of `dev` in namespace `netns`.
    pub fn apply(&self, netns: &str, dev: &str) -> Result<(), Error> {
        run_tool(
            "tc",
            &[
                "-n",
                netns,
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                &format!("{}bit", self.rate.bits_per_second()),
                "burst",
                &self.burst_bytes.to_string(),
                "latency",
                &format!("{}ms", self.latency_ms),
            ],
        )
        .map(drop)
    }
}

/// The rate of the root tbf qdisc on `dev` as tc prints it ("200Mbit"), if any.
pub fn shaped_rate(netns: &str, dev: &str) -> Option<String> {
    let text = run_tool("tc", &["-n", netns, "qdisc", "show", "dev", dev, "root"]).ok()?;
    let mut words = text.split_whitespace().skip_while(|w| *w != "rate");
    words.next()?;
    words.next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(text: &str) -> u64 {
        text.parse::<Rate>().unwrap_or_else(|e| panic!("{text}: {e}")).bits_per_second()
    }

    #[test]
    fn parses_tc_bit_and_byte_units() {
        assert_eq!(bits("10gbit"), 10_000_000_000);
        assert_eq!(bits("800mbit"), 800_000_000);
        assert_eq!(bits("500mbps"), 4_000_000_000);
        assert_eq!(bits("200MBit"), 200_000_000);
        assert_eq!(bits("1.5gbit"), 1_500_000_000);
        assert_eq!(bits("64kbit"), 64_000);
        assert_eq!(bits("1mibit"), 1_048_576);
        assert_eq!(bits("2kibps"), 16_384);
        assert_eq!(bits(" 1tbit "), 1_000_000_000_000);
    }

    #[test]
    fn rejects_missing_units_garbage_and_out_of_range() {
        for bad in ["", "200", "fast", "mbit", "10 gbit", "10gbits", "1.2.3mbit", "-5mbit", "10gb"] {
            let e = bad.parse::<Rate>().unwrap_err().to_string();
            assert!(e.contains("tc unit") && e.contains("800mbit"), "{bad}: {e}");
        }
        for bad in ["0bit", "999bit", "2tbit", "99999999999999999999999tbps"] {
            let e = bad.parse::<Rate>().unwrap_err().to_string();
            assert!(e.contains("out of range"), "{bad}: {e}");
        }
    }

    #[test]
    fn displays_in_a_form_that_parses_back() {
        for (text, shown) in
            [("200mbit", "200mbit"), ("500mbps", "4gbit"), ("1mibit", "1048576bit"), ("1500kbit", "1500kbit")]
        {
            let rate: Rate = text.parse().unwrap();
            assert_eq!(rate.to_string(), shown);
            assert_eq!(shown.parse::<Rate>().unwrap(), rate);
        }
    }

    #[test]
    fn burst_covers_four_milliseconds_or_four_frames() {
        let fast = Tbf::for_link("10gbit".parse().unwrap(), 9000);
        assert_eq!(fast.burst_bytes, 5_000_000);
        let slow = Tbf::for_link("10mbit".parse().unwrap(), 9000);
        assert_eq!(slow.burst_bytes, 4 * 9014);
        assert_eq!(slow.latency_ms, 20);
    }
}
