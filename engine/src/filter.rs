//! `where=` filters, as [`corecast_storage::filter`] defines them: the broker's sessions parse
//! and apply them here, and the client's catch-up applies the same filter to the rows it reads
//! from the published table, so both live in the storage crate.

pub use corecast_storage::filter::{ColumnLookup, Filter};
