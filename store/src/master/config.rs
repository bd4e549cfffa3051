//! The master's rules, as numbers. One documented default per setting; the command line,
//! `YUEBING_*` environment and TOML file all land here.

use serde::{Deserialize, Serialize};

/// How the nodes for an object's replicas are chosen (after the caller's preferred nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementStrategy {
    /// Uniformly at random among nodes with room (Mooncake's default).
    #[default]
    Random,
    /// Nodes with the largest free fraction of their space first.
    FreeRatioFirst,
}

impl std::str::FromStr for PlacementStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" => Ok(Self::Random),
            "free-ratio-first" => Ok(Self::FreeRatioFirst),
            _ => Err(format!(
                "unknown placement strategy {s:?} (random, free-ratio-first)"
            )),
        }
    }
}

/// The master core's settings. Times are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MasterConfig {
    /// A read lease (granted by `get_replica_list`) lasts this long. Default 10 s.
    pub lease_ttl_ms: u64,
    /// A client that has not pinged for this long is expired. Default 10 s.
    pub client_ttl_ms: u64,
    /// A put older than this may be pre-empted by a new put of the same key. Default 30 s.
    pub put_discard_ms: u64,
    /// An unfinished put older than this is revoked and its space released (a pre-empted put's
    /// space is held until then, since its writer may still be writing). Default 600 s.
    pub put_release_ms: u64,
    /// Eviction starts when used bytes exceed this fraction of capacity. Default 0.90.
    pub high_watermark: f64,
    /// One eviction frees at least this fraction of capacity. Default 0.05.
    pub eviction_ratio: f64,
    /// A soft pin protects an object (it is evicted after unpinned ones) until this long after
    /// its last access. Default 30 min.
    pub soft_pin_ttl_ms: u64,
    /// A gracefully unmounted range keeps its replicas readable this long. Default 30 s.
    pub unmount_grace_ms: u64,
    /// Offsets inside store space are multiples of this (bytes, a power of two). Default 64.
    pub alignment: u64,
    /// Longest key accepted, in bytes. Default 4096.
    pub max_key_len: usize,
    /// How replica nodes are chosen. Default random.
    pub placement: PlacementStrategy,
    /// Seed of the placement randomness (the core is deterministic given its inputs).
    pub seed: u64,
    /// Copy and move tasks waiting for their client, at most; more are refused
    /// (`TaskPendingLimitExceeded`). Default 10 000, as Mooncake's.
    pub max_pending_tasks: usize,
    /// Tasks being run at once, at most; more wait. Default 10 000.
    pub max_processing_tasks: usize,
    /// Finished tasks kept for `task_query`, the oldest forgotten first. Default 10 000.
    pub max_finished_tasks: usize,
    /// A task not taken by its client within this fails (0: never). Default 300 s.
    pub pending_task_timeout_ms: u64,
    /// A task taken but not ended within this fails, and its client's copy is given this long
    /// to finish (a read lease on the object keeps it in place that long). Default 300 s.
    pub processing_task_timeout_ms: u64,
    /// A task whose target node has no room is retried at the client's next takes this many
    /// times before it fails. Default 10.
    pub max_task_retries: u32,
    /// Store space one client may hold in grants (space placed ahead of its puts, counted
    /// as used), at most; 0 turns grants off. Default 64 MiB.
    pub grant_max_bytes: u64,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            lease_ttl_ms: 10_000,
            client_ttl_ms: 10_000,
            put_discard_ms: 30_000,
            put_release_ms: 600_000,
            high_watermark: 0.90,
            eviction_ratio: 0.05,
            soft_pin_ttl_ms: 30 * 60_000,
            unmount_grace_ms: 30_000,
            alignment: 64,
            max_key_len: 4096,
            placement: PlacementStrategy::Random,
            seed: 0x5eed,
            max_pending_tasks: 10_000,
            max_processing_tasks: 10_000,
            max_finished_tasks: 10_000,
            pending_task_timeout_ms: 300_000,
            processing_task_timeout_ms: 300_000,
            max_task_retries: 10,
            grant_max_bytes: 64 << 20,
        }
    }
}

impl MasterConfig {
    /// Checks the settings against each other; the reason on failure.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.high_watermark > 0.0 && self.high_watermark <= 1.0) {
            return Err(format!(
                "high_watermark {} is not in (0, 1]",
                self.high_watermark
            ));
        }
        if !(self.eviction_ratio > 0.0 && self.eviction_ratio <= 1.0) {
            return Err(format!(
                "eviction_ratio {} is not in (0, 1]",
                self.eviction_ratio
            ));
        }
        if self.put_release_ms < self.put_discard_ms {
            return Err("put_release_ms must not be shorter than put_discard_ms".into());
        }
        if !self.alignment.is_power_of_two() {
            return Err(format!(
                "alignment {} is not a power of two",
                self.alignment
            ));
        }
        if self.lease_ttl_ms == 0 || self.client_ttl_ms == 0 {
            return Err("lease_ttl_ms and client_ttl_ms must be positive".into());
        }
        if self.processing_task_timeout_ms == 0 || self.max_processing_tasks == 0 {
            return Err(
                "processing_task_timeout_ms and max_processing_tasks must be positive".into(),
            );
        }
        Ok(())
    }
}
