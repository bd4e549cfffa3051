//! yuebing's client channel: a tarpc [`Stub`] that writes each request from the caller's task.
//!
//! tarpc's own `client::Channel` hands every request to a dispatch task through a queue; that
//! task encodes it, writes it, and files its deadline in a timer queue, and each of those steps
//! can wake a task on another thread. Here the caller encodes its request and writes it to the
//! socket itself with a non-blocking write; callers that arrive while another is writing only
//! queue their frames, and the writer takes them along in the same `writev` (so a busy connection
//! still batches). One driver task per connection ([`driver`](super::driver)) reads responses and
//! hands each to its caller; it also finishes writes the socket could not take at once, and
//! expires deadlines with one timer armed at the earliest deadline, not one per call.
//!
//! What tarpc's channel guaranteed still holds: a call whose future is dropped before its
//! response sends the server a cancellation; a deadline ends the call with
//! `RpcError::DeadlineExceeded`; a request that could not be sent is `RpcError::Send` (so the
//! pool knows it was never executed); a connection that ends fails every call on it with
//! `RpcError::Shutdown`; frames the peer would not accept fail that one call with
//! `FrameTooLarge`.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use futures::task::AtomicWaker;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::client::stub::Stub;
use tarpc::client::RpcError;
use tarpc::{context, ClientMessage, Request, RequestName};
use tokio::sync::{oneshot, Notify};

use super::driver;
use crate::endpoint::{self, Socket, SocketWrite};
use crate::transport::{EncodeError, FrameReader, FrameWriter, Limits, Outgoing};

/// What a call gets back.
pub(crate) type Reply<Resp> = Result<Resp, RpcError>;

/// A connection's client side, shared by clones; the generated tarpc client wraps it
/// (`FooClient<Channel<FooRequest, FooResponse>>`). Dropping the last clone closes the connection.
pub struct Channel<Req, Resp> {
    handle: Arc<Handle<Req, Resp>>,
}

impl<Req, Resp> Clone for Channel<Req, Resp> {
    fn clone(&self) -> Self {
        Channel {
            handle: self.handle.clone(),
        }
    }
}

impl<Req, Resp> std::fmt::Debug for Channel<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").finish_non_exhaustive()
    }
}

/// Owned by the channel's clones (not by the driver): its drop tells the driver to stop.
struct Handle<Req, Resp> {
    shared: Arc<Shared<Req, Resp>>,
}

impl<Req, Resp> Drop for Handle<Req, Resp> {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.driver.wake();
    }
}

/// State shared by the callers and the driver of one connection.
pub(crate) struct Shared<Req, Resp> {
    next_id: AtomicU64,
    /// Frames encoded by callers, not yet taken by a writer.
    frames: Mutex<FrameWriter>,
    /// The socket's write half; whoever holds this lock writes for everyone.
    pub(crate) out: Mutex<Output>,
    pub(crate) calls: Mutex<Calls<Resp>>,
    /// Wakes the driver.
    pub(crate) driver: AtomicWaker,
    /// The socket did not take everything: the driver writes the rest when it can.
    pub(crate) flush_wanted: AtomicBool,
    /// A call's deadline is earlier than the driver's timer.
    pub(crate) rearm: AtomicBool,
    /// Every channel clone is gone, or a write failed: the driver ends.
    pub(crate) closing: AtomicBool,
    /// Signalled when queued frames were taken for writing.
    pub(crate) space: Notify,
    _req: PhantomData<fn(Req)>,
}

/// The write side of the socket and the bytes it has not taken yet.
pub(crate) struct Output {
    /// `None` once the connection ended.
    pub(crate) io: Option<SocketWrite>,
    /// Taken from the frame queue, partly written.
    pub(crate) pending: Outgoing,
    /// The driver is writing `pending` out; callers only queue frames.
    pub(crate) handed_off: bool,
}

/// Calls waiting for their response.
pub(crate) struct Calls<Resp> {
    pub(crate) waiting: HashMap<u64, Waiting<Resp>>,
    /// The deadline the driver's timer is set for.
    pub(crate) armed: Option<Instant>,
    /// The earliest deadline asked for since the driver last looked.
    pub(crate) wanted: Option<Instant>,
    /// Why the connection ended, once it did.
    pub(crate) closed: Option<String>,
}

/// One call waiting for its response.
pub(crate) struct Waiting<Resp> {
    pub(crate) reply: oneshot::Sender<Reply<Resp>>,
    pub(crate) deadline: Instant,
}

/// Opens a channel on a connected socket whose preamble is done. The returned future is the
/// connection's driver: spawn it; it ends when the connection does.
pub(crate) fn open<Req, Resp>(
    socket: Socket,
    limits: Limits,
) -> (
    Channel<Req, Resp>,
    impl Future<Output = std::io::Result<()>> + Send,
)
where
    Req: Serialize + Send + 'static,
    Resp: DeserializeOwned + Send + 'static,
{
    let (read, write) = endpoint::split(socket);
    let shared = Arc::new(Shared {
        next_id: AtomicU64::new(0),
        frames: Mutex::new(FrameWriter::new(limits.send_max)),
        out: Mutex::new(Output {
            io: Some(write),
            pending: Outgoing::default(),
            handed_off: false,
        }),
        calls: Mutex::new(Calls {
            waiting: HashMap::new(),
            armed: None,
            wanted: None,
            closed: None,
        }),
        driver: AtomicWaker::new(),
        flush_wanted: AtomicBool::new(false),
        rearm: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        space: Notify::new(),
        _req: PhantomData,
    });
    let channel = Channel {
        handle: Arc::new(Handle {
            shared: shared.clone(),
        }),
    };
    let drive = driver::drive(shared, read, FrameReader::new(limits.recv_max));
    (channel, drive)
}

impl<Req, Resp> Shared<Req, Resp> {
    pub(crate) fn lock_calls(&self) -> MutexGuard<'_, Calls<Resp>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lock_frames(&self) -> MutexGuard<'_, FrameWriter> {
        self.frames.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lock_out(&self) -> MutexGuard<'_, Output> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Files a call as waiting, unless the connection has ended. Also says whether other calls
    /// are waiting on this connection (then the driver writes this one, batched with theirs).
    fn register(
        &self,
        id: u64,
        deadline: Instant,
    ) -> Result<(oneshot::Receiver<Reply<Resp>>, Write), String> {
        let (tx, rx) = oneshot::channel();
        let mut calls = self.lock_calls();
        if let Some(reason) = &calls.closed {
            return Err(reason.clone());
        }
        calls.waiting.insert(
            id,
            Waiting {
                reply: tx,
                deadline,
            },
        );
        let write = if calls.waiting.len() > 1 {
            Write::Batched
        } else {
            Write::Now
        };
        let earlier = |t: Option<Instant>| t.is_none_or(|t| deadline < t);
        if earlier(calls.armed) && earlier(calls.wanted) {
            calls.wanted = Some(deadline);
            drop(calls);
            self.rearm.store(true, Ordering::Release);
            self.driver.wake();
        }
        Ok((rx, write))
    }

    /// Takes a call off the waiting list; whether it was still waiting.
    fn unregister(&self, id: u64) -> bool {
        self.lock_calls().waiting.remove(&id).is_some()
    }

    /// Hands `reply` to the call `id` if it is still waiting.
    pub(crate) fn complete(&self, id: u64, reply: Reply<Resp>) {
        let waiting = self.lock_calls().waiting.remove(&id);
        if let Some(w) = waiting {
            // The caller may have stopped listening in the meantime: nothing to do then.
            let _ = w.reply.send(reply);
        }
    }

    /// Ends the connection: every waiting call fails, later calls are refused.
    pub(crate) fn close(&self, reason: String) {
        let waiting = {
            let mut calls = self.lock_calls();
            calls.closed.get_or_insert(reason);
            std::mem::take(&mut calls.waiting)
        };
        for (_, w) in waiting {
            let _ = w.reply.send(Err(RpcError::Shutdown));
        }
        self.lock_out().io = None;
        self.space.notify_waiters();
    }

    /// Waits while the frame queue is over its high-water mark (the socket is behind), at most
    /// until `deadline`; whether there is room.
    async fn wait_for_space(&self, deadline: Instant) -> bool {
        if !self.lock_frames().is_full() {
            return true;
        }
        let wait = async {
            loop {
                let notified = self.space.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.lock_frames().is_full() || self.lock_calls().closed.is_some() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout_at(deadline.into(), wait).await.is_ok()
    }

    /// Queues `msg` and writes it now or has the driver write it. Once queued, a message is as
    /// good as sent: if the connection fails before it leaves, its call fails with the connection.
    fn send<T: Serialize>(&self, msg: &ClientMessage<T>, write: Write) -> Result<(), EncodeError> {
        self.lock_frames().encode(msg)?;
        match write {
            Write::Now => self.write_now(),
            Write::Batched => {
                self.flush_wanted.store(true, Ordering::Release);
                self.driver.wake();
            }
        }
        Ok(())
    }

    /// Writes the queued frames, unless someone else holds the socket: a caller writing now
    /// takes ours along (it looks again after it lets go), and the driver, if the socket is
    /// full, writes them once it drains. Never waits.
    pub(crate) fn write_now(&self) {
        loop {
            let mut guard = match self.out.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            let out = &mut *guard;
            if out.handed_off {
                return;
            }
            let Some(io) = &out.io else { return };
            loop {
                let batch = self.lock_frames().take();
                if batch.is_empty() {
                    break;
                }
                out.pending = batch;
                match out.pending.try_write_out(io) {
                    Ok(true) => {}
                    Ok(false) => {
                        out.handed_off = true;
                        self.flush_wanted.store(true, Ordering::Release);
                        drop(guard);
                        self.driver.wake();
                        return;
                    }
                    Err(e) => {
                        out.io = None;
                        drop(guard);
                        self.lock_calls()
                            .closed
                            .get_or_insert_with(|| format!("write failed: {e}"));
                        self.closing.store(true, Ordering::Release);
                        self.driver.wake();
                        return;
                    }
                }
            }
            drop(guard);
            if self.lock_frames().is_empty() {
                return;
            }
        }
    }
}

/// Who writes a queued message to the socket.
#[derive(Clone, Copy)]
enum Write {
    /// The caller, right away: the lowest latency when the connection is otherwise idle.
    Now,
    /// The driver, after the caller yields: under load, many requests share one `writev`.
    Batched,
}

/// A sent call: if its future is dropped before the response, the server is told to cancel.
struct Outstanding<'a, Req, Resp> {
    shared: &'a Shared<Req, Resp>,
    id: u64,
    sent: bool,
    done: bool,
}

impl<Req, Resp> Drop for Outstanding<'_, Req, Resp> {
    fn drop(&mut self) {
        if self.done || !self.shared.unregister(self.id) || !self.sent {
            return;
        }
        let cancel: ClientMessage<()> = ClientMessage::Cancel {
            trace_context: Default::default(),
            request_id: self.id,
        };
        // Best effort: a connection that cannot take a cancellation is ending anyway.
        let _ = self.shared.send(&cancel, Write::Now);
    }
}

impl<Req, Resp> Channel<Req, Resp>
where
    Req: Serialize,
{
    /// Sends `message` and waits for its response or its deadline.
    async fn request(&self, ctx: context::Context, message: Req) -> Reply<Resp> {
        let shared = &*self.handle.shared;
        if ctx.deadline <= crate::clock::now() {
            return Err(RpcError::DeadlineExceeded);
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        if !shared.wait_for_space(ctx.deadline).await {
            return Err(RpcError::DeadlineExceeded);
        }
        let (rx, write) = shared
            .register(id, ctx.deadline)
            .map_err(|reason| RpcError::Send(reason.into()))?;
        let mut call = Outstanding {
            shared,
            id,
            sent: false,
            done: false,
        };
        let msg = ClientMessage::Request(Request {
            context: ctx,
            id,
            message,
        });
        match shared.send(&msg, write) {
            Ok(()) => call.sent = true,
            Err(EncodeError::Oversize(err)) => return Err(RpcError::Server(err.to_server_error())),
            Err(EncodeError::Serialize(e)) => return Err(RpcError::Send(Box::new(e))),
        }
        let reply = rx.await;
        call.done = true;
        reply.unwrap_or(Err(RpcError::Shutdown))
    }
}

impl<Req, Resp> Stub for Channel<Req, Resp>
where
    Req: RequestName + Serialize,
{
    type Req = Req;
    type Resp = Resp;

    async fn call(&self, ctx: context::Context, request: Req) -> Reply<Resp> {
        self.request(ctx, request).await
    }
}
