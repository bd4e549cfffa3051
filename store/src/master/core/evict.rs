//! Eviction: oldest access first, unpinned before soft-pinned, never hard-pinned, leased,
//! being-written or being-copied objects.

use super::Master;
use crate::master::log::{Effect, Record};
use crate::master::object::Pin;
use crate::master::types::Millis;

impl Master {
    /// Frees at least the eviction ratio of capacity (and at least `min_bytes`), or as much as
    /// the evictable objects hold.
    pub(crate) fn evict(&mut self, now: Millis, min_bytes: u64) {
        let cap = self.space.capacity();
        if cap == 0 {
            return;
        }
        let target = ((self.cfg.eviction_ratio * cap as f64).ceil() as u64).max(min_bytes);
        let (lease_ttl, soft_ttl) = (self.cfg.lease_ttl_ms, self.cfg.soft_pin_ttl_ms);
        let mut candidates: Vec<(u8, Millis, &str, u64)> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                o.pin != Pin::Hard && !o.leased(now) && !o.writing && !self.tasks.running(k)
            })
            .map(|(k, o)| {
                let accessed = o.accessed(lease_ttl);
                let soft = o.pin == Pin::Soft && accessed + soft_ttl > now;
                let bytes = self.space.align_up(o.size) * o.replicas.len() as u64;
                (u8::from(soft), accessed, &**k, bytes)
            })
            .collect();
        candidates.sort_unstable();
        let mut freed = 0;
        let mut victims: Vec<Box<str>> = Vec::new();
        for (_, _, key, bytes) in candidates {
            if freed >= target {
                break;
            }
            freed += bytes;
            victims.push(key.into());
        }
        let objects = victims.len() as u64;
        for key in victims {
            self.commit(
                now,
                Record::Remove {
                    key,
                    evicted: true,
                    hold_until: self.reuse_after(0),
                },
            );
        }
        if objects > 0 {
            tracing::debug!(objects, bytes = freed, "evicted");
            self.effects.push_back(Effect::Evicted {
                objects,
                bytes: freed,
            });
        }
    }
}
