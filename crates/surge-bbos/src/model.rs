//! The period model of [Sung20, §5.2.3]: checkpoints and demotion are
//! managed per period; DWSF (data written so far) counts the checkpoint
//! bytes the buffer took in the current period, DWPP (data written per
//! period) is DWSF at a period's end, and the next period's DWPP is
//! predicted from the previous ones to solve its thresholds before it
//! starts.
//!
//! Predictor: the largest DWPP of the last [`HISTORY`] periods. The costs
//! are lopsided: predicting too little starts demotion too late and a
//! checkpoint then waits for space, predicting too much only demotes
//! earlier than needed at a slightly lower write rate. Before any history
//! it predicts the largest feasible DWPP, the most cautious schedule.

use std::collections::VecDeque;

/// Periods the DWPP predictor remembers.
pub const HISTORY: usize = 3;

/// One checkpointing application: its failure rate as a mean time between
/// failures, and the size of each checkpoint it writes once per period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Application {
    pub id: usize,
    pub mtbf: f64,
    pub checkpoint_bytes: u64,
}

/// One checkpoint write request, as the I/O scheduler queues it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    pub at: f64,
    pub app: usize,
}

/// DWSF of the current period and the DWPP of past ones.
#[derive(Clone, Debug, Default)]
pub struct PeriodModel {
    dwsf: u64,
    history: VecDeque<u64>,
}

impl PeriodModel {
    pub fn dwsf(&self) -> u64 {
        self.dwsf
    }

    /// Counts checkpoint bytes the buffer took.
    pub fn wrote(&mut self, bytes: u64) {
        self.dwsf += bytes;
    }

    /// Ends the period: its DWSF becomes a DWPP in the history and DWSF starts again at zero.
    pub fn end_period(&mut self) -> u64 {
        let dwpp = std::mem::take(&mut self.dwsf);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(dwpp);
        dwpp
    }

    /// The next period's DWPP: the largest of the remembered ones, or `cautious` with no history.
    pub fn predicted_dwpp(&self, cautious: f64) -> f64 {
        self.history.iter().max().map_or(cautious, |&d| d as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwsf_becomes_the_periods_dwpp_and_restarts_at_zero() {
        let mut m = PeriodModel::default();
        m.wrote(5);
        m.wrote(7);
        assert_eq!(m.dwsf(), 12);
        assert_eq!(m.end_period(), 12);
        assert_eq!(m.dwsf(), 0);
    }

    #[test]
    fn the_prediction_is_cautious_without_history_then_the_recent_maximum() {
        let mut m = PeriodModel::default();
        assert_eq!(m.predicted_dwpp(99.0), 99.0);
        for dwpp in [10, 30, 20, 15, 12] {
            m.wrote(dwpp);
            m.end_period();
        }
        // 30 has left the three-period window.
        assert_eq!(m.predicted_dwpp(99.0), 20.0);
    }
}
