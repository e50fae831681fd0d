//! Catch-up: the rows a server no longer replays, read from the stream's published table, then
//! the socket from where the table ends (feature `catch-up`).
//!
//! The official client's algorithm (`../shared/PUBLISHED.md` §2), step for step:
//!
//! 1. the subscribe at N was refused with 4416 `too_old` or `evicted` ([`super::connect`]);
//! 2. **probe**: one live subscribe with no offset, its greeting read, closed. Its
//!    `metadata_hint` (else `metadata`) names the stream metadata, its `stream_id` the stream;
//!    no URI is [`ClientError::CatchUpNowhere`];
//! 3. **prepare** (before [`super::connect`] returns, so an unreadable table fails there):
//!    [`PublishedTable::open`] resolves the hints and reads the manifests of every log's table
//!    (after migrations: the sealed logs' tables, oldest first, then the live log's, with the
//!    stream manifest's row counts); from N (or the tables' floor for the earliest) to the live
//!    table's end, refusing tables that end at or below N
//!    ([`ClientError::CatchUpNothingAbove`]) or start above it
//!    ([`ClientError::CatchUpGapBelow`]), and logs that do not splice over that range (a hole
//!    or an overlap at a seam, a sealed log's table missing or published short:
//!    [`ClientError::CatchUpFailed`] naming the log and the offsets);
//! 4. **rows**: the tables' rows, in offset order across the seams, each log's decoded with its
//!    own schema (a row of an older log has that log's columns, as its subscribers received
//!    it and as the official client delivers it), filtered by the subscription's `where=` (the
//!    server never sees them; a column an older log lacks reads as null there,
//!    [`Filter::for_log`]), each framed `[offset,ts,row]` exactly as the server frames it.
//!    Nothing is connected meanwhile: a socket held through a long read would fill the
//!    server's backlog for this subscriber;
//! 5. **resume** at `max(last + 1, table end)`. Accepted: the socket takes over, and its first
//!    row must be exactly that offset (without a filter) and in any case above the last table
//!    row. Refused again with `too_old`/`evicted` (the server moved on while the table was
//!    read): another round from there, re-reading the hints, up to
//!    [`SubscribeOptions::catch_up_retries`] rounds, then [`ClientError::CatchUpExhausted`].
//!
//! The table is read on the calling thread (blocking file or S3 reads between the awaits); S3
//! credentials come from the standard `AWS_*` environment.

use corecast_storage::filter::Filter;
use corecast_storage::published::{PublishedTable, ReadError, S3Options, TableRows};
use corecast_storage::schema::RowCodec;
use corecast_storage::tier::RowChunk;

use super::conn::WsConn;
use super::subscribe::open;
use super::{ClientError, Greeting, Offset, Row, SubscribeOptions, Target};

/// Rows per chunk read from the table (one decoded Arrow batch; bounds the memory held).
const CHUNK_ROWS: usize = 8_192;

/// What the next call of [`CatchUp::next`] produced.
pub(super) enum Step {
    /// A row from the table.
    Row(Row),
    /// The table is delivered and the server accepted the resubscribe: the socket takes over.
    Spliced(Box<Splice>),
}

/// The resumed subscription a catch-up hands over.
pub(super) struct Splice {
    /// The resumed subscription.
    pub(super) ws: WsConn,
    /// Its greeting.
    pub(super) greeting: Greeting,
    /// The offset it was opened at (the first row it may send).
    pub(super) resumed_at: u64,
    /// Whether a `where=` filter applies (the first socket row may then be above it).
    pub(super) filtered: bool,
}

/// A catch-up in progress.
pub(super) struct CatchUp {
    stream: String,
    /// The stream metadata URI the probe's greeting named.
    uri: String,
    stream_id: Option<String>,
    where_json: Option<String>,
    filter: Option<Filter>,
    /// `filter` for the log of `chunk` ([`Filter::for_log`]), and that log's name.
    chunk_filter: Option<(String, Filter)>,
    rounds_max: u32,
    /// Rounds begun (1-based).
    round: u32,
    /// Every offset below was delivered (or filtered out): where the next round or the
    /// resubscribe starts.
    start: u64,
    /// The end of this round's table.
    table_end: u64,
    rows: Option<TableRows>,
    chunk: RowChunk,
    /// The next row of `chunk`.
    pos: usize,
}

impl CatchUp {
    /// Steps 2 and 3 after `refused` (a recoverable refusal of `offset`): the probe, the
    /// table opened and the first round's range checked. Returns the probe's greeting.
    pub(super) async fn start(
        target: &Target,
        offset: Offset,
        opts: &SubscribeOptions,
        refused: ClientError,
    ) -> Result<(CatchUp, Greeting), ClientError> {
        debug_assert!(refused.is_catch_up_recoverable());
        let (mut probe_ws, probe) = open(target, Offset::Live, opts.where_json.as_deref()).await?;
        probe_ws.close().await;
        let stream = if probe.stream.is_empty() {
            target.stream.clone()
        } else {
            probe.stream.clone()
        };
        let Some(uri) = probe
            .metadata_hint
            .clone()
            .or_else(|| probe.metadata.clone())
        else {
            return Err(ClientError::CatchUpNowhere { stream });
        };
        // the server accepted the filter on the probe, so it parses; rows read from the table
        // are held to it here, as the server holds replayed and live rows to it
        let filter = match &opts.where_json {
            Some(w) => {
                Some(Filter::parse(w, None).map_err(|detail| ClientError::BadRequest { detail })?)
            }
            None => None,
        };
        let mut catch_up = CatchUp {
            stream,
            uri,
            stream_id: probe.stream_id.clone(),
            where_json: opts.where_json.clone(),
            filter,
            chunk_filter: None,
            rounds_max: opts.catch_up_retries.max(1),
            round: 1,
            start: 0,
            table_end: 0,
            rows: None,
            chunk: RowChunk::default(),
            pos: 0,
        };
        let table = catch_up.open_table()?;
        let requested = match offset {
            Offset::At(n) if n > 0 => Some(n),
            _ => None,
        };
        let range = table
            .catch_up_range(requested)
            .map_err(|e| catch_up.read_error(e))?;
        catch_up.start = range.start;
        catch_up.table_end = range.end;
        catch_up.rows = Some(
            table
                .rows(range, CHUNK_ROWS)
                .map_err(|e| catch_up.read_error(e))?,
        );
        Ok((catch_up, probe))
    }

    /// Whether rows are ready without any wait: the chunk's rows past `pos` are never all
    /// held back by the filter ([`CatchUp::skip_filtered`] passes those after each row handed
    /// out), so a consumer that flushes when this is false shows every row it was handed.
    pub(super) fn has_buffered(&self) -> bool {
        self.pos < self.chunk.len()
    }

    /// Moves `pos` past the chunk's rows the filter holds back (and the start with it, as the
    /// server's filter skips a live row).
    fn skip_filtered(&mut self) {
        let filter = match &self.chunk_filter {
            Some((_, f)) => Some(f),
            None => self.filter.as_ref(),
        };
        let Some(filter) = filter else { return };
        while self.pos < self.chunk.len() {
            let (o, _, bytes) = self.chunk.row(self.pos);
            if filter.matches(bytes) {
                break;
            }
            self.start = o + 1;
            self.pos += 1;
        }
    }

    /// The next row of the table, or the splice onto the socket once the table is delivered.
    pub(super) async fn next(&mut self, target: &Target) -> Result<Step, ClientError> {
        loop {
            while self.pos < self.chunk.len() {
                let (o, ts, bytes) = self.chunk.row(self.pos);
                self.pos += 1;
                // past this row either way: a filtered row moves the start as the server's
                // filter skips a live one
                self.start = o + 1;
                let filter = match &self.chunk_filter {
                    Some((_, f)) => Some(f),
                    None => self.filter.as_ref(),
                };
                if filter.is_some_and(|f| !f.matches(bytes)) {
                    continue;
                }
                let Ok(text) = std::str::from_utf8(bytes) else {
                    return Err(self.failed(format!("the row at offset {o} is not UTF-8")));
                };
                let row = Row::from_parts(o, ts, text);
                self.skip_filtered();
                return Ok(Step::Row(row));
            }
            let next = match self.rows.as_mut() {
                Some(rows) => rows.next_chunk(),
                None => Ok(None),
            };
            match next.map_err(|e| self.read_error(e))? {
                Some(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                    self.filter_chunk_log();
                    continue;
                }
                None => self.rows = None,
            }
            // the round's rows are delivered: past every row the table held
            self.start = self.start.max(self.table_end);
            match open(target, Offset::At(self.start), self.where_json.as_deref()).await {
                Ok((ws, greeting)) => {
                    if let Some((first, _)) = greeting.replay.filter(|(f, _)| *f > self.start) {
                        return Err(ClientError::Protocol(format!(
                            "resubscribed at offset {} after the catch-up, but the server replays from {first}: offsets {}..{first} would be missing",
                            self.start, self.start
                        )));
                    }
                    return Ok(Step::Spliced(Box::new(Splice {
                        ws,
                        greeting,
                        resumed_at: self.start,
                        filtered: self.filter.is_some(),
                    })));
                }
                Err(refused) if refused.is_catch_up_recoverable() => {
                    if self.round >= self.rounds_max {
                        return Err(ClientError::CatchUpExhausted {
                            stream: self.stream.clone(),
                            rounds: self.round,
                            through: self.start,
                            refusal: refused.to_string(),
                        });
                    }
                    self.round += 1;
                    self.next_round()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Holds the chunk just read to the subscription's filter as its log's rows take it: the
    /// filter is made again only when the chunk comes from another log than the last one.
    fn filter_chunk_log(&mut self) {
        let (Some(filter), Some(rows)) = (&self.filter, &self.rows) else {
            return;
        };
        let Some(log) = rows.log() else {
            return;
        };
        if self
            .chunk_filter
            .as_ref()
            .is_some_and(|(name, _)| *name == log.name)
        {
            return;
        }
        let for_log = match rows.codec() {
            Some(RowCodec::Schema(schema)) => filter.for_log(|c| schema.column(c).is_some()),
            // a schema-less log may hold any key
            Some(RowCodec::Schemaless) | None => filter.clone(),
        };
        self.chunk_filter = Some((log.name.clone(), for_log));
    }

    /// Another round: the hints read again, the rows published since `start`.
    fn next_round(&mut self) -> Result<(), ClientError> {
        let table = self.open_table()?;
        match table.catch_up_range(Some(self.start)) {
            Ok(range) => {
                self.table_end = range.end;
                self.rows = Some(
                    table
                        .rows(range, CHUNK_ROWS)
                        .map_err(|e| self.read_error(e))?,
                );
                Ok(())
            }
            // nothing published since: resubscribe from the same place
            Err(ReadError::NothingAbove { .. }) => {
                self.table_end = self.start;
                Ok(())
            }
            Err(e) => Err(self.read_error(e)),
        }
    }

    fn open_table(&self) -> Result<PublishedTable, ClientError> {
        PublishedTable::open(&self.uri, self.stream_id.as_deref(), &S3Options::default())
            .map_err(|e| self.read_error(e))
    }

    fn failed(&self, detail: String) -> ClientError {
        ClientError::CatchUpFailed {
            stream: self.stream.clone(),
            uri: self.uri.clone(),
            detail,
        }
    }

    fn read_error(&self, e: ReadError) -> ClientError {
        match e {
            ReadError::GapBelow {
                table,
                start,
                floor,
                ..
            } => ClientError::CatchUpGapBelow {
                stream: self.stream.clone(),
                table,
                requested: start,
                floor,
            },
            ReadError::NothingAbove {
                table, start, end, ..
            } => ClientError::CatchUpNothingAbove {
                stream: self.stream.clone(),
                table,
                requested: start,
                end,
            },
            other => self.failed(other.to_string()),
        }
    }
}
