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
//! Read-only memory (a `bytes`, a read-only mmap or memoryview) may be registered: a pin
//! records whether its memory may be written. Nothing writes a read-only pin: a call that would
//! write into one (an engine read into it, `get_into`, a batch's read, a write to the engine's
//! own segment that lands in it) is refused with `InvalidArgument` before it starts, and such
//! memory is never exported for peers' writes. A call that writes memory which another call
//! reads through a read-only pin waits until that pin is gone, and no read-only pin is made
//! over the target of a write to the engine's own segment until that write is over (the engine
//! leases such a target only when the copy starts; see `pin_table::OwnWrite`).
//!
//! What a call takes, or whether it waits, is decided by the pure `pin_table`; this module
//! registers with the engine and sleeps as it says. Every method takes the GIL (the `Python`
//! token), but nothing under the table's lock runs Python code or lets the GIL go: no Python
//! object is made or dropped there (an error is kept as a [`Fault`] and becomes its exception
//! once the lock is released; memory leaving the table is dropped only then too), and a waiter
//! takes the lock only with the GIL released, to sleep. So a thread that holds the lock never
//! waits for the GIL, and one that holds the GIL waits for the lock only as long as another
//! thread's work under it (a registration, a submit) lasts.

use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;
use yuebing_bridge::BlockingEngine;
use yuebing_engine::{BatchId, Location, RemoteAccess};

use crate::memory::{Access, Memory};
use crate::pin_table::{plan, plan_user, Kind, Pin, Plan, Range, Refusal, Step, Table, Until};
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
    error: Fault,
    released: Vec<Memory>,
}

/// An error decided under the table's lock, made into its Python exception (which runs Python
/// code) only once the lock is released.
enum Fault {
    /// An error of the engine or the bridge.
    Bridge(yuebing_bridge::Error),
    /// `InvalidArgument` with this message (naming the argument).
    Invalid(String),
}

impl Fault {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Fault::Bridge(e) => errors::to_py(py, &e),
            Fault::Invalid(message) => errors::invalid(py, &message),
        }
    }
}

impl Failure {
    fn of(error: Fault) -> Failure {
        Failure {
            error,
            released: Vec::new(),
        }
    }

    fn overlapped(r: Range) -> Failure {
        Failure::of(Fault::Bridge(
            yuebing_engine::Error::AddressOverlapped {
                addr: r.start,
                len: r.len(),
            }
            .into(),
        ))
    }
}

/// The message of a write into read-only memory: `what` (`addr`, `len` bytes) lies in the pin
/// `pin`.
fn read_only(what: &str, r: Range, pin: Range) -> String {
    format!(
        "{what} ({:#x}, {} bytes) lies in read-only memory registered at {:#x} ({} bytes), \
         which nothing may write: register writable memory (a bytearray, a writable numpy \
         array) for a destination",
        r.start,
        r.len(),
        pin.start,
        pin.len()
    )
}

/// A range the engine is to write in its own registered memory for one request: the local
/// side of a read, or (`target_of`: the request's index) the target of a write to the engine's
/// own segment. `what` names it in errors.
pub(crate) struct Write {
    pub(crate) range: Range,
    pub(crate) what: String,
    pub(crate) target_of: Option<usize>,
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

/// A blocking write to the engine's own segment, recorded while it runs: no read-only pin is
/// made over its target meanwhile (see `pin_table::OwnWrite`). Drop it once the call's work
/// has stopped.
pub(crate) struct OwnWriteGuard<'a> {
    pins: &'a Pins,
    until: Until,
}

impl Drop for OwnWriteGuard<'_> {
    fn drop(&mut self) {
        let until = self.until;
        let mut table = self.pins.lock();
        table.end_own_writes(&|u| u == until);
        self.pins.changed.notify_all();
    }
}

impl Pins {
    /// Pins over `engine`'s registrations.
    pub(crate) fn new(engine: BlockingEngine) -> Pins {
        Pins {
            engine,
            pid: yuebing_bridge::pid::current(),
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
        match yuebing_bridge::pid::current() == self.pid {
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
                self.end_own_writes(&mut table);
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
                            f.error.into_py(py)
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

    /// Forgets the batches' writes to the engine's own segment whose tasks are final (or whose
    /// batch is gone: it is freed only once all its tasks are final).
    fn end_own_writes(&self, table: &mut Table) {
        if table.own_writes.is_empty() {
            return;
        }
        let engine = &self.engine;
        table.end_own_writes(&|until| match until {
            Until::Call(_) => false,
            Until::Task { batch, task } => engine
                .task_status(BatchId::from_u64(batch), task)
                .map_or(true, |s| s.state.is_final()),
        });
    }

    /// Makes `mems` (a call's memory, which it accesses so: `Access::Write` if it writes them)
    /// usable by the call: pins holding them already, memory the engine registered itself, or
    /// new call pins (waiting, if need be, for pins they overlap to go). Memory the call writes
    /// that lies in a read-only user pin is `InvalidArgument`, naming it. Keep `mems` alive at
    /// least as long as the guard.
    pub(crate) fn hold(
        &self,
        py: Python<'_>,
        mems: &[Memory],
        access: Access,
    ) -> PyResult<Held<'_>> {
        self.not_forked(py)?;
        let engine_has = |r: Range| {
            let registry = self.engine.engine().memory();
            registry.find(r.start, r.len()).is_some()
        };
        let mine = |start, id| self.mine(start, id);
        let keys = self.in_turn(py, |table, ticket| {
            match plan(table, mems, access, ticket, &mine, &engine_has) {
                Plan::Go(steps) => Turn::Done(self.take(table, steps, mems)),
                Plan::Wait(ranges) => Turn::Wait(ranges),
                Plan::Refuse(Refusal::Overlapped(r)) => Turn::Done(Err(Failure::overlapped(r))),
                Plan::Refuse(Refusal::ReadOnly(i)) => {
                    let r = Range::of(&mems[i]);
                    let pin = table.read_only_overlapping(r).unwrap_or(r);
                    let message = read_only(&mems[i].what, r, pin);
                    Turn::Done(Err(Failure::of(Fault::Invalid(message))))
                }
            }
        })?;
        Ok(Held::new(self, keys))
    }

    /// Starts a batch's requests (`start`: the engine's submit; `batch` its id) under the
    /// table's lock, once none of the ranges they write in this engine's memory (`writes`) lies
    /// in a read-only pin: else `InvalidArgument` naming the request, and nothing starts. The
    /// engine leases every request's local range in `start`, under the lock, so the pins
    /// checked are the ones it writes. The target of a write to the engine's own segment is
    /// leased only when its task starts: it is recorded until the task is final, and no
    /// read-only pin is made over it meanwhile. Returns the tasks' indices.
    pub(crate) fn submit(
        &self,
        py: Python<'_>,
        batch: u64,
        writes: &[Write],
        start: impl FnOnce() -> yuebing_bridge::Result<std::ops::Range<usize>>,
    ) -> PyResult<std::ops::Range<usize>> {
        self.not_forked(py)?;
        let outcome = {
            let mut table = self.lock();
            self.end_own_writes(&mut table);
            let refused = writes.iter().find_map(|w| {
                let pin = table.read_only_overlapping(w.range)?;
                Some(read_only(&w.what, w.range, pin))
            });
            match refused {
                Some(message) => Err(Fault::Invalid(message)),
                None => start().map_err(Fault::Bridge).inspect(|tasks| {
                    for w in writes {
                        if let Some(i) = w.target_of {
                            let task = tasks.start + i;
                            table.add_own_write(w.range, Until::Task { batch, task });
                        }
                    }
                }),
            }
        };
        outcome.map_err(|f| f.into_py(py))
    }

    /// Records a blocking write to the engine's own segment into `range` (`what` names it)
    /// until the guard is dropped: `InvalidArgument` if it lies in a read-only pin. Take it
    /// after the call's own memory is held (a read-only source overlapping the target is then
    /// refused here, rather than waiting for this very write).
    pub(crate) fn own_write(
        &self,
        py: Python<'_>,
        range: Range,
        what: &str,
    ) -> PyResult<OwnWriteGuard<'_>> {
        self.not_forked(py)?;
        let outcome = {
            let mut table = self.lock();
            match table.read_only_overlapping(range) {
                Some(pin) => Err(read_only(what, range, pin)),
                None => {
                    let until = table.new_call();
                    table.add_own_write(range, until);
                    Ok(until)
                }
            }
        };
        match outcome {
            Ok(until) => Ok(OwnWriteGuard { pins: self, until }),
            Err(message) => Err(errors::invalid(py, &message)),
        }
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
                    let error = Fault::Bridge(error);
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
        // SAFETY: `range` is the union of the overlapping ranges of `mems` at `memory` (the
        // plan merged them), so each of its bytes lies in one of them: Python buffers held
        // exported (allocated, not resizable), engine buffers' mappings, the binding's own
        // memory of one call, or addresses their callers vouched for, valid for reads (and,
        // for a call's destinations, writes) while the call runs. The pin keeps clones of them
        // until it is unregistered (`release_locked`, `Drop for Pins`), and they are released
        // only after that, once `unregister` returned (no byte is touched then). A pin made
        // from a raw address is never shared (`Pin::shared`): only its own call uses it, and
        // that call drops its guard, which unregisters the pin, before it returns, so the range
        // stays registered only while its caller vouches for it. The engine copies through raw
        // pointers only, and no Rust reference to the range exists (`Memory` forms none).
        //
        // The engine's contract asks for memory valid for writes too, and a read-only buffer's
        // is not (a `bytes`, a PROT_READ mapping): it must never be written, and the pin says
        // so (`writable`). The engine writes local-only memory in two ways only, and neither
        // reaches it: (a) as the local side of its read (a transfer, a store read): this
        // binding makes none into a read-only pin (`plan` refuses or waits; `Pins::submit`
        // checks a batch under this lock, and the engine leases its local ranges under it);
        // (b) as the target of a write to its own segment: checked against the pins first
        // (`own_write`, `submit`) and recorded until over, and `plan` makes no read-only pin
        // over a recorded target. No peer reaches local-only memory. And read-only memory is
        // never that of a writable pin: a writable Python buffer is writable memory, and a raw
        // address's caller vouched that it may be written.
        let registered = unsafe {
            self.engine.register(
                range.start as *mut u8,
                range.len() as usize,
                Location::default(),
            )
        };
        registered?;
        let memory: Vec<Memory> = memory.into_iter().map(|i| mems[i].clone()).collect();
        let shared = memory.iter().all(Memory::keeps_itself);
        let writable = memory.iter().all(|m| m.writable);
        let id = table.new_id();
        let kind = Kind::Call { memory, shared };
        let pin = Pin {
            end: range.end,
            id,
            users: 1,
            writable,
            kind,
        };
        table.pins.insert(range.start, pin);
        Ok((range.start, id))
    }

    /// Registers `mem` until [`Pins::unregister`] (a user pin), waiting first for call pins it
    /// overlaps to go; `remote` as the engine takes it (local-only for the store's zero-copy
    /// calls). Read-only memory is registered read-only (never a destination), and never
    /// exported for peers' writes (`InvalidArgument`). Returns its address.
    pub(crate) fn register(
        &self,
        py: Python<'_>,
        mem: Memory,
        remote: RemoteAccess,
    ) -> PyResult<u64> {
        self.not_forked(py)?;
        if remote.write && !mem.writable {
            let message = format!(
                "{} is read-only: it cannot be exported for peers' writes (remote \"w\" or \
                 \"rw\"); register a writable buffer, or with remote=\"r\" or None",
                mem.what
            );
            return Err(errors::invalid(py, &message));
        }
        let r = Range::of(&mem);
        let writable = mem.writable;
        let mine = |start, id| self.mine(start, id);
        let mut mem = Some(mem);
        self.in_turn(py, |table, ticket| {
            match plan_user(table, r, writable, ticket, &mine) {
                Err(r) => Turn::Done(Err(Failure::overlapped(r))),
                Ok(false) => Turn::Wait(vec![r]),
                Ok(true) => {
                    // Taken by the attempt that registers, which is the last one.
                    let Some(kept) = mem.take() else {
                        return Turn::Done(Err(Failure::overlapped(r)));
                    };
                    // SAFETY: as in `register_call`, with `kept` (a Python buffer's export, an
                    // engine buffer's mapping, or an address the caller vouched for until it
                    // unregisters) kept in the table until `unregister` (or `Drop for Pins`)
                    // unregisters the range first; read-only memory is never written, as there
                    // (`plan_user` waits for recorded writes to the engine's own segment). An
                    // exported range may be read by peers at any time, and written only when
                    // `remote` says so, which needs writable memory (above): peers and this
                    // engine copy through raw pointers only, which the caller accepted by
                    // asking for `remote` rights.
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
                        let error = Fault::Bridge(error);
                        return Turn::Done(Err(Failure { error, released }));
                    }
                    let id = table.new_id();
                    let pin = Pin {
                        end: r.end,
                        id,
                        users: 0,
                        writable,
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
            match table.pins.get(&addr).is_some_and(Pin::is_user) {
                false => Err(yuebing_engine::Error::AddressNotRegistered { addr }),
                true => {
                    let pin = table.pins.remove(&addr);
                    // An error means the engine no longer has the range (it stopped): nothing
                    // to undo.
                    let _ = self.engine.unregister(addr);
                    table.generation += 1;
                    self.changed.notify_all();
                    Ok(pin)
                }
            }
        };
        // The exception is made, and the buffer's export released, outside the table's lock.
        match released {
            Ok(pin) => {
                drop(pin);
                Ok(())
            }
            Err(e) => Err(errors::engine(py, e)),
        }
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
