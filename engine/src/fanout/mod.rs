//! Fan-out: committed batches framed once ([`batch`]), held per shard in a ring ([`ring`]), and
//! the wake-up flag sessions wait on ([`signal`]).

pub mod batch;
pub mod ring;
pub mod signal;
