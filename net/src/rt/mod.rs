//! The runtime seam: every line that names monoio lives under this module.
//!
//! corecast runs one io_uring event loop per serving core (monoio 0.2.4). The rest of the
//! workspace sees only what is re-exported or wrapped here — a runtime builder that reports which
//! driver it got, TCP listeners and streams split into read and write halves, `spawn`, `sleep` and
//! `timeout`, and [`FrameVec`], the vectored-write buffer that lets many sockets share the same
//! frame bytes. Swapping the runtime (compio, say) means rewriting this module only.
//!
//! monoio's default "fusion" driver falls back to epoll silently when io_uring is unavailable
//! (seccomp, old kernels); [`build_runtime`] detects that and returns [`Driver::Fallback`] so the
//! caller can log it.
#![allow(unsafe_code)]

mod framevec;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use framevec::FrameVec;

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};

/// Which I/O driver a serving thread's runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// io_uring, the design's driver.
    IoUring,
    /// epoll (monoio's legacy driver): io_uring was not available here.
    Fallback,
}

impl Driver {
    /// The name `/stats` and `/metrics` report: `io_uring` or `fallback`.
    pub fn name(self) -> &'static str {
        match self {
            Driver::IoUring => "io_uring",
            Driver::Fallback => "fallback",
        }
    }
}

/// Whether io_uring works in this process (probes once; cached by monoio).
pub fn io_uring_available() -> bool {
    monoio::utils::detect_uring()
}

/// A serving thread's runtime, whichever driver it got.
pub struct Runtime {
    inner: monoio::FusionRuntime<
        monoio::time::TimeDriver<monoio::IoUringDriver>,
        monoio::time::TimeDriver<monoio::LegacyDriver>,
    >,
    driver: Driver,
}

impl Runtime {
    /// The driver this runtime runs on.
    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// Runs `fut` to completion on the current thread, driving every task spawned from it.
    pub fn block_on<F: Future>(&mut self, fut: F) -> F::Output {
        self.inner.block_on(fut)
    }
}

/// Builds the runtime for one serving thread with `entries` submission-queue slots.
///
/// Tries io_uring with `SINGLE_ISSUER` and `DEFER_TASKRUN` first (kernel ≥ 6.1), then plain
/// io_uring, then the epoll fallback. Errors only when none of them can be built.
pub fn build_runtime(entries: u32) -> io::Result<Runtime> {
    if io_uring_available() {
        let mut urb = io_uring::IoUring::builder();
        urb.setup_single_issuer().setup_defer_taskrun();
        let flagged = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .with_entries(entries)
            .uring_builder(urb)
            .enable_timer()
            .build();
        let rt = match flagged {
            Ok(rt) => Ok(rt),
            Err(_) => monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .with_entries(entries)
                .enable_timer()
                .build(),
        };
        if let Ok(inner) = rt {
            let driver = match &inner {
                monoio::FusionRuntime::Uring(_) => Driver::IoUring,
                monoio::FusionRuntime::Legacy(_) => Driver::Fallback,
            };
            return Ok(Runtime { inner, driver });
        }
    }
    let legacy = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()?;
    Ok(Runtime {
        inner: monoio::FusionRuntime::Legacy(legacy),
        driver: Driver::Fallback,
    })
}

/// Spawns a task on the current thread's runtime. The task runs detached.
pub fn spawn<F>(fut: F)
where
    F: Future + 'static,
    F::Output: 'static,
{
    drop(monoio::spawn(fut));
}

/// Sleeps for `d` on the current runtime's timer.
pub async fn sleep(d: Duration) {
    monoio::time::sleep(d).await
}

/// Runs `fut` for at most `d`; `None` when the time ran out (the future is dropped, cancelling
/// any I/O it had in flight).
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Option<F::Output> {
    monoio::time::timeout(d, fut).await.ok()
}

/// A listening socket bound with `SO_REUSEPORT`, one per serving thread.
pub struct Listener {
    inner: monoio::net::TcpListener,
}

impl Listener {
    /// Binds `addr` with `SO_REUSEPORT` and `SO_REUSEADDR` so every serving thread can hold its
    /// own listener on the same port and the kernel spreads accepts among them.
    pub fn bind_shared(addr: SocketAddr) -> io::Result<Listener> {
        let opts = monoio::net::ListenerOpts::new()
            .reuse_port(true)
            .reuse_addr(true)
            .backlog(4096);
        Ok(Listener {
            inner: monoio::net::TcpListener::bind_with_config(addr, &opts)?,
        })
    }

    /// Waits for the next connection; sets `TCP_NODELAY` on it.
    pub async fn accept(&self) -> io::Result<(Conn, SocketAddr)> {
        let (stream, peer) = self.inner.accept().await?;
        stream.set_nodelay(true)?;
        Ok((Conn { inner: stream }, peer))
    }
}

/// One accepted (or dialled) TCP connection.
pub struct Conn {
    inner: monoio::net::TcpStream,
}

impl Conn {
    /// Dials `addr` (client side: the client library and the load generator).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = monoio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn { inner: stream })
    }

    /// The peer's address (the client, on an accepted connection).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Splits the connection into halves that two tasks of this thread can drive at once.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        let (r, w) = self.inner.into_split();
        (ReadHalf { inner: r }, WriteHalf { inner: w })
    }
}

/// The reading half of a [`Conn`].
pub struct ReadHalf {
    inner: monoio::io::OwnedReadHalf<monoio::net::TcpStream>,
}

impl ReadHalf {
    /// Reads what is available into `buf`'s spare room, growing it by at least `min_room` bytes
    /// first when it is full. Returns `buf` and the count read (0 at end of stream).
    pub async fn read_into(
        &mut self,
        mut buf: Vec<u8>,
        min_room: usize,
    ) -> (io::Result<usize>, Vec<u8>) {
        if buf.capacity() - buf.len() < min_room {
            buf.reserve(min_room);
        }
        let len = buf.len();
        let cap = buf.capacity();
        let (res, slice) = self.inner.read(buf.slice_mut(len..cap)).await;
        (res, slice.into_inner())
    }
}

/// The writing half of a [`Conn`].
pub struct WriteHalf {
    inner: monoio::io::OwnedWriteHalf<monoio::net::TcpStream>,
}

impl WriteHalf {
    /// Writes all of `buf`; returns it for reuse.
    pub async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let (res, buf) = self.inner.write_all(buf).await;
        (res.map(|_| ()), buf)
    }

    /// Writes every byte `frames` covers with as few vectored writes as the socket allows
    /// (one, unless the kernel takes a part); returns the emptied [`FrameVec`] for reuse.
    pub async fn write_frames(&mut self, mut frames: FrameVec) -> (io::Result<()>, FrameVec) {
        while !frames.is_empty() {
            frames.prepare();
            let (res, back) = self.inner.writev(frames).await;
            frames = back;
            match res {
                Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), frames),
                Ok(n) => frames.advance(n),
                Err(e) => return (Err(e), frames),
            }
        }
        frames.clear();
        (Ok(()), frames)
    }

    /// Shuts the write side down (sends FIN).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.inner.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_builds_and_reports_a_driver() {
        let mut rt = build_runtime(256).expect("runtime");
        let d = rt.driver();
        assert!(matches!(d, Driver::IoUring | Driver::Fallback));
        assert_eq!(rt.block_on(async { 1 + 1 }), 2);
    }
}
