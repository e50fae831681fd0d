//! The state checkpoint: one file, `<data_dir>/<stream>/state.checkpoint`, holding the entity map
//! at one offset, so that a restart folds only the log past it.
//!
//! Written atomically: `state.checkpoint.tmp` is written and `fsync`ed, renamed over the old
//! file, and the directory `fsync`ed; a crash at any point leaves either the old checkpoint or
//! the new one, whole. The file ends with a CRC32C of everything before it, and records the
//! stream's id and the key declaration it was folded under: a checkpoint of another stream, of
//! another key or `remove_when`, or a damaged one is not used (the state is rebuilt from the log).
//!
//! Layout (little-endian): `CCSTATE1` · u32 header length · header JSON
//! (`{"stream_id":…,"key":[…],"remove_when":…,"position":N,"entities":M,"tombstones":R,
//! "changes_floor":F}`) · M × (u32 key length · key · u64 version · i64 ts_us · u32 row length ·
//! row [· u64 · u64: the entity's absent span, when the header says `"absent":true`]) · R × (u32
//! key length · key · u64 offset of the removal) · u32 CRC32C. The removals are kept so that
//! `/changes` tokens from before a restart still see them; the absent spans (since the header
//! flag came; older checkpoints read as not known) so that they still leave out departures of
//! keys created after the token.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::fold::{Entry, Key, StateMap};

const MAGIC: &[u8; 8] = b"CCSTATE1";

/// What a checkpoint must match to be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The stream's UUID.
    pub stream_id: String,
    /// The key columns.
    pub key: Vec<String>,
    /// The `remove_when` JSON text, if any.
    pub remove_when: Option<String>,
}

/// The checkpoint file of the stream whose directory is `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("state.checkpoint")
}

/// Writes `state` as the checkpoint (temp file, `fsync`, rename, directory `fsync`); returns
/// the bytes written.
pub fn write(dir: &Path, id: &Identity, state: &mut StateMap) -> std::io::Result<u64> {
    let buf = encode(id, state)?;
    write_bytes(dir, &buf)?;
    Ok(buf.len() as u64)
}

/// The checkpoint file's bytes for `state` (on the state thread: a copy of the state, no I/O).
pub fn encode(id: &Identity, state: &mut StateMap) -> std::io::Result<Vec<u8>> {
    assert!(
        !state.incomplete(),
        "an incomplete state is never checkpointed"
    );
    let header = sonic_rs::to_string(&sonic_rs::json!({
        "stream_id": id.stream_id,
        "key": id.key,
        "remove_when": id.remove_when,
        "position": state.position(),
        "entities": state.len(),
        "tombstones": state.tombstones().count(),
        "changes_floor": state.changes_floor(),
        "absent": true,
    }))
    .map_err(std::io::Error::other)?;
    let mut buf = Vec::with_capacity(64 + header.len() + state.row_bytes() + state.len() * 48);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
    buf.extend_from_slice(header.as_bytes());
    for (key, e) in state.iter() {
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&e.version.to_le_bytes());
        buf.extend_from_slice(&e.ts_us.to_le_bytes());
        buf.extend_from_slice(&(e.row.len() as u32).to_le_bytes());
        buf.extend_from_slice(e.row);
        buf.extend_from_slice(&e.absent.0.to_le_bytes());
        buf.extend_from_slice(&e.absent.1.to_le_bytes());
    }
    for (key, at) in state.tombstones() {
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&at.to_le_bytes());
    }
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

/// Writes an [`encode`]d checkpoint into `dir` atomically: `state.checkpoint.tmp`, `fsync`,
/// rename over `state.checkpoint`, `fsync` of the directory (on the checkpoint writer thread).
pub fn write_bytes(dir: &Path, buf: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join("state.checkpoint.tmp");
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(buf)?;
        f.sync_all()
    });
    if let Err(e) = written {
        // a partial file would hold the space a full disk needs for the log (and the next try
        // starts afresh anyway)
        let _ = std::fs::remove_file(&tmp);
        return Err(std::io::Error::new(
            e.kind(),
            format!("writing {}: {e}", tmp.display()),
        ));
    }
    std::fs::rename(&tmp, path(dir))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Why a checkpoint was not used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// Reading it failed.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a whole checkpoint.
    #[error("damaged: {0}")]
    Damaged(&'static str),
    /// It was folded for another stream or another key declaration.
    #[error("it was folded under {0}, not this stream's declaration")]
    Other(String),
}

/// Reads the checkpoint in `dir`: `Ok(None)` when there is none.
pub fn read(dir: &Path, id: &Identity, max_keys: usize) -> Result<Option<StateMap>, Unusable> {
    let bytes = match std::fs::read(path(dir)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if bytes.len() < MAGIC.len() + 8 || &bytes[..8] != MAGIC {
        return Err(Unusable::Damaged("no CCSTATE1 header"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(Unusable::Damaged("CRC32C mismatch"));
    }
    let mut r = Reader { b: body, at: 8 };
    let header_len = r.u32()? as usize;
    let header: sonic_rs::Value =
        sonic_rs::from_slice(r.take(header_len)?).map_err(|_| Unusable::Damaged("header"))?;
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let got = Identity {
        stream_id: header["stream_id"].as_str().unwrap_or_default().to_string(),
        key: header["key"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        remove_when: header["remove_when"].as_str().map(str::to_string),
    };
    if &got != id {
        return Err(Unusable::Other(format!(
            "stream_id {}, key {:?}, remove_when {:?}",
            got.stream_id, got.key, got.remove_when
        )));
    }
    let position = header["position"]
        .as_u64()
        .ok_or(Unusable::Damaged("position"))?;
    let count = header["entities"]
        .as_u64()
        .ok_or(Unusable::Damaged("entities"))?;
    let with_absent = header["absent"].as_bool() == Some(true);
    let mut entries: BTreeMap<Key, Entry> = BTreeMap::new();
    for _ in 0..count {
        let klen = r.u32()? as usize;
        let key: Key = r.take(klen)?.into();
        let version = r.u64()?;
        let ts_us = r.u64()? as i64;
        let rlen = r.u32()? as usize;
        let row = r.take(rlen)?;
        let absent = if with_absent {
            (r.u64()?, r.u64()?)
        } else {
            (0, 0)
        };
        if version >= position {
            return Err(Unusable::Damaged("an entity newer than the checkpoint"));
        }
        entries.insert(
            key,
            Entry {
                version,
                ts_us,
                row,
                absent,
            },
        );
    }
    let removals = header["tombstones"]
        .as_u64()
        .ok_or(Unusable::Damaged("tombstones"))?;
    let changes_floor = header["changes_floor"]
        .as_u64()
        .filter(|&f| f <= position)
        .ok_or(Unusable::Damaged("changes_floor"))?;
    let mut tombstones = Vec::new();
    for _ in 0..removals {
        let klen = r.u32()? as usize;
        let key: Key = r.take(klen)?.into();
        let at = r.u64()?;
        if at >= position {
            return Err(Unusable::Damaged("a removal newer than the checkpoint"));
        }
        if entries.contains_key(&key) {
            return Err(Unusable::Damaged("a key both held and removed"));
        }
        tombstones.push((key, at));
    }
    if r.at != body.len() {
        return Err(Unusable::Damaged("trailing bytes"));
    }
    Ok(Some(StateMap::from_checkpoint(
        position,
        max_keys,
        entries,
        tombstones,
        changes_floor,
    )))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unusable> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(Unusable::Damaged("cut short"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, Unusable> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, Unusable> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fold::KeySpec;
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let any = |_: &str| crate::filter::ColumnLookup::Scalar;
        let spec = KeySpec::new(
            vec!["k".into()],
            Some(crate::filter::Filter::parse(r#"{"v":"gone"}"#, Some(&any)).unwrap()),
        );
        let mut m = StateMap::new(1, 10);
        m.apply(&spec, 1, 5, br#"{"k":1,"v":"a"}"#);
        m.apply(&spec, 2, 6, br#"{"k":2,"v":"b"}"#);
        m.apply(&spec, 3, 7, br#"{"k":1,"v":"c"}"#);
        m.apply(&spec, 4, 8, br#"{"k":3,"v":"d"}"#);
        m.apply(&spec, 5, 9, br#"{"k":3,"v":"gone"}"#);
        let id = Identity {
            stream_id: "s-1".into(),
            key: vec!["k".into()],
            remove_when: None,
        };
        assert!(read(dir.path(), &id, 10).unwrap().is_none(), "none yet");
        write(dir.path(), &id, &mut m).unwrap();
        assert!(!dir.path().join("state.checkpoint.tmp").exists());
        let mut back = read(dir.path(), &id, 10).unwrap().expect("a checkpoint");
        assert_eq!(back.position(), 6);
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            m.iter().collect::<Vec<_>>()
        );
        assert_eq!(
            back.tombstones().collect::<Vec<_>>(),
            m.tombstones().collect::<Vec<_>>()
        );
        assert_eq!(back.tombstones().count(), 1);
        assert_eq!(back.changes_floor(), 1);
        assert_eq!(back.changes(None, 4, 10), m.changes(None, 4, 10));
        let other = Identity {
            key: vec!["j".into()],
            ..id.clone()
        };
        assert!(matches!(
            read(dir.path(), &other, 10),
            Err(Unusable::Other(_))
        ));
        // one flipped byte
        let p = path(dir.path());
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            read(dir.path(), &id, 10),
            Err(Unusable::Damaged(_))
        ));
    }
}
