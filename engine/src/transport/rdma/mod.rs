//! RDMA: one-sided READ and WRITE over reliable-connected queue pairs, sliced and spread over
//! several NICs (cargo feature `rdma`).
//!
//! # How a transfer runs
//! The target published, in its descriptor's `rdma` section, its NICs (GID, LID, link, MTU)
//! and for each exported range the rkey of its memory region on each NIC. The initiator finds
//! the lkeys of its local range (every registered range is registered with every NIC, see
//! `regions`), cuts the transfer into slices of [`RdmaConfig::slice_size`], and posts each
//! slice as one work request on a path: a queue pair from one of its NICs to one of the
//! target's, connected on first use through the engine's control service (`handshake`). The
//! slices go round-robin over the paths from the NICs nearest the local buffer (`topology`);
//! a slice that fails on a path (a transport error, a flush) is posted again on another, and
//! the failed path cools down for [`RdmaConfig::cooldown`] while its queue pair (in the error
//! state) is dropped and a fresh one is made on next use. The transfer completes when every
//! slice did.
//!
//! # What is checked where
//! One-sided operations run no code on the target. The engine checks the remote range against
//! the descriptor's exported buffers and their rights before it picks this transport; the NIC
//! checks the rkey, the range and the region's access flags (set from the region's remote
//! rights: no remote flag for local-only memory) and refuses a violation without moving a byte.
//!
//! # Finality
//! A transfer's future that is dropped (cancel, deadline) while slices are posted fails the
//! queue pairs carrying them and, before the drop returns, waits until every request on them
//! reported its completion (`Path::kill`, polling the completion queue itself, bounded): only
//! then is the NIC done with their memory, so the task is final when the engine records it.
//! Other transfers' slices on those queue pairs complete as flushed and go again on a fresh
//! queue pair, without using up a try. `unregister` deregisters the range's memory region on
//! every NIC before it returns.
//!
//! # Layout
//! - `verbs`: the seam, the traits this module drives.
//! - `fake`: in-memory NICs implementing it, for tests.
//! - `sideway`: the machine's NICs through rdma-core, loaded at run time.
//! - `regions`: memory regions per registered range, per NIC.
//! - `handshake`: connecting queue pairs over the control service.
//! - `paths`: the connected queue pairs to a peer, their completions, their cool-down.
//! - `topology`: the NICs nearest a buffer, from sysfs.

pub mod fake;
mod handshake;
mod paths;
mod regions;
mod sideway;
mod slices;
pub mod topology;
pub mod verbs;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;

use self::handshake::{Accepted, ConnectReply, ConnectRequest};
use self::paths::{Cooldowns, Path, PathKey};
pub use self::regions::PublishedKeys;
use self::regions::Regions;
use self::slices::Transfer;
use self::topology::NicPlace;
use self::verbs::{Gid, LinkLayer, Mtu, Nic, NicInfo, Verbs};
use super::{Job, Transport};
use crate::error::Error;
use crate::memory::RegistrationHook;
use crate::request::TransportKind;
use crate::segment::SegmentDescriptor;

/// Sends a handshake to the engine whose control service listens at the endpoint, and returns
/// its answer: the engine gives the transport this, over its rpc client pools.
pub type Handshaker =
    Arc<dyn Fn(String, Vec<u8>) -> BoxFuture<'static, Result<Vec<u8>, Error>> + Send + Sync>;

/// Settings of the rdma transport.
#[derive(Clone)]
pub struct RdmaConfig {
    /// The verbs to drive: `None` for this machine's NICs through rdma-core (loaded at run
    /// time; without it, or without a device, the engine runs on tcp and shm and says so).
    pub verbs: Option<Arc<dyn Verbs>>,
    /// The NICs to use, by name; empty: every active one.
    pub nics: Vec<String>,
    /// Bytes per work request (default 64 KiB, as Mooncake's slices).
    pub slice_size: u64,
    /// Work requests one transfer keeps posted at once (default 64).
    pub max_inflight: usize,
    /// Entries of each queue pair's send and completion queues (default 256).
    pub queue_depth: u32,
    /// How long a failed path is left alone (default 5 s).
    pub cooldown: Duration,
    /// Where sysfs is (default `/sys`), for NIC locality.
    pub sysfs: PathBuf,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            verbs: None,
            nics: Vec::new(),
            slice_size: 64 << 10,
            max_inflight: 64,
            queue_depth: 256,
            cooldown: Duration::from_secs(5),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

impl std::fmt::Debug for RdmaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaConfig")
            .field("verbs", &self.verbs.as_ref().map(|_| "custom"))
            .field("nics", &self.nics)
            .field("slice_size", &self.slice_size)
            .field("max_inflight", &self.max_inflight)
            .field("queue_depth", &self.queue_depth)
            .field("cooldown", &self.cooldown)
            .field("sysfs", &self.sysfs)
            .finish()
    }
}

/// One NIC as published in the descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedNic {
    /// Device name.
    pub name: String,
    /// GID.
    pub gid: Gid,
    /// LID.
    pub lid: u16,
    /// Link layer.
    pub link: LinkLayer,
    /// Active MTU.
    pub mtu: Mtu,
}

/// The descriptor's `rdma` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// The NICs, in the order of each range's rkeys.
    pub nics: Vec<PublishedNic>,
    /// Exported ranges with their rkeys, by address.
    pub keys: Vec<PublishedKeys>,
    /// Exported ranges the NICs refused to register, `(addr, len)`: reached over tcp.
    #[serde(default)]
    pub refused: Vec<(u64, u64)>,
}

impl Published {
    /// The section of `segment`, if it has a valid one.
    pub fn of(segment: &SegmentDescriptor) -> Option<Published> {
        let v = segment.transports.get(TransportKind::Rdma.name())?;
        let p: Published = serde_json::from_value(v.clone()).ok()?;
        let consistent = !p.nics.is_empty() && p.keys.iter().all(|k| k.rkeys.len() == p.nics.len());
        consistent.then_some(p)
    }

    /// The rkeys of the exported range holding `[addr, addr + len)`.
    pub fn rkeys(&self, addr: u64, len: u64) -> Option<&[u32]> {
        let end = addr.checked_add(len)?;
        let i = self
            .keys
            .partition_point(|k| k.addr <= addr)
            .checked_sub(1)?;
        let k = &self.keys[i];
        (end <= k.addr.saturating_add(k.len)).then_some(&k.rkeys[..])
    }
}

/// What this transport keeps for one peer instance.
struct Peer {
    /// The descriptor last parsed, and its section.
    section: Mutex<(Arc<SegmentDescriptor>, Arc<Published>)>,
    /// One slot per path: its queue pair once connected.
    slots: Mutex<HashMap<PathKey, Slot>>,
}

/// A path's place: its connected queue pair, locked while it is being connected.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Path>>>>;

impl Peer {
    fn slot(&self, key: PathKey) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(key).or_default().clone()
    }

    /// Drops the path `key` if it is still `path` (a fresh one is made on next use).
    fn discard(&self, path: &Arc<Path>) {
        let slot = self.slot(path.key);
        let Ok(mut s) = slot.try_lock() else {
            // Being connected anew right now.
            return;
        };
        if s.as_ref().is_some_and(|p| Arc::ptr_eq(p, path)) {
            *s = None;
        }
    }
}

struct Inner {
    config: RdmaConfig,
    name: String,
    instance_id: u64,
    nics: Vec<Arc<dyn Nic>>,
    infos: Vec<NicInfo>,
    places: Vec<NicPlace>,
    /// Where each GPU sits, once asked.
    gpu_places: Mutex<HashMap<u32, NicPlace>>,
    regions: Arc<Regions>,
    peers: Mutex<HashMap<u64, Arc<Peer>>>,
    cooldowns: Cooldowns,
    accepted: Accepted,
    handshaker: Handshaker,
    handle: Handle,
}

/// The rdma transport.
#[derive(Clone)]
pub struct RdmaTransport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("nics", &self.inner.infos)
            .finish_non_exhaustive()
    }
}

impl RdmaTransport {
    /// Opens the configured NICs for the engine `name` (instance `instance_id`); handshakes go
    /// through `handshaker`, completion tasks run on `handle`.
    ///
    /// # Errors
    /// [`Error::NoRdmaDevice`] where rdma-core is missing, no device exists, or none of the
    /// configured NICs is active.
    pub fn start(
        config: RdmaConfig,
        name: String,
        instance_id: u64,
        handshaker: Handshaker,
        handle: Handle,
    ) -> Result<RdmaTransport, Error> {
        let verbs = match &config.verbs {
            Some(v) => v.clone(),
            None => sideway::open()?,
        };
        let wanted = |n: &NicInfo| config.nics.is_empty() || config.nics.contains(&n.name);
        let infos: Vec<NicInfo> = verbs
            .nics()?
            .into_iter()
            .filter(|n| n.up && wanted(n))
            .collect();
        if infos.is_empty() {
            return Err(Error::NoRdmaDevice {
                reason: match config.nics.is_empty() {
                    true => "no active NIC port".into(),
                    false => format!("none of the NICs {:?} is active", config.nics),
                },
            });
        }
        let nics = infos
            .iter()
            .map(|n| verbs.open(&n.name))
            .collect::<Result<Vec<_>, _>>()?;
        let places = infos
            .iter()
            .map(|n| topology::nic_place(&config.sysfs, &n.name))
            .collect();
        tracing::info!(nics = ?infos.iter().map(|n| &n.name).collect::<Vec<_>>(), "rdma transport ready");
        Ok(RdmaTransport {
            inner: Arc::new(Inner {
                regions: Arc::new(Regions::new(nics.clone())),
                config,
                name,
                instance_id,
                nics,
                infos,
                places,
                gpu_places: Mutex::default(),
                peers: Mutex::default(),
                cooldowns: Cooldowns::default(),
                accepted: Accepted::default(),
                handshaker,
                handle,
            }),
        })
    }

    /// The NICs in use.
    pub fn nics(&self) -> &[NicInfo] {
        &self.inner.infos
    }

    /// Queue pairs this engine keeps for initiators that connected to it.
    pub fn accepted_queue_pairs(&self) -> usize {
        self.inner.accepted.count()
    }
}

impl Inner {
    fn published(&self) -> Published {
        Published {
            nics: self
                .infos
                .iter()
                .map(|n| PublishedNic {
                    name: n.name.clone(),
                    gid: n.gid,
                    lid: n.lid,
                    link: n.link,
                    mtu: n.mtu,
                })
                .collect(),
            keys: self.regions.published(),
            refused: self.regions.refused(),
        }
    }

    /// This transport's state for the peer `segment`, its section parsed once per descriptor.
    fn peer(&self, segment: &Arc<SegmentDescriptor>) -> Result<(Arc<Peer>, Arc<Published>), Error> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peer) = peers.get(&segment.instance_id) {
            let mut section = peer.section.lock().unwrap_or_else(|p| p.into_inner());
            if !Arc::ptr_eq(&section.0, segment) {
                let parsed = Published::of(segment).ok_or_else(|| no_section(segment))?;
                *section = (segment.clone(), Arc::new(parsed));
            }
            return Ok((peer.clone(), section.1.clone()));
        }
        let parsed = Arc::new(Published::of(segment).ok_or_else(|| no_section(segment))?);
        let peer = Arc::new(Peer {
            section: Mutex::new((segment.clone(), parsed.clone())),
            slots: Mutex::default(),
        });
        peers.insert(segment.instance_id, peer.clone());
        Ok((peer, parsed))
    }

    /// The section of `segment` if it is the descriptor last parsed for its peer (per request,
    /// no parse: the engine hands transports the descriptor it caches).
    fn cached_section(&self, segment: &SegmentDescriptor) -> Option<Arc<Published>> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let peer = peers.get(&segment.instance_id)?;
        let section = peer.section.lock().unwrap_or_else(|p| p.into_inner());
        std::ptr::eq(&*section.0, segment).then(|| section.1.clone())
    }

    /// The connected path `key` to `segment`, connecting it first if needed.
    async fn path(
        &self,
        peer: &Peer,
        segment: &SegmentDescriptor,
        published: &Published,
        key: PathKey,
    ) -> Result<Arc<Path>, Error> {
        let slot = peer.slot(key);
        let mut slot = slot.lock().await;
        if let Some(p) = slot.as_ref().filter(|p| p.is_usable()) {
            return Ok(p.clone());
        }
        *slot = None;
        let (local, remote) = (key.0, key.1);
        let qp = self.nics[local].create_qp(self.config.queue_depth)?;
        let request = ConnectRequest {
            from: self.name.clone(),
            from_instance: self.instance_id,
            to_instance: segment.instance_id,
            nic: published.nics[remote].name.clone(),
            endpoint: qp.local(),
        };
        let bytes = serde_json::to_vec(&request).map_err(|e| Error::invalid(e.to_string()))?;
        let answer = (self.handshaker)(segment.endpoint.clone(), bytes).await?;
        let reply: ConnectReply =
            serde_json::from_slice(&answer).map_err(|e| Error::PeerFailed {
                reason: format!(
                    "rdma: a malformed handshake answer from {}: {e}",
                    segment.name
                ),
            })?;
        let end = reply.into_result(&segment.name, segment.instance_id)?;
        let own = qp.local();
        if end.gid == own.gid && end.qpn == own.qpn {
            return Err(Error::PeerFailed {
                reason: format!(
                    "rdma: {} answered with this engine's own queue pair",
                    segment.name
                ),
            });
        }
        handshake::connect(&*qp, &end)?;
        let path = Path::start(key, qp, self.config.queue_depth, &self.handle);
        *slot = Some(path.clone());
        Ok(path)
    }

    /// Where GPU `ordinal` sits (its PCI path and NUMA node from sysfs), read once.
    fn gpu_place(&self, ordinal: u32) -> NicPlace {
        let mut places = self.gpu_places.lock().unwrap_or_else(|p| p.into_inner());
        places
            .entry(ordinal)
            .or_insert_with(|| {
                #[cfg(feature = "cuda")]
                if let Some(bus) = crate::gpu::pci_bus_id(ordinal) {
                    return topology::gpu_place(&self.config.sysfs, &bus);
                }
                NicPlace::default()
            })
            .clone()
    }

    /// The paths to try for a local range at `location`: first one per nearest local NIC
    /// (paired with the peer's NIC of the same rank), then every other pair.
    fn candidates(&self, location: crate::Location, remote_nics: usize) -> (usize, Vec<PathKey>) {
        let gpu = location.gpu().map(|ordinal| self.gpu_place(ordinal));
        let near = topology::nearest(&self.places, location, gpu.as_ref());
        let mut order: Vec<PathKey> = near.iter().map(|&i| (i, i % remote_nics)).collect();
        let primary = order.len();
        let rest = (0..self.nics.len()).flat_map(|i| (0..remote_nics).map(move |j| (i, j)));
        for key in rest {
            if !order.contains(&key) {
                order.push(key);
            }
        }
        (primary, order)
    }
}

fn no_section(segment: &SegmentDescriptor) -> Error {
    Error::invalid(format!(
        "rdma: segment {} publishes no rdma section",
        segment.name
    ))
}

impl Transport for RdmaTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Rdma
    }

    fn can_reach(&self, segment: &SegmentDescriptor, _forced: bool) -> bool {
        // Cheap, per request: the section is parsed (and checked) when a transfer runs.
        segment.instance_id != self.inner.instance_id
            && segment.transports.contains_key(TransportKind::Rdma.name())
    }

    /// Every range of the peer's, except one its NICs refused to register (published as
    /// such): tcp moves those. A range outside every exported buffer, or one a descriptor
    /// caught between registrations does not list, is the transfer's to refuse (`OutOfBounds`:
    /// the engine fetches the descriptor again).
    fn covers(&self, segment: &SegmentDescriptor, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        let section = self
            .inner
            .cached_section(segment)
            .or_else(|| Published::of(segment).map(Arc::new));
        !section.is_some_and(|p| {
            p.refused
                .iter()
                .any(|&(a, l)| a <= addr && end <= a.saturating_add(l))
        })
    }

    /// Every local range but one the NICs refused (staged by the engine, then).
    fn covers_local(&self, addr: u64, len: u64) -> bool {
        !self.inner.regions.is_refused(addr, len)
    }

    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>> {
        let inner = self.inner.clone();
        async move { Transfer::new(inner, job)?.run().await }.boxed()
    }

    fn registration_hook(&self) -> Option<Arc<dyn RegistrationHook>> {
        Some(self.inner.regions.clone())
    }

    fn forget(&self, segment: &SegmentDescriptor) {
        let peer = {
            let mut peers = self.inner.peers.lock().unwrap_or_else(|p| p.into_inner());
            peers.remove(&segment.instance_id)
        };
        self.inner.cooldowns.forget(segment.instance_id);
        drop(peer);
    }

    fn publish(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.inner.published()).ok()
    }

    fn accept(&self, request: &[u8]) -> Result<Vec<u8>, Error> {
        let reply = match serde_json::from_slice::<ConnectRequest>(request) {
            Err(e) => ConnectReply::Refused {
                code: Error::invalid("").code(),
                reason: format!("malformed request: {e}"),
            },
            Ok(request) => {
                let i = &self.inner;
                match i
                    .accepted
                    .accept(&i.nics, i.instance_id, i.config.queue_depth, &request)
                {
                    Ok(end) => ConnectReply::Accepted(end),
                    Err(e) => ConnectReply::Refused {
                        code: e.code(),
                        reason: e.to_string(),
                    },
                }
            }
        };
        serde_json::to_vec(&reply).map_err(|e| Error::invalid(e.to_string()))
    }
}
