"""The caller's memory in the zero-copy calls: an engine Buffer stays mapped while another
engine uses it even when it is freed meanwhile; Buffer.read/write check their bounds before
anything else; ranges of unregistered memory that overlap, within one batch or across threads,
never fail for it (the later call waits for the earlier one's registration to end)."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import yuebing


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


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


def test_buffer_write_takes_any_contiguous_buffer():
    buf = yuebing.Engine().allocate(4096)
    buf.write(bytearray(b"ab"), 0)
    buf.write(memoryview(b"xxcd")[2:], 2)
    buf.write(np.frombuffer(b"efgh", dtype=np.uint32), 4)
    buf.write(b"", 4096)                     # nothing, at the end: fine
    assert buf.read(0, 8) == b"abcdefgh"
    with pytest.raises(TypeError, match="data"):
        buf.write("text")
    with pytest.raises(yuebing.InvalidArgument, match="C-contiguous"):
        buf.write(np.zeros(64, dtype=np.uint8)[::2])
    assert buf.read(0, 8) == b"abcdefgh"
    buf.free()


def test_buffer_read_and_write_while_transfers_write_the_same_bytes():
    # Buffer.read/write race the engine's copies into the same bytes (Mooncake's users poll a
    # buffer this way): that is allowed, and what is read is each byte old or new, nothing else.
    engine = yuebing.Engine()
    own = engine.open_segment(engine.name)
    n = 1 << 16
    buf, ones, twos = engine.allocate(n), engine.allocate(n), engine.allocate(n)
    ones.write(b"\x01" * n)
    twos.write(b"\x02" * n)
    buf.write(b"\x01" * n)
    stop = threading.Event()

    def transfers():
        while not stop.is_set():
            engine.read(buf, own, twos.addr)        # into buf, from the engine's own memory
            engine.write(ones, own, buf.addr)       # into buf, as the target

    t = threading.Thread(target=transfers)
    t.start()
    try:
        for i in range(300):
            assert set(buf.read()) <= {1, 2}
            buf.write(b"\x02" * 4096 if i % 2 else b"\x01" * 4096, 4096)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    assert set(buf.read()) <= {1, 2}
    for b in (buf, ones, twos):
        b.free()


def test_allocate_refuses_impossible_sizes_with_an_exception():
    engine = yuebing.Engine()
    for size in (1 << 62, 2**64 - 1):
        with pytest.raises((yuebing.YuebingError, ValueError)):
            engine.allocate(size, prefault=False)
    with pytest.raises(OverflowError):
        engine.allocate(2**64)


def test_a_batch_with_overlapping_ranges_of_unregistered_memory(store, key):
    src = np.frombuffer(bytearray(payload(1 << 16, 5)), dtype=np.uint8)
    mv = memoryview(src)
    parts = [mv[0:100], mv[50:150], mv[0:4096], mv[1000:1100], mv[4096:8192], src.ctypes.data + 120]
    sizes = [None, None, None, None, None, 200]
    keys = [f"{key}/{i}" for i in range(len(parts))]
    assert store.batch_put_from(keys, parts, sizes) == [None] * len(parts)
    assert store.get(keys[0]) == src[0:100].tobytes()
    assert store.get(keys[1]) == src[50:150].tobytes()
    assert store.get(keys[2]) == src[0:4096].tobytes()
    assert store.get(keys[3]) == src[1000:1100].tobytes()
    assert store.get(keys[4]) == src[4096:8192].tobytes()
    assert store.get(keys[5]) == src[120:320].tobytes()
    # Destinations that overlap, each receiving the same bytes where they overlap.
    dst = np.zeros(1 << 16, dtype=np.uint8)
    got = store.batch_get_into([keys[2], keys[3]], [memoryview(dst)[0:4096],
                                                    memoryview(dst)[1000:1100]])
    assert got == [4096, 100]
    np.testing.assert_array_equal(dst[:4096], src[:4096])
    # And with a part of the memory registered by the user: that part uses the registration.
    store.register_buffer(mv[0:4096])
    try:
        assert store.batch_put_from([f"{key}/r0", f"{key}/r1", f"{key}/r2"],
                                    [mv[0:100], mv[4096:4200], mv[4150:4300]]) == [None] * 3
        assert store.get(f"{key}/r2") == src[4150:4300].tobytes()
        with pytest.raises(yuebing.AddressOverlapped):
            store.put_from(f"{key}/across", mv[4000:4200])   # partly in the registration
    finally:
        store.unregister_buffer(mv[0:4096])


def run_threads(*loops, timeout=120):
    """Runs each loop on a thread of its own; re-raises the first exception one raised."""
    errors: list[BaseException] = []

    def guard(loop):
        try:
            loop()
        except BaseException as e:  # noqa: BLE001  (reported to the test)
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(loop,)) for loop in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread hangs"
    if errors:
        raise errors[0]


def test_two_threads_on_partly_overlapping_unregistered_memory_never_fail(store, key):
    # Mooncake's usage on unregistered memory: thread A reads one key into [p, p+8192) while
    # thread B stores another from [p+4096, p+12288). Each registers its range for its call;
    # the engine refuses overlapping registrations, so one must wait for the other's to end.
    mem = np.frombuffer(bytearray(payload(1 << 16, 9)), dtype=np.uint8)
    p = mem.ctypes.data
    value = payload(8192, 10)
    store.put(f"{key}/a", value)
    rounds = 300

    def reader():
        for _ in range(rounds):
            assert store.get_into(f"{key}/a", p, 8192) == 8192

    def writer():
        for i in range(rounds):
            store.upsert_from(f"{key}/b", p + 4096, 8192)

    def viewer():          # a Python buffer over the same bytes, containing both ranges
        for _ in range(rounds):
            store.upsert_from(f"{key}/c", memoryview(mem)[0:16384])

    run_threads(reader, writer, viewer)
    assert mem[:8192].tobytes() == value


def test_register_buffer_waits_for_the_temporary_registrations_it_overlaps(store, key):
    mem = np.zeros(1 << 16, dtype=np.uint8)
    value = payload(4096, 11)
    store.put(key, value)
    for _ in range(20):
        stop = threading.Event()
        registered: list[int] = []

        def reader():        # its range is registered for each call, now and then
            while not stop.is_set():
                assert store.get_into(key, memoryview(mem)[8192:12288]) == 4096

        def register():
            try:
                registered.append(store.register_buffer(mem))
            finally:
                stop.set()

        run_threads(reader, register)
        assert registered == [mem.ctypes.data]
        assert store.get_into(key, mem[8192:]) == 4096     # in the registration
        store.unregister_buffer(mem)
    assert mem[8192:12288].tobytes() == value
