//! The runtime seam: every line that names monoio lives under this module.
//!
//! corecast runs one io_uring event loop per serving core (monoio 0.2.4). The rest of the
//! workspace sees only what is re-exported or wrapped here — a runtime builder that reports which
//! driver it got, TCP listeners and streams split into read and write halves (a read half can
//! watch for the peer going while another future runs: [`ReadHalf::watch_while`]), `spawn`,
//! `sleep`, `timeout` and a re-armable [`Timer`], and [`FrameVec`], the vectored-write buffer that lets many sockets share the same
//! frame bytes. Swapping the runtime (compio, say) means rewriting this module only.
//!
//! A connection is plaintext or TLS ([`Conn::tls_accept`], [`Conn::connect_tls`]; rustls,
//! driven in `tls.rs`): each type here is an enum over the two, so a plaintext connection keeps
//! its direct socket calls — no extra copy, buffer or `RefCell` — and the sessions never know
//! which one they hold.
//!
//! monoio's default "fusion" driver falls back to epoll silently when io_uring is unavailable
//! (seccomp, old kernels); [`build_runtime`] detects that and returns [`Driver::Fallback`] so the
//! caller can log it.
#![allow(unsafe_code)]

mod framevec;
mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

pub use framevec::FrameVec;

pub use tls::WRITE_CHUNK_BYTES as TLS_WRITE_CHUNK_BYTES;

use monoio::buf::IoBufMut;
use monoio::io::{
    AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, CancelableAsyncReadRent, Canceller, Splitable,
};

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

/// A one-shot timer that is armed once and moved, not created and dropped per use: a session
/// keeps one for its keepalive and its write-stall deadline ([`Timer::reset`] re-arms it in
/// place; creating and dropping a timer per write cost ~5 % of a shard's CPU at one frame per
/// write).
pub struct Timer {
    sleep: std::pin::Pin<Box<monoio::time::Sleep>>,
}

impl Timer {
    /// A timer that fires at `deadline` (at once when it has passed).
    pub fn at(deadline: std::time::Instant) -> Timer {
        Timer {
            sleep: Box::pin(monoio::time::sleep_until(monoio::time::Instant::from_std(
                deadline,
            ))),
        }
    }

    /// The instant it fires at.
    pub fn deadline(&self) -> std::time::Instant {
        self.sleep.deadline().into_std()
    }

    /// Re-arms it for `deadline`, whether or not it fired.
    pub fn reset(&mut self, deadline: std::time::Instant) {
        self.sleep
            .as_mut()
            .reset(monoio::time::Instant::from_std(deadline));
    }

    /// Waits until the deadline has passed (at once, and again at each call, once it has).
    pub fn wait(&mut self) -> impl Future<Output = ()> + '_ {
        self.sleep.as_mut()
    }
}

/// Runs `fut` unless `stop` finishes first: `Some(output)`, or `None` when `stop` won (then
/// `fut` is dropped, cancelling any I/O it had in flight). When both are ready at once, `fut`
/// wins.
pub async fn until<F: Future, S: Future>(fut: F, stop: S) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut stop = std::pin::pin!(stop);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        stop.as_mut().poll(cx).map(|_| None)
    })
    .await
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

    /// The bound address (the port the kernel picked for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Waits for the next connection; sets `TCP_NODELAY` on it.
    pub async fn accept(&self) -> io::Result<(Conn, SocketAddr)> {
        let (stream, peer) = self.inner.accept().await?;
        stream.set_nodelay(true)?;
        Ok((
            Conn {
                inner: ConnKind::Plain(stream),
            },
            peer,
        ))
    }
}

/// One accepted (or dialled) TCP connection, plaintext or TLS.
pub struct Conn {
    inner: ConnKind,
}

enum ConnKind {
    Plain(monoio::net::TcpStream),
    Tls(tls::TlsRead, tls::TlsWrite),
}

/// A TLS server configuration the listeners share (certificate, ALPN, versions).
pub type TlsServerConfig = Arc<rustls::ServerConfig>;

impl Conn {
    /// Dials `addr` (client side: the client library and the load generator).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = monoio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            inner: ConnKind::Plain(stream),
        })
    }

    /// Dials `addr` and completes a TLS handshake with `server_name` (the certificate must name
    /// it) under `config`; a certificate the roots do not vouch for fails here.
    pub async fn connect_tls(
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
        server_name: rustls::pki_types::ServerName<'static>,
    ) -> io::Result<Conn> {
        let stream = monoio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let tls = rustls::ClientConnection::new(config, server_name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (mut r, w) = tls::split(stream, rustls::Connection::Client(tls));
        r.handshake().await?;
        Ok(Conn {
            inner: ConnKind::Tls(r, w),
        })
    }

    /// Makes an accepted plaintext connection the server side of a TLS session under
    /// `config`. The handshake runs within the first reads, so it is complete before a byte
    /// of the request reaches the caller and the caller's deadline on those reads covers it.
    pub fn tls_accept(self, config: &TlsServerConfig) -> io::Result<Conn> {
        let ConnKind::Plain(stream) = self.inner else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the connection is TLS already",
            ));
        };
        let tls = rustls::ServerConnection::new(config.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (r, w) = tls::split(stream, rustls::Connection::Server(tls));
        Ok(Conn {
            inner: ConnKind::Tls(r, w),
        })
    }

    /// The peer's address (the client, on an accepted connection).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.inner {
            ConnKind::Plain(s) => s.peer_addr(),
            ConnKind::Tls(r, _) => r.peer_addr(),
        }
    }

    /// Whether this connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.inner, ConnKind::Tls(..))
    }

    /// Splits the connection into halves that two tasks of this thread can drive at once.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        match self.inner {
            ConnKind::Plain(s) => {
                let (r, w) = s.into_split();
                (
                    ReadHalf {
                        inner: ReadKind::Plain(r),
                    },
                    WriteHalf {
                        inner: WriteKind::Plain(w),
                    },
                )
            }
            ConnKind::Tls(r, w) => (
                ReadHalf {
                    inner: ReadKind::Tls(r),
                },
                WriteHalf {
                    inner: WriteKind::Tls(w),
                },
            ),
        }
    }
}

/// The reading half of a [`Conn`].
pub struct ReadHalf {
    inner: ReadKind,
}

enum ReadKind {
    Plain(monoio::io::OwnedReadHalf<monoio::net::TcpStream>),
    Tls(tls::TlsRead),
}

impl ReadHalf {
    /// Reads what is available into `buf`'s spare room, growing it by at least `min_room` bytes
    /// first when it is full. Returns `buf` and the count read (0 at end of stream). Over TLS
    /// the count is the plaintext of one socket read (≤ one 16 KiB record and a bit), which
    /// may pass the spare room: `buf` grows.
    // The TLS branches are boxed in every I/O method here: their futures are large (records,
    // the shared connection's state machine), and unboxed they would size every plaintext
    // future too — an idle plaintext subscriber's pending read grew by ~4.6 KB before this.
    pub async fn read_into(
        &mut self,
        mut buf: Vec<u8>,
        min_room: usize,
    ) -> (io::Result<usize>, Vec<u8>) {
        let inner = match &mut self.inner {
            ReadKind::Plain(r) => r,
            ReadKind::Tls(t) => return Box::pin(t.read_into(buf, min_room)).await,
        };
        if buf.capacity() - buf.len() < min_room {
            buf.reserve(min_room);
        }
        let len = buf.len();
        let cap = buf.capacity();
        let (res, slice) = inner.read(buf.slice_mut(len..cap)).await;
        (res, slice.into_inner())
    }
}

/// How [`ReadHalf::watch_while`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched<T> {
    /// The watched future finished first: its output.
    Done(T),
    /// The peer went first: a read returned 0 bytes (it closed) or an error (a reset, say). The
    /// watched future was dropped unfinished.
    Closed,
}

/// Most bytes [`ReadHalf::watch_while`] asks the socket for in one read.
pub(crate) const WATCH_CHUNK: usize = 4096;

impl ReadHalf {
    /// Runs `fut` to completion while watching this connection for the peer going away.
    ///
    /// One read is kept in flight beside `fut`. Bytes the peer sends meanwhile (a pipelined
    /// next request, say) are appended to `held` — never dropped, never interpreted — and the
    /// watch goes on; once `held` holds `max_held` bytes the socket is no longer read and this
    /// simply awaits `fut` (so a peer cannot make the server buffer without bound; its close is
    /// then noticed only when `fut` ends). A read that returns 0 bytes or an error ends the
    /// watch at once with [`Watched::Closed`], dropping `fut`. Note that a half-close (the peer
    /// shut only its write side) reads as 0 bytes too, so it counts as the peer going.
    ///
    /// When `fut` finishes first, the read in flight is cancelled and awaited to its end, so
    /// bytes that arrived in the race are still appended to `held`. Either way the connection
    /// is left in order for further reads and writes.
    pub async fn watch_while<F: Future>(
        &mut self,
        held: &mut Vec<u8>,
        max_held: usize,
        fut: F,
    ) -> Watched<F::Output> {
        let inner = match &mut self.inner {
            ReadKind::Plain(r) => r,
            ReadKind::Tls(t) => return Box::pin(t.watch_while(held, max_held, fut)).await,
        };
        let mut fut = std::pin::pin!(fut);
        loop {
            let room = max_held.saturating_sub(held.len()).min(WATCH_CHUNK);
            if room == 0 {
                return Watched::Done(fut.await);
            }
            let mut buf = std::mem::take(held);
            buf.reserve(room);
            let len = buf.len();
            let canceller = Canceller::new();
            let read = inner.cancelable_read(buf.slice_mut(len..len + room), canceller.handle());
            let mut read = std::pin::pin!(read);
            // `fut` first: when both are ready, the read's bytes are collected below anyway
            let first = std::future::poll_fn(|cx| {
                if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                    return Poll::Ready(Ok(out));
                }
                read.as_mut().poll(cx).map(Err)
            })
            .await;
            match first {
                Ok(out) => {
                    // the read ends with ECANCELED, or with what it had already read
                    let _ = canceller.cancel();
                    let (_, slice) = read.await;
                    *held = slice.into_inner();
                    return Watched::Done(out);
                }
                Err((res, slice)) => {
                    *held = slice.into_inner();
                    match res {
                        Ok(n) if n > 0 => {}
                        _ => return Watched::Closed,
                    }
                }
            }
        }
    }
}

/// One non-blocking `sendmsg` of the prepared iovecs of `frames` on `w`'s socket: the bytes the
/// kernel took, or `None` when it would block (its send buffer is full). `MSG_NOSIGNAL`: a peer
/// gone is an `EPIPE` error here, never a signal.
fn send_now(
    w: &monoio::io::OwnedWriteHalf<monoio::net::TcpStream>,
    frames: &FrameVec,
) -> io::Result<Option<usize>> {
    use monoio::buf::IoVecBuf;
    use std::os::unix::io::AsRawFd;
    // SAFETY: the write half shares the stream with the read half on this thread only; this
    // reads its descriptor, nothing else, and no `&mut` to the stream is alive meanwhile
    let fd = unsafe { &*w.0.get() }.as_raw_fd();
    // SAFETY: a zeroed msghdr is valid (no name, no control data); the iovecs point into
    // `frames`, borrowed for the call, and `sendmsg` only reads them
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = frames.read_iovec_ptr() as *mut libc::iovec;
    msg.msg_iovlen = frames.read_iovec_len() as _;
    loop {
        // SAFETY: `fd` is open for as long as `w` is; `msg` is valid (above)
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// A plaintext connection's socket as a non-blocking byte sink that the shard can write to
/// without a task: the fan-out hands a batch to a parked subscriber's socket itself
/// ([`WriteHalf::raw_sink`]). It is only a descriptor number: whoever holds one must stop using
/// it before the [`WriteHalf`] it came from is dropped (the descriptor may be reused after).
#[derive(Debug, Clone, Copy)]
pub struct RawSink {
    fd: std::os::unix::io::RawFd,
}

impl RawSink {
    /// One non-blocking `sendmsg` of `bufs` (≤ [`FrameVec::MAX_IOV`] of them), in order: the
    /// bytes the kernel took (possibly fewer than all), or `None` when it would block.
    /// `MSG_NOSIGNAL`: a peer gone is an error.
    pub fn try_send(&self, bufs: &[std::io::IoSlice<'_>]) -> io::Result<Option<usize>> {
        // SAFETY: a zeroed msghdr is valid (no name, no control data); `IoSlice` is
        // ABI-compatible with `iovec` on Unix, and `bufs` is borrowed for the call
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len().min(FrameVec::MAX_IOV) as _;
        loop {
            // SAFETY: `msg` is valid (above) and only read; a stale descriptor makes the call
            // fail (or, reused, write elsewhere), never touch this process's memory
            let n =
                unsafe { libc::sendmsg(self.fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }
}

/// The writing half of a [`Conn`].
pub struct WriteHalf {
    inner: WriteKind,
}

enum WriteKind {
    Plain(monoio::io::OwnedWriteHalf<monoio::net::TcpStream>),
    Tls(tls::TlsWrite),
}

impl WriteHalf {
    /// The socket as a [`RawSink`]; `None` over TLS (its bytes must go through the session).
    pub fn raw_sink(&self) -> Option<RawSink> {
        use std::os::unix::io::AsRawFd;
        match &self.inner {
            // SAFETY: reads the descriptor of the stream this thread shares; no `&mut` to it
            // is alive meanwhile
            WriteKind::Plain(w) => Some(RawSink {
                fd: unsafe { &*w.0.get() }.as_raw_fd(),
            }),
            WriteKind::Tls(_) => None,
        }
    }

    /// Writes all of `buf`; returns it for reuse.
    pub async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        match &mut self.inner {
            WriteKind::Plain(w) => {
                let (res, buf) = w.write_all(buf).await;
                (res.map(|_| ()), buf)
            }
            WriteKind::Tls(t) => Box::pin(t.write_all(buf)).await,
        }
    }

    /// Writes every byte `frames` covers with as few vectored writes as the socket allows
    /// (one, unless the kernel takes a part); returns the emptied [`FrameVec`] for reuse.
    ///
    /// On a plaintext socket each write is first tried as a non-blocking `sendmsg` made at once
    /// (`MSG_DONTWAIT`): when the socket has room — nearly always, for a subscriber keeping up —
    /// the future is ready on its first poll, without an io_uring submission, a completion, or
    /// a wake-up of the task to collect it. Only what the kernel would not take goes through the
    /// runtime's `writev`, which waits for room. Over
    /// TLS the parts are encrypted into the connection's buffer and written
    /// [`TLS_WRITE_CHUNK_BYTES`] of plaintext at a time.
    pub async fn write_frames(&mut self, mut frames: FrameVec) -> (io::Result<()>, FrameVec) {
        let inner = match &mut self.inner {
            WriteKind::Plain(w) => w,
            WriteKind::Tls(t) => return Box::pin(t.write_frames(frames)).await,
        };
        while !frames.is_empty() {
            frames.prepare();
            // the socket usually has room: hand the bytes to the kernel now, in this poll —
            // no submission, no completion to wait for, no second poll of the task
            match send_now(inner, &frames) {
                Ok(Some(0)) => return (Err(io::ErrorKind::WriteZero.into()), frames),
                Ok(Some(n)) => {
                    frames.advance(n);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return (Err(e), frames),
            }
            // it would block: the runtime's write waits for room (and is what a stall times)
            let (res, back) = inner.writev(frames).await;
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

    /// Shuts the write side down (sends FIN; over TLS, close_notify first).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match &mut self.inner {
            WriteKind::Plain(w) => w.shutdown().await,
            WriteKind::Tls(t) => Box::pin(t.shutdown()).await,
        }
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

    /// The default runtime (io_uring where the kernel allows) and the epoll fallback: the
    /// watch tests run on both drivers.
    fn runtimes() -> Vec<Runtime> {
        let legacy = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("legacy runtime");
        vec![
            build_runtime(256).expect("runtime"),
            Runtime {
                inner: monoio::FusionRuntime::Legacy(legacy),
                driver: Driver::Fallback,
            },
        ]
    }

    /// A connected pair: our [`ReadHalf`]/[`WriteHalf`] and the peer's std socket.
    async fn pair() -> (ReadHalf, WriteHalf, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = Conn::connect(l.local_addr().unwrap()).await.unwrap();
        let (peer, _) = l.accept().unwrap();
        let (rd, wr) = conn.split();
        (rd, wr, peer)
    }

    #[test]
    fn watch_while_ends_when_the_peer_closes() {
        for mut rt in runtimes() {
            rt.block_on(async {
                let (mut rd, _wr, peer) = pair().await;
                sleep(Duration::from_millis(20)).await;
                drop(peer);
                let t0 = std::time::Instant::now();
                let mut held = Vec::new();
                let w = rd
                    .watch_while(&mut held, 1024, sleep(Duration::from_secs(10)))
                    .await;
                assert_eq!(w, Watched::Closed);
                assert!(t0.elapsed() < Duration::from_secs(2));
            });
        }
    }

    #[test]
    fn watch_while_holds_what_the_peer_sends_and_keeps_watching() {
        use std::io::Write;
        for mut rt in runtimes() {
            rt.block_on(async {
                let (mut rd, _wr, mut peer) = pair().await;
                let mut held = b"GET".to_vec();
                peer.write_all(b" /a").unwrap();
                let w = rd
                    .watch_while(&mut held, 1024, async {
                        sleep(Duration::from_millis(100)).await;
                        7
                    })
                    .await;
                assert_eq!(w, Watched::Done(7));
                assert_eq!(held, b"GET /a");
                // a future ready at once: the cancelled read loses nothing
                peer.write_all(b" HTTP").unwrap();
                sleep(Duration::from_millis(20)).await;
                assert_eq!(
                    rd.watch_while(&mut held, 1024, async {}).await,
                    Watched::Done(())
                );
                let mut rest = Vec::new();
                if held.len() < 11 {
                    let (res, b) = rd.read_into(rest, 64).await;
                    assert!(res.unwrap() > 0);
                    rest = b;
                }
                held.extend_from_slice(&rest);
                assert_eq!(held, b"GET /a HTTP");
                // the watch goes on after data: a close is still noticed
                drop(peer);
                let w = rd
                    .watch_while(&mut held, 1024, sleep(Duration::from_secs(10)))
                    .await;
                assert_eq!(w, Watched::Closed);
            });
        }
    }

    #[test]
    fn watch_while_stops_reading_at_max_held() {
        use std::io::Write;
        for mut rt in runtimes() {
            rt.block_on(async {
                let (mut rd, _wr, mut peer) = pair().await;
                peer.write_all(b"abcdef").unwrap();
                drop(peer);
                let mut held = Vec::new();
                let w = rd
                    .watch_while(&mut held, 2, sleep(Duration::from_millis(100)))
                    .await;
                assert_eq!(w, Watched::Done(()));
                assert_eq!(held, b"ab");
            });
        }
    }
}
