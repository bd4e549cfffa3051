//! Registration of the caller's memory with an engine, which the zero-copy calls need (the
//! engine moves bytes only from and into registered memory).
//!
//! A call on memory that is not registered registers it local-only for the call's duration (a
//! *call pin*, shared by concurrent calls on the same or a contained range, and unregistered
//! when the last of them ends). `register` makes a *user pin* that stays until `unregister`:
//! repeated calls on that memory then skip the registration; a Python buffer's export is kept
//! with it, so the buffer can be neither freed nor resized while registered. Memory the engine
//! registered itself (its `Buffer`s) is used as it is.
//!
//! Only threads holding the GIL use the table (every method takes the `Python` token), so its
//! lock is never contended while a Python object is dropped; a pin is never held across a
//! wait, only the [`Held`] guard that the waiting thread keeps.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use yuebing_bridge::BlockingEngine;
use yuebing_engine::{Location, RemoteAccess};

use crate::memory::Memory;
use crate::{errors, runtime};

/// The registrations made through one engine's `Pins`.
pub(crate) struct Pins {
    engine: BlockingEngine,
    /// The process that made it: a forked child is refused (see `runtime::ForkSafe`).
    pid: u32,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Pins by first byte; they never overlap (the engine refuses overlapping registrations).
    pins: BTreeMap<u64, Pin>,
    next_id: u64,
}

struct Pin {
    len: u64,
    /// Tells this pin from a later one at the same address.
    id: u64,
    /// Calls using the pin now.
    users: usize,
    /// `Some` for a user pin: the caller's memory, kept until `unregister`.
    user: Option<Memory>,
}

/// A call's hold on registered memory; released (and a call pin unregistered when its last
/// user goes) when dropped. Drop it only once the call's work has stopped.
pub(crate) struct Held<'a> {
    pins: &'a Pins,
    /// `(first byte, id)` of the pin held; `None` for memory the engine registered itself.
    pin: Option<(u64, u64)>,
}

impl Pins {
    /// Pins over `engine`'s registrations.
    pub(crate) fn new(engine: BlockingEngine) -> Pins {
        Pins {
            engine,
            pid: std::process::id(),
            table: Mutex::new(Table::default()),
        }
    }

    /// The engine the pins register with.
    pub(crate) fn engine(&self) -> &BlockingEngine {
        &self.engine
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Forked` in a forked child, before the table (whose lock a thread of the parent may have
    /// held at the fork) or the engine is touched.
    fn not_forked(&self, py: Python<'_>) -> PyResult<()> {
        match std::process::id() == self.pid {
            true => Ok(()),
            false => Err(runtime::forked(py, self.pid)),
        }
    }

    /// Makes `mem` usable by a call: a pin holding it already, memory the engine registered
    /// itself, or else a new call pin. Keep `mem` alive at least as long as the guard.
    pub(crate) fn hold(&self, py: Python<'_>, mem: &Memory) -> PyResult<Held<'_>> {
        self.not_forked(py)?;
        let (addr, len) = (mem.addr, mem.len);
        let mut table = self.lock();
        if let Some((&start, pin)) = table.pins.range_mut(..=addr).next_back() {
            if addr - start < pin.len && len <= pin.len - (addr - start) {
                pin.users += 1;
                return Ok(Held {
                    pins: self,
                    pin: Some((start, pin.id)),
                });
            }
        }
        if self.engine.engine().memory().find(addr, len).is_some() {
            return Ok(Held {
                pins: self,
                pin: None,
            });
        }
        // SAFETY: `mem` is a Python buffer whose export the caller keeps (so its memory stays
        // allocated and cannot be resized), an engine buffer whose mapping it holds (so
        // `Buffer.free()` meanwhile does not unmap it), or an address its caller vouched for,
        // valid for `len` bytes; it lives at least as long as the guard, which unregisters the range
        // before it goes (and `unregister` returns only once no byte of it is touched). The
        // engine copies only through raw pointers and no Rust reference to the range exists.
        // Local-only: no peer can reach it, so it is written only by this engine's own reads,
        // whose destinations are writable memory (`Access::Write`) or a caller's promise.
        let registered = unsafe {
            self.engine
                .register(addr as *mut u8, len as usize, Location::default())
        };
        registered.map_err(|e| errors::to_py(py, &e))?;
        let id = table.next_id;
        table.next_id += 1;
        table.pins.insert(
            addr,
            Pin {
                len,
                id,
                users: 1,
                user: None,
            },
        );
        Ok(Held {
            pins: self,
            pin: Some((addr, id)),
        })
    }

    /// Registers `mem` until [`Pins::unregister`] (a user pin); `remote` as the engine takes it
    /// (local-only for the store's zero-copy calls). Returns its address.
    pub(crate) fn register(
        &self,
        py: Python<'_>,
        mem: Memory,
        remote: RemoteAccess,
    ) -> PyResult<u64> {
        self.not_forked(py)?;
        let (addr, len) = (mem.addr, mem.len);
        let mut table = self.lock();
        // SAFETY: as in `hold`, with `mem` (a buffer's export, an engine buffer's mapping, or an
        // address the caller vouched for until it unregisters) kept in the table until `unregister` unregisters the range
        // first. Exported ranges may be written by peers at any time, through raw pointers
        // only, which the caller accepted by asking for `remote` rights.
        let registered = unsafe {
            self.engine.register_exported(
                addr as *mut u8,
                len as usize,
                Location::default(),
                remote,
            )
        };
        registered.map_err(|e| errors::to_py(py, &e))?;
        let id = table.next_id;
        table.next_id += 1;
        table.pins.insert(
            addr,
            Pin {
                len,
                id,
                users: 0,
                user: Some(mem),
            },
        );
        Ok(addr)
    }

    /// Ends the user pin that starts at `addr`: unregisters it (calls using it now fail; no
    /// byte of it is touched once this returns) and releases the memory it kept.
    pub(crate) fn unregister(&self, py: Python<'_>, addr: u64) -> PyResult<()> {
        self.not_forked(py)?;
        let released = {
            let mut table = self.lock();
            let user = matches!(table.pins.get(&addr), Some(p) if p.user.is_some());
            if !user {
                let e = yuebing_engine::Error::AddressNotRegistered { addr };
                return Err(errors::engine(py, e));
            }
            let pin = table.pins.remove(&addr);
            // An error means the engine no longer has the range (it stopped): nothing to undo.
            let _ = self.engine.unregister(addr);
            pin
        };
        // The buffer's export is released here, outside the table's lock.
        drop(released);
        Ok(())
    }

    fn release(&self, start: u64, id: u64) {
        let mut table = self.lock();
        let Some(pin) = table.pins.get_mut(&start).filter(|p| p.id == id) else {
            // Unregistered by the user meanwhile.
            return;
        };
        pin.users = pin.users.saturating_sub(1);
        if pin.users == 0 && pin.user.is_none() {
            table.pins.remove(&start);
            // An error means the engine no longer has the range (it stopped): nothing to undo.
            let _ = self.engine.unregister(start);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some((start, id)) = self.pin {
            self.pins.release(start, id);
        }
    }
}

impl Drop for Pins {
    /// The owner (a `Store` or `Engine`) is gone: every range still registered here is
    /// unregistered before the memory kept with it is released.
    fn drop(&mut self) {
        let table = std::mem::take(&mut *self.lock());
        for (&addr, _) in table.pins.iter() {
            let _ = self.engine.unregister(addr);
        }
        drop(table);
    }
}
