"""yuebing.Engine: one-sided reads and writes of a peer's segment, batches, notifications; and
two Python processes exchanging data through it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import yuebing


@pytest.fixture(scope="module")
def pair():
    """Two engines of this process (each one a segment of its own)."""
    return yuebing.Engine(), yuebing.Engine()


def test_write_then_read_a_peers_exported_buffer(pair):
    a, b = pair
    target = a.allocate(1 << 20, remote="rw")
    seg = b.open_segment(a.name)
    assert (target.addr, target.size, "rw") in b.segment_buffers(seg)
    src = np.random.default_rng(1).integers(0, 256, 256 << 10, dtype=np.uint8)
    b.write(src, seg, target.addr + 4096)
    assert target.read(4096, src.nbytes) == src.tobytes()
    back = np.zeros_like(src)
    b.read(back, seg, target.addr + 4096)
    np.testing.assert_array_equal(back, src)
    # A raw local address works too.
    out = np.zeros(100, dtype=np.uint8)
    b.read(out.ctypes.data, seg, target.addr + 4096, 100)
    np.testing.assert_array_equal(out, src[:100])
    # An engine Buffer is local memory too (registered by its engine already).
    staging = b.allocate(8192)
    staging.write(b"\x5a" * 8192)
    b.write(staging, seg, target.addr, 1000)
    assert target.read(0, 1000) == b"\x5a" * 1000
    b.read(staging, seg, target.addr + 4096, 8192)
    assert staging.read() == src.tobytes()[:8192]
    staging.free()
    with pytest.raises(ValueError, match="freed"):
        b.write(staging, seg, target.addr)
    b.close_segment(seg)
    target.free()
    with pytest.raises(ValueError, match="freed"):
        target.read()


def test_out_of_bounds_and_local_only_memory_are_refused(pair):
    a, b = pair
    private = a.allocate(4096)  # local-only: peers cannot reach it
    exported = a.allocate(4096, remote="r")
    seg = b.open_segment(a.name)
    buf = bytearray(64)
    with pytest.raises(yuebing.YuebingError) as e:
        b.read(buf, seg, private.addr)
    assert e.value.name in ("OutOfBounds", "AccessDenied")
    with pytest.raises(yuebing.YuebingError) as e:
        b.write(b"x" * 64, seg, exported.addr)  # read-only for peers
    assert e.value.name in ("AccessDenied", "OutOfBounds")
    with pytest.raises(yuebing.OutOfBounds):
        b.read(buf, seg, exported.addr + 4096 - 10)
    assert buf == bytearray(64)
    with pytest.raises(yuebing.EngineSegmentNotFound):
        b.open_segment("127.0.0.1:1")


def test_batches_submit_wait_status_and_notify(pair):
    a, b = pair
    target = a.allocate(64 << 10, remote="rw")
    seg = b.open_segment(a.name)
    local = np.arange(64 << 10, dtype=np.uint8)
    b.register(local)
    batch = b.allocate_batch(8)
    reqs = [("write", local.ctypes.data + i * 8192, seg, target.addr + i * 8192, 8192)
            for i in range(8)]
    assert b.submit(batch, reqs, notify=b"layer 7 done") == (0, 8)
    status = b.wait(batch)
    assert (status.state, status.tasks, status.completed, status.bytes) == (
        "completed", 8, 8, 64 << 10)
    assert status.done and status.error is None
    assert b.task_status(batch, 3).state == "completed"
    assert b.status(batch).completed == 8
    assert b.cancel(batch) == 0
    b.free_batch(batch)
    assert target.read() == local.tobytes()
    assert a.take_notifications() == [(b.name, b"layer 7 done")]
    assert a.take_notifications() == []
    with pytest.raises(yuebing.UnknownBatch):
        b.status(batch)
    with pytest.raises(ValueError, match="opcode"):
        b.submit(b.allocate_batch(1), [("copy", local.ctypes.data, seg, target.addr, 1)])
    b.unregister(local)
    with pytest.raises(yuebing.AddressNotRegistered):
        b.unregister(local)


def test_registered_numpy_memory_can_be_exported_to_peers():
    # Peers reach registered caller memory over tcp (shm maps only engine buffers).
    a, b = yuebing.Engine(), yuebing.Engine(transport="tcp")
    mem = np.zeros(8192, dtype=np.uint8)
    a.register(mem, remote="w")
    seg = b.open_segment(a.name)
    b.write(b"\x07" * 100, seg, mem.ctypes.data + 50)
    assert mem[50:150].tolist() == [7] * 100 and not mem[:50].any()
    a.unregister(mem)


def test_rdma_nics_are_chosen_or_refused_with_a_typed_error():
    # No RDMA NIC on this machine: "auto" and named NICs start an engine without rdma (a package
    # built without the feature refuses names), and the engine says what it serves.
    off = yuebing.Engine(rdma_nics="off")
    assert "rdma" not in off.transports and "tcp" in off.transports
    assert off.transports == sorted(off.transports)
    for bad in ("a b", ",", "mlx5_0;rm"):
        with pytest.raises(yuebing.InvalidArgument, match="rdma_nics"):
            yuebing.Engine(rdma_nics=bad)
    try:
        named = yuebing.Engine(rdma_nics="yuebing_no_such_nic0")
    except yuebing.InvalidArgument as e:
        assert "cargo feature `rdma`" in str(e)
    else:
        assert "rdma" not in named.transports, "there is no such NIC"
    # A store on an engine of its own takes rdma_nics; on a shared engine it is the engine's.
    with pytest.raises(yuebing.InvalidArgument, match="rdma_nics"):
        yuebing.Store("127.0.0.1:1", engine=off, rdma_nics="off")


def test_two_processes_exchange_through_the_engine():
    peer = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("engine_peer.py"))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        name, addr = peer.stdout.readline().split()
        addr = int(addr)
        me = yuebing.Engine()
        seg = me.open_segment(name)
        got = np.zeros(1 << 20, dtype=np.uint8)
        me.read(got, seg, addr)
        np.testing.assert_array_equal(got, np.arange(1 << 20) % 251)
        mine = np.full(1 << 19, 0xAB, dtype=np.uint8)
        me.write(mine, seg, addr + (1 << 19))
        peer.stdin.write("go\n")
        peer.stdin.flush()
        assert peer.stdout.readline().strip() == "ab" * 64
        peer.stdin.write("done\n")
        peer.stdin.flush()
        assert peer.wait(timeout=30) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
