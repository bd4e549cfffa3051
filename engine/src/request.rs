//! What a caller asks the engine to move.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Direction of a transfer, seen from the initiator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Opcode {
    /// Copy from the target segment into local memory.
    Read,
    /// Copy from local memory into the target segment.
    Write,
}

/// A segment opened by this engine (its own, or a peer's). The default handle is the engine's
/// own segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentHandle(pub(crate) u64);

impl SegmentHandle {
    /// The handle as a number (for the C ABI).
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// A handle from [`SegmentHandle::to_raw`]; whether it is open is checked on use.
    pub fn from_raw(v: u64) -> Self {
        SegmentHandle(v)
    }
}

/// Which transport moves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TransportKind {
    /// Same process: memcpy.
    Local,
    /// Same host: the peer's exported memory mapped here.
    Shm,
    /// Between hosts with RDMA NICs: one-sided READ/WRITE (cargo feature `rdma`).
    Rdma,
    /// Any host: TCP.
    Tcp,
}

impl TransportKind {
    /// Order of preference when several transports reach a segment (lower first).
    pub fn preference(self) -> u8 {
        match self {
            TransportKind::Local => 0,
            TransportKind::Shm => 1,
            TransportKind::Rdma => 2,
            TransportKind::Tcp => 3,
        }
    }

    /// The transport's name as published in descriptors.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Local => "local",
            TransportKind::Shm => "shm",
            TransportKind::Rdma => "rdma",
            TransportKind::Tcp => "tcp",
        }
    }
}

impl std::str::FromStr for TransportKind {
    type Err = crate::error::Error;

    /// A transport by the name [`TransportKind::name`] gives it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            TransportKind::Local,
            TransportKind::Shm,
            TransportKind::Rdma,
            TransportKind::Tcp,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| {
            crate::error::Error::invalid(format!("unknown transport {s:?} (local, shm, rdma, tcp)"))
        })
    }
}

/// One transfer request (Mooncake's `TransferRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRequest {
    /// Read or write.
    pub opcode: Opcode,
    /// Address of the local range; it must be registered.
    pub source: u64,
    /// The segment on the other side.
    pub target: SegmentHandle,
    /// Address of the range in the target segment.
    pub target_offset: u64,
    /// Bytes to move (at least 1).
    pub length: u64,
    /// Deadline from submission; default [`EngineConfig::default_deadline`](crate::EngineConfig).
    pub deadline: Option<Duration>,
    /// Forces a transport for this request.
    pub transport: Option<TransportKind>,
    /// Test hook: skip the initiator's own check of the remote range, so that the serving side's
    /// check can be exercised.
    #[doc(hidden)]
    pub skip_initiator_checks: bool,
}

impl TransferRequest {
    /// A write of `length` bytes from `source` to `target_offset` in `target`.
    pub fn write(source: u64, target: SegmentHandle, target_offset: u64, length: u64) -> Self {
        Self::new(Opcode::Write, source, target, target_offset, length)
    }

    /// A read of `length` bytes from `target_offset` in `target` into `source`.
    pub fn read(source: u64, target: SegmentHandle, target_offset: u64, length: u64) -> Self {
        Self::new(Opcode::Read, source, target, target_offset, length)
    }

    fn new(
        opcode: Opcode,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Self {
        TransferRequest {
            opcode,
            source,
            target,
            target_offset,
            length,
            deadline: None,
            transport: None,
            skip_initiator_checks: false,
        }
    }

    /// Sets this request's deadline.
    pub fn with_deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d);
        self
    }

    /// Forces a transport for this request.
    pub fn via(mut self, t: TransportKind) -> Self {
        self.transport = Some(t);
        self
    }
}
