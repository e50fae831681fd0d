//! Publishers: [`publish`], [`Publisher`] and [`Pending`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

use super::conn::{Incoming, WsConn};
use super::error::from_close;
use super::{ClientError, Greeting, PublisherMark, Target};

/// The longest [`Publisher::idle`] goes without looking at what the server sent: a keepalive
/// ping waits at most this long for its pong.
const IDLE_SLICE: Duration = Duration::from_secs(1);

/// Frames a publisher keeps in flight by default (the official client's `max_in_flight`).
pub const DEFAULT_WINDOW: usize = 64;

/// How to publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// `Some(id)`: an exactly-once publisher named `id` (`?publish&publisher=ID`). Frames carry
    /// seqs, starting after the greeting's mark.
    pub publisher: Option<String>,
    /// Frames in flight before [`Publisher::submit`] waits for replies (at least 1).
    pub window: usize,
    /// The `Authorization` header sent with the upgrade (e.g. `Bearer TOKEN`); `None`: the
    /// URL's userinfo (`ws://user:password@host/…`, sent as HTTP Basic), if any.
    pub authorization: Option<String>,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            publisher: None,
            window: DEFAULT_WINDOW,
            authorization: None,
        }
    }
}

type Slot = Rc<RefCell<Option<Result<Vec<Option<u64>>, ClientError>>>>;

/// A submitted frame's acknowledgement, once it arrives: the offsets of its rows (one per row,
/// `None` on a stream with no log, or for an exactly-once duplicate the broker forgot), or why
/// the frame was refused. Resolve it with [`Publisher::wait`].
#[derive(Debug, Clone)]
pub struct Pending {
    slot: Slot,
    rows: usize,
    seq: Option<u64>,
}

impl Pending {
    /// Whether the reply arrived.
    pub fn is_done(&self) -> bool {
        self.slot.borrow().is_some()
    }

    /// The reply, when it arrived (without waiting).
    pub fn result(&self) -> Option<Result<Vec<Option<u64>>, ClientError>> {
        self.slot.borrow().clone()
    }

    /// Rows in the frame.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The frame's first seq (exactly-once publishers).
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }
}

/// An open publisher connection.
pub struct Publisher {
    ws: WsConn,
    greeting: Greeting,
    window: usize,
    in_flight: VecDeque<Pending>,
    next_seq: Option<u64>,
    broken: Option<ClientError>,
    frame: Vec<u8>,
    target: Target,
}

/// Opens a publisher on `url` (`ws://HOST:PORT/STREAM`) and waits for the greeting.
pub async fn publish(url: &str, opts: PublishOptions) -> Result<Publisher, ClientError> {
    let mut target = Target::parse(url)?;
    if let Some(a) = &opts.authorization {
        target.authorization = Some(a.clone());
    }
    if opts.window == 0 {
        return Err(ClientError::Usage(
            "the publish window must be at least 1".into(),
        ));
    }
    let mut query: Vec<(&str, Option<&str>)> = vec![("publish", None)];
    if let Some(id) = &opts.publisher {
        if id.is_empty() || id.len() > 128 {
            return Err(ClientError::Usage(format!(
                "a publisher id is 1 to 128 bytes of UTF-8; got {}",
                id.len()
            )));
        }
        query.push(("publisher", Some(id)));
    }
    let addr = target.resolve()?;
    let mut ws = WsConn::open(addr, &target, &target.path_and_query(&query)).await?;
    let greeting = ws.greeting().await?;
    let next_seq = match (&opts.publisher, &greeting.publisher) {
        (None, _) => None,
        (Some(_), Some(mark)) => Some(mark.last_seq + 1),
        (Some(_), None) => {
            ws.send_close(1000).await;
            return Err(ClientError::ExactlyOnceUnavailable {
                why: "broker".into(),
            });
        }
    };
    Ok(Publisher {
        ws,
        greeting,
        window: opts.window,
        in_flight: VecDeque::new(),
        next_seq,
        broken: None,
        frame: Vec::new(),
        target,
    })
}

impl Publisher {
    /// The greeting.
    pub fn greeting(&self) -> &Greeting {
        &self.greeting
    }

    /// The URL published to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The exactly-once mark the greeting reported (what already landed for this id).
    pub fn mark(&self) -> Option<&PublisherMark> {
        self.greeting.publisher.as_ref()
    }

    /// The seq the next frame will carry (exactly-once only).
    pub fn next_seq(&self) -> Option<u64> {
        self.next_seq
    }

    /// Sets the seq of the next frame (exactly-once only), e.g. to re-send after a rejection.
    pub fn set_next_seq(&mut self, seq: u64) {
        if self.next_seq.is_some() {
            self.next_seq = Some(seq.max(1));
        }
    }

    /// Frames sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Sends one row (a JSON object's text) and waits for its offset.
    pub async fn send(&mut self, row: &str) -> Result<Option<u64>, ClientError> {
        let p = self.submit(row).await?;
        let offsets = self.wait(&p).await?;
        if offsets.len() != 1 {
            return Err(ClientError::Protocol(format!(
                "one row acknowledged with {} offsets",
                offsets.len()
            )));
        }
        Ok(offsets[0])
    }

    /// Sends a batch (one transaction: every row lands or none) and waits for its offsets.
    pub async fn send_batch<S: AsRef<str>>(
        &mut self,
        rows: &[S],
    ) -> Result<Vec<Option<u64>>, ClientError> {
        let p = self.submit_batch(rows).await?;
        self.wait(&p).await
    }

    /// Sends one row without waiting for its ack (waiting only while the window is full).
    pub async fn submit(&mut self, row: &str) -> Result<Pending, ClientError> {
        self.submit_rows(&[row], false).await
    }

    /// Sends a batch frame without waiting for its ack (waiting only while the window is full).
    pub async fn submit_batch<S: AsRef<str>>(
        &mut self,
        rows: &[S],
    ) -> Result<Pending, ClientError> {
        self.submit_rows(rows, true).await
    }

    async fn submit_rows<S: AsRef<str>>(
        &mut self,
        rows: &[S],
        as_list: bool,
    ) -> Result<Pending, ClientError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if rows.is_empty() {
            return Err(ClientError::Usage("a batch needs at least one row".into()));
        }
        for r in rows {
            if !r.as_ref().trim_start().starts_with('{') {
                return Err(ClientError::Usage("a row is a JSON object".into()));
            }
        }
        while self.in_flight.len() >= self.window {
            self.read_reply().await?;
        }
        let mut frame = std::mem::take(&mut self.frame);
        frame.clear();
        let seq = self.next_seq;
        if let Some(s) = seq {
            frame.push(b'[');
            frame.extend_from_slice(s.to_string().as_bytes());
            frame.push(b',');
        }
        if as_list {
            frame.push(b'[');
        }
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                frame.push(b',');
            }
            frame.extend_from_slice(r.as_ref().trim().as_bytes());
        }
        if as_list {
            frame.push(b']');
        }
        if seq.is_some() {
            frame.push(b']');
        }
        let sent = self.ws.send_text(&frame).await;
        self.frame = frame;
        if let Err(e) = sent {
            self.fail_all(e.clone());
            return Err(e);
        }
        if let Some(s) = &mut self.next_seq {
            *s += rows.len() as u64;
        }
        let p = Pending {
            slot: Rc::new(RefCell::new(None)),
            rows: rows.len(),
            seq,
        };
        self.in_flight.push_back(p.clone());
        Ok(p)
    }

    /// Reads replies until `p` is answered; returns its offsets or why it was refused.
    pub async fn wait(&mut self, p: &Pending) -> Result<Vec<Option<u64>>, ClientError> {
        while !p.is_done() {
            if let Err(e) = self.read_reply().await {
                if !p.is_done() {
                    return Err(e);
                }
            }
        }
        p.result().expect("done")
    }

    /// Reads replies until nothing is in flight. Errs only when the connection failed (each
    /// frame's own refusal stays in its [`Pending`]).
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        while !self.in_flight.is_empty() {
            self.read_reply().await?;
        }
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Waits for every reply, then closes the connection with 1000.
    pub async fn close(mut self) -> Result<(), ClientError> {
        let r = self.flush().await;
        self.ws.close().await;
        r
    }

    fn fail_all(&mut self, e: ClientError) {
        for p in self.in_flight.drain(..) {
            *p.slot.borrow_mut() = Some(Err(e.clone()));
        }
        self.broken = Some(e);
    }

    async fn read_reply(&mut self) -> Result<(), ClientError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let incoming = match self.ws.recv().await {
            Ok(i) => i,
            Err(e) => {
                self.fail_all(e.clone());
                return Err(e);
            }
        };
        self.on_incoming(incoming)
    }

    /// Waits `d` while keeping the connection alive: replies that arrive meanwhile settle their
    /// frames, and the server's keepalive pings are answered (within a second). Use it instead
    /// of sleeping between sends: a connection nobody reads answers no ping, and a server with
    /// keepalive (corecast, and the reference: 20 s, then 20 s more) closes it with 1011.
    /// Errs when the connection failed or was closed meanwhile.
    pub async fn idle(&mut self, d: Duration) -> Result<(), ClientError> {
        let deadline = std::time::Instant::now() + d;
        loop {
            if let Some(e) = &self.broken {
                return Err(e.clone());
            }
            loop {
                match self.ws.try_recv().await {
                    Ok(Some(incoming)) => self.on_incoming(incoming)?,
                    Ok(None) => break,
                    Err(e) => {
                        self.fail_all(e.clone());
                        return Err(e);
                    }
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            if !self.ws.watch(left.min(IDLE_SLICE)).await {
                // the server closed: its close frame (if it sent one) is buffered
                while let Ok(Some(incoming)) = self.ws.try_recv().await {
                    self.on_incoming(incoming)?;
                }
                let e = ClientError::ConnectionLost(
                    "the server went away without a close frame".into(),
                );
                self.fail_all(e.clone());
                return Err(e);
            }
        }
    }

    /// Settles the frame a reply answers, or fails every frame in flight on a close.
    fn on_incoming(&mut self, incoming: Incoming) -> Result<(), ClientError> {
        let bytes = match incoming {
            Incoming::Close(code, reason) => {
                let n = self.in_flight.len();
                let e = from_close(code, &reason, None).unwrap_or_else(|| ClientError::Closed {
                    code: code.unwrap_or(1005),
                    reason: format!("{reason} ({n} frames unacknowledged)")
                        .trim()
                        .to_string(),
                });
                self.fail_all(e.clone());
                return Err(e);
            }
            Incoming::Message(b) => b,
        };
        let Some(p) = self.in_flight.pop_front() else {
            let e = ClientError::Protocol("a reply arrived with no frame in flight".into());
            self.fail_all(e.clone());
            return Err(e);
        };
        let result = parse_reply(&bytes, p.rows);
        if let Err(ClientError::Protocol(_)) = &result {
            let e = result.clone().unwrap_err();
            *p.slot.borrow_mut() = Some(result);
            self.fail_all(e.clone());
            return Err(e);
        }
        *p.slot.borrow_mut() = Some(result);
        Ok(())
    }
}

/// Reads one publish reply (PROTOCOL.md §7) for a frame of `rows` rows.
fn parse_reply(bytes: &[u8], rows: usize) -> Result<Vec<Option<u64>>, ClientError> {
    let v: Value = sonic_rs::from_slice(bytes)
        .map_err(|e| ClientError::Protocol(format!("a publish reply is not JSON: {e}")))?;
    if let Some(ok) = v.get("ok") {
        let list = ok
            .as_array()
            .ok_or_else(|| ClientError::Protocol("a reply's ok is not a list".into()))?;
        if list.len() != rows {
            return Err(ClientError::Protocol(format!(
                "{rows} rows acknowledged with {} offsets",
                list.len()
            )));
        }
        return list
            .iter()
            .map(|x| {
                if x.is_null() {
                    Ok(None)
                } else {
                    x.as_u64().map(Some).ok_or_else(|| {
                        ClientError::Protocol("an acknowledged offset is not an integer".into())
                    })
                }
            })
            .collect();
    }
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    match v.get("error").and_then(|x| x.as_str()) {
        Some("gap") => Err(ClientError::SequenceGap {
            expected: v.get("expected").and_then(|x| x.as_u64()).unwrap_or(0),
            got: v.get("got").and_then(|x| x.as_u64()).unwrap_or(0),
        }),
        Some("commit_failed") => Err(ClientError::CommitFailed {
            detail: text("detail"),
        }),
        Some(other) => {
            let d = text("detail");
            Err(ClientError::Rejected {
                detail: if d.is_empty() {
                    other.to_string()
                } else if other == "rejected" {
                    d
                } else {
                    format!("{other}: {d}")
                },
            })
        }
        None => Err(ClientError::Protocol(format!(
            "a publish reply is neither ok nor error: {}",
            String::from_utf8_lossy(bytes)
                .chars()
                .take(80)
                .collect::<String>()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map() {
        assert_eq!(parse_reply(br#"{"ok":[1]}"#, 1), Ok(vec![Some(1)]));
        assert_eq!(
            parse_reply(br#"{"ok":[null,null]}"#, 2),
            Ok(vec![None, None])
        );
        assert_eq!(
            parse_reply(br#"{"ok":[2,3,4],"dup":2}"#, 3),
            Ok(vec![Some(2), Some(3), Some(4)])
        );
        assert!(matches!(
            parse_reply(br#"{"ok":[1]}"#, 2),
            Err(ClientError::Protocol(_))
        ));
        assert_eq!(
            parse_reply(br#"{"error":"gap","expected":5,"got":9}"#, 1),
            Err(ClientError::SequenceGap {
                expected: 5,
                got: 9
            })
        );
        assert_eq!(
            parse_reply(br#"{"error":"rejected","detail":"column 'side'"}"#, 1),
            Err(ClientError::Rejected {
                detail: "column 'side'".into()
            })
        );
        assert_eq!(
            parse_reply(br#"{"error":"bad_frame","detail":"x"}"#, 1),
            Err(ClientError::Rejected {
                detail: "bad_frame: x".into()
            })
        );
        assert_eq!(
            parse_reply(br#"{"error":"commit_failed","detail":"disk"}"#, 1),
            Err(ClientError::CommitFailed {
                detail: "disk".into()
            })
        );
    }
}
