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
        Cluster::start_with(MasterServerConfig::default())
    }

    /// A master whose read leases last `lease_ms`.
    pub(crate) fn start_with_lease_ms(lease_ms: u64) -> Cluster {
        let mut cfg = MasterServerConfig::default();
        cfg.core.lease_ttl_ms = lease_ms;
        Cluster::start_with(cfg)
    }

    fn start_with(cfg: MasterServerConfig) -> Cluster {
        let host = Bridge::new(BridgeConfig::default()).unwrap();
        let handle = host.handle().clone();
        let bind: yuebing_rpc::Endpoint = "127.0.0.1:0".parse().unwrap();
        let master = host
            .block_on(async move { RunningMaster::start_on(cfg, &bind, handle).await })
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

/// The outcomes of `_async` calls, received by the test: each callback below sends
/// `(code, what it was handed)` through the `Sender` its `user_data` points to.
pub(crate) struct Got<T> {
    tx: std::sync::mpsc::Sender<(i32, T)>,
    rx: std::sync::mpsc::Receiver<(i32, T)>,
}

impl<T> Got<T> {
    pub(crate) fn new() -> Got<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        Got { tx, rx }
    }

    /// The `user_data` for a call whose callback sends a `T`: valid while `self` lives.
    pub(crate) fn user_data(&self) -> *mut std::ffi::c_void {
        (&self.tx as *const std::sync::mpsc::Sender<(i32, T)>)
            .cast_mut()
            .cast()
    }

    /// The one outcome of the call the callback was given to (within 20 s).
    pub(crate) fn one(&self) -> (i32, T) {
        let got = self
            .rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the callback ran within 20 s");
        assert!(self.rx.try_recv().is_err(), "a second outcome");
        got
    }
}

/// Starts an `_async` call (`start` is handed the `user_data` to pass) and, if it started
/// (0), waits for its one outcome; else the code it returned (no callback is due then).
pub(crate) fn outcome<T>(
    start: impl FnOnce(*mut std::ffi::c_void) -> i32,
) -> Result<(i32, T), i32> {
    let got = Got::<T>::new();
    match start(got.user_data()) {
        0 => Ok(got.one()),
        code => Err(code),
    }
}

/// No `yuebing_error` wanted.
pub(crate) fn nul() -> *mut yuebing_bridge::ffi::error::yuebing_error {
    std::ptr::null_mut()
}

/// The client's default options.
pub(crate) const NO_OPTS: *const yuebing_bridge::ffi::types::yuebing_options = std::ptr::null();

/// No call handle wanted.
pub(crate) const NO_CALL: *mut yuebing_bridge::ffi::types::yuebing_call_t = std::ptr::null_mut();

/// NUL-terminated copies of `keys`, and the array of their pointers.
pub(crate) fn c_keys(keys: &[&str]) -> (Vec<CString>, Vec<*const std::ffi::c_char>) {
    let owned: Vec<CString> = keys.iter().map(|k| CString::new(*k).unwrap()).collect();
    let ptrs = owned.iter().map(|k| k.as_ptr()).collect();
    (owned, ptrs)
}

/// Sends `(code, v)` to the [`Got`] whose `user_data` a callback was handed.
///
/// # Safety
/// `user_data` is a `Got<T>`'s, which lives until its outcome was received.
pub(crate) unsafe fn send<T>(user_data: *mut std::ffi::c_void, code: i32, v: T) {
    // SAFETY: the caller's promise; a `Sender` may be used from any thread.
    let tx = unsafe { &*(user_data as *const std::sync::mpsc::Sender<(i32, T)>) };
    let _ = tx.send((code, v));
}

/// `n` elements of a C array lent to a callback, copied (none when NULL).
///
/// # Safety
/// `p` is NULL or valid for `n` elements.
pub(crate) unsafe fn copied<T: Copy>(p: *const T, n: usize) -> Vec<T> {
    match p.is_null() {
        true => Vec::new(),
        // SAFETY: `i < n` elements are valid (the caller's promise).
        false => (0..n).map(|i| unsafe { p.add(i).read() }).collect(),
    }
}

/// A `yuebing_done_cb` for a [`Got<()>`].
pub(crate) unsafe extern "C" fn on_done(
    ud: *mut std::ffi::c_void,
    code: i32,
    _: *const std::ffi::c_char,
) {
    // SAFETY: `ud` is a `Got<()>`'s.
    unsafe { send(ud, code, ()) }
}

/// A `yuebing_u64_cb` for a [`Got<u64>`].
pub(crate) unsafe extern "C" fn on_number(
    ud: *mut std::ffi::c_void,
    code: i32,
    _: *const std::ffi::c_char,
    value: u64,
) {
    // SAFETY: `ud` is a `Got<u64>`'s.
    unsafe { send(ud, code, value) }
}

/// A `yuebing_each_cb` for a [`Got<(Vec<i32>, Vec<u64>)>`]: the codes and the values.
pub(crate) unsafe extern "C" fn on_each(
    ud: *mut std::ffi::c_void,
    code: i32,
    _: *const std::ffi::c_char,
    n: usize,
    codes: *const i32,
    values: *const u64,
) {
    // SAFETY: both arrays hold `n` elements or are NULL; `ud` is the matching `Got`'s.
    unsafe { send(ud, code, (copied(codes, n), copied(values, n))) }
}

/// The value of `key` through `yuebing_store_get`, or that call's code.
pub(crate) fn value_of(store: yuebing_store_t, key: &str) -> Result<Vec<u8>, i32> {
    use yuebing_bridge::ffi::store_api::yuebing_buf_free;
    use yuebing_bridge::ffi::store_ops::yuebing_store_get;
    let key = CString::new(key).unwrap();
    let mut buf = yuebing_bridge::ffi::types::yuebing_buf {
        data: std::ptr::null_mut(),
        len: 0,
    };
    // SAFETY: valid key and output; the buffer is freed once, after its bytes were copied.
    unsafe {
        let code = yuebing_store_get(
            store,
            key.as_ptr(),
            std::ptr::null(),
            &mut buf,
            std::ptr::null_mut(),
        );
        if code != 0 {
            return Err(code);
        }
        let value = copied(buf.data, buf.len);
        yuebing_buf_free(&mut buf);
        Ok(value)
    }
}

/// Whether `key` exists, through `yuebing_store_exist`.
pub(crate) fn exists(store: yuebing_store_t, key: &str) -> bool {
    let key = CString::new(key).unwrap();
    let mut out = 7u64;
    // SAFETY: valid key and output.
    let code = unsafe {
        yuebing_bridge::ffi::store_ops::yuebing_store_exist(
            store,
            key.as_ptr(),
            std::ptr::null(),
            &mut out,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0, "{}", last());
    out == 1
}

/// Stores `value` under `key` through `yuebing_store_put`.
pub(crate) fn put(store: yuebing_store_t, key: &str, value: &[u8]) {
    let key = CString::new(key).unwrap();
    // SAFETY: valid key and value.
    let code = unsafe {
        yuebing_bridge::ffi::store_ops::yuebing_store_put(
            store,
            key.as_ptr(),
            value.as_ptr(),
            value.len(),
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0, "{}", last());
}

/// Memory registered (local-only) with the engine of `store`, through a handle of that
/// engine, for the calls that read or write memory by address; unregistered on drop.
pub(crate) struct Registered {
    engine: yuebing_bridge::ffi::types::yuebing_engine_t,
    pub(crate) bytes: Vec<u8>,
}

impl Registered {
    /// `len` bytes of `fill`, registered.
    pub(crate) fn new(store: yuebing_store_t, len: usize, fill: u8) -> Registered {
        use yuebing_bridge::ffi::engine_api::yuebing_engine_register;
        use yuebing_bridge::ffi::store_api::yuebing_store_engine;
        let mut r = Registered {
            engine: 0,
            bytes: vec![fill; len],
        };
        // SAFETY: valid handles and outputs; the memory stays in place (never resized) until
        // it is unregistered on drop.
        unsafe {
            assert_eq!(
                yuebing_store_engine(store, &mut r.engine, std::ptr::null_mut()),
                0
            );
            let code = yuebing_engine_register(
                r.engine,
                r.bytes.as_mut_ptr().cast(),
                len,
                std::ptr::null(),
                0,
                std::ptr::null_mut(),
            );
            assert_eq!(code, 0, "{}", last());
        }
        r
    }

    /// The address of byte `at`.
    pub(crate) fn addr(&self, at: usize) -> u64 {
        self.bytes[at..].as_ptr() as u64
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        use yuebing_bridge::ffi::engine_api::{yuebing_engine_destroy, yuebing_engine_unregister};
        // SAFETY: valid handle; the registration ends before the memory is freed.
        unsafe {
            yuebing_engine_unregister(self.engine, self.addr(0), std::ptr::null_mut());
            yuebing_engine_destroy(self.engine, std::ptr::null_mut());
        }
    }
}
