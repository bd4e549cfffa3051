//! The write half of the framing: messages to queued frames to vectored socket writes.
//!
//! [`FrameWriter`] encodes messages into a queue; an [`Outgoing`] queue goes out to whatever
//! socket it is lent: asynchronously ([`Outgoing::poll_write_out`]) or, for a caller that must
//! not wait, as far as the socket takes it right now ([`Outgoing::try_write_out`]). The server's
//! transport writes its writer's queue in place; the client channel takes it
//! ([`FrameWriter::take`]) so that encoding and writing need not hold the same lock.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bincode::Options;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;
use tokio::io::AsyncWrite;

use super::{codec, Message};
use crate::attachment;
use crate::error::Error;
use crate::frame::{FrameHeader, HEADER_LEN};

/// Buffered outgoing bytes above which a sender should wait for the socket.
const HIGH_WATER: usize = 4 << 20;
/// Initial size of the buffer small frames are encoded into.
const WRITE_CHUNK: usize = 64 << 10;
/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// Why a message was not queued.
#[derive(Debug)]
pub(crate) enum EncodeError {
    /// The peer would not accept a frame this large ([`Error::FrameTooLarge`]); nothing was
    /// queued and the connection is fine.
    Oversize(Error),
    /// The message could not be serialized; nothing was queued.
    Serialize(io::Error),
}

/// A socket half that can take bytes without waiting.
pub(crate) trait TryWrite {
    /// Writes what the socket takes now; `WouldBlock` when it takes nothing.
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
}

/// Encoded bytes on their way to the socket: frame buffers and attachment slices, in order.
#[derive(Default)]
pub(crate) struct Outgoing {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Outgoing {
    /// Whether nothing waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes everything to `io`, waiting for it as needed.
    pub(crate) fn poll_write_out<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.write_out_with(|slices| Pin::new(&mut *io).poll_write_vectored(cx, slices))
    }

    /// Writes as much as `io` takes without waiting: `Ok(true)` when all of it went out,
    /// `Ok(false)` when the rest must wait for [`Outgoing::poll_write_out`].
    pub(crate) fn try_write_out<W: TryWrite>(&mut self, io: &W) -> io::Result<bool> {
        let res = self.write_out_with(|slices| match io.try_write_vectored(slices) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            other => Poll::Ready(other),
        });
        match res {
            Poll::Ready(Ok(())) => Ok(true),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(false),
        }
    }

    /// The write loop both ways of writing share: `write` takes a batch of slices.
    fn write_out_with(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<()>> {
        loop {
            while self.chunks.front().is_some_and(Bytes::is_empty) {
                self.chunks.pop_front();
            }
            if self.chunks.is_empty() {
                self.len = 0;
                return Poll::Ready(Ok(()));
            }
            let mut slices = [IoSlice::new(&[]); MAX_IOV];
            let n = self.chunks.len().min(MAX_IOV);
            for (slot, chunk) in slices.iter_mut().zip(self.chunks.iter()) {
                *slot = IoSlice::new(chunk);
            }
            let mut written = ready!(write(&slices[..n]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.len = self.len.saturating_sub(written);
            while written > 0 {
                let Some(front) = self.chunks.front_mut() else {
                    break;
                };
                if written >= front.len() {
                    written -= front.len();
                    self.chunks.pop_front();
                } else {
                    front.advance(written);
                    written = 0;
                }
            }
        }
    }
}

/// Encodes frames into an [`Outgoing`] queue: small bodies share one buffer, attachments are
/// slices of their own (no copy).
pub(crate) struct FrameWriter {
    send_max: u64,
    wcur: BytesMut,
    out: Outgoing,
}

impl FrameWriter {
    /// A writer that refuses payloads over `send_max` (what the peer announced it accepts).
    pub(crate) fn new(send_max: u64) -> Self {
        FrameWriter {
            send_max,
            wcur: BytesMut::with_capacity(WRITE_CHUNK),
            out: Outgoing::default(),
        }
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Whether so much is queued that a sender should wait for the socket first.
    pub(crate) fn is_full(&self) -> bool {
        self.out.len >= HIGH_WATER
    }

    /// Encodes `item` as one frame at the end of the queue.
    pub(crate) fn encode<Out: Serialize + Message>(
        &mut self,
        item: &Out,
    ) -> Result<(), EncodeError> {
        let start = self.wcur.len();
        self.wcur.put_bytes(0, HEADER_LEN);
        let (res, atts) =
            attachment::collect(|| codec().serialize_into((&mut self.wcur).writer(), item));
        if let Err(e) = res {
            self.wcur.truncate(start);
            return Err(EncodeError::Serialize(io::Error::new(
                io::ErrorKind::InvalidInput,
                e,
            )));
        }
        let body_len = self.wcur.len() - start - HEADER_LEN;
        let attach_len: usize = atts.iter().map(Bytes::len).sum();
        let payload = (body_len + attach_len) as u64;
        let fits_header = u32::try_from(body_len).is_ok() && u32::try_from(attach_len).is_ok();
        if payload > self.send_max || !fits_header {
            self.wcur.truncate(start);
            let err = Error::FrameTooLarge {
                len: payload,
                max: self.send_max,
            };
            tracing::debug!(request_id = item.request_id(), %err, "refusing to send oversize frame");
            return Err(EncodeError::Oversize(err));
        }
        let header = FrameHeader {
            request_id: item.request_id(),
            body_len: body_len as u32,
            attach_len: attach_len as u32,
        };
        header.encode(&mut self.wcur[start..start + HEADER_LEN]);
        self.out.len += HEADER_LEN + body_len + attach_len;
        if !atts.is_empty() {
            self.seal();
            self.out
                .chunks
                .extend(atts.into_iter().filter(|a| !a.is_empty()));
        }
        Ok(())
    }

    /// Takes everything queued so far, to be written by whoever holds the socket.
    pub(crate) fn take(&mut self) -> Outgoing {
        self.seal();
        std::mem::take(&mut self.out)
    }

    /// Writes everything queued to `io`, waiting for it as needed.
    pub(crate) fn poll_write_out<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.seal();
        self.out.poll_write_out(io, cx)
    }

    /// Moves the frame bodies encoded so far into the queue of chunks.
    fn seal(&mut self) {
        if !self.wcur.is_empty() {
            self.out.chunks.push_back(self.wcur.split().freeze());
        }
    }
}
