//! Sealing the hot log into recorded Parquet segments: the whole path from committed rows to
//! segments and back is byte-identical on the shared data sets; the crash protocol's leftovers
//! are swept and a missing recorded file is refused; retention drops the oldest segments only;
//! `where=` statistics skip row groups.

use std::path::Path;

use corecast_storage::json;
use corecast_storage::log::{AppendBatch, Buffer, LogOptions};
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{
    drop_expired, seal_next, ColumnPredicate, PredicateValue, ReadOptions, SealCut, SealOptions,
    SegmentEntry, SegmentIndex, SegmentReader, TierError, SEGMENTS_DIR_NAME,
};

fn data(name: &str) -> String {
    format!("{}/../../shared/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct Stream {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    codec: RowCodec,
    buffer: Buffer,
}

/// A hot log of `dataset` (its first `limit` rows) committed 500 rows at a time.
fn stream(dataset: &str, limit: usize) -> Stream {
    let schema =
        Schema::compile(&std::fs::read_to_string(data(&format!("{dataset}.schema.json"))).unwrap())
            .unwrap();
    let codec = RowCodec::Schema(schema.clone());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut buffer = Buffer::open_with(
        &dir,
        Some(&schema.published()),
        LogOptions {
            segment_bytes: 256 << 10,
        },
    )
    .unwrap();
    let text = std::fs::read_to_string(data(&format!("{dataset}.jsonl"))).unwrap();
    let rows: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(limit)
        .map(|line| {
            let mut out = Vec::new();
            codec
                .encode_row(&json::parse(line.as_bytes()).unwrap(), &mut out)
                .unwrap();
            out
        })
        .collect();
    for chunk in rows.chunks(500) {
        buffer.append(&[AppendBatch::plain(chunk)]).unwrap();
    }
    Stream {
        _tmp: tmp,
        dir,
        codec,
        buffer,
    }
}

/// Seals everything committed, `target` bytes per segment.
fn seal_all(
    s: &Stream,
    index: &SegmentIndex,
    target: u64,
    options: &SealOptions,
) -> Vec<SegmentEntry> {
    let reader = s.buffer.reader().unwrap();
    let mut entries = Vec::new();
    while let Some(entry) = seal_next(
        index,
        &reader,
        &s.codec,
        SealCut {
            until: s.buffer.end_offset(),
            target_bytes: target,
        },
        options,
    )
    .unwrap()
    {
        entries.push(entry);
    }
    entries
}

fn read_segment(
    dir: &Path,
    codec: &RowCodec,
    entry: &SegmentEntry,
    options: &ReadOptions,
) -> (Vec<(u64, i64, Vec<u8>)>, corecast_storage::tier::ReadStats) {
    let file = std::fs::File::open(dir.join(SEGMENTS_DIR_NAME).join(&entry.file)).unwrap();
    let mut reader =
        SegmentReader::open(file, codec, entry.first_offset..entry.end_offset(), options).unwrap();
    let mut rows = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        rows.extend(chunk.iter().map(|(o, t, b)| (o, t, b.to_vec())));
    }
    (rows, reader.stats().clone())
}

#[test]
fn committed_rows_sealed_evicted_and_read_back_are_identical_on_every_data_set() {
    for (dataset, limit, target) in [
        ("btcusdt-trades", usize::MAX, 40 << 10),
        ("es-mbp1", usize::MAX, 60 << 10),
        ("es-mbo", 30_000, 512 << 10),
    ] {
        let mut s = stream(dataset, limit);
        let end = s.buffer.end_offset();
        let hot = s.buffer.reader().unwrap().scan(1, end, usize::MAX).unwrap();
        assert_eq!(hot.len() as u64, end - 1);
        let index = SegmentIndex::open(&s.dir).unwrap();
        let entries = seal_all(&s, &index, target, &SealOptions::default());
        assert!(entries.len() >= 3, "{dataset}: {} segments", entries.len());
        // contiguous, and they add up
        assert_eq!(entries[0].first_offset, 1);
        for pair in entries.windows(2) {
            assert_eq!(pair[0].end_offset(), pair[1].first_offset, "{dataset}");
        }
        assert_eq!(entries.iter().map(|e| e.rows).sum::<u64>(), end - 1);
        assert_eq!(index.entries().unwrap(), entries);
        assert_eq!(index.sealed_end().unwrap(), end);
        assert!(index.sweep().unwrap().is_empty());
        // nothing more to seal
        assert!(seal_all(&s, &index, target, &SealOptions::default()).is_empty());
        // evict the whole hot log: offsets go on
        let evicted = s.buffer.evict_below(end).unwrap();
        assert!(evicted.segments >= 1);
        assert_eq!(s.buffer.earliest(), None);
        assert_eq!(s.buffer.end_offset(), end);
        // every row back from the segments, byte for byte, with its ts
        let mut back = Vec::new();
        for entry in &entries {
            let (rows, _) = read_segment(&s.dir, &s.codec, entry, &ReadOptions::default());
            assert_eq!(rows.len() as u64, entry.rows);
            assert_eq!(rows.iter().map(|r| r.1).min(), Some(entry.min_ts));
            assert_eq!(rows.iter().map(|r| r.1).max(), Some(entry.max_ts));
            back.extend(rows);
        }
        assert_eq!(back.len(), hot.len());
        for (row, (offset, ts, bytes)) in hot.iter().zip(&back) {
            assert_eq!((row.offset, row.ts_us), (*offset, *ts), "{dataset}");
            assert!(
                row.payload == *bytes,
                "{dataset} offset {offset}: {} != {}",
                String::from_utf8_lossy(&row.payload),
                String::from_utf8_lossy(bytes)
            );
        }
        // appends go on after everything was evicted, and seal from where they left off
        let more: Vec<&[u8]> = hot[..10].iter().map(|r| r.payload.as_slice()).collect();
        s.buffer.append(&[AppendBatch::plain(&more)]).unwrap();
        let next = seal_all(&s, &index, target, &SealOptions::default());
        assert_eq!(next.len(), 1);
        assert_eq!((next[0].first_offset, next[0].last_offset), (end, end + 9));
    }
}

#[test]
fn a_seal_stops_at_its_cut_and_never_seals_a_row_twice() {
    let s = stream("btcusdt-trades", 3000);
    let index = SegmentIndex::open(&s.dir).unwrap();
    let reader = s.buffer.reader().unwrap();
    let cut = SealCut {
        until: 1001,
        target_bytes: u64::MAX,
    };
    let first = seal_next(&index, &reader, &s.codec, cut, &SealOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.first_offset, first.last_offset, first.rows),
        (1, 1000, 1000)
    );
    assert!(
        seal_next(&index, &reader, &s.codec, cut, &SealOptions::default())
            .unwrap()
            .is_none()
    );
    // a target of one byte: one row per segment
    let one = SealCut {
        until: 3001,
        target_bytes: 1,
    };
    let second = seal_next(&index, &reader, &s.codec, one, &SealOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!((second.first_offset, second.last_offset), (1001, 1001));
}

#[test]
fn leftovers_of_a_crash_are_swept_and_a_missing_recorded_file_is_refused() {
    let s = stream("btcusdt-trades", 2000);
    let index = SegmentIndex::open(&s.dir).unwrap();
    let entries = seal_all(&s, &index, 30 << 10, &SealOptions::default());
    assert!(entries.len() >= 2);
    let segments = s.dir.join(SEGMENTS_DIR_NAME);
    // a file being written when the process died, and one written but never recorded
    std::fs::write(segments.join("00000000000000002001.parquet.tmp"), b"half").unwrap();
    std::fs::write(
        segments.join("00000000000000002001-00000000000000002500.parquet"),
        b"never recorded",
    )
    .unwrap();
    std::fs::write(segments.join("README"), b"not ours").unwrap();
    let mut removed = index.sweep().unwrap();
    removed.sort();
    assert_eq!(
        removed,
        [
            "00000000000000002001-00000000000000002500.parquet",
            "00000000000000002001.parquet.tmp"
        ]
    );
    assert!(segments.join("README").exists(), "files not ours stay");
    for e in &entries {
        assert!(segments.join(&e.file).exists());
    }
    // a recorded file cut short: refused, naming it
    let victim = segments.join(&entries[1].file);
    let len = std::fs::metadata(&victim).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap();
    f.set_len(len - 1).unwrap();
    let e = index.sweep().unwrap_err().to_string();
    assert!(e.contains(&entries[1].file) && e.contains("bytes"), "{e}");
    // a recorded file missing: refused, naming it and the offsets
    std::fs::remove_file(&victim).unwrap();
    let e = index.sweep().unwrap_err().to_string();
    assert!(
        e.contains(&entries[1].file)
            && e.contains("missing")
            && e.contains(&format!(
                "{}..={}",
                entries[1].first_offset, entries[1].last_offset
            )),
        "{e}"
    );
    // reopening the index does not change that
    drop(index);
    let again = SegmentIndex::open(&s.dir).unwrap();
    assert!(again.sweep().is_err());
}

#[test]
fn rows_in_no_tier_stop_the_seal() {
    let mut s = stream("es-mbp1", usize::MAX);
    let index = SegmentIndex::open(&s.dir).unwrap();
    // evicting rows that were never sealed (what a lost segment file amounts to)
    s.buffer.evict_below(s.buffer.end_offset() - 1).unwrap();
    let floor = s.buffer.earliest().unwrap();
    assert!(floor > 1);
    let reader = s.buffer.reader().unwrap();
    let cut = SealCut {
        until: s.buffer.end_offset(),
        target_bytes: u64::MAX,
    };
    match seal_next(&index, &reader, &s.codec, cut, &SealOptions::default()) {
        Err(TierError::Hole { expected, found }) => assert_eq!((expected, found), (1, floor)),
        other => panic!("{other:?}"),
    }
    assert!(index.entries().unwrap().is_empty());
    assert!(
        std::fs::read_dir(index.dir()).unwrap().next().is_none(),
        "no file left"
    );
}

#[test]
fn retention_drops_the_oldest_segments_only_by_their_rows_ts() {
    let s = stream("btcusdt-trades", 5000);
    let index = SegmentIndex::open(&s.dir).unwrap();
    let mut entries = seal_all(&s, &index, 20 << 10, &SealOptions::default());
    assert!(entries.len() >= 4);
    // a cutoff inside the third segment: the first two go
    let cutoff = entries[2].max_ts;
    let dropped = drop_expired(&index, &entries, cutoff).unwrap();
    assert_eq!(dropped, entries[..2]);
    for e in &dropped {
        assert!(!index.path_of(e).exists());
    }
    entries.drain(..2);
    assert_eq!(index.entries().unwrap(), entries);
    // a clock stepped back: nothing more goes, nothing comes back
    assert!(drop_expired(&index, &entries, cutoff - 3_600_000_000)
        .unwrap()
        .is_empty());
    assert_eq!(index.entries().unwrap(), entries);
    // a newer segment that looks expired never goes before an older one that does not
    let mut shuffled = entries.clone();
    shuffled[0].max_ts = i64::MAX;
    assert!(drop_expired(&index, &shuffled, i64::MAX - 1)
        .unwrap()
        .is_empty());
    // sealing goes on from sealed_end, past the dropped ones
    assert_eq!(index.sealed_end().unwrap(), s.buffer.end_offset());
}

#[test]
fn where_statistics_skip_row_groups() {
    let s = stream("btcusdt-trades", usize::MAX);
    let index = SegmentIndex::open(&s.dir).unwrap();
    let options = SealOptions {
        max_row_group_rows: 100,
        batch_rows: 100,
        ..SealOptions::default()
    };
    let entries = seal_all(&s, &index, u64::MAX, &options);
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    let (all, stats) = read_segment(&s.dir, &s.codec, entry, &ReadOptions::default());
    let groups = stats.row_groups_total;
    assert!(groups >= 10);
    let id_of = |row: &[u8]| -> i64 {
        let v: sonic_rs::Value = sonic_rs::from_slice(row).unwrap();
        sonic_rs::JsonValueTrait::as_i64(&v["trade_id"]).unwrap()
    };
    let wanted = id_of(&all[1234].2);
    let prune = |terms: Vec<ColumnPredicate>| ReadOptions {
        prune: terms,
        ..ReadOptions::default()
    };
    let by_id = |v: PredicateValue| {
        prune(vec![ColumnPredicate {
            column: "trade_id".into(),
            any_of: vec![v],
        }])
    };
    // an id in one row group: every other group is skipped, the matching row is still there
    let (rows, stats) = read_segment(
        &s.dir,
        &s.codec,
        entry,
        &by_id(PredicateValue::Int(wanted.into())),
    );
    assert_eq!(stats.row_groups_read, 1, "{stats:?}");
    assert_eq!(stats.row_groups_pruned, groups - 1);
    assert!(rows.iter().any(|r| id_of(&r.2) == wanted));
    // an id no row has: nothing read
    let (rows, stats) = read_segment(&s.dir, &s.codec, entry, &by_id(PredicateValue::Int(-5)));
    assert_eq!((rows.len(), stats.row_groups_read), (0, 0));
    // the wrong type matches nothing, as the filter says; null may match only where nulls are
    let (_, stats) = read_segment(
        &s.dir,
        &s.codec,
        entry,
        &by_id(PredicateValue::Str("1".into())),
    );
    assert_eq!(stats.row_groups_read, 0);
    let (_, stats) = read_segment(&s.dir, &s.codec, entry, &by_id(PredicateValue::Null));
    assert_eq!(stats.row_groups_read, 0);
    // a double compared with an integer column never prunes (rounding)
    let (_, stats) = read_segment(&s.dir, &s.codec, entry, &by_id(PredicateValue::Num(0.5)));
    assert_eq!(stats.row_groups_read, groups);
    // an unknown column, or one alternative that may match, keeps the group
    let (_, stats) = read_segment(
        &s.dir,
        &s.codec,
        entry,
        &prune(vec![ColumnPredicate {
            column: "nope".into(),
            any_of: vec![PredicateValue::Int(1)],
        }]),
    );
    assert_eq!(stats.row_groups_read, groups);
    let (_, stats) = read_segment(
        &s.dir,
        &s.codec,
        entry,
        &by_id(PredicateValue::Int(-5)).clone_with(PredicateValue::Int(wanted.into())),
    );
    assert_eq!(stats.row_groups_read, 1);
    // a double column: a price inside one group's range
    let price_of = |row: &[u8]| -> f64 {
        let v: sonic_rs::Value = sonic_rs::from_slice(row).unwrap();
        sonic_rs::JsonValueTrait::as_f64(&v["price"]).unwrap()
    };
    let price = price_of(&all[77].2);
    let (rows, stats) = read_segment(
        &s.dir,
        &s.codec,
        entry,
        &prune(vec![ColumnPredicate {
            column: "price".into(),
            any_of: vec![PredicateValue::Num(price)],
        }]),
    );
    assert!(
        stats.row_groups_read >= 1 && stats.row_groups_read < groups,
        "{stats:?}"
    );
    assert!(rows.iter().any(|r| price_of(&r.2) == price));
}

trait CloneWith {
    fn clone_with(&self, extra: PredicateValue) -> ReadOptions;
}

impl CloneWith for ReadOptions {
    fn clone_with(&self, extra: PredicateValue) -> ReadOptions {
        let mut o = self.clone();
        o.prune[0].any_of.push(extra);
        o
    }
}

#[test]
fn an_index_that_lost_segments_is_refused_not_swept() {
    let s = stream("btcusdt-trades", 2000);
    let index = SegmentIndex::open(&s.dir).unwrap();
    let entries = seal_all(&s, &index, 30 << 10, &SealOptions::default());
    assert!(entries.len() >= 3);
    for e in &entries {
        let crc = corecast_storage::tier::file_crc32c(&index.path_of(e)).unwrap();
        assert_eq!(e.crc32c, Some(crc), "the index records the file's CRC32C");
    }
    let segments = s.dir.join(SEGMENTS_DIR_NAME);
    // files not named as segments, and directories, are left alone
    std::fs::write(segments.join("mine.parquet"), b"a user's file").unwrap();
    std::fs::create_dir(segments.join("dir.parquet")).unwrap();
    assert!(index.sweep().unwrap().is_empty());
    assert!(segments.join("mine.parquet").exists() && segments.join("dir.parquet").is_dir());
    drop(index);
    let db = rusqlite::Connection::open(s.dir.join("meta.db")).unwrap();
    // the newest row deleted: sealed_end says more is sealed than the index records
    db.execute(
        "DELETE FROM segments WHERE first_offset = ?1",
        [entries.last().unwrap().first_offset as i64],
    )
    .unwrap();
    let e = SegmentIndex::open(&s.dir)
        .unwrap()
        .sweep()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("records offsets") && e.contains("sealed tier holds"),
        "{e}"
    );
    assert!(index_files(&segments) == entries.len(), "nothing deleted");
    // the whole table dropped: refused, every file kept
    db.execute_batch("DROP TABLE segments").unwrap();
    let e = SegmentIndex::open(&s.dir)
        .unwrap()
        .sweep()
        .unwrap_err()
        .to_string();
    assert!(e.contains("sealed tier holds 1.."), "{e}");
    assert!(index_files(&segments) == entries.len(), "nothing deleted");
}

fn index_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            corecast_storage::tier::parse_segment_file_name(
                &e.as_ref().unwrap().file_name().to_string_lossy(),
            )
            .is_some()
        })
        .count()
}
