"""``BufferPool``: scratch buffers leased from memory registered with a store, for repeated
zero-copy calls (the destination of ``get_into``, the source of ``put_from``), with the
arguments, limits and errors of Mooncake's native pool.

As in Mooncake, the pool needs a store set up with a local buffer, and bounds the bytes leased
at once by ``max_bytes`` (0: twice the store's ``local_buffer_size``; a smaller value: the local
buffer's size). Where Mooncake carves leases out of the store's local buffer, the drop-in maps
regions of its own: power-of-two size classes (at least ``min_size_class``, at most
``max_size_class``), each registered with the store the first time it is needed and kept for
reuse until ``close``; a lease above ``max_size_class`` gets a region of its own, unregistered
and freed at its release. A lease's ``buffer`` is a new ``memoryview`` at each call; as in
Mooncake, ``release`` refuses (``RuntimeError``) while any view of a lease's buffer, or a slice
of one, is alive, and a view keeps its lease alive: the region is never leased again while
anyone can still reach it.
"""

import ctypes
import mmap
import threading
import time
import weakref

from . import _memory


class BufferLease:
    """A leased region: ``ptr`` (its address, for the zero-copy calls), ``size`` (the bytes
    asked for), ``buffer`` (a ``memoryview`` of them) and ``release()``. A context manager:
    ``with pool.buffer(n) as lease:`` releases it at the end."""

    def __init__(self, pool, region, size):
        self._pool, self._region, self._size = pool, region, size
        # Weak references to the ctypes arrays behind the live views of `buffer`, by their
        # ids: each view (and each slice of it) holds its array, and the array holds this
        # lease; an array's reference leaves when the array dies.
        self._exports = {}

    @property
    def size(self):
        """The bytes asked for."""
        return self._size

    @property
    def ptr(self):
        """The region's address."""
        region = self._region
        if region is None:
            raise RuntimeError("buffer lease is closed")
        return region.addr

    @property
    def buffer(self):
        """A new writable ``memoryview`` of the ``size`` bytes."""
        region = self._region
        if region is None:
            raise BufferError("buffer lease is closed")
        array = (ctypes.c_char * self._size).from_address(region.addr)
        array._lease = self  # a view keeps the lease, and so its region, alive
        exports = self._exports
        ref = weakref.ref(array, lambda r: exports.pop(id(r), None))
        exports[id(ref)] = ref
        return memoryview(array).cast("B")

    def release(self):
        """Gives the region back to the pool; ``RuntimeError`` while views of ``buffer`` are
        alive (delete them first). Releasing twice does nothing."""
        if self._region is None:
            return
        if len(self._exports):
            raise RuntimeError("cannot release buffer while exported views exist")
        region, self._region = self._region, None
        self._pool._give_back(region, max(self._size, 1))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        # No view is alive here: each one holds the lease.
        if getattr(self, "_region", None) is not None:
            region, self._region = self._region, None
            self._pool._give_back(region, max(self._size, 1))


BufferLeaseView = memoryview
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = memoryview


class _Region:
    def __init__(self, addr, size, cached):
        # `cached`: a size class's region, kept for reuse; else a lease's own, freed with it.
        self.addr, self.size, self.cached = addr, size, cached


class BufferPool:
    """Leases scratch memory registered with ``store`` (a set-up ``MooncakeDistributedStore``
    with a local buffer).

    ``max_bytes`` bounds the bytes leased at once (see the module); ``max_regions`` the leases
    at once; when either is reached ``acquire`` waits for a release (``block_on_exhaustion``;
    ``default_timeout`` seconds, else for ever) or raises ``RuntimeError``. ``alignment`` (a
    power of two, at least 8) is checked; regions are page-aligned mappings. ``prewarm`` maps
    regions up front."""

    def __init__(self, store, max_bytes=0, min_size_class=65536, max_size_class=None,
                 alignment=8 << 20, block_on_exhaustion=True, default_timeout=None,
                 max_regions=None, prewarm_size=None, prewarm_count=0):
        local = _local_buffer(store)
        min_size_class, alignment = _size(min_size_class), _size(alignment)
        if min_size_class == 0 or alignment == 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment < 8 or alignment & (alignment - 1):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        if not local:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        max_bytes = _size(max_bytes)
        self._max_bytes = 2 * local if max_bytes == 0 else max(max_bytes, local)
        self._min = min_size_class
        self._max = self._max_bytes if max_size_class is None else _size(max_size_class)
        self._store = store
        self._max_regions = None if max_regions is None else _size(max_regions)
        self._block = bool(block_on_exhaustion)
        self._timeout = None if default_timeout is None else float(default_timeout)
        self._free = {}
        self._all = []
        self._leased_bytes = self._leased = 0
        self._closed = False
        self._cond = threading.Condition()
        if prewarm_size is not None and prewarm_count:
            self.prewarm(prewarm_size, prewarm_count)

    def _class_of(self, size):
        """The size of the region for a lease of ``size`` bytes, and whether it is a size
        class's (kept for reuse)."""
        if size > self._max:
            return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE, False
        n = self._min
        while n < size:
            n *= 2
        return n, True

    def _new_region(self, n, cached):
        addr = _memory.map_anonymous(n)
        if not addr:
            raise RuntimeError(f"cannot map {n} bytes for the buffer pool")
        if self._store.register_buffer(addr, n) != 0:
            _memory.unmap(addr, n)
            raise RuntimeError("buffer registration failed")
        region = _Region(addr, n, cached)
        if cached:
            self._all.append(region)
        return region

    def prewarm(self, size, count):
        """Maps and registers ``count`` regions for leases of ``size`` bytes (of a size
        class; larger leases get regions of their own)."""
        n, cached = self._class_of(max(_size(size), 1))
        if not cached:
            return
        with self._cond:
            self._check_open()
            for _ in range(_size(count)):
                self._free.setdefault(n, []).append(self._new_region(n, True))

    def acquire(self, size, block=None, timeout=None):
        """A lease of ``size`` bytes (see the class for waiting and limits)."""
        size = _size(size)
        block = self._block if block is None else bool(block)
        timeout = self._timeout if timeout is None else float(timeout)
        if timeout is not None and timeout < 0:
            raise RuntimeError("timeout must be non-negative")
        need = max(size, 1)
        if need > self._max_bytes:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_open()
                if self._fits(need):
                    break
                if not block:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for buffer")
                self._cond.wait(left)
            n, cached = self._class_of(need)
            free = self._free.get(n) if cached else None
            region = free.pop() if free else self._new_region(n, cached)
            self._leased += 1
            self._leased_bytes += need
        return BufferLease(self, region, size)

    buffer = acquire

    def _fits(self, need):
        if self._max_regions is not None and self._leased >= self._max_regions:
            return False
        return self._leased_bytes + need <= self._max_bytes

    def _check_open(self):
        if self._closed:
            raise RuntimeError("buffer pool is closed")

    def _give_back(self, region, need):
        with self._cond:
            self._leased -= 1
            self._leased_bytes -= need
            keep = region.cached and not self._closed
            if keep:
                self._free.setdefault(region.size, []).append(region)
            self._cond.notify_all()
        if not keep:
            self._free_region(region)

    def _free_region(self, region):
        if self._store.unregister_buffer(region.addr) == 0:
            _memory.unmap(region.addr, region.size)

    def close(self):
        """Unregisters and frees the pool's memory; ``RuntimeError`` while leases are out."""
        with self._cond:
            if self._closed:
                return
            if self._leased:
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            regions, self._free, self._all = self._all, {}, []
        for region in regions:
            self._free_region(region)


RegisteredBufferPool = BufferPool


def _size(n):
    """``n`` as a size (a non-negative int), as Mooncake's binding takes it."""
    n = int(n)
    if n < 0:
        raise TypeError(f"a size must be a non-negative int, not {n}")
    return n


def _local_buffer(store):
    """The local buffer size of ``store``; ``RuntimeError`` for a store not set up."""
    if store is None:
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    set_up = getattr(store, "_store", None) is not None or getattr(store, "_dummy", None)
    if not set_up or not hasattr(store, "_local_buffer"):
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    return store._local_buffer
