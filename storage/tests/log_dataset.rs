//! The main job of the storage layer on real input: every row of the CME ES market-by-order
//! sample (`../shared/data/es-mbo.jsonl`, 68,792 rows) validated, appended in group commits, and
//! scanned back byte-identical to its canonical encoding, in offset order from 1.

use std::ops::ControlFlow;

use corecast_storage::json;
use corecast_storage::log::{AppendBatch, Buffer, BufferReader};
use corecast_storage::schema::{RowCodec, Schema};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

#[test]
fn es_mbo_appended_and_scanned_back_byte_identical() {
    let schema_text = std::fs::read_to_string(format!("{DATA}es-mbo.schema.json")).expect("schema");
    let codec = RowCodec::Schema(Schema::compile(&schema_text).expect("schema compiles"));
    let text = std::fs::read_to_string(format!("{DATA}es-mbo.jsonl")).expect("data");
    let mut encoded: Vec<Vec<u8>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let v = json::parse(line.as_bytes()).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        let mut out = Vec::new();
        codec
            .encode_row(&v, &mut out)
            .unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        encoded.push(out);
    }
    assert_eq!(encoded.len(), 68_792);

    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut buf = Buffer::open(dir.path(), Some(&schema_text)).expect("open");
        // group commits of 16 batches × 500 rows each
        for group in encoded.chunks(8_000) {
            let batches: Vec<AppendBatch<'_, Vec<u8>>> =
                group.chunks(500).map(AppendBatch::plain).collect();
            let outcomes = buf.append(&batches).expect("commit");
            assert_eq!(outcomes.len(), batches.len());
        }
        assert_eq!(buf.end_offset(), 68_793);
    }
    // reopen (as after a restart) and read everything back
    let reader = BufferReader::open(dir.path()).expect("reader");
    assert_eq!(reader.earliest().expect("earliest"), Some(1));
    let mut next = 1u64;
    loop {
        let mut seen = 0;
        reader
            .scan_with(next, u64::MAX, 10_000, |offset, _ts, payload| {
                assert_eq!(offset, next, "offsets contiguous");
                assert_eq!(
                    payload,
                    &encoded[(offset - 1) as usize][..],
                    "row at offset {offset} differs"
                );
                next += 1;
                seen += 1;
                ControlFlow::Continue(())
            })
            .expect("scan");
        if seen == 0 {
            break;
        }
    }
    assert_eq!(next, 68_793, "every row read back");
}
