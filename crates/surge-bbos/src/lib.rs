//! BBOS: data management for an over-subscribed burst buffer [Sung20,
//! ch. 5], as a policy engine and a simulator. The buffer is shared by more
//! checkpoint data per period than it holds; demotion to the PFS runs
//! while jobs checkpoint, at rates a per-period model chooses so that
//! checkpoints do not stall. No daemon code here: the data manager in
//! surged uses these policies (docs/bbos.md).
//!
//! - [`model`]: periods, DWSF and DWPP, and the DWPP predictor;
//! - [`thresholds`]: the three demotion patterns and the threshold solver (Eqs. 5.1–5.3);
//! - [`policy`]: the drain policies (Dedicated, Harmonia MaxEff and MaxBW, BBOS);
//! - [`placement`]: eviction order, direct-to-PFS, the restart cache policies;
//! - [`sim`]: a simulator of checkpointing applications sharing one buffer and one PFS.

pub mod model;
pub mod placement;
pub mod policy;
pub mod sim;
pub mod thresholds;
