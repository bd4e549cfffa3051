//! The audited C boundary: every pointer a C caller hands over is read here, and every buffer
//! handed to C is made and taken back here. Nothing outside this module (and the engine's own
//! `memory/raw.rs`) builds a slice from a raw pointer or copies raw memory;
//! `scripts/check_raw_memory.sh` checks it.
//!
//! What the caller promises (the header says it): a non-NULL pointer points to as many valid
//! elements as its length says, strings are NUL-terminated, and none of it is freed or changed
//! by the caller until the function returns. Byte buffers are copied without forming a Rust
//! reference over them, so they may even be registered memory that a peer writes meanwhile.

use std::ffi::{c_char, CStr, CString};

use super::error::{Failure, FfiResult};
use super::types::{yuebing_buf, yuebing_list, yuebing_listed, yuebing_replica, yuebing_replicas};

/// A NUL-terminated UTF-8 string argument; NULL is an error.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
pub(crate) unsafe fn text(p: *const c_char, what: &str) -> FfiResult<String> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, NUL-terminated and unchanged during the call (the caller's promise).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(str::to_string)
        .map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// An optional string argument: NULL is `None`.
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn optional_text(p: *const c_char, what: &str) -> FfiResult<Option<String>> {
    match p.is_null() {
        true => Ok(None),
        // SAFETY: forwarded.
        false => unsafe { text(p, what) }.map(Some),
    }
}

/// Checks a `(pointer, count)` pair of `T`s: a NULL pointer only with a zero count, and a
/// byte length that fits in `isize`.
fn check_array<T>(p: *const T, n: usize, what: &str) -> FfiResult<()> {
    if p.is_null() && n > 0 {
        return Err(Failure::invalid(format!("{what} is NULL with length {n}")));
    }
    match n.checked_mul(std::mem::size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(Failure::invalid(format!("{what}: length {n} overflows"))),
    }
}

/// Copies `len` bytes at `data` into a new vector, without a reference over them.
///
/// # Safety
/// `data` is NULL (then `len` must be 0) or valid for `len` bytes of reads during the call.
pub(crate) unsafe fn bytes(data: *const u8, len: usize, what: &str) -> FfiResult<Vec<u8>> {
    check_array(data, len, what)?;
    let mut out = Vec::with_capacity(len);
    if len > 0 {
        // SAFETY: `data` is valid for `len` bytes (the caller's promise, checked non-NULL
        // above); `out` has room for `len`; a fresh vector cannot overlap caller memory. A raw
        // copy forms no reference over memory a peer may write.
        unsafe {
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr(), len);
            out.set_len(len);
        }
    }
    Ok(out)
}

/// Reads `n` elements of a C array into a vector.
///
/// # Safety
/// `p` is NULL (then `n` must be 0) or points to `n` initialised, aligned `T`s, unchanged
/// during the call.
pub(crate) unsafe fn array<T: Copy>(p: *const T, n: usize, what: &str) -> FfiResult<Vec<T>> {
    check_array(p, n, what)?;
    // SAFETY: `i < n` elements are valid and aligned (the caller's promise, checked above).
    Ok((0..n).map(|i| unsafe { p.add(i).read() }).collect())
}

/// Checks an output array of `n` elements before any work starts.
pub(crate) fn check_out_array<T>(p: *mut T, n: usize, what: &str) -> FfiResult<()> {
    check_array(p.cast_const(), n, what)
}

/// Writes `values` into an output array checked by [`check_out_array`] for as many elements.
///
/// # Safety
/// `p` is valid for writes of `values.len()` elements.
pub(crate) unsafe fn write_array<T>(p: *mut T, values: Vec<T>) {
    for (i, v) in values.into_iter().enumerate() {
        // SAFETY: within the array the caller promised.
        unsafe { p.add(i).write(v) };
    }
}

/// Checks a required output pointer before any work starts.
pub(crate) fn check_out<T>(p: *mut T, what: &str) -> FfiResult<()> {
    match p.is_null() {
        true => Err(Failure::invalid(format!("{what} is NULL"))),
        false => Ok(()),
    }
}

/// Writes a value through an output pointer checked by [`check_out`] (NULL is skipped).
///
/// # Safety
/// `p` is NULL or valid for a write of one `T`.
pub(crate) unsafe fn write<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller's promise.
        unsafe { p.write(v) };
    }
}

/// A pointer to lend `v`'s bytes to C: NULL when empty, as the header says.
pub(crate) fn data_or_null(v: &[u8]) -> *const u8 {
    match v.is_empty() {
        true => std::ptr::null(),
        false => v.as_ptr(),
    }
}

/// Hands bytes to C: freed by [`free_buf`] (`yuebing_buf_free`). Empty bytes are `{NULL, 0}`.
pub(crate) fn into_buf(v: Vec<u8>) -> yuebing_buf {
    if v.is_empty() {
        return yuebing_buf {
            data: std::ptr::null_mut(),
            len: 0,
        };
    }
    let boxed = v.into_boxed_slice();
    let len = boxed.len();
    let data = Box::into_raw(boxed).cast::<u8>();
    yuebing_buf { data, len }
}

/// Frees bytes handed over by [`into_buf`] and empties the buffer; an empty one is left as is.
///
/// # Safety
/// `buf` is NULL or points to a `yuebing_buf` that is empty or was filled by this library and
/// not freed since.
pub(crate) unsafe fn free_buf(buf: *mut yuebing_buf) {
    if buf.is_null() {
        return;
    }
    // SAFETY: a valid `yuebing_buf` (the caller's promise).
    let b = unsafe { buf.read() };
    if !b.data.is_null() {
        // SAFETY: `data`/`len` came from `Box::into_raw` of a boxed slice of `len` bytes in
        // `into_buf`, and were not freed since.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(b.data, b.len)) });
    }
    // SAFETY: as above.
    unsafe {
        buf.write(yuebing_buf {
            data: std::ptr::null_mut(),
            len: 0,
        })
    };
}

/// Hands `items` to C as a boxed slice: its pointer and length, taken back by [`take_items`].
/// No items are NULL and 0, as the header says: a boxed empty slice's pointer is dangling,
/// not NULL, and a C caller may test it.
fn into_items<T>(items: Vec<T>) -> (*mut T, usize) {
    match items.len() {
        0 => (std::ptr::null_mut(), 0),
        len => (Box::into_raw(items.into_boxed_slice()).cast::<T>(), len),
    }
}

/// Copies `text`, NUL-terminated, into `buf` of `cap` bytes; its length (without the NUL)
/// goes to `len_out`. `InvalidArgument` (naming `what`) if it does not fit: `len_out` still
/// says how long it is.
///
/// # Safety
/// `buf` valid for `cap` bytes of writes; `len_out` NULL or writable.
pub(crate) unsafe fn write_text(
    buf: *mut c_char,
    cap: usize,
    len_out: *mut usize,
    text: &str,
    what: &str,
) -> FfiResult<()> {
    check_out_array(buf, cap, "buf")?;
    let text = super::error::c_string(text);
    let bytes = text.as_bytes_with_nul();
    // SAFETY: NULL or writable (the caller's promise).
    unsafe { write(len_out, bytes.len() - 1) };
    if bytes.len() > cap {
        return Err(Failure::invalid(format!(
            "{what} needs {} bytes",
            bytes.len()
        )));
    }
    // SAFETY: `buf` holds `cap` >= `bytes.len()` writable bytes (the caller's promise).
    unsafe { write_array(buf, bytes.iter().map(|&b| b as c_char).collect()) };
    Ok(())
}

/// Takes back the items [`into_items`] handed to C, and frees the name (a `CString` made
/// with `into_raw`) that `name` says each one holds.
///
/// # Safety
/// `items` and `len` came from [`into_items`], each name from `CString::into_raw`, and none
/// was freed since.
unsafe fn free_items<T>(items: *mut T, len: usize, name: fn(&T) -> *const c_char) {
    if items.is_null() {
        return;
    }
    // SAFETY: `items`/`len` came from `Box::into_raw` of a boxed slice of `len` items in
    // `into_items`, not freed since (the caller's promise).
    let items = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(items, len)) };
    for item in items.iter() {
        // SAFETY: made by `CString::into_raw` and not freed since (the caller's promise).
        drop(unsafe { CString::from_raw(name(item).cast_mut()) });
    }
}

/// Hands a listing to C: freed by [`free_list`] (`yuebing_list_free`).
pub(crate) fn into_list(listed: Vec<(CString, u64, u32)>) -> yuebing_list {
    let (items, len) = into_items(
        listed
            .into_iter()
            .map(|(key, size, replicas)| yuebing_listed {
                key: key.into_raw().cast_const(),
                size,
                replicas,
            })
            .collect(),
    );
    yuebing_list { items, len }
}

/// Frees a listing made by [`into_list`] and empties it; an empty one is left as is.
///
/// # Safety
/// `list` is NULL or points to a `yuebing_list` that is empty or was filled by this library
/// and not freed since.
pub(crate) unsafe fn free_list(list: *mut yuebing_list) {
    if list.is_null() {
        return;
    }
    // SAFETY: a valid `yuebing_list` (the caller's promise), its items and keys from
    // `into_list`, not freed since; emptied afterwards, so that a second free finds nothing.
    unsafe {
        let l = list.read();
        free_items(l.items, l.len, |item| item.key);
        list.write(yuebing_list {
            items: std::ptr::null_mut(),
            len: 0,
        });
    }
}

/// Where an object's replicas are, handed to C: its size, its read lease and each replica's
/// `(node, addr, len)`; freed by [`free_replicas`] (`yuebing_replicas_free`).
pub(crate) fn into_replicas(
    size: u64,
    lease_ms: u64,
    replicas: Vec<(CString, u64, u64)>,
) -> yuebing_replicas {
    let (items, len) = into_items(
        replicas
            .into_iter()
            .map(|(node, addr, len)| yuebing_replica {
                node: node.into_raw().cast_const(),
                addr,
                len,
            })
            .collect(),
    );
    yuebing_replicas {
        size,
        lease_ms,
        items,
        len,
    }
}

/// An empty `yuebing_replicas` (a failed item's).
pub(crate) fn no_replicas() -> yuebing_replicas {
    into_replicas(0, 0, Vec::new())
}

/// Frees replicas made by [`into_replicas`] and empties them; empty ones are left as they are.
///
/// # Safety
/// `r` is NULL or points to a `yuebing_replicas` that is empty (zeroed) or was filled by this
/// library and not freed since.
pub(crate) unsafe fn free_replicas(r: *mut yuebing_replicas) {
    if r.is_null() {
        return;
    }
    // SAFETY: a valid `yuebing_replicas` (the caller's promise), its items and nodes from
    // `into_replicas`, not freed since; emptied afterwards, so that a second free finds nothing.
    unsafe {
        let v = r.read();
        free_items(v.items, v.len, |item| item.node);
        r.write(no_replicas());
    }
}

/// Copies `n` byte buffers (`ptrs[i]` of `lens[i]` bytes) into new vectors, each as [`bytes`]
/// does; `what` names the array of pointers and one of its buffers in errors.
///
/// # Safety
/// `ptrs` and `lens` are NULL (then `n` must be 0) or valid for `n` elements, and each
/// `ptrs[i]` NULL (then `lens[i]` must be 0) or valid for `lens[i]` bytes, during the call.
pub(crate) unsafe fn buffers(
    ptrs: *const *const u8,
    lens: *const usize,
    n: usize,
    (what, one): (&str, &str),
) -> FfiResult<Vec<Vec<u8>>> {
    // SAFETY: both arrays valid for `n` elements (the caller's promise, checked there).
    let (ptrs, lens) = unsafe { (array(ptrs, n, what)?, array(lens, n, "lens")?) };
    ptrs.into_iter()
        .zip(lens)
        // SAFETY: each buffer valid for its length (the caller's promise, checked there).
        .map(|(p, len)| unsafe { bytes(p, len, one) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_with_a_length_and_overflowing_lengths_are_refused() {
        // SAFETY: no pointer is dereferenced: each case fails its checks first.
        unsafe {
            assert!(bytes(std::ptr::null(), 1, "data").is_err());
            assert_eq!(bytes(std::ptr::null(), 0, "data").unwrap(), b"");
            let one = 7u64;
            assert!(array(&one, usize::MAX / 4, "addrs").is_err());
            assert!(text(std::ptr::null(), "key").is_err());
            assert_eq!(optional_text(std::ptr::null(), "token").unwrap(), None);
            let bad = [0xffu8 as c_char, 0];
            assert!(text(bad.as_ptr(), "key").is_err());
        }
        assert!(check_out::<u64>(std::ptr::null_mut(), "out").is_err());
    }

    #[test]
    fn listings_are_freed_once() {
        let mut l = into_list(vec![
            (CString::new("a").unwrap(), 1, 1),
            (CString::new("bc").unwrap(), 2, 3),
        ]);
        assert_eq!(l.len, 2);
        // SAFETY: `l` was filled by `into_list`; the second free sees it emptied.
        unsafe {
            assert_eq!(
                CStr::from_ptr((*l.items.add(1)).key).to_str().unwrap(),
                "bc"
            );
            free_list(&mut l);
            assert!(l.items.is_null());
            free_list(&mut l);
        }
    }

    #[test]
    fn replicas_are_freed_once_and_empty_ones_are_null() {
        let mut r = into_replicas(7, 500, vec![(CString::new("node-a").unwrap(), 64, 7)]);
        assert_eq!((r.size, r.lease_ms, r.len), (7, 500, 1));
        // SAFETY: `r` was filled by `into_replicas`; the second free sees it emptied.
        unsafe {
            assert_eq!(CStr::from_ptr((*r.items).node).to_str().unwrap(), "node-a");
            assert_eq!(((*r.items).addr, (*r.items).len), (64, 7));
            free_replicas(&mut r);
            assert!(r.items.is_null() && r.len == 0);
            free_replicas(&mut r);
            free_replicas(std::ptr::null_mut());
        }
        let empty = no_replicas();
        assert!(empty.items.is_null() && empty.len == 0 && empty.size == 0);
    }

    #[test]
    fn buffers_are_copied_and_a_null_one_with_a_length_refused() {
        let (a, b) = (b"ab".as_slice(), b"cde".as_slice());
        let ptrs = [a.as_ptr(), b.as_ptr()];
        let lens = [2usize, 3];
        // SAFETY: both arrays hold 2 elements, each buffer its length; the failing cases are
        // refused before any is read.
        unsafe {
            let got = buffers(ptrs.as_ptr(), lens.as_ptr(), 2, ("parts", "a part")).unwrap();
            assert_eq!(got, [b"ab".to_vec(), b"cde".to_vec()]);
            let holes = [a.as_ptr(), std::ptr::null()];
            let e = buffers(holes.as_ptr(), lens.as_ptr(), 2, ("parts", "a part")).unwrap_err();
            assert!(e.message.contains("a part"), "{}", e.message);
            assert!(buffers(std::ptr::null(), lens.as_ptr(), 2, ("parts", "a part")).is_err());
            assert!(buffers(std::ptr::null(), std::ptr::null(), 0, ("p", "a"))
                .unwrap()
                .is_empty());
        }
    }

    #[test]
    fn an_empty_listing_is_null_and_freed_harmlessly() {
        let mut l = into_list(Vec::new());
        assert!(l.items.is_null() && l.len == 0);
        // SAFETY: `l` was filled by `into_list`.
        unsafe { free_list(&mut l) };
        assert!(l.items.is_null());
    }

    #[test]
    fn empty_bytes_are_handed_over_and_lent_as_null() {
        let b = into_buf(Vec::new());
        assert!(b.data.is_null() && b.len == 0);
        assert!(data_or_null(&[]).is_null());
        assert!(!data_or_null(&[1]).is_null());
    }

    #[test]
    fn buffers_round_trip_and_free_twice_harmlessly() {
        let mut b = into_buf(vec![1, 2, 3]);
        assert_eq!(b.len, 3);
        // SAFETY: `b` was filled by `into_buf`; the second free sees it emptied.
        unsafe {
            assert_eq!(bytes(b.data, b.len, "b").unwrap(), [1, 2, 3]);
            free_buf(&mut b);
            assert!(b.data.is_null());
            free_buf(&mut b);
        }
    }
}
