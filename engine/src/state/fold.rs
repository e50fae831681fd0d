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

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use sonic_rs::{JsonType, JsonValueTrait};

use crate::filter::Filter;

/// A key: the key columns' values, order-preserving encoded (see the module docs). Ordered,
/// compared and hashed as its bytes are; up to [`KEY_INLINE`] bytes (an integer key is 17, a
/// short string a few more) are held in line, with no allocation, and compared eight bytes at
/// a time (the fold looks keys up, and orders them, on every row it folds).
#[derive(Clone)]
pub struct Key(KeyBytes);

/// Key bytes held in line (no allocation) at most.
pub const KEY_INLINE: usize = 23;

#[derive(Clone)]
enum KeyBytes {
    Inline(u8, [u8; KEY_INLINE]),
    Heap(Box<[u8]>),
}

impl Key {
    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            KeyBytes::Inline(n, b) => &b[..usize::from(*n)],
            KeyBytes::Heap(b) => b,
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Key {
        if b.len() <= KEY_INLINE {
            let mut a = [0u8; KEY_INLINE];
            a[..b.len()].copy_from_slice(b);
            Key(KeyBytes::Inline(b.len() as u8, a))
        } else {
            Key(KeyBytes::Heap(b.into()))
        }
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Key {
        if b.len() <= KEY_INLINE {
            Key::from(b.as_slice())
        } else {
            Key(KeyBytes::Heap(b.into_boxed_slice()))
        }
    }
}

// the order, equality and hash of the bytes (`Ord` below agrees with `[u8]`'s, `Hash` is
// `[u8]`'s): lookups by `&[u8]` find what lookups by `&Key` find
impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = Vec::new();
        key_json(self, &mut out);
        f.write_str(&String::from_utf8_lossy(&out))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        let (a, b) = (self.as_bytes(), other.as_bytes());
        let mut ca = a.chunks_exact(8);
        let mut cb = b.chunks_exact(8);
        for (x, y) in ca.by_ref().zip(cb.by_ref()) {
            let x = u64::from_be_bytes(x.try_into().expect("8 bytes"));
            let y = u64::from_be_bytes(y.try_into().expect("8 bytes"));
            if x != y {
                return x.cmp(&y);
            }
        }
        let n = a.len().min(b.len()) / 8 * 8;
        a[n..].cmp(&b[n..])
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

const TAG_FALSE: u8 = 0x01;
const TAG_TRUE: u8 = 0x02;
const TAG_INT: u8 = 0x03;
const TAG_STR: u8 = 0x04;

/// Which columns make the key, and which rows remove it.
#[derive(Debug, Clone)]
pub struct KeySpec {
    columns: Vec<String>,
    remove_when: Option<Filter>,
    /// What one pass over a row looks for: the key columns, then `remove_when`'s columns.
    wanted: Vec<Box<[u8]>>,
}

/// Why a row has no key (it lacks a key column, or holds a value no key can take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoKey {
    /// The column.
    pub column: String,
    /// What was there instead.
    pub found: &'static str,
}

/// Top-level columns one pass over a row looks for, at most (key columns plus `remove_when`'s
/// terms); a declaration naming more takes the general path.
const SCAN_MAX: usize = 16;

impl KeySpec {
    /// The key `columns` (in declaration order) and the rows that remove their key.
    pub fn new(columns: Vec<String>, remove_when: Option<Filter>) -> KeySpec {
        let wanted = columns
            .iter()
            .map(String::as_str)
            .chain(remove_when.iter().flat_map(Filter::columns))
            .map(|c| c.as_bytes().into())
            .collect();
        KeySpec {
            columns,
            remove_when,
            wanted,
        }
    }

    /// The key columns, in declaration order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Rows that match it remove their key (`remove_when`).
    pub fn remove_when(&self) -> Option<&Filter> {
        self.remove_when.as_ref()
    }

    /// The key of `row` (the stored, canonical JSON object bytes).
    pub fn key_of(&self, row: &[u8]) -> Result<Key, NoKey> {
        let mut out = Vec::with_capacity(24);
        self.key_into(row, &mut out)?;
        Ok(Key::from(out))
    }

    /// The key of `row` appended to `out` (the general path: one lookup per column).
    fn key_into(&self, row: &[u8], out: &mut Vec<u8>) -> Result<(), NoKey> {
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
                    push_int(out, i);
                }
                JsonType::String => {
                    let s = v.as_str().ok_or_else(|| no("a string it could not read"))?;
                    push_str(out, s.as_bytes());
                }
                JsonType::Null => return Err(no("null")),
                JsonType::Array | JsonType::Object => return Err(no("a list or object")),
            }
        }
        Ok(())
    }

    /// Whether `row` removes its key.
    pub fn removes(&self, row: &[u8]) -> bool {
        self.remove_when.as_ref().is_some_and(|f| f.matches(row))
    }

    /// The key of `row` into `out` (cleared first) and whether the row removes it, in one pass
    /// over the row's canonical bytes; the same answers as [`KeySpec::key_of`] and
    /// [`KeySpec::removes`] (checked in debug builds), which it falls back to for bytes it does
    /// not expect.
    pub fn key_and_removes(&self, row: &[u8], out: &mut Vec<u8>) -> Result<bool, NoKey> {
        out.clear();
        let fast = self.fast_key_and_removes(row, out);
        if cfg!(debug_assertions) {
            if let Some(fast) = &fast {
                let mut slow = Vec::new();
                let slow_r = self.key_into(row, &mut slow).map(|()| self.removes(row));
                assert_eq!(
                    fast.as_ref().ok(),
                    slow_r.as_ref().ok(),
                    "removes: one pass vs lookups on {:?}",
                    String::from_utf8_lossy(row)
                );
                if fast.is_ok() {
                    assert_eq!(
                        *out,
                        slow,
                        "key: one pass vs lookups on {:?}",
                        String::from_utf8_lossy(row)
                    );
                }
            }
        }
        match fast {
            Some(r) => r,
            None => {
                out.clear();
                self.key_into(row, out)?;
                Ok(self.removes(row))
            }
        }
    }

    /// The one-pass path; `None`: take the general one.
    fn fast_key_and_removes(&self, row: &[u8], out: &mut Vec<u8>) -> Option<Result<bool, NoKey>> {
        let n = self.wanted.len();
        if n > SCAN_MAX {
            return None;
        }
        let mut found: [Option<&[u8]>; SCAN_MAX] = [None; SCAN_MAX];
        scan_top(row, &self.wanted, &mut found[..n])?;
        for (i, c) in self.columns.iter().enumerate() {
            let no = |found| {
                Some(Err(NoKey {
                    column: c.clone(),
                    found,
                }))
            };
            let Some(raw) = found[i] else {
                return no("nothing");
            };
            match raw[0] {
                b't' => out.push(TAG_TRUE),
                b'f' => out.push(TAG_FALSE),
                b'n' => return no("null"),
                b'[' | b'{' => return no("a list or object"),
                b'"' => {
                    let inner = &raw[1..raw.len() - 1];
                    if inner.contains(&b'\\') {
                        // an escape: the general path decodes it
                        return None;
                    }
                    push_str(out, inner);
                }
                _ => {
                    let (neg, digits) = match raw.strip_prefix(b"-") {
                        Some(d) => (true, d),
                        None => (false, raw),
                    };
                    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                        return no("a non-integer number");
                    }
                    // beyond i64..=u64 the JSON parser reads a number, not an integer
                    if digits.len() > 20 || (neg && digits.iter().all(|&d| d == b'0')) {
                        // (`-0` too: the parser reads it as the number 0.0)
                        return no("a non-integer number");
                    }
                    let m = digits
                        .iter()
                        .fold(0i128, |m, &d| m * 10 + i128::from(d - b'0'));
                    let i = if neg { -m } else { m };
                    if i < i128::from(i64::MIN) || i > i128::from(u64::MAX) {
                        return no("a non-integer number");
                    }
                    push_int(out, i);
                }
            }
        }
        let removes = self
            .remove_when
            .as_ref()
            .is_some_and(|f| f.matches_values(&found[self.columns.len()..n]));
        Some(Ok(removes))
    }
}

fn push_int(out: &mut Vec<u8>, i: i128) {
    out.push(TAG_INT);
    out.extend_from_slice(&((i as u128) ^ (1u128 << 127)).to_be_bytes());
}

fn push_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(TAG_STR);
    for &b in s {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// One pass over a row's canonical JSON object (compact, as the row codec writes it): the raw
/// bytes of the top-level value of each of `names` into `found` (the first, should a name
/// repeat). `None` for bytes that are not a compact object, or a key holding an escape — the
/// caller then takes the general path.
fn scan_top<'a>(row: &'a [u8], names: &[Box<[u8]>], found: &mut [Option<&'a [u8]>]) -> Option<()> {
    let mut left = names.len();
    let mut i = 1;
    if row.first() != Some(&b'{') {
        return None;
    }
    if row.get(1) == Some(&b'}') {
        return Some(());
    }
    loop {
        // "name":
        if row.get(i) != Some(&b'"') {
            return None;
        }
        let name_start = i + 1;
        let name_len = row
            .get(name_start..)?
            .iter()
            .position(|&b| b == b'"' || b == b'\\')?;
        let name = &row[name_start..name_start + name_len];
        if row[name_start + name_len] != b'"' {
            return None;
        }
        i = name_start + name_len + 1;
        if row.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        let start = i;
        i = skip_value(row, i)?;
        for (slot, want) in found.iter_mut().zip(names) {
            if slot.is_none() && **want == *name {
                *slot = Some(&row[start..i]);
                left -= 1;
            }
        }
        if left == 0 {
            return Some(());
        }
        match row.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Some(()),
            _ => return None,
        }
    }
}

/// The end of the JSON value starting at `i`.
fn skip_value(row: &[u8], mut i: usize) -> Option<usize> {
    match *row.get(i)? {
        b'"' => skip_string(row, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match *row.get(i)? {
                    b'"' => {
                        i = skip_string(row, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let end = row[i..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']'))?;
            (end > 0).then_some(i + end)
        }
    }
}

/// The end of the JSON string starting (at its `"`) at `i`.
fn skip_string(row: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match *row.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// One entity: its latest row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The row's offset: the entity's version.
    pub version: u64,
    /// The commit's timestamp, µs since the epoch.
    pub ts_us: i64,
    /// The row's stored bytes (the wire payload's third element). A later row of the same key
    /// is copied into this buffer (no allocation unless it is longer).
    pub row: Vec<u8>,
    /// The key did not exist at any offset in `absent.0..absent.1` (the entity was created at
    /// `absent.1`, after a removal at `absent.0`, or with none remembered: `absent.0 == 0`),
    /// so a change token in `absent.0 + 1..=absent.1` was issued for a copy that cannot hold
    /// it. `(0, 0)`: not known (an entity read from a checkpoint).
    pub absent: (u64, u64),
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
    /// The entities by key: what the fold looks up on every row.
    entries: FxHashMap<Key, Entry>,
    /// The same keys in key order (the collection's windows), changed only when a key comes or
    /// goes, not when its row is replaced.
    order: BTreeSet<Key>,
    /// The offset of the next row to fold.
    position: u64,
    max_keys: usize,
    /// Set by the first refused key; a state that lacks a key is never served.
    incomplete: bool,
    /// Summed row bytes of the entities.
    row_bytes: usize,
    /// Keys removed by `remove_when`, with the removing row's offset (for `/changes`), at
    /// most `max_keys`; the oldest go first.
    tombstones: FxHashMap<Key, u64>,
    /// The same tombstones by offset.
    tombstones_by_offset: BTreeMap<u64, Key>,
    /// Changes from this offset on are all known: removals below it may have been forgotten
    /// (the state was built or recovered here, or tombstones were dropped at the bound).
    changes_floor: u64,
    /// The key of the row being folded (reused: no allocation per row for a known key).
    scratch: Vec<u8>,
}

impl StateMap {
    /// An empty state whose first row will be `position`.
    pub fn new(position: u64, max_keys: usize) -> StateMap {
        assert!(max_keys >= 1, "max_keys is at least 1");
        StateMap {
            entries: FxHashMap::default(),
            order: BTreeSet::new(),
            position,
            max_keys,
            incomplete: false,
            row_bytes: 0,
            tombstones: FxHashMap::default(),
            tombstones_by_offset: BTreeMap::new(),
            changes_floor: position,
            scratch: Vec::with_capacity(32),
        }
    }

    /// A state as a checkpoint recorded it: the entities, the remembered removals (key, the
    /// removing row's offset) and the offset from which changes are all known.
    pub fn from_checkpoint(
        position: u64,
        max_keys: usize,
        entries: BTreeMap<Key, Entry>,
        tombstones: Vec<(Key, u64)>,
        changes_floor: u64,
    ) -> StateMap {
        let mut m = StateMap::new(position, max_keys);
        for e in entries.values() {
            assert!(
                e.version < position,
                "an entity's version is below the state's position"
            );
        }
        assert!(
            changes_floor <= position,
            "the changes floor is below the position"
        );
        m.row_bytes = entries.values().map(|e| e.row.len()).sum();
        // a checkpoint taken under a larger max_keys: more entities than allowed now
        m.incomplete = entries.len() > max_keys;
        m.order = entries.keys().cloned().collect();
        m.entries = entries.into_iter().collect();
        m.changes_floor = changes_floor;
        for (k, at) in tombstones {
            assert!(at < position, "a removal is below the state's position");
            m.tombstone(k, at);
        }
        m
    }

    /// The remembered removals: key and the removing row's offset, oldest first.
    pub fn tombstones(&self) -> impl Iterator<Item = (&Key, u64)> {
        self.tombstones_by_offset.iter().map(|(at, k)| (k, *at))
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
        let mut key = std::mem::take(&mut self.scratch);
        let applied = match spec.key_and_removes(row, &mut key) {
            Ok(removes) => self.apply_keyed(&key, removes, offset, ts_us, row),
            Err(e) => Applied::NoKey(e),
        };
        self.scratch = key;
        applied
    }

    fn apply_keyed(
        &mut self,
        key: &[u8],
        removes: bool,
        offset: u64,
        ts_us: i64,
        row: &[u8],
    ) -> Applied {
        if removes {
            return match self.entries.remove_entry(key) {
                Some((key, old)) => {
                    self.order.remove(&key);
                    self.row_bytes -= old.row.len();
                    self.tombstone(key, offset);
                    Applied::Removed
                }
                None => Applied::RemovedAbsent,
            };
        }
        if let Some(e) = self.entries.get_mut(key) {
            self.row_bytes = self.row_bytes - e.row.len() + row.len();
            e.version = offset;
            e.ts_us = ts_us;
            e.row.clear();
            e.row.extend_from_slice(row);
            return Applied::Updated;
        }
        if self.entries.len() >= self.max_keys {
            self.incomplete = true;
            return Applied::Refused;
        }
        self.row_bytes += row.len();
        // with no removal remembered, none a valid token could miss was forgotten either
        // (forgetting one raises the changes floor past it): the key was absent since before
        // any token still answered
        let mut absent_from = 0;
        if !self.tombstones.is_empty() {
            if let Some(at) = self.tombstones.remove(key) {
                self.tombstones_by_offset.remove(&at);
                absent_from = at;
            }
        }
        let key = Key::from(key);
        self.order.insert(key.clone());
        self.entries.insert(
            key,
            Entry {
                version: offset,
                ts_us,
                row: row.to_vec(),
                absent: (absent_from, offset),
            },
        );
        debug_assert!(self.entries.len() <= self.max_keys);
        debug_assert_eq!(self.entries.len(), self.order.len());
        Applied::Inserted
    }

    fn tombstone(&mut self, key: Key, offset: u64) {
        if let Some(at) = self.tombstones.insert(key.clone(), offset) {
            self.tombstones_by_offset.remove(&at);
        }
        self.tombstones_by_offset.insert(offset, key);
        while self.tombstones.len() > self.max_keys {
            let (at, k) = self
                .tombstones_by_offset
                .pop_first()
                .expect("as many tombstones by offset as by key");
            self.tombstones.remove(&k);
            // a reader whose token is at or below `at` could miss this removal
            self.changes_floor = self.changes_floor.max(at + 1);
        }
        debug_assert_eq!(self.tombstones.len(), self.tombstones_by_offset.len());
    }

    /// The lowest offset a `/changes` token may hold: every removal from it on is known.
    pub fn changes_floor(&self) -> u64 {
        self.changes_floor
    }

    /// Up to `limit` entities passing `filter` in key order after `after` (from the first
    /// without it), stopping early once their rows reach `bytes_max`; and whether any passing
    /// entity is left after them.
    pub fn window(
        &self,
        filter: Option<&Filter>,
        after: Option<&[u8]>,
        limit: usize,
        bytes_max: usize,
    ) -> (Vec<(&Key, &Entry)>, bool) {
        use std::ops::Bound;
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut it = self
            .order
            .range::<[u8], _>((lower, Bound::Unbounded))
            .map(|k| (k, &self.entries[k]))
            .filter(|(_, e)| filter.is_none_or(|f| f.matches(&e.row)));
        for (k, e) in it.by_ref() {
            out.push((k, e));
            bytes += e.row.len();
            if out.len() >= limit || bytes >= bytes_max {
                break;
            }
        }
        let more = it.next().is_some();
        (out, more)
    }

    /// What changed for a reader of the selection `filter` that holds the state as of
    /// `since` (every row below it): up to `limit` changes in offset order, and the offset a
    /// reader holding them is at. `None` when `since` is below [`StateMap::changes_floor`] or
    /// past the position (the reader must read the state again).
    pub fn changes(
        &self,
        filter: Option<&Filter>,
        since: u64,
        limit: usize,
    ) -> Option<(Vec<Change<'_>>, u64)> {
        if since < self.changes_floor || since > self.position {
            return None;
        }
        let mut out: Vec<Change<'_>> = self
            .entries
            .iter()
            .filter(|(_, e)| e.version >= since)
            .filter_map(|(k, e)| {
                if filter.is_none_or(|f| f.matches(&e.row)) {
                    Some(Change::Upsert(k, e))
                } else if e.absent.0 < since && since <= e.absent.1 {
                    // created since the token: the reader's copy never held it
                    None
                } else {
                    // it may be in the copy (its row at the token is not kept): said gone
                    Some(Change::Left(k, e.version))
                }
            })
            .collect();
        out.extend(
            self.tombstones_by_offset
                .range(since..)
                .map(|(at, k)| Change::Removed(k, *at)),
        );
        out.sort_unstable_by_key(Change::offset);
        if out.len() > limit {
            out.truncate(limit);
            let next = out.last().map_or(since, |c| c.offset() + 1);
            return Some((out, next));
        }
        Some((out, self.position))
    }

    /// The entities whose row passes `filter`, in version (offset) order.
    pub fn selected_by_version(&self, filter: Option<&Filter>) -> Vec<&Entry> {
        // sorted by the version held beside each reference: comparing never reads an entry
        let mut v: Vec<(u64, &Entry)> = self
            .entries
            .values()
            .filter(|e| filter.is_none_or(|f| f.matches(&e.row)))
            .map(|e| (e.version, e))
            .collect();
        v.sort_unstable_by_key(|(version, _)| *version);
        v.into_iter().map(|(_, e)| e).collect()
    }

    /// Every entity in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.order.iter().map(|k| (k, &self.entries[k]))
    }

    /// The entity of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key)
    }
}

/// One change since a reader's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    /// The key's latest row is in the selection.
    Upsert(&'a Key, &'a Entry),
    /// The key's latest row (at this version) is no longer in the selection.
    Left(&'a Key, u64),
    /// The key was removed (`remove_when`) by the row at this offset.
    Removed(&'a Key, u64),
}

impl Change<'_> {
    /// The offset of the row that made the change.
    pub fn offset(&self) -> u64 {
        match self {
            Change::Upsert(_, e) => e.version,
            Change::Left(_, v) | Change::Removed(_, v) => *v,
        }
    }
}

/// The key's values as a JSON array (`[6412777162812]`, `["BTCUSDT"]`, `[true,"a"]`).
pub fn key_json(key: &[u8], out: &mut Vec<u8>) {
    out.push(b'[');
    let mut i = 0;
    let mut first = true;
    while i < key.len() {
        if !first {
            out.push(b',');
        }
        first = false;
        match key[i] {
            TAG_FALSE => {
                out.extend_from_slice(b"false");
                i += 1;
            }
            TAG_TRUE => {
                out.extend_from_slice(b"true");
                i += 1;
            }
            TAG_INT => {
                let raw: [u8; 16] = key[i + 1..i + 17].try_into().expect("16 bytes");
                let v = (u128::from_be_bytes(raw) ^ (1u128 << 127)) as i128;
                out.extend_from_slice(v.to_string().as_bytes());
                i += 17;
            }
            TAG_STR => {
                let mut bytes = Vec::new();
                let mut j = i + 1;
                loop {
                    match (key[j], key.get(j + 1)) {
                        (0, Some(0)) => break,
                        (0, Some(0xff)) => {
                            bytes.push(0);
                            j += 2;
                        }
                        (b, _) => {
                            bytes.push(b);
                            j += 1;
                        }
                    }
                }
                let s = String::from_utf8(bytes).expect("a key string is UTF-8");
                corecast_storage::schema::write_json_str(out, &s);
                i = j + 2;
            }
            t => unreachable!("key tag {t:#x}: keys are built by KeySpec::key_of"),
        }
    }
    out.push(b']');
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
        KeySpec::new(
            columns.iter().map(|c| c.to_string()).collect(),
            remove_when.map(|w| Filter::parse(w, Some(&any)).expect("filter")),
        )
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
    fn keys_in_line_and_on_the_heap_order_and_match_as_their_bytes() {
        let s = spec(&["k"], None);
        let k = |v: &str| s.key_of(format!(r#"{{"k":"{v}"}}"#).as_bytes()).unwrap();
        let long = "x".repeat(40);
        let longer = format!("{long}y");
        assert!(k("x").len() <= KEY_INLINE && k(&long).len() > KEY_INLINE);
        assert!(k("x") < k(&long) && k(&long) < k(&longer) && k(&longer) < k("y"));
        let mut m = StateMap::new(1, 10);
        for (i, v) in ["y", &longer, "x", &long].iter().enumerate() {
            m.apply(&s, 1 + i as u64, 0, format!(r#"{{"k":"{v}"}}"#).as_bytes());
        }
        let order: Vec<&[u8]> = m.iter().map(|(k, _)| k.as_bytes()).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "key order is byte order");
        assert_eq!(m.get(&k(&long)).map(|e| e.version), Some(4));
        assert_eq!(m.get(&k("y")).map(|e| e.version), Some(1));
    }

    #[test]
    fn keys_render_back_as_their_values() {
        let s = spec(&["a", "b", "c"], None);
        let k = s.key_of(br#"{"a":-12,"b":"x\"\u0000y","c":true}"#).unwrap();
        let mut out = Vec::new();
        key_json(&k, &mut out);
        assert_eq!(out, br#"[-12,"x\"\u0000y",true]"#);
    }

    #[test]
    fn windows_go_in_key_order_and_never_repeat_an_entity() {
        let s = spec(&["k"], None);
        let mut m = StateMap::new(1, 100);
        for (i, k) in [5, 3, 9, 1, 7].iter().enumerate() {
            m.apply(&s, 1 + i as u64, 0, format!(r#"{{"k":{k}}}"#).as_bytes());
        }
        let (w1, more) = m.window(None, None, 2, usize::MAX);
        assert!(more);
        let keys = |w: &[(&Key, &Entry)]| {
            w.iter()
                .map(|(_, e)| String::from_utf8(e.row.to_vec()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&w1), [r#"{"k":1}"#, r#"{"k":3}"#]);
        let last: Key = w1[1].0.clone();
        // an update between windows does not move an entity across the boundary
        m.apply(&s, 6, 0, br#"{"k":1}"#);
        let (w2, more) = m.window(None, Some(&last), 10, usize::MAX);
        assert!(!more);
        assert_eq!(keys(&w2), [r#"{"k":5}"#, r#"{"k":7}"#, r#"{"k":9}"#]);
    }

    #[test]
    fn changes_since_a_token_hold_upserts_removals_and_departures() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let any = |_: &str| ColumnLookup::Scalar;
        let pending = Filter::parse(r#"{"status":"pending"}"#, Some(&any)).unwrap();
        let mut m = StateMap::new(1, 100);
        m.apply(&s, 1, 0, br#"{"k":1,"status":"pending","gone":false}"#);
        m.apply(&s, 2, 0, br#"{"k":2,"status":"pending","gone":false}"#);
        m.apply(&s, 3, 0, br#"{"k":3,"status":"pending","gone":false}"#);
        let token = m.position();
        m.apply(&s, 4, 0, br#"{"k":1,"status":"filled","gone":false}"#);
        m.apply(&s, 5, 0, br#"{"k":2,"status":"x","gone":true}"#);
        m.apply(&s, 6, 0, br#"{"k":4,"status":"pending","gone":false}"#);
        let (changes, next) = m.changes(Some(&pending), token, 10).unwrap();
        assert_eq!(next, 7);
        let got: Vec<(&str, u64)> = changes
            .iter()
            .map(|c| match c {
                Change::Upsert(_, e) => ("upsert", e.version),
                Change::Left(_, v) => ("left", *v),
                Change::Removed(_, v) => ("removed", *v),
            })
            .collect();
        assert_eq!(got, [("left", 4), ("removed", 5), ("upsert", 6)]);
        // cut at a limit: the next token resumes after the last change sent
        let (first, next) = m.changes(Some(&pending), token, 2).unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(next, 6);
        let (rest, next) = m.changes(Some(&pending), next, 2).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(next, 7);
        // a token from before the state was built is refused
        let m2 = StateMap::new(10, 4);
        assert!(m2.changes(None, 9, 10).is_none());
        assert!(m2.changes(None, 11, 10).is_none(), "ahead of the state");
    }

    #[test]
    fn departures_leave_out_keys_the_copy_cannot_hold() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let any = |_: &str| ColumnLookup::Scalar;
        let pending = Filter::parse(r#"{"status":"pending"}"#, Some(&any)).unwrap();
        let mut m = StateMap::new(1, 100);
        m.apply(&s, 1, 0, br#"{"k":1,"status":"pending","gone":false}"#);
        m.apply(&s, 2, 0, br#"{"k":2,"status":"filled","gone":false}"#);
        m.apply(&s, 3, 0, br#"{"k":3,"status":"pending","gone":false}"#);
        m.apply(&s, 4, 0, br#"{"k":3,"status":"x","gone":true}"#);
        let token = m.position();
        // created after the token and never in the selection: not in the copy, not reported
        m.apply(&s, 5, 0, br#"{"k":9,"status":"filled","gone":false}"#);
        // created after the token, then out of the selection: not in the copy either
        m.apply(&s, 6, 0, br#"{"k":8,"status":"pending","gone":false}"#);
        m.apply(&s, 7, 0, br#"{"k":8,"status":"filled","gone":false}"#);
        // removed before the token, back after it out of the selection: not in the copy
        m.apply(&s, 8, 0, br#"{"k":3,"status":"filled","gone":false}"#);
        // in the copy, then out of it: reported
        m.apply(&s, 9, 0, br#"{"k":1,"status":"filled","gone":false}"#);
        // there at the token but its row then is not kept: reported, as it may be in the copy
        m.apply(&s, 10, 0, br#"{"k":2,"status":"filled","gone":false}"#);
        let (changes, _) = m.changes(Some(&pending), token, 10).unwrap();
        let got: Vec<(&str, u64)> = changes
            .iter()
            .map(|c| match c {
                Change::Upsert(_, e) => ("upsert", e.version),
                Change::Left(_, v) => ("left", *v),
                Change::Removed(_, v) => ("removed", *v),
            })
            .collect();
        assert_eq!(got, [("left", 9), ("left", 10)]);
        // a token from before key 3 was removed: it may hold 3, so 3's departure is reported
        let (changes, _) = m.changes(Some(&pending), 4, 10).unwrap();
        assert!(changes
            .iter()
            .any(|c| matches!(c, Change::Left(k, 8) if **k == s.key_of(br#"{"k":3}"#).unwrap())));
    }

    #[test]
    fn tombstones_are_bounded_and_raise_the_changes_floor() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let mut m = StateMap::new(1, 2);
        let mut o = 1;
        for k in 0..3 {
            m.apply(&s, o, 0, format!(r#"{{"k":{k},"gone":false}}"#).as_bytes());
            o += 1;
            m.apply(&s, o, 0, format!(r#"{{"k":{k},"gone":true}}"#).as_bytes());
            o += 1;
        }
        // three removals at offsets 2, 4, 6 with room for two: the one at 2 is forgotten
        assert_eq!(m.changes_floor(), 3);
        assert!(m.changes(None, 2, 10).is_none());
        assert_eq!(m.changes(None, 3, 10).unwrap().0.len(), 2);
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
