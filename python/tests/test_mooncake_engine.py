"""The Mooncake drop-in's Transfer Engine (``mooncake.engine`` from yuebing-mooncake):
Mooncake 0.3.13.post1's methods and return codes, in one process and between two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yuebing

from mooncake.engine import Read, TransferEngine, TransferNotify, TransferOpcode, Write


def engine() -> TransferEngine:
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return te


@pytest.fixture(scope="module")
def pair():
    return engine(), engine()


def name(te: TransferEngine) -> str:
    return f"127.0.0.1:{te.get_rpc_port()}"


def test_opcodes_are_mooncakes():
    assert (TransferOpcode.Read.value, TransferOpcode.Write.value) == (0, 1)
    assert Read is TransferOpcode.Read and TransferEngine.TransferOpcode is TransferOpcode
    assert TransferOpcode.Read != 0 and int(TransferOpcode.Write) == 1
    assert not hasattr(TransferOpcode, "READ")


def test_initialize_forms_and_refusals():
    te = TransferEngine()
    assert te.initialize_ext("127.0.0.1", "127.0.0.1:1/metadata", "tcp", "", "http") == 0
    assert te.get_rpc_port() > 0
    assert TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "efa", "") == -1
    bad_devices = TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "a b")
    # Without rdma in the package the devices are not used (tcp, with a warning).
    assert bad_devices == (-1 if "rdma" in yuebing.FEATURES else 0)
    assert TransferEngine().initialize("127.0.0.1", "foo://x", "tcp", "") == -1
    with pytest.raises(RuntimeError):
        TransferEngine().get_rpc_port()


def test_rdma_without_a_nic_falls_back_to_tcp_and_says_so(caplog):
    # protocol="rdma" (what vLLM and SGLang configs name) starts the engine; where no NIC is
    # usable a warning names the fallback.
    if "rdma" in yuebing.Engine().transports:
        pytest.skip("this machine has an active RDMA NIC")
    te = TransferEngine()
    with caplog.at_level("WARNING", logger="mooncake"):
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    assert "protocol 'rdma'" in caplog.text and "over tcp" in caplog.text
    assert te.get_rpc_port() > 0


def test_register_memory_codes(pair):
    a, _ = pair
    mem = np.zeros(1 << 16, dtype=np.uint8)
    p = mem.ctypes.data
    assert a.register_memory(p, mem.nbytes) == 0
    assert a.register_memory(p, 4096) == -7
    assert a.unregister_memory(p) == 0
    assert a.unregister_memory(p) == -3
    assert a.batch_register_memory([p, p + 32768], [16384, 16384]) == 0
    assert a.batch_register_memory([p], [1, 2]) == -1
    assert a.batch_unregister_memory([p, p + 32768]) == 0
    assert a.batch_unregister_memory([p]) == -3


def test_managed_buffers_and_byte_helpers(pair):
    a, _ = pair
    addr = a.allocate_managed_buffer(8192)
    assert addr != 0
    assert a.write_bytes_to_buffer(addr + 10, "héllo", 6) == 0
    assert a.read_bytes_from_buffer(addr + 10, 6) == "héllo".encode()
    assert a.write_bytes_to_buffer(addr + 8190, b"xyz", 3) == -1, "past the buffer"
    assert a.get_first_buffer_address(name(a)) != 0
    assert a.free_managed_buffer(addr, 8192) == 0


def test_sync_async_and_polled_transfers(pair):
    a, b = pair
    target = a.allocate_managed_buffer(1 << 20)
    src = np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    seg = name(a)
    assert b.transfer_sync_write(seg, src.ctypes.data, target, 4096) == 0, "unregistered local"
    assert a.read_bytes_from_buffer(target, 4096) == src[:4096].tobytes()
    assert b.transfer_sync_read(seg, dst.ctypes.data, target, 4096) == 0
    assert np.array_equal(dst[:4096], src[:4096])
    assert b.transfer_sync_write(seg, src.ctypes.data, target + (1 << 20) - 10, 4096) == -1
    assert b.transfer_sync_write(seg, src.ctypes.data, target, 0) == 0
    assert b.transfer_sync_write("127.0.0.1:1", src.ctypes.data, target, 16) == -1
    with pytest.raises(TypeError):
        b.transfer_sync(seg, src.ctypes.data, target, 16, 1)
    # Batches need registered local memory.
    assert b.register_memory(src.ctypes.data, src.nbytes) == 0
    assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
    offs = [i * 65536 for i in range(8)]
    assert b.batch_transfer_sync_write(seg, [src.ctypes.data + o for o in offs],
                                       [target + o for o in offs], [65536] * 8) == 0
    assert b.batch_transfer_sync_write(seg, [1], [2, 3], [4]) == -1
    assert b.batch_transfer_sync_read(seg, [], [], []) == 0
    dst[:] = 0
    ids = [b.batch_transfer_async_read(seg, [dst.ctypes.data + o], [target + o], [65536])
           for o in offs]
    assert all(ids) and b.get_batch_transfer_status(ids) == 0
    assert np.array_equal(dst[:8 * 65536], src[:8 * 65536])
    assert b.batch_transfer_async_write("127.0.0.1:1", [src.ctypes.data], [0], [1]) == 0
    bid = b.transfer_submit_write(seg, src.ctypes.data, target, 1 << 20)
    assert bid != 0
    while (st := b.transfer_check_status(bid)) == 0:
        pass
    assert st == 1 and a.read_bytes_from_buffer(target, 1 << 20) == src.tobytes()
    # Past the peer's memory: refused at submit (0) or failed when waited for (-1).
    bad = b.batch_transfer_async(seg, [src.ctypes.data], [target + (1 << 20)], [16], Write)
    assert bad == 0 or b.get_batch_transfer_status([bad]) == -1
    assert b.unregister_memory(src.ctypes.data) == 0 and b.unregister_memory(dst.ctypes.data) == 0
    assert a.free_managed_buffer(target, 1 << 20) == 0


def test_notifications_and_probes(pair):
    a, b = pair
    target = a.allocate_managed_buffer(4096)
    src = b.allocate_managed_buffer(4096)
    a.get_notifies()
    assert b.transfer_sync(name(a), src, target, 128, Write, TransferNotify("nname", "nmsg")) == 0
    assert a.get_notifies() == [TransferNotify("nname", "nmsg")]
    assert a.get_notifies() == []
    assert b.send_probe(name(a)) == 0 and b.send_probe("127.0.0.1:1") == -102
    assert b.get_first_buffer_address("127.0.0.1:1") == 0


def test_two_processes_exchange_through_the_mooncake_api():
    peer = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("mooncake_engine_peer.py"))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        seg, addr = peer.stdout.readline().split()
        addr = int(addr)
        me = engine()
        got = np.zeros(1 << 20, dtype=np.uint8)
        assert me.get_first_buffer_address(seg) == addr
        assert me.transfer_sync_read(seg, got.ctypes.data, addr, got.nbytes) == 0
        assert np.array_equal(got, np.arange(1 << 20) % 251)
        mine = np.full(1 << 19, 0xAB, dtype=np.uint8)
        assert me.register_memory(mine.ctypes.data, mine.nbytes) == 0
        assert me.batch_transfer_sync(seg, [mine.ctypes.data], [addr + (1 << 19)], [mine.nbytes],
                                      Write, TransferNotify("from", "me")) == 0
        peer.stdin.write("go\n")
        peer.stdin.flush()
        assert peer.stdout.readline().strip() == "ab" * 64
        assert peer.stdout.readline().strip() == "from=me"
        peer.stdin.write("done\n")
        peer.stdin.flush()
        assert peer.wait(timeout=30) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
