//! Protocol 4 messages (to be written).
