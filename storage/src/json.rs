//! Strict JSON parsing for publish frames (to be written).
