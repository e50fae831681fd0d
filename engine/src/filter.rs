//! `where=` filters, as [`corecast_storage::filter`] defines them: the broker's sessions parse
//! and apply them here, and the client's catch-up applies the same filter to the rows it reads
//! from the published table, so both live in the storage crate.

pub use corecast_storage::filter::{ColumnLookup, Filter};

use corecast_storage::schema::{ColumnType, Schema};

/// A value of a filter that no row can hold in its column ([`never_matching`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeverMatches {
    /// The value, as JSON.
    pub value: String,
    /// The column.
    pub column: String,
    /// What the column holds: `integers`, `numbers`, `booleans` or `strings`.
    pub holds: &'static str,
    /// Whether it holds null too.
    pub nullable: bool,
}

impl std::fmt::Display for NeverMatches {
    /// `1.5 can never match column "qty", which holds integers and is never null`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} can never match column {:?}, which holds {}{}",
            self.value,
            self.column,
            self.holds,
            if self.nullable {
                " or null"
            } else {
                " and is never null"
            }
        )
    }
}

impl NeverMatches {
    /// The short form, for a close reason: `"buy" never matches "side" (integers, never null)`.
    pub fn short(&self) -> String {
        format!(
            "{} never matches {:?} ({}{})",
            self.value,
            self.column,
            self.holds,
            if self.nullable {
                " or null"
            } else {
                ", never null"
            }
        )
    }
}

/// The first value of the filter `text` (already parsed by [`Filter::parse`]) that no row can
/// hold in its column: a string for a number column, a number with a fraction for an integer
/// one, `null` for a required one, … Such a term never matches (an integer and an integral
/// number do match, as [`Filter`] compares them).
pub fn never_matching(text: &str, schema: &Schema) -> Option<NeverMatches> {
    let Ok(serde_json::Value::Object(terms)) = serde_json::from_str::<serde_json::Value>(text)
    else {
        return None;
    };
    for (c, v) in &terms {
        let Some((_, col)) = schema.column(c) else {
            continue;
        };
        let values = match v {
            serde_json::Value::Array(list) => list.iter().collect::<Vec<_>>(),
            one => vec![one],
        };
        for value in values {
            let fits = match (value, col.ty()) {
                (serde_json::Value::Null, _) => col.nullable(),
                (serde_json::Value::Bool(_), ColumnType::Boolean) => true,
                (serde_json::Value::Number(n), ColumnType::Int32 | ColumnType::Int64) => {
                    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|x| x.fract() == 0.0)
                }
                (serde_json::Value::Number(_), ColumnType::Float32 | ColumnType::Float64) => true,
                (serde_json::Value::String(_), ColumnType::Utf8 | ColumnType::Binary { .. }) => {
                    true
                }
                _ => false,
            };
            if !fits {
                return Some(NeverMatches {
                    value: value.to_string(),
                    column: c.clone(),
                    holds: match col.ty() {
                        ColumnType::Int32 | ColumnType::Int64 => "integers",
                        ColumnType::Float32 | ColumnType::Float64 => "numbers",
                        ColumnType::Boolean => "booleans",
                        _ => "strings",
                    },
                    nullable: col.nullable(),
                });
            }
        }
    }
    None
}
