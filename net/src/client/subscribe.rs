//! Subscriptions: [`connect`] and [`Subscription`].

use super::conn::{Incoming, WsConn};
use super::error::from_close;
use super::{ClientError, Cursor, Greeting, Offset, Row, SubscribeOptions, Target};

/// An open subscription. Rows come from [`Subscription::next`]; end it with
/// [`Subscription::close`] (which saves the cursor) or drop it (which does not).
pub struct Subscription {
    /// The socket; `None` while a catch-up reads the published table (nothing is connected
    /// then: a socket held meanwhile would fill the server's backlog for this subscriber).
    ws: Option<WsConn>,
    greeting: Greeting,
    target: Target,
    last_offset: Option<u64>,
    /// The offset of the row last handed to the consumer, not yet counted as consumed.
    handed: Option<u64>,
    /// Set by [`Subscription::consume_explicitly`]: rows count as consumed only through
    /// [`Subscription::consumed`], never by asking for the next one or closing.
    explicit: bool,
    cursor: Option<Cursor>,
    ended: bool,
    /// The reason of the close frame that ended the stream normally (1000/1001), if it gave one.
    end_reason: Option<String>,
    /// The catch-up under way, until the socket has taken over.
    #[cfg(feature = "catch-up")]
    catch_up: Option<super::catch_up::CatchUp>,
    /// After a catch-up without a filter: the offset the first socket row must have (the
    /// splice leaves no gap).
    #[cfg_attr(not(feature = "catch-up"), allow(dead_code))]
    splice_at: Option<u64>,
}

/// Subscribes to `url` (`ws://HOST:PORT/STREAM`) and waits for the greeting. A refusal (4404,
/// 4416, 4400, …) comes back as the matching [`ClientError`]; with
/// [`SubscribeOptions::catch_up`], a 4416 `too_old`/`evicted` starts a catch-up instead, whose
/// first round's table is opened and checked before this returns.
pub async fn connect(url: &str, opts: SubscribeOptions) -> Result<Subscription, ClientError> {
    let mut target = Target::parse(url)?;
    if let Some(a) = &opts.authorization {
        target.authorization = Some(a.clone());
    }
    if opts.state && (opts.offset.is_some() || opts.catch_up) {
        return Err(ClientError::Usage(
            "state is a start of its own (the keyed state, then live): not with an offset or catch-up"
                .into(),
        ));
    }
    if opts.catch_up && cfg!(not(feature = "catch-up")) {
        return Err(ClientError::Usage(
            "catch-up needs corecast-net built with the `catch-up` feature".into(),
        ));
    }
    let cursor = match &opts.cursor_file {
        Some(p) => Some(Cursor::open(p)?),
        None => None,
    };
    // an explicit offset wins; the file still seeds the forward-only guard of its saves
    let resume = cursor.as_ref().and_then(Cursor::resume_at);
    let offset = match (opts.offset, resume) {
        (Some(o), _) => o,
        (None, Some(n)) => Offset::At(n),
        (None, None) => Offset::Live,
    };
    // the state only when nothing says where the reader already is
    let state = opts.state && resume.is_none();
    let opened = match open_with(&target, offset, opts.where_json.as_deref(), state).await {
        // a state reader's saved position the server no longer replays (a snapshot read whole
        // leaves the cursor at its newest entity, far behind the stream): it takes the state
        // again — every entity at its latest version, the ones it held among them; the cursor
        // never moves back
        Err(e) if opts.state && resume.is_some() && e.is_catch_up_recoverable() => {
            open_with(&target, Offset::Live, opts.where_json.as_deref(), true).await
        }
        other => other,
    };
    match opened {
        Ok((ws, greeting)) => Ok(Subscription {
            ws: Some(ws),
            greeting,
            target,
            last_offset: None,
            handed: None,
            explicit: false,
            cursor,
            ended: false,
            end_reason: None,
            #[cfg(feature = "catch-up")]
            catch_up: None,
            splice_at: None,
        }),
        #[cfg(feature = "catch-up")]
        Err(refused) if opts.catch_up && refused.is_catch_up_recoverable() => {
            let (catch_up, probe) =
                super::catch_up::CatchUp::start(&target, offset, &opts, refused).await?;
            Ok(Subscription {
                ws: None,
                greeting: probe,
                target,
                last_offset: None,
                handed: None,
                explicit: false,
                cursor,
                ended: false,
                end_reason: None,
                catch_up: Some(catch_up),
                splice_at: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// Opens one subscription at `offset` and reads its greeting.
pub(super) async fn open(
    target: &Target,
    offset: Offset,
    where_json: Option<&str>,
) -> Result<(WsConn, Greeting), ClientError> {
    open_with(target, offset, where_json, false).await
}

/// [`open`], starting with the keyed state when `state` (then `offset` is [`Offset::Live`]).
async fn open_with(
    target: &Target,
    offset: Offset,
    where_json: Option<&str>,
    state: bool,
) -> Result<(WsConn, Greeting), ClientError> {
    let offset_text = match offset {
        Offset::Live => None,
        Offset::Earliest => Some("0".to_string()),
        Offset::At(n) => Some(n.to_string()),
    };
    let mut query: Vec<(&str, Option<&str>)> = Vec::new();
    if let Some(o) = &offset_text {
        query.push(("offset", Some(o)));
    }
    if let Some(w) = where_json {
        query.push(("where", Some(w)));
    }
    if state {
        debug_assert!(offset_text.is_none(), "state with an offset");
        query.push(("state", None));
    }
    let addr = target.resolve()?;
    let mut ws = WsConn::open(addr, target, &target.path_and_query(&query)).await?;
    let greeting = ws.greeting().await?;
    Ok((ws, greeting))
}

impl Subscription {
    /// The greeting: the socket's; during a catch-up, the probe connection's (its
    /// `end_offset` is where the stream was then), replaced by the resumed subscription's once
    /// the socket takes over.
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

    /// Why the server ended the stream, once [`Subscription::next`] returned `None` and the
    /// close frame said (e.g. `stream stopping` when the stream was stopped, `server shutting
    /// down`).
    pub fn end_reason(&self) -> Option<&str> {
        self.end_reason.as_deref()
    }

    /// Whether bytes of a next frame are already buffered (so [`Subscription::next`] may not
    /// wait): a consumer can flush its output when this is false.
    pub fn has_buffered(&self) -> bool {
        #[cfg(feature = "catch-up")]
        if let Some(c) = &self.catch_up {
            return c.has_buffered();
        }
        self.ws.as_ref().is_some_and(WsConn::has_buffered)
    }

    /// Whether rows still come from the published table (a catch-up not yet spliced onto the
    /// socket).
    pub fn is_catching_up(&self) -> bool {
        #[cfg(feature = "catch-up")]
        if self.catch_up.is_some() {
            return true;
        }
        false
    }

    /// From now on a row counts as consumed (the cursor may be saved past it) only once the
    /// consumer says so with [`Subscription::consumed`]: for a consumer that holds rows it was
    /// handed (an output buffer) before they are safe, so that a cursor never passes a row it
    /// lost. [`Subscription::close`] then saves what was confirmed.
    pub fn consume_explicitly(&mut self) {
        self.explicit = true;
    }

    /// Counts every row up to `offset` as consumed (saved at most once a second, and at
    /// [`Subscription::close`]); for a consumer that called
    /// [`Subscription::consume_explicitly`].
    ///
    /// # Errors
    ///
    /// [`ClientError::Cursor`] when the cursor file cannot be written.
    pub fn consumed(&mut self, offset: u64) -> Result<(), ClientError> {
        match self.cursor.as_mut() {
            Some(c) => {
                c.consumed(offset);
                c.save_if_due()
            }
            None => Ok(()),
        }
    }

    fn confirm_handed(&mut self) -> Result<(), ClientError> {
        if self.explicit {
            return Ok(());
        }
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
        #[cfg(feature = "catch-up")]
        if let Some(c) = &mut self.catch_up {
            match c.next(&self.target).await {
                Err(e) => {
                    self.ended = true;
                    return Err(e);
                }
                Ok(super::catch_up::Step::Row(row)) => {
                    let o = row.offset.unwrap_or(0);
                    self.check_increase(o)?;
                    return Ok(Some(row));
                }
                Ok(super::catch_up::Step::Spliced(splice)) => {
                    let splice = *splice;
                    self.ws = Some(splice.ws);
                    self.greeting = splice.greeting;
                    self.catch_up = None;
                    self.splice_at = (!splice.filtered).then_some(splice.resumed_at);
                }
            }
        }
        let Some(ws) = self.ws.as_mut() else {
            self.ended = true;
            return Ok(None);
        };
        match ws.recv().await {
            Err(e) => {
                self.ended = true;
                Err(e)
            }
            Ok(Incoming::Close(code, reason)) => {
                self.ended = true;
                match from_close(code, &reason, self.last_offset) {
                    None => {
                        self.end_reason = (!reason.is_empty()).then_some(reason);
                        Ok(None)
                    }
                    Some(e) => Err(e),
                }
            }
            Ok(Incoming::Message(bytes)) => {
                let row = Row::parse(bytes)?;
                if let Some(o) = row.offset {
                    if let Some(want) = self.splice_at.take() {
                        if o != want {
                            self.ended = true;
                            return Err(ClientError::Protocol(format!(
                                "the catch-up read the published table up to offset {}, but the server's first row after it is offset {o}, not {want}",
                                want.saturating_sub(1)
                            )));
                        }
                    }
                    self.check_increase(o)?;
                }
                Ok(Some(row))
            }
        }
    }

    /// Records `o` as the last offset, refusing one that does not increase (across the splice
    /// too: a table row and a socket row never share an offset).
    fn check_increase(&mut self, o: u64) -> Result<(), ClientError> {
        if let Some(l) = self.last_offset.filter(|&l| o <= l) {
            self.ended = true;
            return Err(ClientError::Protocol(format!(
                "offsets went backwards: {o} after {l}"
            )));
        }
        self.last_offset = Some(o);
        self.handed = Some(o);
        Ok(())
    }

    /// Ends the subscription cleanly: the last row handed out counts as consumed (unless
    /// [`Subscription::consume_explicitly`]: then what was confirmed), the cursor is saved, and the connection is closed with 1000.
    pub async fn close(mut self) -> Result<(), ClientError> {
        let saved = self
            .confirm_handed()
            .and_then(|_| match self.cursor.as_mut() {
                Some(c) => c.save(),
                None => Ok(()),
            });
        if let (false, Some(ws)) = (self.ended, self.ws.as_mut()) {
            ws.close().await;
        }
        saved
    }

    /// Ends the subscription because the consumer failed: the last row handed out is **not**
    /// counted, and nothing more is saved.
    pub async fn abandon(mut self) {
        if let (false, Some(ws)) = (self.ended, self.ws.as_mut()) {
            ws.send_close(1000).await;
        }
    }
}
