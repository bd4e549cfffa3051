//! What the C-ABI tests share: a master in this process, store clients made through the ABI,
//! and readers of the ABI's error strings.

#![allow(dead_code)]

use std::ffi::{CStr, CString};
use std::time::Duration;

use yuebing_bridge::ffi::bridge_api::yuebing_bridge_new;
use yuebing_bridge::ffi::error::{yuebing_error_name, yuebing_last_error_message};
use yuebing_bridge::ffi::store_api::yuebing_store_new;
use yuebing_bridge::ffi::types::{yuebing_bridge_t, yuebing_store_config, yuebing_store_t};
use yuebing_bridge::{Bridge, BridgeConfig};
use yuebing_store::master::{MasterServerConfig, RunningMaster};

/// A master on its own bridge (so that destroying the bridge under test leaves it running).
pub(crate) struct Cluster {
    host: Bridge,
    master: Option<RunningMaster>,
    pub(crate) endpoint: CString,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        let host = Bridge::new(BridgeConfig::default()).unwrap();
        let handle = host.handle().clone();
        let bind: yuebing_rpc::Endpoint = "127.0.0.1:0".parse().unwrap();
        let master = host
            .block_on(async move {
                RunningMaster::start_on(MasterServerConfig::default(), &bind, handle).await
            })
            .unwrap();
        let endpoint = CString::new(master.local_endpoint().to_string()).unwrap();
        Cluster {
            host,
            master: Some(master),
            endpoint,
        }
    }

    /// A store client with 32 MiB of store space, on `bridge`.
    pub(crate) fn store(&self, bridge: yuebing_bridge_t) -> yuebing_store_t {
        let config = yuebing_store_config {
            master: self.endpoint.as_ptr(),
            token: std::ptr::null(),
            store_size: 32 << 20,
            staging_size: 8 << 20,
            timeout_ms: 10_000,
            bind: std::ptr::null(),
            flags: 0,
        };
        let mut store = 0;
        // SAFETY: valid config and output.
        let rc = unsafe { yuebing_store_new(bridge, &config, &mut store, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "{}", last());
        store
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(m) = self.master.take() {
            let _ = self.host.block_on(async move {
                Ok::<_, yuebing_bridge::Error>(m.shutdown(Duration::from_secs(1)).await)
            });
        }
    }
}

pub(crate) fn last() -> String {
    // SAFETY: a NUL-terminated string valid until the next call on this thread.
    unsafe { CStr::from_ptr(yuebing_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn new_bridge() -> yuebing_bridge_t {
    let mut b = 0;
    // SAFETY: NULL config, valid output.
    let rc = unsafe { yuebing_bridge_new(std::ptr::null(), &mut b, std::ptr::null_mut()) };
    assert_eq!(rc, 0);
    b
}

pub(crate) fn name(code: i32) -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(yuebing_error_name(code)) }
        .to_string_lossy()
        .into_owned()
}
