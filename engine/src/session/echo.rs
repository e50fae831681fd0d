//! The echo endpoint (`/_echo`, off unless `serve --echo`): every data message is sent back
//! as it came. It exists so WebSocket conformance suites (the Autobahn TestSuite, or `kosoku`
//! where there is no Python 2.7: `tests/autobahn/run.sh`) exercise the very codec and io_uring
//! loops that serve streams.

use corecast_net::rt::WriteHalf;
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{encode_close, encode_frame, encode_pong, OpCode};

use super::ws_io::{WsIn, WsReader};
use corecast_net::ws::receiver::Received;

/// Echoes until the peer closes or breaks the protocol.
pub async fn run(mut ws: WsReader, mut wr: WriteHalf) {
    let mut out = Vec::new();
    loop {
        out.clear();
        let done = match ws.next().await {
            WsIn::Frame(Received::Message { binary, data }) => {
                let op = if binary { OpCode::Binary } else { OpCode::Text };
                encode_frame(true, op, &data, None, &mut out);
                false
            }
            WsIn::Frame(Received::Ping(p)) => {
                encode_pong(&p, None, &mut out);
                false
            }
            WsIn::Frame(Received::Pong) => continue,
            WsIn::Frame(Received::Close { code, .. }) => {
                encode_close(code, "", None, &mut out);
                true
            }
            WsIn::Violation { code, reason } => {
                encode_close(Some(CloseCode(code)), &reason, None, &mut out);
                true
            }
            WsIn::Gone => return,
        };
        let (res, back) = wr.write_all(std::mem::take(&mut out)).await;
        out = back;
        if res.is_err() || done {
            let _ = wr.shutdown().await;
            return;
        }
    }
}
