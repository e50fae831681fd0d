//! The Parquet segment codec: rows sealed and read back are byte-identical to the validator's
//! canonical encoding, on the shared market-data samples and on edge values; range reads decode
//! only the row groups and pages they need.

use std::ops::Range;

use bytes::Bytes;
use corecast_storage::json;
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{
    write_segment, ReadOptions, SealOptions, SegmentReader, SegmentStats, StatValue, TierError,
};

fn data(name: &str) -> String {
    format!("{}/../../shared/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Canonical rows of a `.jsonl` file through the validator, offsets from 1.
fn canonical(codec: &RowCodec, lines: &str) -> Vec<Vec<u8>> {
    lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let value = json::parse(line.as_bytes()).expect("row parses");
            let mut out = Vec::new();
            codec.encode_row(&value, &mut out).expect("row validates");
            out
        })
        .collect()
}

fn ts_of(offset: u64) -> i64 {
    1_796_081_766_000_000 + (offset as i64) * 37 - ((offset % 5) as i64) * 100
}

fn seal(codec: &RowCodec, rows: &[Vec<u8>], options: &SealOptions) -> (Bytes, SegmentStats) {
    let mut file = Vec::new();
    let stats = write_segment(
        codec,
        rows.iter()
            .enumerate()
            .map(|(i, r)| (i as u64 + 1, ts_of(i as u64 + 1), r.as_slice())),
        &mut file,
        options,
    )
    .expect("segment written");
    (Bytes::from(file), stats)
}

fn read_all(
    codec: &RowCodec,
    file: &Bytes,
    range: Range<u64>,
    chunk_rows: usize,
) -> (Vec<(u64, i64, Vec<u8>)>, corecast_storage::tier::ReadStats) {
    let mut reader = SegmentReader::open(
        file.clone(),
        codec,
        range,
        &ReadOptions {
            chunk_rows,
            ..ReadOptions::default()
        },
    )
    .expect("open");
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().expect("chunk") {
        assert!(chunk.len() <= chunk_rows, "chunk of {} rows", chunk.len());
        out.extend(chunk.iter().map(|(o, t, b)| (o, t, b.to_vec())));
    }
    (out, reader.stats().clone())
}

fn assert_identical(rows: &[Vec<u8>], back: &[(u64, i64, Vec<u8>)], first: u64) {
    assert_eq!(back.len(), rows.len(), "row count");
    for (i, (row, (offset, ts, bytes))) in rows.iter().zip(back).enumerate() {
        let want = first + i as u64;
        assert_eq!(*offset, want);
        assert_eq!(*ts, ts_of(want));
        assert!(
            bytes == row,
            "offset {offset}:\n  sealed {}\n  read   {}",
            String::from_utf8_lossy(row),
            String::from_utf8_lossy(bytes)
        );
    }
}

fn dataset(name: &str) -> (RowCodec, Vec<Vec<u8>>) {
    let schema = Schema::compile(
        &std::fs::read_to_string(data(&format!("{name}.schema.json"))).expect("schema file"),
    )
    .expect("schema compiles");
    let codec = RowCodec::Schema(schema);
    let lines = std::fs::read_to_string(data(&format!("{name}.jsonl"))).expect("rows file");
    let rows = canonical(&codec, &lines);
    (codec, rows)
}

fn round_trip_dataset(name: &str, rows_expected: usize) {
    let (codec, rows) = dataset(name);
    assert_eq!(rows.len(), rows_expected);
    let (file, stats) = seal(&codec, &rows, &SealOptions::default());
    assert_eq!(stats.rows, rows.len() as u64);
    assert_eq!(stats.offsets, Some((1, rows.len() as u64)));
    assert_eq!(stats.bytes, file.len() as u64);
    assert_eq!(
        stats.row_groups,
        rows.len().div_ceil(65_536),
        "row groups of at most 65,536 rows"
    );
    let ts_min = (1..=rows.len() as u64).map(ts_of).min();
    let ts_max = (1..=rows.len() as u64).map(ts_of).max();
    assert_eq!(stats.ts, ts_min.zip(ts_max));
    let (back, read) = read_all(&codec, &file, 1..u64::MAX, 4096);
    assert_identical(&rows, &back, 1);
    assert_eq!(read.rows_returned, rows.len() as u64);
    eprintln!(
        "{name}: {} rows, {} canonical bytes -> {} Parquet bytes",
        rows.len(),
        rows.iter().map(Vec::len).sum::<usize>(),
        file.len()
    );
}

#[test]
fn btcusdt_trades_round_trip_byte_identical() {
    round_trip_dataset("btcusdt-trades", 2_001);
}

#[test]
fn es_mbo_round_trip_byte_identical() {
    round_trip_dataset("es-mbo", 68_792);
}

#[test]
fn es_mbp1_round_trip_byte_identical() {
    round_trip_dataset("es-mbp1", 2_288);
}

#[test]
fn file_stats_give_column_min_max() {
    let (codec, rows) = dataset("btcusdt-trades");
    let (_, stats) = seal(&codec, &rows, &SealOptions::default());
    let trade_id = stats
        .columns
        .iter()
        .find(|c| c.name == "trade_id")
        .expect("trade_id stats");
    assert_eq!(trade_id.min, Some(StatValue::Int(553_287_559)));
    assert_eq!(trade_id.nulls, 0);
    let maker = stats
        .columns
        .iter()
        .find(|c| c.name == "buyer_maker")
        .expect("bool stats");
    assert_eq!(maker.min, Some(StatValue::Boolean(false)));
    assert_eq!(maker.max, Some(StatValue::Boolean(true)));
    let (codec, rows) = dataset("es-mbp1");
    let (_, stats) = seal(&codec, &rows, &SealOptions::default());
    let price = stats
        .columns
        .iter()
        .find(|c| c.name == "price")
        .expect("price");
    assert!(matches!(price.min, Some(StatValue::Float(_))));
    let side = stats
        .columns
        .iter()
        .find(|c| c.name == "side")
        .expect("side");
    assert_eq!(side.min, Some(StatValue::Text("A".into())));
}

const EDGE_SCHEMA: &str = r#"{"type":"object","properties":{
  "i64": {"type":"integer"},
  "i32": {"type":"integer","format":"int32"},
  "f32": {"type":"number","format":"float"},
  "f64": {"type":"number"},
  "s": {"type":"string"},
  "flag": {"type":["boolean","null"]},
  "hex": {"type":["string","null"],"contentEncoding":"base16"},
  "b64": {"type":"string","contentEncoding":"base64"},
  "id16": {"type":["string","null"],"contentEncoding":"base16","format":"bytes16"},
  "key8": {"type":"string","contentEncoding":"base64","format":"bytes8"},
  "opt_i": {"type":["integer","null"]},
  "opt_f32": {"type":["number","null"],"format":"float"},
  "opt_s": {"type":["string","null"]},
  "book": {"type":["object","null"],"properties":{
      "venue": {"type":"string"},
      "depth": {"type":["integer","null"],"format":"int32"},
      "levels": {"type":"array","items":{"type":"object","properties":{
          "px": {"type":"number"}, "qty": {"type":["number","null"]},
          "tag": {"type":["string","null"],"contentEncoding":"base64"}},
          "required":["px"]}},
      "meta": {"type":["object","null"],"additionalProperties":{"type":"string"}}},
    "required":["venue","levels"]},
  "tags": {"type":"object","additionalProperties":{"type":"integer"}},
  "nested_map": {"type":["object","null"],"additionalProperties":{
      "type":"array","items":{"type":"string","contentEncoding":"base16","format":"bytes2"}}},
  "matrix": {"type":["array","null"],"items":{"type":"array","items":{"type":"number","format":"float"}}}
},
"required":["i64","i32","f32","f64","s","b64","key8","tags"]}"#;

/// Rows as a publisher might send them (keys out of order, absent optional keys, explicit
/// nulls, upper-case hex); the validator makes them canonical.
const EDGE_ROWS: &[&str] = &[
    r#"{"i64":-9223372036854775808,"i32":-2147483648,"f32":0.1,"f64":0.1,"s":"","b64":"","key8":"AAAAAAAAAAA=","tags":{}}"#,
    r#"{"i64":9223372036854775807,"i32":2147483647,"f32":3.4028235e38,"f64":1.7976931348623157e308,"s":"plain","b64":"AQID","key8":"//////////8=","tags":{"z":1,"a":2,"m":-3}}"#,
    r#"{"tags":{"b":1,"a":2},"key8":"AQIDBAUGBwg=","b64":"aGVsbG8=","s":"\u0000\u0001\u001f \"quoted\" back\\slash \n\r\t\b\f / é ü 中文 😀 \ud83d\ude00","f64":9007199254740993,"f32":16777217,"i32":0,"i64":9007199254740993}"#,
    r#"{"i64":-1,"i32":-1,"f32":-0.0,"f64":-0.0,"s":"x","b64":"AA==","key8":"AQIDBAUGBwg=","tags":{"k":0},"flag":null,"hex":null,"id16":null,"opt_i":null,"opt_f32":null,"opt_s":null,"book":null,"nested_map":null,"matrix":null}"#,
    r#"{"i64":0,"i32":7,"f32":1e-45,"f64":5e-324,"s":"y","b64":"AAE=","key8":"AQIDBAUGBwg=","tags":{"x":9223372036854775807},"flag":true,"hex":"DEADbeef00","id16":"000102030405060708090A0B0C0D0E0F","opt_i":-9223372036854775808,"opt_f32":1.17549435e-38,"opt_s":"\u007f",
       "book":{"levels":[],"venue":"XNAS"},"nested_map":{},"matrix":[]}"#,
    r#"{"i64":1,"i32":1,"f32":123456.79,"f64":0.30000000000000004,"s":"z","b64":"AAEC","key8":"AQIDBAUGBwg=","tags":{"é":1,"\"q\"":2,"":3},"flag":false,"hex":"","opt_f32":-3.4028235e38,
       "book":{"venue":"v","depth":null,"levels":[{"px":1.5},{"px":-2.25,"qty":null,"tag":null},{"px":1e300,"qty":1e-300,"tag":"/w=="}],"meta":{"z":"1","a":"2"}},
       "nested_map":{"b":["00ff","ABCD"],"a":[],"c":["0000"]},"matrix":[[1.5,0.1],[],[-0.0,1e38,1e-38]]}"#,
    r#"{"i64":123456789012345678,"i32":-7,"f32":2.5,"f64":1e21,"s":"\u2028\u2029\ufeff","b64":"AQIDBA==","key8":"AQIDBAUGBwg=","tags":{},"book":{"venue":"","levels":[{"px":0}],"meta":null},"matrix":[[0.5]]}"#,
    r#"{"i64":2,"i32":2,"f32":1e-7,"f64":1e-7,"s":"1e-7","b64":"AQIDBAU=","key8":"AQIDBAUGBwg=","tags":{"a":1},"book":{"venue":"n","depth":-2147483648,"levels":[{"px":123456789012.34567,"qty":2}],"meta":{}}}"#,
];

fn edge_rows() -> (RowCodec, Vec<Vec<u8>>) {
    let codec = RowCodec::Schema(Schema::compile(EDGE_SCHEMA).expect("edge schema"));
    let rows = canonical(&codec, &EDGE_ROWS.join("\n").replace("\n       ", ""));
    (codec, rows)
}

#[test]
fn edge_values_round_trip_byte_identical() {
    let (codec, rows) = edge_rows();
    assert_eq!(rows.len(), EDGE_ROWS.len());
    // What the validator made of the awkward inputs, so the test states what it round-trips.
    let text: Vec<String> = rows
        .iter()
        .map(|r| String::from_utf8(r.clone()).unwrap())
        .collect();
    assert!(text[3].contains(r#""f32":0.0,"f64":0.0"#), "{}", text[3]); // -0.0 parses as 0.0
    assert!(
        text[2].contains(r#""f64":9007199254740992.0"#),
        "{}",
        text[2]
    ); // 2^53+1 as a double
    assert!(text[2].contains(r#""i64":9007199254740993"#), "{}", text[2]);
    assert!(text[2].contains(r#""f32":16777216.0"#), "{}", text[2]);
    assert!(text[2].contains(r#"\u0000\u0001\u001f"#), "{}", text[2]);
    assert!(text[4].contains(r#""hex":"deadbeef00""#), "{}", text[4]);
    assert!(text[0].contains(r#""flag":null"#), "{}", text[0]); // absent → null
    assert!(
        text[1].contains(r#""tags":{"z":1,"a":2,"m":-3}"#),
        "{}",
        text[1]
    );
    assert!(
        text[5].contains(r#""f64":0.30000000000000004"#),
        "{}",
        text[5]
    );
    assert!(
        text[5].contains(r#""meta":{"z":"1","a":"2"}"#),
        "{}",
        text[5]
    );
    for chunk_rows in [1, 3, 100] {
        let (file, stats) = seal(&codec, &rows, &SealOptions::default());
        assert_eq!(stats.rows, rows.len() as u64);
        let (back, _) = read_all(&codec, &file, 0..u64::MAX, chunk_rows);
        assert_identical(&rows, &back, 1);
    }
    // Many copies across several row groups and batches.
    let many: Vec<Vec<u8>> = rows
        .iter()
        .cycle()
        .take(rows.len() * 250)
        .cloned()
        .collect();
    let options = SealOptions {
        max_row_group_rows: 300,
        batch_rows: 128,
        ..SealOptions::default()
    };
    let (file, stats) = seal(&codec, &many, &options);
    assert_eq!(stats.row_groups, many.len().div_ceil(300));
    let (back, _) = read_all(&codec, &file, 1..u64::MAX, 500);
    assert_identical(&many, &back, 1);
}

#[test]
fn schemaless_rows_round_trip_byte_identical() {
    let codec = RowCodec::Schemaless;
    let lines = [
        r#"{"b":2,"a":1.0,"flag":true,"n":null}"#,
        r#"{"z":{"y":[1,2.5,"x",null,{"k":-0.0}]},"big":18446744073709551615,"s":"\u0000é😀"}"#,
        r#"{}"#,
    ];
    let rows = canonical(&codec, &lines.join("\n"));
    let (file, stats) = seal(&codec, &rows, &SealOptions::default());
    assert!(stats.columns.is_empty());
    let (back, _) = read_all(&codec, &file, 1..4, 2);
    assert_identical(&rows, &back, 1);
}

#[test]
fn range_read_decodes_only_the_row_groups_it_needs() {
    let (codec, rows) = dataset("btcusdt-trades");
    let options = SealOptions {
        max_row_group_rows: 200,
        batch_rows: 64,
        ..SealOptions::default()
    };
    let (file, stats) = seal(&codec, &rows, &options);
    assert_eq!(stats.row_groups, 11); // 2,001 rows
                                      // Offsets 950..1_230: row groups 4 (801..=1000), 5 and 6 (1001..=1400).
    let (back, read) = read_all(&codec, &file, 950..1_230, 50);
    assert_eq!(read.row_groups_total, 11);
    assert_eq!(read.row_groups_read, 3);
    assert_eq!(back.len(), 280);
    assert_identical(&rows[949..1_229], &back, 950);
    assert!(read.rows_decoded <= 600, "decoded {}", read.rows_decoded);
    assert_eq!(read.rows_returned, 280);
    // One offset; the first; the last; past the end; an empty range.
    for (range, want) in [
        (1_000..1_001, 1),
        (1..2, 1),
        (2_001..2_002, 1),
        (2_002..3_000, 0),
        (5..5, 0),
    ] {
        let (back, read) = read_all(&codec, &file, range.clone(), 10);
        assert_eq!(back.len(), want, "{range:?}");
        if want == 1 {
            assert_eq!(read.row_groups_read, 1, "{range:?}");
            assert_identical(
                &rows[range.start as usize - 1..range.end as usize - 1],
                &back,
                range.start,
            );
        } else {
            assert_eq!(read.row_groups_read, 0, "{range:?}");
        }
    }
}

#[test]
fn range_read_skips_pages_inside_a_row_group() {
    // One row group, small pages: the page index narrows the rows decoded.
    let (codec, rows) = dataset("es-mbo");
    let (file, stats) = seal(&codec, &rows, &SealOptions::default());
    assert_eq!(stats.row_groups, 2);
    let (back, read) = read_all(&codec, &file, 30_000..30_010, 1_000);
    assert_identical(&rows[29_999..30_009], &back, 30_000);
    assert_eq!(read.row_groups_read, 1);
    assert!(read.pages_read < read.pages_total, "{read:?}");
    assert!(read.rows_decoded < 65_536, "{read:?}");
}

#[test]
fn offsets_must_increase_and_rows_must_be_canonical() {
    let (codec, rows) = dataset("btcusdt-trades");
    let out = write_segment(
        &codec,
        [(2, 0, rows[0].as_slice()), (2, 0, rows[1].as_slice())],
        Vec::new(),
        &SealOptions::default(),
    );
    assert!(matches!(
        out,
        Err(TierError::OutOfOrder {
            previous: 2,
            offset: 2
        })
    ));
    for bad in [
        &br#"{"event_ts":1,"trade_id":2,"price":1.0,"quantity":1.0}"#[..],
        br#"{"event_ts":1,"trade_id":2,"price":1.0,"quantity":1.0,"buyer_maker":1}"#,
        br#"{"trade_id":2,"event_ts":1,"price":1.0,"quantity":1.0,"buyer_maker":true}"#,
        br#"{"event_ts":1, "trade_id":2,"price":1.0,"quantity":1.0,"buyer_maker":true}"#,
        br#"{"event_ts":1,"trade_id":2,"price":null,"quantity":1.0,"buyer_maker":true}"#,
        br#"{"event_ts":1,"trade_id":2,"price":1.0,"quantity":1.0,"buyer_maker":true}x"#,
        br#"{"event_ts":01,"trade_id":2,"price":1.0,"quantity":1.0,"buyer_maker":true}"#,
    ] {
        let out = write_segment(&codec, [(1, 0, bad)], Vec::new(), &SealOptions::default());
        assert!(
            matches!(out, Err(TierError::BadRow { offset: 1, .. })),
            "{out:?}"
        );
    }
    // A file read with another stream's codec is refused.
    let (file, _) = seal(&codec, &rows[..10], &SealOptions::default());
    let other = RowCodec::Schemaless;
    assert!(matches!(
        SegmentReader::open(file, &other, 0..10, &ReadOptions::default()),
        Err(TierError::SchemaMismatch(_))
    ));
}

/// A file with the segment schema of `codec` holding exactly these `(offset, ts, row text)`
/// (schema-less layout), written with the Parquet library directly, as damage or another writer
/// could leave it: nothing here goes through the sealer's checks.
fn raw_schemaless_file(rows: &[(i64, i64, &str)]) -> Bytes {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use corecast_storage::tier::segment_schema;
    use parquet::arrow::ArrowWriter;

    let schema = segment_schema(&RowCodec::Schemaless);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    let mut file = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut file, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    Bytes::from(file)
}

/// Found by `fuzz/run.sh parquet_segment`: a schema-less segment's row text is stored verbatim,
/// and a damaged file (Parquet pages carry no checksum) was read back as rows of garbage, which
/// replay would have sent as frames. The reader now re-encodes each one and refuses the segment
/// when the text is not the canonical encoding of a JSON object.
#[test]
fn damaged_schemaless_rows_are_an_error_not_garbage() {
    let codec = RowCodec::Schemaless;
    let good = raw_schemaless_file(&[(1, 10, r#"{"a":1}"#), (2, 20, r#"{"b":[true,null]}"#)]);
    let (back, _) = read_all(&codec, &good, 0..u64::MAX, 16);
    assert_eq!(back.len(), 2);
    for bad in [
        r#"{"event_ts"a8"i0064000278000,"trade_id":553287559}"#,
        "not json",
        "[1,2]",
        r#"{"a":1} "#,
        r#"{"a":1.50}"#,
        r#"{"a":1,"a":2}"#,
    ] {
        let file = raw_schemaless_file(&[(1, 10, r#"{"a":1}"#), (2, 20, bad)]);
        let mut reader = SegmentReader::open(
            file,
            &codec,
            0..u64::MAX,
            &ReadOptions {
                chunk_rows: 16,
                ..ReadOptions::default()
            },
        )
        .expect("open");
        match reader.next_chunk() {
            Err(TierError::BadRow { offset: 2, .. }) => {}
            other => panic!("{bad:?} read back as {other:?}"),
        }
    }
}

/// Found by `fuzz/run.sh parquet_segment`: offsets that do not increase (or are negative) in a
/// damaged file were returned as they came, out of order and outside the range asked for.
#[test]
fn damaged_offsets_are_an_error() {
    let codec = RowCodec::Schemaless;
    for (rows, want) in [
        (
            vec![(2, 10, r#"{"a":1}"#), (1, 20, r#"{"a":2}"#)],
            "OutOfOrder",
        ),
        (
            vec![(1, 10, r#"{"a":1}"#), (1, 20, r#"{"a":2}"#)],
            "OutOfOrder",
        ),
        (vec![(-5, 10, r#"{"a":1}"#)], "OffsetTooLarge"),
    ] {
        let file = raw_schemaless_file(&rows);
        for chunk_rows in [1, 16] {
            let mut reader = SegmentReader::open(
                file.clone(),
                &codec,
                0..u64::MAX,
                &ReadOptions {
                    chunk_rows,
                    ..ReadOptions::default()
                },
            )
            .expect("open");
            let mut result = Ok(());
            loop {
                match reader.next_chunk() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            match (want, result) {
                ("OutOfOrder", Err(TierError::OutOfOrder { .. }))
                | ("OffsetTooLarge", Err(TierError::OffsetTooLarge(_))) => {}
                (want, got) => panic!("{rows:?} (chunks of {chunk_rows}): {got:?}, not {want}"),
            }
        }
    }
}

/// Found by `fuzz/run.sh parquet_segment` (the input, a mutated es-mbp1 segment, is kept in
/// `tests/fixtures/`): the Parquet library panics on it (`attempt to subtract with overflow` in
/// `SerializedPageReader::new_with_properties`, a page offset before its column chunk), which
/// took the reading thread down. The reader now answers such a panic as an error.
#[test]
fn a_file_the_parquet_library_panics_on_is_an_error() {
    let codec = RowCodec::Schema(
        Schema::compile(&std::fs::read_to_string(data("es-mbp1.schema.json")).expect("schema"))
            .expect("compiles"),
    );
    let file = Bytes::from(
        std::fs::read(format!(
            "{}/tests/fixtures/damaged-es-mbp1-segment.parquet",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("fixture"),
    );
    let result = SegmentReader::open(
        file,
        &codec,
        0..u64::MAX,
        &ReadOptions {
            chunk_rows: 3,
            ..ReadOptions::default()
        },
    )
    .and_then(|mut reader| {
        while reader.next_chunk()?.is_some() {}
        Ok(())
    });
    assert!(result.is_err(), "the damaged file read without an error");
}
