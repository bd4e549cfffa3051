//! The initiating side of the tcp data plane: several pipelined connections per peer, a bound
//! on the bytes in flight to the peer, and slices matched to their responses in order.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use yuebing_rpc::Token;

use super::spin::spin_then_park;
use super::wire::{
    encode_hello, HelloStatus, RequestHeader, ResponseHeader, REQUEST_LEN, RESPONSE_LEN,
};
use super::{read_header, spin_budget, TcpConfig, BULK, IO_BUFFER};
use crate::error::Error;
use crate::memory::raw::{self, Part};
use crate::memory::{Access, Gate, Lease, Pass};
use crate::request::Opcode;

/// Whether a slice's local memory may still be touched: the slice's lease on its local range,
/// and its waiter's claim. The waiter gives the claim up (on completion, deadline or cancel) by
/// closing its gate; unregistering the range revokes the lease. The connection tasks touch the
/// memory only inside an access that holds both open, so once either is closed, no byte of that
/// memory is read or written again, and the caller may free or reuse it.
#[derive(Debug)]
pub(crate) struct Claim {
    gate: Gate,
    lease: Lease,
}

/// One access to a claimed range.
struct Claimed<'a> {
    _claim: Pass<'a>,
    access: Access<'a>,
}

impl Claim {
    fn new(lease: Lease) -> Arc<Claim> {
        Arc::new(Claim {
            gate: Gate::default(),
            lease,
        })
    }

    /// One access, unless the waiter gave up or the range was unregistered.
    fn access(&self) -> Option<Claimed<'_>> {
        let claim = self.gate.enter()?;
        let access = self.lease.access()?;
        Some(Claimed {
            _claim: claim,
            access,
        })
    }

    /// Whether the memory may still be touched.
    fn usable(&self) -> bool {
        !self.gate.is_closed() && !self.lease.is_revoked()
    }
}

/// The error of a slice whose local range was unregistered under it.
fn released(lease: &Lease) -> Error {
    Error::AddressNotRegistered { addr: lease.addr() }
}

/// Gives the claim up when the waiter stops waiting, for whatever reason (waiting for an access
/// under way, one syscall, to end).
struct GiveUp(Arc<Claim>);

impl Drop for GiveUp {
    fn drop(&mut self) {
        self.0.gate.close();
    }
}

/// One slice of a task on its way to the writer task.
pub(crate) struct Slice {
    pub(crate) header: RequestHeader,
    /// Bytes of the frame already on the wire (a fast-path write that did not finish).
    written: usize,
    /// The answer's channel; `None` when its pending entry was queued already.
    done: Option<oneshot::Sender<Result<(), Error>>>,
    /// The local range the bytes come from (write) or go to (read).
    claim: Arc<Claim>,
}

impl Slice {
    /// Whether the frame carries the local range as its payload.
    fn has_payload(&self) -> bool {
        self.header.opcode == Opcode::Write
    }
}

struct Pending {
    opcode: Opcode,
    req_id: u64,
    len: u64,
    done: oneshot::Sender<Result<(), Error>>,
    claim: Arc<Claim>,
}

/// One data connection. Its write side is used directly by a caller when nothing is queued (a
/// non-blocking write: no hop to another task), and by the writer task otherwise; `busy` says
/// which, and every hand-over happens under that lock so the frames keep their order.
struct Conn {
    tx: mpsc::UnboundedSender<Slice>,
    wr: Arc<OwnedWriteHalf>,
    pending: mpsc::UnboundedSender<Pending>,
    busy: Arc<std::sync::Mutex<bool>>,
    dead: CancellationToken,
}

impl Conn {
    /// With `direct` (a lone small slice): queues the answer's entry and writes the frame now
    /// if the socket takes all of it, else hands the rest to the writer task. Otherwise, or
    /// while the writer task owns the socket, hands the slice over, so that slices under load
    /// are gathered into few syscalls.
    fn send(
        &self,
        header: RequestHeader,
        done: oneshot::Sender<Result<(), Error>>,
        claim: Arc<Claim>,
        direct: bool,
    ) -> Result<(), Error> {
        let closed = || failed("connection closed");
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if *busy || !direct {
            *busy = true;
            let slice = Slice {
                header,
                written: 0,
                done: Some(done),
                claim,
            };
            return self.tx.send(slice).map_err(|_| closed());
        }
        let mut slice = Slice {
            header,
            written: 0,
            done: None,
            claim: claim.clone(),
        };
        let encoded = header.encode();
        // Held from before the answer's entry is queued until the frame is written: a range
        // unregistered meanwhile fails here, before anything is queued or sent.
        let payload = match slice.has_payload() {
            true => Some(claim.access().ok_or_else(|| released(&claim.lease))?),
            false => None,
        };
        let entry = Pending {
            opcode: header.opcode,
            req_id: header.req_id,
            len: header.len,
            done,
            claim: claim.clone(),
        };
        // Queued before the request is written: its response can never arrive first.
        self.pending.send(entry).map_err(|_| closed())?;
        let payload_part = payload
            .as_ref()
            .map_or(Part::Bytes(&[]), |p| Part::Raw(p.access.span()));
        let parts = [Part::Bytes(&encoded), payload_part];
        let total: usize = parts.iter().map(Part::len).sum();
        let stream: &TcpStream = (*self.wr).as_ref();
        let written = stream.try_io(Interest::WRITABLE, || raw::send(stream.as_fd(), &parts));
        drop(payload);
        match written {
            Ok(n) if n == total => Ok(()),
            Ok(n) => {
                slice.written = n;
                *busy = true;
                self.tx.send(slice).map_err(|_| closed())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                *busy = true;
                self.tx.send(slice).map_err(|_| closed())
            }
            Err(e) => {
                self.dead.cancel();
                Err(failed(e.to_string()))
            }
        }
    }
}

/// The connections to one peer's data endpoint.
pub(crate) struct Peer {
    conns: Vec<Conn>,
    rr: AtomicUsize,
    in_flight: Arc<Semaphore>,
    capacity: usize,
    waiting: AtomicUsize,
    queue_len: usize,
    /// How long a lone slice's waiter polls before it parks.
    spin: Duration,
}

fn failed(reason: impl Into<String>) -> Error {
    Error::PeerFailed {
        reason: reason.into(),
    }
}

impl Peer {
    /// Opens `cfg.connections` data connections to `endpoint`, in parallel, presenting
    /// `token`; all must be admitted within `cfg.connect_timeout`.
    pub(crate) async fn connect(
        endpoint: &str,
        cfg: &TcpConfig,
        token: Option<&Token>,
        handle: &Handle,
    ) -> Result<Peer, Error> {
        let hello = encode_hello(token);
        let opens = (0..cfg.connections.max(1)).map(|_| open(endpoint, &hello, handle));
        let conns = tokio::time::timeout(cfg.connect_timeout, try_join_all(opens))
            .await
            .map_err(|_| {
                failed(format!(
                    "{endpoint}: no data connection admitted within {:?}",
                    cfg.connect_timeout
                ))
            })??;
        let capacity = cfg.max_in_flight_bytes.max(cfg.slice_size) as usize;
        Ok(Peer {
            conns,
            rr: AtomicUsize::new(0),
            in_flight: Arc::new(Semaphore::new(capacity)),
            capacity,
            waiting: AtomicUsize::new(0),
            queue_len: cfg.queue_len,
            spin: spin_budget(cfg, handle),
        })
    }

    /// Bytes in flight to this peer now.
    pub(crate) fn in_flight_bytes(&self) -> u64 {
        self.capacity
            .saturating_sub(self.in_flight.available_permits()) as u64
    }

    /// Whether every connection is still up.
    pub(crate) fn is_alive(&self) -> bool {
        self.conns.iter().all(|c| !c.dead.is_cancelled())
    }

    /// Sends one slice and waits for the target's answer (for a write: the bytes landed).
    /// `can_spin`: whether this future's thread polls the engine's I/O driver when it yields
    /// (see [`Job::can_spin`](crate::transport::Job::can_spin)).
    pub(crate) async fn run(
        &self,
        mut header: RequestHeader,
        local: Lease,
        can_spin: bool,
    ) -> Result<(), Error> {
        let n = u32::try_from(header.len).map_err(|_| Error::invalid("slice too large"))?;
        let permit = match self.in_flight.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue_len {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(Error::Overloaded {
                        reason: "in-flight bytes to this peer at their bound and the queue is full"
                            .into(),
                    });
                }
                let p = self.in_flight.clone().acquire_many_owned(n).await;
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                p.map_err(|_| failed("peer closed"))?
            }
        };
        // Alone in flight to this peer and small: nothing to gather, so skip the hop.
        let direct = header.len <= DIRECT_MAX && self.in_flight_bytes() == u64::from(n);
        header.lone = direct;
        // Slices in flight together are spread over the connections; a lone small one always
        // takes the first, whose socket and tasks are then still warm in the caches from the last
        // one (round robin costs a lone small write 5-15 % of its rate here).
        let i = match direct {
            true => 0,
            false => self.rr.fetch_add(1, Ordering::Relaxed) % self.conns.len(),
        };
        let conn = &self.conns[i];
        let (done, result) = oneshot::channel();
        let claim = Claim::new(local);
        // Dropped when this future ends or is dropped (deadline, cancel): from then on the
        // connection tasks leave `local` alone.
        let _give_up = GiveUp(claim.clone());
        conn.send(header, done, claim.clone(), direct)?;
        // A lone slice's answer is due within a round trip: poll for it before parking, for
        // as long as nothing else joins it in flight.
        let spin = match direct && can_spin {
            true => self.spin,
            false => Duration::ZERO,
        };
        let alone = || self.in_flight_bytes() == u64::from(n);
        let answer = spin_then_park(result, spin, alone);
        // The range unregistered under the slice: the connection tasks leave it alone from now
        // on, and the waiter need not wait for a (perhaps stalled) peer to learn it.
        let r = tokio::select! {
            biased;
            r = answer => r.unwrap_or_else(|_| Err(failed("connection closed"))),
            _ = claim.lease.revoked() => Err(released(&claim.lease)),
        };
        drop(permit);
        r
    }
}

/// Opens one data connection and has it admitted with `hello`.
async fn open(endpoint: &str, hello: &[u8], handle: &Handle) -> Result<Conn, Error> {
    let mut s = TcpStream::connect(endpoint)
        .await
        .map_err(|e| failed(format!("connect {endpoint}: {e}")))?;
    s.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    s.write_all(hello)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = s.read_u8().await.map_err(|e| failed(e.to_string()))?;
    match HelloStatus::from_byte(status) {
        Some(HelloStatus::Accepted) => {}
        Some(HelloStatus::BadToken) => return Err(yuebing_rpc::Error::Unauthenticated.into()),
        Some(HelloStatus::BadVersion) | None => {
            return Err(failed(format!(
                "{endpoint} refused the data connection: protocol version"
            )))
        }
    }
    let (rd, wr) = s.into_split();
    let wr = Arc::new(wr);
    let (tx, rx) = mpsc::unbounded_channel();
    let (ptx, prx) = mpsc::unbounded_channel();
    let dead = CancellationToken::new();
    let busy = Arc::new(std::sync::Mutex::new(false));
    handle.spawn(writer(
        wr.clone(),
        rx,
        ptx.clone(),
        busy.clone(),
        dead.clone(),
    ));
    handle.spawn(reader(rd, prx, dead.clone()));
    Ok(Conn {
        tx,
        wr,
        pending: ptx,
        busy,
        dead,
    })
}

/// Largest slice a caller writes itself when it is alone in flight.
const DIRECT_MAX: u64 = 256 << 10;

/// Most slices gathered into one `writev`.
const GATHER: usize = 32;

/// Writes the slices handed over by callers (when the socket could not take them at once),
/// gathering what is queued into one `writev`; gives the socket back to the callers when the
/// queue is empty.
async fn writer(
    wr: Arc<OwnedWriteHalf>,
    mut slices: mpsc::UnboundedReceiver<Slice>,
    pending: mpsc::UnboundedSender<Pending>,
    busy: Arc<std::sync::Mutex<bool>>,
    dead: CancellationToken,
) {
    let mut batch: Vec<Slice> = Vec::with_capacity(GATHER);
    while let Some(first) = tokio::select! {
        _ = dead.cancelled() => None,
        s = slices.recv() => s,
    } {
        batch.clear();
        let mut next = Some(first);
        while let Some(mut slice) = next {
            // Given up, or its range unregistered, before any byte went out and before its
            // answer's entry was queued: not sent at all. (A slice whose entry is queued already,
            // from the direct path, must go out, or the answers would fall out of step: a read's
            // header does, and its answer is dropped; a write's payload cannot, so the write
            // below gives the connection up.)
            if slice.written == 0 && slice.done.is_some() && !slice.claim.usable() {
                if let Some(done) = slice.done.take() {
                    let _ = done.send(Err(released(&slice.claim.lease)));
                }
                next = slices.try_recv().ok();
                continue;
            }
            if let Some(done) = slice.done.take() {
                let entry = Pending {
                    opcode: slice.header.opcode,
                    req_id: slice.header.req_id,
                    len: slice.header.len,
                    done,
                    claim: slice.claim.clone(),
                };
                // Queued before the request is written: its response can never arrive first.
                if pending.send(entry).is_err() {
                    dead.cancel();
                    return;
                }
            }
            batch.push(slice);
            next = if batch.len() < GATHER {
                slices.try_recv().ok()
            } else {
                None
            };
        }
        let headers: Vec<[u8; REQUEST_LEN]> = batch.iter().map(|s| s.header.encode()).collect();
        // A write's payload is caller memory, read under its claim; headers are private bytes.
        let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(batch.len() * 2);
        for (slice, encoded) in batch.iter().zip(&headers) {
            let skip = slice.written;
            if skip < REQUEST_LEN {
                pieces.push(Piece::Header(&encoded[skip..]));
            }
            if slice.has_payload() {
                let from = skip.saturating_sub(REQUEST_LEN);
                if (from as u64) < slice.header.len {
                    pieces.push(Piece::Payload(&slice.claim, from));
                }
            }
        }
        if batch.is_empty() {
            let mut busy = busy.lock().unwrap_or_else(|p| p.into_inner());
            if slices.is_empty() {
                *busy = false;
            }
            continue;
        }
        if write_all_shared(&wr, &pieces).await.is_err() {
            break;
        }
        let mut busy = busy.lock().unwrap_or_else(|p| p.into_inner());
        if slices.is_empty() {
            *busy = false;
        }
    }
    dead.cancel();
}

/// A piece of a frame for [`write_all_shared`].
enum Piece<'a> {
    /// Private bytes (a header, or what is left of one).
    Header(&'a [u8]),
    /// A write's payload from this offset on, read under its claim.
    Payload(&'a Claim, usize),
}

impl Piece<'_> {
    fn len(&self) -> usize {
        match self {
            Piece::Header(b) => b.len(),
            Piece::Payload(c, from) => c.lease.len() as usize - from,
        }
    }
}

/// Writes all of `pieces` through a shared write half. Each syscall runs inside accesses to the
/// payloads it still has to read; if one was given up or unregistered meanwhile, its frame can
/// no longer be completed, so the connection is given up (an error).
async fn write_all_shared(wr: &OwnedWriteHalf, pieces: &[Piece<'_>]) -> std::io::Result<()> {
    let stream: &TcpStream = wr.as_ref();
    let (mut first, mut offset) = (0usize, 0usize);
    while first < pieces.len() {
        wr.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            // A gathered batch is at most GATHER frames of two pieces: on the stack.
            let pending = &pieces[first..pieces.len().min(first + 2 * GATHER)];
            let mut held: [Option<Claimed<'_>>; GATHER] = [const { None }; GATHER];
            for (slot, piece) in held
                .iter_mut()
                .zip(pending.iter().filter(|p| matches!(p, Piece::Payload(..))))
            {
                if let Piece::Payload(claim, _) = piece {
                    *slot = Some(claim.access().ok_or_else(|| {
                        std::io::Error::other("a slice was given up or unregistered mid-write")
                    })?);
                }
            }
            let mut held = held.iter().flatten();
            let mut parts = [Part::Bytes(&[]); 2 * GATHER];
            for (i, (part, piece)) in parts.iter_mut().zip(pending).enumerate() {
                let skip = if i == 0 { offset } else { 0 };
                *part = match piece {
                    Piece::Header(b) => Part::Bytes(&b[skip..]),
                    Piece::Payload(_, from) => match held.next() {
                        Some(a) => Part::Raw(a.access.span().tail(from + skip)),
                        None => return Err(std::io::Error::other("payload without an access")),
                    },
                };
            }
            raw::send(stream.as_fd(), &parts[..pending.len()])
        });
        match sent {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                // Advance past what went out.
                while n > 0 {
                    let left = pieces[first].len() - offset;
                    if n >= left {
                        n -= left;
                        first += 1;
                        offset = 0;
                    } else {
                        offset += n;
                        n = 0;
                    }
                }
                while first < pieces.len() && pieces[first].len() == offset {
                    first += 1;
                    offset = 0;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn reader(
    rd: OwnedReadHalf,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    dead: CancellationToken,
) {
    let mut rd = BufReader::with_capacity(IO_BUFFER, rd);
    let mut header = [0u8; RESPONSE_LEN];
    let mut probe = [0u8; 1];
    let mut bulk = false;
    loop {
        // Wait on the socket alone (not on the queue: a wake-up per request for nothing): a
        // request's entry is queued before the request is written, so its response finds it.
        // Readiness with no entry queued is checked with a peek, so that a peer that went away
        // while the connection was idle is noticed before the next slice is sent to it.
        let arrived = async {
            if !rd.buffer().is_empty() {
                return Ok(rd.buffer().len());
            }
            rd.get_ref().readable().await?;
            if !pending.is_empty() {
                return Ok(1);
            }
            rd.get_mut().peek(&mut probe).await
        };
        let p = tokio::select! {
            biased;
            // The writer gave the connection up: nothing queued will be answered.
            _ = dead.cancelled() => break,
            n = arrived => match n {
                Ok(n) if n > 0 => match pending.try_recv() {
                    Ok(p) => p,
                    Err(_) => break, // bytes nobody asked for: not a yuebing target
                },
                _ => break, // end of stream or error: the peer went away
            },
        };
        let answer = async {
            read_header(&mut rd, &mut header, bulk)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let h = ResponseHeader::decode(&header)?;
            if h.req_id != p.req_id {
                return Err(failed("response out of order"));
            }
            if h.status != 0 {
                return Ok(Err(status_error(h.status, h.extra)));
            }
            if p.opcode == Opcode::Read && !read_payload(&mut rd, &p).await? {
                return Ok(Err(released(&p.claim.lease)));
            }
            Ok(Ok(()))
        };
        let r = tokio::select! {
            r = answer => r,
            _ = dead.cancelled() => Err(failed("connection given up")),
        };
        bulk = p.opcode == Opcode::Read && p.len >= BULK;
        match r {
            Ok(outcome) => {
                let _ = p.done.send(outcome);
            }
            Err(e) => {
                let _ = p.done.send(Err(e.clone()));
                dead.cancel();
                pending.close();
                while let Some(p) = pending.recv().await {
                    let _ = p.done.send(Err(e.clone()));
                }
                return;
            }
        }
    }
    dead.cancel();
}

/// Reads a READ answer's payload into the slice's local memory, copying only inside accesses
/// to its claim (so a waiter that gave up can free the memory at once, and an unregistered range
/// is left alone); after that the rest of the payload is read and dropped, to keep the stream in
/// step. Returns whether every byte landed.
async fn read_payload(rd: &mut BufReader<OwnedReadHalf>, p: &Pending) -> Result<bool, Error> {
    let len = p.len as usize;
    let (mut pos, mut landed) = (0, true);
    let mut sink: Vec<u8> = Vec::new();
    while pos < len {
        let want = len - pos;
        if !rd.buffer().is_empty() {
            let n = rd.buffer().len().min(want);
            match p.claim.access() {
                Some(a) => {
                    // A destination whose file was truncated: the rest is read and dropped.
                    if raw::copy_in(&rd.buffer()[..n], a.access.span().tail(pos)).is_err() {
                        landed = false;
                    }
                }
                None => landed = false,
            }
            rd.consume(n);
            pos += n;
            continue;
        }
        let stream: &TcpStream = rd.get_ref().as_ref();
        let got = match p.claim.access() {
            Some(a) => stream.try_io(Interest::READABLE, || {
                raw::recv(stream.as_fd(), a.access.span().tail(pos))
            }),
            None => {
                landed = false;
                sink.resize(want.min(IO_BUFFER), 0);
                stream.try_read(&mut sink)
            }
        };
        match got {
            Ok(0) => return Err(failed("connection closed mid-payload")),
            Ok(n) => pos += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                stream.readable().await.map_err(|e| failed(e.to_string()))?;
            }
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    Ok(landed)
}

/// The error a target's status code stands for. `extra` is the target's instance id.
fn status_error(status: i32, extra: u64) -> Error {
    Error::from_target_status(status, extra)
        .unwrap_or_else(|| failed(format!("target answered error {status}")))
}
