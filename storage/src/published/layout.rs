//! Where one stream's published files go, and its streamcast stream metadata (PUBLISHED.md §1,
//! §3.1, §3.2).
//!
//! In: the stream's directory and name, and the configured location (none: the local default).
//! Out: a [`Layout`] with the two stores (the stream's home, for the stream metadata, and its
//! table) and the URIs the greeting names.

use std::path::Path;

use serde_json::{json, Value};

use super::store::{S3Options, Store, StoreError};

/// The directory inside a stream's directory that holds its table by default.
pub const LOCAL_PUBLISHED_DIR: &str = "published";

/// One stream's published locations.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The stream's name: its stream metadata files are named for it.
    pub stream: String,
    /// The name of the log being published (`live_log.name`): the stream's name for its first
    /// log, `<stream>-v<N>` for the N-th after migrations. Its table is `<published>/<log>`.
    pub log: String,
    /// The stream's home: `<stream>.metadata/…` and `<stream>.metadata.json` live here.
    pub home: Store,
    /// `live_log.published`: the prefix under which the table `<stream>/` lives.
    pub published: String,
    /// The table: `<published>/<stream>`.
    pub table: Store,
}

impl Layout {
    /// The default: home `<stream_dir>`, table `<stream_dir>/published/<stream>` (local).
    pub fn local(stream_dir: &Path, stream: &str) -> Result<Layout, StoreError> {
        let dir = std::path::absolute(stream_dir).map_err(|source| StoreError::Io {
            op: "resolve",
            uri: stream_dir.display().to_string(),
            source,
        })?;
        let home_uri = format!("file://{}", dir.display());
        let published = format!("{home_uri}/{LOCAL_PUBLISHED_DIR}");
        Ok(Layout {
            stream: stream.to_string(),
            log: stream.to_string(),
            home: Store::open(&home_uri, &S3Options::default())?,
            table: Store::open(&format!("{published}/{stream}"), &S3Options::default())?,
            published,
        })
    }

    /// A configured location `file:///dir` or `s3://bucket/prefix`: home and `published` are
    /// `<location>/<stream>`, the table `<location>/<stream>/<stream>`.
    pub fn at(location: &str, stream: &str, s3: &S3Options) -> Result<Layout, StoreError> {
        let base = location.trim_end_matches('/');
        let published = format!("{base}/{stream}");
        Ok(Layout {
            stream: stream.to_string(),
            log: stream.to_string(),
            home: Store::open(&published, s3)?,
            table: Store::open(&format!("{published}/{stream}"), s3)?,
            published,
        })
    }

    /// The same stream's layout for its log `log`, kept in `log_dir` (a migrated stream's next
    /// log): the home does not move; the table is `<published>/<log>`, where `published` is the
    /// stream's configured location, or `<log_dir>/published` for the local default (the
    /// previous log's default prefix lives inside that log's directory, as the reference lays
    /// it out).
    pub fn for_log(
        &self,
        log: &str,
        log_dir: Option<&Path>,
        s3: &S3Options,
    ) -> Result<Layout, StoreError> {
        let published = match log_dir {
            Some(d) => {
                let dir = std::path::absolute(d).map_err(|source| StoreError::Io {
                    op: "resolve",
                    uri: d.display().to_string(),
                    source,
                })?;
                format!("file://{}/{LOCAL_PUBLISHED_DIR}", dir.display())
            }
            None => self.published.clone(),
        };
        Ok(Layout {
            stream: self.stream.clone(),
            log: log.to_string(),
            home: self.home.clone(),
            table: Store::open(&format!("{published}/{log}"), s3)?,
            published,
        })
    }

    /// The greeting's `metadata`: the plain copy of the stream metadata.
    pub fn metadata_uri(&self) -> String {
        self.home.uri(&format!("{}.metadata.json", self.stream))
    }

    /// The greeting's `metadata_hint`: the stream metadata's hint.
    pub fn metadata_hint_uri(&self) -> String {
        self.home
            .uri(&format!("{}.metadata/version-hint.text", self.stream))
    }

    /// The key (in [`Layout::home`]) of the stream metadata directory.
    pub fn stream_metadata_dir(&self) -> String {
        format!("{}.metadata", self.stream)
    }
}

/// The system columns' JSON Schema (`live_log.system_schema`).
pub fn system_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"streamcast_ts": {"type": "integer", "format": "int64"}},
        "required": ["streamcast_ts"],
    })
}

/// The stream metadata document (PUBLISHED.md §3.2), full form: version 2, or 3 with its
/// `retirement` once the stream is retired. `sealed_logs` are the logs earlier migrations
/// sealed, oldest first, each in its final form (the `live_log` keys plus `end_offset` and
/// `end_ts`).
pub fn stream_metadata(
    layout: &Layout,
    stream_id: &str,
    schema_json: Option<&str>,
    start_offset: u64,
    start_ts: Option<i64>,
    retirement: Option<&super::table::Retirement>,
    sealed_logs: &[Value],
) -> Value {
    let schema = schema_json
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .unwrap_or_else(|| json!({}));
    let mut live = json!({
        "name": layout.log,
        "published": layout.published,
        "start_offset": start_offset,
        "schema": schema,
        "system_schema": system_schema(),
        "sort_by": [],
    });
    if let Some(ts) = start_ts {
        live["start_ts"] = json!(ts);
    }
    let mut doc = json!({
        "streamcast_metadata": 2,
        "stream": layout.stream,
        "stream_id": stream_id,
        "sealed_logs": sealed_logs,
        "live_log": live,
        "manifest": null,
    });
    if let Some(r) = retirement {
        doc["streamcast_metadata"] = json!(3);
        doc["retirement"] = json!({
            "at": r.at_us,
            "end_offset": r.end_offset,
            "sort_by": [],
            "start_ts": null,
            "end_ts": null,
        });
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_layout_matches_the_reference() {
        let dir = tempfile::tempdir().expect("tmp");
        let l = Layout::local(&dir.path().join("trades"), "trades").expect("layout");
        let d = dir.path().join("trades").display().to_string();
        assert_eq!(l.published, format!("file://{d}/published"));
        assert_eq!(l.table.base(), format!("file://{d}/published/trades"));
        assert_eq!(l.metadata_uri(), format!("file://{d}/trades.metadata.json"));
        assert_eq!(
            l.metadata_hint_uri(),
            format!("file://{d}/trades.metadata/version-hint.text")
        );
        let m = stream_metadata(&l, "id-1", Some(r#"{"type":"object"}"#), 1, None, None, &[]);
        assert_eq!(m["live_log"]["published"], json!(l.published));
        assert_eq!(m["live_log"]["schema"], json!({"type":"object"}));
        assert_eq!(m["streamcast_metadata"], json!(2));
        assert!(m.get("retirement").is_none());
        let r = crate::published::Retirement {
            at_us: 1_796_081_823_413_501,
            end_offset: 9,
        };
        let m = stream_metadata(&l, "id-1", None, 1, None, Some(&r), &[]);
        assert_eq!(m["streamcast_metadata"], json!(3));
        assert_eq!(m["retirement"]["at"], json!(1_796_081_823_413_501i64));
        assert_eq!(m["retirement"]["end_offset"], json!(9));
    }

    #[test]
    fn configured_location_nests_home_and_table() {
        let dir = tempfile::tempdir().expect("tmp");
        let base = format!("file://{}", dir.path().display());
        let l = Layout::at(&format!("{base}/"), "btc", &S3Options::default()).expect("layout");
        assert_eq!(l.published, format!("{base}/btc"));
        assert_eq!(l.table.base(), format!("{base}/btc/btc"));
        assert_eq!(l.metadata_uri(), format!("{base}/btc/btc.metadata.json"));
    }
}
