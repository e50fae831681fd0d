//! (to be written)
mod support;
