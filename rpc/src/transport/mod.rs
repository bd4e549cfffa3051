//! yuebing's framing transport: a `Stream + Sink` of tarpc messages over one socket.
//!
//! tarpc accepts any transport; this one writes [`frame`](crate::frame) headers so that
//!
//! - an oversize frame is refused for its one request ([`Error::FrameTooLarge`]) — the sender
//!   refuses to send what the peer announced it would not accept, the receiver skips a frame it
//!   will not accept and answers with the error — and the connection stays up;
//! - [`Attachment`](crate::Attachment)s leave with vectored writes straight from the caller's
//!   buffer and arrive in one pre-sized buffer;
//! - bytes that are not frames close this one connection with a log line;
//! - on the server, a large frame waits for byte permits before it is buffered, and its
//!   connection is not read meanwhile ([`budget`]);
//! - on the server, the rest of a frame must arrive within the payload timeout once its header
//!   (and its permits) are in, or the connection is closed and the frame's permits and buffer
//!   are released: a peer that stalls mid-frame holds nothing for long.
//!
//! Small frames written back to back share one buffer and one `writev`. A frame body becomes a
//! message in `decode`, which reads nothing past the body and nothing a peer can make panic.

pub(crate) mod budget;
mod decode;
mod read;
mod write;

use std::collections::VecDeque;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};

use futures::{Sink, Stream};
use serde::Serialize;
use tarpc::{ClientMessage, Response};
use tokio::io::AsyncWrite;

pub(crate) use self::budget::{Payload, ReadBudget};
pub(crate) use self::decode::Decode;
pub(crate) use self::read::{payload_timeout_error, FrameReader, Received};
pub(crate) use self::write::{EncodeError, FrameWriter, Outgoing, TryWrite};
use crate::endpoint::Socket;
use crate::error::Error;
use crate::frame::FrameHeader;

/// The largest frames each direction accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest payload (body + attachment) this side accepts.
    pub(crate) recv_max: u64,
    /// Largest payload the peer accepts, as it announced in the preamble.
    pub(crate) send_max: u64,
}

/// Payloads of received requests (sizes and the byte permits of large frames), in arrival
/// order, for the server's byte cap. tarpc yields requests in the order the transport read them,
/// skipping duplicates of an id in flight, so the server takes entries up to the id it is given.
///
/// tarpc hands requests up one at a time (its channel returns each as soon as it is read, and
/// the server takes the entry before it polls for the next), so entries still here when the
/// next request is read belong to skipped requests: they are dropped then, and their permits
/// return, rather than held until a later request is taken.
#[derive(Clone, Default)]
pub(crate) struct SizeLedger(Arc<Mutex<VecDeque<(u64, Payload)>>>);

impl SizeLedger {
    fn record(&self, request_id: u64, payload: Payload) {
        if let Ok(mut q) = self.0.lock() {
            q.clear();
            q.push_back((request_id, payload));
        }
    }

    /// The payload of `request_id`, dropping the entries of requests tarpc skipped before it.
    pub(crate) fn take(&self, request_id: u64) -> Payload {
        let Ok(mut q) = self.0.lock() else {
            return Payload::default();
        };
        while let Some((id, payload)) = q.pop_front() {
            if id == request_id {
                return payload;
            }
        }
        Payload::default()
    }
}

/// A switch that ends a transport's read side (graceful shutdown). The server flips it from the
/// task that polls the transport, right before polling it again, so no waker is needed.
#[derive(Clone, Default)]
pub(crate) struct StopReading(Arc<std::sync::atomic::AtomicBool>);

impl StopReading {
    pub(crate) fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// What the transport needs to know about the messages it carries.
pub(crate) trait Message: Sized {
    /// The request id the message belongs to.
    fn request_id(&self) -> u64;
    /// Whether this is a new request (not a cancellation or response).
    fn is_request(&self) -> bool;
    /// A message of this type that reports `err` for `request_id`, if this type can carry one.
    fn error_reply(request_id: u64, err: &Error) -> Option<Self>;
}

impl<T> Message for ClientMessage<T> {
    fn request_id(&self) -> u64 {
        match self {
            ClientMessage::Request(r) => r.id,
            ClientMessage::Cancel { request_id, .. } => *request_id,
            _ => 0,
        }
    }
    fn is_request(&self) -> bool {
        matches!(self, ClientMessage::Request(_))
    }
    fn error_reply(_: u64, _: &Error) -> Option<Self> {
        None
    }
}

impl<T> Message for Response<T> {
    fn request_id(&self) -> u64 {
        self.request_id
    }
    fn is_request(&self) -> bool {
        false
    }
    fn error_reply(request_id: u64, err: &Error) -> Option<Self> {
        Some(Response {
            request_id,
            message: Err(err.to_server_error()),
        })
    }
}

fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// The error a receiver reports for a frame over its limit.
pub(crate) fn oversize_received(header: &FrameHeader, recv_max: u64) -> Error {
    let err = Error::FrameTooLarge {
        len: header.payload_len(),
        max: recv_max,
    };
    tracing::warn!(request_id = header.request_id, %err, "skipping oversize frame");
    err
}

/// A framed tarpc transport reading `In` and writing `Out` on one socket (the server's side).
pub(crate) struct FramedTransport<In, Out> {
    io: Socket,
    reader: FrameReader,
    writer: FrameWriter,
    read_waker: Option<Waker>,
    /// Replies made locally (an oversize request refused before sending) for the reader.
    local: VecDeque<In>,
    ledger: Option<SizeLedger>,
    stop: Option<StopReading>,
    /// Bytes queued by the read side (error replies) that tarpc does not know to flush.
    reply_pending: bool,
    _out: PhantomData<fn(Out)>,
}

// The transport never pins its fields: every field is moved freely.
impl<In, Out> Unpin for FramedTransport<In, Out> {}

impl<In, Out> FramedTransport<In, Out>
where
    In: Decode + Message,
    Out: Serialize + Message,
{
    pub(crate) fn new(io: Socket, limits: Limits) -> Self {
        FramedTransport {
            io,
            reader: FrameReader::new(limits.recv_max),
            writer: FrameWriter::new(limits.send_max),
            read_waker: None,
            local: VecDeque::new(),
            ledger: None,
            stop: None,
            reply_pending: false,
            _out: PhantomData,
        }
    }

    /// Records received requests' payloads in `ledger` (server side).
    pub(crate) fn with_ledger(mut self, ledger: SizeLedger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Takes byte permits from `budget` for each large frame before buffering it (server side,
    /// with a ledger: the permits travel with the request through it). Lowers the receive limit
    /// to the budget.
    pub(crate) fn with_budget(mut self, budget: ReadBudget) -> Self {
        self.reader = self.reader.with_budget(budget);
        self
    }

    /// Closes the connection when the rest of a frame does not arrive within `timeout` once its
    /// payload starts to be read (server side; see [`FrameReader::with_payload_timeout`]).
    pub(crate) fn with_payload_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.reader = self.reader.with_payload_timeout(timeout);
        self
    }

    /// Ends the read side once `stop` is flipped (graceful shutdown): tarpc then finishes the
    /// requests in flight, writes their responses and closes.
    pub(crate) fn stop_reading_on(mut self, stop: StopReading) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Handles a received frame over our limit (its bytes are being skipped): the error goes
    /// back to the sender (server) or up to the caller (client).
    fn refuse_received(&mut self, header: FrameHeader) {
        let err = oversize_received(&header, self.reader.recv_max());
        if let Some(reply) = In::error_reply(header.request_id, &err) {
            self.local.push_back(reply);
        } else if let Some(reply) = Out::error_reply(header.request_id, &err) {
            // Encoding a small error reply cannot be oversize; on failure the connection ends
            // at the next write anyway.
            let _ = self.writer.encode(&reply);
            self.reply_pending = true;
        }
    }

    /// Answers for an outgoing message the peer would not accept.
    fn refuse_outgoing(&mut self, request_id: u64, err: Error) -> io::Result<()> {
        if let Some(reply) = Out::error_reply(request_id, &err) {
            return self.writer.encode(&reply).map_err(|e| match e {
                EncodeError::Serialize(e) => e,
                EncodeError::Oversize(e) => io::Error::new(io::ErrorKind::InvalidInput, e),
            });
        }
        if let Some(reply) = In::error_reply(request_id, &err) {
            self.local.push_back(reply);
            if let Some(w) = self.read_waker.take() {
                w.wake();
            }
        }
        Ok(())
    }

    fn poll_read_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<In>>> {
        loop {
            if let Some(item) = self.local.pop_front() {
                return Poll::Ready(Some(Ok(item)));
            }
            match ready!(self.reader.poll_frame::<In, _>(&mut self.io, cx)) {
                None => return Poll::Ready(None),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(Received::Oversize(h))) => self.refuse_received(h),
                Some(Ok(Received::Message(item, payload))) => {
                    // A cancellation's permits (if any) are returned here, at once.
                    if item.is_request() {
                        if let Some(ledger) = &self.ledger {
                            ledger.record(item.request_id(), payload);
                        }
                    }
                    return Poll::Ready(Some(Ok(item)));
                }
            }
        }
    }
}

impl<In, Out> Stream for FramedTransport<In, Out>
where
    In: Decode + Message,
    Out: Serialize + Message,
{
    type Item = io::Result<In>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.reply_pending {
            // Error replies written by the read side go out without waiting for tarpc to flush;
            // tarpc's own messages are left to batch until it flushes.
            match this.writer.poll_write_out(&mut this.io, cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Ok(())) => this.reply_pending = false,
                Poll::Pending => {}
            }
        }
        if this.stop.as_ref().is_some_and(StopReading::is_stopped) && this.local.is_empty() {
            return Poll::Ready(None);
        }
        let res = this.poll_read_frame(cx);
        if res.is_pending() {
            this.read_waker = Some(cx.waker().clone());
        }
        res
    }
}

impl<In, Out> Sink<Out> for FramedTransport<In, Out>
where
    In: Decode + Message,
    Out: Serialize + Message,
{
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.writer.is_full() {
            ready!(this.writer.poll_write_out(&mut this.io, cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Out) -> io::Result<()> {
        let this = self.get_mut();
        match this.writer.encode(&item) {
            Ok(()) => Ok(()),
            Err(EncodeError::Oversize(err)) => this.refuse_outgoing(item.request_id(), err),
            Err(EncodeError::Serialize(e)) => Err(e),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.writer.poll_write_out(&mut this.io, cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.writer.poll_write_out(&mut this.io, cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_LEN;
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};
    use tarpc::{context, Request};
    use tokio::net::UnixStream;
    use tokio_util::either::Either;

    type ClientSide = FramedTransport<Response<Bytes>, ClientMessage<Bytes>>;
    type ServerSide = FramedTransport<ClientMessage<Bytes>, Response<Bytes>>;

    fn request(id: u64, len: usize) -> ClientMessage<Bytes> {
        ClientMessage::Request(Request {
            context: context::current(),
            id,
            message: Bytes::from(vec![5u8; len]),
        })
    }

    /// A client that ignores the announced limit: the server skips the frame, answers
    /// FrameTooLarge for it, and reads the next frame normally.
    #[tokio::test]
    async fn receiver_skips_an_oversize_frame_and_answers_for_it() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut client = ClientSide::new(
            Either::Right(a),
            Limits {
                recv_max: 1 << 20,
                send_max: u64::MAX,
            },
        );
        let ledger = SizeLedger::default();
        let mut server = ServerSide::new(
            Either::Right(b),
            Limits {
                recv_max: 1000,
                send_max: 1 << 20,
            },
        )
        .with_ledger(ledger.clone());
        let sending = async {
            client.send(request(1, 200_000)).await.unwrap();
            client.send(request(2, 10)).await.unwrap();
        };
        let (_, got) = tokio::join!(sending, server.next());
        let got = got.unwrap().unwrap();
        assert_eq!(got.request_id(), 2, "frame 1 was skipped");
        assert!(ledger.take(2).len > 10, "size recorded");
        let (reply, _) = tokio::join!(client.next(), server.flush());
        let reply = reply.unwrap().unwrap();
        assert_eq!(reply.request_id, 1);
        let err = Error::from_server_error(&reply.message.unwrap_err());
        assert!(matches!(err, Error::FrameTooLarge { max: 1000, len } if len > 200_000));
    }

    #[test]
    fn a_skipped_request_returns_its_permits_when_the_next_is_read() {
        let permits = Arc::new(tokio::sync::Semaphore::new(100));
        let charged = |n| Payload {
            len: u64::from(n),
            permit: Some(permits.clone().try_acquire_many_owned(n).unwrap()),
        };
        let ledger = SizeLedger::default();
        ledger.record(1, charged(60));
        ledger.record(1, charged(30));
        assert_eq!(
            permits.available_permits(),
            70,
            "the duplicate's permits are back"
        );
        let taken = ledger.take(1);
        assert_eq!(taken.len, 30);
        drop(taken);
        assert_eq!(permits.available_permits(), 100);
        assert!(ledger.take(1).permit.is_none(), "taken once");
    }

    #[tokio::test]
    async fn sender_refuses_what_the_peer_would_not_accept() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut client = ClientSide::new(
            Either::Right(a),
            Limits {
                recv_max: 1 << 20,
                send_max: 100,
            },
        );
        client.send(request(9, 101)).await.unwrap();
        let reply = client.next().await.unwrap().unwrap();
        assert_eq!(reply.request_id, 9);
        let err = Error::from_server_error(&reply.message.unwrap_err());
        assert!(
            matches!(err, Error::FrameTooLarge { max: 100, .. }),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn garbage_is_an_error_and_truncation_is_eof() {
        use tokio::io::AsyncWriteExt;
        let (a, mut b) = UnixStream::pair().unwrap();
        let limits = Limits {
            recv_max: 1 << 20,
            send_max: 1 << 20,
        };
        let mut server = ServerSide::new(Either::Right(a), limits);
        b.write_all(&[0xEE; 40]).await.unwrap();
        let err = server.next().await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        let (a, mut b) = UnixStream::pair().unwrap();
        let mut server = ServerSide::new(Either::Right(a), limits);
        let mut header = [0u8; HEADER_LEN];
        FrameHeader {
            request_id: 1,
            body_len: 50,
            attach_len: 0,
        }
        .encode(&mut header);
        b.write_all(&header).await.unwrap();
        drop(b);
        let err = server.next().await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
