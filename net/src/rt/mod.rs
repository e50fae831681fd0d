//! The runtime seam (to be written).
