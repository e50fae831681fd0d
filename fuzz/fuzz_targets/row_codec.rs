//! The strict JSON front door (`storage/src/json.rs`), the schema compiler
//! (`storage/src/schema/compile.rs`) and the schema-driven row validator / canonical encoder
//! (`RowCodec::encode_row`, `storage/src/schema/validate.rs` and `encode.rs`).
//!
//! Input: byte 0 picks the codec (0 schema-less, 1 the kitchen-sink test schema, 2.. the shared
//! data sets' schemas); 0xFF makes the input `0xFF schema NUL row`, compiling the fuzzed schema.
//! Checked:
//!
//! - a refused row leaves the output buffer as it was; an accepted row appends to it;
//! - the canonical encoding is strict JSON with no duplicate key and no raw control byte, and
//!   it is stable: it validates again, to exactly the same bytes (`encode(decode(x)) == x`);
//! - for a compiled schema, `published()` is JSON and `to_arrow()` does not fail;
//! - for one input in eight, the canonical row sealed into a Parquet segment
//!   (`storage/src/tier/`) reads back byte-identical.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use corecast_storage::json;
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{write_segment, ReadOptions, SealOptions, SegmentReader};
use libfuzzer_sys::fuzz_target;

fn codecs() -> &'static [RowCodec] {
    static CODECS: OnceLock<Vec<RowCodec>> = OnceLock::new();
    CODECS.get_or_init(corecast_fuzz::codecs)
}

fuzz_target!(init: corecast_fuzz::seeds::init("row_codec"), |data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let owned;
    let (codec, row) = if sel == 0xFF {
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            return;
        };
        let Ok(text) = std::str::from_utf8(&rest[..nul]) else {
            return;
        };
        let Ok(schema) = Schema::compile(text) else {
            return;
        };
        json::parse(schema.published().as_bytes()).expect("published schema is JSON");
        let _ = schema.to_arrow();
        let _ = schema.declared_list();
        owned = RowCodec::Schema(schema);
        (&owned, &rest[nul + 1..])
    } else {
        let codecs = codecs();
        (&codecs[sel as usize % codecs.len()], rest)
    };
    let Ok(value) = json::parse(row) else {
        return;
    };
    let prefix = b"[7,1,";
    let mut out = prefix.to_vec();
    match codec.encode_row(&value, &mut out) {
        Err(rejected) => {
            assert_eq!(out, prefix, "a refused row left bytes behind");
            let _ = rejected.to_string();
        }
        Ok(()) => {
            assert!(out.starts_with(prefix));
            let canonical = &out[prefix.len()..];
            assert!(
                canonical.iter().all(|&b| b >= 0x20),
                "raw control byte in {}",
                String::from_utf8_lossy(canonical)
            );
            let again = json::parse_unique(canonical).unwrap_or_else(|e| {
                panic!("canonical row {} is not strict JSON: {e}", String::from_utf8_lossy(canonical))
            });
            let mut second = Vec::new();
            codec.encode_row(&again, &mut second).unwrap_or_else(|e| {
                panic!("canonical row {} refused: {e}", String::from_utf8_lossy(canonical))
            });
            assert!(
                second == canonical,
                "not stable:\n  first  {}\n  second {}",
                String::from_utf8_lossy(canonical),
                String::from_utf8_lossy(&second)
            );
            if data.iter().fold(0u8, |h, &b| h.wrapping_mul(31).wrapping_add(b)) % 8 == 0 {
                sealed_round_trip(codec, canonical);
            }
        }
    }
});

fn sealed_round_trip(codec: &RowCodec, row: &[u8]) {
    let mut file = Vec::new();
    write_segment(
        codec,
        [(5u64, -3i64, row)],
        &mut file,
        &SealOptions::default(),
    )
    .unwrap_or_else(|e| panic!("sealing {} failed: {e}", String::from_utf8_lossy(row)));
    let mut reader = SegmentReader::open(
        Bytes::from(file),
        codec,
        0..u64::MAX,
        &ReadOptions::default(),
    )
    .expect("sealed segment opens");
    let chunk = reader.next_chunk().expect("chunk").expect("one row");
    assert_eq!(chunk.len(), 1);
    let (offset, ts, back) = chunk.row(0);
    assert_eq!((offset, ts), (5, -3));
    assert!(
        back == row,
        "sealed {}\n  read {}",
        String::from_utf8_lossy(row),
        String::from_utf8_lossy(back)
    );
    assert!(reader.next_chunk().expect("end").is_none());
}
