"""Values as Mooncake's bytes API takes and returns them."""

import ctypes
import operator


def byte_value(value):
    """A byte view of ``value`` (any object with the buffer protocol; ``str`` is a
    ``TypeError`` as in Mooncake). Its length is the buffer's length in bytes (Mooncake takes
    the element count, truncating buffers of wider items: see the README)."""
    if isinstance(value, str):
        raise TypeError("value must be a bytes-like object, not str")
    view = memoryview(value)
    if view.c_contiguous:
        return view.cast("B") if view.ndim != 1 or view.format != "B" else view
    return view.tobytes()


def byte_parts(parts):
    """The parts of ``put_parts``: each must be a 1-D buffer of single bytes."""
    out = []
    for p in parts:
        if isinstance(p, str):
            raise TypeError("parts must be bytes-like, not str")
        view = memoryview(p)
        if view.ndim != 1 or view.itemsize != 1:
            raise RuntimeError("parts must be 1-D bytes-like")
        out.append(view if view.c_contiguous else view.tobytes())
    return out


def raw_view(address, size):
    """A read-only view of ``size`` bytes at ``address`` (caller's memory, as Mooncake's
    ``*_ptr`` arguments), checked to be non-negative and to fit 64 bits; no copy."""
    address, size = operator.index(address), operator.index(size)
    if size == 0:
        return b""
    if address <= 0 or size < 0 or address + size > 1 << 64:
        raise ValueError(f"bad memory range: address {address}, size {size}")
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B").toreadonly()


class BufferHandle(bytes):
    """A value read by ``get_buffer``: its bytes (the buffer protocol, read-only, as Mooncake's),
    ``ptr()`` (their address, valid while the handle lives; the bytes never move) and
    ``size()``."""

    def ptr(self):
        """The address of the bytes."""
        if not self:
            return 0
        return ctypes.cast(ctypes.c_char_p(self), ctypes.c_void_p).value

    def size(self):
        """The number of bytes."""
        return len(self)
