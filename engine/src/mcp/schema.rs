//! Checks a tool's arguments against the JSON Schema its `tools/list` entry publishes.
//!
//! In: the tool's `inputSchema` (the very value `tools/list` sends) and the call's `arguments`.
//! Out: `Ok(())`, or the first [`Invalid`] argument. Pure (no I/O). Only the keywords our own
//! schemas use are understood — `type` (a name or a list of names), `properties`, `required`,
//! `additionalProperties: false`, `minimum`/`maximum`, `minLength`/`maxLength`, `enum` — and a
//! schema with any other keyword is a bug here, caught by the unit test that walks every tool.

use serde_json::Value;

/// The keywords [`check`] understands; the unit tests refuse a tool schema with any other.
pub const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "enum",
    "default",
    "description",
];

/// Why an argument is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Invalid {
    /// `arguments` is not an object.
    NotAnObject,
    /// A required argument is absent.
    Missing {
        /// Its name.
        argument: String,
    },
    /// An argument the schema does not declare (`additionalProperties: false`).
    Unknown {
        /// Its name.
        argument: String,
        /// The ones declared.
        known: Vec<String>,
    },
    /// Not of the declared type.
    WrongType {
        /// Its name.
        argument: String,
        /// The type(s) declared, e.g. `integer` or `string or integer`.
        expected: String,
    },
    /// A number over its `maximum`: a bound, never clamped.
    OverMaximum {
        /// Its name.
        argument: String,
        /// The value sent.
        value: f64,
        /// The bound.
        maximum: f64,
    },
    /// A number under its `minimum`.
    UnderMinimum {
        /// Its name.
        argument: String,
        /// The value sent.
        value: f64,
        /// The bound.
        minimum: f64,
    },
    /// A string outside `minLength..=maxLength` characters.
    Length {
        /// Its name.
        argument: String,
        /// Characters sent.
        chars: usize,
        /// The bounds.
        min: u64,
        /// The bounds.
        max: u64,
    },
    /// Not one of the `enum` values.
    NotInEnum {
        /// Its name.
        argument: String,
        /// The values allowed.
        allowed: Vec<Value>,
    },
}

impl Invalid {
    /// The argument refused, if one.
    pub fn argument(&self) -> Option<&str> {
        match self {
            Invalid::NotAnObject => None,
            Invalid::Missing { argument }
            | Invalid::Unknown { argument, .. }
            | Invalid::WrongType { argument, .. }
            | Invalid::OverMaximum { argument, .. }
            | Invalid::UnderMinimum { argument, .. }
            | Invalid::Length { argument, .. }
            | Invalid::NotInEnum { argument, .. } => Some(argument),
        }
    }

    /// The error code, as the pull API names its refusals: a bound passed is
    /// `resource_limit_exceeded`, anything else `invalid_argument`.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::OverMaximum { .. } => "resource_limit_exceeded",
            Invalid::NotAnObject
            | Invalid::Missing { .. }
            | Invalid::Unknown { .. }
            | Invalid::WrongType { .. }
            | Invalid::UnderMinimum { .. }
            | Invalid::Length { .. }
            | Invalid::NotInEnum { .. } => "invalid_argument",
        }
    }
}

fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::NotAnObject => write!(f, "arguments must be a JSON object"),
            Invalid::Missing { argument } => write!(f, "{argument}: required, missing"),
            Invalid::Unknown { argument, known } => write!(
                f,
                "{argument}: not an argument of this tool (it takes {})",
                known.join(", ")
            ),
            Invalid::WrongType { argument, expected } => {
                write!(f, "{argument}: must be {expected}")
            }
            Invalid::OverMaximum {
                argument,
                value,
                maximum,
            } => write!(
                f,
                "{argument}: {} is over the maximum of {} (a bound, not clamped: ask for less)",
                num(*value),
                num(*maximum)
            ),
            Invalid::UnderMinimum {
                argument,
                value,
                minimum,
            } => write!(
                f,
                "{argument}: {} is under the minimum of {}",
                num(*value),
                num(*minimum)
            ),
            Invalid::Length {
                argument,
                chars,
                min,
                max,
            } => write!(f, "{argument}: {chars} characters, must be {min}..={max}"),
            Invalid::NotInEnum { argument, allowed } => {
                let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
                write!(f, "{argument}: must be one of {}", list.join(", "))
            }
        }
    }
}

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|n| n.fract() == 0.0),
        "number" => v.is_number(),
        "object" => v.is_object(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// Checks `args` (absent: `{}`) against the object schema `schema`.
pub fn check(schema: &Value, args: Option<&Value>) -> Result<(), Invalid> {
    let empty = serde_json::Map::new();
    let args = match args {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(Invalid::NotAnObject),
    };
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !args.contains_key(r) {
                return Err(Invalid::Missing {
                    argument: r.to_string(),
                });
            }
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in args {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            if closed {
                return Err(Invalid::Unknown {
                    argument: name.clone(),
                    known: props.map_or_else(Vec::new, |p| p.keys().cloned().collect()),
                });
            }
            continue;
        };
        check_value(name, prop, value)?;
    }
    Ok(())
}

fn check_value(name: &str, prop: &Value, v: &Value) -> Result<(), Invalid> {
    let types: Vec<&str> = match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
        return Err(Invalid::WrongType {
            argument: name.to_string(),
            expected: types.join(" or "),
        });
    }
    if let Some(allowed) = prop.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            return Err(Invalid::NotInEnum {
                argument: name.to_string(),
                allowed: allowed.clone(),
            });
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(max) = prop.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(Invalid::OverMaximum {
                    argument: name.to_string(),
                    value: n,
                    maximum: max,
                });
            }
        }
        if let Some(min) = prop.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(Invalid::UnderMinimum {
                    argument: name.to_string(),
                    value: n,
                    minimum: min,
                });
            }
        }
    }
    if let Some(s) = v.as_str() {
        let chars = s.chars().count();
        let min = prop.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        let max = prop
            .get("maxLength")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        if (chars as u64) < min || chars as u64 > max {
            return Err(Invalid::Length {
                argument: name.to_string(),
                chars,
                min,
                max,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "stream": {"type": "string", "minLength": 1, "maxLength": 8},
                "limit": {"type": "integer", "minimum": 0, "maximum": 500},
                "from": {"type": ["string", "integer"]},
                "side": {"type": "string", "enum": ["buy", "sell"]}
            },
            "required": ["stream"],
            "additionalProperties": false
        })
    }

    #[test]
    fn refusals_name_the_argument() {
        let s = schema();
        assert_eq!(check(&s, Some(&json!({"stream": "t"}))), Ok(()));
        assert_eq!(
            check(&s, Some(&json!({"stream": "t", "limit": 5, "from": 3}))),
            Ok(())
        );
        let e = check(&s, Some(&json!({}))).unwrap_err();
        assert_eq!(e.argument(), Some("stream"));
        let e = check(&s, Some(&json!({"stream": "t", "limit": 10000}))).unwrap_err();
        assert_eq!(e.code(), "resource_limit_exceeded");
        assert_eq!(
            e.to_string(),
            "limit: 10000 is over the maximum of 500 (a bound, not clamped: ask for less)"
        );
        let e = check(&s, Some(&json!({"stream": "t", "limit": "5"}))).unwrap_err();
        assert_eq!(e.to_string(), "limit: must be integer");
        let e = check(&s, Some(&json!({"stream": "t", "limit": 1.5}))).unwrap_err();
        assert_eq!(e.argument(), Some("limit"));
        let e = check(&s, Some(&json!({"stream": "t", "limit": -1}))).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        let e = check(&s, Some(&json!({"stream": "t", "from": true}))).unwrap_err();
        assert_eq!(e.to_string(), "from: must be string or integer");
        let e = check(&s, Some(&json!({"stream": "t", "nope": 1}))).unwrap_err();
        assert_eq!(e.argument(), Some("nope"));
        let e = check(&s, Some(&json!({"stream": ""}))).unwrap_err();
        assert_eq!(e.argument(), Some("stream"));
        let e = check(&s, Some(&json!({"stream": "t", "side": "x"}))).unwrap_err();
        assert_eq!(e.to_string(), "side: must be one of \"buy\", \"sell\"");
        assert_eq!(check(&s, Some(&json!([1]))), Err(Invalid::NotAnObject));
        assert!(check(&s, None).is_err());
    }
}
