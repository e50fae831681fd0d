//! [`FrameVec`]: a vectored-write buffer over shared frame bytes.
//!
//! Fan-out writes the same committed frames to many sockets. Each subscriber gathers the
//! [`Bytes`] slices it is owed (reference-counted views of one batch buffer, never copies) and
//! hands them to one `writev`. The iovec array lives beside the slices so its address stays fixed
//! while the kernel owns it, as monoio's `IoVecBuf` contract requires.

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;

/// Shared byte slices to be written in order by one vectored write.
///
/// At most [`FrameVec::MAX_IOV`] slices are passed to one `writev` (the kernel's `IOV_MAX`);
/// [`super::WriteHalf::write_frames`] loops until every byte is written.
#[derive(Default)]
pub struct FrameVec {
    parts: Vec<Bytes>,
    iov: Vec<libc::iovec>,
    total: usize,
}

impl FrameVec {
    /// The most slices one `writev` takes (Linux `IOV_MAX`).
    pub const MAX_IOV: usize = 1024;

    /// An empty buffer.
    pub fn new() -> FrameVec {
        FrameVec::default()
    }

    /// Appends a slice; an empty one is ignored.
    pub fn push(&mut self, part: Bytes) {
        if part.is_empty() {
            return;
        }
        self.total += part.len();
        self.parts.push(part);
        self.iov.clear();
    }

    /// Bytes still to write.
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether nothing is left to write.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Number of slices held.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Drops everything held (the iovec and slice arrays keep their capacity).
    pub fn clear(&mut self) {
        self.parts.clear();
        self.iov.clear();
        self.total = 0;
    }

    /// When empty, gives back the memory of arrays grown past [`Self::KEPT`] slices (a
    /// catch-up write of 1,024 slices leaves ~48 KiB of capacity that an idle subscriber would
    /// otherwise keep for good).
    pub fn trim(&mut self) {
        if self.total == 0 && self.parts.capacity() > Self::KEPT {
            self.parts = Vec::new();
            self.iov = Vec::new();
        }
    }

    /// Slices whose arrays [`trim`](Self::trim) keeps.
    pub const KEPT: usize = 64;

    /// Marks the first `n` bytes written: fully written slices are released, a partly written
    /// one is trimmed.
    pub fn advance(&mut self, mut n: usize) {
        self.total -= n.min(self.total);
        let mut done = 0;
        for part in self.parts.iter_mut() {
            if n == 0 {
                break;
            }
            if n >= part.len() {
                n -= part.len();
                done += 1;
            } else {
                part.advance(n);
                n = 0;
            }
        }
        self.parts.drain(..done);
        self.iov.clear();
    }

    fn rebuild(&mut self) {
        if self.iov.is_empty() {
            self.iov
                .extend(self.parts.iter().take(Self::MAX_IOV).map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                }));
        }
    }
}

// SAFETY: `read_iovec_ptr` points into `self.iov`, which is rebuilt only through `&mut self`
// methods (never while the runtime owns the value), and every iovec points into a `Bytes` held in
// `self.parts`, whose heap storage does not move while it is held.
unsafe impl IoVecBuf for FrameVec {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iov.as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        self.iov.len()
    }
}

impl FrameVec {
    /// The slices still to write, in order (the TLS path encrypts them one by one).
    pub(crate) fn slices(&self) -> impl Iterator<Item = &[u8]> {
        self.parts.iter().map(|p| &p[..])
    }

    /// Prepares the iovec array before a write; called by the write path.
    pub(crate) fn prepare(&mut self) {
        self.rebuild();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_releases_and_trims() {
        let mut v = FrameVec::new();
        v.push(Bytes::from_static(b"abc"));
        v.push(Bytes::from_static(b"defg"));
        v.prepare();
        assert_eq!(v.read_iovec_len(), 2);
        v.advance(4);
        assert_eq!(v.len(), 3);
        assert_eq!(v.parts(), 1);
        v.prepare();
        assert_eq!(v.read_iovec_len(), 1);
        v.advance(3);
        assert!(v.is_empty());
    }
}
