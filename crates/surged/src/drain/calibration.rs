//! The buffer's rates the policy plans with (Eq. 5.1 of [Sung20, ch. 5]):
//! given with `--drain-rates`, else the ones an earlier start measured and
//! kept in the drain state (`Calibration`), else measured now
//! (`crate::calibrate`, a couple of seconds of writes and copies in daemon
//! 0's buffer and the PFS). Kept in the state either way, so a restart of
//! daemon 0 plans with the same figures.

use super::manager::DrainManager;
use super::plan::RateSource;
use crate::calibrate::CalibrationError;
use crate::failure::Failure;
use crate::logging::log;
use std::time::Duration;
use surge_bbos::thresholds::Bandwidths;
use surge_bbos_state::Calibration;

/// How long measuring the rates may take.
const BUDGET: Duration = Duration::from_secs(2);

fn calibration_of(r: &Bandwidths) -> Calibration {
    let [write_max, write_min, read_max, read_min] =
        [r.write_max, r.write_min, r.read_max, r.read_min].map(|v| v as u64);
    Calibration { write_max, write_min, read_max, read_min }
}

fn bandwidths_of(c: &Calibration) -> Bandwidths {
    let [write_max, write_min, read_max, read_min] =
        [c.write_max, c.write_min, c.read_max, c.read_min].map(|v| v as f64);
    Bandwidths { write_max, write_min, read_max, read_min }
}

impl DrainManager {
    /// The rates to plan with, and where they came from (see the module doc).
    /// `settle_noisy`: a measurement the model cannot use is repaired
    /// (`calibrate::repaired`) rather than refused, after the caller tried
    /// enough times for a quiet moment: data must leave the buffer anyway.
    pub(super) fn rates(&self, settle_noisy: bool) -> Result<(Bandwidths, RateSource), Failure> {
        if let Some(given) = self.setting.config.rates {
            self.with_state("record the calibration", |s| s.set_calibration(&calibration_of(&given)));
            return Ok((given, RateSource::Given));
        }
        let stored = self.with_state("read the calibration", |s| s.calibration()).flatten();
        if let Some(stored) = stored.filter(|c| c.read_min < c.read_max && c.write_min <= c.write_max && c.read_min > 0)
        {
            return Ok((bandwidths_of(&stored), RateSource::Stored));
        }
        let mb = |rate: f64| rate / 1e6;
        let (measured, source) = match crate::calibrate::calibrate(&self.setting.buffer, &self.setting.pfs_dir, BUDGET)
        {
            Ok(measured) => (measured, RateSource::Measured),
            Err(CalibrationError::Unusable { rates, why }) if settle_noisy => {
                let repaired = crate::calibrate::repaired(rates).ok_or_else(|| {
                    Failure::new(
                        surge_proto::Errno::EIO,
                        format!("calibration measured a rate of zero ({why}); give the rates with --drain-rates"),
                    )
                })?;
                log!(
                    Warn,
                    0,
                    "drain: the buffer's rates stay inconsistent on this machine ({why}); planning with them \
                     repaired: a stream is taken never to be faster beside the other than alone (give \
                     --drain-rates for exact ones)"
                );
                (repaired, RateSource::Noisy)
            }
            Err(why) => {
                return Err(Failure::new(surge_proto::Errno::EIO, format!("{why}; give the rates with --drain-rates")))
            }
        };
        log!(
            Info,
            0,
            "drain: measured the buffer's rates: writes {:.1} MB/s alone, {:.1} beside demotion; demotion {:.1} MB/s \
             alone, {:.1} beside writes",
            mb(measured.write_max),
            mb(measured.write_min),
            mb(measured.read_max),
            mb(measured.read_min)
        );
        self.with_state("record the calibration", |s| s.set_calibration(&calibration_of(&measured)));
        Ok((measured, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_is_kept_in_whole_bytes_per_second() {
        let rates = Bandwidths { write_max: 40e6, write_min: 30e6, read_max: 16e6, read_min: 1.5e6 };
        assert_eq!(bandwidths_of(&calibration_of(&rates)), rates);
    }
}
