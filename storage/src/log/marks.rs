//! Exactly-once publisher marks and the dedupe window (PROTOCOL.md §7, §10).
//!
//! In: a publisher id, the seq of a batch's first row and its row count. Out: a judgement, `gap`
//! or "the leading `dup` rows are duplicates, append the rest", and for each duplicate the offset
//! it originally landed at, while the window still remembers it.
//!
//! A publisher's mark `(last_seq, last_offset)` is durable: the writer stores it in the
//! `publishers` table in the same transaction as the rows. The window is not: it lives in the
//! writer's memory, holds the last [`DEDUPE_WINDOW_RANGES`] committed ranges of each publisher,
//! and starts empty after a restart, so older duplicates are answered `None` (`null` on the
//! wire). Runs on the owner's writer thread, like the rest of [`Buffer`](super::Buffer).

use std::collections::{HashMap, VecDeque};

/// How many committed ranges (`first_seq`, `first_offset`, rows) each publisher's dedupe window
/// remembers (PROTOCOL.md §10). At the bound the oldest range is forgotten.
pub const DEDUPE_WINDOW_RANGES: usize = 64;

const _: () = assert!(DEDUPE_WINDOW_RANGES >= 1);

/// A publisher's exactly-once mark: the last seq that landed and the offset it landed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The seq of the last row of this publisher that landed (0: none yet).
    pub last_seq: u64,
    /// The offset of that row (`None` while no row landed).
    pub last_offset: Option<u64>,
}

/// The verdict on one exactly-once batch against a publisher's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judgement {
    /// `first_seq > last_seq + 1`: nothing appended, the mark does not move.
    Gap {
        /// `last_seq + 1`.
        expected: u64,
        /// The batch's first seq.
        got: u64,
    },
    /// The leading `dups` rows are duplicates; the rest (possibly none) append.
    Accept {
        /// `min(rows, last_seq − first_seq + 1)`.
        dups_count: u64,
    },
}

/// A run of rows of one publisher that landed together: seqs `first_seq..first_seq + rows_count`
/// at offsets `first_offset..first_offset + rows_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CommittedRange {
    first_seq: u64,
    first_offset: u64,
    rows_count: u64,
}

impl CommittedRange {
    fn seq_end(&self) -> u64 {
        self.first_seq + self.rows_count
    }
}

/// One publisher's mark and its dedupe window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublisherState {
    mark: Mark,
    /// Oldest first; seq ranges are adjacent (each starts where the previous ends) and end at
    /// `mark.last_seq`. At most [`DEDUPE_WINDOW_RANGES`] entries.
    window: VecDeque<CommittedRange>,
}

impl Default for PublisherState {
    fn default() -> Self {
        PublisherState::recovered(Mark {
            last_seq: 0,
            last_offset: None,
        })
    }
}

impl PublisherState {
    /// A publisher whose mark was read back from disk: its window is empty.
    pub(crate) fn recovered(mark: Mark) -> Self {
        PublisherState {
            mark,
            window: VecDeque::new(),
        }
    }

    /// The mark as it stands.
    pub(crate) fn mark(&self) -> Mark {
        self.mark
    }

    /// Judges a batch of `rows_count` rows whose first row has seq `first_seq` (≥ 1).
    pub(crate) fn judge(&self, first_seq: u64, rows_count: u64) -> Judgement {
        assert!(first_seq >= 1, "exactly-once seqs start at 1");
        let expected = self.mark.last_seq + 1;
        if first_seq > expected {
            return Judgement::Gap {
                expected,
                got: first_seq,
            };
        }
        Judgement::Accept {
            dups_count: rows_count.min(expected - first_seq),
        }
    }

    /// The offset at which the row with `seq` (≤ the mark) originally landed, if the window
    /// still remembers it.
    pub(crate) fn original_offset(&self, seq: u64) -> Option<u64> {
        debug_assert!(seq <= self.mark.last_seq);
        let oldest = self.window.front()?;
        if seq < oldest.first_seq {
            return None;
        }
        let index = self.window.partition_point(|range| range.seq_end() <= seq);
        let range = self.window.get(index)?;
        debug_assert!(range.first_seq <= seq && seq < range.seq_end());
        Some(range.first_offset + (seq - range.first_seq))
    }

    /// Records that seqs `first_seq..first_seq + rows_count` landed at offsets
    /// `first_offset..`, moving the mark to the last of them.
    pub(crate) fn record(&mut self, first_seq: u64, first_offset: u64, rows_count: u64) {
        assert!(rows_count >= 1);
        assert_eq!(
            first_seq,
            self.mark.last_seq + 1,
            "marks advance contiguously"
        );
        if let Some(last_offset) = self.mark.last_offset {
            assert!(first_offset > last_offset, "offsets only grow");
        }
        let last = self.window.back_mut();
        match last {
            // Contiguous in seq and offset with the newest range: one range covers both.
            Some(last) if last.first_offset + last.rows_count == first_offset => {
                debug_assert_eq!(last.seq_end(), first_seq);
                last.rows_count += rows_count;
            }
            _ => {
                if self.window.len() == DEDUPE_WINDOW_RANGES {
                    self.window.pop_front();
                }
                self.window.push_back(CommittedRange {
                    first_seq,
                    first_offset,
                    rows_count,
                });
            }
        }
        self.mark = Mark {
            last_seq: first_seq + rows_count - 1,
            last_offset: Some(first_offset + rows_count - 1),
        };
        assert!(self.window.len() <= DEDUPE_WINDOW_RANGES);
    }
}

/// Every publisher's state, keyed by publisher id.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    publishers: HashMap<String, PublisherState>,
}

impl Marks {
    /// The state of `id`, if it ever landed a row (or was recovered).
    pub(crate) fn get(&self, id: &str) -> Option<&PublisherState> {
        self.publishers.get(id)
    }

    /// Replaces (or adds) `id`'s state.
    pub(crate) fn insert(&mut self, id: &str, state: PublisherState) {
        match self.publishers.get_mut(id) {
            Some(slot) => *slot = state,
            None => {
                self.publishers.insert(id.to_owned(), state);
            }
        }
    }

    /// Every publisher's mark, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, Mark)> {
        self.publishers
            .iter()
            .map(|(id, state)| (id.as_str(), state.mark))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_against_the_mark() {
        let mut state = PublisherState::default();
        assert_eq!(
            state.judge(2, 1),
            Judgement::Gap {
                expected: 1,
                got: 2
            }
        );
        assert_eq!(state.judge(1, 3), Judgement::Accept { dups_count: 0 });
        state.record(1, 10, 3);
        assert_eq!(state.judge(2, 1), Judgement::Accept { dups_count: 1 });
        assert_eq!(state.judge(2, 5), Judgement::Accept { dups_count: 2 });
        assert_eq!(state.judge(4, 5), Judgement::Accept { dups_count: 0 });
        assert_eq!(state.original_offset(1), Some(10));
        assert_eq!(state.original_offset(3), Some(12));
    }

    #[test]
    fn window_merges_adjacent_ranges_and_forgets_the_oldest() {
        let mut state = PublisherState::default();
        state.record(1, 1, 2);
        state.record(3, 3, 2); // adjacent: merged
        assert_eq!(state.window.len(), 1);
        let mut offset = 100;
        for seq in 5..5 + DEDUPE_WINDOW_RANGES as u64 {
            state.record(seq, offset, 1);
            offset += 2;
        }
        assert_eq!(state.window.len(), DEDUPE_WINDOW_RANGES);
        assert_eq!(state.original_offset(4), None, "forgotten");
        assert_eq!(state.original_offset(5), Some(100));
        assert_eq!(state.original_offset(6), Some(102));
        assert_eq!(state.mark().last_seq, 4 + DEDUPE_WINDOW_RANGES as u64);
    }

    #[test]
    fn recovered_state_remembers_nothing() {
        let state = PublisherState::recovered(Mark {
            last_seq: 7,
            last_offset: Some(70),
        });
        assert_eq!(state.judge(7, 2), Judgement::Accept { dups_count: 1 });
        assert_eq!(state.original_offset(7), None);
    }
}
