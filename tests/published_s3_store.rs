//! The published tier's [`Store`] on S3, against a local S3 server (moto, see
//! `tests/published_s3/moto.rs`): put, get, a multipart `put_file` of a file over the part size,
//! delete, list, all under the location's prefix; and the errors for a missing bucket and for an
//! endpoint nothing answers name the URI and never a key, and come within a bounded time.
//!
//! Built with `--features s3`; without a moto venv (`$CORECAST_MOTO_VENV`) or
//! `$AWS_ENDPOINT_URL` the tests that need a server say so and pass, unless
//! `CORECAST_REQUIRE_S3` is set.
#[path = "published_s3/moto.rs"]
mod moto;

use std::time::{Duration, Instant};

use corecast_storage::published::{S3Options, Store, StoreError};
use moto::{Moto, ACCESS_KEY, REGION, SECRET_KEY};

fn options(endpoint: &str) -> S3Options {
    S3Options {
        endpoint: Some(endpoint.to_string()),
        region: Some(REGION.to_string()),
        access_key: Some(ACCESS_KEY.to_string()),
        secret_key: Some(SECRET_KEY.to_string()),
    }
}

/// The text of `e` names `uri` and no key.
fn names_uri_not_keys(e: &StoreError, uri: &str) {
    let text = e.to_string();
    let debug = format!("{e:?}");
    assert!(text.contains(uri), "{text:?} should name {uri}");
    for t in [&text, &debug] {
        assert!(
            !t.contains(SECRET_KEY) && !t.contains(ACCESS_KEY),
            "an error shows a key: {t}"
        );
    }
}

#[test]
fn put_get_put_file_delete_and_list_under_the_prefix() {
    let Some(moto) = Moto::start() else { return };
    let bucket = moto::bucket("store");
    moto.create_bucket(&bucket);
    let base = format!("s3://{bucket}/prod/trades");
    let store = Store::open(&format!("{base}/"), &options(&moto.endpoint)).expect("open");
    assert_eq!(store.base(), base);
    assert!(!store.is_local());
    assert_eq!(store.local_path("x"), None);
    assert_eq!(
        store.uri("metadata/a.json"),
        format!("{base}/metadata/a.json")
    );

    // nothing yet
    assert_eq!(store.get("metadata/version-hint.text").expect("get"), None);
    assert!(store.list("metadata").expect("list").is_empty());

    // put and get, and a put replaces
    store
        .put("metadata/version-hint.text", b"00001-a")
        .expect("put");
    assert_eq!(
        store
            .get("metadata/version-hint.text")
            .expect("get")
            .as_deref(),
        Some(&b"00001-a"[..])
    );
    store
        .put("metadata/version-hint.text", b"00002-b")
        .expect("put");
    assert_eq!(
        store
            .get("metadata/version-hint.text")
            .expect("get")
            .as_deref(),
        Some(&b"00002-b"[..])
    );

    // a small file goes up in one PUT, one over the 16 MiB part size as a multipart upload
    let tmp = tempfile::tempdir().expect("tmp");
    let small = tmp.path().join("small.parquet");
    std::fs::write(&small, b"PAR1 small PAR1").expect("write");
    store
        .put_file("data/1-10-a.parquet", &small)
        .expect("put_file small");
    let big = tmp.path().join("big.parquet");
    let big_len = (16 << 20) + (1 << 20) + 123;
    let content: Vec<u8> = (0..big_len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&big, &content).expect("write");
    let began = Instant::now();
    store
        .put_file("data/11-99-b.parquet", &big)
        .expect("put_file big");
    eprintln!("17 MiB multipart upload: {:?}", began.elapsed());
    let back = store
        .get("data/11-99-b.parquet")
        .expect("get")
        .expect("uploaded");
    assert_eq!(back.len(), content.len());
    assert!(
        back[..] == content[..],
        "the multipart upload's bytes differ"
    );
    assert_eq!(
        store.get("data/1-10-a.parquet").expect("get").as_deref(),
        Some(&b"PAR1 small PAR1"[..])
    );

    // the objects are where the layout says: under the location's prefix in the bucket
    let keys = moto.keys(&bucket, "prod/");
    assert_eq!(
        keys,
        [
            "prod/trades/data/1-10-a.parquet",
            "prod/trades/data/11-99-b.parquet",
            "prod/trades/metadata/version-hint.text",
        ]
    );
    // the multipart upload was one: the ETag of a multipart object ends with -<parts>
    let etag = moto.boto3(&format!(
        "print(s3.head_object(Bucket={bucket:?}, Key='prod/trades/data/11-99-b.parquet')['ETag'])"
    ));
    assert!(
        etag.trim().trim_matches('"').ends_with("-2"),
        "two parts: {etag}"
    );

    // list: keys relative to the location, sorted, recursive; a sibling prefix is not matched
    store.put("datax/other", b"x").expect("put");
    assert_eq!(
        store.list("data").expect("list"),
        ["data/1-10-a.parquet", "data/11-99-b.parquet"]
    );
    assert_eq!(store.list("").expect("list").len(), 4);

    // delete; deleting what is gone is no error
    store.delete("data/1-10-a.parquet").expect("delete");
    store.delete("data/1-10-a.parquet").expect("delete again");
    assert_eq!(store.get("data/1-10-a.parquet").expect("get"), None);
    assert_eq!(store.list("data").expect("list"), ["data/11-99-b.parquet"]);

    // a store on the bucket's root (no prefix) sees the same objects with the full keys
    let root = Store::open(&format!("s3://{bucket}"), &options(&moto.endpoint)).expect("open");
    assert_eq!(
        root.get("prod/trades/metadata/version-hint.text")
            .expect("get")
            .as_deref(),
        Some(&b"00002-b"[..])
    );
    assert_eq!(
        root.list("prod/trades/data").expect("list"),
        ["prod/trades/data/11-99-b.parquet"]
    );
    // the whole location: a sibling whose name it starts (a migrated stream's next log's
    // table, `trades-v2` beside `trades`) is not in it, so deleting a sealed log's table
    // leaves the next one's
    root.put("prod/trades-v2/data/1-5.parquet", b"x")
        .expect("put");
    let all = store.list("").expect("list");
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all.iter().all(|k| !k.contains("trades-v2")), "{all:?}");
}

#[test]
fn a_missing_bucket_is_an_error_naming_the_uri_not_the_keys() {
    let Some(moto) = Moto::start() else { return };
    let bucket = moto::bucket("missing");
    let base = format!("s3://{bucket}/prod");
    // opening needs no request: the error comes with the first one
    let store = Store::open(&base, &options(&moto.endpoint)).expect("open");
    let e = store
        .get("trades/metadata/version-hint.text")
        .expect_err("no bucket");
    names_uri_not_keys(&e, &format!("{base}/trades/metadata/version-hint.text"));
    // not "no such object" (object_store maps S3's 404 NoSuchBucket to NotFound): a table on a
    // wrong or deleted bucket must not look empty
    assert!(
        e.to_string().contains("GET") && e.to_string().contains("NoSuchBucket"),
        "the error names the request and the store's answer: {e}"
    );
    let e = store
        .delete("trades/metadata/version-hint.text")
        .expect_err("no bucket");
    names_uri_not_keys(&e, &format!("{base}/trades/metadata/version-hint.text"));
    let e = store
        .put("trades/metadata/version-hint.text", b"x")
        .expect_err("no bucket");
    names_uri_not_keys(&e, &format!("{base}/trades/metadata/version-hint.text"));
    assert!(
        e.to_string().contains("NoSuchBucket") || e.to_string().contains("404"),
        "the store's answer is kept: {e}"
    );
    let e = store.list("trades").expect_err("no bucket");
    names_uri_not_keys(&e, &format!("{base}/trades"));
}

#[test]
fn an_endpoint_nothing_answers_fails_fast_naming_the_uri_not_the_keys() {
    // no S3 server needed: a loopback port nothing listens on
    let dead = format!("http://127.0.0.1:{}", moto::free_port());
    let base = "s3://corecast-nowhere/prod";
    let store = Store::open(base, &options(&dead)).expect("open");
    let began = Instant::now();
    let e = store.get("trades/a").expect_err("nothing listens");
    let took = began.elapsed();
    names_uri_not_keys(&e, &format!("{base}/trades/a"));
    // the client's own retries are bounded (the publisher retries with its own back-off):
    // object_store's default would retry a refused connection for up to 3 minutes
    assert!(
        took < Duration::from_secs(20),
        "a dead endpoint took {took:?} to fail"
    );
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(file.path(), b"abc").expect("write");
    let e = store.put_file("trades/b", file.path()).expect_err("dead");
    names_uri_not_keys(&e, &format!("{base}/trades/b"));
    // an s3:// location with no bucket is refused at open, naming it
    let e = Store::open("s3:///prod", &options(&dead)).expect_err("no bucket");
    assert!(e.to_string().contains("s3:///prod"), "{e}");
}
