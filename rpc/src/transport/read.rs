//! The read half of the framing: bytes from a socket to decoded messages.
//!
//! [`FrameReader`] holds the read buffer and the state of the frame being read; the socket is
//! lent to each call, so the same reader serves a whole socket (the server's transport) and the
//! read half of a split one (the client channel's driver).
//!
//! A reader given a [`ReadBudget`] (the server's) takes byte permits for a large frame before it
//! allocates the frame's buffer, and reads nothing more from the socket until it has them.
//!
//! A reader given a payload timeout (the server's) fails with a timed-out error when the rest of
//! a frame does not arrive within it once its header has been read. The clock starts when the
//! payload starts to be read: at the header, or when the frame's permits are granted (waiting for
//! them is the server's doing, not the peer's). The timer is armed only when a frame is not
//! complete in the reads at hand, so frames that arrive whole never touch it; its one allocation
//! is made at the first such frame and re-armed for later ones.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::AsyncRead;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Sleep;

use super::budget::{frame_limit, Charge, Payload, PermitWait, ReadBudget};
use super::decode::Decode;
use super::invalid;
use crate::attachment;
use crate::error::Error;
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
        header: FrameHeader,
        remaining: u64,
    },
}

/// The time the rest of a frame may take once its payload starts to be read.
struct PayloadDeadline {
    timeout: Duration,
    /// Made the first time a frame waits for its payload, then re-armed for later frames. A
    /// timer left armed by a frame that finished in time may still fire once: a spurious wake,
    /// cheaper than disarming it at every frame.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether `sleep` is armed for the frame being read.
    armed: bool,
}

impl PayloadDeadline {
    /// The frame being read waits for bytes: arms the timer at `timeout` from now if it is not
    /// armed for this frame yet, and is ready once it has passed. Pending forever when the
    /// deadline is too far to represent.
    fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.armed {
            let Some(at) = crate::clock::now().checked_add(self.timeout) else {
                return Poll::Pending;
            };
            let at = tokio::time::Instant::from_std(at);
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            self.armed = true;
        }
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// Decodes frames from whatever socket it is lent.
pub(crate) struct FrameReader {
    recv_max: u64,
    rbuf: BytesMut,
    read: ReadState,
    budget: Option<ReadBudget>,
    deadline: Option<PayloadDeadline>,
}

impl FrameReader {
    /// A reader that accepts payloads of at most `recv_max` bytes.
    pub(crate) fn new(recv_max: u64) -> Self {
        FrameReader {
            recv_max,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            read: ReadState::Header,
            budget: None,
            deadline: None,
        }
    }

    /// Fails the read (`TimedOut`, carrying an [`Error::Protocol`]) when the rest of a frame does
    /// not arrive within `timeout` once its payload starts to be read (see the module docs).
    /// Readers without one wait as long as the connection lives (the client's).
    pub(crate) fn with_payload_timeout(mut self, timeout: Duration) -> Self {
        self.deadline = Some(PayloadDeadline {
            timeout,
            sleep: None,
            armed: false,
        });
        self
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
                        if let Some(deadline) = &mut self.deadline {
                            deadline.armed = false;
                        }
                        let Some(next) = self.start_payload(h) else {
                            self.read = ReadState::Skip {
                                header: h,
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
                        let filled = self.poll_fill(io, cx, want);
                        if !ready!(self.within_deadline(filled, cx))? {
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
                    let read = tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, &mut limited);
                    let n = ready!(self.within_deadline(read, cx))?;
                    if n == 0 {
                        return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into())));
                    }
                }
                ReadState::Skip { remaining, .. } => {
                    let take = (*remaining).min(self.rbuf.len() as u64);
                    self.rbuf.advance(take as usize);
                    *remaining -= take;
                    if *remaining == 0 {
                        self.read = ReadState::Header;
                        continue;
                    }
                    let filled = self.poll_fill(io, cx, READ_CHUNK);
                    if !ready!(self.within_deadline(filled, cx))? {
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

    /// `read`, a read of the current frame's payload, unless it waits for bytes and the frame's
    /// deadline has passed: then the timed-out error.
    fn within_deadline<T>(
        &mut self,
        read: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if read.is_ready() {
            return read;
        }
        let Some(deadline) = &mut self.deadline else {
            return Poll::Pending;
        };
        ready!(deadline.poll_passed(cx));
        let timeout = deadline.timeout;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            self.payload_timed_out(timeout),
        )))
    }

    /// The error for a frame whose payload did not arrive within `timeout`.
    fn payload_timed_out(&self, timeout: Duration) -> Error {
        let (header, received) = match &self.read {
            ReadState::Body(h, _) => (*h, self.rbuf.len().min(h.body_len as usize) as u64),
            ReadState::Attachment { header, region, .. } => {
                (*header, u64::from(header.body_len) + region.len() as u64)
            }
            ReadState::Skip { header, remaining } => (*header, header.payload_len() - remaining),
            ReadState::Header | ReadState::Permits(..) => {
                unreachable!("only a payload being read has a deadline")
            }
        };
        Error::Protocol {
            reason: format!(
                "request {}: {received} of its frame's {} payload bytes arrived within the \
                 payload timeout of {timeout:?}",
                header.request_id,
                header.payload_len(),
            ),
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

/// The typed error inside `e` if `e` is a reader's payload timeout (for the caller's log line).
pub(crate) fn payload_timeout_error(e: &io::Error) -> Option<&Error> {
    if e.kind() != io::ErrorKind::TimedOut {
        return None;
    }
    e.get_ref()?.downcast_ref::<Error>()
}

/// Decodes one frame's body, with its attachment region as the source of attachments.
fn decode<In: Decode>(
    header: FrameHeader,
    body: Bytes,
    region: Bytes,
    permit: Option<OwnedSemaphorePermit>,
) -> io::Result<Received<In>> {
    let (res, exact) = attachment::provide(region, || In::decode(&body));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncWriteExt, DuplexStream};
    use tokio::sync::Semaphore;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    /// A whole frame whose body is `len` bytes as `Bytes` in bincode.
    fn frame(request_id: u64, len: usize) -> Vec<u8> {
        let body =
            bincode::Options::serialize(crate::transport::codec(), &Bytes::from(vec![3u8; len]))
                .unwrap();
        let mut out = vec![0u8; HEADER_LEN];
        FrameHeader {
            request_id,
            body_len: body.len() as u32,
            attach_len: 0,
        }
        .encode(&mut out);
        out.extend_from_slice(&body);
        out
    }

    fn poll(reader: &mut FrameReader, io: &mut DuplexStream) -> Poll<io::Result<Bytes>> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        reader
            .poll_frame::<Bytes, _>(io, &mut cx)
            .map(|r| match r.expect("not at end of stream") {
                Ok(Received::Message(x, _)) => Ok(x),
                Ok(Received::Oversize(_)) => panic!("not oversize"),
                Err(e) => Err(e),
            })
    }

    /// Lets the time pass (paused clock) and the timers fire.
    async fn after(d: Duration) {
        tokio::time::advance(d).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_payload_fails_at_its_deadline_and_whole_frames_arm_no_timer() {
        let (mut peer, mut io) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(1 << 20).with_payload_timeout(TIMEOUT);
        peer.write_all(&frame(1, 100)).await.unwrap();
        assert!(matches!(poll(&mut reader, &mut io), Poll::Ready(Ok(x)) if x.len() == 100));
        assert!(
            poll(&mut reader, &mut io).is_pending(),
            "idle between frames"
        );
        after(10 * TIMEOUT).await;
        assert!(
            poll(&mut reader, &mut io).is_pending(),
            "no limit between frames"
        );
        let sleep = &reader.deadline.as_ref().unwrap().sleep;
        assert!(sleep.is_none(), "frames that arrive whole arm no timer");

        let f = frame(2, 100);
        peer.write_all(&f[..HEADER_LEN + 40]).await.unwrap();
        assert!(poll(&mut reader, &mut io).is_pending());
        after(TIMEOUT - MS).await;
        assert!(poll(&mut reader, &mut io).is_pending(), "not yet");
        after(MS).await;
        let Poll::Ready(Err(e)) = poll(&mut reader, &mut io) else {
            panic!("the deadline passed")
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let err = payload_timeout_error(&e).expect("a typed error");
        assert_eq!(err.code(), -2010);
        assert!(
            err.to_string().contains("request 2: 40 of its frame's"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_frame_within_its_deadline_is_read_and_the_next_gets_its_own() {
        let (mut peer, mut io) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(1 << 20).with_payload_timeout(TIMEOUT);
        for id in [1, 2] {
            let f = frame(id, 1000);
            for piece in f.chunks(f.len() / 9 + 1) {
                assert!(poll(&mut reader, &mut io).is_pending());
                peer.write_all(piece).await.unwrap();
                after(TIMEOUT / 10).await;
            }
            // Nine tenths of the timeout passed for each frame: more than one timeout for both.
            assert!(matches!(poll(&mut reader, &mut io), Poll::Ready(Ok(x)) if x.len() == 1000));
        }
        assert!(reader.deadline.as_ref().unwrap().sleep.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_for_permits_is_not_counted_and_a_stall_after_it_returns_them() {
        const LEN: usize = 100 << 10;
        let permits = Arc::new(Semaphore::new(LEN + 64));
        let budget = ReadBudget::new(permits.clone(), (LEN + 64) as u64, Arc::default());
        let (mut peer, mut io) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(1 << 20)
            .with_budget(budget)
            .with_payload_timeout(TIMEOUT);
        let holder = permits.clone().try_acquire_many_owned(LEN as u32).unwrap();
        let f = frame(1, LEN);
        peer.write_all(&f[..f.len() / 2]).await.unwrap();
        assert!(poll(&mut reader, &mut io).is_pending(), "waits for permits");
        after(10 * TIMEOUT).await;
        assert!(
            poll(&mut reader, &mut io).is_pending(),
            "still waits, no limit"
        );
        drop(holder);
        assert!(
            poll(&mut reader, &mut io).is_pending(),
            "granted, reads half"
        );
        assert!(
            permits.available_permits() < LEN,
            "the frame holds its permits"
        );
        after(TIMEOUT - MS).await;
        peer.write_all(&f[f.len() / 2..]).await.unwrap();
        let Poll::Ready(Ok(x)) = poll(&mut reader, &mut io) else {
            panic!("arrived within the deadline counted from the grant")
        };
        assert_eq!(x.len(), LEN);
        assert_eq!(
            permits.available_permits(),
            LEN + 64,
            "decoded: permits dropped"
        );

        let f = frame(2, LEN);
        peer.write_all(&f[..f.len() / 2]).await.unwrap();
        assert!(poll(&mut reader, &mut io).is_pending());
        assert!(permits.available_permits() < LEN);
        after(TIMEOUT).await;
        let Poll::Ready(Err(e)) = poll(&mut reader, &mut io) else {
            panic!("the deadline passed")
        };
        assert!(payload_timeout_error(&e).is_some(), "{e}");
        drop(reader);
        assert_eq!(
            permits.available_permits(),
            LEN + 64,
            "closing returns them"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_an_oversize_frame_has_a_deadline_too() {
        let (mut peer, mut io) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(100).with_payload_timeout(TIMEOUT);
        let f = frame(4, 1000);
        peer.write_all(&f[..500]).await.unwrap();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let first = reader.poll_frame::<Bytes, _>(&mut io, &mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(Received::Oversize(h)))) if h.request_id == 4));
        assert!(poll(&mut reader, &mut io).is_pending(), "skipping");
        after(TIMEOUT).await;
        let Poll::Ready(Err(e)) = poll(&mut reader, &mut io) else {
            panic!("the deadline passed")
        };
        assert!(payload_timeout_error(&e).is_some(), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_without_a_payload_timeout_waits_as_before() {
        let (mut peer, mut io) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(1 << 20);
        let f = frame(1, 100);
        peer.write_all(&f[..HEADER_LEN + 10]).await.unwrap();
        assert!(poll(&mut reader, &mut io).is_pending());
        after(1000 * TIMEOUT).await;
        assert!(poll(&mut reader, &mut io).is_pending());
        peer.write_all(&f[HEADER_LEN + 10..]).await.unwrap();
        assert!(matches!(poll(&mut reader, &mut io), Poll::Ready(Ok(x)) if x.len() == 100));
    }
}
