//! Deterministic tests of the master core's rules, with an injected clock (no sleeps).

mod clients;
mod evict;
mod failover;
mod grants;
mod props;
mod read;
mod replay;
mod tasks;
mod write;

use yuebing_store::master::{
    ClientId, Effect, GrantId, GrantedPut, LogEntry, Master, MasterConfig, MountId, MountSpec,
    PutConfig, ReplicaDesc,
};
use yuebing_store::Result;

/// Client of node n1.
pub const A: ClientId = ClientId(0xa);
/// Client of node n2.
pub const B: ClientId = ClientId(0xb);
/// Client of node n3.
pub const C: ClientId = ClientId(0xc);
/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// A master with logging on, and the log it produced so far.
pub struct Fx {
    /// The core under test.
    pub m: Master,
    /// Every log entry it appended.
    pub log: Vec<LogEntry>,
}

impl Fx {
    /// A fresh master with logging on.
    pub fn new(cfg: MasterConfig) -> Self {
        Fx {
            m: Master::new(cfg, true),
            log: Vec::new(),
        }
    }

    /// Drains effects, keeping log entries; returns the other effects.
    pub fn drain(&mut self) -> Vec<Effect> {
        let mut other = Vec::new();
        while let Some(e) = self.m.poll_effect() {
            match e {
                Effect::Append(entry) => self.log.push(entry),
                e => other.push(e),
            }
        }
        other
    }

    /// Mounts `len` bytes on `node` for `client` at base 0x1000_0000 * index.
    pub fn mount(&mut self, client: ClientId, now: u64, node: &str, len: u64) -> MountId {
        let ids = self
            .m
            .mount(client, now, &[spec(node, base(node), len)])
            .expect("mount");
        self.check();
        ids[0]
    }

    /// put_start + put_end with `n` replicas.
    pub fn put(
        &mut self,
        client: ClientId,
        now: u64,
        key: &str,
        size: u64,
        n: u32,
    ) -> Result<Vec<ReplicaDesc>> {
        let r = self.m.put_start(
            client,
            now,
            key,
            size,
            &replicas(n),
            yuebing_store::Write::Put,
        )?;
        self.m.put_end(client, now, key)?;
        self.check();
        Ok(r)
    }

    /// Checks the core's invariants (panics with the violation).
    pub fn check(&self) {
        if let Err(e) = self.m.check_invariants() {
            panic!("invariant broken: {e}");
        }
    }

    /// Bytes allocated.
    pub fn used(&self) -> u64 {
        self.m.stats().bytes_used
    }
}

/// The base address [`Fx::mount`] gives a node's range.
pub fn base(node: &str) -> u64 {
    0x1000_0000 * (node.bytes().map(u64::from).sum::<u64>() + 1)
}

/// An object written into grants, to publish.
pub fn gp(key: &str, size: u64, parts: &[(GrantId, u64)]) -> GrantedPut {
    GrantedPut {
        key: key.into(),
        size,
        parts: parts.to_vec(),
    }
}

/// A mount spec.
pub fn spec(node: &str, base: u64, len: u64) -> MountSpec {
    MountSpec {
        node: node.into(),
        base,
        len,
    }
}

/// Put settings with `n` replicas.
pub fn replicas(n: u32) -> PutConfig {
    PutConfig {
        replica_num: n,
        ..PutConfig::default()
    }
}

/// Short, distinct timeouts so each rule's edge is easy to hit.
pub fn cfg() -> MasterConfig {
    MasterConfig {
        lease_ttl_ms: 100,
        client_ttl_ms: 1_000,
        put_discard_ms: 300,
        put_release_ms: 3_000,
        soft_pin_ttl_ms: 10_000,
        unmount_grace_ms: 500,
        ..MasterConfig::default()
    }
}

/// A master with nodes n1..=n3 (clients A, B, C), 16 MiB each, all mounted at t=0.
pub fn three_nodes() -> Fx {
    let mut fx = Fx::new(cfg());
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    fx.mount(C, 0, "n3", 16 * MIB);
    fx
}

/// Keeps the three clients of [`three_nodes`] alive at `now`.
pub fn ping_all(fx: &mut Fx, now: u64) {
    for c in [A, B, C] {
        fx.m.ping(c, now);
    }
}
