//! A null checksum stage, the template for a new one (a pipeline that
//! spreads a batch of blocks over threads, say; [Darshan]'s null module is
//! the model): copy this file into
//! `checksum.rs` or a module of its own, rename the type, compute the
//! checksums your way, and register it with one entry in
//! [`crate::stages::CHECKSUMS`] (docs/architecture.md, "Adding a stage").
//! It is compiled with the crate's tests, which start a daemon on it.
//!
//! A checksum stage cannot do nothing: clients check every reply against
//! its CRC-32C, and every block at rest keeps one, so whatever it does it
//! must give the CRC-32C of the bytes. This template hands both calls to
//! the default stage; replace their bodies.

use crate::checksum::{Batch, ChecksumStage, InlineCrc32c, Running};

/// Computes what [`InlineCrc32c`] computes, by asking it.
#[derive(Default)]
pub struct NullChecksum;

impl ChecksumStage for NullChecksum {
    /// A running CRC-32C, fed a request or reply body in pieces as they
    /// arrive: the place to start work on other threads.
    fn begin(&self) -> Box<dyn Running> {
        InlineCrc32c.begin()
    }

    /// The CRC-32C of every block of every batch (a request's blocks, or
    /// several requests'), a short last block counting as padded with
    /// zeros: the place to spread the work over threads. Return once all
    /// are in.
    fn sum_blocks(&self, batches: &mut [Batch<'_>]) {
        InlineCrc32c.sum_blocks(batches)
    }
}
