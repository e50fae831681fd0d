//! `where=` filters: equality and membership on top-level scalar columns, terms ANDed
//! (PROTOCOL.md §2).
//!
//! Parsed once per subscription from the query string; evaluated on each row's JSON (the stored,
//! canonical bytes), on replay and live frames alike, by the broker's sessions and by the
//! client's catch-up (rows read from the published table never pass through the server, so the
//! client applies the subscription's filter to them itself). Refusals (4400) name what was wrong:
//! not JSON, not an object, an empty list, an object or nested list value, an unknown column, a
//! struct/list/map column. A type mismatch (`"1"` for an integer column) silently matches nothing.
//! A row read from a migrated stream's older log is held to [`Filter::for_log`], which reads a
//! column that log does not have as null (as the official client does).

use crate::tier::{ColumnPredicate, PredicateValue};
use sonic_rs::{JsonContainerTrait, JsonType, JsonValueTrait, Value};

/// What a `where=` term may name, as the stream's schema says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnLookup {
    /// No such column.
    Unknown,
    /// A struct, list or map column: not filterable.
    NotScalar,
    /// A scalar column (bool, integer, number, string, binary-as-text).
    Scalar,
}

#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i128),
    Num(f64),
    Str(String),
}

impl Scalar {
    fn of(v: &impl JsonValueTrait) -> Option<Scalar> {
        // dispatch on the type first: on a lazy value every failed `as_*` is a parse attempt
        match v.get_type() {
            JsonType::Null => Some(Scalar::Null),
            JsonType::Boolean => v.as_bool().map(Scalar::Bool),
            JsonType::String => v.as_str().map(|s| Scalar::Str(s.to_string())),
            JsonType::Number => {
                if let Some(i) = v.as_i64() {
                    Some(Scalar::Int(i as i128))
                } else if let Some(u) = v.as_u64() {
                    Some(Scalar::Int(u as i128))
                } else {
                    v.as_f64().map(Scalar::Num)
                }
            }
            JsonType::Array | JsonType::Object => None,
        }
    }

    fn as_val(&self) -> Val<'_> {
        match self {
            Scalar::Null => Val::Null,
            Scalar::Bool(b) => Val::Bool(*b),
            Scalar::Int(i) => Val::Int(*i),
            Scalar::Num(x) => Val::Num(*x),
            Scalar::Str(s) => Val::Str(s),
        }
    }
}

/// A row's value, borrowed (no allocation to look a string up).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Num(f64),
    Str(&'a str),
}

impl<'a> Val<'a> {
    /// The pairwise rule: an integer and a number match when the integer converts to it.
    fn matches(self, other: Val<'_>) -> bool {
        match (self, other) {
            (Val::Int(a), Val::Int(b)) => a == b,
            (Val::Int(a), Val::Num(b)) | (Val::Num(b), Val::Int(a)) => a as f64 == b,
            (Val::Num(a), Val::Num(b)) => a == b,
            (Val::Null, Val::Null) => true,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Str(a), Val::Str(b)) => a == b,
            _ => false,
        }
    }

    /// The value of a lazily parsed row field (strings borrowed from it).
    fn of(v: &'a impl JsonValueTrait) -> Option<Val<'a>> {
        // dispatch on the type first: on a lazy value every failed `as_*` is a parse attempt
        match v.get_type() {
            JsonType::Null => Some(Val::Null),
            JsonType::Boolean => v.as_bool().map(Val::Bool),
            JsonType::String => v.as_str().map(Val::Str),
            JsonType::Number => {
                if let Some(i) = v.as_i64() {
                    Some(Val::Int(i as i128))
                } else if let Some(u) = v.as_u64() {
                    Some(Val::Int(u as i128))
                } else {
                    v.as_f64().map(Val::Num)
                }
            }
            JsonType::Array | JsonType::Object => None,
        }
    }

    /// The value of a raw canonical JSON scalar (`"A"`, `12`, `-3.5`, `true`, `null`) as
    /// [`Val::of`] reads it; a string holding an escape is decoded into `scratch`. `None`: a
    /// list, an object, or bytes that are not a JSON scalar.
    fn of_raw(raw: &'a [u8], scratch: &'a mut String) -> Option<Val<'a>> {
        match *raw.first()? {
            b'n' if raw == b"null" => Some(Val::Null),
            b't' if raw == b"true" => Some(Val::Bool(true)),
            b'f' if raw == b"false" => Some(Val::Bool(false)),
            b'"' => {
                let inner = raw.get(1..raw.len() - 1).filter(|_| raw.len() >= 2)?;
                if inner.contains(&b'\\') {
                    *scratch = sonic_rs::from_slice::<String>(raw).ok()?;
                    Some(Val::Str(scratch.as_str()))
                } else {
                    std::str::from_utf8(inner).ok().map(Val::Str)
                }
            }
            b'-' | b'0'..=b'9' => {
                let text = std::str::from_utf8(raw).ok()?;
                let integral = raw.iter().all(|&b| b == b'-' || b.is_ascii_digit());
                if integral {
                    if let Ok(i) = text.parse::<i64>() {
                        return Some(Val::Int(i as i128));
                    }
                    if let Ok(u) = text.parse::<u64>() {
                        return Some(Val::Int(u as i128));
                    }
                }
                // beyond u64 an integer reads as a number, as the JSON parser reads it
                text.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .map(|x| Val::Num(x + 0.0))
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Term {
    column: String,
    any_of: Vec<Scalar>,
    /// `any_of` indexed by type: a row's value is looked up in O(1) (O(log n) for floats)
    /// however long the membership list is — a list of 100,000 order ids costs each row what
    /// one id does.
    set: ValueSet,
}

/// The values of one term, by type, for lookups ([`Scalar::matches`]' rules: an integer and a
/// number match when the integer converts to that number).
#[derive(Debug, Clone, Default)]
struct ValueSet {
    null: bool,
    bools: [bool; 2],
    ints: std::collections::HashSet<i128>,
    /// Sorted; JSON has no NaN, so the order is total.
    nums: Vec<f64>,
    strs: std::collections::HashSet<String>,
}

/// The compact JSON of a filter's object, in its keys' order, with a negative zero written
/// `0.0` (only an underflow such as `-1e-400` makes one: the parser reads the literal `-0.0` as
/// `0.0`), so that the echo parses back to itself.
fn echo_of(obj: &sonic_rs::Object) -> String {
    let scalar = |v: &Value| {
        if v.as_f64().is_some_and(|x| x == 0.0 && x.is_sign_negative()) {
            "0.0".to_string()
        } else {
            sonic_rs::to_string(v).unwrap_or_default()
        }
    };
    let mut out = String::from("{");
    for (i, (k, v)) in obj.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&sonic_rs::to_string(k).unwrap_or_default());
        out.push(':');
        match v.as_array() {
            Some(list) => {
                out.push('[');
                for (j, x) in list.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str(&scalar(x));
                }
                out.push(']');
            }
            None => out.push_str(&scalar(v)),
        }
    }
    out.push('}');
    out
}

/// A membership term of at most this many strings compares them rather than hashing.
const STRS_COMPARED_MAX: usize = 4;

/// Below this magnitude an integral `f64` is the conversion of exactly one integer.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

impl ValueSet {
    fn of(values: &[Scalar]) -> ValueSet {
        let mut set = ValueSet::default();
        for v in values {
            match v {
                Scalar::Null => set.null = true,
                Scalar::Bool(b) => set.bools[usize::from(*b)] = true,
                Scalar::Int(i) => {
                    set.ints.insert(*i);
                }
                // -0.0 == 0.0 for the pairwise rule; total_cmp tells them apart
                Scalar::Num(x) => set.nums.push(*x + 0.0),
                Scalar::Str(s) => {
                    set.strs.insert(s.clone());
                }
            }
        }
        set.nums.sort_by(f64::total_cmp);
        set.nums.dedup();
        set
    }

    fn has_num(&self, x: f64) -> bool {
        let x = x + 0.0;
        self.nums.binary_search_by(|n| n.total_cmp(&x)).is_ok()
    }

    fn contains(&self, value: Val<'_>) -> bool {
        match value {
            Val::Null => self.null,
            Val::Bool(b) => self.bools[usize::from(b)],
            // a few strings (`{"action":["C","F"]}`): compared, not hashed (SipHash costs more
            // than the comparisons)
            Val::Str(s) if self.strs.len() <= STRS_COMPARED_MAX => self.strs.iter().any(|w| w == s),
            Val::Str(s) => self.strs.contains(s),
            Val::Int(i) => self.ints.contains(&i) || self.has_num(i as f64),
            Val::Num(x) => {
                self.has_num(x)
                    || match x.fract() == 0.0 && x.abs() < EXACT_INT {
                        // one integer converts to this number exactly
                        true => self.ints.contains(&(x as i128)),
                        // beyond 2^53 several integers round to it: the rare slow path
                        false => self.ints.iter().any(|i| *i as f64 == x),
                    }
            }
        }
    }
}

/// A parsed `where=` filter.
#[derive(Debug, Clone)]
pub struct Filter {
    terms: Vec<Term>,
    echo: String,
    /// Matches no row at all: a term on a column the rows' log lacks, which reads as null,
    /// does not admit null ([`Filter::for_log`]).
    none: bool,
}

impl Filter {
    /// Parses `text` (the decoded query value). `lookup` says what each named column is; pass
    /// `None` for schema-less streams (any key may be named). Errors are the 4400 detail.
    pub fn parse(
        text: &str,
        lookup: Option<&dyn Fn(&str) -> ColumnLookup>,
    ) -> Result<Filter, String> {
        // the strict parser: depth-limited (a hostile `[[[[…` cannot overflow the stack),
        // duplicate keys refused
        let v: Value = crate::json::parse_unique(text.as_bytes()).map_err(|e| {
            let shown: String = text.chars().take(40).collect();
            format!("where= is not JSON ({shown:?}): {e}")
        })?;
        let obj = v
            .as_object()
            .ok_or_else(|| "where= must be a JSON object of column: value".to_string())?;
        let mut terms = Vec::new();
        for (k, val) in obj.iter() {
            if let Some(lookup) = lookup {
                match lookup(k) {
                    ColumnLookup::Unknown => {
                        return Err(format!("where= names unknown column {k:?}"));
                    }
                    ColumnLookup::NotScalar => {
                        return Err(format!("where= cannot filter struct/list/map column {k:?}"));
                    }
                    ColumnLookup::Scalar => {}
                }
            }
            let any_of = if let Some(list) = val.as_array() {
                if list.is_empty() {
                    return Err(format!("where= list for {k:?} is empty"));
                }
                list.iter()
                    .map(|x| {
                        Scalar::of(x)
                            .ok_or_else(|| format!("where= values for {k:?} must be scalars"))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                vec![Scalar::of(val)
                    .ok_or_else(|| format!("where= value for {k:?} must be a scalar or a list"))?]
            };
            terms.push(Term {
                column: k.to_string(),
                set: ValueSet::of(&any_of),
                any_of,
            });
        }
        let echo = echo_of(obj);
        Ok(Filter {
            terms,
            echo,
            none: false,
        })
    }

    /// This filter for the rows of a log that may lack some of the columns it names: a
    /// migrated stream's older log, from before a migration added them (`has_column` says
    /// which columns that log has). A term on a column the log lacks reads the column as
    /// null, as the official client's catch-up does (it looks the column up in a row of the
    /// older table, which has no such key): the term passes every row of the log if it admits
    /// null, and then the filter matches no row of it otherwise. The terms on the log's own
    /// columns are kept as they are.
    pub fn for_log(&self, has_column: impl Fn(&str) -> bool) -> Filter {
        let mut out = Filter {
            terms: Vec::with_capacity(self.terms.len()),
            echo: self.echo.clone(),
            none: self.none,
        };
        for t in &self.terms {
            if has_column(&t.column) {
                out.terms.push(t.clone());
            } else if !t.set.null {
                out.none = true;
            }
        }
        out
    }

    /// The filter as the greeting echoes it (compact JSON object).
    pub fn echo(&self) -> &str {
        &self.echo
    }

    /// The terms as column predicates, for skipping sealed row groups whose statistics exclude
    /// them (of a filter that matches nothing, its terms still: skipping less is safe).
    pub fn predicates(&self) -> Vec<ColumnPredicate> {
        self.terms
            .iter()
            .map(|t| ColumnPredicate {
                column: t.column.clone(),
                any_of: t
                    .any_of
                    .iter()
                    .map(|v| match v {
                        Scalar::Null => PredicateValue::Null,
                        Scalar::Bool(b) => PredicateValue::Bool(*b),
                        Scalar::Int(i) => PredicateValue::Int(*i),
                        Scalar::Num(x) => PredicateValue::Num(*x),
                        Scalar::Str(s) => PredicateValue::Str(s.clone()),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Whether the row (canonical JSON object bytes) passes every term. Only the named keys are
    /// looked at (a lazy scan of the row, no tree built).
    pub fn matches(&self, row: &[u8]) -> bool {
        !self.none
            && self.terms.iter().all(|t| {
                let Ok(x) = sonic_rs::get(row, [t.column.as_str()]) else {
                    return false;
                };
                let Some(x) = Val::of(&x) else {
                    return false;
                };
                t.has(x)
            })
    }

    /// The columns the terms name, in term order: what [`Filter::matches_values`] takes.
    pub fn columns(&self) -> impl ExactSizeIterator<Item = &str> {
        self.terms.iter().map(|t| t.column.as_str())
    }

    /// Each term's values (in [`Filter::columns`]' order) when every value of every term is a
    /// string and the filter can match at all: a row then passes when each term's value is a
    /// string equal to one of them (what [`Filter::matches`] says), which a caller holding the
    /// raw values can compare as bytes.
    pub fn string_sets(&self) -> Option<Vec<Vec<&str>>> {
        if self.none {
            return None;
        }
        self.terms
            .iter()
            .map(|t| {
                t.any_of
                    .iter()
                    .map(|v| match v {
                        Scalar::Str(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether a row passes, given each term's value as raw canonical JSON (`values[i]` is the
    /// value of the `i`th of [`Filter::columns`]; `None`: the row lacks it) — the answer
    /// [`Filter::matches`] gives on the row, for a caller that has already found the values
    /// in one pass over the row.
    pub fn matches_values(&self, values: &[Option<&[u8]>]) -> bool {
        assert_eq!(values.len(), self.terms.len(), "one value per term");
        !self.none
            && self.terms.iter().zip(values).all(|(t, raw)| {
                let mut scratch = String::new();
                match raw.and_then(|raw| Val::of_raw(raw, &mut scratch)) {
                    Some(x) => t.has(x),
                    None => false,
                }
            })
    }
}

impl Term {
    fn has(&self, x: Val<'_>) -> bool {
        let found = self.set.contains(x);
        debug_assert!(
            self.any_of.len() > 64
                || found == self.any_of.iter().any(|want| want.as_val().matches(x)),
            "the indexed lookup disagrees with the pairwise rule on {x:?}"
        );
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trade_lookup(c: &str) -> ColumnLookup {
        match c {
            "side" | "symbol" | "price" => ColumnLookup::Scalar,
            "nested" => ColumnLookup::NotScalar,
            _ => ColumnLookup::Unknown,
        }
    }

    #[test]
    fn the_echo_keeps_the_keys_order() {
        // the fuzzer's find against a first fix that rewrote the parsed object in place
        let any = |_: &str| ColumnLookup::Scalar;
        for text in [r#"{"4":"","":""}"#, r#"{"b":1,"a":[2,1],"c":null}"#] {
            let f = Filter::parse(text, Some(&any)).unwrap();
            assert_eq!(f.echo(), text);
            assert_eq!(Filter::parse(f.echo(), Some(&any)).unwrap().echo(), text);
        }
    }

    #[test]
    fn a_negative_zero_is_echoed_as_zero_so_the_echo_parses_back_to_itself() {
        // the fuzzer's find: `-1e-400` underflows to -0.0, which was echoed `-0.0` and read
        // back as 0.0 (the parser drops the sign of the literal), a different echo
        for text in [
            r#"{"price":-1e-400}"#,
            r#"{"price":[1,-1e-400,2.5],"side":-0}"#,
        ] {
            let f = Filter::parse(text, Some(&trade_lookup)).unwrap();
            assert!(!f.echo().contains("-0"), "{text}: {}", f.echo());
            let again = Filter::parse(f.echo(), Some(&trade_lookup)).unwrap();
            assert_eq!(again.echo(), f.echo(), "{text}");
            for row in [
                &br#"{"price":0.0,"side":0}"#[..],
                br#"{"price":2.5,"side":0}"#,
            ] {
                assert_eq!(f.matches(row), again.matches(row), "{text}");
            }
        }
        let f = Filter::parse(r#"{"price":-1e-400}"#, Some(&trade_lookup)).unwrap();
        assert_eq!(f.echo(), r#"{"price":0.0}"#);
        assert!(f.matches(br#"{"price":0.0}"#));
    }

    #[test]
    fn equality_membership_and() {
        let f = Filter::parse(r#"{"side":1,"symbol":["A","B"]}"#, Some(&trade_lookup)).unwrap();
        assert!(f.matches(br#"{"side":1,"symbol":"B","price":1.0}"#));
        assert!(!f.matches(br#"{"side":0,"symbol":"B","price":1.0}"#));
        assert!(!f.matches(br#"{"side":1,"symbol":"C","price":1.0}"#));
        let f = Filter::parse(r#"{"price":85566}"#, Some(&trade_lookup)).unwrap();
        assert!(f.matches(br#"{"price":85566.0}"#));
        let f = Filter::parse(r#"{"side":"1"}"#, Some(&trade_lookup)).unwrap();
        assert!(
            !f.matches(br#"{"side":1}"#),
            "type mismatch matches nothing"
        );
        let f = Filter::parse("{}", Some(&trade_lookup)).unwrap();
        assert!(f.matches(br#"{"side":1}"#));
        assert_eq!(f.echo(), "{}");
    }

    #[test]
    fn escaped_strings_and_nulls_compare_by_value() {
        let f = Filter::parse(r#"{"symbol":"a\"b"}"#, Some(&trade_lookup)).unwrap();
        assert!(f.matches(br#"{"side":1,"symbol":"a\"b"}"#));
        assert!(f.matches(br#"{"symbol":"a\u0022b"}"#));
        assert!(!f.matches(br#"{"symbol":"ab"}"#));
        let f = Filter::parse(r#"{"price":null}"#, Some(&trade_lookup)).unwrap();
        assert!(f.matches(br#"{"price":null}"#));
        assert!(!f.matches(br#"{"price":1.0}"#));
        assert!(
            !f.matches(br#"{"side":1}"#),
            "a missing column matches nothing"
        );
    }

    #[test]
    fn the_indexed_lookup_agrees_with_the_pairwise_rules() {
        let f = Filter::parse(
            r#"{"price":[1, 2.5, -3, 9007199254740993, 1e300, null, true, "x"]}"#,
            None,
        )
        .unwrap();
        for (row, want) in [
            (r#"{"price":1}"#, true),
            (r#"{"price":1.0}"#, true),
            (r#"{"price":2.5}"#, true),
            (r#"{"price":2}"#, false),
            (r#"{"price":-3.0}"#, true),
            (r#"{"price":9007199254740993}"#, true),
            // 2^53 + 1 rounds to 2^53 as a number: the pairwise rule says it matches
            (r#"{"price":9007199254740992.0}"#, true),
            (r#"{"price":9007199254740992}"#, false),
            (r#"{"price":1e300}"#, true),
            (r#"{"price":null}"#, true),
            (r#"{"price":true}"#, true),
            (r#"{"price":false}"#, false),
            (r#"{"price":"x"}"#, true),
            (r#"{"price":"y"}"#, false),
            (r#"{"price":-0.0}"#, false),
        ] {
            // matches() also checks the pairwise rule in debug builds
            assert_eq!(f.matches(row.as_bytes()), want, "{row}");
        }
    }

    #[test]
    fn raw_values_match_as_the_row_does() {
        let f = Filter::parse(
            r#"{"price":[1, 2.5, 9007199254740993, 1e300, null, true, "x", "a\"b"]}"#,
            None,
        )
        .unwrap();
        assert_eq!(f.columns().collect::<Vec<_>>(), ["price"]);
        for raw in [
            "1",
            "1.0",
            "2.5",
            "2",
            "9007199254740993",
            "18446744073709551615",
            "-9223372036854775808",
            "184467440737095516150",
            "1e300",
            "null",
            "true",
            "false",
            r#""x""#,
            r#""y""#,
            r#""a\"b""#,
            r#""a\u0022b""#,
            "[1]",
            r#"{"a":1}"#,
        ] {
            let row = format!(r#"{{"price":{raw}}}"#);
            assert_eq!(
                f.matches_values(&[Some(raw.as_bytes())]),
                f.matches(row.as_bytes()),
                "{raw}"
            );
        }
        assert!(
            !f.matches_values(&[None]),
            "a missing column matches nothing"
        );
    }

    #[test]
    fn a_column_an_older_log_lacks_reads_as_null() {
        // the live log added `note`; the older one has only `side`
        let older = |c: &str| c == "side";
        let f = Filter::parse(r#"{"note":["a",null],"side":1}"#, None).unwrap();
        let g = f.for_log(older);
        assert!(g.matches(br#"{"side":1}"#));
        assert!(!g.matches(br#"{"side":0}"#));
        assert_eq!(g.columns().collect::<Vec<_>>(), ["side"]);
        assert!(g.matches_values(&[Some(b"1")]));
        assert_eq!(
            g.echo(),
            f.echo(),
            "the subscription's filter, as the greeting echoes it"
        );
        // a term that does not admit null matches no row of the older log
        let f = Filter::parse(r#"{"note":"a","side":1}"#, None).unwrap();
        let g = f.for_log(older);
        assert!(!g.matches(br#"{"side":1}"#));
        assert!(!g.matches_values(&[Some(b"1")]));
        // a log with every column: the same filter
        let h = f.for_log(|_| true);
        assert!(h.matches(br#"{"note":"a","side":1}"#));
        assert!(
            !h.matches(br#"{"side":1}"#),
            "on a row that has the column, a missing key still matches nothing"
        );
    }

    #[test]
    fn zero_and_minus_zero_are_one_value() {
        let f = Filter::parse(r#"{"price":[0.0, 7]}"#, None).unwrap();
        for row in [r#"{"price":-0.0}"#, r#"{"price":0}"#, r#"{"price":0.0}"#] {
            assert!(f.matches(row.as_bytes()), "{row}");
        }
    }

    #[test]
    fn a_long_membership_list_is_a_lookup_not_a_scan() {
        let ids: Vec<String> = (100_000..245_000).map(|i| i.to_string()).collect();
        let f = Filter::parse(&format!(r#"{{"side":[{}]}}"#, ids.join(",")), None).unwrap();
        assert!(f.matches(br#"{"side":244999}"#));
        assert!(!f.matches(br#"{"side":99999}"#));
        assert_eq!(f.terms[0].set.ints.len(), 145_000);
    }

    #[test]
    fn hostile_nesting_is_refused_not_a_crash() {
        let deep = "[".repeat(5000);
        assert!(Filter::parse(&deep, None).is_err());
    }

    #[test]
    fn refusals() {
        for bad in [
            "{side:1",
            "[1,2]",
            r#"{"side":[]}"#,
            r#"{"side":{"eq":1}}"#,
            r#"{"side":[[1]]}"#,
            r#"{"nope":1}"#,
            r#"{"nested":1}"#,
        ] {
            assert!(Filter::parse(bad, Some(&trade_lookup)).is_err(), "{bad}");
        }
        assert!(Filter::parse(r#"{"anything":1}"#, None).is_ok());
    }
}
