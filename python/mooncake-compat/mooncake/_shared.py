"""Host memory one process can hand to another on the same host: a memfd, sealed so that its
size can never change, mapped shared. ``MooncakeHostMemAllocator`` makes its memory this way, so
that a dummy client's host pool can be mapped by its real client (``_dummy``).

A mapping made from a peer's file descriptor (:func:`map_peer`) is checked first: the memfd
must be sealed against shrinking (else the peer could truncate it and every later access here
would fault) and at least as long as the mapping.
"""

import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import resource

from . import _codes

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_MAP_FIXED = 0x10  # Linux's MAP_FIXED and PROT_NONE (the mmap module names neither)
_PROT_NONE = 0


def _map(fd, size):
    """``size`` bytes of ``fd`` mapped shared, read-write; the address, or 0 (logged)."""
    addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if addr in (None, _MAP_FAILED):
        _codes.log.error("mmap of %d bytes: %s", size, os.strerror(ctypes.get_errno()))
        return 0
    return addr


def _memfd():
    """A new sealable memfd. Each allocation keeps one open: when the process runs out of
    descriptors, its soft limit is raised to the hard one, once, and the call tried again."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        return os.memfd_create("mooncake-host", flags)
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard:
            raise
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        _codes.log.warning("out of file descriptors at %d: the soft limit is now %d", soft,
                           hard)
        return os.memfd_create("mooncake-host", flags)


def create(size):
    """``size`` new zero-filled, page-aligned bytes of shareable memory: ``(address, fd)``, or
    ``(0, -1)`` when the system refuses. The caller owns both: :func:`release` them."""
    if size <= 0:
        return 0, -1
    try:
        fd = _memfd()
    except OSError as e:
        _codes.log.error("memfd_create: %s", e)
        return 0, -1
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except OSError as e:
        _codes.log.error("sizing %d bytes of shared memory: %s", size, e)
        os.close(fd)
        return 0, -1
    addr = _map(fd, size)
    if not addr:
        os.close(fd)
        return 0, -1
    return addr, fd


def release(addr, size, fd):
    """Unmaps and closes what :func:`create` made."""
    unmap(addr, size)
    if fd >= 0:
        os.close(fd)


def reserve(size):
    """``size`` bytes of address space, inaccessible until :func:`map_peer_at` maps memory
    there: the address, or 0. :func:`release` it (with fd -1)."""
    addr = _libc.mmap(None, size, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    return 0 if addr in (None, _MAP_FAILED) else addr


def _check_peer(fd, size):
    if size <= 0:
        raise ValueError(f"a mapping of {size} bytes")
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    if not seals & fcntl.F_SEAL_SHRINK:
        raise ValueError("the memory is not sealed against shrinking")
    length = os.fstat(fd).st_size
    if length < size:
        raise ValueError(f"the memory holds {length} bytes, not {size}")


def map_peer_at(fd, size, addr):
    """As :func:`map_peer`, over the reservation of :func:`reserve` at ``addr`` (``size``
    bytes: all of it)."""
    _check_peer(fd, size)
    got = _libc.mmap(addr, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED,
                     fd, 0)
    if got != addr:
        raise OSError(ctypes.get_errno(), "mmap of a peer's memory failed")


def map_peer(fd, size):
    """Maps ``size`` bytes of a peer's memfd ``fd``: its address. ``ValueError`` when the memfd
    is not sealed against shrinking or is shorter than ``size``; ``OSError`` when it cannot be
    mapped. ``fd`` stays the caller's (it may be closed once mapped)."""
    _check_peer(fd, size)
    addr = _map(fd, size)
    if not addr:
        raise OSError(ctypes.get_errno(), "mmap of a peer's memory failed")
    return addr


def unmap(addr, size):
    """Returns a mapping to the system."""
    if _libc.munmap(addr, size) != 0:
        _codes.log.error("munmap at %#x: %s", addr, os.strerror(ctypes.get_errno()))
