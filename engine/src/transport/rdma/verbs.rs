//! The verbs seam: the few operations of libibverbs the rdma transport uses, as traits.
//!
//! The transport (slicing, paths, handshake, completions, finality) is written once against
//! these traits. Two implementations exist: `sideway` (the real NICs, through rdma-core,
//! loaded at run time) and `fake` (two or more in-memory NICs in one process, with rkey,
//! access-flag and bounds checks and injectable failures), so that everything above the seam
//! is tested on a machine without an RDMA device.
//!
//! What each implementation promises is what the verbs specification promises, and the
//! transport relies on exactly that:
//! - a [`MemoryRegion`], once dropped, is deregistered: the NIC reads and writes its range no
//!   more (`ibv_dereg_mr` returns only then);
//! - [`QueuePair::fail`] moves the queue pair to the error state: each work request not yet
//!   completed then completes (with [`WcStatus::Flushed`], or its own status if it was under
//!   way), and a request whose completion was reported touches no memory again. The transport
//!   waits for those completions before it calls a canceled transfer final (`Path::kill`);
//!   the fake keeps a stronger promise (nothing touches memory once `fail` returned);
//! - one-sided operations run no code on the target: the remote memory region's access flags,
//!   its bounds and its rkey are the only checks there, and a violation completes the work
//!   request with [`WcStatus::RemoteAccess`] without moving a byte.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A port's global identifier (the RoCE address), 16 bytes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether no address is set (an InfiniBand port addressed by its LID only).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// A path MTU, as verbs names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mtu {
    /// 256 bytes.
    B256,
    /// 512 bytes.
    B512,
    /// 1024 bytes.
    B1024,
    /// 2048 bytes.
    B2048,
    /// 4096 bytes.
    B4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Mtu::B256 => 256,
            Mtu::B512 => 512,
            Mtu::B1024 => 1024,
            Mtu::B2048 => 2048,
            Mtu::B4096 => 4096,
        }
    }
}

/// The link layer of a port: it decides how a peer is addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID (and GID across subnets).
    InfiniBand,
    /// RoCE: addressed by GID.
    Ethernet,
}

/// One NIC port as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicInfo {
    /// The device name (`mlx5_0`).
    pub name: String,
    /// The port number (from 1).
    pub port: u8,
    /// The GID this transport uses on the port.
    pub gid: Gid,
    /// Its index in the port's GID table.
    pub gid_index: u8,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The port's active MTU.
    pub mtu: Mtu,
    /// InfiniBand or RoCE.
    pub link: LinkLayer,
    /// Whether the port is active.
    pub up: bool,
}

/// What peers may do through a memory region, besides the local NIC reading and writing it
/// (which every region allows: it is the local side of reads and writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MrAccess {
    /// `IBV_ACCESS_REMOTE_READ`.
    pub remote_read: bool,
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub remote_write: bool,
}

/// One side of a reliable connection, as the handshake exchanges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpEndpoint {
    /// The NIC the queue pair lives on.
    pub nic: String,
    /// The port's GID.
    pub gid: Gid,
    /// Its GID index (local information, for the address vector).
    pub gid_index: u8,
    /// The port's LID.
    pub lid: u16,
    /// The link layer.
    pub link: LinkLayer,
    /// The queue pair number.
    pub qpn: u32,
    /// The first packet sequence number this side sends.
    pub psn: u32,
    /// The largest MTU this side's port supports.
    pub mtu: Mtu,
}

/// A one-sided operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOp {
    /// `IBV_WR_RDMA_READ`: remote bytes into local memory.
    Read,
    /// `IBV_WR_RDMA_WRITE`: local bytes into remote memory.
    Write,
}

/// One work request: one slice of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    /// The transport's id for its completion.
    pub id: u64,
    /// Read or write.
    pub op: WrOp,
    /// Local address.
    pub local: u64,
    /// The local memory region's key on this NIC.
    pub lkey: u32,
    /// Remote address.
    pub remote: u64,
    /// The remote memory region's key on the peer's NIC.
    pub rkey: u32,
    /// Bytes.
    pub len: u32,
}

/// How a work request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// The bytes landed.
    Success,
    /// Flushed: the queue pair went to the error state before the request ran (or while it
    /// waited); it touched no memory after that.
    Flushed,
    /// The target refused: rkey unknown (deregistered), range outside its region, or the
    /// region lacks the right for the operation.
    RemoteAccess,
    /// The local key or range was refused (the local region was deregistered).
    LocalProtection,
    /// The path failed: retries exhausted, the peer's port down, or another transport error
    /// (its verbs status code).
    Transport(u32),
}

/// A completed work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The id the request was posted with.
    pub id: u64,
    /// How it ended.
    pub status: WcStatus,
}

/// The entry point: the NICs of this machine.
pub trait Verbs: Send + Sync {
    /// The NIC ports present ([`Error::NoRdmaDevice`] when rdma-core is missing or no device
    /// exists).
    fn nics(&self) -> Result<Vec<NicInfo>, Error>;
    /// Opens a NIC port by name: its protection domain, for registrations and queue pairs.
    fn open(&self, nic: &str) -> Result<Arc<dyn Nic>, Error>;
}

/// An opened NIC port with its protection domain.
pub trait Nic: Send + Sync {
    /// What the port is.
    fn info(&self) -> NicInfo;

    /// Registers `[addr, addr + len)` with the NIC (`ibv_reg_mr`).
    ///
    /// # Safety
    /// The range must stay valid for reads and writes until the returned region is dropped;
    /// the NIC reads and writes it concurrently with everything else, so no Rust reference may
    /// exist over it.
    unsafe fn register(
        &self,
        addr: u64,
        len: u64,
        access: MrAccess,
    ) -> Result<Box<dyn MemoryRegion>, Error>;

    /// Whether [`Nic::register`] reaches GPU memory by its address (nvidia-peermem is
    /// loaded); no by default.
    fn registers_gpu_addresses(&self) -> bool {
        false
    }

    /// Registers `[addr, addr + len)` of GPU memory through its dma-buf `fd`
    /// (`ibv_reg_dmabuf_mr`, GPUDirect without nvidia-peermem); the default refuses.
    ///
    /// # Safety
    /// As [`Nic::register`]; `fd` is the dma-buf of exactly that range.
    unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        addr: u64,
        len: u64,
        access: MrAccess,
    ) -> Result<Box<dyn MemoryRegion>, Error> {
        let _ = (fd, addr, len, access);
        Err(Error::invalid("this NIC registers no dma-buf"))
    }

    /// A reliable-connected queue pair with its own completion queue of `depth` entries, in
    /// the reset state until [`QueuePair::connect`].
    fn create_qp(&self, depth: u32) -> Result<Arc<dyn QueuePair>, Error>;
}

/// A registered memory region; dropping it deregisters it (see the module docs).
pub trait MemoryRegion: Send + Sync {
    /// The key local work requests name it by.
    fn lkey(&self) -> u32;
    /// The key peers' work requests name it by.
    fn rkey(&self) -> u32;
}

/// A reliable-connected queue pair and its completion queue.
pub trait QueuePair: Send + Sync {
    /// This side of the connection.
    fn local(&self) -> QpEndpoint;

    /// Connects to `remote` with path MTU `mtu` (reset → init → ready to receive → ready to
    /// send).
    fn connect(&self, remote: &QpEndpoint, mtu: Mtu) -> Result<(), Error>;

    /// Posts work requests, each signaled. On an error, none of them was posted.
    ///
    /// Safe: the NIC reaches memory only through live memory regions. A request whose `lkey`
    /// (on this NIC) or `rkey` (on the peer's) does not name a live region holding its range,
    /// or a region deregistered while the request waits, completes with
    /// [`WcStatus::LocalProtection`] or [`WcStatus::RemoteAccess`] and moves nothing.
    fn post(&self, requests: &[WorkRequest]) -> Result<(), Error>;

    /// Appends the completions that arrived since the last poll to `out`.
    fn poll(&self, out: &mut Vec<Completion>);

    /// Resolves once completions may have arrived since it was called (the completion
    /// channel's event): poll after it resolves. Idle, it costs nothing (no spinning).
    fn completed(&self) -> BoxFuture<'static, ()>;

    /// Moves the queue pair to the error state (see the module docs: its requests not
    /// completed yet complete, mostly as flushed; wait for their completions).
    fn fail(&self);

    /// Whether the queue pair is in the error state.
    fn is_failed(&self) -> bool;
}

/// The MTU and checks two ends of a connection agree on: the smaller of their MTUs, a shared
/// link layer, and the address the link layer needs (a GID on RoCE, a LID on InfiniBand).
pub fn negotiate(local: &QpEndpoint, remote: &QpEndpoint) -> Result<Mtu, Error> {
    if local.link != remote.link {
        return Err(Error::invalid(format!(
            "rdma: link layers differ ({:?} here, {:?} at {})",
            local.link, remote.link, remote.nic
        )));
    }
    let addressed = match remote.link {
        LinkLayer::Ethernet => !remote.gid.is_zero(),
        LinkLayer::InfiniBand => remote.lid != 0 || !remote.gid.is_zero(),
    };
    if !addressed {
        return Err(Error::invalid(format!(
            "rdma: {} has no address for its {:?} link (GID {:?}, LID {})",
            remote.nic, remote.link, remote.gid, remote.lid
        )));
    }
    Ok(local.mtu.min(remote.mtu))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(link: LinkLayer, mtu: Mtu, gid: u8, lid: u16) -> QpEndpoint {
        let mut g = [0u8; 16];
        g[15] = gid;
        QpEndpoint {
            nic: "mlx5_0".into(),
            gid: Gid(g),
            gid_index: 3,
            lid,
            link,
            qpn: 7,
            psn: 11,
            mtu,
        }
    }

    #[test]
    fn the_smaller_mtu_wins_on_either_side() {
        let a = end(LinkLayer::Ethernet, Mtu::B4096, 1, 0);
        let b = end(LinkLayer::Ethernet, Mtu::B1024, 2, 0);
        assert_eq!(negotiate(&a, &b), Ok(Mtu::B1024));
        assert_eq!(negotiate(&b, &a), Ok(Mtu::B1024));
        assert_eq!(negotiate(&a, &a), Ok(Mtu::B4096));
    }

    #[test]
    fn a_peer_without_an_address_or_on_another_link_is_refused() {
        let roce = end(LinkLayer::Ethernet, Mtu::B4096, 1, 0);
        let no_gid = end(LinkLayer::Ethernet, Mtu::B4096, 0, 0);
        let ib = end(LinkLayer::InfiniBand, Mtu::B4096, 0, 5);
        let ib_no_lid = end(LinkLayer::InfiniBand, Mtu::B4096, 0, 0);
        assert!(negotiate(&roce, &no_gid).is_err());
        assert!(negotiate(&roce, &ib).is_err());
        assert_eq!(negotiate(&ib, &ib), Ok(Mtu::B4096));
        assert!(negotiate(&ib, &ib_no_lid).is_err());
    }

    #[test]
    fn gids_print_as_groups_of_four_hex_digits() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(
            format!("{:?}", Gid(g)),
            "0000:0000:0000:0000:0000:ffff:7f00:0001"
        );
    }
}
