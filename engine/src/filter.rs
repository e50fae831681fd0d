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
    /// The short form, for a close reason, the value last so that a cut loses only the value:
    /// `column "side" (integers, never null) never matches "buy"`.
    pub fn short(&self) -> String {
        format!(
            "column {:?} ({}{}) never matches {}",
            self.column,
            self.holds,
            if self.nullable {
                " or null"
            } else {
                ", never null"
            },
            self.value
        )
    }
}

/// A term of the filter `text` (already parsed by [`Filter::parse`]) whose values no row can
/// hold in its column: a string for a number column, a number with a fraction or out of range
/// for an integer one, `null` for a required one, … Such a term never matches. A membership
/// list is refused only when none of its values can match (one that cannot is merely dead),
/// and an integer and an integral number do match, as [`Filter`] compares them. The numbers
/// are read as the filter reads them (exactly, by the same parser).
pub fn never_matching(text: &str, schema: &Schema) -> Option<NeverMatches> {
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let doc = corecast_storage::json::parse(text.as_bytes()).ok()?;
    let terms = doc.as_object()?;
    for (c, v) in terms.iter() {
        let Some((_, col)) = schema.column(c) else {
            continue;
        };
        let values: Vec<&sonic_rs::Value> = match v.as_array() {
            Some(list) => list.iter().collect(),
            None => vec![v],
        };
        let fits = |value: &sonic_rs::Value| -> bool {
            if value.is_null() {
                return col.nullable();
            }
            match col.ty() {
                ColumnType::Boolean => value.is_boolean(),
                ColumnType::Int32 | ColumnType::Int64 => {
                    let (lo, hi) = if matches!(col.ty(), ColumnType::Int32) {
                        (i64::from(i32::MIN), i64::from(i32::MAX))
                    } else {
                        (i64::MIN, i64::MAX)
                    };
                    if let Some(i) = value.as_i64() {
                        (lo..=hi).contains(&i)
                    } else if value.as_u64().is_some() {
                        false // above i64::MAX
                    } else if let Some(x) = value.as_f64() {
                        x.fract() == 0.0 && x >= lo as f64 && x <= hi as f64
                    } else {
                        false
                    }
                }
                ColumnType::Float32 => value
                    .as_f64()
                    .is_some_and(|x| x.abs() <= f64::from(f32::MAX)),
                ColumnType::Float64 => value.is_number(),
                ColumnType::Utf8 | ColumnType::Binary { .. } => value.is_str(),
                _ => true,
            }
        };
        if values.is_empty() || values.iter().any(|v| fits(v)) {
            continue;
        }
        let shown = values
            .iter()
            .map(|v| sonic_rs::to_string(v).unwrap_or_default())
            .collect::<Vec<_>>();
        return Some(NeverMatches {
            value: if shown.len() == 1 {
                shown[0].clone()
            } else {
                format!("any of [{}]", shown.join(","))
            },
            column: c.to_string(),
            holds: match col.ty() {
                ColumnType::Int32 | ColumnType::Int64 => "integers",
                ColumnType::Float32 | ColumnType::Float64 => "numbers",
                ColumnType::Boolean => "booleans",
                _ => "strings",
            },
            nullable: col.nullable(),
        });
    }
    None
}
