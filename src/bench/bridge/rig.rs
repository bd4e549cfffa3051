//! What every mode calls: a master on 127.0.0.1 (with the cluster token, if one is set) and one store client (holding the
//! store space itself), both on a [`Bridge`]'s runtime; registered memory for `get_into`; the
//! preloaded objects that gets read; and the clean-up of the puts' fresh keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use yuebing_bridge::{BlockingClient, BlockingMaster, Bridge, BridgeConfig};
use yuebing_engine::EngineBuffer;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{ClientConfig, Options};

use super::c_abi::CHandles;
use super::ops::err;

/// Bytes of a `put` and a `get`.
pub(super) const SMALL: usize = 4 << 10;
/// Bytes of a `get_into`.
pub(super) const LARGE: usize = 1 << 20;
/// Preloaded objects read by `get` (in turn).
const SMALL_KEYS: usize = 256;
/// Preloaded objects read by `get_into` (in turn).
const LARGE_KEYS: usize = 8;
/// Fraction of the store space the preloaded objects and the fresh keys of one put measurement
/// may take together: under the master's eviction watermark (90 %), so that nothing is evicted.
const PUT_SHARE: f64 = 0.8;

/// How the rig is built.
#[derive(Debug, Clone)]
pub(super) struct RigConfig {
    /// Bridge runtime worker threads.
    pub(super) worker_threads: usize,
    /// Bridge callback threads.
    pub(super) callback_threads: usize,
    /// Store space of the client.
    pub(super) store_size: u64,
    /// The most calls in flight of any measurement (registered slots for `get_into`).
    pub(super) slots: usize,
    /// The cluster token the master requires and the client and engine present.
    pub(super) token: Option<yuebing_rpc::Token>,
}

/// The master, the client and their memory. Shared by every worker of every mode.
pub(super) struct Rig {
    /// The bridge everything runs on.
    pub(super) bridge: Bridge,
    /// The store client.
    pub(super) client: BlockingClient,
    /// A client of the master's own calls (`health`).
    pub(super) admin: BlockingMaster,
    /// Options of every call (the defaults: the C modes pass NULL for the same).
    pub(super) opts: Options,
    /// The client and the master connection as C handles.
    pub(super) c: CHandles,
    /// The value every put stores.
    pub(super) value: Vec<u8>,
    master: Mutex<Option<RunningMaster>>,
    small_keys: Vec<String>,
    large_keys: Vec<String>,
    buf: Arc<EngineBuffer>,
    slots: usize,
    /// Fresh put keys handed out, and those removed again.
    puts: AtomicU64,
    removed: AtomicU64,
    put_budget: u64,
}

impl Rig {
    /// Starts the master and the client on a new bridge and preloads the objects read.
    pub(super) fn start(cfg: &RigConfig) -> Result<Rig, String> {
        let bridge = Bridge::new(BridgeConfig {
            worker_threads: cfg.worker_threads,
            callback_threads: cfg.callback_threads,
        })
        .map_err(err)?;
        let handle = bridge.handle().clone();
        let bind: Endpoint = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
        let mut master_cfg = MasterServerConfig::default();
        master_cfg.rpc.token = cfg.token.clone();
        let master = bridge
            .block_on(async move { RunningMaster::start_on(master_cfg, &bind, handle).await })
            .map_err(err)?;
        let endpoint = master.local_endpoint().clone();
        let mut client_cfg = ClientConfig {
            masters: vec![endpoint.clone()],
            store_size: cfg.store_size,
            token: cfg.token.clone(),
            ..ClientConfig::default()
        };
        client_cfg.engine.token = cfg.token.clone();
        let client = BlockingClient::start(&bridge, client_cfg).map_err(err)?;
        let admin = BlockingMaster::connect(&bridge, endpoint, cfg.token.clone()).map_err(err)?;
        let slots = cfg.slots.max(1);
        let buf = client
            .client()
            .engine()
            .allocate(slots * LARGE, true)
            .map_err(err)?;
        let preloaded = (SMALL_KEYS * SMALL + LARGE_KEYS * LARGE) as f64;
        let put_budget = (cfg.store_size as f64 * PUT_SHARE - preloaded) / SMALL as f64;
        if put_budget < 1000.0 {
            return Err(format!(
                "store size {} is too small for the bench: give at least 64M",
                cfg.store_size
            ));
        }
        let c = CHandles::new(&client, &admin)?;
        let rig = Rig {
            bridge,
            client,
            admin,
            c,
            opts: Options::default(),
            value: vec![0x5a; SMALL],
            master: Mutex::new(Some(master)),
            small_keys: (0..SMALL_KEYS).map(|i| format!("get/{i}")).collect(),
            large_keys: (0..LARGE_KEYS).map(|i| format!("get_into/{i}")).collect(),
            buf,
            slots,
            puts: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            put_budget: put_budget as u64,
        };
        rig.preload()?;
        Ok(rig)
    }

    fn preload(&self) -> Result<(), String> {
        for k in &self.small_keys {
            self.client.put(k, &self.value, &self.opts).map_err(err)?;
        }
        let large = vec![0xa5; LARGE];
        for k in &self.large_keys {
            self.client.put(k, &large, &self.opts).map_err(err)?;
        }
        Ok(())
    }

    /// A fresh key for a put.
    pub(super) fn put_key(&self) -> String {
        format!("put/{}", self.puts.fetch_add(1, Ordering::Relaxed))
    }

    /// The preloaded 4 KiB object read by call `seq`.
    pub(super) fn small_key(&self, seq: u64) -> &str {
        &self.small_keys[seq as usize % SMALL_KEYS]
    }

    /// The preloaded 1 MiB object read by call `seq`.
    pub(super) fn large_key(&self, seq: u64) -> &str {
        &self.large_keys[seq as usize % LARGE_KEYS]
    }

    /// Worker `w`'s registered slot (address, length) for `get_into`: only its own calls
    /// write there, one at a time.
    pub(super) fn slot(&self, w: usize) -> (u64, u64) {
        assert!(w < self.slots, "worker {w} has no slot");
        (self.buf.addr() + (w * LARGE) as u64, LARGE as u64)
    }

    /// The most puts one measurement may record, at most `limit`: half the room, the other
    /// half left for its warm-up and the calls still in flight when it closes.
    pub(super) fn put_limit(&self, limit: Option<u64>) -> u64 {
        (self.put_budget / 2).min(limit.unwrap_or(u64::MAX))
    }

    /// Removes the keys of the puts made since the last clean-up (untimed; 64 at a time).
    pub(super) fn remove_puts(&self) -> Result<(), String> {
        let (from, to) = (
            self.removed.load(Ordering::Relaxed),
            self.puts.load(Ordering::Relaxed),
        );
        if to - from > self.put_budget {
            return Err(format!(
                "{} puts in one measurement came near filling the store: give a bigger \
                 --store-size, or fewer --ops",
                to - from
            ));
        }
        let (c, o) = (self.client.client().clone(), self.opts.clone());
        self.bridge
            .block_on(async move {
                futures::stream::iter(from..to)
                    .map(|i| {
                        let (c, o) = (&c, &o);
                        async move { c.remove(&format!("put/{i}"), false, o).await }
                    })
                    .buffer_unordered(64)
                    .try_collect::<()>()
                    .await
            })
            .map_err(err)?;
        self.removed.store(to, Ordering::Relaxed);
        Ok(())
    }

    /// Closes the client, stops the master and shuts the bridge down.
    pub(super) fn stop(&self) -> Result<(), String> {
        self.c.release();
        self.client.close(&self.opts).map_err(err)?;
        let master = self.master.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(m) = master {
            self.bridge
                .block_on(async move {
                    m.shutdown(Duration::from_secs(1)).await;
                    Ok::<_, yuebing_bridge::Error>(())
                })
                .map_err(err)?;
        }
        self.bridge.shutdown().map_err(err)
    }
}
