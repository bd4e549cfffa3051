//! Property tests over random operation sequences: after every step no two allocations
//! overlap and used bytes equal the live allocations (`check_invariants`); a leased object is
//! never evicted nor removed without force unless all its nodes were lost; a completed object
//! disappears only by remove, eviction or the loss of all its nodes (copy and move tasks
//! included); and replaying the log (from the start, or after a mid-way snapshot) reproduces
//! the state.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use yuebing_store::master::{
    GrantDesc, Master, MasterConfig, MountId, PutConfig, Record, TaskId, TaskState,
};

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: u8,
        size: u32,
        n: u8,
        client: u8,
    },
    Start {
        key: u8,
        size: u32,
        n: u8,
        client: u8,
    },
    End {
        key: u8,
        client: u8,
    },
    Revoke {
        key: u8,
        client: u8,
    },
    Upsert {
        key: u8,
        size: u32,
        client: u8,
        end: bool,
    },
    Get {
        key: u8,
    },
    Exist {
        key: u8,
    },
    Remove {
        key: u8,
        force: bool,
    },
    RemoveAll {
        force: bool,
    },
    Advance {
        ms: u16,
    },
    /// A metrics scrape: prunes the lease book up to now.
    Scrape,
    Ping {
        client: u8,
    },
    Unmount {
        client: u8,
    },
    Remount {
        client: u8,
    },
    Leave {
        client: u8,
    },
    Copy {
        key: u8,
        target: u8,
    },
    Move {
        key: u8,
        source: u8,
        target: u8,
    },
    Take {
        client: u8,
    },
    Finish {
        client: u8,
        ok: bool,
    },
    /// Space granted to a client on a node of its choice.
    Grant {
        client: u8,
        node: u8,
        len: u32,
    },
    /// A put into the client's grant, at the next free place it knows of.
    PutGranted {
        key: u8,
        size: u32,
        client: u8,
        upsert: bool,
    },
    GrantEnd {
        client: u8,
        dirty: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..12;
    let size = 1u32..300_000;
    let client = 0u8..3;
    prop_oneof![
        4 => (key.clone(), size.clone(), 1u8..4, client.clone())
            .prop_map(|(key, size, n, client)| Op::Put { key, size, n, client }),
        2 => (key.clone(), size.clone(), 1u8..4, client.clone())
            .prop_map(|(key, size, n, client)| Op::Start { key, size, n, client }),
        2 => (key.clone(), client.clone()).prop_map(|(key, client)| Op::End { key, client }),
        1 => (key.clone(), client.clone()).prop_map(|(key, client)| Op::Revoke { key, client }),
        2 => (key.clone(), size, client.clone(), any::<bool>())
            .prop_map(|(key, size, client, end)| Op::Upsert { key, size, client, end }),
        3 => key.clone().prop_map(|key| Op::Get { key }),
        2 => key.clone().prop_map(|key| Op::Exist { key }),
        2 => (key.clone(), any::<bool>()).prop_map(|(key, force)| Op::Remove { key, force }),
        1 => any::<bool>().prop_map(|force| Op::RemoveAll { force }),
        3 => (0u16..1500).prop_map(|ms| Op::Advance { ms }),
        2 => Just(Op::Scrape),
        3 => client.clone().prop_map(|client| Op::Ping { client }),
        1 => client.clone().prop_map(|client| Op::Unmount { client }),
        1 => client.clone().prop_map(|client| Op::Remount { client }),
        1 => client.clone().prop_map(|client| Op::Leave { client }),
        2 => (key.clone(), 0u8..3).prop_map(|(key, target)| Op::Copy { key, target }),
        1 => (key, 0u8..3, 0u8..3)
            .prop_map(|(key, source, target)| Op::Move { key, source, target }),
        2 => client.clone().prop_map(|client| Op::Take { client }),
        2 => (client.clone(), any::<bool>()).prop_map(|(client, ok)| Op::Finish { client, ok }),
        2 => (client.clone(), 0u8..3, 1u32..300_000)
            .prop_map(|(client, node, len)| Op::Grant { client, node, len }),
        4 => (0u8..12, 1u32..40_000, client.clone(), any::<bool>())
            .prop_map(|(key, size, client, upsert)| Op::PutGranted { key, size, client, upsert }),
        1 => (client, any::<bool>()).prop_map(|(client, dirty)| Op::GrantEnd { client, dirty }),
    ]
}

const CLIENTS: [ClientId; 3] = [A, B, C];
const NODES: [&str; 3] = ["n1", "n2", "n3"];

struct Run {
    fx: Fx,
    now: u64,
    leases: HashMap<String, u64>,
    tasks: Vec<TaskId>,
    /// Grants handed out, with the client's bump offset into each.
    grants: Vec<(ClientId, GrantDesc, u64)>,
}

impl Run {
    fn new() -> Self {
        let mut fx = Fx::new(MasterConfig {
            eviction_ratio: 0.2,
            ..cfg()
        });
        for (c, n) in CLIENTS.iter().zip(NODES) {
            fx.mount(*c, 0, n, MIB);
        }
        Run {
            fx,
            now: 0,
            leases: HashMap::new(),
            tasks: Vec::new(),
            grants: Vec::new(),
        }
    }

    fn step(&mut self, op: &Op) {
        let now = self.now;
        let m = &mut self.fx.m;
        let k = |key: &u8| format!("k{key}");
        let cfg = |n: u8| PutConfig {
            replica_num: u32::from(n),
            ..PutConfig::default()
        };
        match op {
            Op::Put {
                key,
                size,
                n,
                client,
            } => {
                let c = CLIENTS[*client as usize];
                if m.put_start(
                    c,
                    now,
                    &k(key),
                    u64::from(*size),
                    &cfg(*n),
                    yuebing_store::Write::Put,
                )
                .is_ok()
                {
                    m.put_end(c, now, &k(key)).unwrap();
                    // A put over an object whose replicas all leave with their ranges writes
                    // it anew, as an upsert: leases on the old version protect its (held)
                    // replicas only.
                    self.leases.remove(&k(key));
                }
            }
            Op::Start {
                key,
                size,
                n,
                client,
            } => {
                let _ = m.put_start(
                    CLIENTS[*client as usize],
                    now,
                    &k(key),
                    u64::from(*size),
                    &cfg(*n),
                    yuebing_store::Write::Put,
                );
            }
            Op::End { key, client } => {
                if m.put_end(CLIENTS[*client as usize], now, &k(key)).is_ok() {
                    // It may have ended an upsert: a new version, without the old one's lease.
                    self.leases.remove(&k(key));
                }
            }
            Op::Revoke { key, client } => {
                let _ = m.put_revoke(CLIENTS[*client as usize], now, &k(key));
            }
            Op::Upsert {
                key,
                size,
                client,
                end,
            } => {
                let c = CLIENTS[*client as usize];
                if m.put_start(
                    c,
                    now,
                    &k(key),
                    u64::from(*size),
                    &cfg(1),
                    yuebing_store::Write::Upsert,
                )
                .is_ok()
                    && *end
                {
                    m.put_end(c, now, &k(key)).unwrap();
                    // A new version: leases on the old one protect its (held) replicas only.
                    self.leases.remove(&k(key));
                }
            }
            Op::Get { key } => {
                if m.get_replica_list(now, &k(key)).is_ok() {
                    let until = now + m.config().lease_ttl_ms;
                    let e = self.leases.entry(k(key)).or_default();
                    *e = (*e).max(until);
                }
            }
            Op::Exist { key } => {
                let _ = m.exist(&k(key));
            }
            Op::Remove { key, force } => {
                let _ = m.remove(now, &k(key), *force);
            }
            Op::RemoveAll { force } => {
                m.remove_all(now, *force);
            }
            Op::Advance { ms } => {
                self.now += u64::from(*ms);
                self.fx.m.handle_timeout(self.now);
            }
            Op::Scrape => {
                // The invariants, checked after every step, compare the pruned book with the
                // objects' leases.
                m.leases_held(now);
            }
            Op::Ping { client } => {
                m.ping(CLIENTS[*client as usize], now);
                m.handle_timeout(now);
            }
            Op::Unmount { client } => {
                let c = CLIENTS[*client as usize];
                if let Some(id) = (1..=64)
                    .map(MountId)
                    .find(|id| m.unmount(c, now, *id).is_ok())
                {
                    let _ = id;
                }
            }
            Op::Remount { client } => {
                let i = *client as usize;
                let _ = m.remount(CLIENTS[i], now, &[spec(NODES[i], base(NODES[i]), MIB)]);
            }
            Op::Leave { client } => m.leave(CLIENTS[*client as usize], now),
            Op::Copy { key, target } => {
                let target = [NODES[*target as usize].to_string()];
                if let Ok(id) = m.task_copy(now, &k(key), &target) {
                    self.tasks.push(id);
                }
            }
            Op::Move {
                key,
                source,
                target,
            } => {
                let (s, t) = (NODES[*source as usize], NODES[*target as usize]);
                if let Ok(id) = m.task_move(now, &k(key), s, t) {
                    self.tasks.push(id);
                }
            }
            Op::Take { client } => {
                m.task_take(CLIENTS[*client as usize], now).unwrap();
            }
            Op::Finish { client, ok } => {
                let c = CLIENTS[*client as usize];
                let running = self.tasks.iter().copied().find(|id| {
                    m.task_query(*id)
                        .is_ok_and(|t| t.client == c && t.state == TaskState::Processing)
                });
                if let Some(id) = running {
                    let error = (!ok).then(|| (-800, "copy failed".to_string()));
                    m.task_end(c, now, id, error).unwrap();
                }
            }
            Op::Grant { client, node, len } => {
                let c = CLIENTS[*client as usize];
                let node = [NODES[*node as usize].to_string()];
                if let Ok(g) = m.grant(c, now, u64::from(*len), &node) {
                    self.grants.push((c, g, 0));
                }
            }
            Op::PutGranted {
                key,
                size,
                client,
                upsert,
            } => {
                let c = CLIENTS[*client as usize];
                let size = u64::from(*size);
                let write = match upsert {
                    true => yuebing_store::Write::Upsert,
                    false => yuebing_store::Write::Put,
                };
                let footprint = size.div_ceil(64) * 64;
                let at = self
                    .grants
                    .iter_mut()
                    .find(|(o, g, used)| *o == c && g.len - *used >= footprint);
                if let Some((_, g, used)) = at {
                    let part = [(g.id, g.addr + *used)];
                    let cfg = PutConfig::default();
                    if m.put_granted(c, now, &gp(&k(key), size, &part), &cfg, write)
                        .is_ok()
                    {
                        self.leases.remove(&k(key));
                    }
                    // Taken or not, the client moves on (a refused place may be one an
                    // earlier object took).
                    *used += footprint;
                }
            }
            Op::GrantEnd { client, dirty } => {
                let c = CLIENTS[*client as usize];
                if let Some(i) = self.grants.iter().position(|(o, _, _)| *o == c) {
                    let (_, g, _) = self.grants.remove(i);
                    m.grant_end(c, now, g.id, *dirty).unwrap();
                }
            }
        }
    }
}

fn forced(op: &Op) -> bool {
    matches!(
        op,
        Op::Remove { force: true, .. } | Op::RemoveAll { force: true }
    )
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn random_operations_keep_the_rules(ops in prop::collection::vec(op(), 1..80)) {
        let mut run = Run::new();
        let mut mid: Option<(yuebing_store::master::Snapshot, usize)> = None;
        for (i, op) in ops.iter().enumerate() {
            let before: HashMap<String, Vec<MountId>> = (0..12)
                .map(|k| format!("k{k}"))
                .filter_map(|k| run.fx.m.placement(&k).map(|p| (k, p.iter().map(|r| r.mount).collect())))
                .collect();
            let log_before = run.fx.log.len();
            run.step(op);
            run.fx.drain();
            if let Err(e) = run.fx.m.check_invariants() {
                prop_assert!(false, "after {op:?}: {e}");
            }
            let step_log = &run.fx.log[log_before..];
            let lost_mounts: HashSet<MountId> = step_log
                .iter()
                .filter_map(|e| match e.record {
                    Record::MountRemoved { mount } => Some(mount),
                    _ => None,
                })
                .collect();
            for (key, mounts) in &before {
                if run.fx.m.exist(key).unwrap() {
                    continue;
                }
                let nodes_lost = mounts.iter().all(|m| lost_mounts.contains(m));
                let removal = step_log.iter().find_map(|e| match &e.record {
                    Record::Remove { key: k, evicted, .. } if &**k == key => Some(Some(*evicted)),
                    Record::WriteRevoke { key: k, .. } if &**k == key => Some(None),
                    _ => None,
                });
                prop_assert!(
                    nodes_lost || removal.is_some(),
                    "{key} vanished without remove, eviction or node loss after {op:?}"
                );
                let leased = run.leases.get(key).is_some_and(|&u| u > run.now);
                if leased && !nodes_lost {
                    prop_assert!(removal != Some(Some(true)), "leased {key} was evicted after {op:?}");
                    prop_assert!(forced(op), "leased {key} removed without force by {op:?}");
                }
            }
            // A lease belongs to the object it was granted on: forget it once that is gone.
            let m = &run.fx.m;
            run.leases.retain(|k, _| m.exist(k).unwrap_or(false));
            if i == ops.len() / 2 {
                mid = Some((run.fx.m.snapshot(), run.fx.log.len()));
            }
        }
        let want = run.fx.m.snapshot();
        let cfg = run.fx.m.config().clone();
        let replayed = Master::restore(cfg.clone(), false, None, run.fx.log.clone(), run.now).unwrap();
        prop_assert_eq!(&replayed.snapshot(), &want);
        replayed.check_invariants().unwrap();
        if let Some((snap, at)) = mid {
            let from_mid = Master::restore(cfg, false, Some(snap), run.fx.log[at..].to_vec(), run.now).unwrap();
            prop_assert_eq!(&from_mid.snapshot(), &want);
        }
    }
}
