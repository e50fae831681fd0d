//! [`OwedPong`]: the pong a WebSocket session owes its peer, bounded to one.
//!
//! A session's reader task notes each ping; its writer sends the pong at its next write. Only
//! the most recent ping is answered: RFC 6455 §5.5.3 lets an endpoint that has not yet answered
//! earlier pings send a pong for the most recently processed one only. So a peer that pings
//! without reading what we send costs at most one pong payload (≤ 125 bytes), never a queue.

use std::cell::RefCell;

use corecast_net::ws::frame::encode_pong;

/// The pong owed to the peer, if any: the payload of the latest ping not yet answered.
#[derive(Default)]
pub struct OwedPong {
    payload: RefCell<Option<Vec<u8>>>,
}

impl OwedPong {
    /// Notes a ping (payload ≤ 125 bytes, as the frame codec enforces), replacing any pong still
    /// owed for an earlier one.
    pub fn owe(&self, ping_payload: Vec<u8>) {
        *self.payload.borrow_mut() = Some(ping_payload);
    }

    /// Whether a pong is owed.
    pub fn is_owed(&self) -> bool {
        self.payload.borrow().is_some()
    }

    /// Appends the owed pong to `out` as one unmasked server frame and forgets it. Returns
    /// whether one was owed.
    pub fn take_into(&self, out: &mut Vec<u8>) -> bool {
        match self.payload.borrow_mut().take() {
            Some(p) => {
                encode_pong(&p, None, out);
                true
            }
            None => false,
        }
    }
}
