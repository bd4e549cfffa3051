"""Host memory as Mooncake hands it out: ``MooncakeHostMemAllocator`` (page-aligned,
zero-filled shared mappings of sealed memfds, returned as int addresses, which a dummy client's
real client can map too: see ``_shared``) and ``bind_to_numa_node``.

Each allocation holds a file descriptor (its memfd) until it is freed, and is a shared
mapping: a child made by ``fork`` shares it with its parent rather than getting a copy.

Memory a store still has registered is never freed: ``free`` of it answers -1 until every store
that registered it has called ``unregister_buffer`` (or ``close``), so no transfer can land in
memory that went back to the system.
"""

import ctypes
import mmap
import os
import threading
import weakref

from . import _codes, _shared

# The C library as `_shared` declares it (mmap, munmap), for malloc, free and syscall too.
_libc, _MAP_FAILED = _shared._libc, _shared._MAP_FAILED

# The drop-in's stores, for the check that memory is not freed while one has it registered.
_STORES = weakref.WeakSet()
# Held by a store's registration and by `free`'s check-and-unmap, so that memory cannot be
# registered between the check and the unmap.
REGISTRATION = threading.Lock()


def track(store):
    """Counts ``store`` (a ``MooncakeDistributedStore``) among those ``free`` asks."""
    _STORES.add(store)


def _registered(ptr, size):
    """Whether some live store has a registration overlapping ``[ptr, ptr + size)``."""
    for store in list(_STORES):
        if store._overlaps(ptr, size):
            return True
    return False


def map_anonymous(size):
    """A new zero-filled, page-aligned private mapping of ``size`` bytes; its address, or 0."""
    if size <= 0:
        return 0
    addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                      mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr in (None, _MAP_FAILED):
        _codes.log.error("mmap of %d bytes: %s", size, os.strerror(ctypes.get_errno()))
        return 0
    return addr


def unmap(addr, size):
    """Returns a mapping of ``map_anonymous`` to the system."""
    _shared.unmap(addr, size)


# Every allocator's live allocations, {address: (size, memfd)}: a dummy client hands the memfd
# of the one holding a buffer it registers to its real client.
_ALLOCATED = {}
_ALLOCATED_LOCK = threading.Lock()


def shared_region(ptr, size):
    """``(base, size, fd)`` of the ``MooncakeHostMemAllocator`` allocation that holds
    ``[ptr, ptr + size)``, or ``None``."""
    with _ALLOCATED_LOCK:
        for base, (n, fd) in _ALLOCATED.items():
            if base <= ptr and ptr + size <= base + n:
                return base, n, fd
    return None


class MooncakeHostMemAllocator:
    """Host memory for Mooncake Store calls: ``alloc(size)`` returns the address of ``size``
    zero-filled, page-aligned bytes (0 on failure), shareable with a dummy client's real
    client; ``free(ptr)`` returns them (0, or -1 for an address it did not allocate or one a
    store still has registered). What is not freed lives until the process exits."""

    def __init__(self):
        self._sizes = {}
        self._lock = threading.Lock()

    def alloc(self, size):
        """The address of ``size`` new bytes, or 0."""
        try:
            size = int(size)
        except (TypeError, ValueError):
            _codes.log.error("MooncakeHostMemAllocator.alloc: size %r is not an int", size)
            return 0
        addr, fd = _shared.create(size)
        if addr:
            with self._lock, _ALLOCATED_LOCK:
                self._sizes[addr] = size
                _ALLOCATED[addr] = (size, fd)
        return addr

    def free(self, ptr):
        """Frees memory ``alloc`` returned; 0, or -1 (not this allocator's, or still
        registered with a store: unregister it first)."""
        with REGISTRATION, self._lock:
            size = self._sizes.get(int(ptr))
            if size is None:
                _codes.log.error("MooncakeHostMemAllocator.free: %#x was not allocated here",
                                 int(ptr))
                return -1
            if _registered(int(ptr), size):
                _codes.log.error("MooncakeHostMemAllocator.free: %#x is still registered with "
                                 "a store; unregister_buffer it first", int(ptr))
                return -1
            del self._sizes[int(ptr)]
            with _ALLOCATED_LOCK:
                _, fd = _ALLOCATED.pop(int(ptr))
            # A real client that maps it for a dummy client lets go of it first.
            for store in list(_STORES):
                store._forget_shared(int(ptr))
            _shared.release(int(ptr), size, fd)
        return 0


_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}
_MPOL_PREFERRED = 1


def _cpus_of(node):
    """The CPUs of NUMA node ``node``, from sysfs."""
    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        text = f.read().strip()
    cpus = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def bind_to_numa_node(node):
    """Runs the calling thread on NUMA node ``node``'s CPUs and makes its memory prefer that
    node (Mooncake's ``numa_run_on_node`` + ``numa_set_preferred``). A node that does not exist
    raises ``ValueError``."""
    node = int(node)
    try:
        cpus = _cpus_of(node) if node >= 0 else None
    except OSError:
        cpus = None
    if not cpus:
        raise ValueError(f"NUMA node {node} does not exist on this machine "
                         f"(see /sys/devices/system/node)")
    os.sched_setaffinity(0, cpus)
    number = _SYS_SET_MEMPOLICY.get(os.uname().machine)
    if number is None:
        _codes.log.warning("bind_to_numa_node: no set_mempolicy on %s; CPUs bound only",
                           os.uname().machine)
        return
    bits = ctypes.c_ulong * (node // (8 * ctypes.sizeof(ctypes.c_ulong)) + 1)
    mask = bits()
    mask[node // (8 * ctypes.sizeof(ctypes.c_ulong))] = 1 << (node % (8 * ctypes.sizeof(
        ctypes.c_ulong)))
    maxnode = len(mask) * 8 * ctypes.sizeof(ctypes.c_ulong) + 1
    if _libc.syscall(number, _MPOL_PREFERRED, mask, ctypes.c_ulong(maxnode)) != 0:
        _codes.log.warning("bind_to_numa_node: set_mempolicy: %s",
                           os.strerror(ctypes.get_errno()))


def get_alloc_func_addr():
    """The address of a C allocation function with the signature of PyTorch's pluggable
    allocators, ``void *alloc(size_t size, int device, void *stream)``: the C library's
    ``malloc`` (the System V ABI passes the extra arguments in registers ``malloc`` ignores).
    Host memory only."""
    return ctypes.cast(_libc.malloc, ctypes.c_void_p).value


def get_free_func_addr():
    """The address of the matching ``void free(void *ptr, size_t size, int device, void
    *stream)``: the C library's ``free``."""
    return ctypes.cast(_libc.free, ctypes.c_void_p).value
