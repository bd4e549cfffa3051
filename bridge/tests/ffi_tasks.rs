//! The C forms of copy and move tasks (`yuebing_store_create_copy_task`,
//! `yuebing_store_create_move_task`, `yuebing_store_query_task` and their `_async` forms)
//! against a master in this process and two store clients with store space.

mod common;

use std::ffi::{c_char, c_void, CStr, CString};
use std::time::{Duration, Instant};

use yuebing_bridge::ffi::engine_api::{yuebing_engine_destroy, yuebing_engine_name};
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::yuebing_store_engine;
use yuebing_bridge::ffi::store_located::{yuebing_replicas_free, yuebing_store_replicas};
use yuebing_bridge::ffi::store_tasks::*;
use yuebing_bridge::ffi::types::*;

use common::{c_keys, last, new_bridge, nul, outcome, put, value_of, Cluster, NO_CALL, NO_OPTS};

/// The segment name of `store`'s node.
fn node_of(store: yuebing_store_t) -> CString {
    let (mut engine, mut buf, mut len) = (0, [0 as c_char; 256], 0usize);
    // SAFETY: writable outputs of the given sizes.
    unsafe {
        assert_eq!(
            yuebing_store_engine(store, &mut engine, nul()),
            0,
            "{}",
            last()
        );
        let rc = yuebing_engine_name(engine, buf.as_mut_ptr(), buf.len(), &mut len, nul());
        assert_eq!(rc, 0, "{}", last());
        assert_eq!(yuebing_engine_destroy(engine, nul()), 0);
        CStr::from_ptr(buf.as_ptr()).to_owned()
    }
}

/// The nodes holding `key`, sorted.
fn nodes_holding(store: yuebing_store_t, key: &str) -> Vec<String> {
    let key = CString::new(key).unwrap();
    let mut r = yuebing_replicas {
        size: 0,
        lease_ms: 0,
        items: std::ptr::null_mut(),
        len: 0,
    };
    // SAFETY: valid key and output; `items` holds `len` replicas with NUL-terminated nodes,
    // read before the replicas are freed, once.
    unsafe {
        assert_eq!(
            yuebing_store_replicas(store, key.as_ptr(), NO_OPTS, &mut r, nul()),
            0
        );
        let mut nodes: Vec<String> = (0..r.len)
            .map(|i| {
                let item = &*r.items.add(i);
                CStr::from_ptr(item.node).to_string_lossy().into_owned()
            })
            .collect();
        yuebing_replicas_free(&mut r);
        nodes.sort();
        nodes
    }
}

fn zeroed_info() -> yuebing_replica_task_info {
    yuebing_replica_task_info {
        id: yuebing_replica_task_id::default(),
        kind: 9,
        state: 9,
        created_ms: 0,
        updated_ms: 0,
        client: yuebing_replica_task_id::default(),
        key: std::ptr::null_mut(),
        message: std::ptr::null_mut(),
    }
}

/// Queries `id` until its task has ended; its state and message.
fn finished(store: yuebing_store_t, id: yuebing_replica_task_id) -> (u32, u32, String) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut info = zeroed_info();
        // SAFETY: a writable output; its strings are freed once, after they are read.
        let (rc, state, kind, message) = unsafe {
            let rc = yuebing_store_query_task(store, id, NO_OPTS, &mut info, nul());
            let message = CStr::from_ptr(info.message).to_string_lossy().into_owned();
            let out = (rc, info.state, info.kind, message);
            yuebing_replica_task_info_free(&mut info);
            assert!(info.key.is_null() && info.message.is_null(), "emptied");
            out
        };
        assert_eq!(rc, 0, "{}", last());
        if state == YUEBING_REPLICA_TASK_SUCCESS || state == YUEBING_REPLICA_TASK_FAILED {
            return (state, kind, message);
        }
        assert!(Instant::now() < end, "the task did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

unsafe extern "C" fn on_id(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    id: yuebing_replica_task_id,
) {
    let tx = ud.cast::<std::sync::mpsc::Sender<(i32, (u64, u64))>>();
    // SAFETY: `ud` is a `Got<(u64, u64)>`'s sender, alive while the test waits.
    let _ = unsafe { &*tx }.send((code, (id.high, id.low)));
}

unsafe extern "C" fn on_info(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    info: *const yuebing_replica_task_info,
) {
    let tx = ud.cast::<std::sync::mpsc::Sender<(i32, Option<(u32, String)>)>>();
    // SAFETY: `info` is NULL or lent until this returns; `ud` as in `on_id`.
    let got = unsafe { info.as_ref() }.map(|i| {
        (
            i.kind,
            unsafe { CStr::from_ptr(i.key) }
                .to_string_lossy()
                .into_owned(),
        )
    });
    let _ = unsafe { &*tx }.send((code, got));
}

#[test]
fn objects_are_copied_and_moved_through_the_c_abi() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let (a, b) = (cluster.store(bridge), cluster.store(bridge));
    let (na, nb) = (node_of(a), node_of(b));
    let value: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    // Put until one object sits on each node: the copy goes to the other one.
    let mut on = std::collections::HashMap::new();
    for i in 0..64 {
        let key = format!("t/{i}");
        put(a, &key, &value);
        let holder = nodes_holding(a, &key).remove(0);
        on.entry(holder).or_insert(key);
        if on.len() == 2 {
            break;
        }
    }
    let names = [na.to_str().unwrap(), nb.to_str().unwrap()];
    let (on_a, on_b) = (on[names[0]].clone(), on[names[1]].clone());

    // Blocking forms: copy the object on a to b, move the one on b to a.
    let key = CString::new(on_a.as_str()).unwrap();
    let (_keep, targets) = c_keys(&[names[1]]);
    let mut id = yuebing_replica_task_id::default();
    // SAFETY: valid key, one target name, writable output.
    let rc = unsafe {
        yuebing_store_create_copy_task(
            a,
            key.as_ptr(),
            targets.as_ptr(),
            1,
            NO_OPTS,
            &mut id,
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_ne!(id, yuebing_replica_task_id::default());
    assert_eq!(
        finished(a, id),
        (
            YUEBING_REPLICA_TASK_SUCCESS,
            YUEBING_REPLICA_TASK_COPY,
            String::new()
        )
    );
    assert_eq!(nodes_holding(a, &on_a), {
        let mut v = vec![names[0].to_string(), names[1].to_string()];
        v.sort();
        v
    });

    // Callback forms.
    let moved = CString::new(on_b.as_str()).unwrap();
    // SAFETY: valid names; the outcome is awaited while its `user_data` lives.
    let (code, (high, low)) = outcome(|ud| unsafe {
        yuebing_store_create_move_task_async(
            b,
            moved.as_ptr(),
            nb.as_ptr(),
            na.as_ptr(),
            NO_OPTS,
            Some(on_id),
            ud,
            NO_CALL,
            nul(),
        )
    })
    .unwrap();
    assert_eq!(code, 0);
    let mid = yuebing_replica_task_id { high, low };
    let (state, kind, _) = finished(b, mid);
    assert_eq!(
        (state, kind),
        (YUEBING_REPLICA_TASK_SUCCESS, YUEBING_REPLICA_TASK_MOVE)
    );
    assert_eq!(nodes_holding(b, &on_b), vec![names[0].to_string()]);
    // SAFETY: the outcome is awaited while its `user_data` lives.
    let got = outcome(|ud| unsafe {
        yuebing_store_query_task_async(b, mid, NO_OPTS, Some(on_info), ud, NO_CALL, nul())
    });
    assert_eq!(
        got,
        Ok((0, Some((YUEBING_REPLICA_TASK_MOVE, on_b.clone()))))
    );
    assert_eq!(value_of(b, &on_b), Ok(value.clone()));

    // Refusals: typed codes, nothing written.
    let unknown = yuebing_replica_task_id { high: 0, low: 77 };
    let mut info = zeroed_info();
    // SAFETY: writable output.
    let rc = unsafe { yuebing_store_query_task(a, unknown, NO_OPTS, &mut info, nul()) };
    assert_eq!(rc, YUEBING_ERR_TASK_NOT_FOUND);
    assert_eq!(info.state, 9, "not written on failure");
    let got = outcome(|ud| unsafe {
        yuebing_store_query_task_async(a, unknown, NO_OPTS, Some(on_info), ud, NO_CALL, nul())
    });
    assert_eq!(got, Ok((YUEBING_ERR_TASK_NOT_FOUND, None::<(u32, String)>)));
    let mut out = yuebing_replica_task_id::default();
    // SAFETY: a valid key and output, a NULL target list with n > 0 (refused), a NULL output.
    unsafe {
        let rc = yuebing_store_create_copy_task(
            a,
            key.as_ptr(),
            std::ptr::null(),
            1,
            NO_OPTS,
            &mut out,
            nul(),
        );
        assert_eq!(rc, YUEBING_ERR_INVALID_ARGUMENT);
        let rc = yuebing_store_create_copy_task(
            a,
            key.as_ptr(),
            targets.as_ptr(),
            1,
            NO_OPTS,
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, YUEBING_ERR_INVALID_ARGUMENT);
        let rc = yuebing_store_create_move_task(
            a,
            key.as_ptr(),
            na.as_ptr(),
            na.as_ptr(),
            NO_OPTS,
            &mut out,
            nul(),
        );
        assert_eq!(rc, YUEBING_ERR_INVALID_PARAMS);
        yuebing_replica_task_info_free(std::ptr::null_mut());
    }
    assert_eq!(out, yuebing_replica_task_id::default());
}
