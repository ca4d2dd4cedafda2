//! The adaptive demotion thresholds of [Sung20, §5.2.3]: from the data a
//! period will write (DWPP), the buffer capacity S and the device rates,
//! when demotion must start (on DWSF, the data written so far in the
//! period) and when it must run at full speed, so that the period's
//! checkpoints never find the buffer full.
//!
//! The read/write interference is the line of Eq. 5.1, BW_w = m·BW_r + b:
//! checkpoints write at Bwmax while demotion reads at Brmin and at Bwmin
//! while it reads at Brmax. C = DWPP − S is what must be demoted while
//! checkpoints run. Three patterns:
//! 1. C ≤ 0: demote only when the buffer is idle;
//! 2. Eq. 5.2: write at Bwmax for t_c, then ramp demotion Brmin→Brmax over
//!    t_dd while the period's writes end;
//! 3. Eq. 5.3: ramp from the first byte over t_dd, then Brmax for t_ds.
//!
//! Each pair of equations is linear in its two unknowns, so both are solved
//! in closed form (Cramer's rule). Between S and S/(1 − Brmin/Bwmax) Eq. 5.2
//! gives a negative ramp (Brmin alone already demotes more than C): there
//! demotion runs at Brmin from DWSF = DWPP − C·Bwmax/Brmin on, with no ramp.
//! Past S/(1 − Brmax/Bwmin) no schedule exists ([`SolveError::Infeasible`]).

use std::fmt;

/// Eq. 5.1: the checkpoint write rate the buffer gives while demotion reads at a rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interference {
    pub m: f64,
    pub b: f64,
}

impl Interference {
    /// The line through the two measured end points (Brmin, Bwmax) and (Brmax, Bwmin).
    pub fn through(bw: &Bandwidths) -> Interference {
        let m = (bw.write_min - bw.write_max) / (bw.read_max - bw.read_min);
        Interference { m, b: bw.write_max - m * bw.read_min }
    }

    pub fn write_rate(&self, read_rate: f64) -> f64 {
        self.m * read_rate + self.b
    }
}

/// Checkpoint write (Bw) and demotion read (Br) rates of the buffer, bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidths {
    pub write_max: f64,
    pub write_min: f64,
    pub read_max: f64,
    pub read_min: f64,
}

const MB: f64 = 1e6;

impl Bandwidths {
    /// Reads `BWMAX,BWMIN,BRMAX,BRMIN` in MB/s (1 MB = 10^6 bytes), as
    /// `surge start --drain-rates` and `surged --drain-rates` take them.
    pub fn parse_mbps(text: &str) -> Result<Bandwidths, String> {
        let usage = "expected BWMAX,BWMIN,BRMAX,BRMIN in MB/s, such as 40,30,16,1";
        let figures: Vec<f64> = text
            .split(',')
            .map(|part| part.trim().parse::<f64>().map_err(|_| format!("{usage}: {:?} is not a number", part.trim())))
            .collect::<Result<_, _>>()?;
        let [write_max, write_min, read_max, read_min] = figures[..] else {
            return Err(format!("{usage}: got {} figure(s)", figures.len()));
        };
        let rates = Bandwidths {
            write_max: write_max * MB,
            write_min: write_min * MB,
            read_max: read_max * MB,
            read_min: read_min * MB,
        };
        rates.check().map(|()| rates)
    }

    /// The rates describe an interference line (Eq. 5.1): writes lose speed as demotion reads faster.
    pub fn check(&self) -> Result<(), String> {
        let all = [self.write_max, self.write_min, self.read_max, self.read_min];
        if all.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err("every drain rate must be a positive number of MB/s".into());
        }
        if self.write_min > self.write_max {
            return Err(format!(
                "BWMIN ({} MB/s, writes beside a full-speed demotion) cannot exceed BWMAX ({} MB/s, writes alone)",
                self.write_min / MB,
                self.write_max / MB
            ));
        }
        if self.read_min >= self.read_max {
            return Err(format!(
                "BRMIN ({} MB/s, demotion beside full-speed writes) must be below BRMAX ({} MB/s, demotion alone)",
                self.read_min / MB,
                self.read_max / MB
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Demote only while no checkpoint runs.
    IdleOnly,
    /// Demote alongside checkpoints from a DWSF threshold on (Eq. 5.2).
    Partial,
    /// Demote alongside checkpoints from the period's first byte (Eq. 5.3).
    Always,
}

/// The solved schedule of one period; rates in bytes/s, thresholds on DWSF in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    pub pattern: Pattern,
    /// DWSF at which demotion starts alongside checkpoints (infinite for [`Pattern::IdleOnly`]).
    pub start: f64,
    /// DWSF at which demotion reaches `top_rate`.
    pub full: f64,
    /// The rate the ramp ends at: Brmax, or Brmin when no ramp is needed.
    pub top_rate: f64,
    pub read_min: f64,
    /// Seconds at Bwmax before the ramp, of the ramp, and at Brmax after it.
    pub t_c: f64,
    pub t_dd: f64,
    pub t_ds: f64,
}

impl Thresholds {
    /// Seconds from the period's first checkpoint byte to its last, with no idle time.
    pub fn writes_end(&self) -> f64 {
        self.t_c + self.t_dd + self.t_ds
    }

    /// The demotion rate while a checkpoint runs at this DWSF (0: none).
    /// The ramp is linear in DWSF: the rate follows the data written, which
    /// the throttler sees, rather than a clock it would have to keep.
    pub fn demotion_rate(&self, dwsf: f64) -> f64 {
        if dwsf < self.start {
            0.0
        } else if dwsf >= self.full || self.full <= self.start {
            self.top_rate
        } else {
            self.read_min + (self.top_rate - self.read_min) * (dwsf - self.start) / (self.full - self.start)
        }
    }

    /// The bytes the schedule has demoted once checkpoints have written
    /// `dwsf`: the integral over the bytes written of the demotion rate over
    /// the write rate the interference line gives beside it (Eqs. 5.2–5.3
    /// read in DWSF instead of time). At the period's DWPP it is what the
    /// solver planned to demote alongside the checkpoints.
    pub fn demoted_by(&self, dwsf: f64, line: &Interference, write_max: f64) -> f64 {
        const STEPS: u32 = 256;
        let step = dwsf.max(0.0) / f64::from(STEPS);
        (0..STEPS)
            .map(|i| {
                let rate = self.demotion_rate((f64::from(i) + 0.5) * step);
                let write = if rate > 0.0 { line.write_rate(rate).min(write_max) } else { write_max };
                rate / write * step
            })
            .sum()
    }

    /// Eq. 5.3's last constraint: whether the rest of the period, at `drain_rate`,
    /// demotes a full buffer before the next period begins.
    pub fn drains_within(&self, period: f64, drain_rate: f64, capacity: f64) -> bool {
        (period - self.writes_end()) * drain_rate >= capacity
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum SolveError {
    /// A rate or size that cannot describe a buffer (named, with the rule it breaks).
    InvalidInput(String),
    /// No demotion schedule keeps the buffer from filling: `dwpp` exceeds `max_dwpp`.
    Infeasible { dwpp: f64, max_dwpp: f64 },
}

impl fmt::Display for SolveError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            SolveError::InvalidInput(why) => write!(f, "invalid demotion model input: {why}"),
            SolveError::Infeasible { dwpp, max_dwpp } => write!(
                f,
                "a period writing {dwpp:.0} bytes cannot be absorbed (at most {max_dwpp:.0} with these rates): \
                 admit fewer checkpoints per period or lengthen the period"
            ),
        }
    }
}

impl std::error::Error for SolveError {}

fn check(bw: &Bandwidths, capacity: f64) -> Result<(), SolveError> {
    let bad = |why: &str| Err(SolveError::InvalidInput(why.to_string()));
    let all = [bw.write_max, bw.write_min, bw.read_max, bw.read_min, capacity];
    if all.iter().any(|x| !x.is_finite() || *x <= 0.0) {
        return bad("rates and capacity must be finite and above zero");
    }
    if bw.write_max < bw.write_min {
        return bad("Bwmax must be at least Bwmin");
    }
    if bw.read_max <= bw.read_min {
        return bad("Brmax must exceed Brmin");
    }
    Ok(())
}

/// The largest DWPP any schedule absorbs: S / (1 − Brmax/Bwmin) (infinite when Brmax ≥ Bwmin).
pub fn max_dwpp(bw: &Bandwidths, capacity: f64) -> f64 {
    if bw.read_max >= bw.write_min {
        f64::INFINITY
    } else {
        capacity / (1.0 - bw.read_max / bw.write_min)
    }
}

/// Solves x·a1 + y·b1 = r1, x·a2 + y·b2 = r2 (Cramer's rule; the callers'
/// determinants are non-zero whenever [`check`] passed).
fn solve2(a1: f64, b1: f64, r1: f64, a2: f64, b2: f64, r2: f64) -> (f64, f64) {
    let det = a1 * b2 - b1 * a2;
    ((r1 * b2 - b1 * r2) / det, (a1 * r2 - r1 * a2) / det)
}

/// The schedule for a period that writes `dwpp` bytes into a buffer of `capacity` bytes.
pub fn solve(dwpp: f64, capacity: f64, bw: &Bandwidths) -> Result<Thresholds, SolveError> {
    check(bw, capacity)?;
    if !dwpp.is_finite() || dwpp < 0.0 {
        return Err(SolveError::InvalidInput("DWPP must be finite and not negative".into()));
    }
    let concurrent = dwpp - capacity;
    let base = Thresholds {
        pattern: Pattern::IdleOnly,
        start: f64::INFINITY,
        full: f64::INFINITY,
        top_rate: bw.read_max,
        read_min: bw.read_min,
        t_c: dwpp / bw.write_max,
        t_dd: 0.0,
        t_ds: 0.0,
    };
    if concurrent <= 0.0 {
        return Ok(base);
    }
    let max = max_dwpp(bw, capacity);
    if dwpp > max {
        return Err(SolveError::Infeasible { dwpp, max_dwpp: max });
    }
    let ramp_write = (bw.write_max + bw.write_min) / 2.0;
    let ramp_read = (bw.read_max + bw.read_min) / 2.0;
    // Brmin alone over the whole period already demotes C: no ramp needed.
    if concurrent * bw.write_max <= bw.read_min * dwpp {
        let t_low = concurrent / bw.read_min;
        let start = dwpp - t_low * bw.write_max;
        return Ok(Thresholds {
            pattern: Pattern::Partial,
            start,
            full: start,
            top_rate: bw.read_min,
            t_c: start / bw.write_max,
            t_ds: t_low,
            ..base
        });
    }
    // Eq. 5.2: Bwmax·t_c + ramp_write·t_dd = DWPP; Brmin·t_c + ramp_read·t_dd = C.
    let (t_c, t_dd) = solve2(bw.write_max, ramp_write, dwpp, bw.read_min, ramp_read, concurrent);
    if t_c >= 0.0 && t_dd >= 0.0 {
        return Ok(Thresholds { pattern: Pattern::Partial, start: bw.write_max * t_c, full: dwpp, t_c, t_dd, ..base });
    }
    // Eq. 5.3: ramp_write·t_dd + Bwmin·t_ds = DWPP; ramp_read·t_dd + Brmax·t_ds = C.
    let (t_dd, t_ds) = solve2(ramp_write, bw.write_min, dwpp, ramp_read, bw.read_max, concurrent);
    if t_dd >= 0.0 && t_ds >= 0.0 {
        return Ok(Thresholds {
            pattern: Pattern::Always,
            start: 0.0,
            full: ramp_write * t_dd,
            t_c: 0.0,
            t_dd,
            t_ds,
            ..base
        });
    }
    Err(SolveError::Infeasible { dwpp, max_dwpp: max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_in_megabytes_per_second() {
        let r = Bandwidths::parse_mbps("40, 30,16,1.5").unwrap();
        assert_eq!((r.write_max, r.write_min, r.read_max, r.read_min), (40e6, 30e6, 16e6, 1.5e6));
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for (text, says) in [
            ("40,30,16", "got 3 figure(s)"),
            ("40,30,x,1", "\"x\" is not a number"),
            ("40,30,16,0", "positive"),
            ("30,40,16,1", "BWMIN (40 MB/s"),
            ("40,30,16,16", "BRMIN (16 MB/s"),
            ("", "is not a number"),
        ] {
            let error = Bandwidths::parse_mbps(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    const GB: f64 = 1e9;
    const S: f64 = 3200.0 * GB;

    /// The evaluation's rates [Sung20, §5.3.1].
    fn evaluation() -> Bandwidths {
        Bandwidths { write_max: 3.56 * GB, write_min: 3.0 * GB, read_max: 1.6 * GB, read_min: 0.08 * GB }
    }

    fn close(a: f64, b: f64, tolerance: f64) {
        assert!((a - b).abs() <= tolerance, "{a} is not within {tolerance} of {b}");
    }

    #[test]
    fn the_interference_line_through_the_seed_end_points_has_its_slope_and_intercept() {
        let line = Interference::through(&evaluation());
        close(line.m, -0.3684, 1e-4);
        close(line.b / GB, 3.5895, 1e-4);
        close(line.write_rate(1.6 * GB) / GB, 3.0, 1e-9);
    }

    #[test]
    fn by_the_period_s_last_byte_the_schedule_has_demoted_what_cannot_stay() {
        let bw = evaluation();
        let line = Interference::through(&bw);
        for share in [1.2, 1.3, 1.6, 1.9, 2.1] {
            let t = solve(share * S, S, &bw).unwrap();
            let planned = t.demoted_by(share * S, &line, bw.write_max);
            // The ramp is linear in DWSF, the solver's in time; and no Brmin before the ramp.
            close(planned / (share * S - S), 1.0, 0.05);
            assert!(t.demoted_by(share * S / 2.0, &line, bw.write_max) < planned / 2.0, "{share}: demotion grows");
        }
    }

    #[test]
    fn a_period_that_fits_the_buffer_demotes_only_when_idle() {
        let t = solve(S, S, &evaluation()).unwrap();
        assert_eq!(t.pattern, Pattern::IdleOnly);
        assert_eq!(t.demotion_rate(0.99 * S), 0.0);
    }

    #[test]
    fn the_consistency_table_rows_come_out_of_the_solver() {
        // (DWPP in S, pattern, t_c, t_dd, t_ds, start GB, full GB, writes end), worked out by hand
        // from the evaluation parameters with Eqs. 5.2 and 5.3.
        let rows = [
            (1.2, Pattern::Partial, 413.0, 723.0, 0.0, 1470.0, 3840.0, 1135.0),
            (1.3, Pattern::Partial, 127.0, 1131.0, 0.0, 451.0, 4160.0, 1257.0),
            (1.6, Pattern::Always, 0.0, 891.0, 732.0, 0.0, 2924.0, 1623.0),
            (1.9, Pattern::Always, 0.0, 399.0, 1591.0, 0.0, 1308.0, 1989.0),
            (2.1, Pattern::Always, 0.0, 70.0, 2163.0, 0.0, 231.0, 2233.0),
        ];
        for (share, pattern, t_c, t_dd, t_ds, start, full, end) in rows {
            let t = solve(share * S, S, &evaluation()).unwrap();
            assert_eq!(t.pattern, pattern, "pattern at {share} S");
            close(t.t_c, t_c, 1.0);
            close(t.t_dd, t_dd, 1.0);
            close(t.t_ds, t_ds, 1.0);
            close(t.start / GB, start, 1.0);
            close(t.full / GB, full, 1.0);
            close(t.writes_end(), end, 1.0);
        }
    }

    #[test]
    fn the_pattern_boundaries_and_the_maximum_match_the_closed_forms() {
        close(max_dwpp(&evaluation(), S) / S, 2.143, 1e-3);
        assert_eq!(solve(1.34 * S, S, &evaluation()).unwrap().pattern, Pattern::Partial);
        assert_eq!(solve(1.35 * S, S, &evaluation()).unwrap().pattern, Pattern::Always);
        // Just above S, Brmin from a late threshold suffices: no ramp.
        let t = solve(1.01 * S, S, &evaluation()).unwrap();
        assert_eq!((t.pattern, t.top_rate), (Pattern::Partial, 0.08 * GB));
        close(t.t_ds * 0.08 * GB, 0.01 * S, 1.0);
    }

    #[test]
    fn the_drain_constraint_fails_from_one_point_nine_buffers_at_brmax() {
        // Eq. 5.3's last line with Bdmax = Brmax and the 3800 s period (erratum 13).
        assert!(solve(1.6 * S, S, &evaluation()).unwrap().drains_within(3800.0, 1.6 * GB, S));
        assert!(!solve(1.9 * S, S, &evaluation()).unwrap().drains_within(3800.0, 1.6 * GB, S));
    }

    #[test]
    fn the_ramp_rises_linearly_from_brmin_to_brmax() {
        let t = solve(1.6 * S, S, &evaluation()).unwrap();
        close(t.demotion_rate(0.0), 0.08 * GB, 1.0);
        close(t.demotion_rate(t.full / 2.0), 0.84 * GB, 1.0);
        close(t.demotion_rate(t.full * 2.0), 1.6 * GB, 1.0);
    }

    #[test]
    fn too_much_data_per_period_is_an_infeasible_error_not_a_panic() {
        match solve(2.2 * S, S, &evaluation()) {
            Err(SolveError::Infeasible { max_dwpp, .. }) => close(max_dwpp / S, 2.143, 1e-3),
            other => panic!("expected infeasible, got {other:?}"),
        }
    }

    #[test]
    fn nonsense_rates_are_an_input_error_not_a_panic() {
        let zero = Bandwidths { read_min: 0.0, ..evaluation() };
        let inverted = Bandwidths { read_max: 0.01 * GB, ..evaluation() };
        for bw in [zero, inverted] {
            assert!(matches!(solve(1.5 * S, S, &bw), Err(SolveError::InvalidInput(_))));
        }
        assert!(matches!(solve(f64::NAN, S, &evaluation()), Err(SolveError::InvalidInput(_))));
        assert!(solve(1.5 * S, 0.0, &evaluation()).unwrap_err().to_string().contains("above zero"));
    }

    #[test]
    fn a_pfs_as_fast_as_the_throttled_buffer_makes_every_period_feasible() {
        let bw = Bandwidths { read_max: 3.0 * GB, ..evaluation() };
        assert_eq!(max_dwpp(&bw, S), f64::INFINITY);
        assert!(solve(10.0 * S, S, &bw).is_ok());
    }
}
