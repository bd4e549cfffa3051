//! The C types of the ABI: handles, configurations, options, results and callback types.

use std::ffi::{c_char, c_void};

/// A bridge: the runtime and callback threads every call runs on. 0 in the functions that take
/// one means the process's default bridge.
pub type yuebing_bridge_t = u64;
/// A store client.
pub type yuebing_store_t = u64;
/// A transfer engine (standalone, or a store client's).
pub type yuebing_engine_t = u64;
/// A batch of an engine's transfers.
pub type yuebing_batch_t = u64;
/// A call started in its callback form, to cancel it; release it with `yuebing_call_destroy`.
pub type yuebing_call_t = u64;
/// A connection to a master, for `health` and `stats`.
pub type yuebing_master_t = u64;
/// An object found by `yuebing_store_locate` or `yuebing_store_get_or_locate`: its size and
/// where its replicas are, under the read lease that lookup took (the master's answer, not
/// the bytes). Read it with `yuebing_store_read_located` before the lease ends (else
/// `YUEBING_ERR_LEASE_EXPIRED`), as often as wanted; its size is `yuebing_location_size`.
/// Yours once handed over: release it with `yuebing_location_free` (reads in flight end
/// normally).
pub type yuebing_location_t = u64;

/// A reservation handle (see `yuebing_store_batch_reserve`): space for one object, not
/// readable yet; free it with `yuebing_reservation_free`.
pub type yuebing_reservation_t = u64;

/// An admin server handle (see `yuebing_store_serve_admin`): a store client's `/health`,
/// `/ready` and `/metrics` over HTTP; `yuebing_admin_free` stops it.
pub type yuebing_admin_t = u64;

/// How a bridge is built; a field left 0 takes its default.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_bridge_config {
    /// Runtime worker threads (default 2).
    pub worker_threads: u32,
    /// Callback threads (default 2): a slow callback delays only calls waiting for its thread.
    pub callback_threads: u32,
}

/// How a store client is built; a field left 0 or NULL takes its default.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct yuebing_store_config {
    /// The master's `host:port` (required; several separated by commas, tried in order), or
    /// `etcd://host:port[,host:port]/CLUSTER`: the leader elected in that cluster, found
    /// through etcd (a library built with the `etcd` feature; otherwise
    /// `YUEBING_ERR_ETCD_NOT_BUILT`).
    pub master: *const c_char,
    /// The cluster token, or NULL.
    pub token: *const c_char,
    /// Bytes of memory this client gives to the store (default 0: it stores nothing itself).
    pub store_size: u64,
    /// Bytes of staging memory for `put` and `get` of unregistered buffers (default 64 MiB).
    pub staging_size: u64,
    /// Deadline of a call in milliseconds (default 30 000).
    pub timeout_ms: u64,
    /// Where the client's engine listens, `host:port` (default 127.0.0.1:0).
    pub bind: *const c_char,
    /// Must be 0.
    pub flags: u32,
}

/// Fewer round trips to the master for a store client (`yuebing_store_new_tuned`); a field
/// left 0 keeps it off.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_store_tuning {
    /// Locations of objects read, kept while their read leases last, so that a read of the same
    /// key goes straight to its replica, one round trip instead of two: at most this many
    /// (default 0: none). Another client's later write of a key may go unseen for up to a
    /// lease (never torn bytes); this client's own writes are always read back; a call with
    /// `YUEBING_OPT_UNCACHED` asks the master.
    pub lease_cache: u64,
    /// Bytes of store space the master sets aside for this client's small puts at a time: a
    /// put of at most a sixteenth of it, with one replica and no preferred node, writes there
    /// at once and needs one round trip instead of two (default 0: none). The space counts as
    /// used while the client holds it.
    pub grant_size: u64,
    /// Must be 0.
    pub flags: u32,
}

/// How a standalone engine is built; a field left 0 or NULL takes its default.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct yuebing_engine_config {
    /// Where the engine's control service listens, `host:port` (default 127.0.0.1:0).
    pub bind: *const c_char,
    /// The cluster token, or NULL.
    pub token: *const c_char,
    /// One of `YUEBING_TRANSPORT_*` (default `YUEBING_TRANSPORT_AUTO`).
    pub transport: u32,
    /// `YUEBING_ENGINE_NO_SHM` or 0.
    pub flags: u32,
}

/// Each request picks the best transport that reaches its peer.
pub const YUEBING_TRANSPORT_AUTO: u32 = 0;
/// Every request goes over tcp.
pub const YUEBING_TRANSPORT_TCP: u32 = 1;
/// Every request goes over shared memory (same host only).
pub const YUEBING_TRANSPORT_SHM: u32 = 2;
/// Every request goes over RDMA (a build with the `rdma` feature, on a host with a NIC).
pub const YUEBING_TRANSPORT_RDMA: u32 = 3;
/// The engine neither serves nor uses shared memory.
pub const YUEBING_ENGINE_NO_SHM: u32 = 1;

/// Peers may neither read nor write the memory (a read destination, a write source).
pub const YUEBING_ACCESS_LOCAL_ONLY: u32 = 0;
/// Peers may read the memory.
pub const YUEBING_ACCESS_READ: u32 = 1;
/// Peers may write the memory.
pub const YUEBING_ACCESS_WRITE: u32 = 2;
/// Peers may read and write the memory.
pub const YUEBING_ACCESS_READ_WRITE: u32 = 3;

/// One part of a ranged read (`yuebing_store_batch_get_ranges`): `len` bytes at `offset`
/// inside the object, into registered memory at `addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_fragment {
    /// Where the bytes go: registered memory of this process.
    pub addr: u64,
    /// Where they start inside the object.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// Per-call settings of a store call; pass NULL for the client's defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_options {
    /// Deadline of the call in milliseconds (0: the client's).
    pub timeout_ms: u64,
    /// Replicas a put wants (0: the client's default).
    pub replica_num: u32,
    /// `YUEBING_OPT_*` bits; any other bit is `YUEBING_ERR_INVALID_ARGUMENT`. Every bit
    /// concerns puts only: the other calls accept them and ignore them.
    pub flags: u32,
}

/// A put's object is evicted last while it is read within the soft-pin time.
pub const YUEBING_OPT_SOFT_PIN: u32 = 1;
/// A put's object is never evicted.
pub const YUEBING_OPT_HARD_PIN: u32 = 2;
/// A put replaces the value of an existing key instead of failing with
/// `YUEBING_ERR_OBJECT_ALREADY_EXISTS` (Mooncake's upsert); a new key it stores as a put does.
/// It holds for every put form: `put`, `put_parts`, `put_from`, `batch_put` and
/// `batch_put_from`, blocking or `_async` (`yuebing_store_upsert` is `yuebing_store_put` with
/// it). It changes neither the replicas nor the pins the put asks for. Like the pin flags, the
/// other calls accept it and ignore it.
pub const YUEBING_OPT_UPSERT: u32 = 4;
/// A read asks the master where the object is rather than use a location the client kept
/// from an earlier read while its lease lasts (one round trip fewer). The other calls accept
/// it and ignore it.
pub const YUEBING_OPT_UNCACHED: u32 = 8;

/// Bytes owned by the library, handed to the caller: free them with `yuebing_buf_free`, passing
/// the struct back unchanged. A zeroed one is empty and may be freed too.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_buf {
    /// The bytes (NULL when empty).
    pub data: *mut u8,
    /// How many.
    pub len: usize,
}

/// Bytes lent to a callback, valid only until it returns.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct yuebing_bytes {
    /// The bytes (NULL when empty or failed).
    pub data: *const u8,
    /// How many.
    pub len: usize,
}

/// One object of a listing.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_listed {
    /// The key, NUL-terminated (owned by the listing: do not change or free it).
    pub key: *const c_char,
    /// Its size in bytes.
    pub size: u64,
    /// Replicas it has.
    pub replicas: u32,
}

/// A listing owned by the caller: free it with `yuebing_list_free`, passing the struct back
/// unchanged.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_list {
    /// The objects (NULL when there are none).
    pub items: *mut yuebing_listed,
    /// How many.
    pub len: usize,
}

/// One replica of an object.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_replica {
    /// The node's segment name, NUL-terminated (owned by the `yuebing_replicas` it is in: do
    /// not change or free it).
    pub node: *const c_char,
    /// The object's address in that node's segment.
    pub addr: u64,
    /// Its length in bytes (the object's size).
    pub len: u64,
}

/// Where an object's replicas are (`yuebing_store_replicas`). Handed over, it is the caller's:
/// free it with `yuebing_replicas_free`, passing the struct back unchanged (a zeroed one is
/// empty and may be freed too); lent to a callback, it is valid only until the callback
/// returns.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_replicas {
    /// The object's size in bytes.
    pub size: u64,
    /// How long the read lease the lookup took lasts, in milliseconds from when it was sent.
    pub lease_ms: u64,
    /// The readable replicas, in placement order (NULL when there are none).
    pub items: *mut yuebing_replica,
    /// How many.
    pub len: usize,
}

/// `yuebing_store_health_check`: the client is open, and its master answers and is ready.
pub const YUEBING_CLIENT_HEALTHY: u64 = 0;
/// `yuebing_store_health_check`: `yuebing_store_close` was called.
pub const YUEBING_CLIENT_CLOSED: u64 = 1;
/// `yuebing_store_health_check`: no master answered (or none was ready) within the call's
/// deadline.
pub const YUEBING_CLIENT_MASTER_UNREACHABLE: u64 = 2;

/// The master's counts.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_stats {
    /// Objects stored.
    pub objects: u64,
    /// Puts begun and not ended.
    pub pending_writes: u64,
    /// Bytes in use.
    pub bytes_used: u64,
    /// Bytes mounted.
    pub bytes_capacity: u64,
    /// Nodes alive.
    pub nodes: u64,
    /// Ranges mounted.
    pub mounts: u64,
}

/// The master's readiness.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_health {
    /// Restored, bound and accepting calls.
    pub ready: bool,
    /// Mutations are made durable in a data directory.
    pub persistent: bool,
    /// Its operation log failed: mutations are refused.
    pub failed: bool,
    /// Sequence number of the last mutation.
    pub last_seq: u64,
    /// Sequence number of the last durable mutation.
    pub durable_seq: u64,
}

/// A task or batch waits to start.
pub const YUEBING_TASK_WAITING: u32 = 0;
/// A task or batch is under way.
pub const YUEBING_TASK_PENDING: u32 = 1;
/// Every byte landed.
pub const YUEBING_TASK_COMPLETED: u32 = 2;
/// A transfer failed.
pub const YUEBING_TASK_FAILED: u32 = 3;
/// A deadline passed.
pub const YUEBING_TASK_TIMEOUT: u32 = 4;
/// Cancelled.
pub const YUEBING_TASK_CANCELED: u32 = 5;

/// A batch's aggregate status.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct yuebing_batch_status {
    /// One of `YUEBING_TASK_*`: waiting or pending while a task is unfinished; completed if all
    /// completed; else the worst final state.
    pub state: u32,
    /// The first error's code of the worst state, or 0.
    pub error: i32,
    /// Tasks submitted.
    pub tasks: u64,
    /// Tasks completed.
    pub completed: u64,
    /// Bytes transferred over all tasks.
    pub bytes: u64,
}

/// Read from the peer's segment into local memory.
pub const YUEBING_OP_READ: u32 = 0;
/// Write local memory into the peer's segment.
pub const YUEBING_OP_WRITE: u32 = 1;

/// One transfer of a batch.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct yuebing_request {
    /// `YUEBING_OP_READ` or `YUEBING_OP_WRITE`.
    pub opcode: u32,
    /// Local registered memory: the source of a write, the destination of a read.
    pub source: u64,
    /// The peer's segment, from `yuebing_engine_open_segment`.
    pub segment: u64,
    /// The address in the peer's segment.
    pub target_offset: u64,
    /// Bytes to move.
    pub length: u64,
}

/// A copy or move task's id: Mooncake's UUID pair (`yuebing_store_create_copy_task`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct yuebing_replica_task_id {
    /// The high half (the master's epoch).
    pub high: u64,
    /// The low half.
    pub low: u64,
}

/// `yuebing_replica_task_info.kind`: add replicas on target nodes (Mooncake's `REPLICA_COPY`).
pub const YUEBING_REPLICA_TASK_COPY: u32 = 0;
/// `yuebing_replica_task_info.kind`: move a replica to another node (Mooncake's `REPLICA_MOVE`).
pub const YUEBING_REPLICA_TASK_MOVE: u32 = 1;
/// `yuebing_replica_task_info.state`: not taken by its client yet.
pub const YUEBING_REPLICA_TASK_PENDING: u32 = 0;
/// `yuebing_replica_task_info.state`: its client is copying.
pub const YUEBING_REPLICA_TASK_PROCESSING: u32 = 1;
/// `yuebing_replica_task_info.state`: ended without effect; `message` says why.
pub const YUEBING_REPLICA_TASK_FAILED: u32 = 2;
/// `yuebing_replica_task_info.state`: done, the new replicas are the object's.
pub const YUEBING_REPLICA_TASK_SUCCESS: u32 = 3;

/// What `yuebing_store_query_task` reports of a task. Handed over, its strings are the
/// caller's: free them with `yuebing_replica_task_info_free` (a zeroed one may be freed too); lent to a
/// callback, it is valid only until the callback returns.
#[repr(C)]
#[derive(Debug)]
pub struct yuebing_replica_task_info {
    /// The task.
    pub id: yuebing_replica_task_id,
    /// `YUEBING_REPLICA_TASK_COPY` or `YUEBING_REPLICA_TASK_MOVE`.
    pub kind: u32,
    /// `YUEBING_REPLICA_TASK_PENDING`, `_PROCESSING`, `_FAILED` or `_SUCCESS` (Mooncake's
    /// numbers).
    pub state: u32,
    /// When it was created, in milliseconds since the Unix epoch (the master's clock).
    pub created_ms: u64,
    /// When its state last changed.
    pub updated_ms: u64,
    /// The client that runs it, as two halves.
    pub client: yuebing_replica_task_id,
    /// The object's key, NUL-terminated.
    pub key: *mut c_char,
    /// Why it failed (empty otherwise), NUL-terminated.
    pub message: *mut c_char,
}

/// A callback with a task id (zero on failure).
pub type yuebing_replica_task_id_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        id: yuebing_replica_task_id,
    ),
>;

/// A callback with a task's state, lent until it returns (NULL on failure).
pub type yuebing_replica_task_info_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        info: *const yuebing_replica_task_info,
    ),
>;

/// A callback with no value. `message` is NULL on success, else the error's text; it is valid
/// only until the callback returns.
pub type yuebing_done_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, code: i32, message: *const c_char)>;

/// A callback with one number: a size, a count, a segment, a `YUEBING_CLIENT_*` health, or 0/1
/// for whether a key exists.
pub type yuebing_u64_cb = Option<
    unsafe extern "C" fn(user_data: *mut c_void, code: i32, message: *const c_char, value: u64),
>;

/// A callback with bytes, valid only until it returns (copy what you keep).
pub type yuebing_bytes_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        data: *const u8,
        len: usize,
    ),
>;

/// A callback of a batch call with a number per item: `codes[i]` is item i's code and
/// `values[i]` its number (a size, or 0/1 for whether it exists). Arrays of `n`, valid only
/// until it returns; NULL when the call itself failed (`code` != 0).
pub type yuebing_each_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        n: usize,
        codes: *const i32,
        values: *const u64,
    ),
>;

/// A callback of a batch get: `codes[i]` is item i's code and `values[i]` its bytes. Arrays of
/// `n`, valid only until it returns.
pub type yuebing_each_bytes_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        n: usize,
        codes: *const i32,
        values: *const yuebing_bytes,
    ),
>;

/// A callback with a location (0 when `code` != 0): it is the callback's, to read with
/// `yuebing_store_read_located` and release with `yuebing_location_free`.
pub type yuebing_location_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        location: yuebing_location_t,
    ),
>;

/// A callback of `yuebing_store_get_or_locate`: a small object's value (`data`, `len` bytes,
/// valid only until it returns) with `location` 0, or a larger object's location (the
/// callback's to read and release, as a `yuebing_location_cb`'s) with no data. Both 0 when
/// `code` != 0.
pub type yuebing_fetched_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        data: *const u8,
        len: usize,
        location: yuebing_location_t,
    ),
>;

/// A callback with where an object's replicas are, valid only until it returns (NULL when
/// `code` != 0).
pub type yuebing_replicas_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        replicas: *const yuebing_replicas,
    ),
>;

/// A callback of a batch of replica lookups: `codes[i]` is item i's code and `values[i]`
/// where it is (empty when it failed). Arrays of `n`, valid only until it returns; NULL when
/// the call itself failed (`code` != 0).
pub type yuebing_each_replicas_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        n: usize,
        codes: *const i32,
        values: *const yuebing_replicas,
    ),
>;

/// A callback with a listing of `n` objects, valid only until it returns.
pub type yuebing_list_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        n: usize,
        items: *const yuebing_listed,
    ),
>;

/// A callback with the master's counts (NULL when `code` != 0).
pub type yuebing_stats_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        stats: *const yuebing_stats,
    ),
>;

/// A callback with the master's readiness (NULL when `code` != 0).
pub type yuebing_health_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        health: *const yuebing_health,
    ),
>;

/// A callback with a batch's status (NULL when `code` != 0).
pub type yuebing_batch_status_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        code: i32,
        message: *const c_char,
        status: *const yuebing_batch_status,
    ),
>;
