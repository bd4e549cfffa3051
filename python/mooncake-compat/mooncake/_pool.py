"""``BufferPool``: scratch buffers leased from memory registered once with a store, for
repeated zero-copy calls (the destination of ``get_into``, the source of ``put_from``).

Regions come in power-of-two size classes (at least ``min_size_class``), each allocated and
registered with the store the first time it is needed and kept for reuse; ``close`` unregisters
and frees them. A lease's ``buffer`` is a ``memoryview``: ``release`` refuses while slices or other
views of it are alive, and once released the view raises on any access, so the region can be
leased again without anyone reading or writing it through an old lease.
"""

import ctypes
import sys
import threading
import time

from . import _memory


class BufferLease:
    """A leased region: ``ptr`` (its address, for the zero-copy calls), ``size`` (the bytes
    asked for), ``buffer`` (a ``memoryview`` of them) and ``release()``. A context manager:
    ``with pool.buffer(n) as lease:`` releases it at the end."""

    def __init__(self, pool, region, size):
        self._pool, self._region, self.size = pool, region, size
        self._array = (ctypes.c_char * size).from_address(region.addr)
        # Every live view of the memory (ours, and slices of it) holds one reference to the
        # array through their shared buffer: above this count, views outlive a release.
        self._refs = sys.getrefcount(self._array)
        self._view = self._new_view()

    def _new_view(self):
        return memoryview(self._array).cast("B")

    @property
    def ptr(self):
        """The region's address."""
        self._live()
        return self._region.addr

    @property
    def buffer(self):
        """A writable ``memoryview`` of the ``size`` bytes."""
        self._live()
        return self._view

    def _live(self):
        if self._region is None:
            raise RuntimeError("the lease was released")

    def release(self):
        """Gives the region back to the pool; ``BufferError`` while views of ``buffer`` are
        alive (delete them first). Releasing twice does nothing."""
        if self._region is None:
            return
        self._view.release()
        if sys.getrefcount(self._array) > self._refs:
            # Slices of `buffer` are alive: they would read and write the next lease's bytes.
            self._view = self._new_view()
            raise BufferError("views of the lease's buffer are alive: delete them, then "
                              "release")
        region, self._region = self._region, None
        self._pool._give_back(region)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except BufferError:
            pass


BufferLeaseView = memoryview
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = memoryview


class _Region:
    def __init__(self, addr, size):
        self.addr, self.size = addr, size


class BufferPool:
    """Leases scratch memory registered with ``store`` (a set-up ``MooncakeDistributedStore``).

    ``max_bytes`` bounds the bytes of regions leased at once (0: no bound but the machine's);
    ``max_regions`` the leases at once; when either is reached ``acquire`` waits for a release
    (``block_on_exhaustion``, ``default_timeout`` seconds) or raises ``RuntimeError``.
    ``prewarm_size`` / ``prewarm_count`` allocate regions up front. ``alignment`` is accepted:
    regions are page-aligned mappings."""

    def __init__(self, store, max_bytes=0, min_size_class=65536, max_size_class=None,
                 alignment=8 << 20, block_on_exhaustion=True, default_timeout=None,
                 max_regions=None, prewarm_size=None, prewarm_count=0):
        if min_size_class <= 0 or (max_size_class is not None and max_size_class < min_size_class):
            raise ValueError("size classes: min_size_class must be positive and at most "
                             "max_size_class")
        self._store = store
        self._max_bytes, self._max_regions = int(max_bytes), max_regions
        self._min, self._max = int(min_size_class), max_size_class
        self._block, self._timeout = bool(block_on_exhaustion), default_timeout
        self._free = {}
        self._all = []
        self._leased_bytes = self._leased = 0
        self._closed = False
        self._cond = threading.Condition()
        if prewarm_size and prewarm_count:
            self.prewarm(prewarm_size, prewarm_count)

    def _class_of(self, size):
        n = self._min
        while n < size:
            n *= 2
        if self._max is not None and n > self._max:
            raise ValueError(f"{size} bytes exceed the largest size class ({self._max})")
        return n

    def _new_region(self, n):
        addr = _memory.map_anonymous(n)
        if not addr:
            raise MemoryError(f"cannot map {n} bytes")
        if self._store.register_buffer(addr, n) != 0:
            _memory.unmap(addr, n)
            raise RuntimeError("the store refused to register the pool's memory "
                               "(is it set up?)")
        region = _Region(addr, n)
        self._all.append(region)
        return region

    def prewarm(self, size, count):
        """Allocates and registers ``count`` regions for leases of ``size`` bytes."""
        n = self._class_of(int(size))
        with self._cond:
            self._check_open()
            for _ in range(int(count)):
                self._free.setdefault(n, []).append(self._new_region(n))

    def acquire(self, size, block=None, timeout=None):
        """A lease of ``size`` bytes (see the class for waiting and limits)."""
        size = int(size)
        if size <= 0:
            raise ValueError("a lease needs at least one byte")
        n = self._class_of(size)
        if self._max_bytes and n > self._max_bytes:
            raise RuntimeError(f"a lease of {size} bytes ({n} with its size class) exceeds the "
                               f"pool's max_bytes ({self._max_bytes})")
        block = self._block if block is None else bool(block)
        timeout = self._timeout if timeout is None else timeout
        end = None if timeout is None else time.monotonic() + float(timeout)
        with self._cond:
            while True:
                self._check_open()
                if self._fits(n):
                    break
                left = None if end is None else end - time.monotonic()
                if not block or (left is not None and left <= 0):
                    raise RuntimeError(f"BufferPool exhausted: {self._leased} leases, "
                                       f"{self._leased_bytes} bytes leased")
                self._cond.wait(left)
            free = self._free.get(n)
            region = free.pop() if free else self._new_region(n)
            self._leased += 1
            self._leased_bytes += n
        return BufferLease(self, region, size)

    buffer = acquire

    def _fits(self, n):
        if self._max_regions is not None and self._leased >= self._max_regions:
            return False
        return not self._max_bytes or self._leased_bytes + n <= self._max_bytes

    def _check_open(self):
        if self._closed:
            raise RuntimeError("the BufferPool is closed")

    def _give_back(self, region):
        with self._cond:
            self._leased -= 1
            self._leased_bytes -= region.size
            if self._closed:
                self._free_region(region)
            else:
                self._free.setdefault(region.size, []).append(region)
            self._cond.notify_all()

    def _free_region(self, region):
        if self._store.unregister_buffer(region.addr) == 0:
            _memory.unmap(region.addr, region.size)

    def close(self):
        """Unregisters and frees the pool's memory; ``RuntimeError`` while leases are out."""
        with self._cond:
            if self._closed:
                return
            if self._leased:
                raise RuntimeError(f"BufferPool.close: {self._leased} leases are still out")
            self._closed = True
            regions, self._free, self._all = self._all, {}, []
        for region in regions:
            self._free_region(region)


RegisteredBufferPool = BufferPool
