//! The fold of a keyed stream: the latest row per key, as pure data, no threads, no I/O.
//!
//! In: committed rows in offset order (`offset`, the commit's `ts_us`, the row's stored bytes).
//! Out: the entity map ([`StateMap`]) — for each key its latest row and that row's offset (the
//! entity's **version**) — and what each row did to it ([`Applied`]). A row that matches the
//! stream's `remove_when` predicate removes its key and is not kept. The map holds at most
//! `max_keys` entities: a row that would add one more is refused ([`Applied::Refused`]), and from
//! then on the map is *incomplete* ([`StateMap::incomplete`]) — readers are refused rather than
//! served a state that silently lacks a key.
//!
//! Keys are the declared key columns' values encoded so that byte order is a fixed order of the
//! values ([`Key`]): integers numerically, strings by their UTF-8 bytes, `false` before `true`,
//! tuples column by column. An entity's place in that order never changes, which is what the
//! collection reads' windows need.

use std::collections::BTreeMap;

use sonic_rs::{JsonType, JsonValueTrait};

use crate::filter::Filter;

/// A key: the key columns' values, order-preserving encoded (see the module docs).
pub type Key = Box<[u8]>;

const TAG_FALSE: u8 = 0x01;
const TAG_TRUE: u8 = 0x02;
const TAG_INT: u8 = 0x03;
const TAG_STR: u8 = 0x04;

/// Which columns make the key, and which rows remove it.
#[derive(Debug, Clone)]
pub struct KeySpec {
    /// The key columns, in declaration order.
    pub columns: Vec<String>,
    /// Rows that match it remove their key (`remove_when`).
    pub remove_when: Option<Filter>,
}

/// Why a row has no key (it lacks a key column, or holds a value no key can take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoKey {
    /// The column.
    pub column: String,
    /// What was there instead.
    pub found: &'static str,
}

impl KeySpec {
    /// The key of `row` (the stored, canonical JSON object bytes).
    pub fn key_of(&self, row: &[u8]) -> Result<Key, NoKey> {
        let mut out = Vec::with_capacity(24);
        for c in &self.columns {
            let no = |found| NoKey {
                column: c.clone(),
                found,
            };
            let v = sonic_rs::get(row, [c.as_str()]).map_err(|_| no("nothing"))?;
            match v.get_type() {
                JsonType::Boolean => out.push(if v.as_bool() == Some(true) {
                    TAG_TRUE
                } else {
                    TAG_FALSE
                }),
                JsonType::Number => {
                    let i: i128 = match (v.as_i64(), v.as_u64()) {
                        (Some(i), _) => i as i128,
                        (None, Some(u)) => u as i128,
                        _ => return Err(no("a non-integer number")),
                    };
                    out.push(TAG_INT);
                    out.extend_from_slice(&((i as u128) ^ (1u128 << 127)).to_be_bytes());
                }
                JsonType::String => {
                    let s = v.as_str().ok_or_else(|| no("a string it could not read"))?;
                    out.push(TAG_STR);
                    for &b in s.as_bytes() {
                        out.push(b);
                        if b == 0 {
                            out.push(0xff);
                        }
                    }
                    out.extend_from_slice(&[0, 0]);
                }
                JsonType::Null => return Err(no("null")),
                JsonType::Array | JsonType::Object => return Err(no("a list or object")),
            }
        }
        Ok(out.into_boxed_slice())
    }

    /// Whether `row` removes its key.
    pub fn removes(&self, row: &[u8]) -> bool {
        self.remove_when.as_ref().is_some_and(|f| f.matches(row))
    }
}

/// One entity: its latest row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The row's offset: the entity's version.
    pub version: u64,
    /// The commit's timestamp, µs since the epoch.
    pub ts_us: i64,
    /// The row's stored bytes (the wire payload's third element).
    pub row: Box<[u8]>,
}

/// What one row did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A new key.
    Inserted,
    /// A known key's row replaced.
    Updated,
    /// The row matched `remove_when`; the key was there.
    Removed,
    /// The row matched `remove_when`; the key was not there (nothing changed).
    RemovedAbsent,
    /// A new key while the map held `max_keys`: not kept, the map is incomplete from now on.
    Refused,
    /// The row has no key (cannot happen on a stream whose schema declares the key columns
    /// required and non-nullable, which start-up checks).
    NoKey(NoKey),
}

/// The latest row per key, up to `position` (every row below it folded in).
#[derive(Debug, Clone)]
pub struct StateMap {
    entries: BTreeMap<Key, Entry>,
    /// The offset of the next row to fold.
    position: u64,
    max_keys: usize,
    /// Set by the first refused key; a state that lacks a key is never served.
    incomplete: bool,
    /// Summed row bytes of the entities.
    row_bytes: usize,
}

impl StateMap {
    /// An empty state whose first row will be `position`.
    pub fn new(position: u64, max_keys: usize) -> StateMap {
        assert!(max_keys >= 1, "max_keys is at least 1");
        StateMap {
            entries: BTreeMap::new(),
            position,
            max_keys,
            incomplete: false,
            row_bytes: 0,
        }
    }

    /// A state as a checkpoint recorded it.
    pub fn from_entries(position: u64, max_keys: usize, entries: BTreeMap<Key, Entry>) -> StateMap {
        let mut m = StateMap::new(position, max_keys);
        for e in entries.values() {
            assert!(
                e.version < position,
                "an entity's version is below the state's position"
            );
        }
        m.row_bytes = entries.values().map(|e| e.row.len()).sum();
        m.incomplete = entries.len() > max_keys;
        m.entries = entries;
        m
    }

    /// The offset of the next row to fold.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Entities held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entity is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Summed bytes of the entities' rows.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Whether a key was refused at `max_keys` (or the history below the state was lost): the
    /// state lacks something and is not served.
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }

    /// Marks the state incomplete (rows it should have folded are gone).
    pub fn mark_incomplete(&mut self) {
        self.incomplete = true;
    }

    /// Moves the position past rows that were never folded (none the log still holds): only
    /// for a gap the caller has already marked with [`StateMap::mark_incomplete`].
    pub fn skip_to(&mut self, position: u64) {
        assert!(self.incomplete, "skipping rows leaves the state incomplete");
        assert!(position >= self.position, "the position never goes back");
        self.position = position;
    }

    /// Folds the row at `offset`, which must be the state's position.
    pub fn apply(&mut self, spec: &KeySpec, offset: u64, ts_us: i64, row: &[u8]) -> Applied {
        assert_eq!(
            offset, self.position,
            "rows are folded in offset order, none skipped"
        );
        self.position = offset + 1;
        let key = match spec.key_of(row) {
            Ok(k) => k,
            Err(e) => return Applied::NoKey(e),
        };
        if spec.removes(row) {
            return match self.entries.remove(&key) {
                Some(old) => {
                    self.row_bytes -= old.row.len();
                    Applied::Removed
                }
                None => Applied::RemovedAbsent,
            };
        }
        let entry = Entry {
            version: offset,
            ts_us,
            row: row.into(),
        };
        let full = self.entries.len() >= self.max_keys;
        match self.entries.get_mut(&key) {
            Some(e) => {
                self.row_bytes = self.row_bytes - e.row.len() + entry.row.len();
                *e = entry;
                Applied::Updated
            }
            None if full => {
                self.incomplete = true;
                Applied::Refused
            }
            None => {
                self.row_bytes += entry.row.len();
                self.entries.insert(key, entry);
                debug_assert!(self.entries.len() <= self.max_keys);
                Applied::Inserted
            }
        }
    }

    /// The entities whose row passes `filter`, in version (offset) order.
    pub fn selected_by_version(&self, filter: Option<&Filter>) -> Vec<&Entry> {
        let mut v: Vec<&Entry> = self
            .entries
            .values()
            .filter(|e| filter.is_none_or(|f| f.matches(&e.row)))
            .collect();
        v.sort_unstable_by_key(|e| e.version);
        v
    }

    /// Every entity in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.entries.iter()
    }

    /// The entity of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key)
    }
}

/// The commit timestamp of a data frame's payload `[offset,ts,row]` (as the writer and the
/// reader pool frame every row); `None` when the payload is not that shape.
pub fn payload_ts(payload: &[u8]) -> Option<i64> {
    let rest = payload.strip_prefix(b"[")?;
    let first = rest.iter().position(|&b| b == b',')?;
    let rest = &rest[first + 1..];
    let second = rest.iter().position(|&b| b == b',')?;
    std::str::from_utf8(&rest[..second]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::ColumnLookup;

    fn spec(columns: &[&str], remove_when: Option<&str>) -> KeySpec {
        let any = |_: &str| ColumnLookup::Scalar;
        KeySpec {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            remove_when: remove_when.map(|w| Filter::parse(w, Some(&any)).expect("filter")),
        }
    }

    #[test]
    fn latest_row_per_key_and_removals() {
        let s = spec(&["order_id"], Some(r#"{"action":["C","F"]}"#));
        let mut m = StateMap::new(1, 10);
        let rows: [&[u8]; 6] = [
            br#"{"order_id":7,"action":"A","size":1}"#,
            br#"{"order_id":8,"action":"A","size":2}"#,
            br#"{"order_id":7,"action":"M","size":3}"#,
            br#"{"order_id":8,"action":"C","size":0}"#,
            br#"{"order_id":9,"action":"F","size":0}"#,
            br#"{"order_id":8,"action":"A","size":5}"#,
        ];
        let got: Vec<Applied> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| m.apply(&s, 1 + i as u64, 100 + i as i64, r))
            .collect();
        assert_eq!(
            got,
            [
                Applied::Inserted,
                Applied::Inserted,
                Applied::Updated,
                Applied::Removed,
                Applied::RemovedAbsent,
                Applied::Inserted
            ]
        );
        assert_eq!(m.position(), 7);
        assert_eq!(m.len(), 2);
        let by_version = m.selected_by_version(None);
        assert_eq!(
            by_version.iter().map(|e| e.version).collect::<Vec<_>>(),
            [3, 6]
        );
        assert_eq!(&*by_version[0].row, rows[2]);
        assert_eq!(by_version[0].ts_us, 102);
        assert_eq!(m.row_bytes(), rows[2].len() + rows[5].len());
        assert!(!m.incomplete());
    }

    #[test]
    fn selection_is_a_where_filter_on_the_latest_row() {
        let s = spec(&["symbol"], None);
        let mut m = StateMap::new(1, 10);
        m.apply(&s, 1, 0, br#"{"symbol":"A","side":1}"#);
        m.apply(&s, 2, 0, br#"{"symbol":"B","side":1}"#);
        m.apply(&s, 3, 0, br#"{"symbol":"A","side":0}"#);
        let any = |_: &str| ColumnLookup::Scalar;
        let f = Filter::parse(r#"{"side":1}"#, Some(&any)).unwrap();
        let sel = m.selected_by_version(Some(&f));
        assert_eq!(sel.len(), 1, "A's latest row no longer matches");
        assert_eq!(&*sel[0].row, br#"{"symbol":"B","side":1}"#);
    }

    #[test]
    fn at_max_keys_a_new_key_is_refused_and_the_state_is_incomplete() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let mut m = StateMap::new(1, 2);
        assert_eq!(
            m.apply(&s, 1, 0, br#"{"k":1,"gone":false}"#),
            Applied::Inserted
        );
        assert_eq!(
            m.apply(&s, 2, 0, br#"{"k":2,"gone":false}"#),
            Applied::Inserted
        );
        assert!(!m.incomplete());
        // a known key still updates at the limit
        assert_eq!(
            m.apply(&s, 3, 0, br#"{"k":2,"gone":false}"#),
            Applied::Updated
        );
        assert_eq!(
            m.apply(&s, 4, 0, br#"{"k":3,"gone":false}"#),
            Applied::Refused
        );
        assert!(m.incomplete());
        assert_eq!(m.len(), 2);
        assert_eq!(m.position(), 5);
    }

    #[test]
    fn key_order_is_value_order() {
        let s = spec(&["k"], None);
        let k = |row: &[u8]| s.key_of(row).unwrap();
        assert!(k(br#"{"k":-5}"#) < k(br#"{"k":3}"#));
        assert!(k(br#"{"k":9}"#) < k(br#"{"k":10}"#));
        assert!(k(br#"{"k":9223372036854775807}"#) < k(br#"{"k":18446744073709551615}"#));
        assert!(k(br#"{"k":"a"}"#) < k(br#"{"k":"ab"}"#));
        assert!(k(br#"{"k":"ab"}"#) < k(br#"{"k":"b"}"#));
        assert!(k(br#"{"k":false}"#) < k(br#"{"k":true}"#));
        // strings holding NUL still order and never collide with a tuple boundary
        assert!(k(br#"{"k":"a"}"#) < k(br#"{"k":"a\u0000"}"#));
        let s2 = spec(&["a", "b"], None);
        let k2 = |row: &[u8]| s2.key_of(row).unwrap();
        assert!(k2(br#"{"a":"x","b":2}"#) < k2(br#"{"a":"x","b":10}"#));
        assert!(k2(br#"{"a":"x","b":99}"#) < k2(br#"{"a":"y","b":0}"#));
        assert_ne!(k2(br#"{"a":"x","b":1}"#), k2(br#"{"a":"x","b":2}"#));
    }

    #[test]
    fn rows_without_a_key_are_reported() {
        let s = spec(&["k"], None);
        let mut m = StateMap::new(1, 4);
        assert_eq!(
            m.apply(&s, 1, 0, br#"{"k":null}"#),
            Applied::NoKey(NoKey {
                column: "k".into(),
                found: "null"
            })
        );
        assert!(matches!(
            m.apply(&s, 2, 0, br#"{"j":1}"#),
            Applied::NoKey(_)
        ));
        assert!(matches!(
            m.apply(&s, 3, 0, br#"{"k":1.5}"#),
            Applied::NoKey(_)
        ));
        assert!(m.is_empty());
        assert_eq!(m.position(), 4);
    }

    #[test]
    #[should_panic(expected = "offset order")]
    fn a_skipped_offset_is_a_bug() {
        let s = spec(&["k"], None);
        let mut m = StateMap::new(1, 4);
        m.apply(&s, 2, 0, br#"{"k":1}"#);
    }

    #[test]
    fn the_ts_of_a_payload() {
        assert_eq!(
            payload_ts(br#"[12,1700000000000001,{"a":1}]"#),
            Some(1_700_000_000_000_001)
        );
        assert_eq!(payload_ts(br#"[12,-3,{"a":1}]"#), Some(-3));
        assert_eq!(payload_ts(b"{}"), None);
    }
}
