//! `yuebing_store_*`: a store client, its single-key calls in blocking and callback forms, and
//! the buffers and listings it hands out.

use std::ffi::c_char;
use std::future::Future;
use std::time::Duration;

use yuebing_store::master::PutConfig;
use yuebing_store::{Client, ClientConfig, Options, Write};

use crate::{BlockingClient, Masters};

use super::bridge_api::resolve;
use super::deliver::Op;
use super::engine_api::EngineObject;
use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::types::*;

/// The options of a call: NULL is the client's defaults.
///
/// # Safety
/// `p` is NULL or readable.
pub(crate) unsafe fn options(p: *const yuebing_options) -> FfiResult<Options> {
    if p.is_null() {
        return Ok(Options::default());
    }
    // SAFETY: non-NULL and readable (the caller's promise).
    let o = unsafe { p.read() };
    let pins = YUEBING_OPT_SOFT_PIN | YUEBING_OPT_HARD_PIN;
    let known = pins | YUEBING_OPT_UPSERT | YUEBING_OPT_UNCACHED;
    if o.flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "unknown option flags {:#x}",
            o.flags & !known
        )));
    }
    // The replica settings replace the client's only when the caller set one of them: the
    // upsert bit is the write mode, not a replica setting.
    let put = (o.replica_num != 0 || o.flags & pins != 0).then(|| PutConfig {
        replica_num: o.replica_num.max(1),
        soft_pin: o.flags & YUEBING_OPT_SOFT_PIN != 0,
        hard_pin: o.flags & YUEBING_OPT_HARD_PIN != 0,
        ..PutConfig::default()
    });
    let write = match o.flags & YUEBING_OPT_UPSERT != 0 {
        true => Write::Upsert,
        false => Write::Put,
    };
    Ok(Options {
        deadline: (o.timeout_ms != 0).then(|| Duration::from_millis(o.timeout_ms)),
        put,
        write,
        uncached: o.flags & YUEBING_OPT_UNCACHED != 0,
    })
}

/// A store client's config from C, and where its masters are (put into the config on a
/// bridge's runtime, see [`Masters::apply_call`]).
///
/// # Safety
/// `c`'s strings are NULL or NUL-terminated.
unsafe fn client_config(c: &yuebing_store_config) -> FfiResult<(ClientConfig, Masters)> {
    if c.flags != 0 {
        return Err(Failure::invalid(format!(
            "unknown store flags {:#x}",
            c.flags
        )));
    }
    let mut cfg = ClientConfig::default();
    // SAFETY: forwarded.
    let masters = unsafe { raw::text(c.master, "master") }?;
    if masters.split(',').all(|m| m.trim().is_empty()) {
        return Err(Failure::invalid("master names no endpoint"));
    }
    let masters = Masters::parse(&masters)?;
    // SAFETY: forwarded.
    if let Some(t) = unsafe { raw::optional_text(c.token, "token") }? {
        let token = yuebing_rpc::Token::new(t).map_err(crate::Error::from)?;
        cfg.token = Some(token.clone());
        cfg.engine.token = Some(token);
    }
    // SAFETY: forwarded.
    if let Some(bind) = unsafe { raw::optional_text(c.bind, "bind") }? {
        cfg.engine.bind = bind;
    }
    cfg.store_size = c.store_size;
    if c.staging_size != 0 {
        cfg.staging_size = c.staging_size;
    }
    if c.timeout_ms != 0 {
        cfg.deadline = Duration::from_millis(c.timeout_ms);
    }
    Ok((cfg, masters))
}

/// Starts a store client on `bridge` (0: the default bridge) and blocks until it has joined
/// the cluster.
///
/// # Safety
/// `config` is readable and its strings NUL-terminated; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_new(
    bridge: yuebing_bridge_t,
    config: *const yuebing_store_config,
    out: *mut yuebing_store_t,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: forwarded; a NULL tuning is allowed.
    unsafe { yuebing_store_new_tuned(bridge, config, std::ptr::null(), out, err) }
}

/// `yuebing_store_new` with `tuning` (NULL: all off): fewer round trips to the master.
///
/// # Safety
/// `config` is readable and its strings NUL-terminated; `tuning` NULL or readable; `out`
/// writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_new_tuned(
    bridge: yuebing_bridge_t,
    config: *const yuebing_store_config,
    tuning: *const yuebing_store_tuning,
    out: *mut yuebing_store_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        if config.is_null() {
            return Err(Failure::invalid("config is NULL"));
        }
        // SAFETY: non-NULL, readable, its strings NUL-terminated (the caller's promise).
        let (mut cfg, masters) = unsafe { client_config(&config.read()) }?;
        if !tuning.is_null() {
            // SAFETY: non-NULL and readable (the caller's promise).
            let t = unsafe { tuning.read() };
            if t.flags != 0 {
                return Err(Failure::invalid(format!(
                    "unknown tuning flags {:#x}",
                    t.flags
                )));
            }
            cfg.lease_cache = usize::try_from(t.lease_cache)
                .map_err(|_| Failure::invalid("lease_cache is past this machine's memory"))?;
            cfg.grant_size = t.grant_size;
        }
        let bridge = resolve(bridge)?;
        let cfg = bridge.wait_for(|| masters.apply_call(&bridge, cfg))?;
        let client = BlockingClient::start(&bridge, cfg)?;
        let h = insert_store(&client)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// A C handle for a store client started from Rust, so that Rust code can hand it to C code
/// (a plugin, or a benchmark of the ABI): release it with `yuebing_store_destroy`. Each handle
/// keeps its own record of memory registered through its engine handles (unregistered when
/// they are all gone); Rust may drop its own clones meanwhile.
pub fn store_handle(client: &BlockingClient) -> crate::Result<yuebing_store_t, i32> {
    insert_store(client).map_err(|f| f.code)
}

/// A new handle for `client`, with an engine object of its own.
fn insert_store(client: &BlockingClient) -> FfiResult<yuebing_store_t> {
    let engine = EngineObject::new(crate::BlockingEngine::from_engine(
        client.bridge(),
        client.client().engine().clone(),
    ));
    engine.insert(|engine| Object::Store(client.clone(), engine))
}

/// Releases a store handle. It does not wait for store calls in flight: they hold the client
/// and end normally (callbacks included). Call `yuebing_store_close` first to leave the cluster
/// gracefully. Memory registered through the client's engine handles is unregistered once the
/// last of them (this one included) is destroyed, as `yuebing_engine_destroy` describes: that
/// destroy waits for registrations under way on other threads and returns only once no byte
/// of that memory is touched any more. In a forked child the handle is removed but nothing of
/// the client is released (it is its parent's; see `yuebing_engine_destroy`):
/// `YUEBING_ERR_FORKED`.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_destroy(
    store: yuebing_store_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        if let Object::Store(client, engine) = handles::remove(store, Kind::Store)? {
            if let Err(forked) = client.bridge().not_forked() {
                super::engine_api::inherited((client, engine));
                return Err(forked.into());
            }
            engine.release();
        }
        Ok(())
    })
}

/// A handle of the client's own engine, to register memory for `get_into` and `put_from`
/// (destroy it with `yuebing_engine_destroy`).
///
/// # Safety
/// `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_engine(
    store: yuebing_store_t,
    out: *mut yuebing_engine_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        let (_, engine) = handles::store(store)?;
        let h = engine.insert(Object::Engine)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// Frees bytes returned by the library and empties `buf`; NULL or an empty buffer is a no-op.
///
/// # Safety
/// `buf` is NULL or a `yuebing_buf` filled by this library (or zeroed), not freed since.
#[no_mangle]
pub unsafe extern "C" fn yuebing_buf_free(buf: *mut yuebing_buf) {
    // SAFETY: forwarded.
    unsafe { raw::free_buf(buf) }
}

/// Frees a listing returned by `yuebing_store_list` and empties it; NULL is a no-op.
///
/// # Safety
/// `list` is NULL or a `yuebing_list` filled by this library (or zeroed), not freed since.
#[no_mangle]
pub unsafe extern "C" fn yuebing_list_free(list: *mut yuebing_list) {
    // SAFETY: forwarded.
    unsafe { raw::free_list(list) }
}

/// The client and the call's options of a store call, once calls can be made on its bridge:
/// a forked child is refused here (`YUEBING_ERR_FORKED`), before the call is made, because
/// making it is not free of effects (a put copies its value into the client's staging memory,
/// which the child shares with its parent).
///
/// # Safety
/// `opts` is NULL or readable.
pub(crate) unsafe fn target(
    store: yuebing_store_t,
    opts: *const yuebing_options,
) -> FfiResult<(BlockingClient, Options)> {
    let (client, _) = handles::store(store)?;
    client.bridge().usable()?;
    // SAFETY: forwarded.
    Ok((client, unsafe { options(opts) }?))
}

/// A store call on one text argument (a key, a pattern; `what` names it in errors): decodes
/// the handle, the options and the text, then makes the future of `call` (the one `Client`
/// method) into an [`Op`].
///
/// # Safety
/// `text` is NULL or NUL-terminated; `opts` NULL or readable.
pub(crate) unsafe fn text_op<T, E, F>(
    store: yuebing_store_t,
    (text, what): (*const c_char, &str),
    opts: *const yuebing_options,
    call: impl FnOnce(&Client, String, Options) -> F,
) -> FfiResult<Op<T>>
where
    T: Send + 'static,
    E: Into<crate::Error>,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let text = unsafe { raw::text(text, what) }?;
    Ok(Op::new(client.bridge(), call(client.client(), text, opts)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::error::YUEBING_ERR_INVALID_ARGUMENT;

    /// `options` of a struct with these fields.
    fn decoded(timeout_ms: u64, replica_num: u32, flags: u32) -> FfiResult<Options> {
        let o = yuebing_options {
            timeout_ms,
            replica_num,
            flags,
        };
        // SAFETY: a readable struct.
        unsafe { options(&o) }
    }

    #[test]
    fn the_upsert_bit_is_the_write_mode_and_nothing_else() {
        // NULL and zeroed options are the client's defaults, a put.
        // SAFETY: NULL is allowed.
        let none = unsafe { options(std::ptr::null()) }.unwrap();
        let zeroed = decoded(0, 0, 0).unwrap();
        for o in [&none, &zeroed] {
            assert_eq!((o.deadline, &o.put, o.write), (None, &None, Write::Put));
        }

        // The upsert bit alone: an upsert with the client's replica settings (no `PutConfig`
        // that would replace its replica count and pins).
        let upsert = decoded(0, 0, YUEBING_OPT_UPSERT).unwrap();
        assert_eq!((&upsert.put, upsert.write), (&None, Write::Upsert));
        let timed = decoded(250, 0, YUEBING_OPT_UPSERT).unwrap();
        assert_eq!(timed.deadline, Some(Duration::from_millis(250)));
        assert_eq!((&timed.put, timed.write), (&None, Write::Upsert));

        // With replica settings, those settings, whether the bit is there or not.
        let pinned = PutConfig {
            replica_num: 3,
            hard_pin: true,
            ..PutConfig::default()
        };
        for (flags, write) in [
            (YUEBING_OPT_HARD_PIN, Write::Put),
            (YUEBING_OPT_HARD_PIN | YUEBING_OPT_UPSERT, Write::Upsert),
        ] {
            let o = decoded(0, 3, flags).unwrap();
            assert_eq!(
                (o.put.as_ref(), o.write),
                (Some(&pinned), write),
                "{flags:#x}"
            );
        }
        let soft = decoded(0, 0, YUEBING_OPT_SOFT_PIN | YUEBING_OPT_UPSERT).unwrap();
        let soft_cfg = PutConfig {
            soft_pin: true,
            ..PutConfig::default()
        };
        assert_eq!(
            (soft.put.as_ref(), soft.write),
            (Some(&soft_cfg), Write::Upsert)
        );

        // The uncached bit asks reads not to use kept locations, and changes nothing else.
        let uncached = decoded(0, 0, YUEBING_OPT_UNCACHED).unwrap();
        assert!(uncached.uncached && uncached.put.is_none() && uncached.write == Write::Put);
        assert!(!decoded(0, 0, 0).unwrap().uncached);

        // Any other bit is refused, with the known ones or without them.
        for flags in [16, 16 | YUEBING_OPT_UPSERT, 0x80] {
            let e = decoded(0, 0, flags).unwrap_err();
            assert_eq!(e.code, YUEBING_ERR_INVALID_ARGUMENT, "{flags:#x}");
        }
    }
}
