//! Compiling a JSON Schema declaration (PROTOCOL.md §9) into a [`Schema`].
//!
//! In: the schema text a stream is configured with. Out: the compiled [`Schema`], or a
//! [`SchemaError`] naming the property path (`levels.items.px`) and the fault. Runs once, when a
//! stream is opened.
//!
//! The subset is closed: every keyword is either understood (`type`, `format`, `contentEncoding`,
//! `properties`, `required`, `additionalProperties`, `items`) or an annotation that is dropped
//! (`description`, `title`, `$comment`; `$schema` and `$id` at the top). Anything else (`enum`,
//! `minimum`, `default`, `oneOf`, …) is refused rather than silently not enforced.

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

use super::{BinaryEncoding, Column, ColumnType, Fields, Schema, LITELINK_OFFSET, STREAMCAST_TS};
use crate::json::{self, JsonError};

/// Keywords a declaration may use on any property; annotations among them are dropped.
const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "contentEncoding",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "description",
    "title",
    "$comment",
];

/// Keywords that only annotate; allowed on any property.
const ANNOTATIONS: &[&str] = &["description", "title", "$comment"];

/// Annotations allowed only on the top-level schema.
const TOP_ANNOTATIONS: &[&str] = &["$schema", "$id"];

/// A schema the compiler refuses: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{fault}", if .path.is_empty() { "schema: ".to_string() } else { format!("schema property '{}': ", .path) })]
pub struct SchemaError {
    /// The property path, e.g. `price`, `book.levels.items.px` (`items` and
    /// `additionalProperties` name the element of a list or map); `""` for the top level.
    pub path: String,
    /// What is wrong there.
    pub fault: SchemaFault,
}

/// What is wrong with one place in a schema declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaFault {
    /// The declaration is not strict JSON.
    #[error("not JSON: {0}")]
    NotJson(JsonError),
    /// A schema (or a property's schema) must be a JSON object.
    #[error("must be a JSON object, not {got}")]
    NotAnObject {
        /// What it was: `an array`, `a string`, ….
        got: &'static str,
    },
    /// The top level must be `"type": "object"` with `properties`.
    #[error(
        "the top level must be {{\"type\": \"object\", \"properties\": {{...}}}}, not type {got}"
    )]
    TopLevelNotObject {
        /// The declared type, as JSON.
        got: String,
    },
    /// An object (top level or struct) declares no properties.
    #[error("declares no properties (a row needs at least one column)")]
    NoProperties,
    /// No `type` keyword.
    #[error("declares no \"type\"")]
    MissingType,
    /// `type` is neither a string nor a list of strings.
    #[error("\"type\" must be a type name or [T, \"null\"], not {got}")]
    BadTypeValue {
        /// The value, as JSON.
        got: String,
    },
    /// A type name outside the subset.
    #[error(
        "unknown type \"{name}\" (expected boolean, integer, number, string, object or array)"
    )]
    UnknownType {
        /// The name given.
        name: String,
    },
    /// `"type": "null"` (or `["null"]`): a column that can only be null.
    #[error("type \"null\" alone is refused: declare [T, \"null\"] for a nullable column")]
    NullOnly,
    /// A union other than `[T, "null"]`.
    #[error("the union {types} is refused: only [T, \"null\"] is allowed")]
    Union {
        /// The type list, as JSON.
        types: String,
    },
    /// A keyword outside the subset (`enum`, `minimum`, `default`, `oneOf`, …).
    #[error("unknown keyword \"{keyword}\" (corecast enforces only type, format, contentEncoding, properties, required, additionalProperties and items)")]
    UnknownKeyword {
        /// The keyword.
        keyword: String,
    },
    /// A known keyword used with a type it does not apply to.
    #[error("keyword \"{keyword}\" does not apply to type \"{ty}\"")]
    KeywordNotForType {
        /// The keyword.
        keyword: String,
        /// The declared base type.
        ty: &'static str,
    },
    /// A `format` outside the subset for its type (`int16`, `date-time`, `byte`, …).
    #[error("format {format} is refused for type \"{ty}\" (allowed: {allowed})")]
    BadFormat {
        /// The base type.
        ty: &'static str,
        /// The format value, as JSON.
        format: String,
        /// The formats the type allows.
        allowed: &'static str,
    },
    /// A `contentEncoding` other than `base16` or `base64`.
    #[error("contentEncoding {encoding} is refused (allowed: \"base16\", \"base64\")")]
    BadEncoding {
        /// The value, as JSON.
        encoding: String,
    },
    /// An object with both `properties` and an `additionalProperties` schema.
    #[error("declares both \"properties\" (a struct) and an \"additionalProperties\" schema (a map); choose one")]
    StructAndMap,
    /// An object with neither `properties` nor an `additionalProperties` schema.
    #[error(
        "an object needs \"properties\" (a struct) or an \"additionalProperties\" schema (a map)"
    )]
    ObjectWithoutShape,
    /// `additionalProperties` that is neither `false` nor a schema.
    #[error("\"additionalProperties\" must be false or a schema, not {got}")]
    BadAdditionalProperties {
        /// The value, as JSON.
        got: String,
    },
    /// An array without an `items` schema.
    #[error("an array needs an \"items\" schema")]
    ArrayWithoutItems,
    /// List items or map values declared nullable; Arrow lists and maps here hold non-null values.
    #[error("a list's items and a map's values cannot be null: declare a plain type")]
    NullableElement,
    /// `properties` is not an object.
    #[error("\"properties\" must be an object mapping names to schemas")]
    BadProperties,
    /// `required` is not a list of strings.
    #[error("\"required\" must be a list of property names")]
    BadRequired,
    /// `required` names a property that is not declared.
    #[error("\"required\" names '{name}', which is not among the properties")]
    RequiredUnknown {
        /// The name.
        name: String,
    },
    /// `required` names a property twice.
    #[error("\"required\" names '{name}' twice")]
    RequiredTwice {
        /// The name.
        name: String,
    },
    /// A property with an empty name.
    #[error("a property name cannot be empty")]
    EmptyName,
    /// `streamcast_ts` or `litelink_offset` declared as a column.
    #[error("'{name}' is reserved: the server supplies it")]
    Reserved {
        /// The reserved name.
        name: String,
    },
    /// An optional property whose type is not nullable.
    #[error("'{name}' is optional but its type \"{ty}\" is not nullable: add it to \"required\", or declare \"type\": [\"{ty}\", \"null\"]")]
    OptionalNotNullable {
        /// The property.
        name: String,
        /// Its base type.
        ty: &'static str,
    },
    /// `format: bytesN` with N not a positive integer that fits Arrow's fixed size (i32).
    #[error("format {format} needs a byte count from 1 to 2147483647")]
    BadFixedSize {
        /// The format value, as JSON.
        format: String,
    },
}

/// Parses and compiles a declaration.
pub(super) fn compile(text: &str) -> Result<Schema, SchemaError> {
    let value = json::parse_unique(text.as_bytes()).map_err(|e| SchemaError {
        path: String::new(),
        fault: SchemaFault::NotJson(e),
    })?;
    compile_value(&value)
}

/// Compiles a parsed declaration.
pub(super) fn compile_value(value: &Value) -> Result<Schema, SchemaError> {
    let top = || Path::Root;
    let obj = value
        .as_object()
        .ok_or_else(|| top().err(SchemaFault::NotAnObject { got: kind(value) }))?;
    for (k, _) in obj.iter() {
        if !KEYWORDS.contains(&k) && !TOP_ANNOTATIONS.contains(&k) {
            return Err(top().err(SchemaFault::UnknownKeyword {
                keyword: k.to_string(),
            }));
        }
    }
    let type_value = obj
        .get(&"type")
        .ok_or_else(|| top().err(SchemaFault::MissingType))?;
    if type_value.as_str() != Some("object") {
        return Err(top().err(SchemaFault::TopLevelNotObject {
            got: to_json(type_value),
        }));
    }
    for k in ["items", "format", "contentEncoding"] {
        if obj.contains_key(&k) {
            return Err(top().err(SchemaFault::KeywordNotForType {
                keyword: k.to_string(),
                ty: "object",
            }));
        }
    }
    match obj.get(&"additionalProperties") {
        None => {}
        Some(v) if v.as_bool() == Some(false) => {}
        Some(v) if v.is_object() => return Err(top().err(SchemaFault::StructAndMap)),
        Some(v) => return Err(top().err(SchemaFault::BadAdditionalProperties { got: to_json(v) })),
    }
    let props = obj
        .get(&"properties")
        .ok_or_else(|| top().err(SchemaFault::NoProperties))?;
    let fields = compile_fields(props, obj.get(&"required"), &Path::Root, true)?;
    Ok(Schema { fields })
}

/// Where the compiler is, for error paths; built on the stack, rendered only on error.
enum Path<'a> {
    Root,
    Child(&'a Path<'a>, &'a str),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Child(Path::Root, name) => (*name).to_string(),
            Path::Child(parent, name) => format!("{}.{name}", parent.render()),
        }
    }

    fn err(&self, fault: SchemaFault) -> SchemaError {
        SchemaError {
            path: self.render(),
            fault,
        }
    }
}

/// Compiles `properties` (+ `required`) of the top level or of a struct.
fn compile_fields(
    props: &Value,
    required: Option<&Value>,
    at: &Path<'_>,
    top: bool,
) -> Result<Fields, SchemaError> {
    let props = props
        .as_object()
        .ok_or_else(|| at.err(SchemaFault::BadProperties))?;
    if props.is_empty() {
        return Err(at.err(SchemaFault::NoProperties));
    }
    let mut required_names: Vec<&str> = Vec::new();
    if let Some(req) = required {
        let list = req
            .as_array()
            .ok_or_else(|| at.err(SchemaFault::BadRequired))?;
        for item in list.iter() {
            let name = item
                .as_str()
                .ok_or_else(|| at.err(SchemaFault::BadRequired))?;
            if required_names.contains(&name) {
                return Err(at.err(SchemaFault::RequiredTwice {
                    name: name.to_string(),
                }));
            }
            if !props.contains_key(&name) {
                return Err(at.err(SchemaFault::RequiredUnknown {
                    name: name.to_string(),
                }));
            }
            required_names.push(name);
        }
    }
    let mut columns = Vec::with_capacity(props.len());
    for (name, sub) in props.iter() {
        let here = Path::Child(at, name);
        if name.is_empty() {
            return Err(here.err(SchemaFault::EmptyName));
        }
        if top && (name == STREAMCAST_TS || name == LITELINK_OFFSET) {
            return Err(here.err(SchemaFault::Reserved {
                name: name.to_string(),
            }));
        }
        let (ty, nullable) = compile_node(sub, &here)?;
        if !nullable && !required_names.contains(&name) {
            return Err(here.err(SchemaFault::OptionalNotNullable {
                name: name.to_string(),
                ty: ty.json_type(),
            }));
        }
        columns.push(Column::new(name.to_string(), ty, nullable));
    }
    let extra: &[&str] = if top { &[STREAMCAST_TS] } else { &[] };
    Ok(Fields::new(columns, extra))
}

/// Compiles one property's schema to its type and nullability.
fn compile_node(value: &Value, at: &Path<'_>) -> Result<(ColumnType, bool), SchemaError> {
    let obj = value
        .as_object()
        .ok_or_else(|| at.err(SchemaFault::NotAnObject { got: kind(value) }))?;
    for (k, _) in obj.iter() {
        if !KEYWORDS.contains(&k) {
            return Err(at.err(SchemaFault::UnknownKeyword {
                keyword: k.to_string(),
            }));
        }
    }
    let (base, nullable) = type_of(obj.get(&"type"), at)?;
    let only = |allowed: &[&str]| -> Result<(), SchemaError> {
        for (k, _) in obj.iter() {
            if k != "type" && !ANNOTATIONS.contains(&k) && !allowed.contains(&k) {
                return Err(at.err(SchemaFault::KeywordNotForType {
                    keyword: k.to_string(),
                    ty: base,
                }));
            }
        }
        Ok(())
    };
    let format = obj.get(&"format");
    let ty = match base {
        "boolean" => {
            only(&[])?;
            ColumnType::Boolean
        }
        "integer" => {
            only(&["format"])?;
            match format.map(|f| f.as_str()) {
                None | Some(Some("int64")) => ColumnType::Int64,
                Some(Some("int32")) => ColumnType::Int32,
                Some(_) => return Err(at.err(bad_format(base, format, "\"int32\", \"int64\""))),
            }
        }
        "number" => {
            only(&["format"])?;
            match format.map(|f| f.as_str()) {
                None | Some(Some("double")) => ColumnType::Float64,
                Some(Some("float")) => ColumnType::Float32,
                Some(_) => return Err(at.err(bad_format(base, format, "\"float\", \"double\""))),
            }
        }
        "string" => {
            only(&["format", "contentEncoding"])?;
            compile_string(obj.get(&"contentEncoding"), format, at)?
        }
        "object" => {
            only(&["properties", "required", "additionalProperties"])?;
            compile_object(obj, at)?
        }
        "array" => {
            only(&["items"])?;
            let items = obj
                .get(&"items")
                .ok_or_else(|| at.err(SchemaFault::ArrayWithoutItems))?;
            let here = Path::Child(at, "items");
            let (item, item_nullable) = compile_node(items, &here)?;
            if item_nullable {
                return Err(here.err(SchemaFault::NullableElement));
            }
            ColumnType::List(Box::new(item))
        }
        _ => {
            return Err(at.err(SchemaFault::UnknownType {
                name: base.to_string(),
            }))
        }
    };
    Ok((ty, nullable))
}

fn bad_format(ty: &'static str, format: Option<&Value>, allowed: &'static str) -> SchemaFault {
    SchemaFault::BadFormat {
        ty,
        format: format.map(to_json).unwrap_or_default(),
        allowed,
    }
}

/// `string`, with or without `contentEncoding` (+ `format: bytesN`).
fn compile_string(
    encoding: Option<&Value>,
    format: Option<&Value>,
    at: &Path<'_>,
) -> Result<ColumnType, SchemaError> {
    let Some(encoding) = encoding else {
        return match format {
            None => Ok(ColumnType::Utf8),
            Some(_) => Err(at.err(bad_format(
                "string",
                format,
                "none; \"bytesN\" with contentEncoding",
            ))),
        };
    };
    let encoding = match encoding.as_str() {
        Some("base16") => BinaryEncoding::Base16,
        Some("base64") => BinaryEncoding::Base64,
        _ => {
            return Err(at.err(SchemaFault::BadEncoding {
                encoding: to_json(encoding),
            }))
        }
    };
    let fixed_len = match format {
        None => None,
        Some(f) => {
            let Some(n) = f.as_str().and_then(|s| s.strip_prefix("bytes")) else {
                return Err(at.err(bad_format("string", format, "\"bytesN\"")));
            };
            let valid =
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
            match n.parse::<i32>() {
                Ok(len) if valid && len > 0 => Some(len),
                _ => return Err(at.err(SchemaFault::BadFixedSize { format: to_json(f) })),
            }
        }
    };
    Ok(ColumnType::Binary {
        encoding,
        fixed_len,
    })
}

/// `object`: a struct (`properties`) or a map (`additionalProperties: {schema}`).
fn compile_object(obj: &sonic_rs::Object, at: &Path<'_>) -> Result<ColumnType, SchemaError> {
    let props = obj.get(&"properties");
    let additional = obj.get(&"additionalProperties");
    let map_values = match additional {
        None => None,
        Some(v) if v.as_bool() == Some(false) => None,
        Some(v) if v.is_object() => Some(v),
        Some(v) => {
            return Err(at.err(SchemaFault::BadAdditionalProperties { got: to_json(v) }));
        }
    };
    match (props, map_values) {
        (Some(_), Some(_)) => Err(at.err(SchemaFault::StructAndMap)),
        (Some(props), None) => Ok(ColumnType::Struct(compile_fields(
            props,
            obj.get(&"required"),
            at,
            false,
        )?)),
        (None, Some(values)) => {
            if obj.contains_key(&"required") {
                return Err(at.err(SchemaFault::KeywordNotForType {
                    keyword: "required".to_string(),
                    ty: "object",
                }));
            }
            let here = Path::Child(at, "additionalProperties");
            let (value_ty, value_nullable) = compile_node(values, &here)?;
            if value_nullable {
                return Err(here.err(SchemaFault::NullableElement));
            }
            Ok(ColumnType::Map(Box::new(value_ty)))
        }
        (None, None) => Err(at.err(SchemaFault::ObjectWithoutShape)),
    }
}

/// Reads `type`: a name, or a list of one name, or `[T, "null"]` in either order.
fn type_of(value: Option<&Value>, at: &Path<'_>) -> Result<(&'static str, bool), SchemaError> {
    let value = value.ok_or_else(|| at.err(SchemaFault::MissingType))?;
    if let Some(name) = value.as_str() {
        return base_type(name, at).map(|t| (t, false));
    }
    let Some(list) = value.as_array() else {
        return Err(at.err(SchemaFault::BadTypeValue {
            got: to_json(value),
        }));
    };
    let mut names = Vec::with_capacity(list.len());
    for item in list.iter() {
        match item.as_str() {
            Some(s) => names.push(s),
            None => {
                return Err(at.err(SchemaFault::BadTypeValue {
                    got: to_json(value),
                }))
            }
        }
    }
    let union = || {
        at.err(SchemaFault::Union {
            types: to_json(value),
        })
    };
    match names.as_slice() {
        [] => Err(at.err(SchemaFault::BadTypeValue {
            got: to_json(value),
        })),
        [one] => base_type(one, at).map(|t| (t, false)),
        ["null", "null"] => Err(union()),
        [t, "null"] | ["null", t] => base_type(t, at).map(|t| (t, true)),
        _ => Err(union()),
    }
}

fn base_type(name: &str, at: &Path<'_>) -> Result<&'static str, SchemaError> {
    Ok(match name {
        "boolean" => "boolean",
        "integer" => "integer",
        "number" => "number",
        "string" => "string",
        "object" => "object",
        "array" => "array",
        "null" => return Err(at.err(SchemaFault::NullOnly)),
        other => {
            return Err(at.err(SchemaFault::UnknownType {
                name: other.to_string(),
            }))
        }
    })
}

/// A value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    super::JsonKind::of(v).described()
}

/// Compact JSON of a (small) value, for messages.
fn to_json(v: &Value) -> String {
    sonic_rs::to_string(v).unwrap_or_default()
}
