//! The exporter's status page: how a same-host importer learns that a buffer it mapped was
//! released.
//!
//! An exporter cannot revoke a peer's mapping of its memfd. Instead it hands over, with its
//! buffers, one sealed page of 64-bit words: each exported buffer gets a slot holding a
//! generation number, and unregistering the buffer clears it. An importer reads the slot before
//! every copy (a buffer released before the copy is refused, nothing copied) and again after it
//! (a copy that raced the release landed in orphaned pages and is not reported Completed). A
//! slot is reused only with a new generation, so an old mapping never looks live again.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memfd::{FileSeal, MemfdOptions};
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::SealFlags;

use crate::memory::raw::{self, Span};

/// Bytes in the page.
const PAGE: usize = 4096;
/// Slots in the page: buffers exported at once, at most.
pub(crate) const SLOTS: usize = PAGE / 8;

/// A slot's value when no live buffer holds it.
const RELEASED: u64 = 0;

/// The span of a mapped page, valid while the mapping lives.
fn span(map: &MmapRaw) -> Span<'_> {
    let ptr = std::ptr::NonNull::new(map.as_mut_ptr()).unwrap_or(std::ptr::NonNull::dangling());
    // SAFETY: the mapping is PAGE bytes long (checked or created so) and lives as long as the
    // borrow; its words are only accessed atomically, never through a Rust reference to bytes.
    unsafe { Span::new(ptr, map.len()) }
}

/// The exporter's page, and which buffer holds which slot.
pub(crate) struct StatusPage {
    memfd: memfd::Memfd,
    map: MmapRaw,
    slots: std::sync::Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// Buffer address → (slot, generation).
    held: HashMap<u64, (usize, u64)>,
    free: Vec<usize>,
    next_slot: usize,
    last_generation: u64,
}

impl StatusPage {
    /// A new page, every slot released.
    pub(crate) fn create() -> std::io::Result<StatusPage> {
        let memfd = MemfdOptions::default()
            .allow_sealing(true)
            .close_on_exec(true)
            .create("yuebing-shm-status")
            .map_err(std::io::Error::other)?;
        memfd.as_file().set_len(PAGE as u64)?;
        memfd
            .add_seals(&[FileSeal::SealShrink, FileSeal::SealGrow, FileSeal::SealSeal])
            .map_err(std::io::Error::other)?;
        let map = MmapOptions::new().len(PAGE).map_raw(memfd.as_file())?;
        Ok(StatusPage {
            memfd,
            map,
            slots: Default::default(),
        })
    }

    /// The page's memfd, to hand to an importer.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.memfd.as_file().as_fd()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot and generation of the buffer at `addr`, given one now if it has none; `None`
    /// when every slot is taken.
    pub(crate) fn hold(&self, addr: u64) -> Option<(usize, u64)> {
        let mut slots = self.lock();
        if let Some(&held) = slots.held.get(&addr) {
            return Some(held);
        }
        let slot = match slots.free.pop() {
            Some(s) => s,
            None if slots.next_slot < SLOTS => {
                slots.next_slot += 1;
                slots.next_slot - 1
            }
            None => return None,
        };
        slots.last_generation += 1;
        let generation = slots.last_generation;
        slots.held.insert(addr, (slot, generation));
        raw::store_word(span(&self.map), slot, generation);
        Some((slot, generation))
    }

    /// The buffer at `addr` was released: importers see its slot cleared before this returns.
    pub(crate) fn release(&self, addr: u64) {
        let mut slots = self.lock();
        if let Some((slot, _)) = slots.held.remove(&addr) {
            raw::store_word(span(&self.map), slot, RELEASED);
            slots.free.push(slot);
        }
    }
}

impl StatusPage {
    /// The engine stops: every buffer it exported is released for its importers, whether or not
    /// it was unregistered (the application may keep and reuse the memory).
    pub(crate) fn release_all(&self) {
        let mut slots = self.lock();
        for (_, (slot, _)) in slots.held.drain() {
            raw::store_word(span(&self.map), slot, RELEASED);
        }
        slots.free.clear();
        slots.next_slot = SLOTS;
    }
}

/// An importer's view of a peer's page (it only reads it).
pub(crate) struct StatusView {
    map: MmapRaw,
}

impl StatusView {
    /// Maps a peer's page after checking it is sealed against resizing and one page long.
    pub(crate) fn open(fd: OwnedFd) -> Result<StatusView, String> {
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(|e| e.to_string())?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err("shm status page is not sealed against resizing".into());
        }
        let file = File::from(fd);
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        if size != PAGE as u64 {
            return Err(format!("shm status page is {size} bytes, not {PAGE}"));
        }
        // Mapped writable although only read: an atomic (`AtomicU64::from_ptr`) must be valid
        // for writes. The memfd came writable from the peer, who trusts its own user.
        let map = MmapOptions::new()
            .len(PAGE)
            .map_raw(&file)
            .map_err(|e| e.to_string())?;
        Ok(StatusView { map })
    }

    /// Whether the buffer that held `slot` at `generation` is still registered.
    pub(crate) fn is_live(&self, slot: usize, generation: u64) -> bool {
        raw::load_word(span(&self.map), slot) == Some(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_slot_reads_released_and_comes_back_with_a_new_generation() {
        let page = StatusPage::create().unwrap();
        let view = StatusView::open(page.fd().try_clone_to_owned().unwrap()).unwrap();
        let (slot, generation) = page.hold(0x1000).unwrap();
        assert_eq!(page.hold(0x1000), Some((slot, generation)), "held once");
        assert!(view.is_live(slot, generation));
        page.release(0x1000);
        assert!(!view.is_live(slot, generation));
        let (again, newer) = page.hold(0x2000).unwrap();
        assert_eq!(again, slot, "slot reused");
        assert!(newer > generation && !view.is_live(slot, generation));
        assert!(view.is_live(again, newer));
        assert!(!view.is_live(SLOTS, newer), "outside the page");
    }

    #[test]
    fn slots_run_out_and_a_release_frees_one() {
        let page = StatusPage::create().unwrap();
        for i in 0..SLOTS as u64 {
            assert!(page.hold(i).is_some());
        }
        assert!(page.hold(u64::MAX).is_none());
        page.release(3);
        assert!(page.hold(u64::MAX).is_some());
    }

    #[test]
    fn a_stopping_exporter_releases_every_slot_for_good() {
        let page = StatusPage::create().unwrap();
        let view = StatusView::open(page.fd().try_clone_to_owned().unwrap()).unwrap();
        let held: Vec<_> = (0..3u64).map(|a| page.hold(a).unwrap()).collect();
        page.release_all();
        assert!(held.iter().all(|&(s, g)| !view.is_live(s, g)));
        assert!(page.hold(7).is_none(), "nothing is exported after the stop");
    }
}
