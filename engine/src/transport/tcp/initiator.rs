//! The initiating side of the tcp data plane: several pipelined connections per peer, a bound
//! on the bytes in flight to the peer, and slices matched to their responses in order.

use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use super::spin::spin_then_park;
use super::wire::{RequestHeader, ResponseHeader, HELLO_MAGIC, REQUEST_LEN, RESPONSE_LEN};
use super::{read_header, spin_budget, TcpConfig, BULK, IO_BUFFER};
use crate::error::Error;
use crate::request::Opcode;

/// Whether a slice's local memory may still be touched. Its waiter gives it up (on completion,
/// deadline or cancel) under the lock; the connection tasks touch the memory only while holding
/// the lock and seeing it live, so once the waiter has given it up, no byte of that memory is
/// read or written again, and the caller may free or reuse it.
#[derive(Debug)]
pub(crate) struct Claim(std::sync::Mutex<bool>);

impl Claim {
    fn new() -> Arc<Claim> {
        Arc::new(Claim(std::sync::Mutex::new(true)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Gives the claim up when the waiter stops waiting, for whatever reason.
struct GiveUp(Arc<Claim>);

impl Drop for GiveUp {
    fn drop(&mut self) {
        *self.0.lock() = false;
    }
}

/// One slice of a task on its way to the writer task.
pub(crate) struct Slice {
    pub(crate) header: RequestHeader,
    /// Local address the bytes come from (write) or go to (read).
    pub(crate) local: u64,
    /// Bytes of the frame already on the wire (a fast-path write that did not finish).
    written: usize,
    /// The answer's channel; `None` when its pending entry was queued already.
    done: Option<oneshot::Sender<Result<(), Error>>>,
    claim: Arc<Claim>,
}

impl Slice {
    /// The frame: the encoded header and, for a write, the payload.
    fn frame<'a>(&self, header: &'a [u8; REQUEST_LEN]) -> [&'a [u8]; 2] {
        let payload: &[u8] = if self.header.opcode == Opcode::Write {
            // SAFETY: the engine checked that the local range is registered; registration's
            // contract keeps it valid. The slice lives only while the socket reads it.
            unsafe { std::slice::from_raw_parts(self.local as *const u8, self.header.len as usize) }
        } else {
            &[]
        };
        [header, payload]
    }
}

struct Pending {
    opcode: Opcode,
    req_id: u64,
    local: u64,
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
        local: u64,
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
                local,
                written: 0,
                done: Some(done),
                claim,
            };
            return self.tx.send(slice).map_err(|_| closed());
        }
        let entry = Pending {
            opcode: header.opcode,
            req_id: header.req_id,
            local,
            len: header.len,
            done,
            claim: claim.clone(),
        };
        // Queued before the request is written: its response can never arrive first.
        self.pending.send(entry).map_err(|_| closed())?;
        let mut slice = Slice {
            header,
            local,
            written: 0,
            done: None,
            claim,
        };
        let encoded = header.encode();
        let parts = slice.frame(&encoded);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let io = [IoSlice::new(parts[0]), IoSlice::new(parts[1])];
        match self.wr.try_write_vectored(&io) {
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
    /// Opens `cfg.connections` data connections to `endpoint`.
    pub(crate) async fn connect(
        endpoint: &str,
        cfg: &TcpConfig,
        handle: &Handle,
    ) -> Result<Peer, Error> {
        let mut conns = Vec::with_capacity(cfg.connections);
        for _ in 0..cfg.connections.max(1) {
            conns.push(open(endpoint, cfg, handle).await?);
        }
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
        local: u64,
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
        let claim = Claim::new();
        // Dropped when this future ends or is dropped (deadline, cancel): from then on the
        // connection tasks leave `local` alone.
        let _give_up = GiveUp(claim.clone());
        conn.send(header, local, done, claim, direct)?;
        // A lone slice's answer is due within a round trip: poll for it before parking, for
        // as long as nothing else joins it in flight.
        let spin = match direct && can_spin {
            true => self.spin,
            false => Duration::ZERO,
        };
        let alone = || self.in_flight_bytes() == u64::from(n);
        let r = spin_then_park(result, spin, alone)
            .await
            .unwrap_or_else(|_| Err(failed("connection closed")));
        drop(permit);
        r
    }
}

async fn open(endpoint: &str, cfg: &TcpConfig, handle: &Handle) -> Result<Conn, Error> {
    let mut s = TcpStream::connect(endpoint)
        .await
        .map_err(|e| failed(format!("connect {endpoint}: {e}")))?;
    s.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    let token = cfg.token.as_deref().unwrap_or("").as_bytes();
    let mut hello = HELLO_MAGIC.to_vec();
    hello.extend_from_slice(&(token.len() as u16).to_be_bytes());
    hello.extend_from_slice(token);
    s.write_all(&hello)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if s.read_u8().await.map_err(|e| failed(e.to_string()))? != 0 {
        return Err(failed(format!(
            "{endpoint} refused the data connection (cluster token or protocol version?)"
        )));
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
            let unsent = slice.written == 0;
            if unsent && !*slice.claim.lock() {
                // Given up before any byte went out: drop it, nobody waits for its answer.
                next = slices.try_recv().ok();
                continue;
            }
            if let Some(done) = slice.done.take() {
                let entry = Pending {
                    opcode: slice.header.opcode,
                    req_id: slice.header.req_id,
                    local: slice.local,
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
        // Each part with the claim guarding it: a write's payload reads caller memory; headers
        // (and reads' empty payloads) read nothing of the caller's.
        let mut parts: Vec<(&[u8], Option<&Claim>)> = Vec::with_capacity(batch.len() * 2);
        for (slice, encoded) in batch.iter().zip(&headers) {
            let mut skip = slice.written;
            for (i, part) in slice.frame(encoded).into_iter().enumerate() {
                let from = skip.min(part.len());
                skip -= from;
                if from < part.len() {
                    let guard = (i == 1).then_some(&*slice.claim);
                    parts.push((&part[from..], guard));
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
        if write_all_shared(&wr, &parts).await.is_err() {
            break;
        }
        let mut busy = busy.lock().unwrap_or_else(|p| p.into_inner());
        if slices.is_empty() {
            *busy = false;
        }
    }
    dead.cancel();
}

/// Writes all of `parts` through a shared write half. Each syscall runs while holding the
/// claims of the payloads it still has to read; if one was given up meanwhile, its frame can no
/// longer be completed, so the connection is given up (an error).
async fn write_all_shared(
    wr: &OwnedWriteHalf,
    parts: &[(&[u8], Option<&Claim>)],
) -> std::io::Result<()> {
    let (mut first, mut offset) = (0usize, 0usize);
    while first < parts.len() {
        wr.writable().await?;
        let held: Vec<_> = parts[first..]
            .iter()
            .filter_map(|(_, c)| c.map(Claim::lock))
            .collect();
        if held.iter().any(|live| !**live) {
            return Err(std::io::Error::other("a slice was given up mid-write"));
        }
        let io: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&parts[first].0[offset..]))
            .chain(parts[first + 1..].iter().map(|(p, _)| IoSlice::new(p)))
            .collect();
        match wr.try_write_vectored(&io) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                // Advance past what went out.
                while n > 0 {
                    let left = parts[first].0.len() - offset;
                    if n >= left {
                        n -= left;
                        first += 1;
                        offset = 0;
                    } else {
                        offset += n;
                        n = 0;
                    }
                }
                while first < parts.len() && parts[first].0.len() == offset {
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
            if p.opcode == Opcode::Read {
                read_payload(&mut rd, &p).await?;
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

/// Reads a READ answer's payload into the slice's local memory, copying only while its claim
/// is live (so a waiter that gave up can free the memory at once); after that the rest of the
/// payload is read and dropped, to keep the stream in step.
async fn read_payload(rd: &mut BufReader<OwnedReadHalf>, p: &Pending) -> Result<(), Error> {
    let len = p.len as usize;
    let mut pos = 0;
    let mut sink: Vec<u8> = Vec::new();
    while pos < len {
        let want = len - pos;
        if !rd.buffer().is_empty() {
            let n = rd.buffer().len().min(want);
            {
                let live = p.claim.lock();
                if *live {
                    // SAFETY: the claim is live and held: the waiter still owns `local..+len`,
                    // registered memory the engine checked; [pos, pos+n) lies inside it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            rd.buffer().as_ptr(),
                            (p.local as *mut u8).add(pos),
                            n,
                        )
                    };
                }
            }
            rd.consume(n);
            pos += n;
            continue;
        }
        rd.get_ref()
            .readable()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let got = {
            let live = p.claim.lock();
            if *live {
                // SAFETY: as above; the socket writes at most `want` bytes into [pos, len) while
                // the claim is held (a non-blocking read: no await under the lock).
                let dst =
                    unsafe { std::slice::from_raw_parts_mut((p.local as *mut u8).add(pos), want) };
                rd.get_ref().try_read(dst)
            } else {
                drop(live);
                sink.resize(want.min(IO_BUFFER), 0);
                rd.get_ref().try_read(&mut sink)
            }
        };
        match got {
            Ok(0) => return Err(failed("connection closed mid-payload")),
            Ok(n) => pos += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    Ok(())
}

/// The error a target's status code stands for. `extra` is the target's instance id.
fn status_error(status: i32, extra: u64) -> Error {
    match status {
        -3204 => Error::StaleSegment {
            segment: String::new(),
            expected: 0,
            actual: extra,
        },
        -3504 => Error::OutOfBounds { addr: 0, len: 0 },
        -3001 => Error::invalid("refused by the target"),
        code => failed(format!("target answered error {code}")),
    }
}
