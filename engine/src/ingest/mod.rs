//! Bulk ingest: `POST /v1/streams/NAME/ingest`, rows in large batches over HTTP.
//!
//! The life of one request, one module per step:
//!
//! 1. [`endpoint`], on the shard that accepted the connection: checks the request (method,
//!    stream, `ingest=ID&seq=N`, content type, length against `[ingest] max_body_bytes`), takes
//!    a place under `max_concurrent`, reads the body, and hands it to an ingest worker thread;
//! 2. [`body`], on that worker: decodes the body — an Arrow IPC stream
//!    (`application/vnd.apache.arrow.stream`) or JSON lines (`application/x-ndjson`) — and
//!    checks and encodes every row against the stream's schema
//!    ([`corecast_storage::schema::encode_batch`] for Arrow, `RowCodec::encode_row` for JSON:
//!    the publish path's rules, refusals and bytes);
//! 3. the worker hands the rows to the stream's writer as ONE [`Append`](crate::commit::writer::Append)
//!    — one group commit, contiguous offsets, the ingest id's exactly-once mark in the same
//!    record ([`crate::commit::writer`]) — and waits for it to be durable;
//! 4. [`endpoint`] answers with the batch's offsets ([`reply`]).
//!
//! A request is all or nothing: a refused row, a bad body or a failed commit leaves nothing of
//! the batch in the log. An ingest id is an exactly-once publisher id (PROTOCOL.md §7) whose
//! seqs count rows: a batch with `seq=N` holds rows `N, N+1, …`, and a batch sent again (a lost
//! reply, a crash) is answered as duplicates at their original offsets, never committed twice.
//! `GET /v1/streams/NAME/ingest?ingest=ID` reads the id's mark, where a client resumes from.
//! Batches of one id may overlap in flight: [`lane`] hands them to the writer in seq order.
//!
//! Bounds: one body ≤ `max_body_bytes`, one batch ≤ `max_batch_rows` rows, at most
//! `max_concurrent` requests decoding or committing at once (503 with `Retry-After: 1`
//! above), and rows queued for commit ≤ the stream's `max_inbound` (the worker waits).

pub mod body;
pub mod endpoint;
pub mod lane;
pub mod reply;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use crate::config::IngestConfig;

static SETTINGS: RwLock<Option<IngestConfig>> = RwLock::new(None);

/// Requests holding a place under `max_concurrent`, all streams, all shards.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Installs the limits (at server start).
pub fn install(cfg: &IngestConfig) {
    *SETTINGS.write().unwrap_or_else(|p| p.into_inner()) = Some(*cfg);
}

/// The limits in force.
pub fn settings() -> IngestConfig {
    SETTINGS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_default()
}

/// A place under `max_concurrent`; released on drop.
pub(crate) struct Slot(());

impl Slot {
    /// A place, or `None` when `max_concurrent` requests already hold one.
    pub(crate) fn acquire(max_concurrent: usize) -> Option<Slot> {
        if RUNNING.fetch_add(1, Ordering::AcqRel) >= max_concurrent {
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}
