//! The client's store space: the range of its configuration (`store_size`), and ranges mounted
//! and unmounted while it runs ([`Client::mount_space`], [`Client::unmount_space`]: Mooncake's
//! `allocate_and_mount_segment` and `unmount_and_free_segment`). Each range is engine memory
//! exported for peers' reads and writes, mounted at the master under an id that changes at
//! every remount; mounts, unmounts and the heartbeat's remounts take turns, so that a remount
//! never mounts again a range that is being unmounted.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The ranges the client mounts.
pub(crate) struct Spaces {
    /// Held by each mount, unmount and remount for its whole sequence of master calls.
    turn: tokio::sync::Mutex<()>,
    list: Mutex<Vec<Space>>,
    next: AtomicU64,
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
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Space>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Records the ids a remount of `specs` answered, in their order (a range unmounted
    /// since is not there to take one: remounts take turns with unmounts).
    pub(crate) fn remounted(&self, specs: &[MountSpec], ids: &[MountId]) {
        for s in self.lock().iter_mut() {
            if let Some(i) = specs.iter().position(|spec| *spec == s.spec) {
                if let Some(&id) = ids.get(i) {
                    s.mount = id;
                }
            }
        }
    }

    /// Whether `[addr, addr + len)` lies inside one range.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        self.lock()
            .iter()
            .any(|s| super::inside(Some((s.buffer.addr(), s.buffer.len() as u64)), addr, len))
    }

    /// The memory of every range, taken out (the client is going).
    pub(crate) fn take_buffers(&self) -> Vec<Arc<EngineBuffer>> {
        self.lock().drain(..).map(|s| s.buffer).collect()
    }
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
        let opts = opts.into();
        self.call(move |c| async move {
            let len = usize::try_from(len)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::params(format!("cannot mount {len} bytes")))?;
            let until = c.until(&opts);
            let inner = &c.inner;
            let _turn = inner.spaces.turn().await;
            if inner.closed.load(Ordering::Acquire) {
                return Err(Error::params("the client is closed"));
            }
            let engine = &inner.engine;
            let buffer =
                engine.allocate_exported(len, inner.cfg.prefault, RemoteAccess::READ_WRITE)?;
            let spec = spec_of(engine, &buffer);
            // As at start: where descriptors are stored, peers the master sends here must
            // find the range in the descriptor before it is mounted.
            let mounted = async {
                engine.publish().await?;
                let specs = vec![spec.clone()];
                let mount = |m: crate::master::MasterClient, _| {
                    let specs = specs.clone();
                    async move { m.mount(specs).await }
                };
                c.master(until, mount, "").await
            }
            .await;
            let mount = match mounted.map(|ids| ids.first().copied()) {
                Ok(Some(id)) => id,
                other => {
                    let _ = engine.unregister(buffer.addr());
                    return Err(match other {
                        Err(e) => e,
                        _ => Error::Internal {
                            reason: "the master answered no mount id".into(),
                        },
                    });
                }
            };
            let id = SpaceId(inner.spaces.next.fetch_add(1, Ordering::Relaxed));
            inner.spaces.lock().push(Space {
                id,
                spec,
                mount,
                buffer,
            });
            Ok(id)
        })
    }

    /// Unmounts a range of store space: no new replica goes there, and its replicas stay
    /// readable for `grace` (at most the master's unmount grace; `Duration::ZERO`: they are
    /// dropped at once), after which the memory is unregistered and freed. An unknown id is
    /// `InvalidParams`.
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
                // Gone already (expired, or dropped by a remount the master applied).
                Ok(()) | Err(Error::SegmentNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            let gone = {
                let mut list = inner.spaces.lock();
                let at = list.iter().position(|s| s.id == id);
                at.map(|i| list.remove(i))
            };
            if let Some(space) = gone {
                // Readers sent here before the unmount may still come during the grace.
                let engine = inner.engine.clone();
                let free = async move {
                    tokio::time::sleep(grace).await;
                    if let Err(e) = engine.unregister(space.buffer.addr()) {
                        tracing::debug!(space = %space.id, error = %e, "unregistering an unmounted range");
                    }
                };
                match grace.is_zero() {
                    true => free.await,
                    false => drop(inner.engine.handle().spawn(free)),
                }
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
