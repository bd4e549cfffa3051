//! The pure core of `pins`: the table of an engine's pins (the registrations made for calls and
//! by `register`), whether each may be written, the writes of the engine to its own segment that
//! may still land, the queue of waiters, and the decision of what a call (or a registration)
//! takes now: [`plan`] and [`plan_user`], from the table and nothing else. `pins` drives it
//! under its lock: it registers with the engine and sleeps where the plan says.

use std::collections::BTreeMap;

use crate::memory::{Access, Memory};

/// `[start, end)`, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Range {
    pub(crate) fn of(mem: &Memory) -> Range {
        // `Memory` checked that `addr + len` does not overflow (a Python buffer cannot).
        Range {
            start: mem.addr,
            end: mem.addr.saturating_add(mem.len),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.end - self.start
    }

    pub(crate) fn overlaps(&self, other: Range) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// The pins of one engine and the waiters for them.
#[derive(Default)]
pub(crate) struct Table {
    /// Pins by first byte; they never overlap (the engine refuses overlapping registrations).
    pub(crate) pins: BTreeMap<u64, Pin>,
    next_id: u64,
    /// The ranges of the holds and registrations waiting now, by ticket: oldest first.
    pub(crate) waiting: BTreeMap<u64, Vec<Range>>,
    pub(crate) next_ticket: u64,
    /// Counts the changes a waiter waits for (a pin gone, a waiter gone).
    pub(crate) generation: u64,
    /// Writes of the engine to its own segment whose target it may not have leased yet: no
    /// read-only pin is made over their targets until they are gone (see [`OwnWrite`]).
    pub(crate) own_writes: Vec<OwnWrite>,
    next_call: u64,
}

/// A write of the engine to its own segment (its `local` transport copies into the target
/// range) that may still land. The engine leases the target only when the transfer starts,
/// which may be after the binding checked that no read-only pin lies there: until the write is
/// over, read-only memory is not registered over `range`, so what the engine then finds there
/// is memory it may write.
pub(crate) struct OwnWrite {
    pub(crate) range: Range,
    pub(crate) until: Until,
}

/// Until when an [`OwnWrite`] may land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// A blocking call's: until the call returns (its guard removes it).
    Call(u64),
    /// A batch's task: until it is final (or the batch is gone).
    Task { batch: u64, task: usize },
}

/// One registration, from its key in the table (its first byte) to `end`.
pub(crate) struct Pin {
    pub(crate) end: u64,
    /// Tells this pin from a later one at the same address.
    pub(crate) id: u64,
    /// Calls using the pin now.
    pub(crate) users: usize,
    /// Whether its memory may be written (see [`Memory::writable`]): a read-only pin is never
    /// a destination, and is never exported for peers' writes.
    pub(crate) writable: bool,
    pub(crate) kind: Kind,
}

/// Who made a pin, and the memory it keeps.
pub(crate) enum Kind {
    /// Made by `register`, kept until `unregister`, with the caller's memory.
    User(Memory),
    /// Made for calls: the memory it was made from (together, every byte of the pin), kept
    /// until the pin goes; `shared` when that memory keeps itself valid (no raw address).
    Call { memory: Vec<Memory>, shared: bool },
}

impl Pin {
    fn range(&self, start: u64) -> Range {
        Range {
            start,
            end: self.end,
        }
    }

    pub(crate) fn is_user(&self) -> bool {
        matches!(self.kind, Kind::User(_))
    }

    /// Whether a later call may share it (see the module docs).
    fn shared(&self) -> bool {
        match self.kind {
            Kind::User(_) => true,
            Kind::Call { shared, .. } => shared,
        }
    }

    pub(crate) fn into_memory(self) -> Vec<Memory> {
        match self.kind {
            Kind::User(m) => vec![m],
            Kind::Call { memory, .. } => memory,
        }
    }
}

impl Table {
    /// The pin holding all of `r`.
    fn containing(&self, r: Range) -> Option<(u64, &Pin)> {
        let (&start, pin) = self.pins.range(..=r.start).next_back()?;
        (pin.end >= r.end).then_some((start, pin))
    }

    /// The pins that overlap `r`, in address order.
    fn overlapping(&self, r: Range) -> impl Iterator<Item = (u64, &Pin)> {
        let before = self
            .pins
            .range(..r.start)
            .next_back()
            .filter(|(_, p)| p.end > r.start);
        before
            .into_iter()
            .chain(self.pins.range(r.start..r.end))
            .map(|(&start, p)| (start, p))
    }

    /// Whether a waiter that came before `ticket` (any waiter, for none) waits for a range
    /// that overlaps `r`.
    fn earlier_waiter(&self, r: Range, ticket: Option<u64>) -> bool {
        let earlier = match ticket {
            Some(t) => self.waiting.range(..t),
            None => self.waiting.range(..),
        };
        earlier.flat_map(|(_, rs)| rs).any(|w| w.overlaps(r))
    }

    pub(crate) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A read-only pin that overlaps `r`, as `(first byte, end)`.
    pub(crate) fn read_only_overlapping(&self, r: Range) -> Option<Range> {
        self.overlapping(r)
            .find(|(_, p)| !p.writable)
            .map(|(start, p)| p.range(start))
    }

    /// Whether a write of the engine to its own segment that may still land targets `r`.
    fn own_write_overlaps(&self, r: Range) -> bool {
        self.own_writes.iter().any(|w| w.range.overlaps(r))
    }

    /// Records a write to the engine's own segment until it is over (see [`OwnWrite`]).
    pub(crate) fn add_own_write(&mut self, range: Range, until: Until) {
        self.own_writes.push(OwnWrite { range, until });
    }

    /// A new [`Until::Call`].
    pub(crate) fn new_call(&mut self) -> Until {
        self.next_call += 1;
        Until::Call(self.next_call)
    }

    /// Forgets the own-segment writes that are over (`over` says which); a waiter may go on.
    pub(crate) fn end_own_writes(&mut self, over: &dyn Fn(Until) -> bool) {
        let before = self.own_writes.len();
        self.own_writes.retain(|w| !over(w.until));
        if self.own_writes.len() != before {
            self.generation += 1;
        }
    }
}

/// What holding a call's ranges takes now (decided by [`plan`]).
pub(crate) enum Plan {
    /// These steps, one after the other.
    Go(Vec<Step>),
    /// Some range must wait until pins go; the call's ranges to register are these.
    Wait(Vec<Range>),
    /// Never, for this reason.
    Refuse(Refusal),
}

/// Why a call is refused (decided by [`plan`] and [`plan_user`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `AddressOverlapped`: this range overlaps a user pin, or a pin this thread holds.
    Overlapped(Range),
    /// `InvalidArgument`: the call would write into the call's memory at this index, which
    /// lies in a read-only user pin.
    ReadOnly(usize),
}

/// One step of a [`Plan::Go`].
pub(crate) enum Step {
    /// Share the pin that starts here.
    Join(u64),
    /// Register `range`, made of the call's memories at these indices.
    Register { range: Range, memory: Vec<usize> },
}

/// How to hold `mems` for a call that accesses them so (`Access::Write`: it writes them): the
/// pure decision, from the table, the call's place among the waiters (`ticket`), which pins this
/// thread holds already (`mine`) and what the engine registered itself (`engine_has`, memory it
/// may write).
pub(crate) fn plan(
    table: &Table,
    mems: &[Memory],
    access: Access,
    ticket: Option<u64>,
    mine: &dyn Fn(u64, u64) -> bool,
    engine_has: &dyn Fn(Range) -> bool,
) -> Plan {
    let writes = access == Access::Write;
    let mut steps = Vec::new();
    let mut need: Vec<(Range, usize)> = Vec::new();
    for (i, mem) in mems.iter().enumerate() {
        let r = Range::of(mem);
        match table.containing(r) {
            Some((_, pin)) if pin.is_user() && writes && !pin.writable => {
                return Plan::Refuse(Refusal::ReadOnly(i))
            }
            Some((start, pin)) if pin.is_user() => steps.push(Step::Join(start)),
            Some(_) => need.push((r, i)),
            None if table.overlapping(r).next().is_none() && engine_has(r) => {}
            None => need.push((r, i)),
        }
    }
    // The call's ranges that overlap are merged: one pin for them. Adjacent ones are not: the
    // engine registers them side by side, and apart each may share a pin of its own.
    need.sort_by_key(|(r, _)| r.start);
    let mut unions: Vec<(Range, Vec<usize>)> = Vec::new();
    for (r, i) in need {
        match unions.last_mut() {
            Some((u, members)) if r.start < u.end => {
                u.end = u.end.max(r.end);
                members.push(i);
            }
            _ => unions.push((r, vec![i])),
        }
    }
    let mut must_wait = false;
    for (u, members) in &unions {
        if let Some((start, pin)) = table.containing(*u) {
            // A call pin here (a user pin holding the union holds each of its ranges: above).
            let its_turn = pin.is_user() || !table.earlier_waiter(pin.range(start), ticket);
            let mine = mine(start, pin.id);
            if writes && !pin.writable {
                // A call reading a read-only view of this memory: not to be written through,
                // so the writer waits until it is gone (or, its own thread's, is refused).
                match mine {
                    true => return Plan::Refuse(Refusal::Overlapped(*u)),
                    false => must_wait = true,
                }
            } else if mine || (pin.shared() && its_turn) {
                steps.push(Step::Join(start));
            } else {
                must_wait = true;
            }
            continue;
        }
        let mut overlapping = table.overlapping(*u).peekable();
        let read_only = members.iter().any(|&i| !mems[i].writable);
        if overlapping.peek().is_some() {
            if overlapping.any(|(start, p)| p.is_user() || mine(start, p.id)) {
                return Plan::Refuse(Refusal::Overlapped(*u));
            }
            must_wait = true;
        } else if table.earlier_waiter(*u, ticket) || (read_only && table.own_write_overlaps(*u)) {
            must_wait = true;
        } else {
            steps.push(Step::Register {
                range: *u,
                memory: members.clone(),
            });
        }
    }
    match must_wait {
        true => Plan::Wait(unions.into_iter().map(|(u, _)| u).collect()),
        false => Plan::Go(steps),
    }
}

/// Whether `register` can take `r` (of memory that may be written, or not) now (`Ok(false)`:
/// it waits for call pins, earlier waiters, or, read-only, for the engine's writes to its own
/// segment there); `Err(r)` if never: `r` overlaps a user pin, or a pin this thread holds.
pub(crate) fn plan_user(
    table: &Table,
    r: Range,
    writable: bool,
    ticket: Option<u64>,
    mine: &dyn Fn(u64, u64) -> bool,
) -> Result<bool, Range> {
    let mut overlapping = table.overlapping(r).peekable();
    if overlapping.peek().is_some() {
        if overlapping.any(|(start, p)| p.is_user() || mine(start, p.id)) {
            return Err(r);
        }
        return Ok(false);
    }
    if !writable && table.own_write_overlaps(r) {
        return Ok(false);
    }
    Ok(!table.earlier_waiter(r, ticket))
}
