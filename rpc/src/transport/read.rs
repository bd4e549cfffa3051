//! The read half of the framing: bytes from a socket to decoded messages.
//!
//! [`FrameReader`] holds the read buffer and the state of the frame being read; the socket is
//! lent to each call, so the same reader serves a whole socket (the server's transport) and the
//! read half of a split one (the client channel's driver).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::AsyncRead;

use super::decode::Decode;
use super::invalid;
use crate::attachment;
use crate::frame::{FrameHeader, HEADER_LEN};

/// Smallest free space in the read buffer before it grows.
const READ_CHUNK: usize = 64 << 10;

/// One thing read off the wire.
pub(crate) enum Received<In> {
    /// A decoded message and its payload size (body + attachments).
    Message(In, u64),
    /// A frame over the receive limit: its bytes are being skipped; the caller answers for it.
    Oversize(FrameHeader),
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

/// Decodes frames from whatever socket it is lent.
pub(crate) struct FrameReader {
    recv_max: u64,
    rbuf: BytesMut,
    read: ReadState,
}

impl FrameReader {
    /// A reader that accepts payloads of at most `recv_max` bytes.
    pub(crate) fn new(recv_max: u64) -> Self {
        FrameReader {
            recv_max,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            read: ReadState::Header,
        }
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
        In: Decode,
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
                        if h.payload_len() > self.recv_max {
                            self.read = ReadState::Skip {
                                remaining: h.payload_len(),
                            };
                            return Poll::Ready(Some(Ok(Received::Oversize(h))));
                        }
                        self.read = ReadState::Body(h);
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
                ReadState::Body(h) => {
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
                    if h.attach_len == 0 {
                        self.read = ReadState::Header;
                        return Poll::Ready(Some(decode(h, body, Bytes::new())));
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
                        return Poll::Ready(Some(decode(header, body, region.freeze())));
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
fn decode<In: Decode>(header: FrameHeader, body: Bytes, region: Bytes) -> io::Result<Received<In>> {
    let (res, exact) = attachment::provide(region, || In::decode(&body));
    let item = res.map_err(|e| {
        tracing::warn!(error = %e, "closing connection: undecodable frame body");
        invalid(e)
    })?;
    if !exact {
        tracing::warn!("closing connection: attachment region does not match the body");
        return Err(invalid("attachment region does not match the body"));
    }
    Ok(Received::Message(item, header.payload_len()))
}
