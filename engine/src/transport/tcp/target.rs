//! The serving side of the tcp data plane: checks every request and leases its range, then
//! reads straight into (or writes straight from) registered memory, one non-blocking syscall per
//! access. Unregistering the range revokes the lease: the connection is shut down at once (the
//! peer sees its request fail), whatever the peer still sends.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::spin::spin_then_park;
use super::wire::{RequestHeader, ResponseHeader, HELLO_MAGIC, HELLO_MAGIC_V1, REQUEST_LEN};
use super::{read_header, BULK, IO_BUFFER};
use crate::error::Error;
use crate::memory::raw::{self, Part, Span};
use crate::memory::{Lease, MemoryRegistry};
use crate::request::Opcode;

/// What the serving side needs.
pub(crate) struct Target {
    pub(crate) memory: Arc<MemoryRegistry>,
    pub(crate) instance: u64,
    pub(crate) token: Option<String>,
    /// Largest slice accepted; a larger request is a protocol error.
    pub(crate) max_slice: u64,
    /// How long to poll for the next request after answering a lone one.
    pub(crate) spin: Duration,
}

/// Accepts data connections until `stop` is cancelled.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    target: Arc<Target>,
    stop: CancellationToken,
    handle: Handle,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "tcp data accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (target, stop) = (target.clone(), stop.clone());
        handle.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                r = serve(stream, &target) => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "tcp data connection closed");
                },
            }
        });
    }
}

/// Reads the hello and answers it: `Some(why)` when the connection is refused.
async fn hello(s: &mut TcpStream, target: &Target) -> io::Result<Option<&'static str>> {
    let mut magic = [0u8; 8];
    s.read_exact(&mut magic).await?;
    let len = s.read_u16().await? as usize;
    let mut token = vec![0u8; len];
    s.read_exact(&mut token).await?;
    let token_ok = target
        .token
        .as_ref()
        .is_none_or(|t| constant_time_eq::constant_time_eq(t.as_bytes(), &token));
    let refused = if magic != HELLO_MAGIC && magic != HELLO_MAGIC_V1 {
        Some("unknown magic or protocol version")
    } else if !token_ok {
        Some("wrong cluster token")
    } else {
        None
    };
    s.write_u8(u8::from(refused.is_some())).await?;
    Ok(refused)
}

/// The error that shuts a connection down when the region its request leases is unregistered:
/// the peer sees its request fail, and nothing waits for it.
fn released() -> io::Error {
    io::Error::other("the target region was unregistered mid-request")
}

/// Receives a write's payload into the leased range: what the buffer holds, then straight from
/// the socket. Gives up the moment the lease is revoked.
async fn receive(rd: &mut BufReader<ReadHalf<'_>>, lease: &Lease) -> io::Result<()> {
    let n = rd.buffer().len().min(lease.len() as usize);
    if n > 0 {
        let access = lease.access().ok_or_else(released)?;
        raw::copy_in(&rd.buffer()[..n], access.span());
        drop(access);
        rd.consume(n);
    }
    let stream: &TcpStream = rd.get_ref().as_ref();
    leased_io(stream, lease, n, Interest::READABLE, raw::recv).await
}

/// Sends a read's payload from the leased range straight to the socket. Gives up the moment
/// the lease is revoked.
async fn send(stream: &TcpStream, lease: &Lease) -> io::Result<()> {
    fn send_span(fd: BorrowedFd<'_>, span: Span<'_>) -> io::Result<usize> {
        raw::send(fd, &[Part::Raw(span)])
    }
    leased_io(stream, lease, 0, Interest::WRITABLE, send_span).await
}

/// Moves the leased range from `pos` on between it and the socket, one non-blocking `op`
/// (`recv` or `sendmsg`) per access, until all of it moved or the lease is revoked.
async fn leased_io(
    stream: &TcpStream,
    lease: &Lease,
    mut pos: usize,
    interest: Interest,
    op: impl Fn(BorrowedFd<'_>, Span<'_>) -> io::Result<usize>,
) -> io::Result<()> {
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
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

    /// Copies a small payload from the leased range into the buffer.
    fn push_leased(&mut self, lease: &Lease) -> io::Result<()> {
        let access = lease.access().ok_or_else(released)?;
        let at = self.buf.len();
        self.buf.resize(at + lease.len() as usize, 0);
        raw::copy_out(access.span(), &mut self.buf[at..]);
        Ok(())
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

async fn serve(mut s: TcpStream, target: &Target) -> io::Result<()> {
    if let Some(why) = hello(&mut s, target).await? {
        tracing::warn!("refused a tcp data connection: {why}");
        return Ok(());
    }
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
            out.flush().await?;
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
            target.memory.check_access(req.addr, req.len)
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
                receive(&mut rd, &lease).await?;
                // The ack is queued only after every byte landed in the destination.
                out.push(&reply(0));
            }
            (Opcode::Write, Err(e)) => {
                tokio::io::copy(&mut (&mut rd).take(req.len), &mut tokio::io::sink()).await?;
                out.push(&reply(e.code()));
            }
            (Opcode::Read, Ok(lease)) => {
                out.push(&reply(0));
                if req.len < BULK {
                    out.push_leased(&lease)?;
                } else {
                    out.flush().await?;
                    send(out.wr.as_ref(), &lease).await?;
                }
            }
            (Opcode::Read, Err(e)) => out.push(&reply(e.code())),
        }
        out.flush_if_full().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::wire::{ResponseHeader, RESPONSE_LEN};

    /// Serves one connection on 127.0.0.1 and returns the client's end.
    async fn connect_to_a_target() -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Target {
            memory: Arc::new(MemoryRegistry::default()),
            instance: 7,
            token: None,
            max_slice: 1 << 20,
            spin: Duration::ZERO,
        };
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let _ = serve(s, &target).await;
        });
        TcpStream::connect(addr).await.unwrap()
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
