//! A pool's connections, open and being opened, and the load on each: which one a call takes,
//! and when the pool opens another (no I/O here; the pool connects and reports back).
//!
//! A call reserves its share of a connection's load the moment it chooses it, under the pool's
//! lock, whether the connection is open or still being opened. The choice:
//! - when a connection is open, the least-loaded open one (ties: the oldest), as on a warm
//!   pool. A call that finds one open below `threshold` never waits for a connect: if even
//!   the least-loaded one carries `threshold` calls or more and the pool is below its size,
//!   the call also starts one connect in the background (one at a time, so that concurrent
//!   calls start no more than needed; none for a while after a grow failed, so a server that
//!   caps its connections is not hammered). Calls never wait for such a grow; but while
//!   connects that calls chose to wait for are under way (a cold burst, or a warm-up), a call
//!   that finds every open one at `threshold` follows the cold rule below over all of them,
//!   open and being opened, so the first connection to open does not take the shares of
//!   the others;
//! - when none is open (a cold pool), the least-loaded connection being opened, but when there
//!   is none, or even that one carries `threshold` calls, and the pool is below its size, a
//!   new connection; the call waits for the one it chose.
//!
//! So the calls of a burst on a cold pool wait for a connection being opened until it has its
//! share, and the next ones open another: the burst ends spread over as many connections as
//! the same load on a warm pool, instead of piling onto the first to open. A waiter whose
//! connect failed falls back ([`Members::fallback`]) to an open connection, else to another
//! one being opened.
//!
//! The pool drives it: lock; [`Members::choose`]; unlock; start the returned [`Opener`] (if
//! any) on a task; when the connect ends, lock and [`Members::opened`]; unlock; `send` the
//! outcome to the waiters.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::Error;

/// What a pool keeps per open connection.
pub(crate) trait Entry {
    /// What a call gets to send on.
    type Handle: Clone;
    /// The connection, for a call.
    fn handle(&self) -> Self::Handle;
    /// The connection's id (its place in [`Members::loads`]).
    fn id(&self) -> u64;
    /// False once the connection has closed.
    fn is_alive(&self) -> bool;
    /// When the connection opened.
    fn opened(&self) -> Instant;
}

/// The load on one connection: calls that chose it and have not ended, and calls sent on it.
#[derive(Debug, Default)]
pub(crate) struct Load {
    in_flight: AtomicUsize,
    calls: AtomicU64,
}

impl Load {
    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn reserve(self: &Arc<Self>) -> Reserved {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Reserved(self.clone())
    }
}

/// One call's share of a connection's load, from its choice until the call ends.
#[derive(Debug)]
pub(crate) struct Reserved(Arc<Load>);

impl Reserved {
    /// The call is being sent.
    pub(crate) fn sent(&self) {
        self.0.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a connect ended, as the calls waiting for it see it (`None`: not yet).
pub(crate) type Outcome<H> = Option<Result<H, Error>>;

/// The chosen connection.
pub(crate) enum Taken<H> {
    /// Open: send on it.
    Open(H),
    /// Being opened: wait for the outcome.
    Opening(watch::Receiver<Outcome<H>>),
}

/// Where a call whose connect failed goes next, with its share reserved there (`None`: no
/// connection left to take).
pub(crate) type Fallback<H> = Option<(Taken<H>, Reserved)>;

/// A connect the pool must start: its key for [`Members::opened`], and where its outcome goes.
pub(crate) struct Opener<H> {
    pub(crate) key: u64,
    pub(crate) done: watch::Sender<Outcome<H>>,
}

/// What [`Members::choose`] chose.
pub(crate) struct Choice<H> {
    pub(crate) taken: Taken<H>,
    pub(crate) reserved: Reserved,
    /// A new connection the caller must start opening: the one chosen (`taken` is `Opening`),
    /// or a grow in the background (`taken` is `Open`).
    pub(crate) open: Option<Opener<H>>,
}

enum State<E: Entry> {
    Opening {
        key: u64,
        done: watch::Receiver<Outcome<E::Handle>>,
        /// Begun as a grow in the background: no call waits for it.
        grow: bool,
    },
    Open(E),
}

struct Member<E: Entry> {
    load: Arc<Load>,
    state: State<E>,
}

impl<E: Entry> Member<E> {
    fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Whether it opened at or after `t`; one still being opened will have.
    fn is_since(&self, t: Instant) -> bool {
        match &self.state {
            State::Opening { .. } => true,
            State::Open(e) => e.opened() >= t,
        }
    }

    fn take(&self) -> Taken<E::Handle> {
        match &self.state {
            State::Opening { done, .. } => Taken::Opening(done.clone()),
            State::Open(e) => Taken::Open(e.handle()),
        }
    }
}

/// A pool's connections, oldest first.
pub(crate) struct Members<E: Entry> {
    list: Vec<Member<E>>,
    next_key: u64,
    /// How long the pool does not grow in the background after a connect failed while others
    /// were open.
    grow_backoff: Duration,
    /// No grow in the background before this.
    no_grow_until: Option<Instant>,
}

impl<E: Entry> Default for Members<E> {
    fn default() -> Self {
        Members::new(Duration::ZERO)
    }
}

impl<E: Entry> Members<E> {
    /// Members whose grows in the background pause for `grow_backoff` after one failed.
    pub(crate) fn new(grow_backoff: Duration) -> Self {
        Members {
            list: Vec::new(),
            next_key: 0,
            grow_backoff,
            no_grow_until: None,
        }
    }

    /// Chooses a connection for a call at `now` and reserves its share there (see the module
    /// docs). With `fresh`, only connections opened at or after it (or still being opened) are
    /// taken, unless there is none and no room for a new one. Returns the entries it dropped
    /// as closed.
    pub(crate) fn choose(
        &mut self,
        threshold: usize,
        max: usize,
        fresh: Option<Instant>,
        now: Instant,
    ) -> (Choice<E::Handle>, Vec<E>) {
        let dropped = self.prune();
        let room = self.list.len() < max.max(1);
        let eligible = |m: &Member<E>| fresh.is_none_or(|t| m.is_since(t));
        let open = least_loaded(self.list.iter().filter(|m| m.is_open() && eligible(m)));
        let bursting = self
            .list
            .iter()
            .any(|m| matches!(m.state, State::Opening { grow: false, .. }));
        if let Some(best) = open {
            let full = best.load.in_flight() >= threshold;
            if !(full && bursting) {
                let mut choice = Choice {
                    taken: best.take(),
                    reserved: best.load.reserve(),
                    open: None,
                };
                if full && room && self.may_grow(now) {
                    choice.open = Some(self.push_opening(true).0);
                }
                return (choice, dropped);
            }
        }
        // Cold, or a cold burst whose first connections opened: the least-loaded connection,
        // open (if eligible) or being opened for calls to wait for (not a grow).
        let best = least_loaded(self.list.iter().filter(|m| match m.state {
            State::Open(_) => eligible(m),
            State::Opening { grow, .. } => !grow,
        }));
        let best = match best {
            Some(m) if !room || m.load.in_flight() < threshold => m,
            // No room and none being opened: every member is open, passed over as not fresh.
            None if !room => match least_loaded(self.list.iter()) {
                Some(m) => m,
                None => return (self.open_new(), dropped),
            },
            _ => return (self.open_new(), dropped),
        };
        let choice = Choice {
            taken: best.take(),
            reserved: best.load.reserve(),
            open: None,
        };
        (choice, dropped)
    }

    /// For a call whose connect failed, never opening one: the least-loaded open connection
    /// (fresh since `fresh`, if given), else the least-loaded one being opened (to wait for),
    /// else `None`.
    pub(crate) fn fallback(&mut self, fresh: Option<Instant>) -> (Fallback<E::Handle>, Vec<E>) {
        let dropped = self.prune();
        let open = self
            .list
            .iter()
            .filter(|m| m.is_open() && fresh.is_none_or(|t| m.is_since(t)));
        let chosen = least_loaded(open)
            .or_else(|| least_loaded(self.list.iter().filter(|m| !m.is_open())))
            .map(|m| (m.take(), m.load.reserve()));
        (chosen, dropped)
    }

    /// Whether a call may start a grow in the background at `now`: none is under way (one at
    /// a time), and none failed within the back-off.
    fn may_grow(&self, now: Instant) -> bool {
        self.no_grow_until.is_none_or(|t| now >= t) && self.list.iter().all(Member::is_open)
    }

    /// Begins opening connections, without reserving any, until `want` (at most `max`) are
    /// open or being opened; returns the connects to start, and the entries dropped as closed.
    pub(crate) fn fill(&mut self, want: usize, max: usize) -> (Vec<Opener<E::Handle>>, Vec<E>) {
        let dropped = self.prune();
        let mut openers = Vec::new();
        while self.list.len() < want.min(max.max(1)) {
            let (opener, _) = self.push_opening(false);
            openers.push(opener);
        }
        (openers, dropped)
    }

    /// Where the connects under way will report.
    pub(crate) fn opening(&self) -> Vec<watch::Receiver<Outcome<E::Handle>>> {
        self.list
            .iter()
            .filter_map(|m| match &m.state {
                State::Opening { done, .. } => Some(done.clone()),
                State::Open(_) => None,
            })
            .collect()
    }

    /// The connect `key` ended at `now`: its member is open now, or gone. A failure while
    /// other connections are open pauses growing in the background for the back-off. Gives
    /// `entry` back when its member is gone (it cannot be, as nothing else removes an opening
    /// member; the caller discards it).
    pub(crate) fn opened(
        &mut self,
        key: u64,
        outcome: Result<E, Error>,
        now: Instant,
    ) -> Option<E> {
        let at = self
            .list
            .iter()
            .position(|m| matches!(m.state, State::Opening { key: k, .. } if k == key));
        match (at, outcome) {
            (Some(i), Ok(entry)) => {
                self.list[i].state = State::Open(entry);
                None
            }
            (Some(i), Err(_)) => {
                self.list.remove(i);
                if self.list.iter().any(Member::is_open) {
                    self.no_grow_until = Some(now + self.grow_backoff);
                }
                None
            }
            (None, Ok(entry)) => Some(entry),
            (None, Err(_)) => None,
        }
    }

    /// Removes the open connection `id`; returns it.
    pub(crate) fn remove(&mut self, id: u64) -> Option<E> {
        let at = self
            .list
            .iter()
            .position(|m| matches!(&m.state, State::Open(e) if e.id() == id))?;
        match self.list.remove(at).state {
            State::Open(e) => Some(e),
            State::Opening { .. } => None,
        }
    }

    /// Live open connections, and the entries dropped as closed.
    pub(crate) fn live(&mut self) -> (usize, Vec<E>) {
        let dropped = self.prune();
        let n = self
            .list
            .iter()
            .filter(|m| matches!(m.state, State::Open(_)))
            .count();
        (n, dropped)
    }

    /// Open connections (alive or not yet pruned): their ids, whether alive, and the calls
    /// sent on each so far.
    pub(crate) fn loads(&self) -> impl Iterator<Item = (u64, bool, u64)> + '_ {
        self.list.iter().filter_map(|m| match &m.state {
            State::Open(e) => Some((e.id(), e.is_alive(), m.load.calls.load(Ordering::Relaxed))),
            State::Opening { .. } => None,
        })
    }

    fn open_new(&mut self) -> Choice<E::Handle> {
        let (opener, member) = self.push_opening(false);
        Choice {
            taken: member.take(),
            reserved: member.load.reserve(),
            open: Some(opener),
        }
    }

    /// Begins opening a connection (`grow`: in the background, for no call to wait for).
    fn push_opening(&mut self, grow: bool) -> (Opener<E::Handle>, &Member<E>) {
        self.next_key += 1;
        let key = self.next_key;
        let (tx, rx) = watch::channel(None);
        self.list.push(Member {
            load: Arc::default(),
            state: State::Opening {
                key,
                done: rx,
                grow,
            },
        });
        let opener = Opener { key, done: tx };
        // Just pushed, so there is a last element.
        let member = &self.list[self.list.len() - 1];
        (opener, member)
    }

    /// Drops closed connections (returned, so the pool can free their slots) and connects
    /// whose reporter is gone without a word (its task was dropped with its runtime).
    fn prune(&mut self) -> Vec<E> {
        let mut dropped = Vec::new();
        let mut i = 0;
        while i < self.list.len() {
            let keep = match &self.list[i].state {
                State::Open(e) => e.is_alive(),
                State::Opening { done, .. } => done.has_changed().is_ok(),
            };
            if keep {
                i += 1;
            } else if let State::Open(e) = self.list.remove(i).state {
                dropped.push(e);
            }
        }
        dropped
    }
}

/// The member with the fewest calls; ties go to the oldest, not round robin: calls one after
/// another then all use one socket (and one server task), still warm in the caches.
fn least_loaded<'a, E: Entry + 'a>(
    members: impl Iterator<Item = &'a Member<E>>,
) -> Option<&'a Member<E>> {
    let mut best: Option<&Member<E>> = None;
    for m in members {
        match best {
            Some(b) if b.load.in_flight() == 0 => break,
            Some(b) if m.load.in_flight() >= b.load.in_flight() => {}
            _ => best = Some(m),
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    /// A connection that is only an id, a time and a switch.
    struct Fake {
        id: u64,
        at: Instant,
        alive: Rc<Cell<bool>>,
    }

    impl Entry for Fake {
        type Handle = u64;
        fn handle(&self) -> u64 {
            self.id
        }
        fn id(&self) -> u64 {
            self.id
        }
        fn is_alive(&self) -> bool {
            self.alive.get()
        }
        fn opened(&self) -> Instant {
            self.at
        }
    }

    fn fake(id: u64, at: Instant) -> Fake {
        Fake {
            id,
            at,
            alive: Rc::new(Cell::new(true)),
        }
    }

    /// Chooses for `n` calls, the connects not ended yet; returns the connects begun (under
    /// way while they are kept), and keeps the calls' reservations in `held`.
    fn burst(
        m: &mut Members<Fake>,
        n: usize,
        threshold: usize,
        max: usize,
        held: &mut Vec<Reserved>,
    ) -> Vec<Opener<u64>> {
        let mut openers = Vec::new();
        for _ in 0..n {
            let (c, _) = m.choose(threshold, max, None, Instant::now());
            held.push(c.reserved);
            openers.extend(c.open);
        }
        openers
    }

    fn keys(openers: &[Opener<u64>]) -> Vec<u64> {
        openers.iter().map(|o| o.key).collect()
    }

    #[test]
    fn a_cold_burst_opens_a_connection_per_threshold_calls_up_to_the_size() {
        let mut m = Members::<Fake>::default();
        let mut held = Vec::new();
        let opened = burst(&mut m, 40, 4, 3, &mut held);
        assert_eq!(
            keys(&opened),
            [1, 2, 3],
            "one connect per 4 calls, three at most"
        );
        let loads: Vec<_> = m.list.iter().map(|m| m.load.in_flight()).collect();
        assert_eq!(loads, [14, 13, 13], "then spread as on a warm pool");
        drop(held);
        assert!(m.list.iter().all(|m| m.load.in_flight() == 0));
    }

    #[test]
    fn the_first_connection_to_open_mid_burst_does_not_take_the_others_shares() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::default();
        let mut held = Vec::new();
        let openers = burst(&mut m, 10, 4, 3, &mut held);
        assert_eq!(openers.len(), 3, "one connect per 4 calls, three at most");
        m.opened(openers[0].key, Ok(fake(1, t0)), t0);
        let grows = burst(&mut m, 30, 4, 3, &mut held);
        assert!(grows.is_empty(), "no grow: the pool is at its size");
        let loads: Vec<_> = m.list.iter().map(|m| m.load.in_flight()).collect();
        assert_eq!(loads, [14, 13, 13], "spread as if none had opened yet");
    }

    #[test]
    fn no_call_waits_for_a_grow_in_the_background() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::default();
        let key = m.fill(1, 3).0[0].key;
        m.opened(key, Ok(fake(1, t0)), t0);
        let (first, _) = m.choose(1, 3, None, t0);
        let (second, _) = m.choose(1, 3, None, t0);
        let _grow = second.open.expect("a grow in the background");
        // A call that passes over the open one as not fresh opens its own connection.
        let later = t0 + Duration::from_secs(1);
        let (third, _) = m.choose(1, 3, Some(later), t0);
        assert!(
            matches!(third.taken, Taken::Opening(_)) && third.open.is_some(),
            "not the grow's"
        );
        drop((first, second.reserved, third));
    }

    #[test]
    fn a_threshold_never_reached_keeps_one_connection() {
        let mut m = Members::<Fake>::default();
        let mut held = Vec::new();
        let opened = burst(&mut m, 100, usize::MAX, 4, &mut held);
        assert_eq!(keys(&opened), [1]);
        assert_eq!(m.list[0].load.in_flight(), 100);
    }

    #[test]
    fn a_failed_grow_leaves_and_its_callers_fall_back_to_an_open_one() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::new(Duration::from_secs(1));
        let (first, _) = m.choose(1, 2, None, t0);
        let key = first.open.map(|o| o.key).unwrap();
        assert!(m.opened(key, Ok(fake(7, t0)), t0).is_none());
        let (second, _) = m.choose(1, 2, None, t0);
        assert!(
            matches!(second.taken, Taken::Open(7)),
            "sent on the open one"
        );
        let opener = second.open.expect("and a grow in the background");
        assert!(m.opened(opener.key, Err(Error::ShuttingDown), t0).is_none());
        assert_eq!(m.live().0, 1);
        let (fallback, _) = m.fallback(None);
        assert!(matches!(fallback, Some((Taken::Open(7), _))));
        let later = t0 + Duration::from_secs(1);
        assert!(m.fallback(Some(later)).0.is_none(), "not fresh");
    }

    #[test]
    fn a_call_that_finds_an_open_connection_never_waits_for_a_connect() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::new(Duration::from_secs(1));
        let key = m.fill(1, 3).0[0].key;
        m.opened(key, Ok(fake(1, t0)), t0);
        let mut held = Vec::new();
        let mut grows = Vec::new();
        for _ in 0..5 {
            let (c, _) = m.choose(2, 3, None, t0);
            assert!(matches!(c.taken, Taken::Open(1)), "never waits");
            held.push(c.reserved);
            grows.extend(c.open);
        }
        assert_eq!(grows.len(), 1, "one grow at a time");
        let key = grows.pop().unwrap().key;
        m.opened(key, Err(Error::ShuttingDown), t0);
        let (c, _) = m.choose(2, 3, None, t0 + Duration::from_millis(500));
        assert!(
            c.open.is_none(),
            "no grow within the back-off of a failed one"
        );
        held.push(c.reserved);
        let (c, _) = m.choose(2, 3, None, t0 + Duration::from_secs(1));
        assert!(c.open.is_some(), "grows again after it");
    }

    #[test]
    fn a_waiter_whose_connect_failed_falls_back_to_another_being_opened() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::default();
        let (a, _) = m.choose(1, 2, None, t0);
        let (b, _) = m.choose(1, 2, None, t0);
        let (a, b) = (a.open.unwrap(), b.open.unwrap());
        m.opened(a.key, Err(Error::ShuttingDown), t0);
        let (fallback, _) = m.fallback(None);
        assert!(matches!(fallback, Some((Taken::Opening(_), _))));
        m.opened(b.key, Err(Error::ShuttingDown), t0);
        assert!(m.fallback(None).0.is_none(), "then none: the caller fails");
    }

    #[test]
    fn a_fresh_choice_passes_over_older_connections_while_there_is_room() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let mut m = Members::<Fake>::default();
        let key = m.fill(1, 2).0[0].key;
        m.opened(key, Ok(fake(1, t0)), t0);
        let (c, _) = m.choose(64, 2, Some(later), t0);
        assert!(c.open.is_some(), "the old one may be stale");
        let _connecting = c.open;
        let (c, _) = m.choose(64, 2, Some(later + Duration::from_secs(1)), t0);
        assert!(
            matches!(c.taken, Taken::Opening(_)) && c.open.is_none(),
            "one being opened opens after any stale one was noticed"
        );
        let (c, _) = m.choose(64, 2, None, t0);
        assert!(matches!(c.taken, Taken::Open(1)), "the least loaded");

        let mut full = Members::<Fake>::default();
        let key = full.fill(1, 1).0[0].key;
        full.opened(key, Ok(fake(1, t0)), t0);
        let (c, _) = full.choose(64, 1, Some(later), t0);
        assert!(
            matches!(c.taken, Taken::Open(1)) && c.open.is_none(),
            "no room: any connection"
        );
    }

    #[test]
    fn closed_connections_and_abandoned_connects_are_dropped() {
        let t0 = Instant::now();
        let mut m = Members::<Fake>::default();
        let (openers, _) = m.fill(2, 4);
        let dead = fake(1, t0);
        let alive = dead.alive.clone();
        m.opened(openers[0].key, Ok(dead), t0);
        drop(openers);
        assert_eq!(m.live().0, 1, "the abandoned connect left");
        alive.set(false);
        let (n, dropped) = m.live();
        assert_eq!((n, dropped.len()), (0, 1));
        assert!(m.list.is_empty());
        assert!(m.remove(1).is_none());
    }
}
