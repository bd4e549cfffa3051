"""``mooncake.store`` on yuebing: ``MooncakeDistributedStore`` with Mooncake 0.3.13.post1's
methods, arguments and integer results, over ``yuebing.Store``.

Results follow Mooncake: 0 or a negative ``ErrorCode`` for most calls; bytes written for
``get_into``; a count for ``remove_all``/``remove_by_regex``; 1/0/negative for ``is_exist``;
``b""`` for a ``get`` that fails. A put of an existing key succeeds and keeps the old value, as
Mooncake's client does (use ``upsert``). Where this differs from Mooncake, the package README
says so and why.
"""

import operator
import os
import threading
import uuid

import yuebing

from . import _codes, _dummy, _hostname, _memory, _setup
from ._codes import INVALID_PARAMS, OBJECT_ALREADY_EXISTS, OK
from ._engram import EngramStore, EngramStoreConfig
from ._pool import (BufferLease, BufferLeaseView, BufferPool, RegisteredBufferLease,
                    RegisteredBufferLeaseView, RegisteredBufferPool)
from ._types import (Descriptor, DiskDescriptor, MemoryDescriptor,
                     MooncakeDistributedNoFRegister, ObjectDataType, ParallelAxis,
                     QueryTaskResponse, ReadTarget, ReplicaDescriptor, ReplicaStatus,
                     ReplicateConfig, SoftPinAction, TaskStatus, TaskType, TensorParallelism)
from ._memory import (MooncakeHostMemAllocator, bind_to_numa_node, get_alloc_func_addr,
                      get_free_func_addr)
from ._values import BufferHandle, byte_parts, byte_value, raw_view

# pybind11's export_values(): the enums' members at module level, as in the stock wheel (where
# names clash, TaskStatus's FAILED and PROCESSING win, as there).
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    globals().update(_enum.__members__)
del _enum

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ObjectDataType",
           "ReplicaStatus", "ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor",
           "Descriptor", "TaskStatus", "TaskType", "QueryTaskResponse", "BufferHandle",
           "BufferPool", "RegisteredBufferPool", "BufferLease", "BufferLeaseView",
           "RegisteredBufferLease", "RegisteredBufferLeaseView", "MooncakeHostMemAllocator",
           "bind_to_numa_node", "get_alloc_func_addr", "get_free_func_addr", "ParallelAxis",
           "TensorParallelism", "ReadTarget", "EngramStore", "EngramStoreConfig",
           "MooncakeDistributedNoFRegister",
           *ObjectDataType.__members__, *ReplicaStatus.__members__, *TaskType.__members__,
           *TaskStatus.__members__]

_DEFAULT = ReplicateConfig()


# Mooncake's master refuses a longer soft-pin TTL (its `max_kv_soft_pin_ttl`, 24 h).
_MAX_SOFT_PIN_TTL_MS = 24 * 60 * 60 * 1000


def _put_options(config):
    """The keyword arguments of a yuebing put for a ``ReplicateConfig``; ``None`` for a
    config Mooncake refuses on a put or upsert (``prefer_alloc_in_same_node``; a
    ``soft_pin_ttl_ms`` without ``SoftPinAction.ENABLE``, or above 24 h)."""
    if not isinstance(config, ReplicateConfig):
        raise TypeError("config must be a mooncake.store.ReplicateConfig, "
                        f"not {type(config).__name__}")
    if config.prefer_alloc_in_same_node:
        return None
    ttl = config.soft_pin_ttl_ms
    if ttl is not None and (config.soft_pin_action != SoftPinAction.ENABLE
                            or ttl > _MAX_SOFT_PIN_TTL_MS):
        _codes.log.error("soft_pin_ttl_ms=%d needs soft_pin_action ENABLE and at most %d ms",
                         ttl, _MAX_SOFT_PIN_TTL_MS)
        return None
    preferred = [_hostname.node_name(n) for n in config.preferred()]
    return {"replicas": max(1, int(config.replica_num)), "preferred": preferred or None,
            "soft_pin": config.soft_pin_action == SoftPinAction.ENABLE,
            "hard_pin": bool(config.with_hard_pin)}


def _code(err, what):
    """Mooncake's code for a yuebing exception."""
    return _codes.store_code(err.code, what)


def _put_code(err, what):
    """As ``_code``, with an existing key a success (Mooncake keeps the old value)."""
    return 0 if err.code == OBJECT_ALREADY_EXISTS else _code(err, what)


def _ok(call):
    """``call``, answering 0 when it returns (Mooncake's success) whatever it returned."""
    def run(store):
        call(store)
        return 0
    return run


def _logged(value):
    """An error handler answering ``value`` after logging yuebing's error."""
    def answer(err, what):
        _codes.log.info("%s: %s (yuebing code %d)", what, err, err.code)
        return value
    return answer


def _each(results, what, ok=lambda r: 0, fail=_code):
    """One Mooncake result per batch entry (an entry is a value or an exception instance)."""
    return [fail(r, what) if isinstance(r, yuebing.YuebingError) else ok(r) for r in results]


def _ranged_shape(buffers, all_keys, all_dst_offsets):
    """Mooncake's results of a ranged read before anything is read: ``-600`` for each
    fragment, one list per key of each buffer (one entry where a list is missing)."""
    def count(outer, i, j=None):
        if i >= len(outer):
            return 1
        return len(outer[i]) if j is None else (len(outer[i][j]) if j < len(outer[i]) else 1)
    return [[[INVALID_PARAMS] * count(all_dst_offsets, i, j) for j in range(count(all_keys, i))]
            for i in range(buffers)]


class MooncakeDistributedStore:
    """Mooncake's store client, on yuebing. Make one, then ``setup`` it; it may be shared by
    threads, and subclassed (``mooncake.async_store`` style wrappers work)."""

    def __init__(self):
        self._store = None
        # A dummy client's connection to its real client (see setup_dummy).
        self._dummy = None
        # The setup's local_buffer_size: Mooncake stages every bytes-API value through it.
        self._local_buffer = 0
        self._hostname = ""
        # The regions of register_buffer, {address: size}.
        self._regions = {}
        # The open ranged sessions: {key: yuebing.Location} and {key: yuebing.Reservation}.
        self._get_sessions = {}
        self._put_sessions = {}
        # Segments mounted since setup: {segment id: (yuebing space id, how it was mounted:
        # "file" by mount_segment, "allocated" by allocate_and_mount_segment)}.
        self._segments = {}
        # alloc_from_mem_pool's memory, registered: {address: size}; freed at close.
        self._pool = {}
        # Registrations of a closed client not ended yet: {address: size}.
        self._retiring = {}
        self._lock = threading.Lock()
        _memory.track(self)

    # ------------------------------------------------------------------ lifecycle

    def setup(self, *args, **kwargs):
        """``setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
        protocol, rdma_devices, master_server_addr, engine=None, ...)`` or ``setup(config:
        dict)``: connects to the master; 0, or a negative code. ``metadata_server`` may be
        ``P2PHANDSHAKE``, ``http://…`` or ``etcd://…``: yuebing exchanges segment descriptors
        peer to peer whichever is named. Between processes of one host yuebing moves bytes over
        shared memory, elsewhere over tcp; ``YUEBING_MOONCAKE_TRANSPORT=tcp`` (or ``shm``)
        forces one. ``YUEBING_LEASE_CACHE=N`` keeps the locations of up to N objects read, and
        ``YUEBING_GRANT_SIZE=16MiB`` sets store space aside for small puts (fewer round trips
        to the master: see ``help(yuebing.Store)``); both off by default."""
        if self._dummy is not None:
            self.close()  # a dummy client becomes a client of its own
        try:
            a = _setup.from_call(args, kwargs)
        except _setup.SetupError as e:
            _codes.log.error("%s", e)
            return e.code
        kw = {"store_size": a.global_segment_size, "staging_size": a.local_buffer_size}
        transport = os.environ.get("YUEBING_MOONCAKE_TRANSPORT", "auto")
        if transport not in ("auto", "tcp", "shm"):
            _codes.log.error("setup: YUEBING_MOONCAKE_TRANSPORT=%r is not auto, tcp or shm",
                             transport)
            return INVALID_PARAMS
        # yuebing's fewer round trips, off unless asked for (see help(yuebing.Store)).
        cache = os.environ.get("YUEBING_LEASE_CACHE", "0")
        if not (cache.isascii() and cache.isdecimal()):
            _codes.log.error("setup: YUEBING_LEASE_CACHE=%r is not a number of entries", cache)
            return INVALID_PARAMS
        kw["lease_cache"] = int(cache)
        kw["grant_size"] = os.environ.get("YUEBING_GRANT_SIZE", "0")
        if transport != "auto" and a.engine is None:
            kw["transport"] = transport
        elif transport != "auto":
            _codes.log.warning("setup: YUEBING_MOONCAKE_TRANSPORT=%s is ignored: the given "
                               "engine's transport applies", transport)
        if a.engine is not None:
            from .engine import InnerTransferEngine
            if not isinstance(a.engine, InnerTransferEngine):
                raise RuntimeError("Unable to cast Python instance of type "
                                   f"{type(a.engine)} to C++ type 'std::shared_ptr<mooncake::"
                                   "TransferEngine>': pass TransferEngine.get_engine()")
            kw["engine"] = a.engine.engine
            binds = [None]
        else:
            kw["rdma_nics"] = _setup.rdma_nics(a.protocol, a.rdma_devices)
            binds = _hostname.candidates(a.local_hostname)
        try:
            store, hostname = self._start(a, kw, binds)
        except yuebing.InvalidArgument as e:
            _codes.log.error("setup: %s", e)
            return INVALID_PARAMS
        except yuebing.YuebingError as e:
            _codes.log.error("setup: cannot start the store client: %s (yuebing code %d)", e, e.code)
            return _codes.INTERNAL_ERROR
        except (TypeError, ValueError) as e:
            _codes.log.error("setup: %s", e)
            return INVALID_PARAMS
        _setup.say_if_rdma_is_off("setup", a.protocol, store.engine)
        with self._lock:
            old, self._store = self._store, store
            retired = self._reset()
            self._local_buffer = a.local_buffer_size
            self._hostname = hostname
        if old is not None:
            self._close_store(old, *retired)
        # After the old client closed: its server may hold the same port.
        if a.http_port is not None:
            _serve_http(store, a.http_port)
        return 0

    def _reset(self):
        """Forgets the state of the client set up last (under the lock); its pool memory and
        its registrations, which stay visible to ``_overlaps`` (as retiring) until
        ``_close_store`` has ended them."""
        pool, self._pool = self._pool, {}
        regions, self._regions = self._regions, {}
        self._retiring.update(regions)
        self._get_sessions, self._put_sessions = {}, {}
        self._segments = {}
        return pool, regions

    def _close_store(self, store, pool, regions):
        """Closes a ``yuebing.Store`` of this client: its registrations ended first (no call
        touches them once that returns), then ``alloc_from_mem_pool`` memory given back.
        Memory whose registration could not be ended stays mapped and retiring."""
        ended = []
        for addr in regions:
            try:
                store.unregister_buffer(addr)
                ended.append(addr)
            except (yuebing.YuebingError, ValueError) as e:
                _codes.log.warning("close: unregistering %#x: %s", addr, e)
        try:
            store.close()
        except yuebing.YuebingError as e:
            _codes.log.warning("close: %s (yuebing code %d)", e, e.code)
        for addr in ended:
            if addr in pool:
                _memory.unmap(addr, pool[addr])
        with self._lock:
            for addr in ended:
                self._retiring.pop(addr, None)

    @staticmethod
    def _start(a, kw, binds):
        """A started ``yuebing.Store`` and Mooncake's name for it: bound at the first of
        ``binds`` (``(host, port)`` pairs; ``None``: on a given engine) that is free."""
        for i, bind in enumerate(binds):
            if bind is not None:
                kw["bind"] = f"{bind[0]}:{bind[1]}"
            try:
                store = yuebing.Store(a.master_server_addr, **kw)
            except yuebing.Bind as e:
                if i + 1 == len(binds):
                    raise
                _codes.log.info("setup: %s; trying another port", e)
                continue
            if bind is None:
                return store, store.hostname
            return store, f"{bind[0]}:{_hostname.split(store.hostname)[1]}"
        raise AssertionError("no bind to try")

    def init_all(self, protocol, device_name, mount_segment_size, /):
        """Mooncake's old form of ``setup``: P2P metadata, a master on 127.0.0.1:50051."""
        return self.setup("127.0.0.1", "P2PHANDSHAKE", mount_segment_size, 16 << 20,
                          protocol, device_name, "127.0.0.1:50051")

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Makes this a dummy client of the real client at ``server_address`` (``host:PORT``,
        the real client's ``--port``, on this host): it owns no store space, and the real
        client does its calls. Its zero-copy buffers must come from
        ``MooncakeHostMemAllocator`` (the real client maps them); bytes-API values are bounded
        by ``local_buffer_size``. 0, or -1 when the real client cannot be reached."""
        mem_pool_size, local_buffer_size = (_address(mem_pool_size),
                                            _address(local_buffer_size))
        try:
            link = _dummy.Link(server_address)
        except (OSError, _dummy.LinkError, ValueError) as e:
            _codes.log.error("setup_dummy: no real client at %s: %s", server_address, e)
            return -1
        self.close()
        link.pool_limit = mem_pool_size
        with self._lock:
            self._dummy = link
            self._local_buffer = local_buffer_size
            self._hostname = link.hostname
        return 0

    def close(self):
        """Leaves the cluster; 0 (also before ``setup`` and a second time)."""
        with self._lock:
            link, self._dummy = self._dummy, None
            store, self._store = self._store, None
            retired = self._reset()
        if link is not None:
            # Once the link is closed the real client no longer touches this client's memory
            # (a call under way returned first): its registrations are over, and its pool
            # memory goes back.
            link.close()
            with self._lock:
                for addr in retired[1]:
                    self._retiring.pop(addr, None)
            _dummy.free_pool(link)
        if store is not None:
            self._close_store(store, *retired)
        return 0

    def health_check(self):
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        store = self._store
        if store is None:
            return _codes.HC_NOT_INITIALIZED
        try:
            return store.health_check(timeout=2.0)
        except (yuebing.YuebingError, ValueError) as e:
            # Forked: the client belongs to the parent process; this one has none set up.
            _codes.log.warning("health_check: %s", e)
            return _codes.HC_NOT_INITIALIZED

    def get_hostname(self):
        """This client's name, Mooncake's way: ``local_hostname`` with the port its engine
        listens on (``localhost:13077``)."""
        store = self._need()
        return "" if store is None else self._hostname

    def _need(self):
        """The store, or ``None`` before ``setup`` / after ``close``."""
        store = self._store
        if store is None:
            _codes.log.error("the store is not set up (call setup first)")
        return store

    def _run(self, what, fail, call, on_error=_code):
        """``call(store)``, or ``fail`` before setup, or the Mooncake code of its error."""
        store = self._need()
        if store is None:
            return fail
        try:
            return call(store)
        except yuebing.YuebingError as e:
            return on_error(e, what)
        except ValueError as e:
            _codes.log.error("%s: %s", what, e)
            return fail if fail != 0 else INVALID_PARAMS

    # ------------------------------------------------------------------ bytes API

    def _staged(self, length):
        """Whether a bytes-API value of ``length`` bytes fits the local buffer that Mooncake
        stages it through (a larger one, and any one with ``local_buffer_size`` 0, is
        ``-600`` there)."""
        return length <= self._local_buffer

    def _put(self, what, key, value, config, upsert, staged=True):
        """``put`` or ``upsert``; a dummy client's value (``staged`` False) was bounded by the
        dummy's own local buffer."""
        opts = _put_options(config)
        data = byte_value(value)
        if opts is None or len(data) == 0 or (staged and not self._staged(len(data))):
            return INVALID_PARAMS
        call = (lambda s: s.upsert(key, data, **opts)) if upsert else (
            lambda s: s.put(key, data, **opts))
        return self._run(what, INVALID_PARAMS, _ok(call), _put_code)

    def put(self, key, value, config=_DEFAULT):
        """Stores ``value`` (any buffer) under ``key``; an existing key keeps its value."""
        return self._put("put", key, value, config, False)

    def upsert(self, key, value, config=_DEFAULT):
        """Stores ``value`` under ``key``, replacing an existing value."""
        return self._put("upsert", key, value, config, True)

    def _put_parts(self, what, key, parts, config, upsert):
        opts = _put_options(config)
        parts = byte_parts(parts)
        if opts is None:
            return INVALID_PARAMS
        total = sum(len(p) for p in parts)
        if total == 0:
            return 0
        if not self._staged(total):
            return INVALID_PARAMS
        call = (lambda s: s.upsert_parts(key, *parts, **opts)) if upsert else (
            lambda s: s.put_parts(key, *parts, **opts))
        return self._run(what, INVALID_PARAMS, _ok(call), _put_code)

    def put_parts(self, key, *parts, config=_DEFAULT):
        """Stores the concatenation of ``parts`` (1-D byte buffers) under ``key``."""
        return self._put_parts("put_parts", key, parts, config, False)

    def upsert_parts(self, key, *parts, config=_DEFAULT):
        """As ``put_parts``, replacing an existing value."""
        return self._put_parts("upsert_parts", key, parts, config, True)

    def _put_batch(self, what, keys, values, config, upsert):
        opts = _put_options(config)
        if opts is None or len(keys) != len(values):
            return INVALID_PARAMS
        if not keys:
            return 0
        data = [byte_value(v) for v in values]
        if any(len(d) == 0 for d in data):
            return INVALID_PARAMS
        call = (lambda s: s.batch_upsert(keys, data, **opts)) if upsert else (
            lambda s: s.batch_put(keys, data, **opts))
        each = self._run(what, INVALID_PARAMS, call)
        if isinstance(each, int):
            return each
        codes = _each(each, what, fail=_put_code)
        return next((c for c in codes if c < 0), 0)

    def put_batch(self, keys, values, config=_DEFAULT):
        """Stores each value under its key; one int: 0, or the first failure's code."""
        return self._put_batch("put_batch", keys, values, config, False)

    def upsert_batch(self, keys, values, config=_DEFAULT):
        """As ``put_batch``, replacing existing values."""
        return self._put_batch("upsert_batch", keys, values, config, True)

    def get(self, key, /):
        """The value of ``key``; ``b""`` when it is missing or the read fails."""
        value = self._run("get", b"", lambda s: s.get(key), _logged(b""))
        return value if isinstance(value, bytes) else b""

    def get_batch(self, keys, /):
        """The value of each key (``b""`` for a failed one); ``[b""]`` for no keys, as
        Mooncake."""
        if not keys:
            return [b""]
        each = self._run("get_batch", None, lambda s: s.batch_get(list(keys)))
        if each is None:
            return [b""]
        if not isinstance(each, list):
            return [b""] * len(keys)
        return [b"" if isinstance(v, yuebing.YuebingError) else v for v in each]

    def get_buffer(self, key, /):
        """The value of ``key`` in a ``BufferHandle`` (``ptr()``, ``size()``, the buffer
        protocol), or ``None``."""
        value = self.get(key)
        return BufferHandle(value) if value else None

    def batch_get_buffer(self, keys, /):
        """``get_buffer`` for each key."""
        return [BufferHandle(v) if v else None for v in self.get_batch(keys)] if keys else []

    # ------------------------------------------------------------------ zero-copy API

    def register_buffer(self, buffer_ptr, size):
        """Registers ``size`` bytes at ``buffer_ptr`` for zero-copy calls; 0, or -600 for an
        overlap."""
        link = self._dummy
        if link is not None:
            with _memory.REGISTRATION:
                if self._overlaps(int(buffer_ptr), int(size)):
                    return INVALID_PARAMS
                code = _dummy.register(link, buffer_ptr, size)
                if code == 0:
                    with self._lock:
                        self._regions[int(buffer_ptr)] = int(size)
            return code
        with _memory.REGISTRATION:
            code = self._run("register_buffer", INVALID_PARAMS,
                             _ok(lambda s: s.register_buffer(buffer_ptr, size)),
                             _logged(INVALID_PARAMS))
            if code == 0:
                with self._lock:
                    self._regions[int(buffer_ptr)] = int(size)
        return code

    def unregister_buffer(self, buffer_ptr):
        """Ends a registration; 0, or -600 for an address not registered."""
        link = self._dummy
        if link is not None:
            with self._lock:
                if self._regions.pop(int(buffer_ptr), None) is None:
                    return INVALID_PARAMS
            try:
                return link.unregister(int(buffer_ptr))
            except _dummy.LinkError as e:
                _codes.log.error("unregister_buffer: the real client: %s", e)
                return _codes.RPC_FAIL
        code = self._run("unregister_buffer", INVALID_PARAMS,
                         _ok(lambda s: s.unregister_buffer(buffer_ptr)),
                         _logged(INVALID_PARAMS))
        if code == 0:
            with self._lock:
                self._regions.pop(int(buffer_ptr), None)
        return code

    def _room(self, ptr):
        """Bytes from ``ptr`` to the end of the ``register_buffer`` region it lies in (0 if
        none): how much a ranged read may write there, as Mooncake resolves it."""
        with self._lock:
            regions = list(self._regions.items())
        for base, size in regions:
            if base <= ptr < base + size:
                return base + size - ptr
        return 0

    def _put_from(self, what, key, ptr, size, config, upsert):
        opts = _put_options(config)
        if opts is None:
            return INVALID_PARAMS
        if size == 0:
            return 0
        try:
            ptr, size = _address(ptr), _address(size)
        except (TypeError, ValueError) as e:
            _codes.log.error("%s: %s", what, e)
            return INVALID_PARAMS
        call = (lambda s: s.upsert_from(key, ptr, size, **opts)) if upsert else (
            lambda s: s.put_from(key, ptr, size, **opts))
        return self._run(what, INVALID_PARAMS, _ok(call), _put_code)

    def put_from(self, key, buffer_ptr, size, config=_DEFAULT):
        """Stores ``size`` bytes at ``buffer_ptr`` under ``key`` without a copy."""
        return self._put_from("put_from", key, buffer_ptr, size, config, False)

    def upsert_from(self, key, buffer_ptr, size, config=_DEFAULT):
        """As ``put_from``, replacing an existing value."""
        return self._put_from("upsert_from", key, buffer_ptr, size, config, True)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=_DEFAULT):
        """Stores ``metadata_size`` bytes at ``metadata_buffer_ptr`` followed by ``size`` bytes
        at ``buffer_ptr`` as one object."""
        if self._need() is None:
            return INVALID_PARAMS
        try:
            parts = [raw_view(metadata_buffer_ptr, metadata_size), raw_view(buffer_ptr, size)]
        except (TypeError, ValueError) as e:
            _codes.log.error("put_from_with_metadata: %s", e)
            return INVALID_PARAMS
        return self._put_parts("put_from_with_metadata", key, parts, config, False)

    def _batch_from(self, what, keys, ptrs, sizes, config, upsert):
        opts = _put_options(config)
        if opts is None or not len(keys) == len(ptrs) == len(sizes):
            return [INVALID_PARAMS] * len(keys)
        # Mooncake answers per item: an empty item stores nothing and is 0, a bad one -600.
        out, todo = _items(keys, ptrs, sizes, empty=0)
        if todo:
            ks, ps, ns = (list(x) for x in zip(*(item for _, item in todo)))
            call = (lambda s: s.batch_upsert_from(ks, ps, ns, **opts)) if upsert else (
                lambda s: s.batch_put_from(ks, ps, ns, **opts))
            each = self._run(what, INVALID_PARAMS, call)
            codes = [each] * len(todo) if isinstance(each, int) else _each(each, what,
                                                                           fail=_put_code)
            for (i, _), code in zip(todo, codes):
                out[i] = code
        return out

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=_DEFAULT):
        """``put_from`` for each item; one code per key."""
        return self._batch_from("batch_put_from", keys, buffer_ptrs, sizes, config, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=_DEFAULT):
        """``upsert_from`` for each item; one code per key."""
        return self._batch_from("batch_upsert_from", keys, buffer_ptrs, sizes, config, True)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=_DEFAULT):
        """Stores each ``keys[i]`` gathered without a copy from its buffers
        (``all_buffer_ptrs[i][j]``, ``all_sizes[i][j]`` bytes, end to end: per-layer KV
        blocks); one code per key. The whole batch takes one placement and one publication
        round trip, every buffer's transfer in flight together."""
        opts = _put_options(config)
        if opts is None or not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            return [INVALID_PARAMS] * len(keys)
        out, todo = _multi_items(keys, all_buffer_ptrs, all_sizes)
        if todo:
            ks, ps, ns = _multi_lists(todo)
            each = self._run("batch_put_from_multi_buffers", INVALID_PARAMS,
                             lambda s: s.batch_put_from_buffers(ks, ps, ns, **opts))
            codes = [each] * len(todo) if isinstance(each, int) else _each(
                each, "batch_put_from_multi_buffers", fail=_put_code)
            for (i, _), code in zip(todo, codes):
                out[i] = code
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        """Reads each ``keys[i]`` without a copy into its buffers, filled in order; the bytes
        read per key, or a negative code (-600 when they hold less than the object). One
        replica-list round trip for the batch. ``prefer_alloc_in_same_node`` is accepted: the
        client already reads the nearest replica first."""
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            return [INVALID_PARAMS] * len(keys)
        out, todo = _multi_items(keys, all_buffer_ptrs, all_sizes)
        if todo:
            ks, ps, ns = _multi_lists(todo)
            each = self._run("batch_get_into_multi_buffers", INVALID_PARAMS,
                             lambda s: s.batch_get_into_buffers(ks, ps, ns))
            codes = [each] * len(todo) if isinstance(each, int) else _each(
                each, "batch_get_into_multi_buffers", ok=lambda n: n)
            for (i, _), code in zip(todo, codes):
                out[i] = code
        return out

    def get_into(self, key, buffer_ptr, size):
        """Reads ``key`` into ``size`` bytes at ``buffer_ptr``; the bytes written, or a negative
        code (-600 when the buffer is too small)."""
        try:
            buffer_ptr, size = _address(buffer_ptr), _address(size)
        except (TypeError, ValueError) as e:
            _codes.log.error("get_into: %s", e)
            return INVALID_PARAMS
        return self._run("get_into", INVALID_PARAMS, lambda s: s.get_into(key, buffer_ptr, size))

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """``get_into`` for each item; bytes written or a negative code per key."""
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return [INVALID_PARAMS] * len(keys)
        out, todo = _items(keys, buffer_ptrs, sizes, empty=INVALID_PARAMS)
        if todo:
            ks, ps, ns = (list(x) for x in zip(*(item for _, item in todo)))
            each = self._run("batch_get_into", INVALID_PARAMS,
                             lambda s: s.batch_get_into(ks, ps, ns))
            codes = [each] * len(todo) if isinstance(each, int) else _each(
                each, "batch_get_into", ok=lambda n: n)
            for (i, _), code in zip(todo, codes):
                out[i] = code
        return out

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Buffer-major ranged reads: for each buffer ``i``, key ``j`` and fragment ``k``,
        ``all_sizes[i][j][k]`` bytes at ``all_src_offsets[i][j][k]`` of ``all_keys[i][j]`` into
        ``buffer_ptrs[i]`` (inside its ``register_buffer`` region) at
        ``all_dst_offsets[i][j][k]``. ``results[i][j][k]`` is the bytes read or a negative
        code; lists of mismatched lengths answer ``-600`` in their places, as in Mooncake. The
        reads of all keys take one round trip to the master."""
        results = _ranged_shape(len(buffer_ptrs), all_keys, all_dst_offsets)
        lists = (all_keys, all_dst_offsets, all_src_offsets, all_sizes)
        if any(len(x) != len(buffer_ptrs) for x in lists):
            _codes.log.error("get_into_ranges: the lists are not one per buffer")
            return results
        keys, ptrs, frags, rooms, where = [], [], [], [], []
        for i, ptr in enumerate(buffer_ptrs):
            room = self._room(int(ptr)) if ptr else 0
            groups = [all_keys[i], all_dst_offsets[i], all_src_offsets[i], all_sizes[i]]
            if room == 0 or len({len(g) for g in groups}) != 1:
                continue
            for j, (key, dst, src, sizes) in enumerate(zip(*groups)):
                if len(dst) == len(src) == len(sizes):
                    keys.append(key)
                    ptrs.append(int(ptr))
                    rooms.append(room)
                    frags.append(list(zip(dst, src, sizes)))
                    where.append((i, j))
        if not keys:
            return results
        each = self._run("get_into_ranges", INVALID_PARAMS,
                         lambda s: s.batch_get_ranges(keys, ptrs, frags, rooms))
        for n, (i, j) in enumerate(where):
            if isinstance(each, int):
                results[i][j] = [each] * len(frags[n])
            else:
                results[i][j] = _each(each[n], "get_into_ranges", ok=lambda r: r)
        return results

    # ------------------------------------------------------------------ ranged sessions

    def batch_get_session_start(self, keys):
        """Looks each key up once, taking its read lease, for the ranged reads of
        ``batch_get_into_multi_buffer_ranges``; one code per key (0, or why it cannot be
        read)."""
        # Before setup / after close Mooncake answers the session calls' lists with [].
        if self._need() is None or not keys:
            return []
        each = self._run("batch_get_session_start", INVALID_PARAMS,
                         lambda s: s.batch_locate(list(keys)))
        if isinstance(each, int):
            return [each] * len(keys)
        out = []
        with self._lock:
            for key, found in zip(keys, each):
                if isinstance(found, yuebing.YuebingError):
                    self._get_sessions.pop(key, None)
                    out.append(_code(found, "batch_get_session_start"))
                else:
                    self._get_sessions[key] = found
                    out.append(0)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """Reads, for each key of an open get session, ``all_sizes[i][j]`` bytes at
        ``all_src_offsets[i][j]`` of the object into ``all_buffer_ptrs[i][j]``, without a
        round trip to the master; the bytes read per key, or a negative code (-600 without a
        session or for a range outside the object; -707 once the lease ended: the session is
        dropped)."""
        if self._need() is None:
            return []
        with self._lock:
            sessions = dict(self._get_sessions)
        todo = _session_items("batch_get_into_multi_buffer_ranges", keys, all_buffer_ptrs,
                              all_sizes, all_src_offsets, sessions)
        out, items = todo
        if not items:
            return out
        each = self._run("batch_get_into_multi_buffer_ranges", INVALID_PARAMS,
                         lambda s: s.batch_read_located(*_session_lists(items)))
        for n, (i, _) in enumerate(items):
            result = each if isinstance(each, int) else each[n]
            if isinstance(result, yuebing.LeaseExpired):
                with self._lock:
                    if self._get_sessions.get(keys[i]) is sessions[keys[i]]:
                        del self._get_sessions[keys[i]]
            out[i] = result if isinstance(result, int) else _code(
                result, "batch_get_into_multi_buffer_ranges")
        return out

    def batch_get_session_end(self, keys):
        """Closes the get sessions of ``keys`` (their leases run out on their own); 0 (-1
        before setup, as Mooncake)."""
        if self._need() is None:
            return -1
        with self._lock:
            for key in keys:
                self._get_sessions.pop(key, None)
        return 0

    def batch_put_session_start(self, keys, sizes, config=None):
        """Reserves space for each object of ``sizes[i]`` bytes under ``keys[i]`` (one round
        trip to the master), for the ranged writes of ``batch_put_from_multi_buffer_ranges``;
        one code per key (-600 for a key whose put session is open already)."""
        config = _DEFAULT if config is None else config
        if self._need() is None:
            return []
        if len(keys) != len(sizes):
            return [INVALID_PARAMS] * len(keys)
        if config.group_ids is not None and len(config.group_ids) != len(keys):
            _codes.log.error("batch_put_session_start: %d group_ids for %d keys",
                             len(config.group_ids), len(keys))
            return [INVALID_PARAMS] * len(keys)
        opts = _put_options(config)
        if opts is None:
            return [INVALID_PARAMS] * len(keys)
        out = [0] * len(keys)
        with self._lock:
            start = [i for i, k in enumerate(keys) if k not in self._put_sessions]
        for i in set(range(len(keys))) - set(start):
            _codes.log.error("batch_put_session_start: a put session of %r is open", keys[i])
            out[i] = INVALID_PARAMS
        try:
            ks, ns = [keys[i] for i in start], [_address(sizes[i]) for i in start]
        except (TypeError, ValueError) as e:
            _codes.log.error("batch_put_session_start: %s", e)
            return [INVALID_PARAMS] * len(keys)
        if not start:
            return out
        each = self._run("batch_put_session_start", INVALID_PARAMS,
                         lambda s: s.batch_reserve(ks, ns, **opts))
        with self._lock:
            for n, i in enumerate(start):
                r = each if isinstance(each, int) else each[n]
                if isinstance(r, yuebing.Reservation):
                    self._put_sessions[keys[i]] = r
                else:
                    out[i] = r if isinstance(r, int) else _code(r, "batch_put_session_start")
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """Writes, for each key of an open put session, ``all_sizes[i][j]`` bytes from
        ``all_buffer_ptrs[i][j]`` to ``all_dst_offsets[i][j]`` of the object, without a round
        trip to the master; the bytes written per key, or a negative code (-600 without a
        session, for a range outside the object, or once the session is ending)."""
        if self._need() is None:
            return []
        with self._lock:
            sessions = dict(self._put_sessions)
        out, items = _session_items("batch_put_from_multi_buffer_ranges", keys,
                                    all_buffer_ptrs, all_sizes, all_dst_offsets, sessions)
        if not items:
            return out
        each = self._run("batch_put_from_multi_buffer_ranges", INVALID_PARAMS,
                         lambda s: s.batch_write_reserved(*_session_lists(items)))
        for n, (i, _) in enumerate(items):
            result = each if isinstance(each, int) else each[n]
            out[i] = result if isinstance(result, int) else _code(
                result, "batch_put_from_multi_buffer_ranges")
        return out

    def batch_put_session_end(self, keys):
        """Makes each put session's object readable once its range writes under way ended
        (one round trip to the master); one code per key. A failed one stays open: end it
        again or revoke it."""
        return self._finish_sessions("batch_put_session_end", keys, True)

    def batch_put_session_revoke(self, keys):
        """Drops each put session's object once its range writes under way ended (one round
        trip to the master); one code per key."""
        return self._finish_sessions("batch_put_session_revoke", keys, False)

    def _finish_sessions(self, what, keys, publish):
        if self._need() is None:
            return []
        with self._lock:
            found = [(i, self._put_sessions.get(k)) for i, k in enumerate(keys)]
        out = [INVALID_PARAMS] * len(keys)
        todo = [(i, r) for i, r in found if r is not None]
        if not todo:
            return out
        rs = [r for _, r in todo]
        each = self._run(what, INVALID_PARAMS, (lambda s: s.batch_publish(rs)) if publish
                         else (lambda s: s.batch_revoke(rs)))
        with self._lock:
            for n, (i, r) in enumerate(todo):
                result = each if isinstance(each, int) else each[n]
                # A revoke of a write the master no longer has leaves nothing to drop.
                done = result is None or (not publish
                                          and isinstance(result, yuebing.ObjectNotFound))
                if done:
                    if self._put_sessions.get(keys[i]) is r:
                        del self._put_sessions[keys[i]]
                    out[i] = 0
                else:
                    out[i] = result if isinstance(result, int) else _code(result, what)
        return out

    # ------------------------------------------------------------------ segments and memory

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Maps ``size`` bytes of the file at ``path`` (under ``/dev/shm``, on a filesystem) from
        ``offset`` (page-aligned; the range inside the file) and mounts them as a segment of
        this client: ``{"ret": 0, "segment_ids": [id]}``, or ``ret`` -1 (nothing mounted).
        Objects placed there are written into the file; peers reach it over tcp. A file
        truncated meanwhile fails the transfers that touch its lost pages."""
        fail = {"ret": -1, "segment_ids": []}
        store = self._need()
        if store is None or not _protocol_ok("mount_segment", protocol):
            return fail
        try:
            path = os.fsdecode(path)
            size, offset = _address(size), _address(offset)
        except (TypeError, ValueError) as e:
            _codes.log.error("mount_segment: %s", e)
            return fail
        if size == 0:
            _codes.log.error("mount_segment: size 0")
            return fail
        segment = self._mount("mount_segment", "file",
                              lambda: store.mount_file(path, size, offset))
        return fail if segment is None else {"ret": 0, "segment_ids": [segment]}

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of ``mount_segment``; the file is unmapped once
        ``grace_period_seconds`` passed (their objects stay readable meanwhile; 0: dropped at
        once); 0, or the first failure's code (-1 for an id not mounted by ``mount_segment``)."""
        return self._unmount("unmount_segment", "file", segment_ids, grace_period_seconds)

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocates ``size`` bytes (rounded up to 4 MiB, as Mooncake's slabs) and mounts them
        as a segment of this client: ``{"ret": 0, "segment_ids": [id], "allocated_size": n}``,
        or ``ret`` -1 (nothing mounted)."""
        fail = {"ret": -1, "segment_ids": [], "allocated_size": 0}
        store = self._need()
        if store is None or not _protocol_ok("allocate_and_mount_segment", protocol):
            return fail
        try:
            size = _address(size)
        except (TypeError, ValueError) as e:
            _codes.log.error("allocate_and_mount_segment: %s", e)
            return fail
        if size == 0 or size > (1 << 64) - _SLAB:
            _codes.log.error("allocate_and_mount_segment: size %d", size)
            return fail
        aligned = -(-size // _SLAB) * _SLAB
        segment = self._mount("allocate_and_mount_segment", "allocated",
                              lambda: store.mount_space(aligned))
        if segment is None:
            return fail
        return {"ret": 0, "segment_ids": [segment], "allocated_size": aligned}

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of ``allocate_and_mount_segment`` and frees their memory once
        ``grace_period_seconds`` passed (their objects stay readable meanwhile; 0: dropped at
        once); 0, or the first failure's code (-1 for an id not mounted that way)."""
        return self._unmount("unmount_and_free_segment", "allocated", segment_ids,
                             grace_period_seconds)

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        """Drains the local disk segment of SSD offload. yuebing-mooncake has no SSD tier yet,
        so, as Mooncake's client without SSD offload, there is nothing to drain: 0."""
        try:
            _address(grace_period_seconds)
        except (TypeError, ValueError) as e:
            _codes.log.error("unmount_local_disk_segment: %s", e)
            return -1
        if self._need() is None:
            return -1
        _codes.log.warning("unmount_local_disk_segment: SSD offload is not enabled")
        return 0

    def _mount(self, what, kind, mount):
        """Runs ``mount`` (a ``yuebing.Store`` call that returns a space id) and records the
        new range under a fresh segment id; None when it failed."""
        try:
            space = mount()
        except yuebing.YuebingError as e:
            _codes.log.error("%s: %s (yuebing code %d)", what, e, e.code)
            return None
        segment = str(uuid.uuid4())
        with self._lock:
            self._segments[segment] = (space, kind)
        return segment

    def _unmount(self, what, kind, segment_ids, grace_period_seconds):
        """Unmounts the segments of ``segment_ids`` mounted as ``kind``; 0, or the first
        failure's code."""
        store = self._need()
        if store is None:
            return -1
        try:
            grace = float(_address(grace_period_seconds))
        except (TypeError, ValueError) as e:
            _codes.log.error("%s: %s", what, e)
            return -1
        first = 0
        for segment in segment_ids:
            with self._lock:
                space, mounted_as = self._segments.get(segment, (None, None))
            if mounted_as != kind:
                _codes.log.error("%s: %r is not a segment it unmounts here", what, segment)
                first = first or -1
                continue
            try:
                store.unmount_space(space, grace)
            except yuebing.YuebingError as e:
                # Kept: its memory is still mounted, ask again.
                first = first or _code(e, what)
                continue
            with self._lock:
                self._segments.pop(segment, None)
        return first

    def alloc_from_mem_pool(self, size):
        """The address of ``size`` zero-filled bytes registered with this client for the
        zero-copy calls, freed at ``close``; 0 on failure. A dummy client's comes from the
        pool of ``setup_dummy``'s ``mem_pool_size``, shared with its real client, and is not
        registered yet (``register_buffer`` it)."""
        if self._dummy is not None:
            return _dummy.alloc_pool(self, size)
        store = self._need()
        try:
            size = _address(size)
        except (TypeError, ValueError) as e:
            _codes.log.error("alloc_from_mem_pool: %s", e)
            return 0
        if store is None or size == 0:
            return 0
        addr = _memory.map_anonymous(size)
        if not addr:
            return 0
        try:
            store.register_buffer(addr, size)
        except (yuebing.YuebingError, ValueError) as e:
            _codes.log.error("alloc_from_mem_pool: %s", e)
            _memory.unmap(addr, size)
            return 0
        with self._lock:
            if self._store is store:
                self._pool[addr] = size
                self._regions[addr] = size
                return addr
        # Closed or set up again meanwhile: ended on the store it was registered with.
        try:
            store.unregister_buffer(addr)
        except (yuebing.YuebingError, ValueError) as e:
            _codes.log.warning("alloc_from_mem_pool: %s; %#x stays mapped", e, addr)
            return 0
        _memory.unmap(addr, size)
        return 0

    def _forget_shared(self, base):
        """Host memory at ``base`` is being freed: a dummy client tells its real client to let
        go of it (a client set up normally has nothing to do)."""
        link = self._dummy
        if link is not None:
            try:
                link.unshare(base)
            except _dummy.LinkError as e:
                _codes.log.warning("the real client was not told of freed memory: %s", e)

    def _overlaps(self, ptr, size):
        """Whether a ``register_buffer`` region of this client overlaps ``[ptr, ptr+size)``."""
        with self._lock:
            regions = [*self._regions.items(), *self._retiring.items()]
        return any(base < ptr + size and ptr < base + n for base, n in regions)

    # ------------------------------------------------------------------ keys and metadata

    def is_exist(self, key, /):
        """1 if ``key`` exists, 0 if not, or a negative code."""
        if not key:
            return 0
        return self._run("is_exist", INVALID_PARAMS, lambda s: int(s.exist(key)))

    def batch_is_exist(self, keys):
        """``is_exist`` for each key."""
        if not keys:
            return []
        each = self._run("batch_is_exist", INVALID_PARAMS, lambda s: s.batch_exist(keys))
        if isinstance(each, int):
            return [each] * len(keys)
        return _each(each, "batch_is_exist", ok=int)

    def get_size(self, key, /):
        """The size of ``key``'s value, or a negative code."""
        if not key:
            return _codes.OBJECT_NOT_FOUND
        return self._run("get_size", INVALID_PARAMS, lambda s: s.get_size(key))

    def remove(self, key, force=False):
        """Removes ``key``: 0, -704 if missing, -706 while a reader holds a lease (unless
        ``force``)."""
        if not key:
            return _codes.OBJECT_NOT_FOUND
        return self._run("remove", INVALID_PARAMS, _ok(lambda s: s.remove(key, force)))

    def batch_remove(self, keys, force=False):
        """``remove`` for each key."""
        if not keys:
            return []
        each = self._run("batch_remove", INVALID_PARAMS, lambda s: s.batch_remove(keys, force))
        if isinstance(each, int):
            return [each] * len(keys)
        return _each(each, "batch_remove")

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the objects whose key the pattern matches somewhere; how many, or -600 for a
        bad pattern."""
        return self._run("remove_by_regex", INVALID_PARAMS,
                         lambda s: s.remove_by_regex(regex_pattern, force))

    def remove_all(self, force=False):
        """Removes every object (without ``force``, not those with a read lease); how many."""
        return self._run("remove_all", INVALID_PARAMS, lambda s: s.remove_all(force))

    def batch_replica_clear(self, keys, segment_name=""):
        """Drops the replicas of ``keys`` on segment ``segment_name`` (a client's
        ``get_hostname()``; all replicas when empty) where nothing uses the object: no lease
        (a put counts as a read, as in Mooncake), no write in progress. An object left with
        no replica is removed. Returns the keys cleared."""
        if not keys:
            return []
        node = _hostname.node_name(segment_name) if segment_name else ""
        found = self._run("batch_replica_clear", [],
                          lambda s: s.batch_replica_clear(list(keys), node), _logged([]))
        return found if isinstance(found, list) else []

    # ------------------------------------------------------------------ copy / move tasks

    def create_copy_task(self, key, targets):
        """Adds a replica of ``key`` on each of ``targets`` (segment names), run in the
        background by the client holding a source replica: ``(task_id, 0)``, or
        ``((0, 0), code)``. Follow it with ``query_task``."""
        nodes = [_hostname.node_name(t) for t in targets]
        found = self._run("create_copy_task", INVALID_PARAMS,
                          lambda s: s.create_copy_task(key, nodes))
        return _task_answer(found)

    def create_move_task(self, key, source, target):
        """Moves ``key``'s replica on segment ``source`` to segment ``target`` in the
        background: ``(task_id, 0)``, or ``((0, 0), code)``."""
        src, dst = _hostname.node_name(source), _hostname.node_name(target)
        found = self._run("create_move_task", INVALID_PARAMS,
                          lambda s: s.create_move_task(key, src, dst))
        return _task_answer(found)

    def query_task(self, task_id):
        """Where a copy or move task is: ``(QueryTaskResponse, 0)``, or ``(None, code)``
        (``TASK_NOT_FOUND``, -1400, for an unknown id)."""
        high, low = _task_id(task_id)
        found = self._run("query_task", INVALID_PARAMS,
                          lambda s: s.query_task((high, low)))
        if isinstance(found, int):
            return None, found
        return _task_response(found), OK

    def get_replica_desc(self, key):
        """The replicas of ``key`` (``[]`` when it is missing)."""
        found = self._run("get_replica_desc", [], lambda s: s.replicas(key), _logged([]))
        return _descriptors(found, self._hostname) if not isinstance(found, list) else []

    def batch_get_replica_desc(self, keys):
        """``{key: replicas}`` for the keys found (missing keys are absent)."""
        each = self._run("batch_get_replica_desc", [], lambda s: s.batch_replicas(keys),
                         _logged([]))
        return {k: _descriptors(r, self._hostname) for k, r in zip(keys, each)
                if not isinstance(r, yuebing.YuebingError)}



# A dummy client's calls go to its real client (see ``setup_dummy`` and ``_dummy``).
_dummy.install(MooncakeDistributedStore)


# Mooncake's PyTorch methods (the stock 0.3.13.post1 wheel's 42). They need torch, which the
# drop-in does not depend on and which cannot be installed where it is tested: each raises
# ``NotImplementedError`` saying so, not ``AttributeError``, so a caller learns why at once.
_TENSOR_METHODS = (
    "batch_get_tensor", "batch_get_tensor_into", "batch_get_tensor_into_cuda",
    "batch_get_tensor_with_parallelism", "batch_get_tensor_with_parallelism_into",
    "batch_get_tensor_with_tp", "batch_get_tensor_with_tp_into", "batch_pub_tensor",
    "batch_pub_tensor_with_tp", "batch_put_tensor", "batch_put_tensor_from",
    "batch_put_tensor_with_parallelism", "batch_put_tensor_with_parallelism_from",
    "batch_put_tensor_with_tp", "batch_put_tensor_with_tp_from", "batch_upsert_pub_tensor",
    "batch_upsert_tensor", "batch_upsert_tensor_from", "batch_upsert_tensor_with_parallelism",
    "batch_upsert_tensor_with_parallelism_from", "get_tensor", "get_tensor_into",
    "get_tensor_into_cuda", "get_tensor_with_parallelism", "get_tensor_with_parallelism_into",
    "get_tensor_with_tp", "get_tensor_with_tp_into", "load_tensor_from_safetensor", "pub_tensor",
    "pub_tensor_with_tp", "put_tensor", "put_tensor_from", "put_tensor_with_parallelism",
    "put_tensor_with_parallelism_from", "put_tensor_with_tp", "put_tensor_with_tp_from",
    "save_tensor_to_safetensor", "upsert_pub_tensor", "upsert_tensor", "upsert_tensor_from",
    "upsert_tensor_with_parallelism", "upsert_tensor_with_parallelism_from",
)


def _tensor_method(name):
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(
            f"MooncakeDistributedStore.{name}: the PyTorch tensor methods are not in "
            "yuebing-mooncake (they need torch); move tensors' bytes with put_from / get_into "
            "on tensor.data_ptr() instead")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Mooncake's ``{name}``: raises ``NotImplementedError`` (needs torch)."
    return refuse


for _name in _TENSOR_METHODS:
    setattr(MooncakeDistributedStore, _name, _tensor_method(_name))
del _name


def _task_id(task_id):
    """A task id as Mooncake's UUID pair ``(high, low)`` (``TypeError`` for anything else)."""
    try:
        high, low = task_id
        return _address(high), _address(low)
    except (TypeError, ValueError) as e:
        raise TypeError(f"task_id must be a (high, low) pair of ints, not {task_id!r}") from e


def _task_answer(found):
    """``create_*_task``'s answer: ``(id, 0)``, or ``((0, 0), code)``."""
    if isinstance(found, int):
        return (0, 0), found
    return tuple(found), OK


def _task_response(task):
    """A ``yuebing.ReplicaTask`` as Mooncake's ``QueryTaskResponse``."""
    r = QueryTaskResponse()
    r.id = tuple(task.id)
    r.type = TaskType[task.kind]
    r.status = TaskStatus[task.state]
    r.created_at_ms_epoch = task.created_ms
    r.last_updated_at_ms_epoch = task.updated_ms
    client = int(task.client, 16)
    r.assigned_client = (client >> 64, client & ((1 << 64) - 1))
    r.message = task.message
    return r


def _address(value):
    """An address or size as an ``int`` (``numpy`` integers too); ``ValueError`` when it does
    not fit 64 bits or is negative."""
    n = operator.index(value)
    if not 0 <= n < 1 << 64:
        raise ValueError(f"{n} is not an address or size")
    return n


def _items(keys, ptrs, sizes, empty):
    """Splits a zero-copy batch: the answers known already (``empty`` for a size 0, -600 for a
    bad address or size) by position, and the ``(position, (key, ptr, size))`` items to run."""
    out, todo = [None] * len(keys), []
    for i, (k, p, n) in enumerate(zip(keys, ptrs, sizes)):
        try:
            p, n = _address(p), _address(n)
        except (TypeError, ValueError):
            out[i] = INVALID_PARAMS
            continue
        if n == 0:
            out[i] = empty
        elif p == 0:
            out[i] = INVALID_PARAMS
        else:
            todo.append((i, (k, p, n)))
    return out, todo


def _multi_items(keys, all_ptrs, all_sizes):
    """Splits a multi-buffer batch: -600 by position for a key whose lists differ in length,
    hold a bad address or size, or no byte at all; the ``(position, (key, [(ptr, size)]))``
    items to run (buffers of 0 bytes left out)."""
    out, todo = [None] * len(keys), []
    for i, (k, ptrs, sizes) in enumerate(zip(keys, all_ptrs, all_sizes)):
        try:
            if len(ptrs) != len(sizes):
                raise ValueError("lists of different lengths")
            buffers = [(_address(p), _address(n)) for p, n in zip(ptrs, sizes)]
        except (TypeError, ValueError) as e:
            _codes.log.error("keys[%d]: %s", i, e)
            out[i] = INVALID_PARAMS
            continue
        buffers = [(p, n) for p, n in buffers if n]
        if not buffers or any(p == 0 for p, _ in buffers):
            out[i] = INVALID_PARAMS
        else:
            todo.append((i, (k, buffers)))
    return out, todo


def _multi_lists(todo):
    """The keys, address lists and size lists of the items ``_multi_items`` left to run."""
    keys = [k for _, (k, _) in todo]
    ptrs = [[p for p, _ in b] for _, (_, b) in todo]
    sizes = [[n for _, n in b] for _, (_, b) in todo]
    return keys, ptrs, sizes


# Mooncake rounds an allocated segment up to its allocator's slab size (cachelib, 4 MiB).
_SLAB = 4 << 20


def _serve_http(store, port):
    """The client HTTP server of ``setup(enable_client_http_server=True)``: ``/health``,
    ``/ready`` and ``/metrics`` on ``port`` of the address this client's engine listens on (as
    resolved, so ``localhost`` does not become ``::1`` alone), until it is closed. One that
    cannot listen is logged and the client goes on without it, as Mooncake's does."""
    host = store.segment_name.rsplit(":", 1)[0]
    try:
        addr = store.serve_admin(f"{host}:{port}")
    except yuebing.YuebingError as e:
        _codes.log.warning("setup: the client HTTP server cannot listen on port %d: %s; "
                           "continuing without it", port, e)
        return
    _codes.log.info("setup: client HTTP server on %s", addr)


def _protocol_ok(what, protocol):
    """Whether yuebing moves a segment's bytes over ``protocol`` (tcp or rdma, as the client's
    engine serves them; shared memory on one host): the others are not built."""
    if protocol in _setup.PROTOCOLS or protocol == "":
        return True  # (the client's engine warned at setup if rdma is not in use)
    _codes.log.error("%s: protocol %r: yuebing-mooncake moves bytes over tcp or rdma (and "
                     "shared memory between processes of one host)", what, protocol)
    return False


def _session_items(what, keys, all_ptrs, all_sizes, all_offsets, sessions):
    """Splits a ranged session call: -600 by position for a key without a session or whose
    lists are bad; the ``(position, (session, [(ptr, size, offset)]))`` items to run."""
    out = [INVALID_PARAMS] * len(keys)
    if not len(keys) == len(all_ptrs) == len(all_sizes) == len(all_offsets):
        _codes.log.error("%s: the lists are not one per key", what)
        return out, []
    todo = []
    for i, (key, ptrs, sizes, offsets) in enumerate(zip(keys, all_ptrs, all_sizes,
                                                         all_offsets)):
        session = sessions.get(key)
        try:
            if not len(ptrs) == len(sizes) == len(offsets):
                raise ValueError("lists of different lengths")
            ranges = [(_address(p), _address(n), _address(o))
                      for p, n, o in zip(ptrs, sizes, offsets)]
        except (TypeError, ValueError) as e:
            _codes.log.error("%s: keys[%d]: %s", what, i, e)
            continue
        if session is None:
            _codes.log.error("%s: no open session of %r", what, key)
        elif not ranges or any(p == 0 or n == 0 for p, n, _ in ranges):
            _codes.log.error("%s: keys[%d]: an empty range or a null address", what, i)
        else:
            todo.append((i, (session, ranges)))
    return out, todo


def _session_lists(items):
    """The sessions, address lists, offset lists and size lists of ``_session_items``' items,
    as ``yuebing.Store``'s ranged calls take them."""
    sessions = [s for _, (s, _) in items]
    ptrs = [[p for p, _, _ in r] for _, (_, r) in items]
    offsets = [[o for _, _, o in r] for _, (_, r) in items]
    sizes = [[n for _, n, _ in r] for _, (_, r) in items]
    return sessions, ptrs, offsets, sizes


def _descriptors(found, own):
    """``ReplicaDescriptor``s of a ``yuebing`` replicas result, their nodes spelled for the
    client named ``own`` (see ``_hostname.spelled``)."""
    return [ReplicaDescriptor(_hostname.spelled(node, own), addr, size)
            for node, addr, size in found.replicas]
