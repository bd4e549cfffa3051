"""The caller's memory and engine Buffers: Buffer.read/write check their bounds before anything
else, and impossible sizes are refused with an exception."""

from __future__ import annotations

import pytest

import yuebing


def test_buffer_read_and_write_check_their_bounds_before_anything_else():
    buf = yuebing.Engine().allocate(4096)
    buf.write(b"abcdef", 4090)
    assert buf.read(4090) == b"abcdef"
    assert buf.read(4090, 6) == b"abcdef"
    assert buf.read(4096) == b""
    for offset, length in [(0, 1 << 50), (0, 2**63), (0, 2**64 - 1), (1, 4096), (4096, 1),
                           (2**64 - 1, 2), (5000, None), (2**64 - 1, None)]:
        with pytest.raises(ValueError, match="do not fit"):
            buf.read(offset, length)
    for offset in (4091, 2**63, 2**64 - 1):
        with pytest.raises(ValueError, match="do not fit"):
            buf.write(b"abcdef", offset)
    with pytest.raises(OverflowError):
        buf.read(-1)
    with pytest.raises(OverflowError):
        buf.read(0, 2**64)
    assert buf.read(4090) == b"abcdef", "nothing was written by the refused calls"
    buf.free()


def test_allocate_refuses_impossible_sizes_with_an_exception():
    engine = yuebing.Engine()
    for size in (1 << 62, 2**64 - 1):
        with pytest.raises((yuebing.YuebingError, ValueError)):
            engine.allocate(size, prefault=False)
    with pytest.raises(OverflowError):
        engine.allocate(2**64)
