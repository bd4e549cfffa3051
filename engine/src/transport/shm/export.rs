//! The exporting side of the shm transport: the side channel's accept loop, the handshake and
//! hand-over of each import, the importers' connections held open (bounded, pruned as they go
//! away), and the registration hook that releases a buffer's status slot.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::channel::{accept_hello, send_export, Export, ExportedBuffer, MAX_FDS};
use super::status::StatusPage;
use super::Inner;
use crate::error::Error;
use crate::memory::{EngineBuffer, MemoryRegistry, Region, RegistrationHook, RemoteAccess};
use crate::transport::Backoff;

/// Importers' side channels held open at most; past it (after pruning those that hung up) a
/// new import is refused.
pub(super) const MAX_IMPORTERS: usize = 1024;
/// Handshakes under way at once, at most (each takes a thread of the blocking pool for up to
/// the hello deadline).
const MAX_HANDSHAKES: usize = 16;
/// How often the importers that hung up are let go when no import arrives.
const PRUNE_EVERY: Duration = Duration::from_secs(5);

/// Clears an exported buffer's status slot when it is unregistered, so that importers stop
/// copying into it (they cannot be made to unmap it).
pub(super) struct ReleaseHook(pub(super) Arc<StatusPage>);

impl RegistrationHook for ReleaseHook {
    fn name(&self) -> &str {
        "shm"
    }
    fn register(&self, _: &Region) -> Result<(), Error> {
        Ok(())
    }
    fn unregister(&self, region: &Region) {
        self.0.release(region.addr);
    }
}

/// Hands the exported buffers to every same-user peer that connects with the cluster token;
/// backs off on accept errors, runs at most [`MAX_HANDSHAKES`] at once, and lets importers that
/// hung up go.
pub(super) async fn export_loop(
    listener: UnixListener,
    inner: Arc<Inner>,
    stop: CancellationToken,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let mut backoff = Backoff::default();
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => return,
            s = handshakes.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            _ = prune.tick() => {
                inner.prune_importers();
                continue;
            }
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "shm side channel accept failed");
                    tokio::time::sleep(backoff.next()).await;
                    continue;
                }
            },
        };
        backoff = Backoff::default();
        let inner = inner.clone();
        inner.handle.clone().spawn_blocking(move || {
            let result = stream.into_std().and_then(|s| export_to(&inner, s));
            if let Err(e) = result {
                tracing::debug!(error = %e, "shm export refused or failed");
            }
            drop(slot);
        });
    }
}

impl Inner {
    /// Lets the importers that hung up go.
    fn prune_importers(&self) {
        let mut importers = self.importers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(importers) = importers.as_mut() {
            importers.retain(|i| !hung_up(i));
        }
    }
}

/// The buffers an importer is handed, in address order: engine-allocated ones registered for
/// remote access (a local-only one, or one mapping a caller's file, is never handed over), as
/// many as one message carries fds for. What the descriptor's shm section lists.
pub(super) fn handed_over(memory: &MemoryRegistry) -> Vec<(Arc<EngineBuffer>, RemoteAccess)> {
    let mut buffers = memory.exported();
    buffers.truncate(MAX_FDS - 1);
    buffers
}

/// Hands the exported buffers to one importer, over its (blocking) side-channel stream, once it
/// is of this user and presented the cluster token in time.
fn export_to(inner: &Inner, s: UnixStream) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(inner.hello_timeout))?;
    s.set_write_timeout(Some(inner.hello_timeout))?;
    let pid = super::channel::same_user(&s)?;
    if let Err(why) = accept_hello(&s, inner.token.as_ref())? {
        tracing::warn!(
            peer_pid = pid,
            ?why,
            "refused a shm side-channel connection"
        );
        return Ok(());
    }
    let buffers = handed_over(&inner.memory);
    // Each with its status slot; one that finds none left is not exported.
    let held: Vec<_> = buffers
        .iter()
        .filter_map(|(b, remote)| {
            // Only buffers with a memfd to hand over (what `handed_over` lists), so that the
            // buffers and the fds below stay in step.
            b.fd()?;
            let h = inner.status.hold(b.addr())?;
            // Unregistered since the list was taken: its release may have run before the slot
            // was held, so release it here (retiring comes first).
            if b.is_retired() {
                inner.status.release(b.addr());
                return None;
            }
            Some((b, *remote, h))
        })
        .collect();
    let export = Export {
        instance: inner.instance,
        buffers: held
            .iter()
            .map(|(b, remote, (slot, generation))| ExportedBuffer {
                addr: b.addr(),
                len: b.len() as u64,
                slot: *slot,
                generation: *generation,
                remote: *remote,
            })
            .collect(),
    };
    let fds: Vec<_> = std::iter::once(inner.status.fd())
        .chain(held.iter().filter_map(|(b, _, _)| b.fd()))
        .collect();
    {
        // Held from before the importer has the export, so that an engine stopping meanwhile
        // shuts this stream down too (and releases the slots): no importer copies into this
        // engine's buffers, or counts a copy as delivered, once it stopped.
        let mut importers = inner.importers.lock().unwrap_or_else(|p| p.into_inner());
        let importers = importers
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the engine stopped"))?;
        // Importers that went away (or connected again) hang up: let them go.
        importers.retain(|i| !hung_up(i));
        if importers.len() >= MAX_IMPORTERS {
            return Err(std::io::Error::other(format!(
                "{MAX_IMPORTERS} importers hold side channels open already"
            )));
        }
        importers.push(s.try_clone()?);
    }
    // The importer's heartbeat: it may wait between reads for as long as the engine lives.
    s.set_read_timeout(None)?;
    send_export(&s, &export, &fds)
}

/// Whether the other end of a side-channel stream closed it.
pub(super) fn hung_up(stream: &UnixStream) -> bool {
    let mut fds = [PollFd::new(stream, PollFlags::IN | PollFlags::RDHUP)];
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(0) => false,
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR),
        Err(_) => true,
    }
}
