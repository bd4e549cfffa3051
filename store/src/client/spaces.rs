//! The client's store space: the range of its configuration (`store_size`), and ranges mounted
//! and unmounted while it runs ([`Client::mount_space`], [`Client::unmount_space`]: Mooncake's
//! `allocate_and_mount_segment` and `unmount_and_free_segment`). Each range is engine memory
//! exported for peers' reads and writes, mounted at the master under an id that changes at
//! every remount; mounts, unmounts and the heartbeat's remounts take turns, so that a remount
//! never mounts again a range that is being unmounted.
//!
//! A mount is a remount of every range plus the new one, so that a client the master expired
//! meanwhile is known again with all of its space. A call whose outcome is unknown (its answer
//! lost) leaves the master's view to the next remount, which the heartbeat then makes at once;
//! memory that may still be mounted there stays registered until it has. Memory of an
//! unmounted range is unregistered after its grace and given back to the system only
//! [`QUARANTINE`] after the unmount, so that its addresses cannot belong to a newer range while
//! a write placed there before the unmount may still arrive: such a write is refused, not
//! landed in another object.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use yuebing_engine::{EngineBuffer, RemoteAccess, TransferEngine};

use super::{Client, Options};
use crate::error::{Error, Result};
use crate::master::{MountId, MountSpec};

/// A range of store space this client mounted, as [`Client::mount_space`] names it (the
/// configuration's own range is `SpaceId(0)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpaceId(pub u64);

impl std::fmt::Display for SpaceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "space {}", self.0)
    }
}

/// One mounted range.
struct Space {
    id: SpaceId,
    spec: MountSpec,
    /// The master's id of it (new at every remount).
    mount: MountId,
    buffer: Arc<EngineBuffer>,
}

/// How long the memory of an unmounted range is kept mapped (unregistered) after the unmount.
/// A put's writes end by its deadline (30 s by default) and the master revokes an unfinished
/// put only at its release time; 60 s covers the writes of default deadlines.
pub(crate) const QUARANTINE: Duration = Duration::from_secs(60);

/// The ranges the client mounts.
pub(crate) struct Spaces {
    /// Held by each mount, unmount and remount for its whole sequence of master calls.
    turn: tokio::sync::Mutex<()>,
    list: Mutex<Vec<Space>>,
    next: AtomicU64,
    /// A call's outcome at the master is unknown: the next heartbeat remounts.
    remount_due: AtomicBool,
    /// Memory that may still be mounted at the master (a mount whose answer was lost): kept
    /// registered until a remount has dropped it there.
    limbo: Mutex<Vec<Arc<EngineBuffer>>>,
    /// Ranges unmounted gracefully whose grace has not ended: their replicas are still served,
    /// and this client's own reads of them still go through (address and length of each).
    draining: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Spaces {
    /// The spaces of a client that started with `first` (its configuration's range, mounted
    /// under the id the master gave it).
    pub(crate) fn new(first: Option<(Arc<EngineBuffer>, MountSpec, MountId)>) -> Spaces {
        let list = first
            .into_iter()
            .map(|(buffer, spec, mount)| Space {
                id: SpaceId(0),
                spec,
                mount,
                buffer,
            })
            .collect();
        Spaces {
            turn: tokio::sync::Mutex::new(()),
            list: Mutex::new(list),
            next: AtomicU64::new(1),
            remount_due: AtomicBool::new(false),
            limbo: Mutex::new(Vec::new()),
            draining: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Space>> {
        lock(&self.list)
    }

    /// Waits for the turn to mount, unmount or remount.
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// What a remount sends: every range, in order.
    pub(crate) fn specs(&self) -> Vec<MountSpec> {
        self.lock().iter().map(|s| s.spec.clone()).collect()
    }

    /// The master's ids of the ranges.
    pub(crate) fn mounts(&self) -> Vec<MountId> {
        self.lock().iter().map(|s| s.mount).collect()
    }

    /// Asks the next heartbeat to remount (a call's outcome at the master is unknown).
    pub(crate) fn remount_soon(&self) {
        self.remount_due.store(true, Ordering::Release);
    }

    /// Whether a remount was asked for since the last one.
    pub(crate) fn remount_is_due(&self) -> bool {
        self.remount_due.load(Ordering::Acquire)
    }

    /// Whether a remount was asked for since the last one; clears the request.
    pub(crate) fn take_remount_due(&self) -> bool {
        self.remount_due.swap(false, Ordering::AcqRel)
    }

    /// Records the ids a remount of `specs` answered, in their order (a range unmounted since
    /// is not there to take one: remounts take turns with unmounts), and returns the memory
    /// the master has now dropped (limbo). A count that does not match asks for another
    /// remount and records nothing.
    pub(crate) fn remounted(&self, specs: &[MountSpec], ids: &[MountId]) -> Vec<Arc<EngineBuffer>> {
        if ids.len() != specs.len() {
            tracing::warn!(
                specs = specs.len(),
                ids = ids.len(),
                "a remount answered another count of ids; remounting again"
            );
            self.remount_soon();
            return Vec::new();
        }
        for s in self.lock().iter_mut() {
            if let Some(i) = specs.iter().position(|spec| *spec == s.spec) {
                s.mount = ids[i];
            }
        }
        std::mem::take(&mut *lock(&self.limbo))
    }

    /// Whether `[addr, addr + len)` lies inside one range (one still in its unmount grace
    /// included).
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        let inside = |base: u64, size: u64| super::inside(Some((base, size)), addr, len);
        self.lock()
            .iter()
            .any(|s| inside(s.buffer.addr(), s.buffer.len() as u64))
            || lock(&self.draining).iter().any(|&(b, n)| inside(b, n))
    }

    /// Retires memory the master no longer places objects in: unregistered after `grace`
    /// (readers sent there before may still come meanwhile, this client's own included;
    /// before this returns when `grace` is zero), unmapped [`QUARANTINE`] after now, on the
    /// engine's runtime.
    pub(crate) fn retire(
        &self,
        engine: &TransferEngine,
        buffers: Vec<Arc<EngineBuffer>>,
        grace: Duration,
    ) {
        if buffers.is_empty() {
            return;
        }
        let ranges: Vec<(u64, u64)> = buffers.iter().map(|b| (b.addr(), b.len() as u64)).collect();
        let later = match grace.is_zero() {
            true => {
                unregister(engine, &buffers);
                None
            }
            false => {
                lock(&self.draining).extend(&ranges);
                // The engine is held for the grace only, not for the quarantine.
                Some((engine.clone(), self.draining.clone()))
            }
        };
        drop(engine.handle().spawn(async move {
            if let Some((engine, draining)) = later {
                tokio::time::sleep(grace).await;
                lock(&draining).retain(|r| !ranges.contains(r));
                unregister(&engine, &buffers);
            }
            tokio::time::sleep(QUARANTINE.saturating_sub(grace)).await;
            drop(buffers);
        }));
    }

    /// The memory of every range (and of limbo), taken out (the client is going).
    /// The buffer of the mounted range that holds `len` bytes at `addr`, if one does: held,
    /// its memory stays mapped (a range being unmounted does not count).
    pub(crate) fn buffer_holding(&self, addr: u64, len: u64) -> Option<Arc<EngineBuffer>> {
        let inside = |b: &EngineBuffer| super::inside(Some((b.addr(), b.len() as u64)), addr, len);
        self.lock()
            .iter()
            .find(|s| inside(&s.buffer))
            .map(|s| s.buffer.clone())
    }

    pub(crate) fn take_buffers(&self) -> Vec<Arc<EngineBuffer>> {
        let mut all: Vec<_> = self.lock().drain(..).map(|s| s.buffer).collect();
        all.append(&mut lock(&self.limbo));
        all
    }
}

/// Unregisters `buffers` from `engine` (peers' requests to them are refused from now on).
pub(crate) fn unregister(engine: &TransferEngine, buffers: &[Arc<EngineBuffer>]) {
    for b in buffers {
        if let Err(e) = engine.unregister(b.addr()) {
            tracing::debug!(addr = b.addr(), error = %e, "unregistering store space");
        }
    }
}

/// A mutex's guard, poisoned or not.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A mounted range's description for the master.
pub(crate) fn spec_of(engine: &TransferEngine, buffer: &EngineBuffer) -> MountSpec {
    MountSpec {
        node: engine.name().to_string(),
        base: buffer.addr(),
        len: buffer.len() as u64,
    }
}

impl Client {
    /// Allocates `len` bytes of engine memory (prefaulted as the configuration says), exports
    /// it for peers' reads and writes, and mounts it at the master as more store space of this
    /// client: new replicas may be placed there once the call returns. Remounted with the
    /// rest after a master restart; unmounted with [`Client::unmount_space`] or
    /// [`Client::close`].
    pub fn mount_space(
        &self,
        len: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<SpaceId>> + Send + 'static {
        let prefault = self.inner.cfg.prefault;
        self.mount_with(opts.into(), move |engine| {
            let len = usize::try_from(len)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::params(format!("cannot mount {len} bytes")))?;
            Ok(engine.allocate_exported(len, prefault, RemoteAccess::READ_WRITE)?)
        })
    }

    /// Maps `len` bytes of the file at `path` from `offset` (a multiple of the page size; the
    /// range must lie inside the file) and mounts them as store space of this client, as
    /// [`Client::mount_space`] does with memory it allocates: Mooncake's `mount_segment` of a
    /// file under `/dev/shm` or on a filesystem. Replicas placed there are written into the file.
    /// Peers reach the range over tcp, never by mapping the file; if its owner truncates it,
    /// transfers touching the lost pages fail with an error (the process is never signalled),
    /// and the range should be unmounted. The file stays mapped until the range is unmounted
    /// and its quarantine has passed ([`QUARANTINE`]).
    pub fn mount_file(
        &self,
        path: impl Into<std::path::PathBuf>,
        offset: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<SpaceId>> + Send + 'static {
        let path = path.into();
        self.mount_with(opts.into(), move |engine| {
            let len = usize::try_from(len)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::params(format!("cannot mount {len} bytes")))?;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| Error::params(format!("cannot open {}: {e}", path.display())))?;
            // A range outside the file or not page-aligned is the caller's to fix.
            engine
                .map_file_exported(&file, offset, len, RemoteAccess::READ_WRITE)
                .map_err(|e| match e {
                    yuebing_engine::Error::InvalidArgument { reason } => Error::params(reason),
                    other => other.into(),
                })
        })
    }

    /// Mounts the exported buffer `make` registers with the engine (under the turn, on an
    /// open client, on the blocking pool) as one more range of store space.
    fn mount_with(
        &self,
        opts: Options,
        make: impl FnOnce(&TransferEngine) -> Result<Arc<EngineBuffer>> + Send + 'static,
    ) -> impl Future<Output = Result<SpaceId>> + Send + 'static {
        self.call(move |c| async move {
            let until = c.until(&opts);
            let inner = &c.inner;
            let _turn = inner.spaces.turn().await;
            if inner.closed.load(Ordering::Acquire) {
                return Err(Error::params("the client is closed"));
            }
            let engine = &inner.engine;
            // Allocating and prefaulting, or opening and mapping a file (on a slow
            // filesystem), may take long: on the blocking pool, not a runtime worker.
            let made = {
                let engine = engine.clone();
                tokio::task::spawn_blocking(move || make(&engine)).await
            };
            let buffer = made.map_err(|e| Error::Internal {
                reason: format!("the mount's allocation task failed: {e}"),
            })??;
            let spec = spec_of(engine, &buffer);
            // Listed before the master may place replicas there, so that this client's own
            // puts into it pass `check_own_replica` at once; its mount id comes with the
            // remount (no unmount runs meanwhile: this call has the turn).
            let id = SpaceId(inner.spaces.next.fetch_add(1, Ordering::Relaxed));
            inner.spaces.lock().push(Space {
                id,
                spec,
                mount: MountId(u32::MAX),
                buffer,
            });
            // Every range and the new one, in one remount: a client the master expired
            // meanwhile is known again with all of its space.
            let specs = inner.spaces.specs();
            // As at start: where descriptors are stored, peers the master sends here must
            // find the range in the descriptor before it is mounted.
            let mounted = async {
                engine.publish().await?;
                let remount = |m: crate::master::MasterClient, _| {
                    let specs = specs.clone();
                    async move { m.remount(specs).await }
                };
                c.master(until, remount, "").await
            }
            .await;
            let ids = match mounted {
                Ok(ids) if ids.len() == specs.len() => ids,
                other => {
                    // Maybe mounted there: kept registered until a remount drops it.
                    let listed = {
                        let mut list = inner.spaces.lock();
                        let at = list.iter().position(|s| s.id == id);
                        at.map(|i| list.remove(i))
                    };
                    if let Some(space) = listed {
                        lock(&inner.spaces.limbo).push(space.buffer);
                    }
                    inner.spaces.remount_soon();
                    return Err(match other {
                        Err(e) => e,
                        Ok(ids) => Error::Internal {
                            reason: format!(
                                "the master answered {} mount ids for {} ranges",
                                ids.len(),
                                specs.len()
                            ),
                        },
                    });
                }
            };
            let limbo = inner.spaces.remounted(&specs, &ids);
            inner.spaces.retire(engine, limbo, Duration::ZERO);
            Ok(id)
        })
    }

    /// Unmounts a range of store space: no new replica goes there, and its replicas stay
    /// readable for `grace` (at most the master's unmount grace; `Duration::ZERO`: they are
    /// dropped at once), after which the memory is unregistered; it is freed [`QUARANTINE`]
    /// after the unmount. An unknown id is `InvalidParams`.
    pub fn unmount_space(
        &self,
        id: SpaceId,
        grace: Duration,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let opts = opts.into();
        self.call(move |c| async move {
            let until = c.until(&opts);
            let inner = &c.inner;
            let _turn = inner.spaces.turn().await;
            let mount = inner
                .spaces
                .lock()
                .iter()
                .find(|s| s.id == id)
                .map(|s| s.mount)
                .ok_or_else(|| Error::params(format!("{id} is not mounted by this client")))?;
            let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
            let unmounted = c
                .master(
                    until,
                    |m, _| async move { m.unmount_within(mount, grace_ms).await },
                    "",
                )
                .await;
            match unmounted {
                Ok(()) => {}
                // Gone already (expired, or dropped by a remount the master applied), or known
                // there under an id newer than ours: the next remount, which no longer lists
                // it, drops it in either case.
                Err(Error::SegmentNotFound { .. }) => inner.spaces.remount_soon(),
                Err(e) => return Err(e),
            }
            let gone = {
                let mut list = inner.spaces.lock();
                let at = list.iter().position(|s| s.id == id);
                at.map(|i| list.remove(i))
            };
            if let Some(space) = gone {
                inner
                    .spaces
                    .retire(&inner.engine, vec![space.buffer], grace);
            }
            Ok(())
        })
    }

    /// The ranges of store space mounted now: id, address and length of each.
    pub fn spaces(&self) -> Vec<(SpaceId, u64, u64)> {
        self.inner
            .spaces
            .lock()
            .iter()
            .map(|s| (s.id, s.buffer.addr(), s.buffer.len() as u64))
            .collect()
    }
}
