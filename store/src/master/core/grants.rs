//! Space granted to clients ahead of their puts (see [`grant`](crate::master::grant)): grant,
//! publish an object written into a grant, end a grant.

use super::Master;
use crate::error::{Error, Result};
use crate::master::grant::{GrantDesc, GrantId, GrantedPut};
use crate::master::log::Record;
use crate::master::object::Replicas;
use crate::master::space::Replica;
use crate::master::types::{ClientId, Millis, PutConfig, Write};

/// Replicas an object published from grants may have, at most.
const MAX_GRANTED_REPLICAS: usize = 8;

impl Master {
    /// Grants `client` `len` bytes (rounded up to the alignment) of one node's store space,
    /// counted as used from now on: the client places small objects in it itself and
    /// publishes each with [`Master::put_granted`]. `preferred` nodes are tried first, in
    /// order, then the placement strategy's. The grant ends with [`Master::grant_end`], or
    /// with the client's lease on the cluster.
    ///
    /// Errors: `InvalidParams` (length 0, or over `grant_max_bytes`), `IllegalClient` (a
    /// client the master does not know as live: it pings and mounts first; or one that left),
    /// `NoAvailableHandle` (the client's grants would pass `grant_max_bytes`, or no node has
    /// the room; grants never evict).
    pub fn grant(
        &mut self,
        client: ClientId,
        now: Millis,
        len: u64,
        preferred: &[String],
    ) -> Result<GrantDesc> {
        let now = self.tick(now);
        let max = self.cfg.grant_max_bytes;
        let rounded = self
            .space
            .checked_align_up(len)
            .filter(|&l| l > 0 && l <= max)
            .ok_or_else(|| Error::params(format!("grant of {len} bytes is not in 1..={max}")))?;
        self.check_live_client(client, now)?;
        let held = self.granted_bytes(client);
        if held.saturating_add(rounded) > max {
            return Err(Error::NoAvailableHandle { size: len });
        }
        let strategy = self.cfg.placement;
        let placed = self
            .space
            .place(rounded, 1, preferred, strategy, &mut self.rng);
        let Some(&replica) = placed.first() else {
            return Err(Error::NoAvailableHandle { size: len });
        };
        let grant = GrantId(self.next_grant);
        if self.grants.contains_key(&grant) {
            // Only after a grant numbered u64::MAX (ids are never reused).
            return Err(Error::Internal {
                reason: "grant ids are exhausted".into(),
            });
        }
        self.commit(
            now,
            Record::GrantStart {
                client,
                grant,
                replica,
                len: rounded,
            },
        );
        let desc = self
            .space
            .describe(&replica, rounded)
            .ok_or_else(|| Error::Internal {
                reason: "a grant's range vanished as it was made".into(),
            })?;
        Ok(GrantDesc {
            id: grant,
            node: desc.node,
            addr: desc.addr,
            len: rounded,
            alignment: self.cfg.alignment,
            valid_ms: self.cfg.put_discard_ms,
        })
    }

    /// Publishes the object `put` names (its key, of its size) that `client` wrote into its
    /// grants: one replica per `(grant, address)` of its parts, each at `address` in the
    /// grant's node's memory. The object is
    /// readable when this returns; what [`Master::put_start`] and [`Master::put_end`] do in
    /// two calls, with the space taken out of the grants instead of placed. Every replica must
    /// lie in what is left of a grant of this client (its size rounded up to the alignment,
    /// from an aligned address), on distinct nodes. An upsert never writes in place. Nothing
    /// changes on an error.
    ///
    /// Errors: those of `put_start` for the key, size and settings; `IllegalClient` (another
    /// client's grant); `InvalidWrite` (a grant that ended, a range outside what is left of
    /// its grant, two replicas on one node, a range that no longer takes replicas: its store
    /// space is being unmounted or waits for its node's remount).
    pub fn put_granted(
        &mut self,
        client: ClientId,
        now: Millis,
        put: &GrantedPut,
        cfg: &PutConfig,
        write: Write,
    ) -> Result<()> {
        let (key, size, parts) = (put.key.as_str(), put.size, &put.parts[..]);
        let now = self.tick(now);
        self.check_write(key, size, cfg)?;
        let replicas = self.granted_replicas(client, key, size, parts)?;
        let h = self.objects.hash(key);
        let (write, _) = self.admit(h, key, write)?;
        self.preempt_stale(h, key, now, write)?;
        let replaces = self.objects.contains_key_h(h, key);
        let record = Record::WriteGranted {
            client,
            key: key.into(),
            size,
            parts: parts.iter().map(|p| p.0).zip(replicas).collect(),
            replaces,
            pin: cfg.pin(),
        };
        self.commit_hinted(now, record, Some(h));
        self.put_end(client, now, key)
    }

    /// `put_granted` for each of `puts`, in order, one result each.
    pub fn batch_put_granted(
        &mut self,
        client: ClientId,
        now: Millis,
        puts: &[GrantedPut],
        cfg: &PutConfig,
        write: Write,
    ) -> Vec<Result<()>> {
        puts.iter()
            .map(|p| self.put_granted(client, now, p, cfg, write))
            .collect()
    }

    /// Ends a grant of `client`: what is left of it is free store space again, at once when
    /// every write the client made into it ended; held until the write release time when
    /// one failed or was abandoned (`dirty`: its bytes may still land). Repeating it is `Ok`.
    ///
    /// Errors: `IllegalClient` (another client's grant).
    pub fn grant_end(
        &mut self,
        client: ClientId,
        now: Millis,
        grant: GrantId,
        dirty: bool,
    ) -> Result<()> {
        let now = self.tick(now);
        match self.grants.get(&grant) {
            None => Ok(()),
            Some(g) if g.client != client => Err(Error::IllegalClient {
                key: grant.to_string(),
            }),
            Some(_) => {
                let hold_until = match dirty {
                    true => now.saturating_add(self.cfg.put_release_ms),
                    false => 0,
                };
                self.commit(now, Record::GrantEnd { grant, hold_until });
                Ok(())
            }
        }
    }

    /// Ends every grant of `client` whose lease on the cluster ended: what is left of them is
    /// held until the write release time (the client, cut off from the master but not from
    /// its peers, may still be writing there), then freed.
    pub(crate) fn end_grants_of(&mut self, now: Millis, client: ClientId) {
        let hold_until = now.saturating_add(self.cfg.put_release_ms);
        let ids: Vec<GrantId> = self
            .grants
            .iter()
            .filter(|(_, g)| g.client == client)
            .map(|(&id, _)| id)
            .collect();
        for grant in ids {
            self.commit(now, Record::GrantEnd { grant, hold_until });
        }
    }

    /// Bytes left in the grants of `client`.
    pub(crate) fn granted_bytes(&self, client: ClientId) -> u64 {
        self.grants
            .values()
            .filter(|g| g.client == client)
            .map(|g| g.free_bytes())
            .fold(0, u64::saturating_add)
    }

    /// The replicas `parts` name, checked against the grants of `client` (see
    /// [`Master::put_granted`]).
    fn granted_replicas(
        &self,
        client: ClientId,
        key: &str,
        size: u64,
        parts: &[(GrantId, u64)],
    ) -> Result<Replicas> {
        let bad = |reason: String| Error::InvalidWrite {
            key: key.into(),
            reason,
        };
        if parts.is_empty() || parts.len() > MAX_GRANTED_REPLICAS {
            return Err(Error::params(format!(
                "{} replicas named; 1..={MAX_GRANTED_REPLICAS} may be",
                parts.len()
            )));
        }
        let footprint = self.space.align_up(size);
        let mut replicas = Replicas::new();
        let mut nodes: Vec<u32> = Vec::with_capacity(parts.len());
        for &(id, addr) in parts {
            let g = self
                .grants
                .get(&id)
                .ok_or_else(|| bad(format!("{id} ended")))?;
            if g.client != client {
                return Err(Error::IllegalClient {
                    key: format!("{key} ({id})"),
                });
            }
            let m = self
                .space
                .get(g.mount)
                .ok_or_else(|| bad(format!("{id}: its store space is gone")))?;
            if !m.allocatable() {
                return Err(bad(format!("{id}: its store space takes no new replicas")));
            }
            let offset = addr
                .checked_sub(m.base)
                .filter(|&o| o % self.cfg.alignment == 0 && g.holds(o, footprint))
                .ok_or_else(|| {
                    bad(format!(
                        "{size} bytes at {addr:#x} are not in what is left of {id}"
                    ))
                })?;
            if nodes.contains(&m.node) {
                let node = self.space.node_name(m.node);
                return Err(bad(format!("two replicas on node {node}")));
            }
            nodes.push(m.node);
            replicas.push(Replica {
                mount: g.mount,
                offset,
            });
        }
        Ok(replicas)
    }

    /// `Ok` for a client this master knows as live (it pinged and, after a restart, remounted)
    /// and that has not left.
    fn check_live_client(&self, client: ClientId, now: Millis) -> Result<()> {
        self.check_not_left(client, now)?;
        match self.clients.get(&client) {
            Some(c) if !c.need_remount => Ok(()),
            _ => Err(Error::IllegalClient {
                key: format!("client {client} is not live at this master (mount first)"),
            }),
        }
    }
}
