//! The read half of the framing: bytes from a socket to decoded messages.
//!
//! [`FrameReader`] holds the read buffer and the state of the frame being read; the socket is
//! lent to each call, so the same reader serves a whole socket (the server's transport) and the
//! read half of a split one (the client channel's driver).
//!
//! A reader given a [`ReadBudget`] (the server's) takes byte permits for a large frame before it
//! allocates the frame's buffer, and reads nothing more from the socket until it has them.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bincode::Options;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use tokio::io::AsyncRead;
use tokio::sync::OwnedSemaphorePermit;

use super::budget::{frame_limit, Charge, Payload, PermitWait, ReadBudget};
use super::{codec, invalid};
use crate::attachment;
use crate::frame::{FrameHeader, HEADER_LEN};

/// Smallest free space in the read buffer before it grows.
const READ_CHUNK: usize = 64 << 10;

/// One thing read off the wire.
pub(crate) enum Received<In> {
    /// A decoded message, its payload size (body + attachments) and the permits it holds.
    Message(In, Payload),
    /// A frame over the receive limit: its bytes are being skipped; the caller answers for it.
    Oversize(FrameHeader),
}

enum ReadState {
    Header,
    /// Waiting for byte permits before the payload is read.
    Permits(FrameHeader, PermitWait),
    Body(FrameHeader, Option<OwnedSemaphorePermit>),
    Attachment {
        header: FrameHeader,
        body: Bytes,
        region: BytesMut,
        permit: Option<OwnedSemaphorePermit>,
    },
    Skip {
        remaining: u64,
    },
}

/// Decodes frames from whatever socket it is lent.
pub(crate) struct FrameReader {
    recv_max: u64,
    rbuf: BytesMut,
    read: ReadState,
    budget: Option<ReadBudget>,
}

impl FrameReader {
    /// A reader that accepts payloads of at most `recv_max` bytes.
    pub(crate) fn new(recv_max: u64) -> Self {
        FrameReader {
            recv_max,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            read: ReadState::Header,
            budget: None,
        }
    }

    /// Charges frames larger than [`CHARGE_ABOVE`](super::budget::CHARGE_ABOVE) against
    /// `budget` before reading their payload, and lowers the limit to what the budget can hold.
    pub(crate) fn with_budget(mut self, budget: ReadBudget) -> Self {
        self.recv_max = frame_limit(self.recv_max, budget.total());
        self.budget = Some(budget);
        self
    }

    /// The largest payload this reader accepts.
    pub(crate) fn recv_max(&self) -> u64 {
        self.recv_max
    }

    /// Reads the next frame from `io`. `Ready(None)` at a clean end of stream (between
    /// frames); bytes that are not frames and truncated frames are errors.
    pub(crate) fn poll_frame<In, R>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<Received<In>>>>
    where
        In: DeserializeOwned,
        R: AsyncRead + Unpin,
    {
        loop {
            match &mut self.read {
                ReadState::Header => match FrameHeader::check(&self.rbuf) {
                    Err(e) => {
                        tracing::warn!(error = %e, "closing connection: not a yuebing frame");
                        return Poll::Ready(Some(Err(invalid(e))));
                    }
                    Ok(Some(h)) => {
                        self.rbuf.advance(HEADER_LEN);
                        let Some(next) = self.start_payload(h) else {
                            self.read = ReadState::Skip {
                                remaining: h.payload_len(),
                            };
                            return Poll::Ready(Some(Ok(Received::Oversize(h))));
                        };
                        self.read = next;
                    }
                    Ok(None) => {
                        if !ready!(self.poll_fill(io, cx, HEADER_LEN))? {
                            return Poll::Ready(if self.rbuf.is_empty() {
                                None
                            } else {
                                Some(Err(io::ErrorKind::UnexpectedEof.into()))
                            });
                        }
                    }
                },
                ReadState::Permits(h, wait) => {
                    // Nothing more is read from this connection until the permits are ours.
                    let h = *h;
                    let permit = ready!(wait.poll(cx)).map_err(|_| {
                        io::Error::new(io::ErrorKind::ConnectionAborted, "byte budget closed")
                    })?;
                    self.read = ReadState::Body(h, Some(permit));
                }
                ReadState::Body(h, permit) => {
                    let h = *h;
                    let body_len = h.body_len as usize;
                    if self.rbuf.len() < body_len {
                        let want = body_len - self.rbuf.len();
                        if !ready!(self.poll_fill(io, cx, want))? {
                            return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                        }
                        continue;
                    }
                    let body = self.rbuf.split_to(body_len).freeze();
                    let permit = permit.take();
                    if h.attach_len == 0 {
                        self.read = ReadState::Header;
                        return Poll::Ready(Some(decode(h, body, Bytes::new(), permit)));
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
                        permit,
                    };
                }
                ReadState::Attachment { header, region, .. } => {
                    let missing = header.attach_len as usize - region.len();
                    if missing == 0 {
                        let ReadState::Attachment {
                            header,
                            body,
                            region,
                            permit,
                        } = std::mem::replace(&mut self.read, ReadState::Header)
                        else {
                            unreachable!("matched above")
                        };
                        return Poll::Ready(Some(decode(header, body, region.freeze(), permit)));
                    }
                    let mut limited = region.limit(missing);
                    let n = ready!(tokio_util::io::poll_read_buf(
                        Pin::new(&mut *io),
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
                    if !ready!(self.poll_fill(io, cx, READ_CHUNK))? {
                        return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                    }
                }
            }
        }
    }

    /// The state that reads `h`'s payload (maybe after waiting for permits), or `None` when the
    /// frame is over the limit.
    fn start_payload(&self, h: FrameHeader) -> Option<ReadState> {
        if h.payload_len() > self.recv_max {
            return None;
        }
        let Some(budget) = &self.budget else {
            return Some(ReadState::Body(h, None));
        };
        match budget.charge(h.payload_len()) {
            Charge::Free => Some(ReadState::Body(h, None)),
            Charge::Held(permit) => Some(ReadState::Body(h, Some(permit))),
            Charge::Wait(wait) => Some(ReadState::Permits(h, wait)),
            Charge::OverBudget => None,
        }
    }

    /// Reads more bytes into the read buffer. `Ready(Ok(false))` at end of stream.
    fn poll_fill<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        want: usize,
    ) -> Poll<io::Result<bool>> {
        let spare = self.rbuf.capacity() - self.rbuf.len();
        if spare < want.max(HEADER_LEN) {
            self.rbuf.reserve(want.max(READ_CHUNK));
        }
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(io),
            cx,
            &mut self.rbuf
        ))?;
        Poll::Ready(Ok(n > 0))
    }
}

/// Decodes one frame's body, with its attachment region as the source of attachments.
fn decode<In: DeserializeOwned>(
    header: FrameHeader,
    body: Bytes,
    region: Bytes,
    permit: Option<OwnedSemaphorePermit>,
) -> io::Result<Received<In>> {
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
    let payload = Payload {
        len: header.payload_len(),
        permit,
    };
    Ok(Received::Message(item, payload))
}
