//! HTTP/1.1 (to be written).
