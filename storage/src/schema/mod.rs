//! The JSON Schema subset → Arrow compiler (to be written).
