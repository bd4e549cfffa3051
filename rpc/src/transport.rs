//! yuebing's framing transport: a `Stream + Sink` of tarpc messages over one socket.
//!
//! tarpc accepts any transport; this one writes [`frame`](crate::frame) headers so that
//!
//! - an oversize frame is refused for its one request ([`Error::FrameTooLarge`]) — the sender
//!   refuses to send what the peer announced it would not accept, the receiver skips a frame it
//!   will not accept and answers with the error — and the connection stays up;
//! - [`Attachment`](crate::Attachment)s leave with vectored writes straight from the caller's
//!   buffer and arrive in one pre-sized buffer;
//! - bytes that are not frames close this one connection with a log line.
//!
//! Small frames written back to back share one buffer and one `writev`.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};

use bincode::Options;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::{Sink, Stream};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::{ClientMessage, Response};
use tokio::io::AsyncWrite;

use crate::attachment;
use crate::endpoint::Socket;
use crate::error::Error;
use crate::frame::{FrameHeader, HEADER_LEN};

/// Buffered outgoing bytes above which `poll_ready` waits for the socket.
const HIGH_WATER: usize = 4 << 20;
/// Smallest free space in the read buffer before it grows.
const READ_CHUNK: usize = 64 << 10;
/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// The largest frames each direction accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest payload (body + attachment) this side accepts.
    pub(crate) recv_max: u64,
    /// Largest payload the peer accepts, as it announced in the preamble.
    pub(crate) send_max: u64,
}

/// Payload sizes of received requests, in arrival order, for the server's byte cap. tarpc yields
/// requests in the order the transport read them, skipping some (duplicates, expired), so the
/// server takes entries up to the id it is given.
#[derive(Clone, Default)]
pub(crate) struct SizeLedger(Arc<Mutex<VecDeque<(u64, u64)>>>);

impl SizeLedger {
    fn record(&self, request_id: u64, size: u64) {
        if let Ok(mut q) = self.0.lock() {
            q.push_back((request_id, size));
        }
    }

    /// The size of `request_id`, dropping the entries of requests tarpc skipped before it.
    pub(crate) fn take(&self, request_id: u64) -> u64 {
        let Ok(mut q) = self.0.lock() else { return 0 };
        while let Some((id, size)) = q.pop_front() {
            if id == request_id {
                return size;
            }
        }
        0
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

enum ReadState {
    Header,
    Body(FrameHeader),
    Attachment {
        header: FrameHeader,
        body: Bytes,
        region: BytesMut,
    },
    Skip {
        remaining: u64,
    },
}

/// A framed tarpc transport reading `In` and writing `Out`.
pub(crate) struct FramedTransport<In, Out> {
    io: Socket,
    limits: Limits,
    rbuf: BytesMut,
    read: ReadState,
    read_waker: Option<Waker>,
    /// Replies made locally (an oversize request refused before sending) for the reader.
    local: VecDeque<In>,
    wcur: BytesMut,
    queue: VecDeque<Bytes>,
    queued: usize,
    ledger: Option<SizeLedger>,
    stop: Option<StopReading>,
    /// Bytes queued by the read side (error replies) that tarpc does not know to flush.
    reply_pending: bool,
    _out: PhantomData<fn(Out)>,
}

// The transport never pins its fields: every field is moved freely.
impl<In, Out> Unpin for FramedTransport<In, Out> {}

fn codec() -> impl Options {
    bincode::DefaultOptions::new()
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<In, Out> FramedTransport<In, Out>
where
    In: DeserializeOwned + Message,
    Out: Serialize + Message,
{
    pub(crate) fn new(io: Socket, limits: Limits) -> Self {
        FramedTransport {
            io,
            limits,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            read: ReadState::Header,
            read_waker: None,
            local: VecDeque::new(),
            wcur: BytesMut::with_capacity(READ_CHUNK),
            queue: VecDeque::new(),
            queued: 0,
            ledger: None,
            stop: None,
            reply_pending: false,
            _out: PhantomData,
        }
    }

    /// Records received requests' sizes in `ledger` (server side).
    pub(crate) fn with_ledger(mut self, ledger: SizeLedger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Ends the read side once `stop` is flipped (graceful shutdown): tarpc then finishes the
    /// requests in flight, writes their responses and closes.
    pub(crate) fn stop_reading_on(mut self, stop: StopReading) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Reads more bytes into the read buffer. `Ready(Ok(false))` at end of stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<bool>> {
        let spare = self.rbuf.capacity() - self.rbuf.len();
        if spare < want.max(HEADER_LEN) {
            self.rbuf.reserve(want.max(READ_CHUNK));
        }
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.rbuf
        ))?;
        Poll::Ready(Ok(n > 0))
    }

    fn decode(&mut self, header: FrameHeader, body: Bytes, region: Bytes) -> io::Result<In> {
        let limit = body.len() as u64;
        let (res, exact) = attachment::provide(region, || {
            codec().with_limit(limit).deserialize::<In>(&body)
        });
        let item = res.map_err(|e| {
            tracing::warn!(error = %e, "closing connection: undecodable frame body");
            invalid(e)
        })?;
        if !exact {
            tracing::warn!("closing connection: attachment region does not match the body");
            return Err(invalid("attachment region does not match the body"));
        }
        if item.is_request() {
            if let Some(ledger) = &self.ledger {
                ledger.record(item.request_id(), header.payload_len());
            }
        }
        Ok(item)
    }

    /// Handles a received frame over our limit: its bytes are skipped by the caller; the error
    /// goes back to the sender (server) or up to the caller (client).
    fn refuse_received(&mut self, header: FrameHeader) {
        let err = Error::FrameTooLarge {
            len: header.payload_len(),
            max: self.limits.recv_max,
        };
        tracing::warn!(request_id = header.request_id, %err, "skipping oversize frame");
        if let Some(reply) = In::error_reply(header.request_id, &err) {
            self.local.push_back(reply);
        } else if let Some(reply) = Out::error_reply(header.request_id, &err) {
            // Encoding a small error reply cannot be oversize; on failure the connection ends
            // at the next write anyway.
            let _ = self.encode(&reply);
            self.reply_pending = true;
        }
    }

    /// Encodes `item` as one frame into the write buffer, or refuses it if the peer would not
    /// accept its size.
    fn encode(&mut self, item: &Out) -> io::Result<()> {
        let start = self.wcur.len();
        self.wcur.put_bytes(0, HEADER_LEN);
        let (res, atts) =
            attachment::collect(|| codec().serialize_into((&mut self.wcur).writer(), item));
        if let Err(e) = res {
            self.wcur.truncate(start);
            return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
        }
        let body_len = self.wcur.len() - start - HEADER_LEN;
        let attach_len: usize = atts.iter().map(Bytes::len).sum();
        let payload = (body_len + attach_len) as u64;
        let fits_header = u32::try_from(body_len).is_ok() && u32::try_from(attach_len).is_ok();
        if payload > self.limits.send_max || !fits_header {
            self.wcur.truncate(start);
            return self.refuse_outgoing(item.request_id(), payload);
        }
        let header = FrameHeader {
            request_id: item.request_id(),
            body_len: body_len as u32,
            attach_len: attach_len as u32,
        };
        header.encode(&mut self.wcur[start..start + HEADER_LEN]);
        self.queued += HEADER_LEN + body_len + attach_len;
        if !atts.is_empty() {
            self.queue.push_back(self.wcur.split().freeze());
            self.queue
                .extend(atts.into_iter().filter(|a| !a.is_empty()));
        }
        Ok(())
    }

    fn refuse_outgoing(&mut self, request_id: u64, len: u64) -> io::Result<()> {
        let err = Error::FrameTooLarge {
            len,
            max: self.limits.send_max,
        };
        tracing::debug!(request_id, %err, "refusing to send oversize frame");
        if let Some(reply) = Out::error_reply(request_id, &err) {
            self.encode(&reply)
        } else {
            if let Some(reply) = In::error_reply(request_id, &err) {
                self.local.push_back(reply);
                if let Some(w) = self.read_waker.take() {
                    w.wake();
                }
            }
            Ok(())
        }
    }

    /// Writes everything buffered with vectored writes.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.wcur.is_empty() {
            self.queue.push_back(self.wcur.split().freeze());
        }
        while !self.queue.is_empty() {
            while self.queue.front().is_some_and(Bytes::is_empty) {
                self.queue.pop_front();
            }
            let mut slices = [IoSlice::new(&[]); MAX_IOV];
            let n = self.queue.len().min(MAX_IOV);
            for (slot, chunk) in slices.iter_mut().zip(self.queue.iter()) {
                *slot = IoSlice::new(chunk);
            }
            let mut written = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..n]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.queued = self.queued.saturating_sub(written);
            while written > 0 {
                let Some(front) = self.queue.front_mut() else {
                    break;
                };
                if written >= front.len() {
                    written -= front.len();
                    self.queue.pop_front();
                } else {
                    front.advance(written);
                    written = 0;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_read_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<In>>> {
        loop {
            if let Some(item) = self.local.pop_front() {
                return Poll::Ready(Some(Ok(item)));
            }
            match &mut self.read {
                ReadState::Header => match FrameHeader::check(&self.rbuf) {
                    Err(e) => {
                        tracing::warn!(error = %e, "closing connection: not a yuebing frame");
                        return Poll::Ready(Some(Err(invalid(e))));
                    }
                    Ok(Some(h)) => {
                        self.rbuf.advance(HEADER_LEN);
                        if h.payload_len() > self.limits.recv_max {
                            self.read = ReadState::Skip {
                                remaining: h.payload_len(),
                            };
                            self.refuse_received(h);
                        } else {
                            self.read = ReadState::Body(h);
                        }
                    }
                    Ok(None) => {
                        if !ready!(self.poll_fill(cx, HEADER_LEN))? {
                            return Poll::Ready(if self.rbuf.is_empty() {
                                None
                            } else {
                                Some(Err(io::ErrorKind::UnexpectedEof.into()))
                            });
                        }
                    }
                },
                ReadState::Body(h) => {
                    let h = *h;
                    let body_len = h.body_len as usize;
                    if self.rbuf.len() < body_len {
                        let want = body_len - self.rbuf.len();
                        if !ready!(self.poll_fill(cx, want))? {
                            return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                        }
                        continue;
                    }
                    let body = self.rbuf.split_to(body_len).freeze();
                    if h.attach_len == 0 {
                        self.read = ReadState::Header;
                        return Poll::Ready(Some(self.decode(h, body, Bytes::new())));
                    }
                    let attach_len = h.attach_len as usize;
                    let mut region = BytesMut::with_capacity(attach_len);
                    let buffered = self.rbuf.len().min(attach_len);
                    region.extend_from_slice(&self.rbuf[..buffered]);
                    self.rbuf.advance(buffered);
                    self.read = ReadState::Attachment {
                        header: h,
                        body,
                        region,
                    };
                }
                ReadState::Attachment { header, region, .. } => {
                    let missing = header.attach_len as usize - region.len();
                    if missing == 0 {
                        let ReadState::Attachment {
                            header,
                            body,
                            region,
                        } = std::mem::replace(&mut self.read, ReadState::Header)
                        else {
                            unreachable!("matched above")
                        };
                        return Poll::Ready(Some(self.decode(header, body, region.freeze())));
                    }
                    let mut limited = region.limit(missing);
                    let n = ready!(tokio_util::io::poll_read_buf(
                        Pin::new(&mut self.io),
                        cx,
                        &mut limited
                    ))?;
                    if n == 0 {
                        return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                    }
                }
                ReadState::Skip { remaining } => {
                    let take = (*remaining).min(self.rbuf.len() as u64);
                    self.rbuf.advance(take as usize);
                    *remaining -= take;
                    if *remaining == 0 {
                        self.read = ReadState::Header;
                        continue;
                    }
                    if !ready!(self.poll_fill(cx, READ_CHUNK))? {
                        return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                    }
                }
            }
        }
    }
}

impl<In, Out> Stream for FramedTransport<In, Out>
where
    In: DeserializeOwned + Message,
    Out: Serialize + Message,
{
    type Item = io::Result<In>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.reply_pending {
            // Error replies written by the read side go out without waiting for tarpc to flush;
            // tarpc's own messages are left to batch until it flushes.
            match this.poll_write_out(cx) {
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
    In: DeserializeOwned + Message,
    Out: Serialize + Message,
{
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.queued >= HIGH_WATER {
            ready!(this.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Out) -> io::Result<()> {
        self.get_mut().encode(&item)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_out(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_out(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert!(ledger.take(2) > 10, "size recorded");
        let (reply, _) = tokio::join!(client.next(), server.flush());
        let reply = reply.unwrap().unwrap();
        assert_eq!(reply.request_id, 1);
        let err = Error::from_server_error(&reply.message.unwrap_err());
        assert!(matches!(err, Error::FrameTooLarge { max: 1000, len } if len > 200_000));
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
