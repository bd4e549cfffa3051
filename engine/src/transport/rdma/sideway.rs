//! The machine's NICs, through rdma-core, by the `sideway` crate.
//!
//! Why `sideway` (0.4): it wraps rdma-core's one-sided `RDMA_READ`/`RDMA_WRITE` work requests,
//! registers caller-owned memory (`reg_mr`, and `reg_dmabuf_mr` for GPU memory), and loads
//! libibverbs at run time (through `rdma-mummy-sys`), so the build needs no rdma-core headers
//! and a machine without rdma-core answers [`Error::NoRdmaDevice`] instead of failing to start.
//! `ibverbs` 0.9 can do neither one-sided operations nor caller memory; `rdma-sys` would need
//! the headers at build time and a safe wrapper written here.
//!
//! Each queue pair has its own completion queue and completion channel; the channel's file
//! descriptor is registered with tokio, so an idle path costs no CPU.
//!
//! Not run on hardware in this repository's CI (no RDMA device exists there): see
//! `scripts/hw-check.sh`.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use futures::FutureExt;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid as SGid, GidType};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, CompletionQueue, GenericCompletionQueue,
    WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer as SLink, Mtu as SMtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion as SMr;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair as _, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::verbs::{
    Completion, Gid, LinkLayer, MemoryRegion, MrAccess, Mtu, Nic, NicInfo, QpEndpoint, QueuePair,
    Verbs, WcStatus, WorkRequest, WrOp,
};
use crate::error::Error;

fn no_device(reason: impl std::fmt::Display) -> Error {
    Error::NoRdmaDevice {
        reason: reason.to_string(),
    }
}

fn verbs_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        reason: format!("rdma: {what}: {e}"),
    }
}

/// Opens every NIC port of this machine.
pub(super) fn open() -> Result<Arc<dyn Verbs>, Error> {
    let list = DeviceList::new().map_err(|e| no_device(format!("rdma-core: {e}")))?;
    let mut nics = Vec::new();
    for device in list.iter() {
        let name = device.name();
        let ctx = match device.open() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(nic = %name, error = %e, "rdma: cannot open the device");
                continue;
            }
        };
        let opened = ctx
            .alloc_pd()
            .map_err(|e| verbs_error("ibv_alloc_pd", e))
            .and_then(|pd| {
                let attr = ctx
                    .query_device()
                    .map_err(|e| verbs_error("ibv_query_device", e))?;
                Ok((pd, attr.phys_port_cnt()))
            });
        let (pd, ports) = match opened {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(nic = %name, error = %e, "rdma: the device is unusable");
                continue;
            }
        };
        for port in 1..=ports {
            match port_info(&ctx, &name, port) {
                Ok(info) => nics.push(Arc::new(SidewayNic {
                    info,
                    ctx: ctx.clone(),
                    pd: pd.clone(),
                })),
                Err(e) => tracing::warn!(nic = %name, port, error = %e, "rdma: port unusable"),
            }
        }
    }
    if nics.is_empty() {
        return Err(no_device("no usable RDMA device port (see `ibv_devinfo`)"));
    }
    Ok(Arc::new(SidewayVerbs { nics }))
}

fn mtu_of(m: SMtu) -> Mtu {
    match m {
        SMtu::Mtu256 => Mtu::B256,
        SMtu::Mtu512 => Mtu::B512,
        SMtu::Mtu1024 => Mtu::B1024,
        SMtu::Mtu2048 => Mtu::B2048,
        SMtu::Mtu4096 => Mtu::B4096,
    }
}

fn smtu(m: Mtu) -> SMtu {
    match m {
        Mtu::B256 => SMtu::Mtu256,
        Mtu::B512 => SMtu::Mtu512,
        Mtu::B1024 => SMtu::Mtu1024,
        Mtu::B2048 => SMtu::Mtu2048,
        Mtu::B4096 => SMtu::Mtu4096,
    }
}

/// One port: its state, MTU, LID, link layer, and the GID to use (on RoCE, RoCE v2 with an
/// IPv4-mapped address first, as Mooncake picks, then any RoCE v2, then any non-zero GID).
fn port_info(ctx: &Arc<DeviceContext>, name: &str, port: u8) -> Result<NicInfo, Error> {
    let attr = ctx
        .query_port(port)
        .map_err(|e| verbs_error("ibv_query_port", e))?;
    let link = match attr.link_layer() {
        SLink::Ethernet => LinkLayer::Ethernet,
        _ => LinkLayer::InfiniBand,
    };
    let table = ctx
        .query_gid_table()
        .map_err(|e| verbs_error("ibv_query_gid_table", e))?;
    let on_port: Vec<_> = table
        .iter()
        .filter(|g| g.port_num() == u32::from(port) && !g.gid().is_zero())
        .collect();
    let ipv4_mapped = |g: &SGid| g.raw[..10] == [0; 10] && g.raw[10..12] == [0xff, 0xff];
    let chosen = match link {
        LinkLayer::Ethernet => on_port
            .iter()
            .find(|g| g.gid_type() == GidType::RoceV2 && ipv4_mapped(&g.gid()))
            .or_else(|| on_port.iter().find(|g| g.gid_type() == GidType::RoceV2))
            .or_else(|| on_port.first()),
        LinkLayer::InfiniBand => on_port.first(),
    };
    let (gid, gid_index) =
        match chosen.and_then(|g| Some((g.gid(), u8::try_from(g.gid_index()).ok()?))) {
            Some((g, index)) => (Gid(g.raw), index),
            None => (Gid::default(), 0),
        };
    Ok(NicInfo {
        name: name.to_string(),
        port,
        gid,
        gid_index,
        lid: attr.lid(),
        mtu: mtu_of(attr.active_mtu()),
        link,
        up: matches!(
            attr.port_state(),
            PortState::Active | PortState::ActiveDefer
        ),
    })
}

struct SidewayVerbs {
    nics: Vec<Arc<SidewayNic>>,
}

impl Verbs for SidewayVerbs {
    fn nics(&self) -> Result<Vec<NicInfo>, Error> {
        Ok(self.nics.iter().map(|n| n.info.clone()).collect())
    }

    fn open(&self, nic: &str) -> Result<Arc<dyn Nic>, Error> {
        let found = self.nics.iter().find(|n| n.info.name == nic);
        found
            .map(|n| n.clone() as Arc<dyn Nic>)
            .ok_or_else(|| no_device(format!("no NIC named {nic:?}")))
    }
}

struct SidewayNic {
    info: NicInfo,
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
}

/// The verbs flags of a region with `access`: local write always (it is the local side of
/// reads), remote read and write as its rights say.
fn flags_of(access: MrAccess) -> AccessFlags {
    let mut flags = AccessFlags::LocalWrite;
    if access.remote_read {
        flags |= AccessFlags::RemoteRead;
    }
    if access.remote_write {
        flags |= AccessFlags::RemoteWrite;
    }
    flags
}

struct SidewayMr(Arc<SMr>);

impl MemoryRegion for SidewayMr {
    fn lkey(&self) -> u32 {
        self.0.lkey()
    }
    fn rkey(&self) -> u32 {
        self.0.rkey()
    }
}

impl Nic for SidewayNic {
    fn info(&self) -> NicInfo {
        self.info.clone()
    }

    unsafe fn register(
        &self,
        addr: u64,
        len: u64,
        access: MrAccess,
    ) -> Result<Box<dyn MemoryRegion>, Error> {
        let flags = flags_of(access);
        let (addr, len) = (
            usize::try_from(addr).map_err(|_| Error::invalid("rdma: address too large"))?,
            usize::try_from(len).map_err(|_| Error::invalid("rdma: length too large"))?,
        );
        // SAFETY: this function's caller promised `[addr, addr + len)` valid for reads and
        // writes, with no Rust reference over it, until the returned region is dropped, which
        // deregisters it (`ibv_dereg_mr`) before the range may go.
        let mr = unsafe { self.pd.reg_mr(addr, len, flags) }
            .map_err(|e| verbs_error("ibv_reg_mr", e))?;
        Ok(Box::new(SidewayMr(mr)))
    }

    fn registers_gpu_addresses(&self) -> bool {
        // nvidia-peermem lets the NIC pin GPU memory given by its address.
        std::path::Path::new("/sys/module/nvidia_peermem").exists()
    }

    unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        addr: u64,
        len: u64,
        access: MrAccess,
    ) -> Result<Box<dyn MemoryRegion>, Error> {
        let len = usize::try_from(len).map_err(|_| Error::invalid("rdma: length too large"))?;
        // SAFETY: this function's caller promised the range valid until the region is dropped
        // (deregistered) and `fd` its dma-buf; the NIC reads and writes it at iova `addr`, the
        // address work requests name it by.
        let mr = unsafe {
            self.pd
                .reg_dmabuf_mr(0, len, addr, fd.as_raw_fd(), flags_of(access))
        }
        .map_err(|e| verbs_error("ibv_reg_dmabuf_mr", e))?;
        Ok(Box::new(SidewayMr(mr)))
    }

    fn create_qp(&self, depth: u32) -> Result<Arc<dyn QueuePair>, Error> {
        let channel = self
            .ctx
            .create_comp_channel()
            .map_err(|e| verbs_error("ibv_create_comp_channel", e))?;
        channel
            .set_nonblocking(true)
            .map_err(|e| verbs_error("the completion channel", e))?;
        let cq = self
            .ctx
            .create_cq_builder()
            .setup_cqe(depth.max(1))
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| verbs_error("ibv_create_cq", e))?;
        let qp = self
            .pd
            .create_qp_builder()
            .setup_max_send_wr(depth.max(1))
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(GenericCompletionQueue::from(cq.clone()))
            .setup_recv_cq(GenericCompletionQueue::from(cq.clone()))
            .build()
            .map_err(|e| verbs_error("ibv_create_qp", e))?;
        let shared = Arc::new(Shared {
            qp: Mutex::new(qp),
            cq,
            channel,
            fd: OnceLock::new(),
            failed: AtomicBool::new(false),
            info: self.info.clone(),
            psn: fastrand::u32(..) & 0x00ff_ffff,
        });
        shared.arm()?;
        Ok(Arc::new(SidewayQp(shared)))
    }
}

/// The channel's descriptor, for tokio.
struct ChannelFd(Arc<CompletionChannel>);

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

struct Shared {
    // Dropped first: the queue pair before its completion queue and channel.
    qp: Mutex<BasicQueuePair>,
    cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
    fd: OnceLock<Result<AsyncFd<ChannelFd>, String>>,
    failed: AtomicBool,
    info: NicInfo,
    psn: u32,
}

impl Shared {
    fn qp(&self) -> std::sync::MutexGuard<'_, BasicQueuePair> {
        self.qp.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for an event at the next completion (`ibv_req_notify_cq`).
    fn arm(&self) -> Result<(), Error> {
        // SAFETY: the completion queue lives as long as `self.cq`, which this borrows.
        let ret = unsafe { rdma_mummy_sys::ibv_req_notify_cq(self.cq.cq().as_ptr(), 0) };
        match ret {
            0 => Ok(()),
            e => Err(verbs_error(
                "ibv_req_notify_cq",
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    /// Takes one event off the channel (non-blocking), acknowledges it and re-arms; false when
    /// there was none.
    fn take_event(&self) -> bool {
        let mut cq = std::ptr::null_mut();
        let mut context = std::ptr::null_mut();
        // SAFETY: the channel lives as long as `self.channel`; the out-pointers are locals.
        let ret = unsafe {
            rdma_mummy_sys::ibv_get_cq_event(
                self.channel.comp_channel().as_ptr(),
                &mut cq,
                &mut context,
            )
        };
        if ret != 0 {
            return false;
        }
        // SAFETY: `cq` is the completion queue the event came from, ours (one per channel).
        unsafe { rdma_mummy_sys::ibv_ack_cq_events(cq, 1) };
        if let Err(e) = self.arm() {
            tracing::warn!(error = %e, "rdma: could not re-arm a completion queue");
        }
        true
    }

    fn modify(&self, attr: &QueuePairAttribute, step: &str) -> Result<(), Error> {
        self.qp()
            .modify(attr)
            .map_err(|e| verbs_error(&format!("ibv_modify_qp to {step}"), e))
    }
}

struct SidewayQp(Arc<Shared>);

fn status_of(code: u32) -> WcStatus {
    match WorkCompletionStatus::from(code) {
        WorkCompletionStatus::Success => WcStatus::Success,
        WorkCompletionStatus::WorkRequestFlushedError => WcStatus::Flushed,
        WorkCompletionStatus::RemoteAccessError
        | WorkCompletionStatus::RemoteInvalidRequestError => WcStatus::RemoteAccess,
        WorkCompletionStatus::LocalProtectionError
        | WorkCompletionStatus::LocalAccessError
        | WorkCompletionStatus::LocalLengthError => WcStatus::LocalProtection,
        _ => WcStatus::Transport(code),
    }
}

impl QueuePair for SidewayQp {
    fn local(&self) -> QpEndpoint {
        let s = &self.0;
        QpEndpoint {
            nic: s.info.name.clone(),
            gid: s.info.gid,
            gid_index: s.info.gid_index,
            lid: s.info.lid,
            link: s.info.link,
            qpn: s.qp().qp_number(),
            psn: s.psn,
            mtu: s.info.mtu,
        }
    }

    fn connect(&self, remote: &QpEndpoint, mtu: Mtu) -> Result<(), Error> {
        let s = &self.0;
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(s.info.port)
            .setup_access_flags(
                AccessFlags::LocalWrite | AccessFlags::RemoteRead | AccessFlags::RemoteWrite,
            );
        s.modify(&init, "INIT")?;
        let mut av = AddressHandleAttribute::new();
        av.setup_port(s.info.port).setup_dest_lid(remote.lid);
        if remote.link == LinkLayer::Ethernet || !remote.gid.is_zero() {
            av.setup_grh_src_gid_index(s.info.gid_index)
                .setup_grh_dest_gid(&SGid { raw: remote.gid.0 })
                .setup_grh_hop_limit(64);
        }
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(smtu(mtu))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(16)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        s.modify(&rtr, "RTR")?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(s.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(16);
        s.modify(&rts, "RTS")
    }

    fn post(&self, requests: &[WorkRequest]) -> Result<(), Error> {
        let mut qp = self.0.qp();
        let mut guard = qp.start_post_send();
        for wr in requests {
            let handle = guard.construct_wr(wr.id, WorkRequestFlags::Signaled);
            let handle = match wr.op {
                WrOp::Read => handle.setup_read(wr.rkey, wr.remote),
                WrOp::Write => handle.setup_write(wr.rkey, wr.remote),
            };
            // SAFETY: the scatter entry only names memory for the NIC, which reaches it through
            // the memory region `lkey` names and checks the range against it (a range outside,
            // or a region deregistered meanwhile, completes with a protection error); the CPU
            // touches nothing here.
            unsafe { handle.setup_sge(wr.lkey, wr.local, wr.len) };
        }
        guard.post().map_err(|e| verbs_error("ibv_post_send", e))
    }

    fn poll(&self, out: &mut Vec<Completion>) {
        let Ok(poller) = self.0.cq.start_poll() else {
            return;
        };
        for wc in poller {
            let status = status_of(wc.status());
            if status != WcStatus::Success {
                // An error completion moves a reliable-connected queue pair to the error state.
                self.0.failed.store(true, Ordering::Relaxed);
            }
            out.push(Completion {
                id: wc.wr_id(),
                status,
            });
        }
    }

    fn completed(&self) -> BoxFuture<'static, ()> {
        let s = self.0.clone();
        async move {
            let fd = s.fd.get_or_init(|| {
                // SAFETY: `ChannelFd` holds the channel, whose descriptor stays open until the
                // channel is dropped; the `AsyncFd` owns that holder, so the descriptor outlives
                // it, and `as_raw_fd` returns the same descriptor every time.
                unsafe {
                    AsyncFd::register_with_interest(
                        ChannelFd(s.channel.clone()),
                        Interest::READABLE,
                    )
                }
                .map_err(|e| e.to_string())
            });
            match fd {
                Ok(fd) => loop {
                    let Ok(mut ready) = fd.readable().await else {
                        // The reactor refused the descriptor: poll again after a short sleep
                        // rather than spin.
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        return;
                    };
                    if s.take_event() {
                        return;
                    }
                    ready.clear_ready();
                },
                // No reactor for the descriptor: poll again after a short sleep.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
            }
        }
        .boxed()
    }

    fn fail(&self) {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        // The transition is synchronous: once it returns, the queue pair processes no work
        // request and its outstanding ones complete as flushed.
        if let Err(e) = self.0.modify(&attr, "ERR") {
            tracing::warn!(error = %e, "rdma: could not fail a queue pair");
        }
        self.0.failed.store(true, Ordering::Relaxed);
    }

    fn is_failed(&self) -> bool {
        self.0.failed.load(Ordering::Relaxed)
    }
}
