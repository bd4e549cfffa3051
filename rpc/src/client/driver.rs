//! The task behind one client connection: reads responses and hands each to its waiting call,
//! writes out what callers could not write at once, and expires deadlines.
//!
//! Callers write their own requests ([`channel`](super::channel)), so in the common case this
//! task runs once per response: woken by the socket, it decodes the frame and completes the
//! call's oneshot. Deadlines share one timer, armed at the earliest deadline of the calls
//! waiting; a call only wakes this task when its deadline is earlier than that timer.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use serde::de::DeserializeOwned;
use tarpc::client::RpcError;
use tarpc::Response;
use tokio::time::Sleep;

use super::channel::Shared;
use crate::endpoint::SocketRead;
use crate::transport::{oversize_received, FrameReader, Received};

/// Frames handled per wake-up before the task yields to others.
const BUDGET: usize = 64;

/// The driver's own state, besides what it shares with the callers.
struct Driver<Req, Resp> {
    shared: Arc<Shared<Req, Resp>>,
    io: SocketRead,
    reader: FrameReader,
    timer: Option<Pin<Box<Sleep>>>,
}

/// Runs the connection until it ends (peer closed, a read or write failed, or every channel
/// clone was dropped); then fails the calls still waiting.
pub(crate) async fn drive<Req, Resp>(
    shared: Arc<Shared<Req, Resp>>,
    io: SocketRead,
    reader: FrameReader,
) -> io::Result<()>
where
    Resp: DeserializeOwned,
{
    let mut driver = Driver {
        shared,
        io,
        reader,
        timer: None,
    };
    let res = poll_fn(|cx| driver.poll(cx)).await;
    let reason = match &res {
        Ok(()) => "connection closed".to_string(),
        Err(e) => format!("connection failed: {e}"),
    };
    driver.shared.close(reason);
    res
}

impl<Req, Resp: DeserializeOwned> Driver<Req, Resp> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.driver.register(cx.waker());
        if self.shared.closing.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        if let Poll::Ready(Err(e)) = self.poll_flush(cx) {
            return Poll::Ready(Err(e));
        }
        self.poll_deadlines(cx);
        self.poll_responses(cx)
    }

    /// Writes out what the socket did not take from the callers, then what they queued since.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.shared.flush_wanted.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let mut guard = self.shared.lock_out();
        let out = &mut *guard;
        let Some(io) = &mut out.io else {
            return Poll::Ready(Ok(()));
        };
        loop {
            if out.pending.poll_write_out(io, cx)?.is_pending() {
                // Callers must not write past bytes still waiting here.
                out.handed_off = true;
                return Poll::Pending;
            }
            let batch = self.shared.lock_frames().take();
            self.shared.space.notify_waiters();
            if batch.is_empty() {
                break;
            }
            out.pending = batch;
        }
        out.handed_off = false;
        self.shared.flush_wanted.store(false, Ordering::Release);
        drop(guard);
        // Frames queued after the last look went unwritten by their callers: write them now.
        self.shared.write_now();
        Poll::Ready(Ok(()))
    }

    /// Re-arms the timer for an earlier deadline, and fails the calls whose deadline passed.
    fn poll_deadlines(&mut self, cx: &mut Context<'_>) {
        if self.shared.rearm.swap(false, Ordering::AcqRel) {
            let mut calls = self.shared.lock_calls();
            if let Some(wanted) = calls.wanted.take() {
                if calls.armed.is_none_or(|armed| wanted < armed) {
                    calls.armed = Some(wanted);
                    drop(calls);
                    self.arm(wanted);
                }
            }
        }
        while let Some(timer) = &mut self.timer {
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            match self.expire() {
                Some(next) => self.arm(next),
                None => self.timer = None,
            }
        }
    }

    fn arm(&mut self, at: Instant) {
        let at = tokio::time::Instant::from_std(at);
        match &mut self.timer {
            Some(timer) => timer.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }

    /// Fails the calls whose deadline passed; returns the earliest deadline still waiting.
    fn expire(&mut self) -> Option<Instant> {
        let now = crate::clock::now();
        let (expired, next) = {
            let mut calls = self.shared.lock_calls();
            let expired: Vec<_> = calls
                .waiting
                .extract_if(|_, w| w.deadline <= now)
                .map(|(_, w)| w)
                .collect();
            let next = calls.waiting.values().map(|w| w.deadline).min();
            calls.wanted = None;
            calls.armed = next;
            (expired, next)
        };
        for w in expired {
            let _ = w.reply.send(Err(RpcError::DeadlineExceeded));
        }
        next
    }

    /// Hands received responses to their calls.
    fn poll_responses(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        for _ in 0..BUDGET {
            let frame = match self
                .reader
                .poll_frame::<Response<Resp>, _>(&mut self.io, cx)
            {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame {
                Received::Message(resp, _) => self
                    .shared
                    .complete(resp.request_id, resp.message.map_err(RpcError::Server)),
                Received::Oversize(header) => {
                    let err = oversize_received(&header, self.reader.recv_max());
                    self.shared.complete(
                        header.request_id,
                        Err(RpcError::Server(err.to_server_error())),
                    );
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
