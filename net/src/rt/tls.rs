//! TLS under [`super::Conn`]: rustls's sans-I/O connection driven by the shard's socket.
//!
//! A TLS connection is split like a plaintext one, but both halves share one
//! [`rustls::Connection`] (`Rc<RefCell<…>>`: it lives and dies on its shard, nothing here is
//! `Send`). The read half reads ciphertext, hands it to rustls and returns plaintext; the write
//! half encrypts into a per-connection buffer of at most [`WRITE_CHUNK_BYTES`] of plaintext at a
//! time and writes it. Bytes rustls produces while *reading* — the server's handshake flights,
//! TLS 1.3 session tickets, a key update's answer, an alert — must be written too, and the write
//! half may be idle or in the middle of a write. The socket's write side is therefore a token
//! ([`Shared::sock_w`]): whoever holds it writes everything pending, in order, before giving it
//! back; the reader writes its bytes itself when the token is free, and otherwise leaves them in
//! [`Shared::pending`] where the writer, which holds the token, picks them up before returning it.
//!
//! The server side's handshake runs inside the first reads, so it is done before a byte of the
//! HTTP head is returned and the caller's head deadline covers it. The client side completes the
//! handshake before [`super::Conn::connect_tls`] returns, so certificate errors surface there.
//!
//! A peer that speaks plaintext HTTP to a TLS port gets a plaintext `400` naming the scheme to
//! use, then the connection closes.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{self, BufRead, Write};
use std::rc::Rc;

use monoio::buf::IoBufMut;
use monoio::io::{
    AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, CancelableAsyncReadRent, Splitable,
};
use monoio::io::{Canceller, OwnedReadHalf, OwnedWriteHalf};
use monoio::net::TcpStream;

use super::{FrameVec, Watched};

/// Most ciphertext bytes one socket read takes (one full TLS record and its header). A read
/// takes the caller's `min_room` within [`READ_MIN_BYTES`, this]: an idle subscriber's read
/// waits on 512 bytes, as in plaintext, and rustls joins a record that spans several reads.
const READ_CHUNK_BYTES: usize = 16 * 1024 + 512;

/// Fewest ciphertext bytes one socket read asks for.
const READ_MIN_BYTES: usize = 512;

/// Most plaintext bytes encrypted before the ciphertext is written: the bound of a TLS
/// connection's write buffer (four full records; the plaintext path writes shared bytes with no
/// buffer at all).
pub const WRITE_CHUNK_BYTES: usize = 64 * 1024;

/// Capacity of the pending buffer kept between writes (one full record); a larger one, grown
/// by a large write, is given back when that write ends, so an idle connection keeps little.
const PENDING_KEPT_BYTES: usize = 16 * 1024 + 512;

/// The first byte of a TLS handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

/// What a plaintext HTTP request on a TLS port gets back.
const PLAINTEXT_REFUSAL: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\
Content-Length: 81\r\nConnection: close\r\n\r\n\
{\"error\":\"tls_required\",\"message\":\"this port speaks TLS: use https:// or wss://\"}";

/// The state both halves of one TLS connection share.
struct Shared {
    tls: RefCell<rustls::Connection>,
    /// The socket's write side while nobody writes with it (the write token, see [`Token`]).
    sock_w: Cell<Option<OwnedWriteHalf<TcpStream>>>,
    /// The write half, waiting for the token the read half holds.
    waiter: Cell<Option<std::task::Waker>>,
    /// Ciphertext taken out of `tls` and not yet written, in order.
    pending: RefCell<Vec<u8>>,
    /// Server side, no byte seen yet: the first one tells TLS from plaintext HTTP.
    first_read: Cell<bool>,
    /// The connection failed (a TLS error, a lost write side): every later call fails.
    broken: Cell<bool>,
}

/// The write token while held. [`Token::release`] gives it back (and wakes the write half if it
/// waits for it); dropped unreleased — its holder's future was cancelled in the middle of a write,
/// which may have left half a record on the wire — it marks the connection broken.
struct Token<'a> {
    shared: &'a Shared,
    w: Option<OwnedWriteHalf<TcpStream>>,
}

impl Token<'_> {
    fn w(&mut self) -> &mut OwnedWriteHalf<TcpStream> {
        self.w
            .as_mut()
            .expect("a token holds the write side until released")
    }

    fn release(mut self) {
        self.shared.sock_w.set(self.w.take());
        if let Some(waker) = self.shared.waiter.take() {
            waker.wake();
        }
    }
}

impl Drop for Token<'_> {
    fn drop(&mut self) {
        if self.w.is_some() {
            self.shared.broken.set(true);
            if let Some(waker) = self.shared.waiter.take() {
                waker.wake();
            }
        }
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "tls connection failed earlier")
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Shared {
    /// Moves every record rustls has queued into `pending`.
    fn take_output(&self) -> io::Result<()> {
        let mut tls = self.tls.borrow_mut();
        let mut pending = self.pending.borrow_mut();
        while tls.wants_write() {
            tls.write_tls(&mut *pending)?;
        }
        Ok(())
    }

    /// Writes `pending` (and whatever rustls queues meanwhile) with the token `w`, until both
    /// are empty.
    async fn write_pending(&self, w: &mut OwnedWriteHalf<TcpStream>) -> io::Result<()> {
        loop {
            self.take_output()?;
            let out = std::mem::take(&mut *self.pending.borrow_mut());
            if out.is_empty() {
                *self.pending.borrow_mut() = out;
                return Ok(());
            }
            let (res, mut back) = w.write_all(out).await;
            if let Err(e) = res {
                self.broken.set(true);
                return Err(e);
            }
            back.clear();
            let mut pending = self.pending.borrow_mut();
            // bytes the reader queued while this write was in flight stay first in line
            if pending.is_empty() {
                *pending = back;
            }
        }
    }

    /// Gives back the memory of a pending buffer a large write grew (see
    /// [`PENDING_KEPT_BYTES`]).
    fn trim_pending(&self) {
        let mut pending = self.pending.borrow_mut();
        if pending.is_empty() && pending.capacity() > PENDING_KEPT_BYTES {
            *pending = Vec::new();
        }
    }

    /// The token if it is free.
    fn try_token(&self) -> Option<Token<'_>> {
        self.sock_w.take().map(|w| Token {
            shared: self,
            w: Some(w),
        })
    }

    /// The token, once the read half gives it back; an error when the connection broke.
    async fn token(&self) -> io::Result<Token<'_>> {
        std::future::poll_fn(|cx| {
            if self.broken.get() {
                return std::task::Poll::Ready(Err(broken()));
            }
            match self.try_token() {
                Some(t) => std::task::Poll::Ready(Ok(t)),
                None => {
                    self.waiter.set(Some(cx.waker().clone()));
                    std::task::Poll::Pending
                }
            }
        })
        .await
    }

    /// Writes what is pending if the write side is free; otherwise its holder will.
    async fn flush(&self) -> io::Result<()> {
        let Some(mut t) = self.try_token() else {
            return Ok(());
        };
        let res = self.write_pending(t.w()).await;
        t.release();
        res
    }

    /// Hands `raw` ciphertext to rustls and appends the plaintext it yields to `out`. `Ok(true)`
    /// once the peer has closed the TLS session (close_notify) and nothing is left to read.
    fn absorb(&self, mut raw: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        let mut tls = self.tls.borrow_mut();
        while !raw.is_empty() {
            let n = tls.read_tls(&mut raw)?;
            if let Err(e) = tls.process_new_packets() {
                self.broken.set(true);
                // rustls queued the alert: the caller's flush sends it
                drop(tls);
                let _ = self.take_output();
                return Err(tls_error(e));
            }
            Self::drain(&mut tls, out)?;
            if n == 0 {
                break;
            }
        }
        Self::drain(&mut tls, out)
    }

    /// Moves decrypted plaintext into `out`; `Ok(true)` at the clean end of the session.
    fn drain(tls: &mut rustls::Connection, out: &mut Vec<u8>) -> io::Result<bool> {
        let mut reader = tls.reader();
        loop {
            match reader.fill_buf() {
                Ok([]) => return Ok(true),
                Ok(chunk) => {
                    let n = chunk.len();
                    out.extend_from_slice(chunk);
                    reader.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                // the TCP stream ended without close_notify: the end, as plaintext reads it
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Server side, first bytes: refuses plaintext HTTP with a readable answer.
    async fn check_first(&self, raw: &[u8]) -> io::Result<()> {
        if !self.first_read.replace(false) || raw.first() == Some(&HANDSHAKE_RECORD) {
            return Ok(());
        }
        self.broken.set(true);
        if raw.first().is_some_and(u8::is_ascii_alphabetic) {
            if let Some(mut t) = self.try_token() {
                let _ = t.w().write_all(PLAINTEXT_REFUSAL).await;
                let _ = t.w().shutdown().await;
                t.release();
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "plaintext on a TLS port (no TLS handshake record)",
        ))
    }
}

/// The reading half of a TLS connection.
pub(super) struct TlsRead {
    sock: OwnedReadHalf<TcpStream>,
    shared: Rc<Shared>,
    raw: Vec<u8>,
}

/// The writing half of a TLS connection.
pub(super) struct TlsWrite {
    shared: Rc<Shared>,
}

/// Splits `stream` into the two halves of a TLS connection run by `tls`.
pub(super) fn split(stream: TcpStream, tls: rustls::Connection) -> (TlsRead, TlsWrite) {
    let server = matches!(tls, rustls::Connection::Server(_));
    let (r, w) = stream.into_split();
    let shared = Rc::new(Shared {
        tls: RefCell::new(tls),
        sock_w: Cell::new(Some(w)),
        waiter: Cell::new(None),
        pending: RefCell::new(Vec::new()),
        first_read: Cell::new(server),
        broken: Cell::new(false),
    });
    (
        TlsRead {
            sock: r,
            shared: shared.clone(),
            raw: Vec::new(),
        },
        TlsWrite { shared },
    )
}

impl TlsRead {
    /// The peer's address.
    pub(super) fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.sock.peer_addr()
    }

    /// Reads ciphertext once; the plaintext goes to `out`. `Ok(true)` at the end of the stream.
    async fn read_once(&mut self, out: &mut Vec<u8>, max_bytes: usize) -> io::Result<bool> {
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        if raw.capacity() > max_bytes {
            // a larger read before (the request head): an idle wait keeps only what it asks
            raw = Vec::new();
        }
        raw.reserve(max_bytes);
        let (res, slice) = self.sock.read(raw.slice_mut(0..max_bytes)).await;
        self.raw = slice.into_inner();
        let n = res?;
        if n == 0 {
            return Ok(true);
        }
        self.shared.check_first(&self.raw).await?;
        let end = self.shared.absorb(&self.raw, out);
        self.shared.flush().await?;
        end
    }

    /// Drives the handshake to its end (the client side, before the first write).
    pub(super) async fn handshake(&mut self) -> io::Result<()> {
        let mut early = Vec::new();
        loop {
            self.shared.flush().await?;
            if !self.shared.tls.borrow().is_handshaking() {
                // a server does not send application data before our first request
                debug_assert!(early.is_empty());
                return Ok(());
            }
            if self.read_once(&mut early, READ_CHUNK_BYTES).await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// [`super::ReadHalf::read_into`]: plaintext appended to `buf` (at least `min_room` bytes
    /// reserved first when it is full); 0 at the end of the session.
    pub(super) async fn read_into(
        &mut self,
        mut buf: Vec<u8>,
        min_room: usize,
    ) -> (io::Result<usize>, Vec<u8>) {
        if self.shared.broken.get() {
            return (Err(broken()), buf);
        }
        if buf.capacity() - buf.len() < min_room {
            buf.reserve(min_room);
        }
        let start = buf.len();
        loop {
            let end = {
                let mut tls = self.shared.tls.borrow_mut();
                Shared::drain(&mut tls, &mut buf)
            };
            match end {
                Ok(_) if buf.len() > start => return (Ok(buf.len() - start), buf),
                Ok(true) => return (Ok(0), buf),
                Ok(false) => {}
                Err(e) => return (Err(e), buf),
            }
            let room = min_room.clamp(READ_MIN_BYTES, READ_CHUNK_BYTES);
            match self.read_once(&mut buf, room).await {
                Ok(true) if buf.len() == start => return (Ok(0), buf),
                Ok(_) => {}
                Err(e) => return (Err(e), buf),
            }
        }
    }

    /// [`super::ReadHalf::watch_while`] over TLS: one ciphertext read kept in flight beside
    /// `fut`, its plaintext appended to `held` (which may pass `max_held` by the plaintext of
    /// one read, at most [`super::WATCH_CHUNK`] bytes).
    pub(super) async fn watch_while<F: Future>(
        &mut self,
        held: &mut Vec<u8>,
        max_held: usize,
        fut: F,
    ) -> Watched<F::Output> {
        let mut fut = std::pin::pin!(fut);
        loop {
            let end = {
                let mut tls = self.shared.tls.borrow_mut();
                Shared::drain(&mut tls, held)
            };
            if !matches!(end, Ok(false)) || self.shared.broken.get() {
                return Watched::Closed;
            }
            if held.len() >= max_held {
                return Watched::Done(fut.await);
            }
            let mut raw = std::mem::take(&mut self.raw);
            raw.clear();
            if raw.capacity() > super::WATCH_CHUNK {
                raw = Vec::new();
            }
            raw.reserve(super::WATCH_CHUNK);
            let canceller = Canceller::new();
            let read = self
                .sock
                .cancelable_read(raw.slice_mut(0..super::WATCH_CHUNK), canceller.handle());
            let mut read = std::pin::pin!(read);
            let first = std::future::poll_fn(|cx| {
                if let std::task::Poll::Ready(out) = fut.as_mut().poll(cx) {
                    return std::task::Poll::Ready(Ok(out));
                }
                read.as_mut().poll(cx).map(Err)
            })
            .await;
            let (done, res, slice) = match first {
                Ok(out) => {
                    let _ = canceller.cancel();
                    let (res, slice) = read.await;
                    (Some(out), res, slice)
                }
                Err((res, slice)) => (None, res, slice),
            };
            self.raw = slice.into_inner();
            let closed = match res {
                Ok(n) if n > 0 => {
                    !matches!(self.shared.absorb(&self.raw, held), Ok(false))
                        || self.shared.flush().await.is_err()
                }
                // cancelled with nothing read: the connection is as it was
                Err(_) if done.is_some() => false,
                _ => true,
            };
            match done {
                Some(out) => return Watched::Done(out),
                None if closed => return Watched::Closed,
                None => {}
            }
        }
    }
}

impl TlsWrite {
    /// Encrypts `plain` and writes it, [`WRITE_CHUNK_BYTES`] at a time, with the token `w`.
    async fn encrypt_and_write(
        &self,
        w: &mut OwnedWriteHalf<TcpStream>,
        mut plain: &[u8],
        since_write: &mut usize,
    ) -> io::Result<()> {
        while !plain.is_empty() {
            let n = {
                let mut tls = self.shared.tls.borrow_mut();
                let room = WRITE_CHUNK_BYTES - *since_write;
                tls.writer().write(&plain[..plain.len().min(room)])?
            };
            plain = &plain[n..];
            *since_write += n;
            if n == 0 || *since_write >= WRITE_CHUNK_BYTES {
                self.shared.write_pending(w).await?;
                if n == 0 && *since_write == 0 {
                    // rustls takes nothing even with its buffers empty: no session yet
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "tls handshake not complete",
                    ));
                }
                *since_write = 0;
            }
        }
        Ok(())
    }

    /// [`super::WriteHalf::write_all`] over TLS.
    pub(super) async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let mut t = match self.shared.token().await {
            Ok(t) => t,
            Err(e) => return (Err(e), buf),
        };
        let mut since = 0;
        let mut res = self.encrypt_and_write(t.w(), &buf, &mut since).await;
        if res.is_ok() {
            res = self.shared.write_pending(t.w()).await;
        }
        t.release();
        self.shared.trim_pending();
        (res, buf)
    }

    /// [`super::WriteHalf::write_frames`] over TLS.
    pub(super) async fn write_frames(
        &mut self,
        mut frames: FrameVec,
    ) -> (io::Result<()>, FrameVec) {
        let mut t = match self.shared.token().await {
            Ok(t) => t,
            Err(e) => return (Err(e), frames),
        };
        let mut since = 0;
        let mut res = Ok(());
        for part in frames.slices() {
            res = self.encrypt_and_write(t.w(), part, &mut since).await;
            if res.is_err() {
                break;
            }
        }
        if res.is_ok() {
            res = self.shared.write_pending(t.w()).await;
        }
        t.release();
        self.shared.trim_pending();
        if res.is_ok() {
            frames.clear();
        }
        (res, frames)
    }

    /// Sends close_notify, then shuts the socket's write side.
    pub(super) async fn shutdown(&mut self) -> io::Result<()> {
        let mut t = self.shared.token().await?;
        self.shared.tls.borrow_mut().send_close_notify();
        let mut res = self.shared.write_pending(t.w()).await;
        if res.is_ok() {
            res = t.w().shutdown().await;
        }
        t.release();
        res
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use crate::rt::{self, Conn, FrameVec, Listener, Watched};

    /// A self-signed certificate for `localhost`: the server's config and a client's roots.
    fn pki() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    /// Reads plaintext until `want` bytes arrived.
    async fn read_exactly(rd: &mut rt::ReadHalf, want: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        while buf.len() < want {
            let (res, b) = rd.read_into(buf, 4096).await;
            buf = b;
            assert!(res.expect("read") > 0, "eof after {} bytes", buf.len());
        }
        buf
    }

    /// Our server side against rustls's blocking client: the handshake inside the first read
    /// (its last flight and the TLS 1.3 tickets written by the read side), a fan-out write of
    /// many shared parts (several write chunks), a key update the client asks for (rustls
    /// answers it before the next record it sends, RFC 8446 §4.6.3: here the pong), a watch
    /// that sees the peer go.
    #[test]
    fn server_side_reads_writes_answers_a_key_update_and_watches() {
        let (server_cfg, client_cfg) = pki();
        let mut rt = rt::build_runtime(256).unwrap();
        rt.block_on(async move {
            let listener = Listener::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let parts: Vec<Bytes> = (0..300u32)
                .map(|i| Bytes::from(vec![(i % 251) as u8; 1000 + i as usize]))
                .collect();
            let expected: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            let total = expected.len();
            assert!(total > 4 * super::WRITE_CHUNK_BYTES);
            let client = std::thread::spawn(move || {
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let conn = rustls::ClientConnection::new(client_cfg, name).unwrap();
                let sock = std::net::TcpStream::connect(addr).unwrap();
                sock.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut tls = rustls::StreamOwned::new(conn, sock);
                tls.write_all(b"ping\n").unwrap();
                let mut got = vec![0u8; total];
                tls.read_exact(&mut got).unwrap();
                assert!(got == expected, "the frames arrive intact");
                // asks the server to update its keys too: its answer comes while it reads
                tls.conn.refresh_traffic_keys().unwrap();
                tls.write_all(b"again\n").unwrap();
                let mut pong = [0u8; 5];
                tls.read_exact(&mut pong).unwrap();
                assert_eq!(&pong, b"pong\n");
                tls.conn.send_close_notify();
                tls.flush().unwrap();
            });
            let (conn, _) = listener.accept().await.unwrap();
            let conn = conn.tls_accept(&server_cfg).unwrap();
            assert!(conn.is_tls());
            let (mut rd, mut wr) = conn.split();
            assert_eq!(read_exactly(&mut rd, 5).await, b"ping\n");
            let mut frames = FrameVec::new();
            for p in &parts {
                frames.push(p.clone());
            }
            let (res, frames) = wr.write_frames(frames).await;
            res.unwrap();
            assert!(frames.is_empty());
            assert_eq!(read_exactly(&mut rd, 6).await, b"again\n");
            let (res, _) = wr.write_all(b"pong\n".to_vec()).await;
            res.unwrap();
            let mut held = Vec::new();
            let w = rd
                .watch_while(&mut held, 1024, rt::sleep(Duration::from_secs(10)))
                .await;
            assert_eq!(w, Watched::Closed);
            client.join().unwrap();
        });
    }

    /// Our client side against our server side, and plaintext HTTP on the TLS port.
    #[test]
    fn client_and_server_sides_and_a_plaintext_peer() {
        let (server_cfg, client_cfg) = pki();
        let mut rt = rt::build_runtime(256).unwrap();
        rt.block_on(async move {
            let listener = Listener::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let server = async {
                for _ in 0..2 {
                    let (conn, _) = listener.accept().await.unwrap();
                    let (mut rd, mut wr) = conn.tls_accept(&server_cfg).unwrap().split();
                    let (res, buf) = rd.read_into(Vec::new(), 64).await;
                    match res {
                        Ok(n) => {
                            let (res, _) = wr.write_all(buf[..n].to_vec()).await;
                            res.unwrap();
                            wr.shutdown().await.unwrap();
                        }
                        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidData),
                    }
                }
            };
            let client = async {
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let conn = Conn::connect_tls(addr, client_cfg, name).await.unwrap();
                let (mut rd, mut wr) = conn.split();
                let (res, _) = wr.write_all(b"hello".to_vec()).await;
                res.unwrap();
                assert_eq!(read_exactly(&mut rd, 5).await, b"hello");
                // the server's close_notify: a clean end
                let (res, _) = rd.read_into(Vec::new(), 64).await;
                assert_eq!(res.unwrap(), 0);
                // plaintext HTTP on the TLS port
                let plain = Conn::connect(addr).await.unwrap();
                let (mut rd, mut wr) = plain.split();
                let (res, _) = wr.write_all(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
                res.unwrap();
                let mut got = Vec::new();
                loop {
                    let (res, b) = rd.read_into(got, 512).await;
                    got = b;
                    if res.unwrap_or(0) == 0 {
                        break;
                    }
                }
                assert!(got.starts_with(b"HTTP/1.1 400"));
                assert_eq!(got, super::PLAINTEXT_REFUSAL);
            };
            futures_join(server, client).await;
        });
    }

    /// Runs two futures on this thread to completion.
    async fn futures_join<A: std::future::Future, B: std::future::Future>(a: A, b: B) {
        let mut a = std::pin::pin!(a);
        let mut b = std::pin::pin!(b);
        let (mut a_done, mut b_done) = (false, false);
        std::future::poll_fn(|cx| {
            if !a_done {
                a_done = a.as_mut().poll(cx).is_ready();
            }
            if !b_done {
                b_done = b.as_mut().poll(cx).is_ready();
            }
            if a_done && b_done {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}
