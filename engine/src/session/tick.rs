//! [`Tick`]: a delivering session's one timer, shared by its own clock (keepalive pings, SSE
//! comment pings) and the stall deadline of the write in flight.
//!
//! A write that the socket does not take within `write_timeout_s` ends the session
//! (`deliver::write`). Timing each write with its own timer cost a timer created, registered in
//! the wheel and dropped per write — at one frame per write (1,000 subscribers × 100 rows/s) that
//! was ~5 % of a shard's CPU plus a 1.5 KiB allocation per write. Instead each session keeps one
//! [`rt::Timer`], armed for the earliest instant anything of the
//! session may be due and re-armed only when it fires: a write reads the clock once, sets its
//! deadline (a plain `Instant`) and brings the timer forward only when it would fire later than
//! that — which it never does while the keepalive's next instant (≤ its interval) or an earlier
//! write's deadline is sooner. When the timer fires during a write, the write checks its own
//! deadline and either gives up or re-arms the timer for it; the session then looks at its own
//! clock ([`Tick::take_fired`]) before it waits again. Runs on the session's shard.

use std::future::Future;
use std::time::Instant;

use corecast_net::rt::{self, Timer};

/// One session's timer (see the module docs). Starts unarmed: a session without keepalive and
/// without a write in flight waits on nothing but its signal.
#[derive(Default)]
pub struct Tick {
    /// Armed: it fires at its deadline.
    armed: Option<Timer>,
    /// Fired and not re-armed yet: kept to be re-armed in place.
    spent: Option<Timer>,
    /// It fired since the session last asked: something of the session's own may be due.
    fired: bool,
}

impl Tick {
    /// An unarmed tick.
    pub fn new() -> Tick {
        Tick::default()
    }

    /// Makes sure it fires at `at` at the latest: arms it when unarmed, brings it forward when
    /// it would fire later; an earlier deadline is kept (its firing is a spurious look, no more).
    pub fn by(&mut self, at: Instant) {
        match &mut self.armed {
            Some(t) => {
                if t.deadline() > at {
                    t.reset(at);
                }
            }
            None => {
                let t = match self.spent.take() {
                    Some(mut t) => {
                        t.reset(at);
                        t
                    }
                    None => Timer::at(at),
                };
                self.armed = Some(t);
            }
        }
    }

    /// Runs `fut` unless the tick fires first: `Some(output)`, or `None` when it fired (then
    /// `fut` is dropped; the tick is unarmed until the next [`Tick::by`] and
    /// [`Tick::take_fired`] says it fired). When both are ready at once, `fut` wins.
    pub async fn until<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        let Some(t) = self.armed.as_mut() else {
            return Some(fut.await);
        };
        match rt::until(fut, t.wait()).await {
            Some(out) => Some(out),
            None => {
                self.spent = self.armed.take();
                self.fired = true;
                None
            }
        }
    }

    /// Whether it fired since the last call (and lowers that).
    pub fn take_fired(&mut self) -> bool {
        std::mem::take(&mut self.fired)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn fires_by_the_earliest_deadline_and_rearms_in_place() {
        let mut rt = rt::build_runtime(64).expect("runtime");
        rt.block_on(async {
            let mut tick = Tick::new();
            // unarmed: the future runs to its end
            assert_eq!(tick.until(async { 3 }).await, Some(3));
            let t0 = Instant::now();
            tick.by(t0 + Duration::from_secs(60));
            // brought forward, not pushed back
            tick.by(t0 + Duration::from_millis(30));
            tick.by(t0 + Duration::from_secs(90));
            let out = tick.until(rt::sleep(Duration::from_secs(10))).await;
            assert_eq!(out, None);
            assert!(t0.elapsed() >= Duration::from_millis(30));
            assert!(t0.elapsed() < Duration::from_secs(5));
            assert!(tick.take_fired());
            assert!(!tick.take_fired());
            // spent until re-armed: waits on the future alone
            assert_eq!(
                tick.until(rt::sleep(Duration::from_millis(5))).await,
                Some(())
            );
            tick.by(Instant::now() + Duration::from_millis(10));
            assert_eq!(tick.until(rt::sleep(Duration::from_secs(10))).await, None);
            // a future that is ready wins over a tick that is due
            tick.by(Instant::now());
            assert_eq!(tick.until(async { 7 }).await, Some(7));
        });
    }
}
