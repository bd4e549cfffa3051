//! Registration of the caller's memory with an engine, which the zero-copy calls need (the
//! engine moves bytes only from and into registered memory).
//!
//! A call on memory that is not registered registers it local-only for the call's duration (a
//! *call pin*). The ranges of one call (a batch) are held together, those that overlap merged
//! into one pin first, so a call never conflicts with itself. A later call on a range that a
//! call pin contains shares that pin if the pin keeps its memory valid by itself: it holds
//! clones of the [`Memory`]s it was made from, so a Python buffer's export or an engine
//! buffer's mapping lasts as long as the pin, even past the call that made it. A pin made from
//! a raw address is valid only while its own call runs (its caller vouched for no longer), so
//! it is not shared.
//!
//! The engine refuses overlapping registrations. A range that partly overlaps (or contains, or
//! lies in an unshareable) call pin therefore waits until those pins are gone, then registers:
//! never refused for a pin that is about to go, and never unregistering memory a call uses.
//! Waiters go in the order they came: a waiting range keeps newer calls from sharing or making
//! pins that overlap it, so each waits only for calls already under way. A waiter holds nothing
//! (all of a call's ranges are taken at once, or none), so waiters cannot wait for each other;
//! it sleeps with the GIL released and runs Python's signal handlers between slices, as
//! `wait` does.
//!
//! `register` makes a *user pin* that stays until `unregister`; calls on memory it contains use
//! it. It waits for the call pins it overlaps as a call does. Overlapping another user pin (or,
//! the engine says, memory the engine registered itself) is `AddressOverlapped`: waiting would
//! not help. Memory the engine registered itself (its `Buffer`s) is used as it is.
//!
//! A call made by a signal handler while the same thread's interrupted call holds pins shares
//! those; where it would have to wait for them (they go only once it returned) it is refused
//! with `AddressOverlapped` instead.
//!
//! What a call takes, or whether it waits, is decided by the pure `pin_table`; this module
//! registers with the engine and sleeps as it says. Every method takes the GIL (the `Python`
//! token). The table's lock is taken without it only
//! by a sleeping waiter, which drops nothing under it, and memory leaving the table is dropped
//! only after the lock is released, so no thread waits for the GIL while holding the lock.

use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;
use yuebing_bridge::BlockingEngine;
use yuebing_engine::{Location, RemoteAccess};

use crate::memory::Memory;
use crate::pin_table::{plan, plan_user, Kind, Pin, Plan, Range, Step, Table};
use crate::wait::SLICE;
use crate::{errors, runtime};

/// The registrations made through one engine's `Pins`.
pub(crate) struct Pins {
    engine: BlockingEngine,
    /// The process that made it: a forked child is refused (see `runtime::ForkSafe`).
    pid: u32,
    table: Mutex<Table>,
    /// Notified when a waiter may go on (a pin went, a waiter gave up its place).
    changed: Condvar,
}

/// One attempt of a waiting method: done (with what to drop once the lock is released), or
/// waiting for these ranges.
enum Turn<T> {
    Done(Result<T, Failure>),
    Wait(Vec<Range>),
}

/// An error from under the table's lock, and memory that left the table, both dealt with once
/// the lock is released.
struct Failure {
    error: yuebing_bridge::Error,
    released: Vec<Memory>,
}

impl Failure {
    fn overlapped(r: Range) -> Failure {
        Failure {
            error: yuebing_engine::Error::AddressOverlapped {
                addr: r.start,
                len: r.len(),
            }
            .into(),
            released: Vec::new(),
        }
    }
}

thread_local! {
    /// The pins this thread's calls hold now, as `(Pins, first byte, id)`: the call of a signal
    /// handler must not wait for them (see the module docs).
    static HELD_HERE: RefCell<Vec<(usize, u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// A call's hold on registered memory; released (a call pin unregistered when its last user
/// goes) when dropped. Drop it only once the call's work has stopped, and before the call's
/// memory.
pub(crate) struct Held<'a> {
    pins: &'a Pins,
    /// `(first byte, id)` of each pin held (memory the engine registered itself has none).
    keys: Vec<(u64, u64)>,
}

impl<'a> Held<'a> {
    fn new(pins: &'a Pins, keys: Vec<(u64, u64)>) -> Held<'a> {
        let me = pins.key();
        HELD_HERE.with(|h| {
            let mut h = h.borrow_mut();
            h.extend(keys.iter().map(|&(start, id)| (me, start, id)));
        });
        Held { pins, keys }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let me = self.pins.key();
        HELD_HERE.with(|h| {
            let mut h = h.borrow_mut();
            for &(start, id) in &self.keys {
                if let Some(at) = h.iter().rposition(|&k| k == (me, start, id)) {
                    h.swap_remove(at);
                }
            }
        });
        self.pins.release(&self.keys);
    }
}

impl Pins {
    /// Pins over `engine`'s registrations.
    pub(crate) fn new(engine: BlockingEngine) -> Pins {
        Pins {
            engine,
            pid: std::process::id(),
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
        }
    }

    /// The engine the pins register with.
    pub(crate) fn engine(&self) -> &BlockingEngine {
        &self.engine
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells this `Pins` from others in [`HELD_HERE`].
    fn key(&self) -> usize {
        self as *const Pins as usize
    }

    /// `Forked` in a forked child, before the table (whose lock a thread of the parent may have
    /// held at the fork) or the engine is touched.
    fn not_forked(&self, py: Python<'_>) -> PyResult<()> {
        match std::process::id() == self.pid {
            true => Ok(()),
            false => Err(runtime::forked(py, self.pid)),
        }
    }

    fn mine(&self, start: u64, id: u64) -> bool {
        let me = self.key();
        HELD_HERE.with(|h| h.borrow().contains(&(me, start, id)))
    }

    /// Runs `attempt` under the table's lock until it is done; while it says to wait, its
    /// ranges keep their place among the waiters and the thread sleeps, GIL released, until a
    /// pin goes, running Python's signal handlers between slices (one that raises ends the wait
    /// with its exception; the call holds nothing then).
    fn in_turn<T>(
        &self,
        py: Python<'_>,
        mut attempt: impl FnMut(&mut Table, Option<u64>) -> Turn<T>,
    ) -> PyResult<T> {
        let mut ticket = None;
        loop {
            let generation = {
                let mut table = self.lock();
                match attempt(&mut table, ticket) {
                    Turn::Wait(ranges) => {
                        let t = *ticket.get_or_insert_with(|| {
                            table.next_ticket += 1;
                            table.next_ticket
                        });
                        table.waiting.insert(t, ranges);
                        table.generation
                    }
                    Turn::Done(outcome) => {
                        if let Some(t) = ticket {
                            self.leave(&mut table, t);
                        }
                        drop(table);
                        return outcome.map_err(|f| {
                            drop(f.released);
                            errors::to_py(py, &f.error)
                        });
                    }
                }
            };
            py.detach(|| {
                let table = self.lock();
                if table.generation == generation {
                    let _ = self.changed.wait_timeout(table, SLICE);
                }
            });
            if let Err(raised) = py.check_signals() {
                if let Some(t) = ticket {
                    self.leave(&mut self.lock(), t);
                }
                return Err(raised);
            }
        }
    }

    /// Waiter `ticket` goes: the waiters after it may go on.
    fn leave(&self, table: &mut Table, ticket: u64) {
        table.waiting.remove(&ticket);
        table.generation += 1;
        self.changed.notify_all();
    }

    /// Makes `mems` (a call's memory) usable by the call: pins holding them already, memory
    /// the engine registered itself, or new call pins (waiting, if need be, for pins they
    /// overlap to go). Keep `mems` alive at least as long as the guard.
    pub(crate) fn hold(&self, py: Python<'_>, mems: &[Memory]) -> PyResult<Held<'_>> {
        self.not_forked(py)?;
        let engine_has = |r: Range| {
            let registry = self.engine.engine().memory();
            registry.find(r.start, r.len()).is_some()
        };
        let mine = |start, id| self.mine(start, id);
        let keys = self.in_turn(py, |table, ticket| {
            match plan(table, mems, ticket, &mine, &engine_has) {
                Plan::Go(steps) => Turn::Done(self.take(table, steps, mems)),
                Plan::Wait(ranges) => Turn::Wait(ranges),
                Plan::Refuse(r) => Turn::Done(Err(Failure::overlapped(r))),
            }
        })?;
        Ok(Held::new(self, keys))
    }

    /// Takes the steps of a [`Plan::Go`]; if one fails, undoes those taken before it.
    fn take(
        &self,
        table: &mut Table,
        steps: Vec<Step>,
        mems: &[Memory],
    ) -> Result<Vec<(u64, u64)>, Failure> {
        let mut keys = Vec::with_capacity(steps.len());
        for step in steps {
            let taken = match step {
                Step::Join(start) => match table.pins.get_mut(&start) {
                    Some(pin) => {
                        pin.users += 1;
                        Ok((start, pin.id))
                    }
                    // The plan was made under this same lock: the pin is there.
                    None => Err(yuebing_engine::Error::AddressNotRegistered { addr: start }.into()),
                },
                Step::Register { range, memory } => self.register_call(table, range, memory, mems),
            };
            match taken {
                Ok(key) => keys.push(key),
                Err(error) => {
                    let released = keys
                        .iter()
                        .flat_map(|&key| self.release_locked(table, key))
                        .flatten()
                        .collect();
                    return Err(Failure { error, released });
                }
            }
        }
        Ok(keys)
    }

    /// Registers call pin `range`, made of `mems[i]` for each `i` of `memory`; one user.
    fn register_call(
        &self,
        table: &mut Table,
        range: Range,
        memory: Vec<usize>,
        mems: &[Memory],
    ) -> yuebing_bridge::Result<(u64, u64)> {
        let memory: Vec<Memory> = memory.into_iter().map(|i| mems[i].clone()).collect();
        let shared = memory.iter().all(Memory::keeps_itself);
        // SAFETY: `range` is the union of the overlapping ranges of `memory` (the plan merged
        // them), so each of its bytes lies in one of them: Python buffers held exported
        // (allocated, not resizable), engine buffers' mappings, or addresses their callers
        // vouched for, valid for reads (and, for a call's destinations, writes: `Access`)
        // while the call runs. The pin keeps clones of `memory` until it is unregistered
        // (`release_locked`, `Drop for Pins`), and the memory is released only after that,
        // once `unregister` returned (no byte is touched then). A pin made from a raw address
        // is never shared (`Pin::shared`): only its own call uses it, and that call drops its
        // guard, which unregisters the pin, before it returns, so the range stays registered
        // only while its caller vouches for it. The engine copies through raw pointers only,
        // and no Rust reference to the range exists (`memory` forms none). Local-only: no peer
        // can reach it; this engine writes it only as the destination of a call, within that
        // call's own writable memory.
        let registered = unsafe {
            self.engine.register(
                range.start as *mut u8,
                range.len() as usize,
                Location::default(),
            )
        };
        registered?;
        let id = table.new_id();
        let kind = Kind::Call { memory, shared };
        let pin = Pin {
            end: range.end,
            id,
            users: 1,
            kind,
        };
        table.pins.insert(range.start, pin);
        Ok((range.start, id))
    }

    /// Registers `mem` until [`Pins::unregister`] (a user pin), waiting first for call pins it
    /// overlaps to go; `remote` as the engine takes it (local-only for the store's zero-copy
    /// calls). Returns its address.
    pub(crate) fn register(
        &self,
        py: Python<'_>,
        mem: Memory,
        remote: RemoteAccess,
    ) -> PyResult<u64> {
        self.not_forked(py)?;
        let r = Range::of(&mem);
        let mine = |start, id| self.mine(start, id);
        let mut mem = Some(mem);
        self.in_turn(py, |table, ticket| {
            match plan_user(table, r, ticket, &mine) {
                Err(r) => Turn::Done(Err(Failure::overlapped(r))),
                Ok(false) => Turn::Wait(vec![r]),
                Ok(true) => {
                    // Taken by the attempt that registers, which is the last one.
                    let Some(kept) = mem.take() else {
                        return Turn::Done(Err(Failure::overlapped(r)));
                    };
                    // SAFETY: as in `register_call`, with `kept` (a Python buffer's export, an engine
                    // buffer's mapping, or an address the caller vouched for until it unregisters)
                    // kept in the table until `unregister` (or `Drop for Pins`) unregisters the
                    // range first. Exported ranges may be read and written by peers at any time,
                    // through raw pointers only, which the caller accepted by asking for `remote`
                    // rights (a writable buffer when they include writing: `Access::Write`).
                    let registered = unsafe {
                        self.engine.register_exported(
                            r.start as *mut u8,
                            r.len() as usize,
                            Location::default(),
                            remote,
                        )
                    };
                    if let Err(error) = registered {
                        // Released once the lock is.
                        let released = vec![kept];
                        return Turn::Done(Err(Failure { error, released }));
                    }
                    let id = table.new_id();
                    let pin = Pin {
                        end: r.end,
                        id,
                        users: 0,
                        kind: Kind::User(kept),
                    };
                    table.pins.insert(r.start, pin);
                    Turn::Done(Ok(r.start))
                }
            }
        })
    }

    /// Ends the user pin that starts at `addr`: unregisters it (calls using it now fail; no
    /// byte of it is touched once this returns) and releases the memory it kept.
    pub(crate) fn unregister(&self, py: Python<'_>, addr: u64) -> PyResult<()> {
        self.not_forked(py)?;
        let released = {
            let mut table = self.lock();
            if !table.pins.get(&addr).is_some_and(Pin::is_user) {
                let e = yuebing_engine::Error::AddressNotRegistered { addr };
                return Err(errors::engine(py, e));
            }
            let pin = table.pins.remove(&addr);
            // An error means the engine no longer has the range (it stopped): nothing to undo.
            let _ = self.engine.unregister(addr);
            table.generation += 1;
            self.changed.notify_all();
            pin
        };
        // The buffer's export is released here, outside the table's lock.
        drop(released);
        Ok(())
    }

    /// A call lets go of the pins at `keys`.
    fn release(&self, keys: &[(u64, u64)]) {
        if keys.is_empty() {
            return;
        }
        let released: Vec<Vec<Memory>> = {
            let mut table = self.lock();
            keys.iter()
                .flat_map(|&key| self.release_locked(&mut table, key))
                .collect()
        };
        // Outside the table's lock.
        drop(released);
    }

    /// One user fewer for the pin at `key`; a call pin left without users is unregistered and
    /// its memory returned (to be dropped once the lock is released).
    fn release_locked(&self, table: &mut Table, (start, id): (u64, u64)) -> Option<Vec<Memory>> {
        // `None`: unregistered by the user meanwhile.
        let pin = table.pins.get_mut(&start).filter(|p| p.id == id)?;
        pin.users = pin.users.saturating_sub(1);
        if pin.users > 0 || pin.is_user() {
            return None;
        }
        let pin = table.pins.remove(&start)?;
        // An error means the engine no longer has the range (it stopped): nothing to undo.
        let _ = self.engine.unregister(start);
        table.generation += 1;
        self.changed.notify_all();
        Some(pin.into_memory())
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
