//! Sequencing and group commit: the writer threads ([`writer`]) and the messages shards send them.

pub mod writer;
