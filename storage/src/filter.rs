//! `where=` filters: equality and membership on top-level scalar columns, terms ANDed
//! (PROTOCOL.md §2).
//!
//! Parsed once per subscription from the query string; evaluated on each row's JSON (the stored,
//! canonical bytes), on replay and live frames alike, by the broker's sessions and by the
//! client's catch-up (rows read from the published table never pass through the server, so the
//! client applies the subscription's filter to them itself). Refusals (4400) name what was wrong:
//! not JSON, not an object, an empty list, an object or nested list value, an unknown column, a
//! struct/list/map column. A type mismatch (`"1"` for an integer column) silently matches nothing.

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

    fn matches(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Int(a), Scalar::Num(b)) | (Scalar::Num(b), Scalar::Int(a)) => *a as f64 == *b,
            (Scalar::Num(a), Scalar::Num(b)) => a == b,
            (a, b) => a == b,
        }
    }
}

#[derive(Debug, Clone)]
struct Term {
    column: String,
    any_of: Vec<Scalar>,
}

/// A parsed `where=` filter.
#[derive(Debug, Clone)]
pub struct Filter {
    terms: Vec<Term>,
    echo: String,
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
                any_of,
            });
        }
        let echo = sonic_rs::to_string(&v).unwrap_or_else(|_| "{}".into());
        Ok(Filter { terms, echo })
    }

    /// The filter as the greeting echoes it (compact JSON object).
    pub fn echo(&self) -> &str {
        &self.echo
    }

    /// The terms as column predicates, for skipping sealed row groups whose statistics exclude
    /// them.
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
        self.terms.iter().all(|t| {
            let Ok(x) = sonic_rs::get(row, [t.column.as_str()]) else {
                return false;
            };
            let Some(x) = Scalar::of(&x) else {
                return false;
            };
            t.any_of.iter().any(|want| want.matches(&x))
        })
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
