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

use std::collections::{BTreeMap, VecDeque};

use hashbrown::{hash_table, HashTable};
use memchr::memmem::Finder;

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
    Inline(Inline),
    Heap(Box<[u8]>),
}

/// Up to [`KEY_INLINE`] key bytes, zero-padded, then their count in the last byte; aligned,
/// so that it reads (and compares, and moves) as three words.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(align(8))]
struct Inline([u8; KEY_INLINE + 1]);

impl Inline {
    /// The three words, in an order that is the bytes' order: the zero-padded bytes, then the
    /// length (where the padded bytes agree, the shorter key is a prefix of the other: it comes
    /// first, as in byte order).
    #[inline(always)]
    fn words(&self) -> [u64; 3] {
        let w = |i: usize| u64::from_be_bytes(self.0[i..i + 8].try_into().expect("8 bytes"));
        [w(0), w(8), w(16)]
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.0[..usize::from(self.0[KEY_INLINE])]
    }
}

impl Key {
    /// The encoded bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            KeyBytes::Inline(a) => a.bytes(),
            KeyBytes::Heap(b) => b,
        }
    }

    /// The table's hash of the key (a function of its bytes).
    #[inline]
    fn table_hash(&self) -> u32 {
        match &self.0 {
            KeyBytes::Inline(a) => {
                let [x, y, z] = a.words();
                // two folded multiplications (as foldhash does): every bit of every word
                // reaches the high half
                let m = |a: u64, b: u64| {
                    let p = u128::from(a) * u128::from(b);
                    (p as u64) ^ ((p >> 64) as u64)
                };
                let h = m(x ^ 0x243f_6a88_85a3_08d3, y ^ 0x1319_8a2e_0370_7344)
                    ^ m(z ^ 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89);
                (h ^ (h >> 32)) as u32
            }
            KeyBytes::Heap(b) => {
                use std::hash::BuildHasher;
                let h = rustc_hash::FxBuildHasher.hash_one(&**b);
                (h ^ (h >> 32)) as u32
            }
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
    #[inline]
    fn from(b: &[u8]) -> Key {
        if b.len() <= KEY_INLINE {
            let mut a = [0u8; KEY_INLINE + 1];
            a[..b.len()].copy_from_slice(b);
            a[KEY_INLINE] = b.len() as u8;
            Key(KeyBytes::Inline(Inline(a)))
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
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        match (&self.0, &other.0) {
            // in line, the bytes past the length are zero: equal arrays, equal bytes
            (KeyBytes::Inline(a), KeyBytes::Inline(b)) => a == b,
            // a key is in line exactly when it is short enough: never equal to one that is not
            (KeyBytes::Heap(a), KeyBytes::Heap(b)) => a == b,
            _ => false,
        }
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
    #[inline(always)]
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        if let (KeyBytes::Inline(a), KeyBytes::Inline(b)) = (&self.0, &other.0) {
            return a.words().cmp(&b.words());
        }
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
    /// `"name":` for each of `wanted`, searched for in rows with no nested list or object
    /// ([`find_top`]); `None` when a name holds a byte the row codec escapes.
    needles: Option<Vec<Finder<'static>>>,
    /// `remove_when`'s values as bytes, term by term, when they are all strings
    /// ([`Filter::string_sets`]): a raw string value with no escape is compared with them.
    remove_strs: Option<Vec<Vec<Box<[u8]>>>>,
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
        let wanted: Vec<Box<[u8]>> = columns
            .iter()
            .map(String::as_str)
            .chain(remove_when.iter().flat_map(Filter::columns))
            .map(|c| c.as_bytes().into())
            .collect();
        let plain = |c: &[u8]| !c.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20);
        let needles = wanted.iter().all(|c| plain(c)).then(|| {
            wanted
                .iter()
                .map(|c| {
                    let mut needle = Vec::with_capacity(c.len() + 3);
                    needle.push(b'"');
                    needle.extend_from_slice(c);
                    needle.extend_from_slice(b"\":");
                    Finder::new(&needle).into_owned()
                })
                .collect()
        });
        let remove_strs = remove_when
            .as_ref()
            .and_then(Filter::string_sets)
            .map(|sets| {
                sets.iter()
                    .map(|set| set.iter().map(|s| s.as_bytes().into()).collect())
                    .collect()
            });
        KeySpec {
            columns,
            remove_when,
            wanted,
            needles,
            remove_strs,
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
        let quick = self
            .needles
            .as_ref()
            .is_some_and(|needles| find_top(row, needles, &mut found[..n]));
        if !quick {
            found[..n].fill(None);
            scan_top(row, &self.wanted, &mut found[..n])?;
        }
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
                    // up to 19 digits fit a u64 (cheaper than i128 arithmetic)
                    let m = if digits.len() <= 19 {
                        i128::from(
                            digits
                                .iter()
                                .fold(0u64, |m, &d| m * 10 + u64::from(d - b'0')),
                        )
                    } else {
                        digits
                            .iter()
                            .fold(0i128, |m, &d| m * 10 + i128::from(d - b'0'))
                    };
                    let i = if neg { -m } else { m };
                    if i < i128::from(i64::MIN) || i > i128::from(u64::MAX) {
                        return no("a non-integer number");
                    }
                    push_int(out, i);
                }
            }
        }
        let values = &found[self.columns.len()..n];
        let removes = self.remove_when.as_ref().is_some_and(|f| {
            self.remove_strs
                .as_ref()
                .and_then(|sets| strings_match(sets, values))
                .unwrap_or_else(|| f.matches_values(values))
        });
        Some(Ok(removes))
    }
}

/// Whether each raw value is a string among its term's `sets` (every value of every term a
/// string: anything else fails the term), compared as bytes; `None` for a string holding an
/// escape (the filter decodes it).
fn strings_match(sets: &[Vec<Box<[u8]>>], values: &[Option<&[u8]>]) -> Option<bool> {
    for (set, raw) in sets.iter().zip(values) {
        let Some(raw) = raw.filter(|r| r.len() >= 2 && r[0] == b'"') else {
            return Some(false);
        };
        let inner = &raw[1..raw.len() - 1];
        if inner.contains(&b'\\') {
            return None;
        }
        if !set.iter().any(|s| **s == *inner) {
            return Some(false);
        }
    }
    Some(true)
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

/// [`scan_top`]'s answer, found faster: each name's `"name":` searched for (memchr's
/// vectorised search). In a compact object such a match just after a `{` or `,` can only be a
/// member's name (a quote inside a string is escaped), and with no `{` or `[` before it (in
/// strings or out) nothing is nested there: a top-level member, the first of that name.
/// `false` when it cannot tell (a name not found, a match elsewhere or after a `{` or `[`):
/// the caller then scans.
fn find_top<'a>(
    row: &'a [u8],
    needles: &[Finder<'static>],
    found: &mut [Option<&'a [u8]>],
) -> bool {
    if row.first() != Some(&b'{') {
        return false;
    }
    let mut last = 1;
    for (slot, needle) in found.iter_mut().zip(needles) {
        let Some(at) = needle.find(row) else {
            return false;
        };
        // `at` ≥ 1: the row opens with `{`, a needle with `"`
        if !matches!(row[at - 1], b'{' | b',') {
            return false;
        }
        let start = at + needle.needle().len();
        let Some(end) = skip_value(row, start) else {
            return false;
        };
        *slot = Some(&row[start..end]);
        last = last.max(at);
    }
    memchr::memchr2(b'{', b'[', &row[1..last]).is_none()
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
            // a compact row has no whitespace around a value: anything else is for the
            // general path (read as a scalar, `" 5"` would be no number at all)
            let v = &row[i..i + end];
            (end > 0 && !v.iter().any(u8::is_ascii_whitespace)).then_some(i + end)
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

/// One entity: its latest row (a view of the state's storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The row's offset: the entity's version.
    pub version: u64,
    /// The commit's timestamp, µs since the epoch.
    pub ts_us: i64,
    /// The row's stored bytes (the wire payload's third element), held in the state's row
    /// pages: a later row of the same key is copied over it (in place when it fits).
    pub row: &'a [u8],
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
    /// Every key's place, by key: its entity or its remembered removal, as an 8-byte item
    /// (the fold probes it once on every row; small items keep the probes in cache).
    table: HashTable<Item>,
    /// The entities (the items' `at`).
    ents: Slab<Ent>,
    /// The remembered removals (tombstones; the items' `at` with [`TOMB`]), at most `max_keys`;
    /// the oldest go first.
    tombs: Slab<Tomb>,
    /// The entities' row bytes.
    rows: Rows,
    /// Entities held.
    held: usize,
    /// Removals remembered.
    removed: usize,
    /// The removals by offset, oldest first, as (offset, tombstone): an item whose tombstone
    /// no longer holds that offset (its key came back, or was forgotten) is stale and skipped.
    removals: VecDeque<(u64, u32)>,
    /// The keys in key order (the collection's windows), put in order when a read needs it.
    order: KeyOrder,
    /// The offset of the next row to fold.
    position: u64,
    max_keys: usize,
    /// Set by the first refused key; a state that lacks a key is never served.
    incomplete: bool,
    /// Summed row bytes of the entities.
    row_bytes: usize,
    /// Changes from this offset on are all known: removals below it may have been forgotten
    /// (the state was built or recovered here, or tombstones were dropped at the bound).
    changes_floor: u64,
    /// The key of the row being folded (reused: no allocation per row).
    scratch: Vec<u8>,
}

/// One key in the table: 32 bits of its hash (compared before any key is read) and where it
/// is: `ents[at]`, or `tombs[at & !TOMB]` for a remembered removal.
#[derive(Debug, Clone, Copy)]
struct Item {
    hash: u32,
    at: u32,
}

/// The bit of [`Item::at`] that says "a removal" (slab indices stay below it: `max_keys` is
/// at most 2^30).
const TOMB: u32 = 1 << 31;

/// An entity's key and everything but its row bytes (which are in [`Rows`]).
#[derive(Debug, Clone)]
struct Ent {
    key: Key,
    version: u64,
    ts_us: i64,
    absent: (u64, u64),
    row: RowLoc,
    /// Where the key's last "came" note was put in the key order's notes: if it is still
    /// there, the key going cancels it rather than adding one (a key that comes and goes
    /// between merges costs the merge nothing).
    note: u32,
}

/// A key removed (`remove_when`) by the row at `at`; remembered for `/changes`.
#[derive(Debug, Clone)]
struct Tomb {
    key: Key,
    at: u64,
}

/// Items by a `u32` index; a freed index is reused by the next insert (the most recently freed
/// first: it is likely still in cache).
#[derive(Debug, Clone)]
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, t: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(t);
                i
            }
            None => {
                let i = u32::try_from(self.items.len())
                    .ok()
                    .filter(|&i| i < TOMB)
                    .expect("fewer than 2^31 items");
                self.items.push(Some(t));
                i
            }
        }
    }

    fn remove(&mut self, i: u32) -> T {
        let t = self.items[i as usize].take().expect("a held slot");
        self.free.push(i);
        t
    }

    #[inline]
    fn get(&self, i: u32) -> &T {
        self.items[i as usize].as_ref().expect("a held slot")
    }

    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut T {
        self.items[i as usize].as_mut().expect("a held slot")
    }

    /// The item at `i`, if any.
    fn holds(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize).and_then(Option::as_ref)
    }
}

/// An item's 32 hash bits as the table's 64 (a bijection: the bucket is a function of the low
/// bits, the control byte of all of them); re-hashing an item reads no key.
#[inline]
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Where a row's bytes are: `len` bytes at `off` in page `page`, in a chunk of `cap` bytes; or,
/// with `page == BIG`, the buffer `big[off]` of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowLoc {
    page: u32,
    off: u32,
    len: u32,
    cap: u32,
}

/// [`RowLoc::page`] of a row in a buffer of its own.
const BIG: u32 = u32::MAX;
/// A row page's bytes.
const PAGE: usize = 64 * 1024;
/// Chunk capacities are multiples of it.
const GRAIN: usize = 32;
/// Rows longer than this have a buffer of their own.
const ARENA_ROW_MAX: usize = 2048;
/// Capacity on the free lists beyond which (and beyond the capacity in use) the rows are
/// compacted into fresh pages.
#[cfg(not(test))]
const COMPACT_MIN: usize = 1 << 20;
#[cfg(test)]
const COMPACT_MIN: usize = 4096;

/// The entities' row bytes, in pages of [`PAGE`] bytes (a few allocations, not one per key):
/// each row in a chunk of a multiple of [`GRAIN`] bytes; a removed or outgrown row's chunk goes
/// on the free list of its capacity, for the next row that fits it (or fits one grain less); a
/// row that shrinks under half its chunk moves to one of its size, so a chunk in use holds at
/// most about twice its row. The free lists hold at most the capacity in use (and
/// [`COMPACT_MIN`]): beyond, the state copies its rows into fresh pages
/// ([`StateMap::compact_rows`]), so the pages hold at most about four times the rows' bytes.
#[derive(Debug, Clone)]
struct Rows {
    /// Each filled up to `PAGE` bytes (allocated with that capacity); chunks are taken from the
    /// end of the last.
    pages: Vec<Vec<u8>>,
    /// By class (capacity / GRAIN): free chunks (page, offset).
    free_chunks: Vec<Vec<(u32, u32)>>,
    /// Rows over `ARENA_ROW_MAX`.
    big: Slab<Vec<u8>>,
    /// Capacity of the chunks in use.
    used: usize,
    /// Capacity of the chunks on the free lists.
    idle: usize,
    /// Compactions so far (for the tests).
    compactions: u64,
}

impl Rows {
    fn new() -> Rows {
        Rows {
            pages: Vec::new(),
            free_chunks: vec![Vec::new(); ARENA_ROW_MAX / GRAIN + 1],
            big: Slab::new(),
            used: 0,
            idle: 0,
            compactions: 0,
        }
    }

    #[inline]
    fn get(&self, l: RowLoc) -> &[u8] {
        if l.page == BIG {
            self.big.get(l.off)
        } else {
            let off = l.off as usize;
            &self.pages[l.page as usize][off..off + l.len as usize]
        }
    }

    /// A chunk holding `row`.
    fn put(&mut self, row: &[u8]) -> RowLoc {
        let len = row.len();
        if len > ARENA_ROW_MAX {
            let off = self.big.insert(row.to_vec());
            return RowLoc {
                page: BIG,
                off,
                len: len as u32,
                cap: 0,
            };
        }
        let class = len.div_ceil(GRAIN).max(1);
        // a free chunk of its capacity, or of one grain more
        for c in [class, class + 1] {
            if let Some((page, off)) = self.free_chunks.get_mut(c).and_then(Vec::pop) {
                let cap = c * GRAIN;
                self.idle -= cap;
                self.used += cap;
                let at = off as usize;
                self.pages[page as usize][at..at + len].copy_from_slice(row);
                return RowLoc {
                    page,
                    off,
                    len: len as u32,
                    cap: cap as u32,
                };
            }
        }
        let cap = class * GRAIN;
        if self.pages.last().is_none_or(|p| p.len() + cap > PAGE) {
            self.new_page();
        }
        let page = self.pages.len() - 1;
        let p = &mut self.pages[page];
        let off = p.len();
        p.extend_from_slice(row);
        p.resize(off + cap, 0);
        self.used += cap;
        RowLoc {
            page: u32::try_from(page).expect("fewer than 2^32 pages"),
            off: off as u32,
            len: len as u32,
            cap: cap as u32,
        }
    }

    /// Starts a page; the last one's tail (too short for the chunk wanted) goes on a free list.
    fn new_page(&mut self) {
        if let Some(p) = self.pages.last_mut() {
            let (off, tail) = (p.len(), PAGE - p.len());
            if tail >= GRAIN {
                p.resize(PAGE, 0);
                // shorter than the chunk that did not fit (≤ ARENA_ROW_MAX), a multiple of GRAIN
                self.free_chunks[tail / GRAIN].push((self.pages.len() as u32 - 1, off as u32));
                self.idle += tail;
            }
        }
        self.pages.push(Vec::with_capacity(PAGE));
    }

    /// `row` into `l`'s chunk when it fits, else into another (and `l`'s freed).
    #[inline]
    fn set(&mut self, l: &mut RowLoc, row: &[u8]) {
        // in place while the row fills at least half its chunk (a row that shrank further moves
        // to a chunk of its size, and the big one goes on the free lists, so compaction can
        // give it back: the chunks in use hold at most about twice the rows' bytes)
        let fits = row.len() <= l.cap as usize
            && l.cap as usize <= 2 * GRAIN * row.len().div_ceil(GRAIN).max(1);
        if l.page != BIG && fits {
            let at = l.off as usize;
            self.pages[l.page as usize][at..at + row.len()].copy_from_slice(row);
            l.len = row.len() as u32;
        } else if l.page == BIG && row.len() > ARENA_ROW_MAX {
            let b = self.big.get_mut(l.off);
            b.clear();
            b.extend_from_slice(row);
            if b.capacity() > 2 * row.len() {
                b.shrink_to_fit();
            }
            l.len = row.len() as u32;
        } else {
            let old = *l;
            *l = self.put(row);
            self.free(old);
        }
    }

    /// Frees `l`'s chunk.
    fn free(&mut self, l: RowLoc) {
        if l.page == BIG {
            self.big.remove(l.off);
        } else {
            let cap = l.cap as usize;
            self.free_chunks[cap / GRAIN].push((l.page, l.off));
            self.used -= cap;
            self.idle += cap;
        }
    }

    /// Whether the free lists hold more than the chunks in use (and `COMPACT_MIN`).
    fn wants_compaction(&self) -> bool {
        self.idle > self.used.max(COMPACT_MIN)
    }
}

/// Stale removals (their key came back) the by-offset queue may hold beyond the live ones
/// before it is swept, at least: it is swept once the stale ones also outnumber the live ones
/// (a sweep reads the whole queue: so each costs at most one read per stale item).
const REMOVALS_STALE_MAX: usize = 1024;

/// Stale removals the by-offset queue may hold next to `live` live ones.
fn removals_stale_max(live: usize) -> usize {
    live.max(REMOVALS_STALE_MAX)
}

/// Notes of keys that came or went, beyond which the fold merges them into the key order (and
/// beyond a quarter of the merged keys: a merge costs the keys it holds).
const ORDER_EVENTS_MIN: usize = 4096;

/// The keys in key order, for the collection's windows and the checkpoint, kept lazily: the
/// fold only notes each key that comes (+1) or goes (−1); a read puts those notes in key order
/// and walks them beside the merged keys; once the notes outnumber a quarter of the merged
/// keys (and [`ORDER_EVENTS_MIN`]), the fold merges them in.
#[derive(Debug, Clone, Default)]
struct KeyOrder {
    /// Distinct keys in key order: the keys held when the order was last merged.
    merged: Vec<Key>,
    /// Keys that came (+1) or went (−1) since, as they did; `events[..events_sorted]` is in key
    /// order. For every key, whether `merged` holds it plus its notes' sum is whether the map
    /// holds it now (1 or 0): a key comes and goes alternately.
    /// A cancelled pair (a key that came and went) leaves a 0 there.
    events: Vec<(Key, i8)>,
    events_sorted: usize,
}

impl KeyOrder {
    /// Notes that `key` came; where, for [`KeyOrder::went`].
    fn came(&mut self, key: Key) -> u32 {
        self.events.push((key, 1));
        // past u32::MAX (notes are merged well before): never found, a "went" note instead
        u32::try_from(self.events.len() - 1).unwrap_or(u32::MAX)
    }

    /// Notes that `key` went, cancelling its "came" note at `note` if it is still there.
    fn went(&mut self, key: &Key, note: u32) {
        match self.events.get_mut(note as usize) {
            Some((k, d)) if *d == 1 && k == key => *d = 0,
            _ => self.events.push((key.clone(), -1)),
        }
    }

    /// Whether the fold should merge now.
    fn due(&self) -> bool {
        self.events.len() > (self.merged.len() / 4).max(ORDER_EVENTS_MIN)
    }

    /// Puts the notes in key order (the part already sorted is one run: merged with the rest,
    /// not sorted again).
    fn sort_events(&mut self) {
        if self.events_sorted < self.events.len() {
            // the cancelled notes out first (keeping the sorted part sorted, and counted)
            let (mut seen, sorted) = (0, self.events_sorted);
            let mut kept_sorted = 0;
            self.events.retain(|(_, d)| {
                let keep = *d != 0;
                kept_sorted += usize::from(keep && seen < sorted);
                seen += 1;
                keep
            });
            self.events_sorted = kept_sorted;
            self.events[self.events_sorted..].sort_unstable_by(|a, b| a.0.cmp(&b.0));
            if self.events_sorted > 0 {
                // two sorted runs: the stable sort finds them and merges them
                self.events.sort_by(|a, b| a.0.cmp(&b.0));
            }
            self.events_sorted = self.events.len();
        }
    }

    /// Merges the notes into the merged keys; `held`: the map's entity count, which the
    /// merged keys then number.
    fn merge(&mut self, held: usize) {
        self.sort_events();
        let mut out = Vec::with_capacity(held);
        let (keys, events) = (&self.merged, &self.events);
        let (mut i, mut j) = (0, 0);
        loop {
            // the least key left, and whether `merged` held it (or its first note)
            let (key, mut count) = match (keys.get(i), events.get(j)) {
                (None, None) => break,
                (Some(k), Some((e, d))) if e < k => {
                    j += 1;
                    (e, i64::from(*d))
                }
                (Some(k), _) => {
                    i += 1;
                    (k, 1)
                }
                (None, Some((e, d))) => {
                    j += 1;
                    (e, i64::from(*d))
                }
            };
            while events.get(j).is_some_and(|(e, _)| e == key) {
                count += i64::from(events[j].1);
                j += 1;
            }
            debug_assert!(
                count == 0 || count == 1,
                "key {key:?} noted {count} times held"
            );
            if count == 1 {
                out.push(key.clone());
            }
        }
        self.merged = out;
        self.events.clear();
        self.events_sorted = 0;
        assert_eq!(
            self.merged.len(),
            held,
            "the key order holds every key held"
        );
    }

    /// The keys after `after` (from the first without it) that `map` holds as entities, in
    /// key order; the notes must be sorted ([`KeyOrder::sort_events`]).
    fn walk<'a>(&'a self, map: &'a StateMap, after: Option<&[u8]>) -> InOrder<'a> {
        assert_eq!(
            self.events_sorted,
            self.events.len(),
            "the notes are sorted before a read"
        );
        let (m, e) = match after {
            Some(a) => (
                self.merged.partition_point(|k| k.as_bytes() <= a),
                self.events.partition_point(|(k, _)| k.as_bytes() <= a),
            ),
            None => (0, 0),
        };
        InOrder {
            merged: self.merged[m..].iter().peekable(),
            events: self.events[e..].iter().peekable(),
            last: None,
            map,
        }
    }
}

/// The entities in key order: the merged keys and the notes walked side by side, each key
/// once, those the state holds as entities.
struct InOrder<'a> {
    merged: std::iter::Peekable<std::slice::Iter<'a, Key>>,
    events: std::iter::Peekable<std::slice::Iter<'a, (Key, i8)>>,
    last: Option<&'a Key>,
    map: &'a StateMap,
}

impl<'a> Iterator for InOrder<'a> {
    type Item = (&'a Key, Entry<'a>);

    fn next(&mut self) -> Option<(&'a Key, Entry<'a>)> {
        loop {
            if self.events.peek().is_some_and(|(_, d)| *d == 0) {
                self.events.next();
                continue;
            }
            let key = match (self.merged.peek(), self.events.peek()) {
                (None, None) => return None,
                (Some(k), Some((e, _))) if e < *k => &self.events.next()?.0,
                (Some(_), _) => self.merged.next()?,
                (None, Some(_)) => &self.events.next()?.0,
            };
            // keys come in order: a repeat is the one before
            if self.last == Some(key) {
                continue;
            }
            self.last = Some(key);
            if let Some(at) = self.map.find(key).filter(|at| at & TOMB == 0) {
                return Some(self.map.entity(at));
            }
        }
    }
}

impl StateMap {
    /// An empty state whose first row will be `position`.
    pub fn new(position: u64, max_keys: usize) -> StateMap {
        assert!(max_keys >= 1, "max_keys is at least 1");
        assert!(max_keys < TOMB as usize / 2, "max_keys is at most 2^30");
        StateMap {
            table: HashTable::new(),
            ents: Slab::new(),
            tombs: Slab::new(),
            rows: Rows::new(),
            held: 0,
            removed: 0,
            removals: VecDeque::new(),
            order: KeyOrder::default(),
            position,
            max_keys,
            incomplete: false,
            row_bytes: 0,
            changes_floor: position,
            scratch: Vec::with_capacity(32),
        }
    }

    /// A state as a checkpoint recorded it: the entities, the remembered removals (key, the
    /// removing row's offset; none of a key among the entities) and the offset from which
    /// changes are all known.
    pub fn from_checkpoint(
        position: u64,
        max_keys: usize,
        entries: BTreeMap<Key, Entry<'_>>,
        mut tombstones: Vec<(Key, u64)>,
        changes_floor: u64,
    ) -> StateMap {
        let mut m = StateMap::new(position, max_keys);
        assert!(
            changes_floor <= position,
            "the changes floor is below the position"
        );
        m.changes_floor = changes_floor;
        // a checkpoint taken under a larger max_keys: more entities than allowed now
        m.incomplete = entries.len() > max_keys;
        m.table
            .reserve(entries.len() + tombstones.len(), |it| spread(it.hash));
        m.order.merged.reserve(entries.len());
        for (key, e) in entries {
            assert!(
                e.version < position,
                "an entity's version is below the state's position"
            );
            m.row_bytes += e.row.len();
            m.held += 1;
            m.order.merged.push(key.clone());
            let hash = key.table_hash();
            let row = m.rows.put(e.row);
            let at = m.ents.insert(Ent {
                key,
                version: e.version,
                ts_us: e.ts_us,
                absent: e.absent,
                row,
                note: u32::MAX,
            });
            m.table
                .insert_unique(spread(hash), Item { hash, at }, |it| spread(it.hash));
        }
        // oldest first, as they are forgotten
        tombstones.sort_by_key(|(_, at)| *at);
        for (key, at) in tombstones {
            assert!(at < position, "a removal is below the state's position");
            let hash = key.table_hash();
            let (ents, tombs) = (&m.ents, &m.tombs);
            let is_key = |it: &Item| it.hash == hash && *key_at(ents, tombs, it.at) == key;
            let t = match m.table.entry(spread(hash), is_key, |it| spread(it.hash)) {
                hash_table::Entry::Occupied(o) => {
                    let t = o.get().at;
                    assert!(
                        t & TOMB != 0,
                        "a checkpoint's key is held or removed, not both"
                    );
                    // the same key removed twice: the later removal is the one remembered
                    let t = t & !TOMB;
                    m.tombs.get_mut(t).at = at;
                    t
                }
                hash_table::Entry::Vacant(v) => {
                    let t = m.tombs.insert(Tomb { key, at });
                    v.insert(Item { hash, at: TOMB | t });
                    m.removed += 1;
                    t
                }
            };
            m.removals.push_back((at, t));
            m.forget_removals();
        }
        m
    }

    /// The remembered removals: key and the removing row's offset, oldest first.
    pub fn tombstones(&self) -> impl Iterator<Item = (&Key, u64)> {
        self.removals
            .iter()
            .filter_map(|&(at, t)| self.removal(at, t).map(|k| (k, at)))
    }

    /// The key of the removal at `at` if tombstone `t` still remembers it (a queued removal is
    /// not stale).
    #[inline]
    fn removal(&self, at: u64, t: u32) -> Option<&Key> {
        self.tombs
            .holds(t)
            .filter(|tomb| tomb.at == at)
            .map(|tomb| &tomb.key)
    }

    /// Where `key` is in the table ([`Item::at`]).
    fn find(&self, key: &Key) -> Option<u32> {
        let hash = key.table_hash();
        let (ents, tombs) = (&self.ents, &self.tombs);
        self.table
            .find(spread(hash), |it| {
                it.hash == hash && key_at(ents, tombs, it.at) == key
            })
            .map(|it| it.at)
    }

    /// The entity `ents[at]`.
    #[inline]
    fn entity(&self, at: u32) -> (&Key, Entry<'_>) {
        let e = self.ents.get(at);
        (
            &e.key,
            Entry {
                version: e.version,
                ts_us: e.ts_us,
                row: self.rows.get(e.row),
                absent: e.absent,
            },
        )
    }

    /// The offset of the next row to fold.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Entities held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no entity is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
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
    #[inline]
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
        if self.order.due() {
            self.order.merge(self.held);
        }
        if self.rows.wants_compaction() {
            self.compact_rows();
        }
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
        let key = Key::from(key);
        let hash = key.table_hash();
        let (ents, tombs) = (&self.ents, &self.tombs);
        let is_key = |it: &Item| it.hash == hash && *key_at(ents, tombs, it.at) == key;
        if removes {
            let Some(it) = self.table.find_mut(spread(hash), is_key) else {
                return Applied::RemovedAbsent;
            };
            if it.at & TOMB != 0 {
                return Applied::RemovedAbsent;
            }
            let e = self.ents.remove(it.at);
            self.row_bytes -= e.row.len as usize;
            self.rows.free(e.row);
            self.held -= 1;
            self.order.went(&e.key, e.note);
            let t = self.tombs.insert(Tomb {
                key: e.key,
                at: offset,
            });
            it.at = TOMB | t;
            self.removed += 1;
            self.removals.push_back((offset, t));
            self.forget_removals();
            return Applied::Removed;
        }
        let full = self.held >= self.max_keys;
        match self.table.entry(spread(hash), is_key, |it| spread(it.hash)) {
            hash_table::Entry::Occupied(mut o) => {
                let it = o.get_mut();
                if it.at & TOMB == 0 {
                    let e = self.ents.get_mut(it.at);
                    self.row_bytes = self.row_bytes - e.row.len as usize + row.len();
                    e.version = offset;
                    e.ts_us = ts_us;
                    // in place when it fits its chunk
                    self.rows.set(&mut e.row, row);
                    return Applied::Updated;
                }
                if full {
                    self.incomplete = true;
                    return Applied::Refused;
                }
                // the key comes back: its queued removal is stale from now on
                let Tomb { key, at } = self.tombs.remove(it.at & !TOMB);
                self.removed -= 1;
                let note = self.order.came(key.clone());
                it.at = self.ents.insert(Ent {
                    key,
                    version: offset,
                    ts_us,
                    absent: (at, offset),
                    row: self.rows.put(row),
                    note,
                });
            }
            hash_table::Entry::Vacant(_) if full => {
                self.incomplete = true;
                return Applied::Refused;
            }
            hash_table::Entry::Vacant(v) => {
                let note = self.order.came(key.clone());
                // with no removal remembered, none a valid token could miss was forgotten
                // either (forgetting one raises the changes floor past it): the key was absent
                // since before any token still answered
                let at = self.ents.insert(Ent {
                    key,
                    version: offset,
                    ts_us,
                    absent: (0, offset),
                    row: self.rows.put(row),
                    note,
                });
                v.insert(Item { hash, at });
            }
        }
        self.held += 1;
        self.row_bytes += row.len();
        debug_assert!(self.held <= self.max_keys);
        Applied::Inserted
    }

    /// Copies the entities' rows into fresh pages, leaving the free chunks behind.
    fn compact_rows(&mut self) {
        let mut fresh = Rows::new();
        fresh.compactions = self.rows.compactions + 1;
        for e in self.ents.items.iter_mut().flatten() {
            e.row = fresh.put(self.rows.get(e.row));
        }
        self.rows = fresh;
    }

    /// Forgets the oldest removals beyond `max_keys`, and sweeps stale ones out of the queue.
    fn forget_removals(&mut self) {
        while self.removed > self.max_keys {
            let (at, t) = self
                .removals
                .pop_front()
                .expect("a queued removal for every remembered one");
            if self.removal(at, t).is_some() {
                let tomb = self.tombs.remove(t);
                self.table
                    .find_entry(spread(tomb.key.table_hash()), |it| it.at == TOMB | t)
                    .expect("a remembered removal")
                    .remove();
                self.removed -= 1;
                // a reader whose token is at or below `at` could miss this removal
                self.changes_floor = self.changes_floor.max(at + 1);
            }
        }
        if self.removals.len() > self.removed + removals_stale_max(self.removed) {
            let mut q = std::mem::take(&mut self.removals);
            q.retain(|&(at, t)| self.removal(at, t).is_some());
            self.removals = q;
        }
        debug_assert!(self.removals.len() >= self.removed);
    }

    /// The lowest offset a `/changes` token may hold: every removal from it on is known.
    pub fn changes_floor(&self) -> u64 {
        self.changes_floor
    }

    /// Up to `limit` entities passing `filter` in key order after `after` (from the first
    /// without it), stopping early once their rows reach `bytes_max`; and whether any passing
    /// entity is left after them.
    pub fn window(
        &mut self,
        filter: Option<&Filter>,
        after: Option<&[u8]>,
        limit: usize,
        bytes_max: usize,
    ) -> (Vec<(&Key, Entry<'_>)>, bool) {
        self.order.sort_events();
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut it = self
            .order
            .walk(self, after)
            .filter(|(_, e)| filter.is_none_or(|f| f.matches(e.row)));
        // `limit` 0 reads none (and says whether there is any), as the pull API's `limit=0`
        if limit > 0 {
            for (k, e) in it.by_ref() {
                out.push((k, e));
                bytes += e.row.len();
                if out.len() >= limit || bytes >= bytes_max {
                    break;
                }
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
            .entities()
            .filter(|(_, e)| e.version >= since)
            .filter_map(|(k, e)| {
                if filter.is_none_or(|f| f.matches(e.row)) {
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
        let first = self.removals.partition_point(|(at, _)| *at < since);
        out.extend(
            self.removals
                .range(first..)
                .filter_map(|&(at, t)| self.removal(at, t).map(|k| Change::Removed(k, at))),
        );
        out.sort_unstable_by_key(Change::offset);
        if out.len() > limit {
            out.truncate(limit);
            let next = out.last().map_or(since, |c| c.offset() + 1);
            return Some((out, next));
        }
        Some((out, self.position))
    }

    /// The entities in no particular order.
    fn entities(&self) -> impl Iterator<Item = (&Key, Entry<'_>)> {
        self.ents.items.iter().flatten().map(|e| {
            (
                &e.key,
                Entry {
                    version: e.version,
                    ts_us: e.ts_us,
                    row: self.rows.get(e.row),
                    absent: e.absent,
                },
            )
        })
    }

    /// The entities whose row passes `filter`, in version (offset) order.
    pub fn selected_by_version(&self, filter: Option<&Filter>) -> Vec<Entry<'_>> {
        // sorted by the version held beside each index: comparing never reads an entity
        let mut v: Vec<(u64, u32)> = self
            .ents
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| filter.is_none_or(|f| f.matches(self.rows.get(e.row))))
            .map(|(i, e)| (e.version, i as u32))
            .collect();
        v.sort_unstable_by_key(|(version, _)| *version);
        v.into_iter().map(|(_, at)| self.entity(at).1).collect()
    }

    /// Every entity in key order (the key order is put in order first, hence `&mut`).
    pub fn iter(&mut self) -> impl Iterator<Item = (&Key, Entry<'_>)> {
        self.order.sort_events();
        self.order.walk(self, None)
    }

    /// The entity of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.find(&Key::from(key))
            .filter(|at| at & TOMB == 0)
            .map(|at| self.entity(at).1)
    }
}

/// The key of the table item at `at`.
#[inline]
fn key_at<'a>(ents: &'a Slab<Ent>, tombs: &'a Slab<Tomb>, at: u32) -> &'a Key {
    if at & TOMB == 0 {
        &ents.get(at).key
    } else {
        &tombs.get(at & !TOMB).key
    }
}

/// One change since a reader's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    /// The key's latest row is in the selection.
    Upsert(&'a Key, Entry<'a>),
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
        assert_eq!(by_version[0].row, rows[2]);
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
        assert_eq!(sel[0].row, br#"{"symbol":"B","side":1}"#);
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
        let (w0, more) = m.window(None, None, 0, usize::MAX);
        assert!(w0.is_empty() && more, "limit 0 reads none");
        let (w1, more) = m.window(None, None, 2, usize::MAX);
        assert!(more);
        let keys = |w: &[(&Key, Entry)]| {
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

    /// A small generator, the same sequence every run.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn the_lazy_key_order_stays_that_of_an_ordered_set() {
        use std::collections::BTreeSet;
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let mut m = StateMap::new(1, 1_000);
        // the model: the keys held, their versions, and the remembered removals
        let mut held: BTreeMap<Key, u64> = BTreeMap::new();
        let mut removed: BTreeMap<Key, u64> = BTreeMap::new();
        let mut rows: BTreeMap<Key, String> = BTreeMap::new();
        let mut rng = Lcg(7);
        let mut merges = 0;
        // more notes than ORDER_EVENTS_MIN several times over: the fold merges, and reads walk
        // merged keys and notes side by side
        for offset in 1..=40_000u64 {
            let k = rng.below(600) as i64 - 300;
            let gone = rng.below(3) == 0;
            // rows of every length class, now and then one with a buffer of its own
            let pad = match rng.below(50) {
                0 => rng.below(2 * ARENA_ROW_MAX as u64),
                _ => rng.below(200),
            } as usize;
            let row = format!(r#"{{"k":{k},"gone":{gone},"pad":"{}"}}"#, "x".repeat(pad));
            let key = s.key_of(row.as_bytes()).unwrap();
            let before = m.order.events.len();
            let got = m.apply(&s, offset, 0, row.as_bytes());
            if m.order.events.len() < before {
                merges += 1;
            }
            let want = if gone {
                if held.remove(&key).is_some() {
                    removed.insert(key, offset);
                    Applied::Removed
                } else {
                    Applied::RemovedAbsent
                }
            } else if held.insert(key.clone(), offset).is_some() {
                rows.insert(key.clone(), row.clone());
                Applied::Updated
            } else {
                removed.remove(&key);
                rows.insert(key.clone(), row.clone());
                Applied::Inserted
            };
            assert_eq!(got, want, "offset {offset}");
            if offset % 997 == 0 || offset % 4096 == 1 {
                let order: Vec<(Key, u64, Vec<u8>)> = m
                    .iter()
                    .map(|(k, e)| (k.clone(), e.version, e.row.to_vec()))
                    .collect();
                let model: Vec<(Key, u64)> = held.iter().map(|(k, v)| (k.clone(), *v)).collect();
                assert_eq!(
                    order,
                    model
                        .iter()
                        .map(|(k, v)| (k.clone(), *v, rows[k].clone().into_bytes()))
                        .collect::<Vec<_>>(),
                    "every entity once, in key order, with its latest row, at offset {offset}"
                );
                for (k, _) in &model {
                    assert_eq!(m.get(k).unwrap().row, rows[k].as_bytes(), "the latest row");
                }
                let bytes: usize = model.iter().map(|(k, _)| rows[k].len()).sum();
                assert_eq!(m.row_bytes(), bytes);
                // windows of 7 from the first, and from a key that may or may not be held
                let mut after: Option<Key> = None;
                let mut paged = Vec::new();
                loop {
                    let (w, more) = m.window(None, after.as_deref(), 7, usize::MAX);
                    paged.extend(w.iter().map(|(k, _)| (*k).clone()));
                    after = w.last().map(|(k, _)| (*k).clone());
                    if !more {
                        break;
                    }
                }
                assert_eq!(paged, held.keys().cloned().collect::<Vec<_>>());
                let probe = s
                    .key_of(format!(r#"{{"k":{}}}"#, k - 1).as_bytes())
                    .unwrap();
                let (w, _) = m.window(None, Some(&probe), 3, usize::MAX);
                let want: Vec<&Key> = held
                    .range::<Key, _>((
                        std::ops::Bound::Excluded(&probe),
                        std::ops::Bound::Unbounded,
                    ))
                    .map(|(k, _)| k)
                    .take(3)
                    .collect();
                assert_eq!(w.iter().map(|(k, _)| *k).collect::<Vec<_>>(), want);
                let mut tombstones: Vec<(Key, u64)> =
                    m.tombstones().map(|(k, at)| (k.clone(), at)).collect();
                let ats: Vec<u64> = tombstones.iter().map(|(_, at)| *at).collect();
                assert!(ats.windows(2).all(|w| w[0] < w[1]), "oldest first");
                tombstones.sort();
                assert_eq!(
                    tombstones,
                    removed
                        .iter()
                        .map(|(k, at)| (k.clone(), *at))
                        .collect::<Vec<_>>()
                );
                let keys: BTreeSet<&Key> = m.entities().map(|(k, _)| k).collect();
                assert_eq!(keys.len(), m.len());
            }
        }
        assert!(merges >= 3, "merged {merges} times");
        assert!(m.rows.compactions >= 1, "the rows were compacted");
        assert_eq!(m.len(), held.len());
        // a checkpoint's view of it builds the same state back
        type Owned = (Key, u64, i64, Vec<u8>, (u64, u64));
        let owned: Vec<Owned> = m
            .iter()
            .map(|(k, e)| (k.clone(), e.version, e.ts_us, e.row.to_vec(), e.absent))
            .collect();
        let entries: BTreeMap<Key, Entry> = owned
            .iter()
            .map(|(k, version, ts_us, row, absent)| {
                let e = Entry {
                    version: *version,
                    ts_us: *ts_us,
                    row,
                    absent: *absent,
                };
                (k.clone(), e)
            })
            .collect();
        let tombstones: Vec<(Key, u64)> = m.tombstones().map(|(k, at)| (k.clone(), at)).collect();
        let mut back =
            StateMap::from_checkpoint(m.position(), 1_000, entries, tombstones, m.changes_floor());
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            m.iter().collect::<Vec<_>>()
        );
        assert_eq!(
            back.tombstones().collect::<Vec<_>>(),
            m.tombstones().collect::<Vec<_>>()
        );
        assert_eq!(back.row_bytes(), m.row_bytes());
        assert_eq!(
            back.changes(None, 30_000, 10_000),
            m.changes(None, 30_000, 10_000)
        );
    }

    #[test]
    fn a_row_is_copied_into_its_entity_s_chunk_and_removed_chunks_are_reused() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let mut m = StateMap::new(1, 10);
        let short: &[u8] = br#"{"k":1,"gone":false}"#;
        let pad =
            |k: i64, n: usize| format!(r#"{{"k":{k},"gone":false,"pad":"{}"}}"#, "y".repeat(n));
        let long = pad(1, 100);
        m.apply(&s, 1, 0, short);
        m.apply(&s, 2, 0, long.as_bytes());
        assert_eq!(
            m.get(&s.key_of(short).unwrap()).unwrap().row,
            long.as_bytes()
        );
        assert_eq!(m.row_bytes(), long.len());
        let grown = m.get(&s.key_of(short).unwrap()).unwrap().row.as_ptr();
        // shrinking keeps the chunk while the row fills half of it
        let mid = pad(1, 60);
        m.apply(&s, 3, 0, mid.as_bytes());
        let e = m.get(&s.key_of(short).unwrap()).unwrap();
        assert_eq!(e.row, mid.as_bytes());
        assert_eq!(e.row.as_ptr(), grown, "a shorter row fits the chunk");
        assert_eq!((e.version, m.row_bytes()), (3, mid.len()));
        // a row under half its chunk moves to a chunk of its size, and back
        m.apply(&s, 4, 0, short);
        let e = m.get(&s.key_of(short).unwrap()).unwrap();
        assert_eq!(e.row, short);
        assert_ne!(e.row.as_ptr(), grown, "a row under half its chunk moves");
        assert_eq!(m.row_bytes(), short.len());
        m.apply(&s, 5, 0, mid.as_bytes());
        let e = m.get(&s.key_of(short).unwrap()).unwrap();
        assert_eq!(e.row, mid.as_bytes());
        assert_ne!(
            e.row.as_ptr(),
            grown,
            "a chunk of its class (the big one stays free)"
        );
        // a removed entity's chunk goes to the next new key whose row fits it
        m.apply(&s, 6, 0, br#"{"k":1,"gone":true}"#);
        assert_eq!(m.row_bytes(), 0);
        let other = pad(2, 95);
        m.apply(&s, 7, 0, other.as_bytes());
        let e = m.get(&s.key_of(br#"{"k":2}"#).unwrap()).unwrap();
        assert_eq!(e.row.as_ptr(), grown, "the free chunk is reused");
        assert_eq!(e.row, other.as_bytes());
        assert_eq!(m.row_bytes(), e.row.len());
        // a row longer than a chunk may be has a buffer of its own, and back
        let big = pad(2, 3 * ARENA_ROW_MAX);
        m.apply(&s, 8, 0, big.as_bytes());
        assert_eq!(
            m.get(&s.key_of(br#"{"k":2}"#).unwrap()).unwrap().row,
            big.as_bytes()
        );
        let bigger = pad(2, 5 * ARENA_ROW_MAX);
        m.apply(&s, 9, 0, bigger.as_bytes());
        assert_eq!(
            m.get(&s.key_of(br#"{"k":2}"#).unwrap()).unwrap().row,
            bigger.as_bytes()
        );
        m.apply(&s, 10, 0, other.as_bytes());
        assert_eq!(
            m.get(&s.key_of(br#"{"k":2}"#).unwrap()).unwrap().row,
            other.as_bytes()
        );
        assert_eq!(m.row_bytes(), other.len());
        assert!(m.rows.big.items.iter().all(Option::is_none));
    }

    #[test]
    fn rows_survive_compaction_and_the_free_chunks_stay_bounded() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let mut m = StateMap::new(1, 10_000);
        let mut model: BTreeMap<Key, String> = BTreeMap::new();
        let mut rng = Lcg(11);
        // rows that grow and shrink over every class, removals and new keys
        for offset in 1..=20_000u64 {
            let k = rng.below(300);
            let gone = rng.below(5) == 0;
            let n = match rng.below(10) {
                0 => rng.below(3 * ARENA_ROW_MAX as u64),
                _ => rng.below(400),
            } as usize;
            let row = format!(r#"{{"k":{k},"gone":{gone},"pad":"{}"}}"#, "z".repeat(n));
            m.apply(&s, offset, 0, row.as_bytes());
            let key = s.key_of(row.as_bytes()).unwrap();
            if gone {
                model.remove(&key);
            } else {
                model.insert(key, row);
            }
            assert!(
                m.rows.idle <= m.rows.used.max(COMPACT_MIN),
                "compacted when due"
            );
        }
        assert!(
            m.rows.compactions >= 2,
            "{} compactions",
            m.rows.compactions
        );
        let got: Vec<(Key, Vec<u8>)> = m.iter().map(|(k, e)| (k.clone(), e.row.to_vec())).collect();
        let want: Vec<(Key, Vec<u8>)> = model
            .into_iter()
            .map(|(k, r)| (k, r.into_bytes()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_removal_whose_key_came_back_is_stale_and_never_forgotten_in_its_place() {
        let s = spec(&["k"], Some(r#"{"gone":true}"#));
        let k = |k: i64| s.key_of(format!(r#"{{"k":{k}}}"#).as_bytes()).unwrap();
        let row = |k: i64, gone: bool| format!(r#"{{"k":{k},"gone":{gone}}}"#);
        let mut m = StateMap::new(1, 2);
        m.apply(&s, 1, 0, row(0, false).as_bytes());
        m.apply(&s, 2, 0, row(0, true).as_bytes());
        // back: the removal at 2 is stale
        assert_eq!(
            m.apply(&s, 3, 0, row(0, false).as_bytes()),
            Applied::Inserted
        );
        assert_eq!(m.get(&k(0)).unwrap().absent, (2, 3));
        for (i, key) in [1, 2, 3].into_iter().enumerate() {
            let o = 4 + 2 * i as u64;
            m.apply(&s, o, 0, row(key, false).as_bytes());
            m.apply(&s, o + 1, 0, row(key, true).as_bytes());
        }
        // removals at 5, 7, 9 with room for two: the one at 5 is forgotten, the stale one at 2
        // is only dropped
        assert_eq!(m.changes_floor(), 6);
        assert_eq!(m.tombstones().collect::<Vec<_>>(), [(&k(2), 7), (&k(3), 9)]);
        assert!(m.get(&k(0)).is_some());
        assert_eq!(m.len(), 1);
        // a key that comes and goes over and over leaves a bounded queue
        let mut o = 10;
        for _ in 0..3 * REMOVALS_STALE_MAX {
            m.apply(&s, o, 0, row(5, false).as_bytes());
            m.apply(&s, o + 1, 0, row(5, true).as_bytes());
            o += 2;
        }
        assert!(m.removals.len() <= m.removed + removals_stale_max(m.removed) + 1);
        assert_eq!(m.tombstones().count(), 2);
        assert_eq!(m.tombstones().last(), Some((&k(5), o - 1)));
    }

    #[test]
    fn the_quick_search_answers_as_the_scan_does() {
        let s = spec(&["k", "s"], Some(r#"{"a":["C","F"]}"#));
        let needles = s.needles.as_ref().expect("plain names");
        let rows: [&[u8]; 9] = [
            br#"{"x":1,"k":7,"s":"q","a":"C"}"#,
            // a name inside a string value, a nested object, a repeated name, a name missing
            br#"{"x":"\"k\":1","k":2,"s":"r","a":"A"}"#,
            br#"{"n":{"k":1},"k":3,"s":"t","a":"F"}"#,
            br#"{"k":4,"k":5,"s":"u","a":"F"}"#,
            br#"{"k":6,"s":"v"}"#,
            br#"{"xk":1,"k":8,"s":"","a":"C"}"#,
            br#"{"k":-9,"s":"w","a":null}"#,
            // remove_when's value escaped (the filter decodes it), or not a string
            br#"{"k":10,"s":"x","a":"\u0043"}"#,
            br#"{"k":11,"s":"x","a":7}"#,
        ];
        for row in rows {
            let n = s.wanted.len();
            let mut quick = [None; SCAN_MAX];
            let mut scan = [None; SCAN_MAX];
            let scanned = scan_top(row, &s.wanted, &mut scan[..n]).is_some();
            if find_top(row, needles, &mut quick[..n]) {
                assert!(scanned);
                assert_eq!(quick, scan, "{}", String::from_utf8_lossy(row));
            }
            // either way, the one-pass answer is the lookups' (checked in debug builds too)
            let mut key = Vec::new();
            let got = s.key_and_removes(row, &mut key);
            assert_eq!(
                got.as_ref().ok().copied(),
                s.key_of(row).ok().map(|_| s.removes(row)),
                "{}",
                String::from_utf8_lossy(row)
            );
        }
        let mut quick = [None; SCAN_MAX];
        assert!(find_top(rows[0], needles, &mut quick[..3]));
        assert_eq!(
            quick[..3],
            [Some(&b"7"[..]), Some(&b"\"q\""[..]), Some(&b"\"C\""[..])]
        );
        assert!(
            !find_top(rows[2], needles, &mut quick[..3]),
            "nested: scanned"
        );
        assert!(
            !find_top(rows[4], needles, &mut quick[..3]),
            "a name missing: scanned"
        );
    }
}

/// Hostile model tests: the state against a plain ordered-map model over long random sequences.
#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::filter::ColumnLookup;
    use corecast_storage::schema::write_json_str;
    use std::collections::{BTreeMap, BTreeSet};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
            &v[self.below(v.len() as u64) as usize]
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum V {
        B(bool),
        I(i128),
        S(String),
    }

    fn v_json(v: &V, out: &mut Vec<u8>) {
        match v {
            V::B(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            V::I(i) => out.extend_from_slice(i.to_string().as_bytes()),
            V::S(s) => write_json_str(out, s),
        }
    }

    fn key_json_model(k: &[V]) -> String {
        let mut out = b"[".to_vec();
        for (i, v) in k.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            v_json(v, &mut out);
        }
        out.push(b']');
        String::from_utf8(out).unwrap()
    }

    fn render(k: &Key) -> String {
        let mut out = Vec::new();
        key_json(k, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// Strings of every length around the in-line boundary, with bytes the encoding escapes.
    fn a_string(rng: &mut Rng) -> String {
        let len = match rng.below(4) {
            0 => rng.below(40),
            _ => 16 + rng.below(12), // around the 23-byte boundary (1 + len + 2)
        } as usize;
        let alphabet = [
            "a", "b", "A", "z", "0", "\0", "\"", "\\", "\n", "é", "😀", "\u{7f}", "\u{1}", "{",
            "[", ",", ":", "\u{ffff}", " ",
        ];
        let mut s = String::new();
        // a small population: keys repeat
        let few = rng.below(3) == 0;
        for _ in 0..len {
            if few {
                s.push_str(rng.pick::<&str>(&["a", "b"]));
            } else {
                s.push_str(rng.pick::<&str>(&alphabet));
            }
        }
        s
    }

    fn an_int(rng: &mut Rng) -> i128 {
        match rng.below(8) {
            0 => i64::MIN as i128 + rng.below(3) as i128,
            1 => u64::MAX as i128 - rng.below(3) as i128,
            2 => i64::MAX as i128 + rng.below(3) as i128 - 1,
            3 => -(rng.below(1 << 40) as i128),
            4 => 10_000_000_000_000_000_000 + rng.below(5) as i128, // 20 digits
            5 => 9_999_999_999_999_999_999 - rng.below(5) as i128,  // 19 digits
            _ => rng.below(40) as i128 - 20,
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Shape {
        Str,
        Int,
        Multi,
    }

    fn a_key(rng: &mut Rng, shape: Shape) -> Vec<V> {
        match shape {
            Shape::Str => vec![V::S(a_string(rng))],
            Shape::Int => vec![V::I(an_int(rng))],
            Shape::Multi => vec![
                V::B(rng.below(2) == 0),
                V::I(an_int(rng) % 7),
                V::S(a_string(rng)),
            ],
        }
    }

    fn key_columns(shape: Shape) -> Vec<&'static str> {
        match shape {
            Shape::Str => vec!["s"],
            Shape::Int => vec!["i"],
            Shape::Multi => vec!["b", "i", "s"],
        }
    }

    /// What the row says for remove_when's `act` column.
    #[derive(Clone, Debug)]
    enum Act {
        Str(&'static str),
        /// "C" written as an escape
        EscapedC,
        Num,
        Null,
        Missing,
    }

    struct Row {
        json: String,
        act: Act,
        g: i64,
    }

    fn a_row(rng: &mut Rng, shape: Shape, key: &[V]) -> Row {
        let act = match rng.below(12) {
            0 => Act::EscapedC,
            1 => Act::Num,
            2 => Act::Null,
            3 => Act::Missing,
            _ => Act::Str(rng.pick::<&str>(&["A", "C", "CC", "CCC", "", "c", "M", "M", "M", "A"])),
        };
        let g = rng.below(4) as i64;
        let mut out = b"{".to_vec();
        let mut member = |out: &mut Vec<u8>, name: &str| {
            if out.len() > 1 {
                out.push(b',');
            }
            write_json_str(out, name);
            out.push(b':');
        };
        // before the key: decoys
        match rng.below(6) {
            0 => {
                member(&mut out, "meta");
                out.extend_from_slice(br#"{"s":"decoy","i":99,"b":false,"act":"C"}"#);
            }
            1 => {
                member(&mut out, "note");
                write_json_str(&mut out, r#","s":"evil","i":1,"act":"C","#);
            }
            2 => {
                member(&mut out, "xs");
                out.extend_from_slice(br#""suffix""#);
                member(&mut out, "react");
                out.extend_from_slice(br#""C""#);
            }
            3 => {
                member(&mut out, "l");
                out.extend_from_slice(br#"[{"s":"x"},"act"]"#);
            }
            _ => {}
        }
        let cols = key_columns(shape);
        // the key columns in either order, act between them sometimes
        let mut order: Vec<usize> = (0..cols.len()).collect();
        if rng.below(2) == 0 {
            order.reverse();
        }
        let act_at = rng.below(cols.len() as u64 + 1) as usize;
        for (n, &c) in order.iter().enumerate() {
            if n == act_at {
                write_act(&mut out, &mut member, &act);
            }
            member(&mut out, cols[c]);
            v_json(&key[c], &mut out);
        }
        if act_at == cols.len() {
            write_act(&mut out, &mut member, &act);
        }
        member(&mut out, "g");
        out.extend_from_slice(g.to_string().as_bytes());
        // sizes around the grain and the big-row boundary
        let target = match rng.below(10) {
            0 => ARENA_ROW_MAX - 8 + rng.below(16) as usize,
            1 => 2 * ARENA_ROW_MAX + rng.below(100) as usize,
            2 => GRAIN * (1 + rng.below(6) as usize) - 2 + rng.below(4) as usize,
            _ => rng.below(300) as usize,
        };
        member(&mut out, "pad");
        let pad_len = target.saturating_sub(out.len() + 3);
        out.push(b'"');
        out.extend(std::iter::repeat_n(b'p', pad_len));
        out.push(b'"');
        if rng.below(8) == 0 {
            member(&mut out, "tail");
            out.extend_from_slice(br#"{"act":"C","s":"t"}"#);
        }
        out.push(b'}');
        Row {
            json: String::from_utf8(out).unwrap(),
            act,
            g,
        }
    }

    fn write_act(out: &mut Vec<u8>, member: &mut impl FnMut(&mut Vec<u8>, &str), act: &Act) {
        match act {
            Act::Missing => {}
            Act::Str(s) => {
                member(out, "act");
                write_json_str(out, s);
            }
            Act::EscapedC => {
                member(out, "act");
                out.extend_from_slice(br#""\u0043""#);
            }
            Act::Num => {
                member(out, "act");
                out.extend_from_slice(b"7");
            }
            Act::Null => {
                member(out, "act");
                out.extend_from_slice(b"null");
            }
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Removal {
        /// {"act":["C","CC"]}: strings only (the byte comparison)
        Strings,
        /// {"act":["C","CC"],"g":[1,2,3]}: not strings only
        Mixed,
        /// {"act":"CC"}: a value with a prefix among the others
        One,
    }

    fn removal_text(r: Removal) -> &'static str {
        match r {
            Removal::Strings => r#"{"act":["C","CC"]}"#,
            Removal::Mixed => r#"{"act":["C","CC"],"g":[1,2,3]}"#,
            Removal::One => r#"{"act":"CC"}"#,
        }
    }

    fn model_removes(r: Removal, row: &Row) -> bool {
        let act = match &row.act {
            Act::Str(s) => Some(*s),
            Act::EscapedC => Some("C"),
            _ => None,
        };
        match r {
            Removal::Strings => matches!(act, Some("C" | "CC")),
            Removal::Mixed => matches!(act, Some("C" | "CC")) && (1..=3).contains(&row.g),
            Removal::One => act == Some("CC"),
        }
    }

    #[derive(Clone, Debug)]
    struct MEnt {
        version: u64,
        ts: i64,
        row: String,
        g: i64,
        created: u64,
        last_removal: u64,
    }

    #[derive(Clone, Debug, Default)]
    struct Model {
        held: BTreeMap<Vec<V>, MEnt>,
        /// key -> removal offset (remembered)
        tombs: BTreeMap<Vec<V>, u64>,
        /// true last removal of every key ever removed
        last_removal: BTreeMap<Vec<V>, u64>,
        incomplete: bool,
        floor: u64,
        position: u64,
        max_keys: usize,
    }

    impl Model {
        fn apply(&mut self, offset: u64, ts: i64, key: &[V], row: &Row, removes: bool) -> Applied {
            assert_eq!(offset, self.position);
            self.position += 1;
            if removes {
                if self.held.remove(key).is_some() {
                    self.tombs.insert(key.to_vec(), offset);
                    self.last_removal.insert(key.to_vec(), offset);
                    while self.tombs.len() > self.max_keys {
                        let (k, at) = self
                            .tombs
                            .iter()
                            .min_by_key(|(_, at)| **at)
                            .map(|(k, at)| (k.clone(), *at))
                            .unwrap();
                        self.tombs.remove(&k);
                        self.floor = self.floor.max(at + 1);
                    }
                    return Applied::Removed;
                }
                return Applied::RemovedAbsent;
            }
            if let Some(e) = self.held.get_mut(key) {
                e.version = offset;
                e.ts = ts;
                e.row = row.json.clone();
                e.g = row.g;
                return Applied::Updated;
            }
            if self.held.len() >= self.max_keys {
                self.incomplete = true;
                return Applied::Refused;
            }
            self.tombs.remove(key);
            let lr = self.last_removal.get(key).copied().unwrap_or(0);
            self.held.insert(
                key.to_vec(),
                MEnt {
                    version: offset,
                    ts,
                    row: row.json.clone(),
                    g: row.g,
                    created: offset,
                    last_removal: lr,
                },
            );
            Applied::Inserted
        }

        /// `/changes` as the docs say (selection: g == sel).
        fn changes(
            &self,
            sel: Option<i64>,
            since: u64,
            limit: usize,
        ) -> Option<(Vec<String>, u64)> {
            if since < self.floor || since > self.position {
                return None;
            }
            let mut out: Vec<(u64, String)> = Vec::new();
            for (k, e) in &self.held {
                if e.version < since {
                    continue;
                }
                if sel.is_none_or(|g| e.g == g) {
                    out.push((
                        e.version,
                        format!("U {} {} {}", key_json_model(k), e.version, e.row),
                    ));
                } else if e.last_removal < since && since <= e.created {
                    // created since the token: left out
                } else {
                    out.push((e.version, format!("L {} {}", key_json_model(k), e.version)));
                }
            }
            for (k, at) in &self.tombs {
                if *at >= since {
                    out.push((*at, format!("R {} {}", key_json_model(k), at)));
                }
            }
            out.sort();
            if out.len() > limit {
                out.truncate(limit);
                let next = out.last().map_or(since, |c| c.0 + 1);
                return Some((out.into_iter().map(|c| c.1).collect(), next));
            }
            Some((out.into_iter().map(|c| c.1).collect(), self.position))
        }
    }

    fn show_changes(c: &[Change<'_>]) -> Vec<String> {
        c.iter()
            .map(|c| match c {
                Change::Upsert(k, e) => format!(
                    "U {} {} {}",
                    render(k),
                    e.version,
                    String::from_utf8_lossy(e.row)
                ),
                Change::Left(k, v) => format!("L {} {}", render(k), v),
                Change::Removed(k, v) => format!("R {} {}", render(k), v),
            })
            .collect()
    }

    fn sel_filter(g: i64) -> Filter {
        let any = |_: &str| ColumnLookup::Scalar;
        Filter::parse(&format!(r#"{{"g":{g}}}"#), Some(&any)).unwrap()
    }

    fn check(m: &mut StateMap, model: &Model, rng: &mut Rng, ctx: &str) {
        assert_eq!(m.position(), model.position, "{ctx}: position");
        assert_eq!(m.len(), model.held.len(), "{ctx}: len");
        assert_eq!(m.incomplete(), model.incomplete, "{ctx}: incomplete");
        assert_eq!(m.changes_floor(), model.floor, "{ctx}: changes floor");
        let bytes: usize = model.held.values().map(|e| e.row.len()).sum();
        assert_eq!(m.row_bytes(), bytes, "{ctx}: row bytes");
        // every entity, in key order
        let got: Vec<(String, u64, i64, Vec<u8>)> = m
            .iter()
            .map(|(k, e)| (render(k), e.version, e.ts_us, e.row.to_vec()))
            .collect();
        let want: Vec<(String, u64, i64, Vec<u8>)> = model
            .held
            .iter()
            .map(|(k, e)| {
                (
                    key_json_model(k),
                    e.version,
                    e.ts,
                    e.row.clone().into_bytes(),
                )
            })
            .collect();
        if got != want {
            let gk: Vec<&String> = got.iter().map(|g| &g.0).collect();
            let wk: Vec<&String> = want.iter().map(|g| &g.0).collect();
            assert_eq!(gk, wk, "{ctx}: key order");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    (g.0.as_str(), g.1, g.2, String::from_utf8_lossy(&g.3)),
                    (w.0.as_str(), w.1, w.2, String::from_utf8_lossy(&w.3)),
                    "{ctx}: entity"
                );
            }
        }
        // get() by key for each, absent spans
        let keys: Vec<Key> = m.iter().map(|(k, _)| k.clone()).collect();
        for (k, (mk, e)) in keys.iter().zip(&model.held) {
            let got = m.get(k).expect("held");
            assert_eq!(got.row, e.row.as_bytes(), "{ctx}: get {mk:?}");
            assert_eq!(got.absent.1, e.created, "{ctx}: created {mk:?}");
            assert!(
                got.absent.0 == e.last_removal || got.absent.0 == 0 && e.last_removal < model.floor,
                "{ctx}: absent {:?} vs last removal {} (floor {})",
                got.absent,
                e.last_removal,
                model.floor
            );
        }
        // tombstones, oldest first
        let tg: Vec<(String, u64)> = m.tombstones().map(|(k, at)| (render(k), at)).collect();
        let mut tw: Vec<(String, u64)> = model
            .tombs
            .iter()
            .map(|(k, at)| (key_json_model(k), *at))
            .collect();
        tw.sort_by_key(|t| t.1);
        assert_eq!(tg, tw, "{ctx}: tombstones");
        // windows: with and without a selection, after a random key
        for _ in 0..3 {
            let sel = (rng.below(3) != 0).then(|| rng.below(4) as i64);
            let filter = sel.map(sel_filter);
            let after: Option<Vec<u8>> = match rng.below(3) {
                0 => None,
                1 if !keys.is_empty() => Some(keys[rng.below(keys.len() as u64) as usize].to_vec()),
                _ => Some(rng.next().to_be_bytes()[..rng.below(9) as usize].to_vec()),
            };
            let limit = 1 + rng.below(20) as usize;
            let bytes_max = if rng.below(2) == 0 {
                usize::MAX
            } else {
                1 + rng.below(8000) as usize
            };
            let (w, more) = m.window(filter.as_ref(), after.as_deref(), limit, bytes_max);
            let got: Vec<String> = w.iter().map(|(k, _)| render(k)).collect();
            let all: Vec<(Key, &MEnt)> = keys
                .iter()
                .zip(model.held.values())
                .filter(|(k, _)| after.as_deref().is_none_or(|a| k.as_bytes() > a))
                .filter(|(_, e)| sel.is_none_or(|g| e.g == g))
                .map(|(k, e)| (k.clone(), e))
                .collect();
            let mut want = Vec::new();
            let mut b = 0;
            let mut n = 0;
            for (k, e) in &all {
                want.push(render(k));
                n += 1;
                b += e.row.len();
                if n >= limit || b >= bytes_max {
                    break;
                }
            }
            assert_eq!(
                got, want,
                "{ctx}: window sel {sel:?} after {after:?} limit {limit}"
            );
            assert_eq!(more, all.len() > want.len(), "{ctx}: window more");
        }
        // changes since random positions
        for _ in 0..3 {
            let sel = (rng.below(2) == 0).then(|| rng.below(4) as i64);
            let filter = sel.map(sel_filter);
            let lo = model.floor.saturating_sub(3);
            let since = lo + rng.below(model.position + 2 - lo);
            let limit = 1 + rng.below(600) as usize;
            let got = m
                .changes(filter.as_ref(), since, limit)
                .map(|(c, next)| (show_changes(&c), next));
            let want = model.changes(sel, since, limit);
            assert_eq!(
                got, want,
                "{ctx}: changes since {since} sel {sel:?} limit {limit}"
            );
        }
        // selected by version
        let sel = rng.below(4) as i64;
        let f = sel_filter(sel);
        let got: Vec<u64> = m
            .selected_by_version(Some(&f))
            .iter()
            .map(|e| e.version)
            .collect();
        let mut want: Vec<u64> = model
            .held
            .values()
            .filter(|e| e.g == sel)
            .map(|e| e.version)
            .collect();
        want.sort();
        assert_eq!(got, want, "{ctx}: selected by version");
    }

    fn run(
        seed: u64,
        shape: Shape,
        removal: Removal,
        max_keys: usize,
        population: u64,
        steps: u64,
    ) {
        let mut rng = Rng(seed | 1);
        let cols = key_columns(shape);
        let any = |_: &str| ColumnLookup::Scalar;
        let spec = KeySpec::new(
            cols.iter().map(|c| c.to_string()).collect(),
            Some(Filter::parse(removal_text(removal), Some(&any)).unwrap()),
        );
        let start = 1 + rng.below(1000);
        let mut m = StateMap::new(start, max_keys);
        let mut model = Model {
            floor: start,
            position: start,
            max_keys,
            ..Model::default()
        };
        // a fixed population of keys (so they repeat), plus fresh ones now and then
        let pop: Vec<Vec<V>> = (0..population).map(|_| a_key(&mut rng, shape)).collect();
        let dir = tempfile::tempdir().unwrap();
        let id = super::super::checkpoint::Identity {
            stream_id: "s".into(),
            key: cols.iter().map(|c| c.to_string()).collect(),
            remove_when: None,
        };
        let mut clone: Option<(StateMap, Model)> = None;
        for step in 0..steps {
            let key = if rng.below(20) == 0 {
                a_key(&mut rng, shape)
            } else {
                pop[rng.below(pop.len() as u64) as usize].clone()
            };
            let row = a_row(&mut rng, shape, &key);
            // heavy removal phases
            let removes = model_removes(removal, &row);
            let offset = model.position;
            let ts = rng.next() as i64 >> 8;
            let ctx = format!(
                "seed {seed} {shape:?} {removal:?} step {step} offset {offset} row {}",
                row.json
            );
            let got = m.apply(&spec, offset, ts, row.json.as_bytes());
            let want = model.apply(offset, ts, &key, &row, removes);
            assert_eq!(got, want, "{ctx}");
            if let Some((c, cm)) = &mut clone {
                let got = c.apply(&spec, offset, ts, row.json.as_bytes());
                let want = cm.apply(offset, ts, &key, &row, removes);
                assert_eq!(got, want, "clone: {ctx}");
            }
            if rng.below(400) == 0 {
                check(&mut m, &model, &mut rng, &ctx);
            }
            if rng.below(3000) == 0 && !m.incomplete() {
                // checkpoint, restore, continue from the restored state
                super::super::checkpoint::write(dir.path(), &id, &mut m).unwrap();
                let mut back = super::super::checkpoint::read(dir.path(), &id, max_keys)
                    .unwrap()
                    .expect("a checkpoint");
                let mut r2 = Rng(rng.0);
                check(&mut back, &model, &mut r2, &format!("restored: {ctx}"));
                m = back;
            }
            if rng.below(2500) == 0 {
                if let Some((mut c, cm)) = clone.take() {
                    check(&mut c, &cm, &mut rng, &format!("clone: {ctx}"));
                }
                clone = Some((m.clone(), model.clone()));
            }
        }
        let ctx = format!("seed {seed} {shape:?} {removal:?} end");
        check(&mut m, &model, &mut rng, &ctx);
        if let Some((mut c, cm)) = clone.take() {
            check(&mut c, &cm, &mut rng, &format!("clone: {ctx}"));
        }
    }

    #[test]
    fn the_state_is_the_model_over_string_keys_around_the_inline_boundary() {
        for seed in 1..=3 {
            run(
                seed * 7919,
                Shape::Str,
                Removal::Strings,
                100_000,
                400,
                30_000,
            );
        }
    }

    #[test]
    fn the_state_is_the_model_over_integer_keys() {
        for seed in 1..=3 {
            run(
                seed * 104_729,
                Shape::Int,
                Removal::One,
                100_000,
                200,
                30_000,
            );
        }
    }

    #[test]
    fn the_state_is_the_model_over_multi_column_keys() {
        for seed in 1..=3 {
            run(
                seed * 31,
                Shape::Multi,
                Removal::Mixed,
                100_000,
                600,
                30_000,
            );
        }
    }

    #[test]
    fn the_state_is_the_model_at_max_keys_and_its_tombstone_bound() {
        for seed in 1..=4 {
            run(seed * 977, Shape::Str, Removal::Strings, 60, 200, 20_000);
            run(seed * 13, Shape::Multi, Removal::One, 25, 80, 20_000);
        }
    }

    #[test]
    fn heavy_churn_compacts_many_times_and_keeps_every_row() {
        let mut rng = Rng(99);
        let spec = KeySpec::new(
            vec!["s".into()],
            Some(Filter::parse(r#"{"act":"C"}"#, Some(&|_: &str| ColumnLookup::Scalar)).unwrap()),
        );
        let mut m = StateMap::new(1, 1_000_000);
        let mut model: BTreeMap<String, (u64, String)> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for offset in 1..=60_000u64 {
            // phases: fill many keys, then remove most of them
            let phase = (offset / 5_000) % 2 == 1;
            let n = rng.below(3000);
            let k = format!("{n:0w$}", w = 18 + (n % 8) as usize);
            seen.insert(k.clone());
            let gone = if phase {
                rng.below(10) != 0
            } else {
                rng.below(10) == 0
            };
            let n = match rng.below(6) {
                0 => ARENA_ROW_MAX - 40 + rng.below(80) as usize,
                1 => rng.below(3000) as usize,
                _ => rng.below(200) as usize,
            };
            let row = format!(
                r#"{{"s":"{k}","act":"{}","pad":"{}"}}"#,
                if gone { "C" } else { "A" },
                "q".repeat(n)
            );
            m.apply(&spec, offset, 0, row.as_bytes());
            if gone {
                model.remove(&k);
            } else {
                model.insert(k, (offset, row));
            }
        }
        assert!(
            m.rows.compactions >= 5,
            "{} compactions",
            m.rows.compactions
        );
        let got: Vec<(String, u64, Vec<u8>)> = m
            .iter()
            .map(|(k, e)| (render(k), e.version, e.row.to_vec()))
            .collect();
        let want: Vec<(String, u64, Vec<u8>)> = model
            .iter()
            .map(|(k, (v, r))| (format!("[\"{k}\"]"), *v, r.clone().into_bytes()))
            .collect();
        assert_eq!(got, want);
    }
}

/// Defects found by the hostile tests (each fails before its fix).
#[cfg(test)]
mod defect_tests {
    use super::*;
    use crate::filter::ColumnLookup;

    fn spec(columns: &[&str], remove_when: Option<&str>) -> KeySpec {
        let any = |_: &str| ColumnLookup::Scalar;
        KeySpec::new(
            columns.iter().map(|c| c.to_string()).collect(),
            remove_when.map(|w| Filter::parse(w, Some(&any)).expect("filter")),
        )
    }

    /// `key_and_removes` promises the answers of `key_of` and `removes`, falling back to them
    /// for bytes it does not expect ("`None` for bytes that are not a compact object"); a value
    /// with JSON whitespace around it is read by the one-pass search as a value starting with a
    /// space: the key is refused as "a non-integer number" (a debug build panics on the check)
    /// and a string `remove_when` value does not match.
    #[test]
    fn whitespace_around_a_value_gets_the_lookups_answer() {
        let s = spec(&["k"], Some(r#"{"a":"C"}"#));
        let rows: [&[u8]; 6] = [
            br#"{"k": 5,"a":"A"}"#,
            br#"{"k":5 ,"a":"A"}"#,
            br#"{"k":5,"a": "C"}"#,
            br#"{"k":"x","a":"C" }"#,
            br#"{"k":	5,"a":"C"}"#,
            br#"{"k": true,"a":"A"}"#,
        ];
        for row in rows {
            let want = s.key_of(row).map(|k| (k.to_vec(), s.removes(row)));
            assert!(want.is_ok(), "{}", String::from_utf8_lossy(row));
            let got = std::panic::catch_unwind(|| {
                let mut key = Vec::new();
                s.key_and_removes(row, &mut key).map(|r| (key, r))
            });
            assert_eq!(
                got.ok(),
                Some(want.clone()),
                "one pass vs lookups on {}",
                String::from_utf8_lossy(row)
            );
        }
    }

    /// The memory bound (OPERATIONS.md): entities whose rows were once 2 KiB and are now 40
    /// bytes do not keep 2 KiB chunks each (a row that shrank kept its chunk, counted as in use,
    /// so compaction never saw it: fifty times the rows).
    #[test]
    fn rows_that_shrink_stay_within_the_memory_bound() {
        let s = spec(&["k"], None);
        let mut m = StateMap::new(1, 100_000);
        let mut offset = 1;
        for k in 0..2_000 {
            let big = format!(r#"{{"k":{k},"pad":"{}"}}"#, "b".repeat(ARENA_ROW_MAX - 40));
            m.apply(&s, offset, 0, big.as_bytes());
            offset += 1;
        }
        for k in 0..2_000 {
            let small = format!(r#"{{"k":{k},"pad":"s"}}"#);
            m.apply(&s, offset, 0, small.as_bytes());
            offset += 1;
        }
        let pages: usize = m.rows.pages.iter().map(Vec::capacity).sum();
        let bound = 2 * m.row_bytes() + COMPACT_MIN + PAGE;
        assert!(
            pages <= bound,
            "{pages} bytes of pages for {} bytes of rows (bound about {bound})",
            m.row_bytes()
        );
    }
}
