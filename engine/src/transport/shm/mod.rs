//! The `shm` transport: same-host peers map each other's exported memory and copy directly.
//!
//! An engine exports its engine-allocated (memfd-backed) buffers registered for remote access,
//! each with its rights, over a Unix-socket side channel ([`channel`]); local-only buffers are
//! never handed over. The importer checks each memfd is sealed against shrinking and growing and
//! that its size is what was announced, then maps it: read-only when it was exported without
//! write (such a buffer is sealed against writable mappings, so the kernel refuses anything
//! else). No code of the target runs on this path, so the initiator enforces the bounds, the
//! rights and the instance id against the exported mappings, and reports a write Completed only
//! if the peer is still alive after the copy (a pidfd that turns readable when it exits), so a
//! dead peer's orphaned pages never count as delivered. (A buffer exported write-only must be
//! mapped writable, so its "no read" holds only in the initiating engine's code, as in
//! Mooncake's shm transport.) A peer whose side channel cannot be reached (another host, another
//! container) is not "same host": [`Transport::can_reach`] says no and the engine uses tcp. It
//! never blocks: it answers from the descriptor and the peers mapped so far, and maps a new peer
//! in the background (on the blocking pool) while tcp serves it.
//!
//! - `channel`: the side channel's wire (hello with the cluster token, export, fds).
//! - `export`: the exporting side (accept loop, hand-over, importers held open).
//! - `sockets`: where side-channel sockets live. `status`: the exporter's status page.

mod channel;
#[cfg(test)]
mod channel_fuzz;
mod export;
mod import;
mod sockets;
mod status;

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use memmap2::{MmapOptions, MmapRaw};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::SealFlags;
use tokio::net::UnixListener;
use tokio::runtime::Handle;
use tokio_util::sync::{CancellationToken, DropGuard};
use yuebing_rpc::Token;

use self::channel::{fetch_export, ExportedBuffer, FetchError, Refused};
use self::export::{export_loop, handed_over, ReleaseHook};
use self::import::Imports;
use self::sockets::{socket_dir, socket_path, sweep_stale};
use self::status::{StatusPage, StatusView};
use super::copy::{copy_between, Side};
use super::{Job, Transport};
use crate::error::Error;
use crate::memory::raw::Span;
use crate::memory::{MemoryRegistry, RegistrationHook, RemoteAccess};
use crate::request::{Opcode, TransportKind};
use crate::segment::SegmentDescriptor;

/// One exported buffer of a peer, mapped here.
struct Mapping {
    remote: u64,
    len: u64,
    /// Its slot in the peer's status page and the generation it holds while registered.
    slot: usize,
    generation: u64,
    /// What this engine may do with it; without write it is mapped read-only.
    rights: RemoteAccess,
    map: MmapRaw,
}

/// A same-host peer: its instance, its liveness handles and its mapped buffers.
struct ShmPeer {
    instance: u64,
    /// Turns readable when the peer's process exits. `None` where the kernel (or valgrind)
    /// lacks `pidfd_open`: the side channel alone tells then, as the kernel closes it when the
    /// process exits.
    pidfd: Option<OwnedFd>,
    /// The side-channel connection, held open by the peer's engine while it lives: it turns
    /// readable (end of stream) when the engine stops, even if its process goes on.
    channel: std::os::unix::net::UnixStream,
    /// Which of its buffers are still registered.
    status: StatusView,
    maps: Vec<Arc<Mapping>>,
}

impl ShmPeer {
    /// Fetches the peer's export and maps its buffers; those `previous` (an earlier import of
    /// the same peer) already maps, with the same slot and generation, are kept, not mapped and
    /// populated again.
    fn connect(
        socket: &Path,
        previous: Option<&ShmPeer>,
        token: Option<&Token>,
        timeout: Duration,
    ) -> Result<ShmPeer, Error> {
        let failed = |e: std::io::Error| Error::PeerFailed {
            reason: format!("shm side channel {}: {e}", socket.display()),
        };
        let (export, fds, pid, channel) = match fetch_export(socket, token, timeout) {
            Ok(fetched) => fetched,
            Err(FetchError::Io(e)) => return Err(failed(e)),
            Err(FetchError::Refused(Refused::BadToken)) => {
                return Err(yuebing_rpc::Error::Unauthenticated.into())
            }
            Err(FetchError::Refused(Refused::BadVersion)) => {
                return Err(failed(std::io::Error::other(
                    "refused: not the same side-channel protocol version",
                )))
            }
        };
        let pid = rustix::process::Pid::from_raw(pid as i32).ok_or_else(|| Error::PeerFailed {
            reason: "shm peer without a pid".into(),
        })?;
        let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => Some(fd),
            Err(rustix::io::Errno::NOSYS) => None,
            Err(e) => return Err(failed(e.into())),
        };
        let mut fds = fds.into_iter();
        let status = fds
            .next()
            .ok_or_else(|| Error::PeerFailed {
                reason: "shm export without a status page".into(),
            })
            .and_then(|fd| StatusView::open(fd).map_err(|reason| Error::PeerFailed { reason }))?;
        let mut maps = Vec::with_capacity(export.buffers.len());
        for (b, fd) in export.buffers.iter().copied().zip(fds) {
            let ExportedBuffer {
                addr: remote,
                len,
                slot,
                generation,
                remote: rights,
            } = b;
            let kept = previous.and_then(|p| {
                p.maps.iter().find(|m| {
                    (m.remote, m.len, m.slot, m.generation, m.rights)
                        == (remote, len, slot, generation, rights)
                })
            });
            if let Some(m) = kept {
                maps.push(m.clone());
                continue;
            }
            let seals = rustix::fs::fcntl_get_seals(&fd).map_err(|e| failed(e.into()))?;
            if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
                return Err(Error::PeerFailed {
                    reason: "shm buffer is not sealed against resizing".into(),
                });
            }
            let file = File::from(fd);
            let size = file.metadata().map_err(failed)?.len();
            if remote.checked_add(len).is_none() || usize::try_from(len).is_err() {
                return Err(Error::PeerFailed {
                    reason: format!("shm buffer {remote:#x}+{len} wraps around"),
                });
            }
            if size != len || len == 0 {
                return Err(Error::PeerFailed {
                    reason: format!("shm buffer is {size} bytes, announced {len}"),
                });
            }
            // Populated at map time (MAP_POPULATE): otherwise the first copy into each page
            // pays a page fault, and the first transfers to a peer run at a fraction of speed.
            // Read-only unless exported for writes: a buffer exported read-only is sealed
            // against writable mappings, and no copy ever writes it from here.
            let mut options = MmapOptions::new();
            options.len(len as usize).populate();
            let map = match rights.write {
                true => options.map_raw(&file),
                false => options.map_raw_read_only(&file),
            }
            .map_err(failed)?;
            maps.push(Arc::new(Mapping {
                remote,
                len,
                slot,
                generation,
                rights,
                map,
            }));
        }
        maps.sort_by_key(|m| m.remote);
        Ok(ShmPeer {
            instance: export.instance,
            pidfd,
            channel,
            status,
            maps,
        })
    }

    /// Whether the peer's engine has stopped or its process has exited.
    fn exited(&self) -> bool {
        let gone = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
        // Without a pidfd the channel is polled twice: harmless, and no allocation per copy.
        let process = match &self.pidfd {
            Some(pidfd) => pidfd.as_fd(),
            None => self.channel.as_fd(),
        };
        let mut fds = [
            PollFd::new(&self.channel, PollFlags::IN | PollFlags::RDHUP),
            PollFd::new(&process, PollFlags::IN),
        ];
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&now)) {
            Ok(0) => false,
            Ok(_) => fds
                .iter()
                .any(|f| f.revents().intersects(gone | PollFlags::RDHUP)),
            Err(_) => true,
        }
    }

    /// `[remote, remote + len)` as mapped here for an access in direction `opcode`: `None`
    /// unless one mapping of a buffer still registered holds it, and the typed refusal (before
    /// anything is copied) when that buffer's rights do not allow `opcode`. So a [`Mapped`]
    /// exists only for an access its buffer's rights allow.
    fn resolve(
        self: &Arc<Self>,
        remote: u64,
        len: u64,
        opcode: Opcode,
    ) -> Result<Option<Mapped>, Error> {
        let Some(end) = remote.checked_add(len) else {
            return Ok(None);
        };
        let Some(i) = self
            .maps
            .partition_point(|m| m.remote <= remote)
            .checked_sub(1)
        else {
            return Ok(None);
        };
        let m = &self.maps[i];
        // Imports refuse buffers whose end wraps, so `checked_add` only restates that.
        let inside = m
            .remote
            .checked_add(m.len)
            .is_some_and(|m_end| end <= m_end);
        let Ok(span_len) = usize::try_from(len) else {
            return Ok(None);
        };
        if len == 0 || !inside {
            return Ok(None);
        }
        let mapped = Mapped {
            peer: self.clone(),
            remote,
            // Inside the mapping (checked above), so no overflow.
            addr: m.map.as_mut_ptr() as u64 + (remote - m.remote),
            len: span_len,
            slot: m.slot,
            generation: m.generation,
            writable: m.rights.write,
        };
        if !mapped.is_live() {
            return Ok(None);
        }
        m.rights.check(opcode, remote, len)?;
        Ok(Some(mapped))
    }
}

struct Inner {
    socket: PathBuf,
    boot_id: String,
    instance: u64,
    /// The cluster token: presented to exporters, required of importers.
    token: Option<Token>,
    /// Time a side-channel handshake may take, each way.
    hello_timeout: Duration,
    handle: Handle,
    memory: Arc<MemoryRegistry>,
    /// Tells importers which exported buffers are still registered.
    status: Arc<StatusPage>,
    /// Importers' side-channel connections, held open while this engine lives; `None` once
    /// it stopped (an export finishing after that closes its connection at once).
    importers: Mutex<Option<Vec<std::os::unix::net::UnixStream>>>,
    /// The peers imported (see `import`).
    imports: Imports,
}

/// The shm transport of one engine: its side channel (exporting) and its mapped peers.
pub struct ShmTransport {
    inner: Arc<Inner>,
    _stop: DropGuard,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("socket", &self.inner.socket)
            .finish_non_exhaustive()
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl ShmTransport {
    /// Opens the side channel that exports `memory`'s engine-allocated buffers registered for
    /// remote access, of instance
    /// `instance` to importers presenting `token` (and presents it to exporters); a handshake
    /// must end within `hello_timeout`; tasks run on `handle`.
    pub async fn start(
        memory: Arc<MemoryRegistry>,
        instance: u64,
        token: Option<Token>,
        hello_timeout: Duration,
        handle: Handle,
    ) -> Result<ShmTransport, Error> {
        let io = |e: std::io::Error| Error::Io {
            reason: format!("shm side channel: {e}"),
        };
        let dir = socket_dir().map_err(io)?;
        sweep_stale(&dir);
        let socket = socket_path(&dir, instance);
        let _ = std::fs::remove_file(&socket);
        let status = Arc::new(StatusPage::create().map_err(io)?);
        let listener = UnixListener::bind(&socket).map_err(io)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        let inner = Arc::new(Inner {
            socket,
            boot_id: boot_id(),
            instance,
            token,
            hello_timeout,
            handle: handle.clone(),
            memory,
            status,
            importers: Mutex::new(Some(Vec::new())),
            imports: Imports::default(),
        });
        let stop = CancellationToken::new();
        handle.spawn(export_loop(listener, inner.clone(), stop.clone()));
        Ok(ShmTransport {
            inner,
            _stop: stop.drop_guard(),
        })
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        // Importers must not copy into this engine's buffers any more (the application may
        // reuse them), nor count a copy into them as delivered: every slot is released, then
        // every side channel shut down. Shutting the socket down (not only closing this end)
        // also cuts off an export still being sent on a duplicate of it.
        self.inner.status.release_all();
        let importers = self
            .inner
            .importers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for stream in importers.into_iter().flatten() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn section(segment: &SegmentDescriptor) -> Option<(PathBuf, String)> {
    let s = segment.transports.get("shm")?;
    let socket = PathBuf::from(s.get("socket")?.as_str()?);
    let boot = s.get("boot_id")?.as_str()?.to_string();
    Some((socket, boot))
}

/// A range of a peer's mapped buffer, kept mapped by the peer entry it holds.
#[derive(Clone)]
struct Mapped {
    peer: Arc<ShmPeer>,
    /// Address of the range in the peer.
    remote: u64,
    /// Local address of the range (inside one of the peer's mappings).
    addr: u64,
    len: usize,
    slot: usize,
    generation: u64,
    /// Whether the mapping may be written (it is mapped read-only otherwise).
    writable: bool,
}

impl Mapped {
    /// Whether the peer's buffer is still registered (read from its status page).
    fn is_live(&self) -> bool {
        self.peer.status.is_live(self.slot, self.generation)
    }

    /// The peer's refusal of a range it released: `OutOfBounds`, as on every transport.
    fn released(&self) -> Error {
        Error::OutOfBounds {
            addr: self.remote,
            len: self.len as u64,
        }
    }
}

impl Side for Mapped {
    fn unwritable(&self) -> Option<Error> {
        (!self.writable).then_some(Error::AccessDenied {
            addr: self.remote,
            len: self.len as u64,
        })
    }

    fn with_span<R>(&self, f: impl FnOnce(Span<'_>) -> R) -> Result<R, Error> {
        // A buffer the peer released is never copied to or from again.
        if !self.is_live() {
            return Err(self.released());
        }
        let ptr = std::ptr::NonNull::new(self.addr as *mut u8).ok_or_else(|| self.released())?;
        // SAFETY: `resolve` found the range inside one mapping of the peer's size-checked,
        // resize-sealed memfd; `self.peer` holds that mapping, so it stays mapped while `self`
        // lives. The memory is shared with another process and never behind a Rust reference.
        // A buffer exported without write is mapped read-only; `resolve` makes a `Mapped` of it
        // only for a read, whose copy only reads this span (it is the source), so every access
        // made through the span is one the mapping allows.
        let span = unsafe { Span::new(ptr, self.len) };
        Ok(f(span))
    }
}

impl Transport for ShmTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Shm
    }

    fn prepare(&self, segment: &SegmentDescriptor) -> BoxFuture<'static, ()> {
        let Some((socket, boot)) = section(segment) else {
            return futures::future::ready(()).boxed();
        };
        let inner = self.inner.clone();
        let same_host = boot == inner.boot_id && segment.instance_id != inner.instance;
        async move {
            if same_host {
                // A failure is remembered (the peer is then served by tcp for a while).
                let _ = inner.import(&socket, None).await;
            }
        }
        .boxed()
    }

    fn can_reach(&self, segment: &SegmentDescriptor, forced: bool) -> bool {
        let Some((socket, boot)) = section(segment) else {
            return false;
        };
        if boot != self.inner.boot_id || segment.instance_id == self.inner.instance {
            return false;
        }
        if self.inner.imports.peer(&socket).is_some() {
            return true;
        }
        if forced {
            // `transfer` maps the peer (on the blocking pool) and reports why it could not.
            return true;
        }
        if self.inner.imports.unreachable(&socket).is_none() {
            self.inner.import_in_background(socket);
        }
        false
    }

    fn registration_hook(&self) -> Option<Arc<dyn RegistrationHook>> {
        Some(Arc::new(ReleaseHook(self.inner.status.clone())))
    }

    fn covers(&self, segment: &SegmentDescriptor, addr: u64, len: u64) -> bool {
        // A descriptor of an older build lists no buffers: shm is tried for all of its
        // exported memory, as that build did (and refuses what it cannot map).
        let Some(listed) = segment.transports.get("shm").and_then(|s| s.get("buffers")) else {
            return true;
        };
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        listed.as_array().is_some_and(|all| {
            all.iter().any(|b| {
                let at = |i: usize| b.get(i).and_then(serde_json::Value::as_u64);
                matches!((at(0), at(1)), (Some(a), Some(n)) if a <= addr
                    && a.checked_add(n).is_some_and(|e| end <= e))
            })
        })
    }

    fn publish(&self) -> Option<serde_json::Value> {
        // The buffers an importer maps, `[address, length]` each: the rest of the exported
        // memory (a caller's registered memory, a mapped file) is reached another way.
        let buffers: Vec<[u64; 2]> = handed_over(&self.inner.memory)
            .iter()
            .map(|(b, _)| [b.addr(), b.len() as u64])
            .collect();
        Some(serde_json::json!({
            "socket": self.inner.socket.display().to_string(),
            "boot_id": self.inner.boot_id,
            "buffers": buffers,
        }))
    }

    fn forget(&self, segment: &SegmentDescriptor) {
        if let Some((socket, _)) = section(segment) {
            self.inner.imports.forget(&socket);
        }
    }

    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>> {
        let inner = self.inner.clone();
        async move {
            let (socket, _) = section(&job.segment).ok_or_else(|| {
                Error::invalid(format!(
                    "segment {:?} publishes no shm section",
                    job.segment.name
                ))
            })?;
            let mut peer = match inner.imports.peer(&socket) {
                Some(p) => p,
                None => inner.import(&socket, None).await?,
            };
            // Whether the peer is alive is asked once, after the copy: that is what decides
            // whether a write counts, and a copy into a dead peer's pages harms nobody.
            if peer.instance != job.segment.instance_id {
                return Err(Error::StaleSegment {
                    segment: job.segment.name.clone(),
                    expected: job.segment.instance_id,
                    actual: peer.instance,
                });
            }
            // The rights are checked here, before the copy: no code of the peer runs.
            let mut remote = peer.resolve(job.remote, job.len, job.opcode)?;
            if remote.is_none()
                && crate::bounds::check_bounds(&job.segment.regions(), job.remote, job.len).is_ok()
            {
                // The peer exported a buffer after we mapped its others: map again.
                peer = inner.import(&socket, Some(&peer)).await?;
                remote = peer.resolve(job.remote, job.len, job.opcode)?;
            }
            let remote = remote.ok_or(Error::OutOfBounds {
                addr: job.remote,
                len: job.len,
            })?;
            let after = remote.clone();
            match job.opcode {
                Opcode::Write => copy_between(job.local, remote, job.len).await?,
                Opcode::Read => copy_between(remote, job.local, job.len).await?,
            }
            // A copy that raced the peer's release of the buffer landed in orphaned pages.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if !after.is_live() {
                return Err(after.released());
            }
            // A write counts only if the peer outlived it (the same process: the same instance).
            if peer.exited() {
                return Err(Error::PeerFailed {
                    reason: "the shm peer exited during the transfer".into(),
                });
            }
            Ok(())
        }
        .boxed()
    }
}
