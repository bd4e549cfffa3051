//! yuebing-engine: the Transfer Engine, yuebing's data plane.
//!
//! It moves bytes between registered memory of two processes. This first part holds the pure
//! pieces the transports build on: memory registration, the serving side's bounds check, segment
//! descriptors, and the batch/task status machine.
//!
//! # Layout
//! - [`error`]: the [`Error`] enum, codes −3000 … −3999.
//! - [`location`]: `cpu:N` / `cuda:N` tags.
//! - [`memory`]: [`MemoryRegistry`] (caller memory, `unsafe` with a contract; engine-allocated
//!   [`EngineBuffer`]s, safe), each region's [`RemoteAccess`] (local-only unless registered for
//!   peers' reads or writes), the pure [`RegionTable`], per-transport registration hooks,
//!   revocable [`Lease`]s on regions (how `unregister` stops every access), and `memory::raw`,
//!   the one audited module that moves bytes of transferable memory by raw pointer.
//! - [`bounds`]: the check every remote access passes before a byte is copied (bounds, then
//!   the region's rights).
//! - [`segment`]: the versioned [`SegmentDescriptor`] an engine publishes (its exported
//!   buffers only).
//! - [`batch`]: checked [`BatchId`]s and the sans-IO [`BatchTable`] of task states, driven
//!   behind one lock with per-batch wake-ups and cancellation.
//! - `deadlines`: running tasks' deadlines on one sweeper timer (not a tokio timer each).
//! - [`request`]: [`TransferRequest`], [`Opcode`], [`SegmentHandle`], [`TransportKind`].
//! - [`transport`]: the [`Transport`] trait and its implementations (`local`, `shm`, `tcp`),
//!   with the chunked, claim-guarded copies `local` and `shm` share (`transport::copy`).
//! - [`metadata`]: the [`MetadataStore`] seam and the embedded [`P2pMetadata`]; with the
//!   feature `testing`, `metadata::conformance`, the suite every implementation passes, and
//!   `metadata::memory`, a store in memory that stores and watches descriptors.
//! - [`service`]: the engine's control service on yuebing-rpc (descriptor exchange).
//! - `transfer_engine`: the [`TransferEngine`] facade (allocate/register, submit, wait, cancel,
//!   free, read/write); given a store that keeps descriptors ([`EngineConfig::metadata`]), it
//!   publishes its own there (`publish`) and watches its open peers' (`peers`).
//! - `segment_fuzz`, `transport::tcp::wire_fuzz`, `transport::shm::channel_fuzz` (tests only):
//!   proptest fuzzing of the decoders of peer input, with yuebing-testkit's mutations and its
//!   counting allocator (installed in the unit-test binary), which bounds what each may
//!   allocate.

pub mod batch;
pub mod bounds;
mod counters;
mod deadlines;
pub mod error;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod location;
pub mod memory;
pub mod metadata;
pub mod request;
pub mod segment;
#[cfg(test)]
mod segment_fuzz;
pub mod service;
mod transfer_engine;
pub mod transport;

#[cfg(test)]
yuebing_testkit::install_counting_allocator!();

pub use batch::{BatchId, BatchStatus, BatchTable, TaskState, TaskStatus};
pub use error::{Error, Result};
pub use location::Location;
pub use memory::{
    EngineBuffer, Lease, MemoryRegistry, RangeSpec, Region, RegionTable, RegistrationHook,
    RemoteAccess,
};
pub use metadata::{MetadataStore, P2pMetadata};
pub use request::{Opcode, SegmentHandle, TransferRequest, TransportKind};
pub use segment::{BufferDesc, SegmentDescriptor};
pub use service::Notification;
pub use transfer_engine::{EngineConfig, RdmaNics, TransferEngine, MAX_NOTIFY_MESSAGE};
pub use transport::copy::{copy_in_place, IN_PLACE_MAX};
pub use transport::{Job, TcpConfig, Transport};
