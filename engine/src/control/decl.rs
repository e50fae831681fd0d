//! A managed stream's declaration: the JSON body of `PUT /control/v1/streams/{name}`, checked
//! and resolved into a [`StreamConfig`] and its canonical JSON (every key present, defaults
//! filled in), which is what `registry.db` keeps and `GET` shows. Pure: no I/O.
//!
//! ```json
//! {"schema": {…JSON Schema…} | null,
//!  "durable": true, "exactly_once": false, "max_replay": 100000 | null,
//!  "limits": {"max_backlog": 8192, "max_inbound": 65536, "max_in_flight": 64,
//!             "max_message_bytes": 1048576},
//!  "seal_target_bytes": 67108864, "retention": "7d" | null, "published": "local",
//!  "published_grace_s": 600}
//! ```
//!
//! `schema` is required (`null`: schema-less); every other key is optional. A key outside this
//! list is refused (400), as is a value out of its range; a schema outside the supported
//! subset is 422 `unsupported_schema`.

use serde_json::{json, Map, Value};

use crate::config::{parse_published, parse_retention, EvictAfter, Published, StreamConfig};

/// Keys a declaration takes at the top level.
pub const KEYS: [&str; 9] = [
    "schema",
    "durable",
    "exactly_once",
    "max_replay",
    "limits",
    "seal_target_bytes",
    "retention",
    "published",
    "published_grace_s",
];

/// Keys `limits` takes.
pub const LIMIT_KEYS: [&str; 4] = [
    "max_backlog",
    "max_inbound",
    "max_in_flight",
    "max_message_bytes",
];

/// What is wrong with a declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclError {
    /// Not a JSON object, an unknown key, a value of the wrong type or out of range (400).
    Invalid(String),
    /// The schema leaves the supported subset (422 `unsupported_schema`).
    Schema(String),
}

/// A checked declaration.
#[derive(Debug, Clone)]
pub struct Declaration {
    /// What the stream is opened with.
    pub cfg: StreamConfig,
    /// The canonical form (compact JSON, every key).
    pub canonical: String,
}

fn int_in(v: &Value, key: &str, min: u64, max: u64) -> Result<u64, DeclError> {
    match v.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(DeclError::Invalid(format!(
            "{key} must be a whole number in {min}..={max}; got {v}"
        ))),
    }
}

fn bool_of(v: &Value, key: &str) -> Result<bool, DeclError> {
    v.as_bool()
        .ok_or_else(|| DeclError::Invalid(format!("{key} must be true or false; got {v}")))
}

fn unknown(obj: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), DeclError> {
    let unknown: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(DeclError::Invalid(format!(
        "unknown key(s) in {what}: {} (it takes: {})",
        unknown.join(", "),
        allowed.join(", ")
    )))
}

/// Checks the declaration of stream `name` in `body` (a JSON object whose keys are unique).
pub fn parse(name: &str, body: &Value) -> Result<Declaration, DeclError> {
    let obj = body.as_object().ok_or_else(|| {
        DeclError::Invalid("a declaration is a JSON object (see GET /control/v1)".into())
    })?;
    unknown(obj, &KEYS, "the declaration")?;
    let schema_json = match obj.get("schema") {
        None => {
            return Err(DeclError::Invalid(
                "schema is required: a JSON Schema object, or null for a schema-less stream".into(),
            ))
        }
        Some(Value::Null) => None,
        Some(s @ Value::Object(_)) => {
            let text = s.to_string();
            corecast_storage::schema::Schema::compile(&text)
                .map_err(|e| DeclError::Schema(format!("schema: {e}")))?;
            Some(text)
        }
        Some(other) => {
            return Err(DeclError::Invalid(format!(
                "schema must be a JSON Schema object or null; got {other}"
            )))
        }
    };
    let durable = match obj.get("durable") {
        None => true,
        Some(v) => bool_of(v, "durable")?,
    };
    let mut cfg = StreamConfig::with_defaults(name, schema_json, durable);
    if let Some(v) = obj.get("exactly_once") {
        cfg.exactly_once = bool_of(v, "exactly_once")?;
    }
    if cfg.exactly_once && !cfg.durable {
        return Err(DeclError::Invalid(
            "exactly_once needs a log: set durable to true or exactly_once to false".into(),
        ));
    }
    match obj.get("max_replay") {
        None => {}
        Some(Value::Null) => cfg.max_replay = None,
        Some(v) => cfg.max_replay = Some(int_in(v, "max_replay", 0, i64::MAX as u64)?),
    }
    if let Some(limits) = obj.get("limits") {
        let lim = limits.as_object().ok_or_else(|| {
            DeclError::Invalid(format!("limits must be a JSON object; got {limits}"))
        })?;
        unknown(lim, &LIMIT_KEYS, "limits")?;
        if let Some(v) = lim.get("max_backlog") {
            cfg.max_backlog = int_in(v, "limits.max_backlog", 1, 1 << 24)?;
        }
        if let Some(v) = lim.get("max_inbound") {
            cfg.max_inbound = int_in(v, "limits.max_inbound", 1, 1 << 24)? as usize;
        }
        if let Some(v) = lim.get("max_in_flight") {
            cfg.max_in_flight = int_in(v, "limits.max_in_flight", 1, 65_536)? as usize;
        }
        if let Some(v) = lim.get("max_message_bytes") {
            cfg.max_message_bytes = int_in(v, "limits.max_message_bytes", 1, 1 << 30)? as usize;
        }
    }
    let tier_key = |key: &str| -> Result<(), DeclError> {
        if durable {
            Ok(())
        } else {
            Err(DeclError::Invalid(format!(
                "{key} is set on a stream with durable false, which keeps no history"
            )))
        }
    };
    if let Some(v) = obj.get("seal_target_bytes") {
        tier_key("seal_target_bytes")?;
        cfg.seal_target_bytes = int_in(v, "seal_target_bytes", 4096, 1 << 34)?;
    }
    match obj.get("retention") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            tier_key("retention")?;
            cfg.retention = Some(
                parse_retention(text)
                    .map_err(|why| DeclError::Invalid(format!("retention: {why}")))?,
            );
        }
        Some(other) => {
            return Err(DeclError::Invalid(format!(
                "retention must be a period such as \"7d\", or null; got {other}"
            )))
        }
    }
    match obj.get("published") {
        None => {}
        Some(Value::String(text)) => {
            tier_key("published")?;
            // a directory of the server's file system is the operator's choice, made in the
            // TOML file: over HTTP it would let anyone holding control.mutate write anywhere the
            // broker may (another stream's log directory, /etc)
            if text.starts_with("file://") {
                return Err(DeclError::Invalid(
                    "published: a file:// location is chosen in the configuration file, not over \
                     the control API; use \"local\" (the stream's own directory), \"off\" or \
                     s3://bucket/prefix"
                        .into(),
                ));
            }
            cfg.published = parse_published(text)
                .map_err(|why| DeclError::Invalid(format!("published: {why}")))?;
        }
        Some(other) => {
            return Err(DeclError::Invalid(format!(
                "published must be \"local\", \"off\" or a location; got {other}"
            )))
        }
    }
    if let Some(v) = obj.get("published_grace_s") {
        tier_key("published_grace_s")?;
        cfg.published_grace =
            std::time::Duration::from_secs(int_in(v, "published_grace_s", 0, 30 * 86_400)?);
    }
    if cfg.published == Published::Off {
        cfg.evict_after = EvictAfter::Sealed;
    }
    let canonical = canonical(&cfg).to_string();
    Ok(Declaration { cfg, canonical })
}

/// The canonical declaration of `cfg` (also what `GET` shows for a stream of the TOML file).
pub fn canonical(cfg: &StreamConfig) -> Value {
    let schema = match &cfg.schema_json {
        // the stored text was produced by serde_json (or read from a schema file): it parses
        Some(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        None => Value::Null,
    };
    let published = match &cfg.published {
        Published::Off => "off".to_string(),
        Published::Local => "local".to_string(),
        Published::At(location) => location.clone(),
    };
    let retention = cfg.retention.map(|d| format!("{}s", d.as_secs()));
    let mut v = json!({
        "schema": schema,
        "durable": cfg.durable,
        "exactly_once": cfg.exactly_once,
        "max_replay": cfg.max_replay,
        "limits": {
            "max_backlog": cfg.max_backlog,
            "max_inbound": cfg.max_inbound,
            "max_in_flight": cfg.max_in_flight,
            "max_message_bytes": cfg.max_message_bytes,
        },
    });
    if cfg.durable {
        let obj = v.as_object_mut().expect("built as an object");
        obj.insert("seal_target_bytes".into(), json!(cfg.seal_target_bytes));
        obj.insert("retention".into(), json!(retention));
        obj.insert("published".into(), json!(published));
        // shown only when set: declarations stored before the key existed keep their text
        if cfg.published_grace != crate::config::DEFAULT_PUBLISHED_GRACE {
            obj.insert(
                "published_grace_s".into(),
                json!(cfg.published_grace.as_secs()),
            );
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(body: &str) -> Result<Declaration, DeclError> {
        parse("s", &serde_json::from_str(body).unwrap())
    }

    #[test]
    fn a_file_location_is_not_chosen_over_http() {
        for at in ["file:///etc", "file:///srv/history", "file://relative"] {
            let body = format!(r#"{{"schema":null,"published":"{at}"}}"#);
            match decl(&body) {
                Err(DeclError::Invalid(why)) => {
                    assert!(why.contains("configuration file"), "{why}")
                }
                other => panic!("{at}: {other:?}"),
            }
        }
    }

    #[test]
    fn defaults_fill_in_and_the_canonical_form_parses_to_itself() {
        let d = decl(r#"{"schema":null}"#).unwrap();
        assert!(d.cfg.durable);
        assert_eq!(d.cfg.max_backlog, 8192);
        let again = decl(&d.canonical).unwrap();
        assert_eq!(again.canonical, d.canonical);
        let d = decl(
            r#"{"schema":{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["b","a"]},"limits":{"max_backlog":10},"retention":"2h","published":"off"}"#,
        )
        .unwrap();
        assert_eq!(d.cfg.max_backlog, 10);
        assert_eq!(d.cfg.retention, Some(std::time::Duration::from_secs(7200)));
        // property order is kept: it is the column order
        assert!(d.canonical.find("\"b\"").unwrap() < d.canonical.find("\"a\"").unwrap());
        assert_eq!(decl(&d.canonical).unwrap().canonical, d.canonical);
    }

    #[test]
    fn the_grace_period_is_declared_and_shown_when_not_the_default() {
        let d = decl(r#"{"schema":null,"published_grace_s":5}"#).unwrap();
        assert_eq!(d.cfg.published_grace, std::time::Duration::from_secs(5));
        assert!(
            d.canonical.contains(r#""published_grace_s":5"#),
            "{}",
            d.canonical
        );
        assert_eq!(decl(&d.canonical).unwrap().canonical, d.canonical);
        // the default is not shown: a declaration stored before the key existed is unchanged
        let d = decl(r#"{"schema":null,"published_grace_s":600}"#).unwrap();
        assert!(
            !d.canonical.contains("published_grace_s"),
            "{}",
            d.canonical
        );
        assert_eq!(d.canonical, decl(r#"{"schema":null}"#).unwrap().canonical);
        for (body, needle) in [
            (
                r#"{"schema":null,"published_grace_s":-1}"#,
                "published_grace_s must be a whole number in 0..=2592000; got -1",
            ),
            (
                r#"{"schema":null,"published_grace_s":"10s"}"#,
                "published_grace_s must be a whole number",
            ),
            (
                r#"{"schema":null,"durable":false,"published_grace_s":5}"#,
                "published_grace_s is set on a stream with durable false",
            ),
        ] {
            match decl(body) {
                Err(DeclError::Invalid(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_declarations_name_what_is_wrong() {
        let invalid = |body: &str, needle: &str| match decl(body) {
            Err(DeclError::Invalid(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("{body}: {other:?}"),
        };
        invalid("[]", "JSON object");
        invalid("{}", "schema is required");
        invalid(
            r#"{"schema":null,"color":1}"#,
            "unknown key(s) in the declaration: color",
        );
        invalid(
            r#"{"schema":null,"limits":{"max_x":1}}"#,
            "unknown key(s) in limits: max_x",
        );
        invalid(
            r#"{"schema":null,"limits":{"max_backlog":0}}"#,
            "limits.max_backlog",
        );
        invalid(
            r#"{"schema":null,"durable":false,"exactly_once":true}"#,
            "needs a log",
        );
        invalid(
            r#"{"schema":null,"durable":false,"retention":"1d"}"#,
            "keeps no history",
        );
        invalid(r#"{"schema":null,"retention":"soon"}"#, "retention");
        invalid(r#"{"schema":"x"}"#, "schema must be");
        match decl(
            r#"{"schema":{"type":"object","properties":{"a":{"type":"integer","pattern":"x"}}}}"#,
        ) {
            Err(DeclError::Schema(m)) => assert!(m.starts_with("schema:"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
