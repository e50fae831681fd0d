//! A migrated stream's next log (`create_successor`): it starts at the seam — the hot log, the
//! sealed tier and the marks all begin there, offsets below it are never issued — it survives a
//! reopen, making it again is a no-op, and a different log in its place is refused.

use std::collections::HashMap;

use corecast_storage::log::{create_successor, AppendBatch, BatchOutcome, Buffer, Mark};
use corecast_storage::tier::SegmentIndex;

fn first_offset(outcome: &BatchOutcome) -> u64 {
    match outcome {
        BatchOutcome::Appended { first_offset, .. } => *first_offset,
        other => panic!("not appended: {other:?}"),
    }
}

#[test]
fn a_successor_log_starts_at_the_seam_with_the_marks_carried() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs/t-v2");
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let marks: HashMap<String, Mark> = [(
        "pub-1".to_string(),
        Mark {
            last_seq: 41,
            last_offset: Some(1233),
        },
    )]
    .into();
    let id = "0b6f4b8e-6a44-4f6b-9d3c-58d1c7a4e001";
    create_successor(&dir, id, Some("{\"type\":\"object\"}"), 1234, &marks).unwrap();
    assert!(!tmp.path().join("logs/t-v2.creating").exists());
    {
        let mut buffer = Buffer::open(&dir, Some("{\"type\":\"object\"}")).unwrap();
        assert_eq!(buffer.end_offset(), 1234);
        assert_eq!(buffer.earliest(), None, "no row yet");
        assert_eq!(buffer.stream_id(), id);
        assert_eq!(
            buffer.publisher_mark("pub-1"),
            Some(Mark {
                last_seq: 41,
                last_offset: Some(1233)
            })
        );
        let rows = vec![b"{}".to_vec(), b"{}".to_vec()];
        let out = buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
        assert_eq!(first_offset(&out[0]), 1234);
        assert_eq!(buffer.end_offset(), 1236);
        let index = SegmentIndex::open(&dir).unwrap();
        assert_eq!(index.sealed_end().unwrap(), 1234);
        assert_eq!(index.dropped_through().unwrap(), 1234);
        assert!(index.sweep().unwrap().is_empty());
    }
    let buffer = Buffer::open(&dir, None).unwrap();
    assert_eq!(buffer.end_offset(), 1236);
    assert_eq!(buffer.earliest(), Some(1234));
    drop(buffer);
    // made again (a migration rerun after a crash): accepted as it is
    create_successor(&dir, id, Some("{\"type\":\"object\"}"), 1234, &marks).unwrap();
    // another log in its place: refused, naming it
    let e = create_successor(&dir, id, Some("{\"type\":\"object\"}"), 99, &marks).unwrap_err();
    assert!(e.to_string().contains("t-v2"), "{e}");
    // a half-made one (a crash before the rename) is made afresh
    let other = tmp.path().join("logs/t-v3");
    std::fs::create_dir_all(tmp.path().join("logs/t-v3.creating/junk")).unwrap();
    create_successor(&other, id, None, 7, &HashMap::new()).unwrap();
    assert!(!tmp.path().join("logs/t-v3.creating").exists());
    assert_eq!(Buffer::open(&other, None).unwrap().end_offset(), 7);
}
