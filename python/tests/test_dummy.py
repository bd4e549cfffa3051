"""Dummy clients (Mooncake's ``setup_dummy``) against a real client process started as an
operator starts Mooncake's (``mooncake_client --port``): every call the dummy makes is done by
the real client, in memory the dummy allocated with ``MooncakeHostMemAllocator``; a dummy killed
mid-call leaves nothing mapped on the real side, and a dead real client gives its dummies error
answers at once."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
from conftest import Cluster, Process, free_port, mooncake_real_client

from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

MIB = 1 << 20


@pytest.fixture
def dummy_dir(tmp_path, monkeypatch):
    """A directory of its own for the real client's socket (the dummies find it there)."""
    path = tmp_path / "dummies"
    monkeypatch.setenv("YUEBING_DUMMY_DIR", str(path))
    return path


def write(addr: int, data: bytes) -> None:
    ctypes.memmove(addr, data, len(data))


def read(addr: int, n: int) -> bytes:
    return ctypes.string_at(addr, n)


def shared_mappings(pid: int) -> int:
    """How many mappings of dummy clients' host memory process ``pid`` has."""
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:mooncake-host" in line for line in f)


def test_a_dummy_clients_calls_are_done_by_its_real_client(dummy_dir):
    cluster = Cluster(nodes=0)
    port = free_port()
    real = mooncake_real_client(cluster, port)
    try:
        d = MooncakeDistributedStore()
        assert d.setup_dummy(64 * MIB, 16 * MIB, f"127.0.0.1:{port}") == 0
        assert d.health_check() == 0
        assert d.get_hostname().startswith("127.0.0.1:")
        alloc = MooncakeHostMemAllocator()
        pool = alloc.alloc(8 * MIB)
        assert pool and d.register_buffer(pool, 8 * MIB) == 0
        assert shared_mappings(real.pid) == 1
        k = f"dummy/{uuid.uuid4().hex}"

        # The bytes API.
        assert d.put(k + "/b", b"v" * 1000) == 0
        assert d.is_exist(k + "/b") == 1 and d.get_size(k + "/b") == 1000
        assert d.get(k + "/b") == b"v" * 1000
        assert d.put(k + "/big", b"x" * (17 * MIB)) == -600, "over the local buffer"

        # Zero-copy, one key and batches, in the shared pool.
        a, b = pool, pool + 4 * MIB
        one = os.urandom(MIB)
        write(a, one)
        assert d.put_from(k + "/z", a, MIB) == 0
        assert d.get_into(k + "/z", b, MIB) == MIB
        assert read(b, MIB) == one
        keys = [f"{k}/{i}" for i in range(4)]
        blocks = [os.urandom(64 * 1024) for _ in keys]
        for i, blk in enumerate(blocks):
            write(a + i * 65536, blk)
        assert d.batch_put_from(keys, [a + i * 65536 for i in range(4)], [65536] * 4) == [0] * 4
        assert d.batch_is_exist(keys + [k + "/none"]) == [1, 1, 1, 1, 0]
        assert d.batch_get_into(keys, [b + i * 65536 for i in range(4)], [65536] * 4) == \
            [65536] * 4
        assert [read(b + i * 65536, 65536) for i in range(4)] == blocks
        layers = [[a + i * 4096, a + MIB + i * 4096] for i in range(4)]
        assert d.batch_put_from_multi_buffers([x + "/m" for x in keys], layers,
                                              [[4096, 4096]] * 4) == [0] * 4
        into = [[b + i * 4096, b + MIB + i * 4096] for i in range(4)]
        assert d.batch_get_into_multi_buffers([x + "/m" for x in keys], into,
                                              [[4096, 4096]] * 4) == [8192] * 4
        assert read(b, 4 * 4096) == read(a, 4 * 4096)

        # Addresses outside the memory the dummy shared: refused, nothing moved.
        other = ctypes.create_string_buffer(4096)
        assert d.register_buffer(ctypes.addressof(other), 4096) == -600
        assert d.put_from(k + "/bad", ctypes.addressof(other), 4096) == -600
        assert d.batch_get_into([k + "/0"], [pool + 8 * MIB - 10], [65536]) == [-600]
        assert d.is_exist(k + "/bad") == 0

        # A normal client beside it reads what the dummy wrote.
        st = MooncakeDistributedStore()
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                        cluster.address) == 0
        assert st.get(keys[2]) == blocks[2]
        assert st.close() == 0

        # A batch item of 0 bytes is answered as a normal client answers it; numpy ints work;
        # an argument the store refuses raises, and the link goes on.
        assert d.batch_put_from([k + "/e1", k + "/e2"], [a, 0], [4096, 0]) == [0, 0]
        assert d.get_into(k + "/e1", np.uint64(b), np.int64(4096)) == 4096
        with pytest.raises(TypeError):
            d.put(k + "/t", b"v", None)
        assert d.register_buffer(pool, 4096) == -600, "registered already"
        assert d.is_exist(k + "/e1") == 1

        # Freed memory is let go of by the real client first; registered memory is not freed.
        assert alloc.free(pool) == -1
        assert d.unregister_buffer(pool) == 0 and alloc.free(pool) == 0
        assert shared_mappings(real.pid) == 0
        assert d.remove_all(True) >= 1
        assert d.close() == 0 and d.health_check() == 1
    finally:
        real.kill()
        cluster.stop()


DUMMY = textwrap.dedent("""
    import ctypes, sys, uuid
    from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator
    d = MooncakeDistributedStore()
    assert d.setup_dummy(64 << 20, 16 << 20, sys.argv[1]) == 0
    pool = MooncakeHostMemAllocator().alloc(32 << 20)
    assert d.register_buffer(pool, 32 << 20) == 0
    print("registered", flush=True)
    n = 0
    while True:  # killed in the middle of one of these
        keys = [f"kill/{uuid.uuid4().hex}" for _ in range(16)]
        d.batch_put_from(keys, [pool + i * (2 << 20) for i in range(16)], [2 << 20] * 16)
""")


def test_a_killed_dummy_leaves_nothing_mapped_and_a_dead_real_client_answers_at_once(
        dummy_dir):
    cluster = Cluster(nodes=0)
    port = free_port()
    real = mooncake_real_client(cluster, port, "256MB")
    try:
        proc = subprocess.Popen([sys.executable, "-c", DUMMY, f"127.0.0.1:{port}"],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "registered"
            assert shared_mappings(real.pid) == 1
            time.sleep(0.3)  # well into its puts
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        end = time.monotonic() + 20
        while shared_mappings(real.pid):
            assert time.monotonic() < end, "the real client kept the killed dummy's memory"
            time.sleep(0.05)

        # The real client still serves new dummies.
        d = MooncakeDistributedStore()
        assert d.setup_dummy(0, MIB, f"127.0.0.1:{port}") == 0
        assert d.put("after/kill", b"ok") == 0 and d.get("after/kill") == b"ok"

        # Then it dies: every call answers at once, with Mooncake's RPC failure.
        real.kill()
        start = time.monotonic()
        assert d.put("after/death", b"x") == -900
        assert d.get("after/death") == b""
        assert d.batch_is_exist(["a", "b"]) == [-900, -900]
        assert d.is_exist("a") == -900
        assert time.monotonic() - start < 5
        assert d.close() == 0
        assert MooncakeDistributedStore().setup_dummy(0, MIB, f"127.0.0.1:{port}") == -1
    finally:
        real.kill()
        cluster.stop()


def test_a_dummy_trusts_only_its_own_users_directory_and_one_real_client_per_port(tmp_path,
                                                                               monkeypatch):
    cluster = Cluster(nodes=0)
    port = free_port()
    shared = tmp_path / "open"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("YUEBING_DUMMY_DIR", str(shared))
    # A directory others may write into: neither side uses it.
    assert MooncakeDistributedStore().setup_dummy(0, MIB, f"127.0.0.1:{port}") == -1
    with pytest.raises(RuntimeError, match="mooncake_client ready"):
        mooncake_real_client(cluster, port)
    monkeypatch.setenv("YUEBING_DUMMY_DIR", str(tmp_path / "private"))
    real = mooncake_real_client(cluster, port)
    try:
        # A second real client on the port is refused; the first goes on serving.
        with pytest.raises(RuntimeError, match="mooncake_client ready"):
            mooncake_real_client(cluster, port)
        d = MooncakeDistributedStore()
        assert d.setup_dummy(MIB, MIB, f"127.0.0.1:{port}") == 0
        alloc = MooncakeHostMemAllocator()
        pool = alloc.alloc(MIB)
        assert d.register_buffer(pool, MIB) == 0
        # alloc_from_mem_pool: shared memory within setup_dummy's pool size, not registered.
        assert d.alloc_from_mem_pool(2 * MIB) == 0, "over the pool of setup_dummy"
        mem = d.alloc_from_mem_pool(512 * 1024)
        assert mem and d.register_buffer(mem, 512 * 1024) == 0
        assert d.put_from("pool/k", mem, 4096) == 0
        assert d.unregister_buffer(mem) == 0 and d.unregister_buffer(mem) == -600
        # Closed with the buffer registered: its memory may be freed then.
        assert d.close() == 0
        assert alloc.free(pool) == 0
        assert d.health_check() == 1
        # A dead real client: health says unreachable.
        assert d.setup_dummy(0, MIB, f"127.0.0.1:{port}") == 0
        real.kill()
        assert d.health_check() == 2
        d.close()
    finally:
        real.kill()
        cluster.stop()
