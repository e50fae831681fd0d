//! Converts a buffer written in an older layout to the current one ([`FORMAT_VERSION`]), once,
//! when the writer opens it.
//!
//! Version 1 kept one SQLite row per log row in `rows("offset", ts, payload)`. Version 2 keeps
//! blocks (see [`super::block`]). The conversion runs in one transaction: a crash part-way leaves
//! the version-1 buffer as it was, and the next open converts it again. Offsets, `ts`, payload
//! bytes, marks and meta are unchanged; consecutive rows with the same `ts` share a block.

use rusqlite::{params, Connection, OptionalExtension};

use super::block::BlockWriter;
use super::buffer::{rollback, to_u64, FORMAT_VERSION};
use super::error::StorageError;

/// If the buffer on `conn` is version 1, moves its rows into blocks and records the current
/// version; otherwise does nothing. Returns the number of rows moved.
///
/// Fails with [`StorageError::Sqlite`] (nothing changed) or [`StorageError::Corrupt`].
pub(crate) fn upgrade(conn: &Connection, db_path: &std::path::Path) -> Result<u64, StorageError> {
    let sqlite = |op| StorageError::sqlite(db_path, op);
    let version: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'format_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(sqlite("reading format_version"))?;
    if version != Some(1) {
        return Ok(0);
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(sqlite("starting the format upgrade"))?;
    let moved = move_rows(conn, db_path);
    let result = moved.and_then(|moved| {
        conn.execute_batch("DROP TABLE rows")
            .and_then(|()| {
                conn.execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'format_version'",
                    params![FORMAT_VERSION],
                )
            })
            .and_then(|_| conn.execute_batch("COMMIT"))
            .map_err(sqlite("finishing the format upgrade"))?;
        Ok(moved)
    });
    if result.is_err() {
        rollback(conn);
    }
    result
}

/// Copies every version-1 row into blocks inside the open transaction.
fn move_rows(conn: &Connection, db_path: &std::path::Path) -> Result<u64, StorageError> {
    let sqlite =
        |source| StorageError::sqlite(db_path, "moving version-1 rows into blocks")(source);
    let mut select = conn
        .prepare("SELECT \"offset\", ts, payload FROM rows ORDER BY \"offset\"")
        .map_err(sqlite)?;
    let mut rows = select.query([]).map_err(sqlite)?;
    let mut blocks: Option<BlockWriter<'_>> = None;
    let mut moved = 0;
    while let Some(row) = rows.next().map_err(sqlite)? {
        let offset: i64 = row.get(0).map_err(sqlite)?;
        let offset = to_u64(offset, db_path, "row offset")?;
        let ts_us: i64 = row.get(1).map_err(sqlite)?;
        let payload = row
            .get_ref(2)
            .and_then(|v| Ok(v.as_blob()?))
            .map_err(sqlite)?;
        let writer = match &mut blocks {
            Some(writer) => writer,
            None => blocks.insert(BlockWriter::new(conn, offset, ts_us).map_err(sqlite)?),
        };
        if writer.next_offset() != offset || writer.ts_us() != ts_us {
            writer.restart_at(offset, ts_us).map_err(sqlite)?;
        }
        writer.push(payload).map_err(sqlite)?;
        moved += 1;
    }
    if let Some(writer) = &mut blocks {
        writer.flush().map_err(sqlite)?;
    }
    Ok(moved)
}
