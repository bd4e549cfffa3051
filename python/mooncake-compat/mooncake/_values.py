"""Values as Mooncake's bytes API takes and returns them."""

import ctypes


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


class BufferHandle(bytearray):
    """A value read by ``get_buffer``: its bytes (the buffer protocol), ``ptr()`` (their
    address, valid while the handle lives) and ``size()``."""

    def ptr(self):
        """The address of the bytes."""
        if not self:
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self):
        """The number of bytes."""
        return len(self)
