"""Read-only memory (a `bytes`, a read-only mmap, a read-only memoryview) may be registered, and
used as a source, but never as a destination: every call that would write into a read-only
registration (an engine read into it, `get_into`, `batch_get_into`, a write to the engine's own
segment that lands in it) raises InvalidArgument naming the argument before any byte moves, and
such memory is never exported for peers' writes.

Each case runs in a process of its own: a copy into a read-only page is SIGSEGV, which must not
take the test session with it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import yuebing

PRELUDE = """
import mmap, sys, tempfile
import numpy as np
import yuebing

def read_only_mmap(n):
    f = tempfile.TemporaryFile()
    f.write(bytes(range(256)) * (n // 256))
    f.flush()
    return mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ)

def refused(call, what):
    try:
        call()
    except yuebing.InvalidArgument as e:
        assert what in str(e) and "read-only" in str(e), str(e)
        assert e.code == -4010 and isinstance(e, ValueError)
        return
    raise AssertionError("not refused")
"""


def run_apart(code: str, *args: str) -> None:
    out = subprocess.run([sys.executable, "-c", PRELUDE + code, *args],
                         capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), (
        f"exit status {out.returncode} (-11 is SIGSEGV): {out.stderr[-3000:]}")


ENGINE_READ_INTO_READ_ONLY = """
e = yuebing.Engine()
own = e.open_segment(e.name)
src = e.allocate(1 << 16)
src.write(b"\\xab" * (1 << 16))
m = read_only_mmap(1 << 16)
addr = e.register(m)                        # local-only, read-only: a fine source
data = b"\\x11" * 8192
daddr = e.register(data, remote="r")        # exported for peers' reads only
before = bytes(m[:4096]), bytes(data)
# A source it is.
e.write(addr, own, src.addr, 4096)
assert src.read(0, 4096) == before[0]
# Never a destination: a read into it, whole or in part.
refused(lambda: e.read(addr, own, src.addr, 4096), "local")
refused(lambda: e.read(addr + 100, own, src.addr, 10), "local")
refused(lambda: e.read(daddr, own, src.addr, 8192), "local")
# Nor the target of a write to the engine's own segment.
refused(lambda: e.write(src, own, addr, 4096), "remote_addr")
refused(lambda: e.write(src, own, daddr + 1, 16), "remote_addr")
batch = e.allocate_batch(4)
refused(lambda: e.submit(batch, [("write", src.addr, own, src.addr + 8192, 16),
                                 ("read", daddr, own, src.addr, 64)]), "requests[1]")
refused(lambda: e.submit(batch, [("write", src.addr, own, daddr, 64)]), "requests[0]")
assert e.status(batch).tasks == 0          # nothing of a refused submit started
# A batch may still read from it.
e.submit(batch, [("write", daddr, own, src.addr, 8192)])
assert e.wait(batch).state == "completed"
assert src.read(0, 8192) == data
assert (bytes(m[:4096]), bytes(data)) == before
e.unregister(addr)
e.unregister(daddr)
print("ok")
"""


def test_an_engine_never_writes_into_a_read_only_registration():
    # Before: the read into the mmap's PROT_READ page was SIGSEGV, and a read into a `bytes`
    # (or a write to the engine's own segment there) changed an immutable object.
    run_apart(ENGINE_READ_INTO_READ_ONLY)


EXPORTED_FOR_WRITES = """
e = yuebing.Engine()
for remote in ("w", "rw"):
    refused(lambda: e.register(b"x" * 4096, remote=remote), "buffer")
    refused(lambda: e.register(read_only_mmap(4096), remote=remote), "buffer")
    refused(lambda: e.register(memoryview(bytearray(64)).toreadonly(), remote=remote), "buffer")
assert e.segment_buffers(e.open_segment(e.name)) == []
print("ok")
"""


def test_read_only_memory_is_never_exported_for_peers_writes():
    run_apart(EXPORTED_FOR_WRITES)


STORE_GET_INTO_READ_ONLY = """
store = yuebing.Store(sys.argv[1])
key = sys.argv[2]
value = bytes(range(256)) * 16
store.put(key, value)
m = read_only_mmap(1 << 16)
addr = store.register_buffer(m)
data = b"\\x22" * 8192
daddr = store.register_buffer(data)
refused(lambda: store.get_into(key, addr, 4096), "buffer")
refused(lambda: store.get_into(key, daddr + 8, 4096), "buffer")
buf = bytearray(4096)
each = None
refused(lambda: store.batch_get_into([key, key], [buf, daddr], [None, 4096]), "buffers[1]")
assert buf == bytearray(4096) and data == b"\\x22" * 8192
# A source it is.
store.put_from(key + "/m", addr, 4096)
assert store.get(key + "/m") == bytes(m[:4096])
store.put_from(key + "/d", data)
assert store.get(key + "/d") == data
store.unregister_buffer(addr)
store.unregister_buffer(daddr)
print("ok")
"""


def test_a_store_never_reads_into_a_read_only_registration(cluster, key):
    # Before: get_into the mmap's address was SIGSEGV; into the `bytes`, it changed it.
    run_apart(STORE_GET_INTO_READ_ONLY, cluster.address, key)


def test_a_writable_call_waits_for_a_read_only_temporary_registration(store, key):
    # A put_from of a read-only view registers it for the call; a get_into of the writable
    # memory under it neither shares that registration nor fails: it waits for it to end.
    import threading

    import numpy as np

    value = bytes(range(256)) * 64
    store.put(key, value)
    mem = np.zeros(1 << 16, dtype=np.uint8)
    ro = memoryview(mem).toreadonly()
    errors: list[BaseException] = []

    def putter():
        try:
            for i in range(100):
                store.upsert_from(f"{key}/ro", ro[: 1 << 15])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=putter)
    t.start()
    for _ in range(100):
        assert store.get_into(key, memoryview(mem)[4096:]) == len(value)
    t.join(120)
    assert not t.is_alive() and not errors, errors
    assert mem[4096:4096 + len(value)].tobytes() == value


def test_a_read_only_destination_is_an_invalid_argument(store, key):
    store.put(key, b"abcd")
    with pytest.raises(yuebing.InvalidArgument, match=r"buffer.*read-only"):
        store.get_into(key, b"\0" * 16)
    with pytest.raises(yuebing.InvalidArgument, match=r"buffers\[0\].*read-only"):
        store.batch_get_into([key], [b"\0" * 16])
