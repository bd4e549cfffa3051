//! Store space the master granted this client ahead of its puts (see
//! [`grant`](crate::master::grant)): a small put takes its place in a grant here, writes its
//! bytes at once and needs one master round trip, its publication, instead of two (placement,
//! then publication).
//!
//! Places are handed out front to back; a grant with too little left for the largest put it
//! takes is retired and ended at the master once the puts writing into it are done. When the
//! master no longer knows this client (its heartbeat hears `NeedRemount`) every grant is
//! retired: a master that restarted without its state may place other objects there once its
//! first lease TTL is over, so no new write may start in them.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Client, Inner};
use crate::error::Error;
use crate::master::{GrantDesc, GrantId, PutConfig};

/// How long no grant is asked for after the master refused one.
const QUIET: Duration = Duration::from_secs(1);

/// A grant with less time than this left to write into it takes no more puts.
const MIN_TIME_LEFT: Duration = Duration::from_secs(1);

/// This client's grants.
pub(crate) struct Grants {
    /// Bytes asked for per grant; 0 turns grants off.
    size: u64,
    state: Mutex<State>,
    /// One request for a grant at a time: puts that find no room wait for it.
    asking: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    open: Vec<Open>,
    /// Grants that take no more puts, ended once their writers are done.
    retired: Vec<Open>,
    /// No grant is asked for before this.
    quiet_until: Option<Instant>,
    /// Counts `retire_all`: a grant asked for before one is not used after it.
    generation: u64,
    /// Grants whose end the master did not confirm (unreachable, say): ended again at the
    /// next heartbeat the master answers, or their space would stay granted for as long as
    /// this client lives.
    owed: Vec<(GrantId, bool)>,
}

struct Open {
    desc: GrantDesc,
    /// Bytes handed out, from its start.
    used: u64,
    /// Puts writing into it now.
    writers: usize,
    /// A write into it failed or was abandoned: its bytes may still land.
    dirty: bool,
    /// Writes into it must end by then (the master's `valid_ms` from the request).
    valid_until: Instant,
}

impl Open {
    fn left(&self) -> u64 {
        self.desc.len - self.used
    }

    /// Bytes a put of `len` takes in it (rounded up to the master's alignment).
    fn footprint(&self, len: u64) -> u64 {
        len.div_ceil(self.desc.alignment) * self.desc.alignment
    }
}

/// A place in a grant for one put, held while the put writes there.
pub(crate) struct Place {
    pub(crate) grant: GrantId,
    pub(crate) node: String,
    pub(crate) addr: u64,
    /// The write must end by then.
    pub(crate) until: Instant,
}

impl Grants {
    /// Grants of `size` bytes each (0: none).
    pub(crate) fn new(size: u64) -> Self {
        Grants {
            size,
            state: Mutex::new(State::default()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// The largest put placed in a grant: a sixteenth of one, so that at most that much of a
    /// grant is left unused when it retires.
    fn put_max(&self) -> u64 {
        self.size / 16
    }

    /// Whether a put of `len` bytes with `cfg` goes through a grant: grants are on, it is
    /// small, and it wants one replica with no preferred node.
    pub(crate) fn takes(&self, len: u64, cfg: &PutConfig) -> bool {
        self.size > 0 && len <= self.put_max() && cfg.replica_num == 1 && cfg.preferred.is_empty()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held left the state as it was between two whole steps.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for `len` bytes in an open grant, if one has room and time left.
    fn take(&self, len: u64) -> Option<Place> {
        let mut st = self.state();
        let soon = Instant::now() + MIN_TIME_LEFT;
        let open = st
            .open
            .iter_mut()
            .find(|g| g.footprint(len) <= g.left() && g.valid_until > soon)?;
        let footprint = open.footprint(len);
        let addr = open.desc.addr + open.used;
        open.used += footprint;
        open.writers += 1;
        Some(Place {
            grant: open.desc.id,
            node: open.desc.node.clone(),
            addr,
            until: open.valid_until,
        })
    }

    /// The put at `place` is done with it (`clean`: its write ended, published or not): the
    /// grant, when it is retired and this was its last writer (end it at the master now).
    fn done(&self, place: &Place, clean: bool) -> Option<(GrantId, bool)> {
        let mut st = self.state();
        if let Some(g) = st.open.iter_mut().find(|g| g.desc.id == place.grant) {
            g.writers = g.writers.saturating_sub(1);
            g.dirty |= !clean;
            return None;
        }
        let i = st.retired.iter().position(|g| g.desc.id == place.grant)?;
        let g = &mut st.retired[i];
        g.writers = g.writers.saturating_sub(1);
        g.dirty |= !clean;
        (g.writers == 0).then(|| {
            let g = st.retired.swap_remove(i);
            (g.desc.id, g.dirty)
        })
    }

    /// Retires the open grants with less room or time left than the largest put needs (or
    /// all of them); returns those with no writer, to end at the master now.
    fn retire(&self, all: bool) -> Vec<(GrantId, bool)> {
        let put_max = self.put_max();
        let soon = Instant::now() + MIN_TIME_LEFT;
        let mut st = self.state();
        let (going, staying): (Vec<Open>, Vec<Open>) = std::mem::take(&mut st.open)
            .into_iter()
            .partition(|g| all || g.left() < put_max || g.valid_until <= soon);
        st.open = staying;
        let mut idle = Vec::new();
        for g in going {
            match g.writers {
                0 => idle.push((g.desc.id, g.dirty)),
                _ => st.retired.push(g),
            }
        }
        idle
    }

    /// No put takes a place in `grant` any more: the master says it ended (its store space
    /// went, or it does not know it), or a write into it failed (its node may be gone). It is
    /// ended at the master once its last writer is done (one the master does not know ends
    /// `Ok`).
    pub(crate) fn forget(&self, grant: GrantId) {
        let mut st = self.state();
        if let Some(i) = st.open.iter().position(|g| g.desc.id == grant) {
            let g = st.open.swap_remove(i);
            if g.writers > 0 {
                st.retired.push(g);
            }
        }
    }

    /// Every grant, retired now (a master that may not know this client any more: see the
    /// module docs); returns those with no writer, to end at the master.
    pub(crate) fn retire_all(&self) -> Vec<(GrantId, bool)> {
        self.state().generation += 1;
        self.retire(true)
    }

    /// Every grant this client holds (open, retired or owed an end, and whether a write into
    /// it failed or may still run), for its last words to the master.
    pub(crate) fn ids(&self) -> Vec<(GrantId, bool)> {
        let st = self.state();
        st.open
            .iter()
            .chain(&st.retired)
            .map(|g| (g.desc.id, g.dirty || g.writers > 0))
            .chain(st.owed.iter().copied())
            .collect()
    }

    /// The grants whose end is owed to the master, taken to end them again.
    pub(crate) fn take_owed(&self) -> Vec<(GrantId, bool)> {
        std::mem::take(&mut self.state().owed)
    }
}

/// Ends `ids` at the master, in the background (a grant the master does not know is `Ok`);
/// a dirty one's space is held there until the write release time. An end the master does
/// not confirm is owed, and made again at the next heartbeat it answers.
pub(crate) fn end(inner: &Arc<Inner>, ids: Vec<(GrantId, bool)>) {
    if ids.is_empty() {
        return;
    }
    let (masters, client) = (inner.masters.clone(), Arc::downgrade(inner));
    inner.engine.handle().spawn(async move {
        let until = Instant::now() + Duration::from_secs(5);
        for (id, dirty) in ids {
            let ended =
                masters.call(until, |m| async move { m.until(until).grant_end(id, dirty).await });
            if let Err(e) = ended.await {
                tracing::debug!(grant = %id, error = %e, "could not end a grant; ending it again at the next heartbeat");
                // A client that is gone ended its grants as it dropped (or its lease ends them).
                if let Some(client) = client.upgrade() {
                    client.grants.state().owed.push((id, dirty));
                }
            }
        }
    });
}

/// A place held by a put; dropping it hands the place back (ending a retired grant whose
/// last writer it was). Unless [`Held::written`] was called, the write is taken as failed or
/// abandoned, and the grant is ended dirty.
pub(crate) struct Held<'a> {
    client: &'a Client,
    pub(crate) place: Place,
    written: bool,
}

impl Held<'_> {
    /// The write into the place ended (whatever its publication's fate).
    pub(crate) fn written(&mut self) {
        self.written = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let inner = &self.client.inner;
        if let Some(id) = inner.grants.done(&self.place, self.written) {
            end(inner, vec![id]);
        }
    }
}

impl Client {
    /// A place for a put of `len` bytes in one of this client's grants, asking the master
    /// for a grant when none has room: `None` when there is none to be had (the master
    /// refused; the put goes the two-round-trip way).
    pub(crate) async fn grant_place(&self, len: u64, until: Instant) -> Option<Held<'_>> {
        let grants = &self.inner.grants;
        if let Some(place) = grants.take(len) {
            return Some(Held {
                client: self,
                place,
                written: false,
            });
        }
        let _asking = tokio::time::timeout_at(until.into(), grants.asking.lock())
            .await
            .ok()?;
        // Another put may have got a grant meanwhile.
        if let Some(place) = grants.take(len) {
            return Some(Held {
                client: self,
                place,
                written: false,
            });
        }
        if grants
            .state()
            .quiet_until
            .is_some_and(|t| Instant::now() < t)
        {
            return None;
        }
        let idle = grants.retire(false);
        end(&self.inner, idle);
        let size = grants.size;
        let (sent, generation) = (Instant::now(), grants.state().generation);
        let asked = self
            .master(
                until,
                |m, _| async move { m.grant(size, Vec::<String>::new()).await },
                "",
            )
            .await;
        match asked {
            Ok(desc) => {
                let mut st = grants.state();
                if st.generation != generation {
                    // Asked of a master this client may no longer be known to: not used.
                    drop(st);
                    end(&self.inner, vec![(desc.id, false)]);
                    return None;
                }
                let valid_until = sent + Duration::from_millis(desc.valid_ms);
                st.open.push(Open {
                    desc,
                    used: 0,
                    writers: 0,
                    dirty: false,
                    valid_until,
                });
                drop(st);
                grants.take(len).map(|place| Held {
                    client: self,
                    place,
                    written: false,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, "no grant; puts place their space at the master");
                grants.state().quiet_until = Some(Instant::now() + QUIET);
                None
            }
        }
    }

    /// The master refused a publication in `held`'s grant as `InvalidWrite`: the grant is
    /// gone there (its store space went, or the master restarted without it).
    pub(crate) fn grant_gone(&self, held: &Held<'_>, e: &Error) {
        tracing::debug!(grant = %held.place.grant, error = %e, "grant gone at the master");
        self.inner.grants.forget(held.place.grant);
    }
}
