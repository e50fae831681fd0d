//! The per-stream SQLite buffer (to be written).
