//! The serving side of the tcp data plane: checks every request (instance, bounds, and the
//! region's rights for peers: local-only memory is refused as if unregistered, a direction the
//! region is not exported for is `AccessDenied`) and leases its range, then reads straight into
//! (or writes straight from) registered memory, one non-blocking syscall per access.
//! Unregistering the range revokes the lease: the connection is shut down at once (the
//! peer sees its request fail), whatever the peer still sends.
//!
//! Admission: at most `max_connections` connections are served at once (the next accept waits
//! for a slot, so the kernel's backlog pushes back), of which at most [`MAX_HELLOS`] may still
//! be in their hello (more are closed at once, so peers without the token cannot crowd out
//! admitted ones); each must complete its hello within `hello_timeout` (magic and version first,
//! then the token, before anything else is read); each payload, and each batch of answers, must
//! move within `payload_timeout`; and TCP keepalive finds initiators whose host went away.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use yuebing_rpc::Token;

use super::spin::spin_then_park;
use super::wire::{
    check_hello, HelloStatus, RequestHeader, ResponseHeader, HELLO_FIXED, REQUEST_LEN,
};
use super::{read_header, BULK, IO_BUFFER};
use crate::error::Error;
use crate::memory::raw::{self, Part, Span};
use crate::memory::{Lease, MemoryRegistry};
use crate::request::Opcode;
use crate::transport::Backoff;

/// What the serving side needs.
pub(crate) struct Target {
    pub(crate) memory: Arc<MemoryRegistry>,
    pub(crate) instance: u64,
    pub(crate) token: Option<Token>,
    /// Largest slice accepted; a larger request is a protocol error.
    pub(crate) max_slice: u64,
    /// Connections served at once, at most.
    pub(crate) max_connections: usize,
    /// Time a new connection has to complete its hello.
    pub(crate) hello_timeout: Duration,
    /// Time a payload has to move once its header arrived.
    pub(crate) payload_timeout: Duration,
    /// How long to poll for the next request after answering a lone one.
    pub(crate) spin: Duration,
}

/// Accepts data connections until `stop` is cancelled, at most `max_connections` at once.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    target: Arc<Target>,
    stop: CancellationToken,
    handle: Handle,
) {
    let slots = Arc::new(Semaphore::new(target.max_connections.max(1)));
    let hellos = Arc::new(Semaphore::new(MAX_HELLOS));
    let mut backoff = Backoff::default();
    loop {
        // A slot first: past the cap, connections wait in the kernel's backlog.
        let slot = tokio::select! {
            _ = stop.cancelled() => return,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors, say: wait, longer each time, instead of spinning.
                    tracing::warn!(error = %e, "tcp data accept failed");
                    tokio::time::sleep(backoff.next()).await;
                    continue;
                }
            },
        };
        backoff = Backoff::default();
        let Ok(hello_slot) = hellos.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "closed a tcp data connection: {MAX_HELLOS} hellos under way");
            continue;
        };
        let _ = stream.set_nodelay(true);
        keep_alive(&stream);
        let (target, stop) = (target.clone(), stop.clone());
        handle.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                r = serve(stream, &target, &peer, hello_slot) => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "tcp data connection closed");
                },
            }
            drop(slot);
        });
    }
}

/// Connections still in their hello, at most: past it new ones are closed at once.
pub(crate) const MAX_HELLOS: usize = 128;

/// TCP keepalive on a data connection: an initiator whose host went away (no FIN, no RST) is
/// found within about two minutes, and its slot freed.
fn keep_alive(stream: &TcpStream) {
    use rustix::net::sockopt;
    let set = sockopt::set_socket_keepalive(stream, true)
        .and_then(|()| sockopt::set_tcp_keepidle(stream, Duration::from_secs(60)))
        .and_then(|()| sockopt::set_tcp_keepintvl(stream, Duration::from_secs(10)))
        .and_then(|()| sockopt::set_tcp_keepcnt(stream, 6));
    if let Err(e) = set {
        tracing::debug!(error = %e, "tcp keepalive not set");
    }
}

/// Reads the hello and answers it: `Some(why)` when the connection is refused. The magic and
/// version are checked before the token's length is trusted, the token before anything else
/// is read.
async fn hello(s: &mut TcpStream, target: &Target) -> io::Result<Option<&'static str>> {
    let mut fixed = [0u8; HELLO_FIXED];
    s.read_exact(&mut fixed).await?;
    let status = match check_hello(&fixed) {
        Err(status) => status,
        Ok(len) => {
            let mut token = vec![0u8; len];
            s.read_exact(&mut token).await?;
            let given = (!token.is_empty()).then_some(&token[..]);
            match Token::admits(target.token.as_ref(), given) {
                true => HelloStatus::Accepted,
                false => HelloStatus::BadToken,
            }
        }
    };
    s.write_u8(status as u8).await?;
    Ok(match status {
        HelloStatus::Accepted => None,
        HelloStatus::BadVersion => Some("not a yuebing data connection or an unknown version"),
        HelloStatus::BadToken => Some("missing or wrong cluster token"),
    })
}

/// `io` within `limit`, or a `TimedOut` error naming `what`.
async fn within<T>(
    limit: Duration,
    what: &str,
    io: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(limit, io).await.unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} took longer than {limit:?}"),
        ))
    })
}

/// The error that shuts a connection down when the region its request leases is unregistered:
/// the peer sees its request fail, and nothing waits for it.
fn released() -> io::Error {
    io::Error::other("the target region was unregistered mid-request")
}

/// Whether a copy failed because the range's pages are gone (a file truncated under its
/// mapping): that request fails, the connection goes on.
fn lost(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT)
}

/// The status a request whose range lost its pages is answered with.
fn lost_status() -> i32 {
    Error::Io {
        reason: String::new(),
    }
    .code()
}

/// Reads `n` bytes of payload and drops them, keeping the stream in step.
async fn skip(rd: &mut BufReader<ReadHalf<'_>>, n: u64) -> io::Result<()> {
    let (mut payload, mut sink) = ((&mut *rd).take(n), tokio::io::sink());
    let skipped = tokio::io::copy(&mut payload, &mut sink).await?;
    match skipped == n {
        true => Ok(()),
        false => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// Receives a write's payload into the leased range: what the buffer holds, then straight from
/// the socket. Gives up the moment the lease is revoked. Returns whether it landed: if the
/// range's pages are gone (a truncated file), the rest of the payload is read and dropped.
async fn receive(rd: &mut BufReader<ReadHalf<'_>>, lease: &Lease) -> io::Result<bool> {
    let len = lease.len();
    let n = rd.buffer().len().min(len as usize);
    if n > 0 {
        let copied = {
            let access = lease.access().ok_or_else(released)?;
            raw::copy_in(&rd.buffer()[..n], access.span())
        };
        match copied {
            Ok(_) => rd.consume(n),
            Err(e) if lost(&e) => return skip(rd, len).await.map(|()| false),
            Err(e) => return Err(e),
        }
    }
    let stream: &TcpStream = rd.get_ref().as_ref();
    match leased_io(stream, lease, n, Interest::READABLE, raw::recv).await? {
        None => Ok(true),
        // A recv that faults takes nothing from the socket: the rest is still there.
        Some(at) => skip(rd, len - at as u64).await.map(|()| false),
    }
}

/// Sends a read's payload from the leased range straight to the socket. Gives up the moment
/// the lease is revoked; and if the range's pages are gone (a truncated file), with its answer
/// already sent, the connection cannot stay in step and is closed.
async fn send(stream: &TcpStream, lease: &Lease) -> io::Result<()> {
    fn send_span(fd: BorrowedFd<'_>, span: Span<'_>) -> io::Result<usize> {
        raw::send(fd, &[Part::Raw(span)])
    }
    match leased_io(stream, lease, 0, Interest::WRITABLE, send_span).await? {
        None => Ok(()),
        Some(_) => Err(io::Error::other(
            "the memory of a read was lost mid-payload (its file was truncated)",
        )),
    }
}

/// Moves the leased range from `pos` on between it and the socket, one non-blocking `op`
/// (`recv` or `sendmsg`) per access, until all of it moved (`None`), the range's pages are
/// found gone (`Some(position)`: nothing moved from there on), or the lease is revoked.
async fn leased_io(
    stream: &TcpStream,
    lease: &Lease,
    mut pos: usize,
    interest: Interest,
    op: impl Fn(BorrowedFd<'_>, Span<'_>) -> io::Result<usize>,
) -> io::Result<Option<usize>> {
    let len = lease.len() as usize;
    // Registered with the region once per request, not at every wait.
    let revoked = lease.revoked();
    tokio::pin!(revoked);
    while pos < len {
        let moved = stream.try_io(interest, || {
            let access = lease.access().ok_or_else(released)?;
            op(stream.as_fd(), access.span().tail(pos))
        });
        match moved {
            Ok(0) if interest == Interest::READABLE => {
                return Err(io::ErrorKind::UnexpectedEof.into())
            }
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => pos += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::select! {
                    biased;
                    _ = &mut revoked => return Err(released()),
                    r = stream.ready(interest) => { r?; }
                }
            }
            Err(e) if lost(&e) => return Ok(Some(pos)),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Answers gathered into one buffer, so that many small ones leave in one syscall.
struct Answers<'a> {
    wr: WriteHalf<'a>,
    buf: Vec<u8>,
}

impl Answers<'_> {
    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Answers a small read: its header with `ok`, and its payload copied from the leased
    /// range; if the range's pages are gone (a truncated file), the header with `lost`
    /// instead, and no payload.
    fn push_read(&mut self, lease: &Lease, ok: &[u8], lost_reply: &[u8]) -> io::Result<()> {
        let access = lease.access().ok_or_else(released)?;
        let start = self.buf.len();
        self.push(ok);
        let at = self.buf.len();
        self.buf.resize(at + lease.len() as usize, 0);
        match raw::copy_out(access.span(), &mut self.buf[at..]) {
            Ok(_) => Ok(()),
            Err(e) if lost(&e) => {
                self.buf.truncate(start);
                self.push(lost_reply);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Sends what is gathered.
    async fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.wr.write_all(&self.buf).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Sends what is gathered once it fills the buffer.
    async fn flush_if_full(&mut self) -> io::Result<()> {
        match self.buf.len() >= IO_BUFFER {
            true => self.flush().await,
            false => Ok(()),
        }
    }
}

async fn serve(
    mut s: TcpStream,
    target: &Target,
    peer: &SocketAddr,
    hello_slot: OwnedSemaphorePermit,
) -> io::Result<()> {
    if let Some(why) = within(target.hello_timeout, "the hello", hello(&mut s, target)).await? {
        tracing::warn!(%peer, "refused a tcp data connection: {why}");
        return Ok(());
    }
    drop(hello_slot);
    let limit = target.payload_timeout;
    let (rd, wr) = s.split();
    // Buffered both ways: small requests arrive many per read and their answers leave many per
    // write; the rest of a payload moves straight between the socket and registered memory.
    let mut rd = BufReader::with_capacity(IO_BUFFER, rd);
    let mut out = Answers {
        wr,
        buf: Vec::with_capacity(IO_BUFFER + BULK as usize),
    };
    let mut header = [0u8; REQUEST_LEN];
    let (mut bulk, mut lone) = (false, false);
    loop {
        let mut spin = Duration::ZERO;
        if rd.buffer().len() < REQUEST_LEN {
            // About to wait for the next request: send the answers gathered so far.
            within(limit, "sending answers", out.flush()).await?;
            if lone {
                // The initiator waited for that answer alone: its next request is likely to
                // follow within a round trip.
                spin = target.spin;
            }
        }
        match spin_then_park(read_header(&mut rd, &mut header, bulk), spin, || true).await {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let req = RequestHeader::decode(&header).map_err(io::Error::other)?;
        (bulk, lone) = (req.len >= BULK, req.lone);
        if req.len > target.max_slice {
            return Err(io::Error::other(format!(
                "slice of {} bytes over the limit",
                req.len
            )));
        }
        let checked = if req.instance != target.instance {
            Err(Error::StaleSegment {
                segment: String::new(),
                expected: req.instance,
                actual: target.instance,
            })
        } else {
            // A peer reaches only memory exported with the right for its request's direction.
            target
                .memory
                .check_peer_access(req.addr, req.len, req.opcode)
        };
        let reply = |status: i32| {
            ResponseHeader {
                status,
                req_id: req.req_id,
                extra: target.instance,
            }
            .encode()
        };
        match (req.opcode, checked) {
            (Opcode::Write, Ok(lease)) => {
                let landed = within(limit, "a write's payload", receive(&mut rd, &lease)).await?;
                // The ack is queued only after every byte landed in the destination.
                out.push(&reply(if landed { 0 } else { lost_status() }));
            }
            (Opcode::Write, Err(e)) => {
                within(limit, "a refused write's payload", skip(&mut rd, req.len)).await?;
                out.push(&reply(e.code()));
            }
            (Opcode::Read, Ok(lease)) => {
                if req.len < BULK {
                    out.push_read(&lease, &reply(0), &reply(lost_status()))?;
                } else {
                    out.push(&reply(0));
                    within(limit, "sending answers", out.flush()).await?;
                    within(limit, "a read's payload", send(out.wr.as_ref(), &lease)).await?;
                }
            }
            (Opcode::Read, Err(e)) => out.push(&reply(e.code())),
        }
        within(limit, "sending answers", out.flush_if_full()).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::wire::{ResponseHeader, HELLO_MAGIC, HELLO_MAGIC_V1, RESPONSE_LEN};

    fn a_target(token: Option<&str>, max_connections: usize) -> Target {
        Target {
            memory: Arc::new(MemoryRegistry::default()),
            instance: 7,
            token: token.map(|t| Token::new(t).unwrap()),
            max_slice: 1 << 20,
            max_connections,
            hello_timeout: Duration::from_millis(300),
            payload_timeout: Duration::from_millis(300),
            spin: Duration::ZERO,
        }
    }

    /// Serves `target` on 127.0.0.1 until the guard is dropped; returns its address.
    async fn serving(target: Target) -> (SocketAddr, tokio_util::sync::DropGuard) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let handle = Handle::current();
        tokio::spawn(accept_loop(
            listener,
            Arc::new(target),
            stop.clone(),
            handle,
        ));
        (addr, stop.drop_guard())
    }

    /// Serves one connection on 127.0.0.1 and returns the client's end.
    async fn connect_to_a_target() -> TcpStream {
        let (addr, stop) = serving(a_target(None, 8)).await;
        std::mem::forget(stop);
        TcpStream::connect(addr).await.unwrap()
    }

    /// Whether the target closes `s` (end of stream or reset) within `limit`, reading and
    /// discarding whatever it answers first.
    async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
        let mut sink = Vec::new();
        tokio::time::timeout(limit, s.read_to_end(&mut sink))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn garbage_a_partial_hello_or_http_is_closed_within_the_hello_deadline() {
        let (addr, _stop) = serving(a_target(Some("t0ken"), 8)).await;
        let sends: [&[u8]; 4] = [
            b"",
            b"YBTCP\0",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            &[0xAB; 64],
        ];
        for bytes in sends {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(bytes).await.unwrap();
            let started = std::time::Instant::now();
            assert!(
                closed_within(&mut s, Duration::from_secs(5)).await,
                "{bytes:?} kept open"
            );
            assert!(started.elapsed() < Duration::from_secs(3), "{bytes:?}");
        }
        // A hello announcing a huge token is refused on its fixed part, nothing waited for.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&HELLO_MAGIC).await.unwrap();
        s.write_u16(u16::MAX).await.unwrap();
        assert_eq!(s.read_u8().await.unwrap(), HelloStatus::BadVersion as u8);
    }

    #[tokio::test]
    async fn a_wrong_or_missing_token_is_refused_before_anything_else_is_read() {
        let (addr, _stop) = serving(a_target(Some("t0ken"), 8)).await;
        for token in [None, Some("wr0ng")] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let token = token.map(|t| Token::new(t).unwrap());
            s.write_all(&super::super::wire::encode_hello(token.as_ref()))
                .await
                .unwrap();
            assert_eq!(s.read_u8().await.unwrap(), HelloStatus::BadToken as u8);
            assert!(closed_within(&mut s, Duration::from_secs(5)).await);
        }
        let mut s = TcpStream::connect(addr).await.unwrap();
        let token = Token::new("t0ken").unwrap();
        s.write_all(&super::super::wire::encode_hello(Some(&token)))
            .await
            .unwrap();
        assert_eq!(s.read_u8().await.unwrap(), HelloStatus::Accepted as u8);
    }

    #[tokio::test]
    async fn peers_stuck_in_their_hello_cannot_take_every_slot() {
        let target = Target {
            hello_timeout: Duration::from_secs(30),
            ..a_target(None, 1024)
        };
        let (addr, _stop) = serving(target).await;
        let mut idle = Vec::new();
        for _ in 0..MAX_HELLOS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Every hello slot is taken: one more connection is closed at once, hello or not.
        let mut late = TcpStream::connect(addr).await.unwrap();
        let _ = late.write_all(&HELLO_MAGIC).await;
        let _ = late.write_u16(0).await;
        assert!(closed_within(&mut late, Duration::from_secs(10)).await);
        // They go away: hellos are admitted again.
        drop(idle);
        let mut ok = false;
        for _ in 0..100 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            if s.write_all(&HELLO_MAGIC).await.is_ok() && s.write_u16(0).await.is_ok() {
                if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(1), s.read_u8()).await {
                    ok = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "hellos admitted once the stuck peers left");
    }

    #[tokio::test]
    async fn connections_past_the_cap_wait_until_a_slot_frees() {
        let (addr, _stop) = serving(a_target(None, 1)).await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        assert_eq!(say_hello(&mut first, HELLO_MAGIC).await, 0);
        // The second is accepted by the kernel but not served while the first holds the slot.
        let mut second = TcpStream::connect(addr).await.unwrap();
        second.write_all(&HELLO_MAGIC).await.unwrap();
        second.write_u16(0).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), second.read_u8()).await;
        assert!(early.is_err(), "served past the cap");
        drop(first);
        let answer = tokio::time::timeout(Duration::from_secs(5), second.read_u8()).await;
        assert_eq!(answer.unwrap().unwrap(), 0);
    }

    #[tokio::test]
    async fn a_payload_that_stalls_after_its_header_is_cut_at_its_deadline() {
        let target = a_target(None, 8);
        let memory = target.memory.clone();
        let buf = Arc::new(crate::memory::EngineBuffer::allocate(4096, false).unwrap());
        let region = memory
            .register_buffer(buf, crate::memory::RemoteAccess::READ_WRITE)
            .unwrap();
        let (addr, _stop) = serving(target).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        assert_eq!(say_hello(&mut s, HELLO_MAGIC).await, 0);
        let req = RequestHeader {
            opcode: Opcode::Write,
            req_id: 1,
            instance: 7,
            addr: region.addr,
            len: 4096,
            lone: false,
        };
        s.write_all(&req.encode()).await.unwrap();
        s.write_all(&[1u8; 100]).await.unwrap();
        assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    }

    async fn say_hello(s: &mut TcpStream, magic: [u8; 8]) -> u8 {
        s.write_all(&magic).await.unwrap();
        s.write_u16(0).await.unwrap();
        s.read_u8().await.unwrap()
    }

    #[tokio::test]
    async fn a_version_1_initiator_is_served_and_an_unknown_version_refused() {
        let mut v1 = connect_to_a_target().await;
        assert_eq!(say_hello(&mut v1, HELLO_MAGIC_V1).await, 0);
        // A version-1 request (no flags) for memory nobody registered: answered, not dropped.
        let req = RequestHeader {
            opcode: Opcode::Read,
            req_id: 1,
            instance: 7,
            addr: 0x1000,
            len: 8,
            lone: false,
        };
        v1.write_all(&req.encode()).await.unwrap();
        let mut answer = [0u8; RESPONSE_LEN];
        v1.read_exact(&mut answer).await.unwrap();
        let answer = ResponseHeader::decode(&answer).unwrap();
        assert_eq!((answer.req_id, answer.extra), (1, 7));
        assert_ne!(answer.status, 0, "nothing is registered there");

        let mut v3 = connect_to_a_target().await;
        assert_eq!(say_hello(&mut v3, *b"YBTCP\0\0\x03").await, 1);
        let mut rest = Vec::new();
        assert_eq!(v3.read_to_end(&mut rest).await.unwrap(), 0, "then closed");
    }
}
