//! `corecast-engine`: the broker.
//!
//! The life of a row, one module per step:
//! 1. [`session::conn`] accepts the upgrade on any shard and routes it ([`session::route`]);
//! 2. [`session::publisher`] parses and validates each publish frame on that shard and hands an
//!    append to the stream's writer;
//! 3. [`commit::writer`], on the owner's writer thread, group-commits everything queued in one
//!    transaction and frames the committed rows once ([`fanout::batch`]);
//! 4. every shard appends the shared batch to its ring ([`fanout::ring`]) and wakes its subscribers;
//! 5. [`session::subscriber`] writes every frame it is owed with one vectored write, reading below
//!    the ring through the reader pool ([`replay`]).
//!
//! Bulk ingest (`POST /v1/streams/NAME/ingest`) has its own module, [`ingest`], and joins the
//! same path at step 3.
//!
//! Keyed streams (`key = [...]`) keep the latest row per key on a state thread of their own
//! ([`state`]), fed by the writer after each commit; `?state` subscribes start with it.
//!
//! The Model Context Protocol endpoint (`POST /mcp`), whose tools read over the pull API's
//! contract, is [`mcp`].
//!
//! [`shard`] runs the io_uring loops, [`server`] starts and stops everything, [`config`] reads the
//! TOML file ([`config_reference`] prints every key with its default), [`registry`] holds the
//! streams, [`filter`] evaluates `where=`, [`tls`] holds the certificate, [`reload`] what SIGHUP
//! reloads, and [`ui`] serves the live page (`GET /ui`).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod cli;
pub mod commit;
pub mod config;
pub mod config_reference;
pub mod control;
pub mod cursor;
pub mod fanout;
pub mod filter;
pub mod ingest;
pub mod limits;
pub mod mcp;
pub mod registry;
pub mod reload;
pub mod replay;
pub mod server;
pub mod session;
pub mod shard;
pub mod state;
pub mod tier;
pub mod tls;
pub mod ui;
