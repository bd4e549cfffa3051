"""``mooncake._fast_copy``: the stock wheel's gather copy of NumPy arrays into raw memory
(``mooncake.structured_object_store`` packs payloads with it), in Python: each array is one
``ctypes.memmove``, which releases the GIL as the native module does. Like the native module it
needs NumPy, and fails to import without it."""

import ctypes

import numpy as _np

__all__ = ["concat_arrays_into"]


def concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1):
    """Copies the bytes of ``arrays[start:start + count]`` (C-contiguous ndarrays of a list;
    ``count`` < 0 or past the end: to the end) one after another to ``dest_ptr``, which has room
    for ``dest_size`` bytes; the bytes copied. ``ValueError`` for an array that is not
    C-contiguous or a destination too small (nothing is copied then), ``TypeError`` for an
    entry that is not an ndarray. ``nthreads`` is accepted; the copies run one after another."""
    if not isinstance(arrays, list):
        raise TypeError(f"concat_arrays_into() argument 1 must be list, not "
                        f"{type(arrays).__name__}")
    dest_ptr, dest_size = int(dest_ptr), int(dest_size)
    start, count = int(start), int(count)
    start = min(max(start, 0), len(arrays))
    if count < 0 or start + count > len(arrays):
        count = len(arrays) - start
    if count == 0:
        return 0
    chosen = arrays[start:start + count]
    total = 0
    for i, item in enumerate(chosen, start):
        if not isinstance(item, _np.ndarray):
            raise TypeError(f"arrays[{i}] is not an ndarray")
        if not item.flags.c_contiguous:
            raise ValueError(f"arrays[{i}] is not C-contiguous")
        total += item.nbytes
    if total > dest_size:
        raise ValueError(f"destination buffer too small: need {total} bytes, got {dest_size}")
    offset = 0
    for item in chosen:
        if item.nbytes:
            ctypes.memmove(dest_ptr + offset, item.ctypes.data, item.nbytes)
            offset += item.nbytes
    return offset
