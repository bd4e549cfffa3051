"""Mooncake's ``mooncake.engine.SharedSegment``: host memory that one rank of a group allocates
and every rank maps (MLA keeps the same KV cache on every tensor-parallel rank; offloaded once,
it takes host memory once).

Two phases, as in Mooncake: every rank calls ``SharedSegment.create(name, size, world_size,
rank_id, owner_rank)`` and gets ``(segment, blob)``; the ranks exchange their blobs (an
``all_gather``); then each calls ``segment.complete(blobs)`` (indexed by rank) and its
``base_addr()`` holds the owner's bytes. A rank's address range is reserved at ``create``; the
addresses differ between ranks, the bytes are the same.

The owner's memory is a sealed memfd (its size can never change, so no rank can make another's
accesses fault); the others reach it through ``/proc/PID/fd/N`` of the owner, which only
processes of its user may open, and check its seals and size before they map it. Only host
memory (``mmap=True``) is supported: ``supported(mmap=False)`` and ``host_register`` are
``False``, as on a build without device memory sharing.
"""

import os
import struct
import threading

from . import _shared

_MAGIC = b"YBSS"
_VERSION = 1
# magic, version, rank, owner, world size, size, owner's pid, memfd.
_BLOB = struct.Struct("<4sHHHHQII")


def _check_flags(mmap_, host_register):
    if not mmap_:
        raise RuntimeError("SharedSegment: device memory (mmap=False) is not supported by "
                           "yuebing-mooncake; share host memory (mmap=True)")
    if host_register:
        raise RuntimeError("SharedSegment: host_register needs a GPU runtime, which "
                           "yuebing-mooncake does not use")


class SharedSegment:
    """One rank's view of a shared segment (see the module's docs)."""

    def __init__(self, *_args, **_kwargs):
        raise TypeError("mooncake.engine.SharedSegment: No constructor defined! "
                        "(use SharedSegment.create)")

    @staticmethod
    def supported(mmap=True, host_register=False):
        """Whether this build can share memory across processes that way."""
        return bool(mmap) and not host_register

    @staticmethod
    def create(name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=True,
               host_register=False):
        """Phase one: ``(segment, blob)``. The owner allocates ``size`` bytes; every rank
        reserves ``size`` bytes of its address space for them."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        size, world, rank, owner = (int(size), int(world_size), int(rank_id),
                                    int(owner_rank))
        if size <= 0 or not 0 < world < 1 << 16 or not 0 <= rank < world \
                or not 0 <= owner < world:
            raise ValueError(f"SharedSegment.create: size {size}, rank {rank} and owner "
                             f"{owner} of a group of {world}")
        _check_flags(mmap, host_register)
        seg = object.__new__(SharedSegment)
        seg._init(name, size, world, rank, owner)
        return seg, seg._blob()

    def _init(self, name, size, world, rank, owner):
        self._name, self._size, self._world = name, size, world
        self._rank, self._owner = rank, owner
        self._lock = threading.Lock()
        self._ready = False
        self._fd = -1
        if rank == owner:
            self._base, self._fd = _shared.create(size)
            if not self._base:
                raise RuntimeError(f"SharedSegment {name}: {size} bytes could not be allocated")
        else:
            self._base = _shared.reserve(size)
            if not self._base:
                raise RuntimeError(f"SharedSegment {name}: {size} bytes of address space "
                                   "could not be reserved")

    def _blob(self):
        return _BLOB.pack(_MAGIC, _VERSION, self._rank, self._owner, self._world, self._size,
                          os.getpid(), max(self._fd, 0))

    def complete(self, blobs):
        """Phase two: ``blobs`` are every rank's, indexed by rank. Maps the owner's memory."""
        blobs = list(blobs)
        if len(blobs) != self._world:
            raise ValueError(f"SharedSegment {self._name}: {len(blobs)} blobs for a group of "
                             f"{self._world}")
        fields = [_parse(b, i) for i, b in enumerate(blobs)]
        for rank, f in enumerate(fields):
            if (f["owner"], f["world"], f["size"]) != (self._owner, self._world, self._size):
                raise ValueError(f"SharedSegment {self._name}: rank {rank} made another "
                                 "segment (owner, group size or size differ)")
        with self._lock:
            if self._ready:
                return
            if self._rank != self._owner:
                owner = fields[self._owner]
                path = f"/proc/{owner['pid']}/fd/{owner['fd']}"
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    _shared.map_peer_at(fd, self._size, self._base)
                finally:
                    os.close(fd)
            self._ready = True

    def ready(self):
        """Whether ``complete`` has mapped the memory."""
        return self._ready

    def base_addr(self):
        """This rank's address of the segment."""
        return self._base

    def device_addr(self):
        """The device address: 0 (host memory)."""
        return 0

    def size(self):
        """Bytes in the segment."""
        return self._size

    def __del__(self):
        base = getattr(self, "_base", 0)
        if base:
            _shared.release(base, self._size, self._fd)
            self._base = 0


def _parse(blob, rank):
    """The fields of rank ``rank``'s blob; ``ValueError`` for one not made by ``create``."""
    blob = bytes(blob)
    if len(blob) != _BLOB.size:
        raise ValueError(f"SharedSegment: rank {rank}'s blob is not one of this build")
    magic, version, r, owner, world, size, pid, fd = _BLOB.unpack(blob)
    if magic != _MAGIC or version != _VERSION or r != rank:
        raise ValueError(f"SharedSegment: rank {rank}'s blob is not one of this build (or "
                         "not in rank order)")
    return {"owner": owner, "world": world, "size": size, "pid": pid, "fd": fd}


__all__ = ["SharedSegment"]
