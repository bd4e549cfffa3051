//! Fake NICs: the verbs seam executed in memory, for tests on machines without an RDMA device.
//!
//! A [`FakeFabric`] connects every fake NIC made on it, as one switch would. Each engine under
//! test gets its own [`FakeFabric::host`] (its NICs); a work request is executed by the
//! fabric's one "wire" thread, asynchronously to the poster as a NIC's DMA is, with the checks
//! a NIC makes: the remote queue pair exists and is connected to this one, the rkey names a
//! live memory region on the target NIC whose access flags allow the operation and whose range
//! holds the request, the lkey names a live local region holding the local range. The bytes
//! move only when every check passed, while the wire holds both regions alive and the queue
//! pair's state, so that deregistration and [`QueuePair::fail`] return only after the copy
//! under way ended: the promises of the module `verbs`.
//!
//! Failures to inject: a NIC down (its work requests fail with a transport error, new queue
//! pairs cannot be made on it), the next N work requests through a NIC failing, a delay per
//! work request (to catch requests in flight at a cancel), and per-NIC counts of the requests
//! executed (to see the spreading).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Notify;

use super::verbs::{
    Completion, Gid, LinkLayer, MemoryRegion, MrAccess, Mtu, Nic, NicInfo, QpEndpoint, QueuePair,
    Verbs, WcStatus, WorkRequest, WrOp,
};
use crate::error::Error;
use crate::memory::raw::{self, Span};

/// The verbs status a fake transport error completes with (`IBV_WC_RETRY_EXC_ERR`).
pub const RETRY_EXCEEDED: u32 = 12;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A switch connecting fake NICs; cheap to clone.
#[derive(Clone)]
pub struct FakeFabric {
    inner: Arc<Fabric>,
}

impl std::fmt::Debug for FakeFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeFabric").finish_non_exhaustive()
    }
}

struct Fabric {
    /// Every NIC, by GID.
    nics: Mutex<HashMap<Gid, Arc<FakeNicState>>>,
    /// Every queue pair, by (GID of its NIC, QPN).
    qps: Mutex<HashMap<(Gid, u32), Weak<FakeQp>>>,
    next_gid: AtomicU32,
    next_qpn: AtomicU32,
    next_key: AtomicU32,
    /// How long the wire takes per work request.
    delay_us: AtomicU64,
    wire: Mutex<mpsc::Sender<Posted>>,
}

/// One NIC's state on the fabric.
struct FakeNicState {
    info: Mutex<NicInfo>,
    /// Live memory regions by rkey (lkeys equal rkeys here).
    regions: Mutex<HashMap<u32, Arc<FakeMr>>>,
    /// Work requests to fail before running (injected).
    fail_next: AtomicU32,
    /// Registrations refused (injected).
    refuse: AtomicBool,
    /// Work requests this NIC initiated that ran to success.
    executed: AtomicU64,
}

/// One work request on its way over the wire.
struct Posted {
    qp: Arc<FakeQp>,
    wr: WorkRequest,
}

impl FakeFabric {
    /// An empty fabric, with its wire thread.
    pub fn new() -> FakeFabric {
        let (tx, rx) = mpsc::channel::<Posted>();
        let inner = Arc::new(Fabric {
            nics: Mutex::default(),
            qps: Mutex::default(),
            next_gid: AtomicU32::new(1),
            next_qpn: AtomicU32::new(0x100),
            next_key: AtomicU32::new(0x1000),
            delay_us: AtomicU64::new(0),
            wire: Mutex::new(tx),
        });
        let weak = Arc::downgrade(&inner);
        // The wire ends when the fabric is gone (its sender dropped) and the queue drained.
        let spawned = std::thread::Builder::new()
            .name("fake-rdma-wire".into())
            .spawn(move || {
                for posted in rx {
                    let Some(fabric) = weak.upgrade() else { break };
                    fabric.execute(posted);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the fake fabric's wire thread did not start");
        }
        FakeFabric { inner }
    }

    /// A host with NICs named `nics` (port 1, RoCE, MTU 4096, up): its verbs for an engine.
    pub fn host(&self, nics: &[&str]) -> Arc<dyn Verbs> {
        let mut gids = Vec::new();
        for name in nics {
            let n = self.inner.next_gid.fetch_add(1, Ordering::Relaxed);
            let mut gid = [0u8; 16];
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&n.to_be_bytes());
            let gid = Gid(gid);
            let info = NicInfo {
                name: (*name).to_string(),
                port: 1,
                gid,
                gid_index: 3,
                lid: 0,
                mtu: Mtu::B4096,
                link: LinkLayer::Ethernet,
                up: true,
            };
            let state = Arc::new(FakeNicState {
                info: Mutex::new(info),
                regions: Mutex::default(),
                fail_next: AtomicU32::new(0),
                refuse: AtomicBool::new(false),
                executed: AtomicU64::new(0),
            });
            lock(&self.inner.nics).insert(gid, state);
            gids.push(gid);
        }
        Arc::new(FakeVerbs {
            fabric: self.inner.clone(),
            gids,
        })
    }

    fn nic_by_name(&self, verbs_gids: &[Gid], name: &str) -> Option<Arc<FakeNicState>> {
        let nics = lock(&self.inner.nics);
        verbs_gids
            .iter()
            .filter_map(|g| nics.get(g))
            .find(|n| lock(&n.info).name == name)
            .cloned()
    }

    fn each_nic(&self, gid: Gid, f: impl FnOnce(&FakeNicState)) {
        if let Some(n) = lock(&self.inner.nics).get(&gid) {
            f(n);
        }
    }

    /// Takes the NIC with GID `gid` down (or up again): its work requests fail with a
    /// transport error and its queue pairs go to the error state, as when a link drops.
    pub fn set_up(&self, gid: Gid, up: bool) {
        self.each_nic(gid, |n| lock(&n.info).up = up);
    }

    /// Makes the NIC with GID `gid` refuse memory registrations (as at the memlock limit), or
    /// accept them again.
    pub fn refuse_registrations(&self, gid: Gid, refuse: bool) {
        self.each_nic(gid, |n| n.refuse.store(refuse, Ordering::Relaxed));
    }

    /// Fails the next `n` work requests that the NIC with GID `gid` initiates (a transport
    /// error; the queue pair goes to the error state and flushes the rest).
    pub fn fail_next(&self, gid: Gid, n: u32) {
        self.each_nic(gid, |nic| nic.fail_next.store(n, Ordering::Relaxed));
    }

    /// Sets the NIC's port MTU (before queue pairs are made on it).
    pub fn set_mtu(&self, gid: Gid, mtu: Mtu) {
        self.each_nic(gid, |n| lock(&n.info).mtu = mtu);
    }

    /// Makes the wire take `delay` per work request.
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.inner.delay_us.store(us, Ordering::Relaxed);
    }

    /// How many work requests the NIC with GID `gid` initiated that succeeded.
    pub fn executed(&self, gid: Gid) -> u64 {
        lock(&self.inner.nics)
            .get(&gid)
            .map_or(0, |n| n.executed.load(Ordering::Relaxed))
    }

    /// The memory regions live on the NIC with GID `gid`.
    pub fn regions(&self, gid: Gid) -> usize {
        lock(&self.inner.nics)
            .get(&gid)
            .map_or(0, |n| lock(&n.regions).len())
    }

    /// Queue pairs that exist on the fabric (not yet dropped).
    pub fn queue_pairs(&self) -> usize {
        lock(&self.inner.qps)
            .values()
            .filter(|q| q.strong_count() > 0)
            .count()
    }

    /// The path MTUs of the connected queue pairs on the fabric.
    pub fn path_mtus(&self) -> Vec<Mtu> {
        let qps: Vec<Arc<FakeQp>> = lock(&self.inner.qps)
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        qps.iter()
            .filter_map(|q| match &*lock(&q.state) {
                QpState::Connected { mtu, .. } => Some(*mtu),
                _ => None,
            })
            .collect()
    }

    /// The GID of the NIC `name` among a host's NICs (`verbs` from [`FakeFabric::host`]).
    pub fn gid(&self, verbs: &Arc<dyn Verbs>, name: &str) -> Option<Gid> {
        let nics = verbs.nics().ok()?;
        nics.into_iter().find(|n| n.name == name).map(|n| n.gid)
    }
}

impl Default for FakeFabric {
    fn default() -> Self {
        FakeFabric::new()
    }
}

impl Fabric {
    fn nic(&self, gid: Gid) -> Option<Arc<FakeNicState>> {
        lock(&self.nics).get(&gid).cloned()
    }

    /// Runs one work request, with the checks a NIC makes, and completes it.
    fn execute(&self, Posted { qp, wr }: Posted) {
        let delay = self.delay_us.load(Ordering::Relaxed);
        // A flush takes no time on the wire.
        if delay > 0 && !qp.failed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(delay));
        }
        // The queue pair's state is held for the whole request: `fail` waits for it.
        let state = lock(&qp.state);
        let status = match &*state {
            QpState::Error => WcStatus::Flushed,
            QpState::Reset => WcStatus::Transport(RETRY_EXCEEDED),
            QpState::Connected { remote, .. } => self.run(&qp, remote, &wr),
        };
        let failed_path = matches!(status, WcStatus::Transport(_));
        qp.complete(wr.id, status);
        drop(state);
        if failed_path {
            // A transport error moves a reliable-connected queue pair to the error state.
            qp.fail();
        }
    }

    fn run(&self, qp: &FakeQp, remote: &QpEndpoint, wr: &WorkRequest) -> WcStatus {
        let transport_error = WcStatus::Transport(RETRY_EXCEEDED);
        let Some(local_nic) = self.nic(qp.gid) else {
            return transport_error;
        };
        let Some(remote_nic) = self.nic(remote.gid) else {
            return transport_error;
        };
        if !lock(&local_nic.info).up || !lock(&remote_nic.info).up {
            return transport_error;
        }
        let injected =
            local_nic
                .fail_next
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if injected.is_ok() {
            return transport_error;
        }
        // The peer's queue pair must exist, be connected back to this one, and not be failed.
        let peer = lock(&self.qps)
            .get(&(remote.gid, remote.qpn))
            .and_then(Weak::upgrade);
        // (A queue pair connected to itself is refused without locking its state twice.)
        let connected_back = peer.as_ref().is_some_and(|p| {
            !std::ptr::eq(&**p, qp)
                && match &*lock(&p.state) {
                    QpState::Connected { remote, .. } => {
                        remote.gid == qp.gid && remote.qpn == qp.qpn
                    }
                    _ => false,
                }
        });
        if !connected_back {
            return transport_error;
        }
        let target = lock(&remote_nic.regions).get(&wr.rkey).cloned();
        let Some(target) = target else {
            return WcStatus::RemoteAccess;
        };
        let target_live = target.live.read().unwrap_or_else(|p| p.into_inner());
        let allowed = match wr.op {
            WrOp::Read => target.access.remote_read,
            WrOp::Write => target.access.remote_write,
        };
        if !*target_live || !allowed || !target.holds(wr.remote, wr.len) {
            return WcStatus::RemoteAccess;
        }
        let source = lock(&local_nic.regions).get(&wr.lkey).cloned();
        let Some(source) = source else {
            return WcStatus::LocalProtection;
        };
        // One guard when both sides are the same region (a second read lock could wait behind
        // a deregistration waiting for the first).
        let source_guard = match Arc::ptr_eq(&source, &target) {
            true => None,
            false => Some(source.live.read().unwrap_or_else(|p| p.into_inner())),
        };
        let source_live = source_guard.as_ref().map_or(&target_live, |g| g);
        if !**source_live || !source.holds(wr.local, wr.len) {
            return WcStatus::LocalProtection;
        }
        let (Some(local), Some(far)) = (
            span(source_live, wr.local, wr.len),
            span(&target_live, wr.remote, wr.len),
        ) else {
            return WcStatus::LocalProtection;
        };
        let copied = match wr.op {
            WrOp::Read => raw::copy(far, local),
            WrOp::Write => raw::copy(local, far),
        };
        match copied {
            Ok(()) => {
                local_nic.executed.fetch_add(1, Ordering::Relaxed);
                WcStatus::Success
            }
            Err(_) => WcStatus::LocalProtection,
        }
    }
}

/// A span over `[addr, addr + len)` of the live memory region whose read guard is `live`,
/// valid as long as the guard is held.
fn span<'g>(live: &'g RwLockReadGuard<'_, bool>, addr: u64, len: u32) -> Option<Span<'g>> {
    if !**live {
        return None;
    }
    let ptr = std::ptr::NonNull::new(usize::try_from(addr).ok()? as *mut u8)?;
    // SAFETY: the caller checked that the region holds `[addr, addr + len)`, and `live` is its
    // read guard, held for the span's lifetime `'g`: `Nic::register`'s caller promised the
    // range valid for reads and writes, with no Rust reference over it, until the region is
    // dropped, and dropping it takes the write guard, which waits for this one.
    Some(unsafe { Span::new(ptr, len as usize) })
}

/// A host's view of the fabric: its own NICs.
struct FakeVerbs {
    fabric: Arc<Fabric>,
    gids: Vec<Gid>,
}

impl Verbs for FakeVerbs {
    fn nics(&self) -> Result<Vec<NicInfo>, Error> {
        let nics = lock(&self.fabric.nics);
        let found: Vec<NicInfo> = self
            .gids
            .iter()
            .filter_map(|g| nics.get(g))
            .map(|n| lock(&n.info).clone())
            .collect();
        if found.is_empty() {
            return Err(Error::NoRdmaDevice {
                reason: "the fake host has no NICs".into(),
            });
        }
        Ok(found)
    }

    fn open(&self, nic: &str) -> Result<Arc<dyn Nic>, Error> {
        let fabric = FakeFabric {
            inner: self.fabric.clone(),
        };
        let state = fabric
            .nic_by_name(&self.gids, nic)
            .ok_or_else(|| Error::NoRdmaDevice {
                reason: format!("no NIC named {nic:?}"),
            })?;
        let gid = lock(&state.info).gid;
        Ok(Arc::new(FakeNic {
            fabric: self.fabric.clone(),
            state,
            gid,
        }))
    }
}

struct FakeNic {
    fabric: Arc<Fabric>,
    state: Arc<FakeNicState>,
    gid: Gid,
}

/// A fake memory region.
struct FakeMr {
    addr: u64,
    len: u64,
    access: MrAccess,
    /// False once deregistered; the wire holds the read guard while it copies.
    live: RwLock<bool>,
}

impl FakeMr {
    fn holds(&self, addr: u64, len: u32) -> bool {
        addr >= self.addr
            && addr
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// The handle the transport holds; dropping it deregisters the region.
struct FakeMrHandle {
    mr: Arc<FakeMr>,
    key: u32,
    nic: Arc<FakeNicState>,
}

impl MemoryRegion for FakeMrHandle {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
}

impl Drop for FakeMrHandle {
    fn drop(&mut self) {
        lock(&self.nic.regions).remove(&self.key);
        // Waits for a copy under way (which holds the read guard) to end.
        *self.mr.live.write().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

impl Nic for FakeNic {
    fn info(&self) -> NicInfo {
        lock(&self.state.info).clone()
    }

    unsafe fn register(
        &self,
        addr: u64,
        len: u64,
        access: MrAccess,
    ) -> Result<Box<dyn MemoryRegion>, Error> {
        if self.state.refuse.load(Ordering::Relaxed) {
            return Err(Error::OutOfMemory {
                reason: "ibv_reg_mr: the memlock limit (injected)".into(),
            });
        }
        if addr.checked_add(len).is_none() || len == 0 {
            return Err(Error::invalid("rdma: a memory region must be non-empty"));
        }
        let key = self.fabric.next_key.fetch_add(1, Ordering::Relaxed);
        let mr = Arc::new(FakeMr {
            addr,
            len,
            access,
            live: RwLock::new(true),
        });
        lock(&self.state.regions).insert(key, mr.clone());
        Ok(Box::new(FakeMrHandle {
            mr,
            key,
            nic: self.state.clone(),
        }))
    }

    fn create_qp(&self, depth: u32) -> Result<Arc<dyn QueuePair>, Error> {
        let info = self.info();
        if !info.up {
            return Err(Error::PeerFailed {
                reason: format!("rdma: NIC {} is down", info.name),
            });
        }
        let qpn = self.fabric.next_qpn.fetch_add(1, Ordering::Relaxed);
        let qp = Arc::new(FakeQp {
            fabric: Arc::downgrade(&self.fabric),
            gid: self.gid,
            qpn,
            info,
            depth,
            state: Mutex::new(QpState::Reset),
            failed: AtomicBool::new(false),
            outstanding: AtomicU32::new(0),
            cq: Mutex::default(),
            notify: Arc::new(Notify::new()),
        });
        lock(&self.fabric.qps).insert((self.gid, qpn), Arc::downgrade(&qp));
        Ok(qp)
    }
}

enum QpState {
    Reset,
    Connected { remote: QpEndpoint, mtu: Mtu },
    Error,
}

struct FakeQp {
    fabric: Weak<Fabric>,
    gid: Gid,
    qpn: u32,
    info: NicInfo,
    depth: u32,
    state: Mutex<QpState>,
    failed: AtomicBool,
    outstanding: AtomicU32,
    cq: Mutex<VecDeque<Completion>>,
    notify: Arc<Notify>,
}

impl FakeQp {
    fn complete(&self, id: u64, status: WcStatus) {
        lock(&self.cq).push_back(Completion { id, status });
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
        self.notify.notify_one();
    }
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        if let Some(f) = self.fabric.upgrade() {
            lock(&f.qps).remove(&(self.gid, self.qpn));
        }
    }
}

impl QueuePair for FakeQp {
    fn local(&self) -> QpEndpoint {
        QpEndpoint {
            nic: self.info.name.clone(),
            gid: self.gid,
            gid_index: self.info.gid_index,
            lid: self.info.lid,
            link: self.info.link,
            qpn: self.qpn,
            psn: self.qpn.wrapping_mul(2654435761) & 0x00ff_ffff,
            mtu: self.info.mtu,
        }
    }

    fn connect(&self, remote: &QpEndpoint, mtu: Mtu) -> Result<(), Error> {
        let mut state = lock(&self.state);
        if !matches!(*state, QpState::Reset) {
            return Err(Error::invalid(
                "rdma: the queue pair is not in the reset state",
            ));
        }
        if mtu > self.info.mtu || mtu > remote.mtu {
            return Err(Error::invalid(format!(
                "rdma: path MTU {} exceeds a port's ({} here, {} there)",
                mtu.bytes(),
                self.info.mtu.bytes(),
                remote.mtu.bytes()
            )));
        }
        *state = QpState::Connected {
            remote: remote.clone(),
            mtu,
        };
        Ok(())
    }

    fn post(&self, requests: &[WorkRequest]) -> Result<(), Error> {
        let fabric = self
            .fabric
            .upgrade()
            .ok_or_else(|| Error::invalid("rdma: the fabric is gone"))?;
        if matches!(*lock(&self.state), QpState::Reset) {
            return Err(Error::invalid("rdma: post on an unconnected queue pair"));
        }
        let me = lock(&fabric.qps)
            .get(&(self.gid, self.qpn))
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::invalid("rdma: the queue pair is gone"))?;
        let n = u32::try_from(requests.len()).unwrap_or(u32::MAX);
        let room = self
            .outstanding
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                o.checked_add(n).filter(|&t| t <= self.depth)
            });
        if room.is_err() {
            return Err(Error::Overloaded {
                reason: format!("rdma: send queue full ({} entries)", self.depth),
            });
        }
        let wire = lock(&fabric.wire).clone();
        for wr in requests {
            let posted = Posted {
                qp: me.clone(),
                wr: *wr,
            };
            if let Err(mpsc::SendError(p)) = wire.send(posted) {
                p.qp.complete(p.wr.id, WcStatus::Flushed);
            }
        }
        Ok(())
    }

    fn poll(&self, out: &mut Vec<Completion>) {
        out.extend(lock(&self.cq).drain(..));
    }

    fn completed(&self) -> BoxFuture<'static, ()> {
        let notify = self.notify.clone();
        async move { notify.notified().await }.boxed()
    }

    fn fail(&self) {
        // Waits for the request the wire runs on this queue pair (it holds the state).
        let mut state = lock(&self.state);
        *state = QpState::Error;
        self.failed.store(true, Ordering::Relaxed);
    }

    fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}
