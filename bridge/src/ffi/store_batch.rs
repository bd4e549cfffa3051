//! The store client's batch calls in blocking and callback forms: one master call for the
//! whole batch, a code (and a value) per item. The function's own code says whether the batch
//! ran; `codes[i]` says how item i fared.

use std::ffi::{c_char, c_void};
use std::future::Future;

use yuebing_store::{Client, Fragment, Options};

use crate::Each;

use super::deliver::{required, Op, UserData};
use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, Object};
use super::raw;
use super::store_api::target;
use super::store_ops::{check_range, switch};
use super::types::*;

/// `n` keys.
///
/// # Safety
/// `keys` valid for `n` pointers, each NUL-terminated.
pub(crate) unsafe fn keys(keys: *const *const c_char, n: usize) -> FfiResult<Vec<String>> {
    // SAFETY: forwarded contract.
    let ptrs = unsafe { raw::array(keys, n, "keys") }?;
    // SAFETY: forwarded contract.
    ptrs.into_iter()
        .map(|p| unsafe { raw::text(p, "a key") })
        .collect()
}

/// A store call on `n` keys: decodes the handle, the options and the keys, then makes the
/// future of `call` (the one `Client` method) into an [`Op`].
///
/// # Safety
/// `k` valid for `n` pointers, each NUL-terminated; `opts` NULL or readable.
pub(crate) unsafe fn keys_op<T, F>(
    store: yuebing_store_t,
    (k, n): (*const *const c_char, usize),
    opts: *const yuebing_options,
    call: impl FnOnce(&Client, Vec<String>, Options) -> F,
) -> FfiResult<Op<Each<T>>>
where
    T: Send + 'static,
    F: Future<Output = yuebing_store::Result<Each<T>>> + Send + 'static,
{
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let k = unsafe { keys(k, n) }?;
    Ok(Op::new(client.bridge(), call(client.client(), k, opts)))
}

/// `n` `(key, addr, len)` ranges of registered memory; overflowing ones are refused.
///
/// # Safety
/// Each array valid for `n` elements, keys NUL-terminated.
unsafe fn c_ranges(
    k: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
) -> FfiResult<Vec<(String, u64, u64)>> {
    // SAFETY: forwarded contract.
    let (k, a, l) = unsafe {
        (
            keys(k, n)?,
            raw::array(addrs, n, "addrs")?,
            raw::array(lens, n, "lens")?,
        )
    };
    let items: Vec<_> = k
        .into_iter()
        .zip(a)
        .zip(l)
        .map(|((k, a), l)| (k, a, l))
        .collect();
    for (_, a, l) in &items {
        check_range(*a, *l)?;
    }
    Ok(items)
}

/// `n` groups of `T`: group i is the next `counts[i]` elements of `items`, which holds their
/// sum (an overflowing sum is refused before `items` is read). With the total.
///
/// # Safety
/// `counts` valid for `n` elements, `items` for the sum of them.
unsafe fn grouped<T: Copy>(
    counts: *const usize,
    n: usize,
    items: *const T,
    what: &str,
) -> FfiResult<(Vec<Vec<T>>, usize)> {
    // SAFETY: forwarded contract.
    let counts = unsafe { raw::array(counts, n, "counts") }?;
    let total = counts
        .iter()
        .try_fold(0usize, |sum, &c| sum.checked_add(c))
        .ok_or_else(|| Failure::invalid("counts: their sum overflows"))?;
    // SAFETY: forwarded contract (`items` holds the sum of `counts` elements).
    let all = unsafe { raw::array(items, total, what) }?;
    let mut rest = all.as_slice();
    let groups = counts
        .iter()
        .map(|&c| {
            let (mine, next) = rest.split_at(c);
            rest = next;
            mine.to_vec()
        })
        .collect();
    Ok((groups, total))
}

/// One key's buffers of registered memory: address and length of each.
type BufferList = Vec<(u64, u64)>;

/// `n` keys, each with the next `counts[i]` buffers of registered memory (`addrs`, `lens`).
///
/// # Safety
/// `k` and `counts` valid for `n` elements, keys NUL-terminated; `addrs` and `lens` for the
/// sum of `counts`.
unsafe fn c_buffer_lists(
    k: *const *const c_char,
    counts: *const usize,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
) -> FfiResult<(Vec<String>, Vec<BufferList>)> {
    // SAFETY: forwarded contract.
    let (k, (a, total)) = unsafe { (keys(k, n)?, grouped(counts, n, addrs, "addrs")?) };
    // SAFETY: forwarded contract; `lens` holds as many elements as `addrs`.
    let l = unsafe { raw::array(lens, total, "lens") }?;
    let mut l = l.into_iter();
    let lists = a
        .into_iter()
        .map(|addrs| addrs.into_iter().zip(l.by_ref()).collect())
        .collect();
    Ok((k, lists))
}

/// A batch's items as the client takes them: each key with its list.
fn borrowed<'a, T>(keys: &'a [String], lists: &'a [Vec<T>]) -> Vec<(&'a str, &'a [T])> {
    keys.iter()
        .zip(lists)
        .map(|(k, l)| (k.as_str(), l.as_slice()))
        .collect()
}

/// The batch's results, refused unless there is exactly one per item: the caller's arrays hold
/// `n` elements, and an answer of another length (a faulty master) must write none of them.
pub(crate) fn counted<T: Send + 'static>(op: Op<Each<T>>, n: usize) -> Op<Each<T>> {
    op.try_map(move |each| match each.len() == n {
        true => Ok(each),
        false => Err(yuebing_rpc::Error::Protocol {
            reason: format!("{} results for a batch of {n}", each.len()),
        }
        .into()),
    })
}

/// Per-item codes and numbers of a batch's results.
fn split<T>(each: Each<T>, value: fn(T) -> u64) -> (Vec<i32>, Vec<u64>) {
    each.into_iter()
        .map(|r| match r {
            Ok(v) => (0, value(v)),
            Err(e) => (e.code(), 0),
        })
        .unzip()
}

/// Waits for a batch and writes its codes (required) and numbers (optional), `n` each.
pub(crate) fn wait_each<T: Send + 'static>(
    op: Op<Each<T>>,
    n: usize,
    codes_out: *mut i32,
    values_out: *mut u64,
    value: fn(T) -> u64,
) -> FfiResult<()> {
    raw::check_out_array(codes_out, n, "codes_out")?;
    if !values_out.is_null() {
        raw::check_out_array(values_out, n, "values_out")?;
    }
    let (codes, values) = split(counted(op, n).wait()?, value);
    // SAFETY: each output is valid for `n` elements (the caller's promise; checked above), and
    // a batch answers one result per item.
    unsafe {
        raw::write_array(codes_out, codes);
        if !values_out.is_null() {
            raw::write_array(values_out, values);
        }
    }
    Ok(())
}

/// Starts a batch whose outcome goes to a [`yuebing_each_cb`].
pub(crate) fn then_each<T: Send + 'static>(
    op: Op<Each<T>>,
    n: usize,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    value: fn(T) -> u64,
) -> FfiResult<()> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    counted(op, n).then(call_out, move |code, msg, each| {
        let (codes, values) = each.map(|e| split(e, value)).unwrap_or_default();
        let (c, v) = match !codes.is_empty() {
            true => (codes.as_ptr(), values.as_ptr()),
            false => (std::ptr::null(), std::ptr::null()),
        };
        // SAFETY: the caller's callback, called once; the arrays outlive it.
        unsafe { f(ud.get(), code, msg, codes.len(), c, v) }
    })
}

/// Each result's code and a new handle for its object (made by `object`; 0 for a failed item,
/// and for one whose handle could not be made: its code says why).
fn handles_of<T>(each: Each<T>, object: fn(T) -> Object) -> (Vec<i32>, Vec<u64>) {
    each.into_iter()
        .map(|r| {
            match r
                .map_err(Failure::from)
                .and_then(|v| handles::insert(object(v)))
            {
                Ok(h) => (0, h),
                Err(e) => (e.code, 0),
            }
        })
        .unzip()
}

/// Waits for a batch whose items become handles (see [`handles_of`]: made after the wait, so
/// that no call that ends another way leaves one behind) and writes the codes and the handles,
/// `n` of each, into the two required outputs (`what` names the second).
pub(crate) fn wait_each_handles<T: Send + 'static>(
    op: Op<Each<T>>,
    n: usize,
    (codes_out, handles_out, what): (*mut i32, *mut u64, &str),
    object: fn(T) -> Object,
) -> FfiResult<()> {
    raw::check_out_array(codes_out, n, "codes_out")?;
    raw::check_out_array(handles_out, n, what)?;
    let (codes, handles) = handles_of(counted(op, n).wait()?, object);
    // SAFETY: both outputs are writable for `n` elements (the caller's promise, checked above),
    // and a counted batch answers one result per item.
    unsafe {
        raw::write_array(codes_out, codes);
        raw::write_array(handles_out, handles);
    }
    Ok(())
}

/// Starts a batch whose items become handles, delivered to a [`yuebing_each_cb`] as its
/// values: made on the callback thread just before the call (the caller's from then on).
pub(crate) fn then_each_handles<T: Send + 'static>(
    op: Op<Each<T>>,
    n: usize,
    (cb, user_data, call_out): (yuebing_each_cb, *mut c_void, *mut yuebing_call_t),
    object: fn(T) -> Object,
) -> FfiResult<()> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    counted(op, n).then(call_out, move |code, msg, each| {
        let (codes, handles) = each.map(|e| handles_of(e, object)).unwrap_or_default();
        let (c, v) = match codes.is_empty() {
            false => (codes.as_ptr(), handles.as_ptr()),
            true => (std::ptr::null(), std::ptr::null()),
        };
        // SAFETY: the caller's callback, called once; the arrays outlive it.
        unsafe { f(ud.get(), code, msg, codes.len(), c, v) }
    })
}

/// The fragments of a ranged call as the client takes them: item i's are the next `counts[i]`
/// of `fragments`. With their total.
///
/// # Safety
/// `counts` valid for `n` elements, `fragments` for the sum of them.
pub(crate) unsafe fn fragment_lists(
    counts: *const usize,
    n: usize,
    fragments: *const yuebing_fragment,
) -> FfiResult<(Vec<Vec<Fragment>>, usize)> {
    // SAFETY: forwarded contract.
    let (groups, total) = unsafe { grouped(counts, n, fragments, "fragments") }?;
    let lists = groups
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|f| Fragment {
                    addr: f.addr,
                    offset: f.offset,
                    len: f.len,
                })
                .collect()
        })
        .collect();
    Ok((lists, total))
}

/// Items of a ranged call on handle objects (locations, reservations): each object with its
/// fragments.
pub(crate) fn with_fragments<'a, T>(
    objects: &'a [std::sync::Arc<T>],
    lists: &'a [Vec<Fragment>],
) -> Vec<(&'a T, &'a [Fragment])> {
    objects
        .iter()
        .map(|o| &**o)
        .zip(lists.iter().map(Vec::as_slice))
        .collect()
}

/// Waits for a batch and writes its codes and its values (an item's made by `to_c`, a failed
/// item's by `failed`), `n` of each, into the two required outputs (`what` names the second).
pub(crate) fn wait_each_values<T: Send + 'static, C>(
    op: Op<Each<T>>,
    n: usize,
    (codes_out, values_out, what): (*mut i32, *mut C, &str),
    to_c: fn(T) -> C,
    failed: fn() -> C,
) -> FfiResult<()> {
    raw::check_out_array(codes_out, n, "codes_out")?;
    raw::check_out_array(values_out, n, what)?;
    let (codes, values): (Vec<i32>, Vec<C>) = counted(op, n)
        .wait()?
        .into_iter()
        .map(|r| match r {
            Ok(v) => (0, to_c(v)),
            Err(e) => (e.code(), failed()),
        })
        .unzip();
    // SAFETY: both outputs are writable for `n` elements (the caller's promise, checked
    // above), and a counted batch answers one result per item.
    unsafe {
        raw::write_array(codes_out, codes);
        raw::write_array(values_out, values);
    }
    Ok(())
}

/// A batch callback that is handed each item's code and a C value lent to it.
pub(crate) type EachLentCb<C> =
    Option<unsafe extern "C" fn(*mut c_void, i32, *const c_char, usize, *const i32, *const C)>;

/// Starts a batch whose outcome goes to `cb` (with its `user_data`; a cancel handle to
/// `call_out`) as codes and C values: `lend` makes an item's value (from its result, failed
/// or not), valid until the callback returns, and `release` frees what it holds afterwards.
pub(crate) fn then_each_lent<T: Send + 'static, C: 'static>(
    op: Op<Each<T>>,
    n: usize,
    (cb, user_data, call_out): (EachLentCb<C>, *mut c_void, *mut yuebing_call_t),
    lend: fn(&yuebing_store::Result<T>) -> C,
    release: fn(&mut C),
) -> FfiResult<()> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    counted(op, n).then(call_out, move |code, msg, each| {
        let each = each.unwrap_or_default();
        let codes: Vec<i32> = each
            .iter()
            .map(|r| r.as_ref().map_or_else(|e| e.code(), |_| 0))
            .collect();
        let mut values: Vec<C> = each.iter().map(lend).collect();
        let (c, v) = match !codes.is_empty() {
            true => (codes.as_ptr(), values.as_ptr()),
            false => (std::ptr::null(), std::ptr::null()),
        };
        // SAFETY: the caller's callback, called once; `each`, `codes` and `values` (which may
        // point into `each`) outlive it.
        unsafe { f(ud.get(), code, msg, codes.len(), c, v) };
        values.iter_mut().for_each(release);
    })
}

/// The value of an item that answers none: 0.
pub(crate) fn nothing(_: ()) -> u64 {
    0
}

/// The value of an item that answers a number: itself.
pub(crate) fn identity(v: u64) -> u64 {
    v
}

/// `batch_put`: the values are copied before the function returns.
unsafe fn batch_put_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    values: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<()>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, values) = unsafe {
        (
            keys(k, n)?,
            raw::buffers(values, lens, n, ("values", "a value"))?,
        )
    };
    let items: Vec<(&str, &[u8])> = k
        .iter()
        .zip(&values)
        .map(|(k, v)| (k.as_str(), &v[..]))
        .collect();
    Ok(Op::new(
        client.bridge(),
        client.client().batch_put(&items, opts),
    ))
}

/// Stores `n` values (`values[i]` of `lens[i]` bytes, copied before the function returns)
/// under `keys[i]`; item i's code goes to `codes_out[i]` (`YUEBING_ERR_OBJECT_ALREADY_EXISTS`
/// for a key that exists, unless `opts` has `YUEBING_OPT_UPSERT`: then it replaces the value).
///
/// # Safety
/// Arrays valid for `n` elements, keys NUL-terminated, each value valid for its length;
/// `codes_out` writable for `n`; `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put(
    store: yuebing_store_t,
    keys: *const *const c_char,
    values: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_op(store, keys, values, lens, n, opts) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_put` in callback form (`values` in the callback are 0). Returns 0 and
/// then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_put`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    values: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_op(store, keys, values, lens, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

/// `batch_put_from`: registered memory, read until the call ends.
unsafe fn batch_put_from_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<()>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let items = unsafe { c_ranges(k, addrs, lens, n) }?;
    Ok(Op::new(
        client.bridge(),
        client.client().batch_put_from(&items, opts),
    ))
}

/// Stores `n` ranges of registered memory (`addrs[i]`, `lens[i]`) under `keys[i]` without a
/// copy (the memory is read until the call ends); item i's code goes to `codes_out[i]`
/// (`YUEBING_ERR_OBJECT_ALREADY_EXISTS` for a key that exists, unless `opts` has
/// `YUEBING_OPT_UPSERT`: then it replaces the value).
///
/// # Safety
/// Arrays valid for `n` elements, keys NUL-terminated; `codes_out` writable for `n`; `opts`
/// NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put_from(
    store: yuebing_store_t,
    keys: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_from_op(store, keys, addrs, lens, n, opts) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_put_from` in callback form. Returns 0 and then calls `cb` exactly
/// once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_put_from`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put_from_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_from_op(store, keys, addrs, lens, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

unsafe fn batch_get_into_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<u64>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let items = unsafe { c_ranges(k, addrs, lens, n) }?;
    Ok(Op::new(
        client.bridge(),
        client.client().batch_get_into(&items, opts),
    ))
}

/// Reads `keys[i]` into registered memory (`addrs[i]`, `lens[i]`) without a copy; item i's
/// code goes to `codes_out[i]` and its size to `sizes_out[i]` (NULL: not wanted). The memory
/// is written until the call ends.
///
/// # Safety
/// Arrays valid for `n` elements, keys NUL-terminated; `codes_out` (and `sizes_out` unless
/// NULL) writable for `n`; `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_into(
    store: yuebing_store_t,
    keys: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    sizes_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_into_op(store, keys, addrs, lens, n, opts) }?;
        wait_each(op, n, codes_out, sizes_out, identity)
    })
}

/// `yuebing_store_batch_get_into` in callback form (`values` are the sizes). Returns 0 and then
/// calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_get_into`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_into_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_into_op(store, keys, addrs, lens, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, identity)
    })
}

/// `batch_put_from_buffers`: key i's value gathered from its buffers.
unsafe fn batch_put_from_buffers_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    counts: *const usize,
    (addrs, lens): (*const u64, *const u64),
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<()>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, lists) = unsafe { c_buffer_lists(k, counts, addrs, lens, n) }?;
    let put = client
        .client()
        .batch_put_from_buffers(&borrowed(&k, &lists), opts);
    Ok(Op::new(client.bridge(), put))
}

/// Stores `n` values, each gathered without a copy from several buffers of registered memory
/// (per-layer KV blocks): key i's value is its next `counts[i]` buffers (`addrs`, `lens`,
/// which hold the sum of `counts`) end to end; item i's code goes to `codes_out[i]` (as in
/// `yuebing_store_batch_put_from`, `YUEBING_OPT_UPSERT` included). The memory is read until
/// the call ends.
///
/// # Safety
/// `keys` and `counts` valid for `n` elements, keys NUL-terminated; `addrs` and `lens` valid
/// for the sum of `counts`; `codes_out` writable for `n`; `opts` NULL or readable; `err` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put_from_buffers(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_from_buffers_op(store, keys, counts, (addrs, lens), n, opts) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_put_from_buffers` in callback form. Returns 0 and then calls `cb`
/// exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_put_from_buffers`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_put_from_buffers_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_put_from_buffers_op(store, keys, counts, (addrs, lens), n, opts) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

/// `batch_get_into_buffers`: key i spread over its buffers.
unsafe fn batch_get_into_buffers_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    counts: *const usize,
    (addrs, lens): (*const u64, *const u64),
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<u64>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, lists) = unsafe { c_buffer_lists(k, counts, addrs, lens, n) }?;
    let get = client
        .client()
        .batch_get_into_buffers(&borrowed(&k, &lists), opts);
    Ok(Op::new(client.bridge(), get))
}

/// Reads `n` objects without a copy, each spread over several buffers of registered memory:
/// key i fills its next `counts[i]` buffers (`addrs`, `lens`, which hold the sum of
/// `counts`) in order. Item i's code goes to `codes_out[i]` and its size to `sizes_out[i]`
/// (NULL: not wanted); buffers with less room in all than the object are
/// `YUEBING_ERR_INVALID_PARAMS` for that item and nothing is written there. The memory is
/// written until the call ends.
///
/// # Safety
/// `keys` and `counts` valid for `n` elements, keys NUL-terminated; `addrs` and `lens` valid
/// for the sum of `counts`; `codes_out` (and `sizes_out` unless NULL) writable for `n`; `opts`
/// NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_into_buffers(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    sizes_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_into_buffers_op(store, keys, counts, (addrs, lens), n, opts) }?;
        wait_each(op, n, codes_out, sizes_out, identity)
    })
}

/// `yuebing_store_batch_get_into_buffers` in callback form (`values` are the sizes). Returns
/// 0 and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_get_into_buffers`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_into_buffers_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    addrs: *const u64,
    lens: *const u64,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_into_buffers_op(store, keys, counts, (addrs, lens), n, opts) }?;
        then_each(op, n, cb, user_data, call_out, identity)
    })
}

/// `batch_get_ranges`: item i is `keys[i]` with the next `counts[i]` of `fragments`; the
/// results come flat, one per fragment, in order. Returns the op and the number of fragments.
unsafe fn batch_get_ranges_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<(Op<Each<u64>>, usize)> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, (lists, total)) = unsafe { (keys(k, n)?, fragment_lists(counts, n, fragments)?) };
    let read = client
        .client()
        .batch_get_ranges(&borrowed(&k, &lists), opts);
    let flat = async move {
        let each: Each<u64> = read.await?.into_iter().flatten().collect();
        Ok::<_, yuebing_store::Error>(each)
    };
    Ok((Op::new(client.bridge(), flat), total))
}

/// Reads parts of objects into registered memory without a copy: item i reads, for each of
/// the next `counts[i]` elements of `fragments` (`addr`, `offset`, `len`), `len` bytes at
/// `offset` inside object `keys[i]` into `addr`. The results are one per fragment, in order:
/// its code to `codes_out` and its length to `lens_out` (NULL: not wanted), both holding the
/// sum of `counts`. A fragment outside its object is `YUEBING_ERR_INVALID_PARAMS` in its
/// place, and the item's others are still read; a key that cannot be read answers its code
/// in each of its fragments. The memory is written until the call ends.
///
/// # Safety
/// `keys` and `counts` valid for `n` elements, keys NUL-terminated; `fragments` valid for
/// the sum of `counts` elements, and `codes_out` (and `lens_out` unless NULL) writable for
/// as many; `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_ranges(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    lens_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let (op, total) = unsafe { batch_get_ranges_op(store, keys, counts, fragments, n, opts) }?;
        wait_each(op, total, codes_out, lens_out, identity)
    })
}

/// `yuebing_store_batch_get_ranges` in callback form: `cb` gets one code and one length per
/// fragment. Returns 0 and then calls `cb` exactly once, or returns an error and never calls
/// it.
///
/// # Safety
/// As `yuebing_store_batch_get_ranges`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_ranges_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let (op, total) = unsafe { batch_get_ranges_op(store, keys, counts, fragments, n, opts) }?;
        then_each(op, total, cb, user_data, call_out, identity)
    })
}

unsafe fn batch_exist_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<bool>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let k = unsafe { keys(k, n) }?;
    Ok(Op::new(
        client.bridge(),
        client.client().batch_exist(&k, opts),
    ))
}

/// Whether each of `n` keys exists: item i's code goes to `codes_out[i]` and 1 or 0 to
/// `exists_out[i]` (NULL: not wanted).
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `codes_out` (and `exists_out` unless NULL)
/// writable for `n`; `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_exist(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    exists_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_exist_op(store, keys, n, opts) }?;
        wait_each(op, n, codes_out, exists_out, u64::from)
    })
}

/// `yuebing_store_batch_exist` in callback form (`values` are 1 or 0). Returns 0 and then
/// calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_exist`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_exist_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_exist_op(store, keys, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, u64::from)
    })
}

/// `batch_remove`.
unsafe fn batch_remove_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    n: usize,
    force: u32,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<()>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, force) = (unsafe { keys(k, n) }?, switch(force, "force")?);
    Ok(Op::new(
        client.bridge(),
        client.client().batch_remove(&k, force, opts),
    ))
}

/// Removes each of `n` keys (`force` 1: even those readers hold leases on; 0 or 1): item i's
/// code goes to `codes_out[i]`.
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `codes_out` writable for `n`; `opts` NULL or
/// readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_remove(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    force: u32,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_remove_op(store, keys, n, force, opts) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_remove` in callback form (`values` are 0). Returns 0 and then calls
/// `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_remove`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_remove_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    force: u32,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_remove_op(store, keys, n, force, opts) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

/// `batch_replica_clear`, as one result per key: whether it was cleared.
///
/// # Safety
/// `k` valid for `n` NUL-terminated keys; `node` NULL or NUL-terminated; `opts` NULL or
/// readable.
unsafe fn batch_replica_clear_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    n: usize,
    node: *const c_char,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<bool>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let k = unsafe { keys(k, n) }?;
    let node = match node.is_null() {
        true => String::new(),
        // SAFETY: non-NULL, NUL-terminated (the caller's promise).
        false => unsafe { raw::text(node, "node") }?,
    };
    let cleared = client.client().batch_replica_clear(&k, node, opts);
    let each = async move {
        let cleared: std::collections::HashSet<String> = cleared.await?.into_iter().collect();
        let each: Each<bool> = k.iter().map(|key| Ok(cleared.contains(key))).collect();
        Ok::<_, yuebing_store::Error>(each)
    };
    Ok(Op::new(client.bridge(), each))
}

/// Drops the replicas of `n` keys on node `node` (all their replicas when `node` is NULL or
/// empty) where nothing uses the object: no read lease, no write in progress, no access for a
/// lease TTL; an object left with no replica is removed (Mooncake's `batch_replica_clear`).
/// Item i's code goes to `codes_out[i]` (0) and 1 (cleared) or 0 (skipped) to
/// `cleared_out[i]` (NULL: not wanted).
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `node` NULL or NUL-terminated; `codes_out` (and
/// `cleared_out` unless NULL) writable for `n`; `opts` NULL or readable; `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_replica_clear(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    node: *const c_char,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    cleared_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_replica_clear_op(store, keys, n, node, opts) }?;
        wait_each(op, n, codes_out, cleared_out, u64::from)
    })
}

/// `yuebing_store_batch_replica_clear` in callback form (`values` are 1 for a key cleared, 0
/// for one skipped). Returns 0 and then calls `cb` exactly once, or returns an error and never
/// calls it.
///
/// # Safety
/// As `yuebing_store_batch_replica_clear`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_replica_clear_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    node: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_replica_clear_op(store, keys, n, node, opts) }?;
        then_each(op, n, cb, user_data, call_out, u64::from)
    })
}

unsafe fn batch_get_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<Vec<u8>>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let k = unsafe { keys(k, n) }?;
    Ok(Op::new(
        client.bridge(),
        client.client().batch_get(&k, opts),
    ))
}

/// The values of `n` keys: item i's code goes to `codes_out[i]` and its bytes to
/// `values_out[i]` (free each with `yuebing_buf_free`; a failed item's is empty).
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `codes_out` and `values_out` writable for `n`;
/// `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    values_out: *mut yuebing_buf,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_op(store, keys, n, opts) }?;
        let outs = (codes_out, values_out, "values_out");
        wait_each_values(op, n, outs, raw::into_buf, || raw::into_buf(Vec::new()))
    })
}

/// `yuebing_store_batch_get` in callback form: the values are lent to the callback. Returns 0
/// and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_get`; `user_data` usable on the callback thread; `call_out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_get_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_bytes_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_get_op(store, keys, n, opts) }?;
        then_each_lent(op, n, (cb, user_data, call_out), view, |_| {})
    })
}

/// A view of an item's bytes, lent to a callback (empty for a failed item).
fn view(r: &yuebing_store::Result<Vec<u8>>) -> yuebing_bytes {
    let v = r.as_deref().unwrap_or_default();
    yuebing_bytes {
        data: raw::data_or_null(v),
        len: v.len(),
    }
}
