//! Subscriptions: [`connect`] and [`Subscription`].

use super::conn::{Incoming, WsConn};
use super::error::from_close;
use super::{ClientError, Cursor, Greeting, Offset, Row, SubscribeOptions, Target};

/// An open subscription. Rows come from [`Subscription::next`]; end it with
/// [`Subscription::close`] (which saves the cursor) or drop it (which does not).
pub struct Subscription {
    ws: WsConn,
    greeting: Greeting,
    target: Target,
    last_offset: Option<u64>,
    /// The offset of the row last handed to the consumer, not yet counted as consumed.
    handed: Option<u64>,
    cursor: Option<Cursor>,
    ended: bool,
}

/// Subscribes to `url` (`ws://HOST:PORT/STREAM`) and waits for the greeting. A refusal (4404,
/// 4416, 4400, …) comes back as the matching [`ClientError`].
pub async fn connect(url: &str, opts: SubscribeOptions) -> Result<Subscription, ClientError> {
    let target = Target::parse(url)?;
    let cursor = match &opts.cursor_file {
        Some(p) => Some(Cursor::open(p)?),
        None => None,
    };
    // an explicit offset wins; the file still seeds the forward-only guard of its saves
    let offset = match (opts.offset, cursor.as_ref().and_then(Cursor::resume_at)) {
        (Some(o), _) => o,
        (None, Some(n)) => Offset::At(n),
        (None, None) => Offset::Live,
    };
    let offset_text = match offset {
        Offset::Live => None,
        Offset::Earliest => Some("0".to_string()),
        Offset::At(n) => Some(n.to_string()),
    };
    let mut query: Vec<(&str, Option<&str>)> = Vec::new();
    if let Some(o) = &offset_text {
        query.push(("offset", Some(o)));
    }
    if let Some(w) = &opts.where_json {
        query.push(("where", Some(w)));
    }
    let addr = target.resolve()?;
    let mut ws = WsConn::open(addr, &target.host_header(), &target.path_and_query(&query)).await?;
    let greeting = ws.greeting().await?;
    Ok(Subscription {
        ws,
        greeting,
        target,
        last_offset: None,
        handed: None,
        cursor,
        ended: false,
    })
}

impl Subscription {
    /// The greeting.
    pub fn greeting(&self) -> &Greeting {
        &self.greeting
    }

    /// The URL subscribed to (without the query).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The offset of the last row received.
    pub fn last_offset(&self) -> Option<u64> {
        self.last_offset
    }

    /// The cursor file, when one was given.
    pub fn cursor(&self) -> Option<&Cursor> {
        self.cursor.as_ref()
    }

    /// Whether bytes of a next frame are already buffered (so [`Subscription::next`] may not
    /// wait): a consumer can flush its output when this is false.
    pub fn has_buffered(&self) -> bool {
        self.ws.has_buffered()
    }

    fn confirm_handed(&mut self) -> Result<(), ClientError> {
        if let (Some(o), Some(c)) = (self.handed.take(), self.cursor.as_mut()) {
            c.consumed(o);
            c.save_if_due()?;
        }
        Ok(())
    }

    /// The next row; `None` when the server ended the stream normally (1000 or 1001). Asking
    /// for the next row marks the previous one consumed (the cursor advances then).
    pub async fn next(&mut self) -> Result<Option<Row>, ClientError> {
        self.confirm_handed()?;
        if self.ended {
            return Ok(None);
        }
        match self.ws.recv().await {
            Err(e) => {
                self.ended = true;
                Err(e)
            }
            Ok(Incoming::Close(code, reason)) => {
                self.ended = true;
                match from_close(code, &reason, self.last_offset) {
                    None => Ok(None),
                    Some(e) => Err(e),
                }
            }
            Ok(Incoming::Message(bytes)) => {
                let row = Row::parse(bytes)?;
                if let Some(o) = row.offset {
                    if self.last_offset.is_some_and(|l| o <= l) {
                        self.ended = true;
                        return Err(ClientError::Protocol(format!(
                            "offsets went backwards: {o} after {}",
                            self.last_offset.unwrap_or(0)
                        )));
                    }
                    self.last_offset = Some(o);
                    self.handed = Some(o);
                }
                Ok(Some(row))
            }
        }
    }

    /// Ends the subscription cleanly: the last row handed out counts as consumed, the cursor
    /// is saved, and the connection is closed with 1000.
    pub async fn close(mut self) -> Result<(), ClientError> {
        let saved = self
            .confirm_handed()
            .and_then(|_| match self.cursor.as_mut() {
                Some(c) => c.save(),
                None => Ok(()),
            });
        if !self.ended {
            self.ws.close().await;
        }
        saved
    }

    /// Ends the subscription because the consumer failed: the last row handed out is **not**
    /// counted, and nothing more is saved.
    pub async fn abandon(mut self) {
        if !self.ended {
            self.ws.send_close(1000).await;
        }
    }
}
