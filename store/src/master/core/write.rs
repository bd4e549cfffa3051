//! The two-phase write: start / end / revoke (a put or an upsert: [`Write`]), one key or a
//! batch.

use super::Master;
use crate::error::{Error, Result};
use crate::master::log::Record;
use crate::master::object::Replicas;
use crate::master::types::{ClientId, Millis, PutConfig, ReplicaDesc, Write};

impl Master {
    /// Starts a write of `key`: places `min(replica_num, nodes with room)` replicas on
    /// distinct nodes and returns where to write them. The key is taken until `put_end` or
    /// `put_revoke`.
    ///
    /// [`Write::Put`] takes a new key only. [`Write::Upsert`] also replaces a completed object:
    /// one of the same size with no read lease is overwritten in place (unreadable until the
    /// end); otherwise new space is allocated and the old replicas stay readable until the end
    /// (then held until their lease ends).
    ///
    /// Errors: `InvalidParams` (empty key, size 0, replica_num 0), `ObjectAlreadyExists` (a put
    /// of a completed key, or a put while a write younger than the discard timeout runs — an
    /// older one is pre-empted, its space held until its release time), `WriteInProgress` (an
    /// upsert while such a younger write runs), `NoAvailableHandle` (no room even after
    /// evicting).
    pub fn put_start(
        &mut self,
        client: ClientId,
        now: Millis,
        key: &str,
        size: u64,
        cfg: &PutConfig,
        write: Write,
    ) -> Result<Vec<ReplicaDesc>> {
        let now = self.tick(now);
        self.check_write(key, size, cfg)?;
        let h = self.objects.hash(key);
        let (write, leaving) = self.admit(h, key, write)?;
        self.preempt_stale(h, key, now, write)?;
        if let (Write::Upsert, Some(o)) = (write, self.objects.get_h(h, key)) {
            // In place only where no reader can be transferring: no lease known, and not
            // within a lease TTL of a restart or promotion (leases from before are unknown);
            // never into a leaving object's ranges.
            let copied = self.tasks.running(key);
            if o.size == size && !o.leased(now) && now >= self.no_reuse_until && !leaving && !copied
            {
                let descs = self.describe_all(&o.replicas, size);
                let in_place = (Replicas::new(), true, true);
                self.start(client, now, (h, key), size, in_place, cfg);
                return Ok(descs);
            }
        }
        let replicas = self.allocate(now, size, cfg)?;
        // After allocating: an eviction inside it may have taken the old object.
        let replaces = self.objects.contains_key_h(h, key);
        let descs = self.describe_all(&replicas, size);
        self.start(
            client,
            now,
            (h, key),
            size,
            (replicas, false, replaces),
            cfg,
        );
        Ok(descs)
    }

    /// Ends the caller's put (or upsert) of `key`: the object becomes readable and its access
    /// time is stamped. A repeated end is `Ok`.
    ///
    /// Errors: `IllegalClient` (another client's write), `ObjectNotFound`.
    pub fn put_end(&mut self, client: ClientId, now: Millis, key: &str) -> Result<()> {
        let now = self.tick(now);
        let h = self.objects.hash(key);
        match self.writes.get_h(h, key) {
            Some(w) if w.client != client => Err(Error::IllegalClient { key: key.into() }),
            Some(w) => {
                let old_until = match w.replaces {
                    true => {
                        self.reuse_after(self.objects.get_h(h, key).map_or(0, |o| o.lease_until))
                    }
                    false => 0,
                };
                let record = Record::WriteEnd {
                    key: key.into(),
                    old_until,
                };
                self.commit_hinted(now, record, Some(h));
                Ok(())
            }
            None if self.objects.contains_key_h(h, key) => Ok(()),
            None => Err(Error::ObjectNotFound { key: key.into() }),
        }
    }

    /// Revokes the caller's put (or upsert) of `key`. Its space stays out of use until the
    /// write's release time: a writer revokes after a failed transfer, and bytes of that
    /// transfer may still land (a stalled node resumes and applies what was in its socket), so
    /// reusing the space at once could corrupt the next object placed there. Revoking an
    /// in-place upsert removes the object, whose bytes may be half overwritten.
    ///
    /// Errors: `IllegalClient`, `InvalidWrite` (the object is completed), `ObjectNotFound`.
    pub fn put_revoke(&mut self, client: ClientId, now: Millis, key: &str) -> Result<()> {
        let now = self.tick(now);
        match self.writes.get(key) {
            Some(w) if w.client != client => Err(Error::IllegalClient { key: key.into() }),
            Some(_) => {
                self.revoke_held(now, key);
                Ok(())
            }
            None if self.objects.contains_key(key) => Err(Error::InvalidWrite {
                key: key.into(),
                reason: "the object is completed".into(),
            }),
            None => Err(Error::ObjectNotFound { key: key.into() }),
        }
    }

    /// `put_start` for each `(key, size)`, in order, one result each.
    pub fn batch_put_start(
        &mut self,
        client: ClientId,
        now: Millis,
        items: &[(String, u64)],
        cfg: &PutConfig,
        write: Write,
    ) -> Vec<Result<Vec<ReplicaDesc>>> {
        items
            .iter()
            .map(|(k, s)| self.put_start(client, now, k, *s, cfg, write))
            .collect()
    }

    /// `put_end` for each key, in order.
    pub fn batch_put_end(
        &mut self,
        client: ClientId,
        now: Millis,
        keys: &[String],
    ) -> Vec<Result<()>> {
        keys.iter().map(|k| self.put_end(client, now, k)).collect()
    }

    /// `put_revoke` for each key, in order.
    pub fn batch_put_revoke(
        &mut self,
        client: ClientId,
        now: Millis,
        keys: &[String],
    ) -> Vec<Result<()>> {
        keys.iter()
            .map(|k| self.put_revoke(client, now, k))
            .collect()
    }

    pub(crate) fn check_write(&self, key: &str, size: u64, cfg: &PutConfig) -> Result<()> {
        self.check_key(key)?;
        crate::args::size(size)?;
        crate::args::put_config(cfg)?;
        if self.space.checked_align_up(size).is_none() {
            return Err(Error::params(format!("size {size} is too large")));
        }
        Ok(())
    }

    /// The write `key` gets, and whether its object is leaving. An object whose every replica
    /// is in a gracefully unmounted range is leaving: it vanishes at the grace's end, and the
    /// node that closed may have freed its memory already. A put replaces it as an upsert
    /// does, into new space, instead of answering that it exists. A put of another existing
    /// key is `ObjectAlreadyExists`.
    pub(crate) fn admit(&self, h: u64, key: &str, write: Write) -> Result<(Write, bool)> {
        let leaving = self
            .objects
            .get_h(h, key)
            .is_some_and(|o| self.leaving(&o.replicas));
        let write = if leaving { Write::Upsert } else { write };
        if write == Write::Put && self.objects.contains_key_h(h, key) {
            return Err(Error::ObjectAlreadyExists { key: key.into() });
        }
        Ok((write, leaving))
    }

    /// A write of `key` younger than the discard timeout blocks a new one; an older one is
    /// pre-empted (revoked, its space held until its release time).
    pub(crate) fn preempt_stale(
        &mut self,
        h: u64,
        key: &str,
        now: Millis,
        write: Write,
    ) -> Result<()> {
        let Some(w) = self.writes.get_h(h, key) else {
            return Ok(());
        };
        if now < w.started.saturating_add(self.cfg.put_discard_ms) {
            return Err(match write {
                Write::Upsert => Error::WriteInProgress { key: key.into() },
                Write::Put => Error::ObjectAlreadyExists { key: key.into() },
            });
        }
        self.revoke_held(now, key);
        Ok(())
    }

    /// Revokes the write of `key`, holding its space until the write's release time (its
    /// writer, or bytes of its transfers, may still land there).
    pub(crate) fn revoke_held(&mut self, now: Millis, key: &str) {
        let key = key.into();
        self.commit(now, Record::WriteRevoke { key, hold: true });
    }

    /// Whether every one of `replicas` lies in a range that is gracefully unmounting (or gone).
    fn leaving(&self, replicas: &Replicas) -> bool {
        !replicas.is_empty()
            && replicas.iter().all(|r| {
                self.space
                    .get(r.mount)
                    .is_none_or(|m| m.draining_until.is_some())
            })
    }

    /// Places the replicas; when fewer nodes than wanted had room, evicts once and retries.
    fn allocate(&mut self, now: Millis, size: u64, cfg: &PutConfig) -> Result<Replicas> {
        let want = cfg.replica_num as usize;
        let strategy = self.cfg.placement;
        let mut placed = self
            .space
            .place(size, want, &cfg.preferred, strategy, &mut self.rng);
        // No eviction within a lease TTL of a restart or promotion: the victims' space would
        // only be held until the window ends, so the put could not use it anyway.
        if placed.len() < want
            && placed.len() < self.space.allocatable_node_count()
            && now >= self.no_reuse_until
        {
            for r in placed.drain(..) {
                self.space.free(r, size);
            }
            self.evict(now, self.space.align_up(size));
            placed = self
                .space
                .place(size, want, &cfg.preferred, strategy, &mut self.rng);
        }
        if placed.is_empty() {
            return Err(Error::NoAvailableHandle { size });
        }
        Ok(placed)
    }

    /// Commits a write's start; `(replicas, in_place, replaces)` describe where it goes.
    fn start(
        &mut self,
        client: ClientId,
        now: Millis,
        (hash, key): (u64, &str),
        size: u64,
        (replicas, in_place, replaces): (Replicas, bool, bool),
        cfg: &PutConfig,
    ) {
        let pin = cfg.pin();
        let record = Record::WriteStart {
            client,
            key: key.into(),
            size,
            replicas,
            in_place,
            replaces,
            pin,
        };
        self.commit_hinted(now, record, Some(hash));
        if !self.eviction_due && self.above_watermark() {
            self.eviction_due = true;
        }
    }

    pub(crate) fn describe_all(&self, replicas: &Replicas, size: u64) -> Vec<ReplicaDesc> {
        replicas
            .iter()
            .filter_map(|r| self.space.describe(r, size))
            .collect()
    }
}
