//! WebSocket (to be written).
