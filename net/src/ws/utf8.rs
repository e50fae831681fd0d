//! UTF-8 validation of a byte stream that arrives in pieces (RFC 6455 §8.1, "fail fast").
//!
//! [`Utf8Stream`] is fed a text message's payload chunk by chunk, in order, however the chunks
//! fall: several reads of one frame, several continuation frames. It rejects a chunk as soon as
//! it holds a byte that no continuation could make valid (a bad lead byte, an overlong form, a
//! surrogate, a code point over U+10FFFF), and carries a code point cut at the end of a chunk
//! (a 1-3 byte tail that may still become valid) into the next one. [`Utf8Stream::finish`]
//! rejects a tail left at the end of the message.
//!
//! Each chunk is checked with one `std::str::from_utf8` call (plus one of at most 4 bytes to
//! complete a carried tail); `Utf8Error::error_len` tells "invalid" (`Some`) from "incomplete
//! at the end" (`None`). std checks a sequence's second byte against its lead (E0 A0-BF,
//! ED 80-9F, F0 90-BF, F4 80-8F), so an invalid prefix fails on the byte that makes it so.

/// An invalid UTF-8 sequence in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utf8StreamError {
    /// Offset in the stream (bytes from its first byte) of the first byte of the sequence
    /// that is not valid UTF-8.
    pub at: usize,
}

/// The state of an incremental UTF-8 check: how many bytes were valid whole code points, and
/// the incomplete code point after them. A few words on the stack; never allocates.
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    /// Bytes of the stream known to be whole, valid code points.
    valid: usize,
    /// The start of a code point cut by the end of the last chunk (`tail[..tail_len]`).
    tail: [u8; 4],
    /// Bytes used in `tail`: 0 (none) to 3.
    tail_len: usize,
}

impl Utf8Stream {
    /// A check at the start of a stream.
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Forgets everything: the next chunk starts a new stream at offset 0.
    pub fn reset(&mut self) {
        *self = Utf8Stream::default();
    }

    /// Bytes fed so far (whole code points and the pending tail).
    pub fn fed(&self) -> usize {
        self.valid + self.tail_len
    }

    /// Checks `chunk`, the next bytes of the stream. `Err` as soon as the bytes so far cannot
    /// be the start of valid UTF-8; an incomplete code point at the end of `chunk` is kept for
    /// the next call. After an error the state is unspecified: [`Utf8Stream::reset`] it.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), Utf8StreamError> {
        let rest = if self.tail_len > 0 {
            match self.complete_tail(chunk)? {
                Some(rest) => rest,
                None => return Ok(()),
            }
        } else {
            chunk
        };
        match std::str::from_utf8(rest) {
            Ok(_) => {
                self.valid += rest.len();
                Ok(())
            }
            Err(e) => {
                let good = e.valid_up_to();
                if e.error_len().is_some() {
                    return Err(Utf8StreamError {
                        at: self.valid + good,
                    });
                }
                // At most 3 bytes: a longer incomplete sequence would have been invalid.
                let cut = &rest[good..];
                self.tail[..cut.len()].copy_from_slice(cut);
                self.tail_len = cut.len();
                self.valid += good;
                Ok(())
            }
        }
    }

    /// Ends the stream: `Err` when a code point was left incomplete.
    pub fn finish(&self) -> Result<(), Utf8StreamError> {
        if self.tail_len > 0 {
            return Err(Utf8StreamError { at: self.valid });
        }
        Ok(())
    }

    /// Adds the first bytes of `chunk` to the pending tail. `Ok(Some(rest))`: the code point is
    /// whole and valid, `rest` follows it; `Ok(None)`: `chunk` ran out and the tail is still a
    /// valid prefix; `Err`: the tail can no longer become valid.
    fn complete_tail<'a>(&mut self, chunk: &'a [u8]) -> Result<Option<&'a [u8]>, Utf8StreamError> {
        let width = sequence_width(self.tail[0]);
        let take = (width - self.tail_len).min(chunk.len());
        self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&chunk[..take]);
        self.tail_len += take;
        let invalid = Utf8StreamError { at: self.valid };
        match std::str::from_utf8(&self.tail[..self.tail_len]) {
            Ok(_) => {
                self.valid += self.tail_len;
                self.tail_len = 0;
                Ok(Some(&chunk[take..]))
            }
            Err(e) if e.error_len().is_none() && self.tail_len < width => Ok(None),
            Err(_) => Err(invalid),
        }
    }
}

/// Bytes of the sequence a lead byte starts. Only called on a pending tail's first byte, which
/// `from_utf8` accepted as the start of a sequence (C2-F4).
fn sequence_width(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` in order; the error of the first failing feed, or of `finish`.
    fn run(chunks: &[&[u8]]) -> Result<(), (usize, Utf8StreamError)> {
        let mut s = Utf8Stream::new();
        for (i, c) in chunks.iter().enumerate() {
            s.feed(c).map_err(|e| (i, e))?;
        }
        s.finish().map_err(|e| (chunks.len(), e))
    }

    #[test]
    fn whole_valid_text_in_one_chunk() {
        assert_eq!(run(&["κόσμε edited".as_bytes()]), Ok(()));
        assert_eq!(run(&[b""]), Ok(()));
    }

    #[test]
    fn every_split_of_valid_text_is_accepted() {
        let text = "aκ€😀z\u{10FFFF}".as_bytes();
        for i in 0..=text.len() {
            for j in i..=text.len() {
                assert_eq!(
                    run(&[&text[..i], &text[i..j], &text[j..]]),
                    Ok(()),
                    "{i} {j}"
                );
            }
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(run(&bytes), Ok(()));
    }

    #[test]
    fn invalid_byte_fails_on_its_chunk() {
        assert_eq!(
            run(&[b"ab\xFFcd", b"never"]),
            Err((0, Utf8StreamError { at: 2 }))
        );
        // Autobahn 6.4.3: the first chop is fine, the second (F4 90 80 80) fails at once.
        let part1 = b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5";
        assert_eq!(
            run(&[part1, b"\xf4\x90\x80\x80", b"edited"]),
            Err((1, Utf8StreamError { at: 11 }))
        );
    }

    #[test]
    fn invalid_continuation_of_a_carried_tail_fails_on_its_byte() {
        // Autobahn 6.4.4: F4 ends the first chop, 90 arrives alone.
        let part1 = b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xf4";
        assert_eq!(run(&[part1, b"\x90"]), Err((1, Utf8StreamError { at: 11 })));
        // A lead byte where a continuation byte is due.
        assert_eq!(
            run(&[b"\xe2\x82", b"A"]),
            Err((1, Utf8StreamError { at: 0 }))
        );
    }

    #[test]
    fn overlong_surrogate_and_too_big_fail_on_the_offending_byte() {
        let cases: [&[u8]; 6] = [
            b"\xc0\xaf",         // overlong '/' (C0 is never valid)
            b"\xe0\x80\xaf",     // overlong 3-byte: E0 then 80 is invalid
            b"\xf0\x80\x80\xaf", // overlong 4-byte: F0 then 80
            b"\xed\xa0\x80",     // U+D800, a surrogate: ED then A0
            b"\xf4\x90\x80\x80", // U+110000: F4 then 90
            b"\xf5\x80\x80\x80", // F5 is never valid
        ];
        for bad in cases {
            // Byte by byte: the error comes on the first or second byte, never later.
            let mut s = Utf8Stream::new();
            let failed_at = (0..bad.len()).find(|&i| s.feed(&bad[i..i + 1]).is_err());
            assert!(
                matches!(failed_at, Some(0 | 1)),
                "{bad:02x?}: {failed_at:?}"
            );
            // Whole.
            assert_eq!(
                run(&[bad]),
                Err((0, Utf8StreamError { at: 0 })),
                "{bad:02x?}"
            );
        }
    }

    #[test]
    fn truncated_code_point_at_the_end_fails_on_finish() {
        assert_eq!(run(&[b"ok\xe2\x82"]), Err((1, Utf8StreamError { at: 2 })));
        assert_eq!(
            run(&[b"ok\xf0", b"\x9f\x98"]),
            Err((2, Utf8StreamError { at: 2 }))
        );
    }

    #[test]
    fn offsets_count_from_the_start_of_the_stream() {
        let mut s = Utf8Stream::new();
        s.feed(b"abc").unwrap();
        s.feed(b"\xe2\x82").unwrap();
        assert_eq!(s.fed(), 5);
        s.feed(b"\xac").unwrap();
        assert_eq!(s.feed(b"xy\x80"), Err(Utf8StreamError { at: 8 }));
        s.reset();
        assert_eq!(s.fed(), 0);
        assert_eq!(s.feed(b"\x80"), Err(Utf8StreamError { at: 0 }));
    }
}
