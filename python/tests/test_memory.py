"""The caller's memory and engine Buffers: a Buffer stays mapped while another engine uses it
even when it is freed meanwhile; Buffer.read/write check their bounds before anything else, and
impossible sizes are refused with an exception."""

from __future__ import annotations

import subprocess
import sys

import pytest

import yuebing


FREED_WHILE_REGISTERED = """
import gc, yuebing
owner, other = yuebing.Engine(), yuebing.Engine()
buf = owner.allocate(1 << 20)
addr = other.register(buf, remote="rw")      # `other` registers `owner`'s memory for peers
buf.free()                                   # unregistered from `owner`; still registered there
del buf
gc.collect()
peer = yuebing.Engine(transport="tcp")       # caller memory is reached over tcp
seg = peer.open_segment(other.name)
pattern = bytes(i % 251 for i in range(1 << 20))
peer.write(pattern, seg, addr)               # `other` writes the freed Buffer's memory
back = bytearray(1 << 20)
peer.read(back, seg, addr)
assert back == pattern
other.unregister(addr)                       # the memory goes only now
print("ok")
"""


def test_a_freed_buffer_stays_mapped_while_another_engine_has_it_registered():
    # Without the memory kept by the registration, the free unmaps it and the peer's write
    # lands in unmapped memory: the process dies of SIGSEGV. Run apart so that it cannot take
    # the test session with it.
    out = subprocess.run([sys.executable, "-c", FREED_WHILE_REGISTERED],
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr[-2000:]


FREED_DURING_A_CALL = """
import random, sys, threading, time, yuebing
store, engine = yuebing.Store(sys.argv[1]), yuebing.Engine()
value = bytes(i % 253 for i in range(8 << 20))
store.put(sys.argv[2], value)
outcomes = set()
for _ in range(30):
    buf = engine.allocate(8 << 20)           # not the store's engine: registered for the call
    got = []
    def get():
        try:
            got.append(store.get_into(sys.argv[2], buf) == len(value))
        except ValueError as e:              # freed before the call took it: refused
            got.append(str(e))
    t = threading.Thread(target=get)
    t.start()
    time.sleep(random.random() * 0.004)
    buf.free()                               # mid-transfer, most of the time
    t.join()
    outcomes.add(got[0])
assert outcomes <= {True, "the buffer was freed"}, outcomes
print("ok")
"""


def test_a_buffer_freed_during_a_call_on_another_engine_stays_valid_for_it(cluster, key):
    # Without the memory kept by the call, the free unmaps it under the store engine's write:
    # SIGSEGV. Run apart, as above.
    out = subprocess.run([sys.executable, "-c", FREED_DURING_A_CALL, cluster.address, key],
                         capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr[-2000:]


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
