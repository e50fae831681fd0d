//! `<data>/registry.db`: the managed streams' declarations, desired and observed states and
//! revisions, their operations and the idempotency receipts of the mutations that made them.
//!
//! Only the control thread opens it (and start-up, before that thread exists): the shards never
//! wait on SQLite. Every accepted mutation is one transaction ([`Db::accept`]) holding the new
//! declaration or desired state, the operation that will carry it out and the receipt that
//! answers a retry — committed before the client is answered. SQLite runs in WAL mode with
//! `synchronous = FULL`: a commit that returned survives a power cut.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::registry::{now_us, StreamState};

/// The file's name in the data directory.
pub const FILE: &str = "registry.db";

/// One managed stream as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The stream's name.
    pub name: String,
    /// The canonical declaration (compact JSON).
    pub declaration: String,
    /// What it was last asked to do.
    pub desired: StreamState,
    /// What it was last seen doing.
    pub observed: StreamState,
    /// Bumped by every accepted change of declaration or desired state (1 at creation).
    pub revision: u64,
    /// The stream's UUID from its log, once opened.
    pub stream_id: Option<String>,
    /// When it was retired, µs since the epoch (0: not retired).
    pub retired_at_us: i64,
}

/// One operation: the work an accepted mutation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Its id (a UUID).
    pub id: String,
    /// The stream it works on.
    pub stream: String,
    /// `create`, `replace`, `desired` or `migrate`.
    pub kind: String,
    /// `accepted`, `running`, `succeeded` or `failed`.
    pub state: String,
    /// The stream's revision it carries out.
    pub revision: u64,
    /// Why it failed (`failed` only): a message without paths.
    pub error: Option<String>,
    /// When it was accepted, µs since the epoch.
    pub created_us: i64,
    /// When its state last changed.
    pub updated_us: i64,
}

/// The answer an accepted mutation got, kept for its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// What was asked: a digest of method, path and body.
    pub intent: String,
    /// The status answered (200 or 202).
    pub status: u16,
    /// The body answered.
    pub body: String,
    /// The `ETag` answered.
    pub etag: String,
    /// The `Location` answered (202 only).
    pub location: Option<String>,
}

/// An accepted mutation, written in one transaction by [`Db::accept`].
pub struct Accepted<'a> {
    /// The stream's row after the mutation.
    pub row: &'a Row,
    /// The operation carrying it out.
    pub op: &'a Op,
    /// The idempotency key and its receipt.
    pub receipt: (&'a str, &'a Receipt),
}

/// A managed stream as start-up opens it.
pub struct Startup {
    /// Its declaration, checked again.
    pub cfg: crate::config::StreamConfig,
    /// The state it opens in: what it was last asked for.
    pub desired: StreamState,
    /// When it was retired (0: not retired).
    pub retired_at_us: i64,
}

/// The open registry.
pub struct Db {
    conn: Connection,
}

fn state_of(s: String) -> rusqlite::Result<StreamState> {
    StreamState::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{s:?} is not a stream state").into(),
        )
    })
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        name: r.get(0)?,
        declaration: r.get(1)?,
        desired: state_of(r.get(2)?)?,
        observed: state_of(r.get(3)?)?,
        revision: r.get::<_, i64>(4)? as u64,
        stream_id: r.get(5)?,
        retired_at_us: r.get(6)?,
    })
}

fn op_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Op> {
    Ok(Op {
        id: r.get(0)?,
        stream: r.get(1)?,
        kind: r.get(2)?,
        state: r.get(3)?,
        revision: r.get::<_, i64>(4)? as u64,
        error: r.get(5)?,
        created_us: r.get(6)?,
        updated_us: r.get(7)?,
    })
}

const ROW_COLUMNS: &str =
    "name, declaration, desired, observed, revision, stream_id, retired_at_us";
const OP_COLUMNS: &str = "id, stream, kind, state, revision, error, created_us, updated_us";

impl Db {
    /// Opens (or creates) `<dir>/registry.db`. The error names the file's role, not its path.
    pub fn open(dir: &Path) -> Result<Db, String> {
        let path = dir.join(FILE);
        let fail = |e: rusqlite::Error| format!("cannot open {}: {e}", path.display());
        let conn = Connection::open(&path).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS streams (
                 name TEXT PRIMARY KEY,
                 declaration TEXT NOT NULL,
                 desired TEXT NOT NULL,
                 observed TEXT NOT NULL,
                 revision INTEGER NOT NULL,
                 stream_id TEXT,
                 retired_at_us INTEGER NOT NULL DEFAULT 0,
                 created_us INTEGER NOT NULL,
                 updated_us INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS operations (
                 id TEXT PRIMARY KEY,
                 stream TEXT NOT NULL,
                 kind TEXT NOT NULL,
                 state TEXT NOT NULL,
                 revision INTEGER NOT NULL,
                 error TEXT,
                 created_us INTEGER NOT NULL,
                 updated_us INTEGER NOT NULL);
             CREATE INDEX IF NOT EXISTS operations_pending ON operations (state, created_us);
             CREATE TABLE IF NOT EXISTS receipts (
                 key TEXT PRIMARY KEY,
                 intent TEXT NOT NULL,
                 status INTEGER NOT NULL,
                 body TEXT NOT NULL,
                 etag TEXT NOT NULL,
                 location TEXT,
                 created_us INTEGER NOT NULL);
             INSERT OR IGNORE INTO meta (key, value) VALUES ('collection_revision', '0');",
        )
        .map_err(fail)?;
        let id: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'broker_id'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(fail)?;
        if id.is_none() {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('broker_id', ?1)",
                params![uuid::Uuid::new_v4().to_string()],
            )
            .map_err(fail)?;
        }
        Ok(Db { conn })
    }

    fn meta(&self, key: &str) -> rusqlite::Result<String> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
    }

    /// This data directory's broker id (made once, kept).
    pub fn broker_id(&self) -> rusqlite::Result<String> {
        self.meta("broker_id")
    }

    /// Bumped by every accepted mutation: a list cursor is bound to it.
    pub fn collection_revision(&self) -> rusqlite::Result<u64> {
        Ok(self.meta("collection_revision")?.parse().unwrap_or(0))
    }

    /// The managed stream `name`.
    pub fn stream(&self, name: &str) -> rusqlite::Result<Option<Row>> {
        self.conn
            .query_row(
                &format!("SELECT {ROW_COLUMNS} FROM streams WHERE name = ?1"),
                params![name],
                row_of,
            )
            .optional()
    }

    /// Every managed stream, by name.
    pub fn streams(&self) -> rusqlite::Result<Vec<Row>> {
        let mut st = self
            .conn
            .prepare(&format!("SELECT {ROW_COLUMNS} FROM streams ORDER BY name"))?;
        let rows = st.query_map([], row_of)?;
        rows.collect()
    }

    /// Every managed stream with its declaration resolved, by name, for start-up to open in
    /// its desired state. A declaration this build refuses names the stream.
    pub fn startup_streams(&self) -> Result<Vec<Startup>, String> {
        let rows = self.streams().map_err(|e| format!("registry.db: {e}"))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let refused = |why: String| format!("registry.db: stream {}: {why}", r.name);
            let value: serde_json::Value =
                serde_json::from_str(&r.declaration).map_err(|e| refused(e.to_string()))?;
            let d = super::decl::parse(&r.name, &value).map_err(|e| refused(format!("{e:?}")))?;
            // a migration left unfinished: the stream stays stopped (its declaration has the
            // new schema, its live log may not yet) until the control thread finishes it
            let migrating = self
                .pending_on(&r.name)
                .map_err(|e| format!("registry.db: {e}"))?
                .is_some_and(|op| op.kind == "migrate");
            out.push(Startup {
                cfg: d.cfg,
                desired: if migrating {
                    StreamState::Stopped
                } else {
                    r.desired
                },
                retired_at_us: r.retired_at_us,
            });
        }
        Ok(out)
    }

    /// How many streams are managed.
    pub fn count(&self) -> rusqlite::Result<u64> {
        self.conn
            .query_row("SELECT COUNT(*) FROM streams", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    }

    /// How many streams are retired (their rows stay for good).
    pub fn count_retired(&self) -> rusqlite::Result<u64> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM streams WHERE desired = ?1",
                [StreamState::Retired.as_str()],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
    }

    /// The operation `id`.
    pub fn operation(&self, id: &str) -> rusqlite::Result<Option<Op>> {
        self.conn
            .query_row(
                &format!("SELECT {OP_COLUMNS} FROM operations WHERE id = ?1"),
                params![id],
                op_of,
            )
            .optional()
    }

    /// Operations not finished (`accepted` or `running`), oldest first.
    pub fn pending(&self) -> rusqlite::Result<Vec<Op>> {
        let mut st = self.conn.prepare(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE state IN ('accepted', 'running') ORDER BY created_us, id"
        ))?;
        let rows = st.query_map([], op_of)?;
        rows.collect()
    }

    /// The unfinished operation on `stream`, if any.
    pub fn pending_on(&self, stream: &str) -> rusqlite::Result<Option<Op>> {
        self.conn
            .query_row(
                &format!("SELECT {OP_COLUMNS} FROM operations WHERE stream = ?1 AND state IN ('accepted', 'running') ORDER BY created_us DESC LIMIT 1"),
                params![stream],
                op_of,
            )
            .optional()
    }

    /// The receipt kept for idempotency key `key`.
    pub fn receipt(&self, key: &str) -> rusqlite::Result<Option<Receipt>> {
        self.conn
            .query_row(
                "SELECT intent, status, body, etag, location FROM receipts WHERE key = ?1",
                params![key],
                |r| {
                    Ok(Receipt {
                        intent: r.get(0)?,
                        status: r.get::<_, i64>(1)? as u16,
                        body: r.get(2)?,
                        etag: r.get(3)?,
                        location: r.get(4)?,
                    })
                },
            )
            .optional()
    }

    fn put_receipt(tx: &Connection, key: &str, r: &Receipt) -> rusqlite::Result<()> {
        tx.execute(
            "INSERT INTO receipts (key, intent, status, body, etag, location, created_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![key, r.intent, r.status as i64, r.body, r.etag, r.location, now_us()],
        )?;
        Ok(())
    }

    /// Commits an accepted mutation in ONE transaction: the stream's new row, its operation,
    /// the receipt, and the collection's next revision.
    pub fn accept(&mut self, a: Accepted<'_>) -> rusqlite::Result<()> {
        let now = now_us();
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO streams (name, declaration, desired, observed, revision, stream_id, retired_at_us, created_us, updated_us)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)
             ON CONFLICT (name) DO UPDATE SET declaration = excluded.declaration,
                 desired = excluded.desired, revision = excluded.revision,
                 updated_us = excluded.updated_us",
            params![
                a.row.name,
                a.row.declaration,
                a.row.desired.as_str(),
                a.row.observed.as_str(),
                a.row.revision as i64,
                a.row.stream_id,
                a.row.retired_at_us,
                now
            ],
        )?;
        tx.execute(
            &format!(
                "INSERT INTO operations ({OP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ),
            params![
                a.op.id,
                a.op.stream,
                a.op.kind,
                a.op.state,
                a.op.revision as i64,
                a.op.error,
                a.op.created_us,
                a.op.updated_us
            ],
        )?;
        Self::put_receipt(&tx, a.receipt.0, a.receipt.1)?;
        tx.execute(
            "UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key = 'collection_revision'",
            [],
        )?;
        tx.commit()
    }

    /// Keeps the receipt of a satisfied no-op (200): nothing else changes.
    pub fn accept_noop(&mut self, key: &str, receipt: &Receipt) -> rusqlite::Result<()> {
        Self::put_receipt(&self.conn, key, receipt)
    }

    /// Moves operation `id` to `state` (`running`, `succeeded`, `failed`); only an unfinished
    /// operation moves, so an operation finishes exactly once. Whether it moved.
    pub fn set_op(&self, id: &str, state: &str, error: Option<&str>) -> rusqlite::Result<bool> {
        let n = self.conn.execute(
            "UPDATE operations SET state = ?2, error = ?3, updated_us = ?4 WHERE id = ?1 AND state IN ('accepted', 'running')",
            params![id, state, error, now_us()],
        )?;
        Ok(n == 1)
    }

    /// Records what stream `name` is now seen doing.
    pub fn set_observed(
        &self,
        name: &str,
        observed: StreamState,
        stream_id: Option<&str>,
        retired_at_us: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            "UPDATE streams SET observed = ?2, stream_id = COALESCE(?3, stream_id), retired_at_us = ?4, updated_us = ?5 WHERE name = ?1",
            params![name, observed.as_str(), stream_id, retired_at_us, now_us()],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, revision: u64, desired: StreamState) -> Row {
        Row {
            name: name.into(),
            declaration: "{\"schema\":null}".into(),
            desired,
            observed: StreamState::Stopped,
            revision,
            stream_id: None,
            retired_at_us: 0,
        }
    }

    fn op(id: &str, stream: &str, revision: u64) -> Op {
        Op {
            id: id.into(),
            stream: stream.into(),
            kind: "create".into(),
            state: "accepted".into(),
            revision,
            error: None,
            created_us: 1,
            updated_us: 1,
        }
    }

    fn receipt() -> Receipt {
        Receipt {
            intent: "i".into(),
            status: 202,
            body: "{}".into(),
            etag: "\"1\"".into(),
            location: Some("/control/v1/operations/o1".into()),
        }
    }

    #[test]
    fn a_mutation_is_one_transaction_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Db::open(dir.path()).unwrap();
        let broker = db.broker_id().unwrap();
        assert_eq!(db.collection_revision().unwrap(), 0);
        let r = row("a", 1, StreamState::Serving);
        db.accept(Accepted {
            row: &r,
            op: &op("o1", "a", 1),
            receipt: ("k1", &receipt()),
        })
        .unwrap();
        // the same key again violates the receipt's key: nothing of the second mutation stays
        let r2 = row("b", 1, StreamState::Serving);
        assert!(db
            .accept(Accepted {
                row: &r2,
                op: &op("o2", "b", 1),
                receipt: ("k1", &receipt()),
            })
            .is_err());
        assert!(db.stream("b").unwrap().is_none());
        assert!(db.operation("o2").unwrap().is_none());
        drop(db);
        let db = Db::open(dir.path()).unwrap();
        assert_eq!(db.broker_id().unwrap(), broker);
        assert_eq!(db.collection_revision().unwrap(), 1);
        assert_eq!(db.stream("a").unwrap().unwrap(), r);
        assert_eq!(db.receipt("k1").unwrap().unwrap(), receipt());
        assert_eq!(db.pending().unwrap().len(), 1);
        // an operation finishes once
        assert!(db.set_op("o1", "succeeded", None).unwrap());
        assert!(!db.set_op("o1", "failed", Some("late")).unwrap());
        assert_eq!(db.operation("o1").unwrap().unwrap().state, "succeeded");
        assert!(db.pending().unwrap().is_empty());
    }
}
