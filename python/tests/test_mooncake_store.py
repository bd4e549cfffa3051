"""The Mooncake drop-in's store (``mooncake.store`` from yuebing-mooncake) against a real
master and node: Mooncake 0.3.13.post1's methods with its return values (see
docs/mooncake-python-api.md)."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid

import numpy as np
import pytest
import yuebing
from conftest import Cluster, free_port

from mooncake.store import (MooncakeDistributedStore, ReplicaStatus, ReplicateConfig,
                            SoftPinAction)

MIB = 1 << 20


@pytest.fixture(scope="module")
def mc(cluster):
    """A Mooncake store client with no segment of its own (objects live on the node)."""
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.address) == 0
    yield st
    assert st.close() == 0


@pytest.fixture
def k():
    return f"mc/{uuid.uuid4().hex}"


def address(arr: np.ndarray) -> int:
    return arr.ctypes.data


def test_setup_forms_and_refusals(cluster):
    st = MooncakeDistributedStore()
    kw = dict(local_hostname="127.0.0.1", metadata_server="http://127.0.0.1:1/metadata",
              global_segment_size=0, local_buffer_size=16 * MIB, protocol="tcp", rdma_devices="",
              master_server_addr=cluster.address)
    assert st.setup(**kw) == 0
    assert st.setup({"local_hostname": "127.0.0.1", "metadata_server": "etcd://127.0.0.1:2379",
                     "global_segment_size": "16 mb", "local_buffer_size": "0.5MB",
                     "master_server_addr": cluster.address}) == 0
    assert st.health_check() == 0
    assert st.close() == 0
    # Refused as Mooncake refuses them (-600, -1), or with its TypeError.
    assert st.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                     "global_segment_size": "16MiB"}) == -600
    assert st.setup({"metadata_server": "P2PHANDSHAKE"}) == -600
    assert st.setup(**{**kw, "global_segment_size": 8 * MIB}) == -600
    assert st.setup(**{**kw, "metadata_server": "foo://x"}) == -600
    assert st.setup(**{**kw, "protocol": "TCP"}) == -1
    with pytest.raises(TypeError):
        st.setup(**{**kw, "global_segment_size": "16MB"})
    with pytest.raises(TypeError):
        st.setup("127.0.0.1", "P2PHANDSHAKE", 0)
    assert st.health_check() == 1


def test_calls_before_setup_return_codes_not_crashes():
    st = MooncakeDistributedStore()
    assert st.get("k") == b"" and st.get_batch(["a"]) == [b""]
    assert st.put("k", b"v") == -600 and st.put_from("k", 1, 1) == -600
    assert st.is_exist("k") == -600 and st.get_size("k") == -600
    assert st.batch_put_from(["a"], [1], [1]) == [-600]
    assert st.get_batch(["a", "b"]) == [b""]
    # Bogus pointers are not touched before setup.
    assert st.put_from_with_metadata("k", 1, 1, 10, 10) == -600
    # The session calls answer as Mooncake's do before setup: [] (and -1 for get_session_end).
    assert st.batch_get_session_start(["a"]) == [] and st.batch_get_session_end(["a"]) == -1
    assert st.batch_put_session_start(["a"], [1]) == [] == st.batch_put_session_end(["a"])
    assert st.batch_put_session_revoke(["a"]) == []
    assert st.batch_get_into_multi_buffer_ranges(["a"], [[1]], [[1]], [[0]]) == []
    assert st.batch_put_from_multi_buffer_ranges(["a"], [[1]], [[1]], [[0]]) == []
    assert st.health_check() == 1 and st.close() == 0


def test_put_keeps_an_existing_value_and_upsert_replaces(mc, k):
    assert mc.put(k, b"hello") == 0
    assert mc.put(k, b"world!") == 0
    assert mc.get(k) == b"hello"
    assert mc.upsert(k, b"upd") == 0
    assert mc.get(k) == b"upd" and mc.get_size(k) == 3
    assert mc.upsert(k + "u", bytearray(b"new")) == 0 and mc.get(k + "u") == b"new"
    assert mc.put(k + "e", b"") == -600
    assert mc.put("", b"x") == -600
    with pytest.raises(TypeError):
        mc.put(k, "text")
    with pytest.raises(TypeError):
        mc.put(k, b"x", None)


def test_get_misses_are_empty_bytes_and_batches_keep_order(mc, k):
    assert mc.put_batch([k + "1", k + "2"], [b"one", memoryview(b"two")]) == 0
    assert mc.put_batch([k + "1"], [b"x", b"y"]) == -600
    assert mc.get(k + "nope") == b"" and mc.get("") == b""
    assert mc.get_batch([k + "1", k + "nope", k + "2"]) == [b"one", b"", b"two"]
    assert mc.get_batch([]) == [b""]
    assert mc.upsert_batch([k + "1", k + "3"], [b"A", b"B"]) == 0
    assert mc.get_batch([k + "1", k + "3"]) == [b"A", b"B"]
    h = mc.get_buffer(k + "1")
    assert h.size() == len(h) == 1 and h.ptr() != 0 and bytes(memoryview(h)) == b"A"
    assert memoryview(h).readonly and ctypes.string_at(h.ptr(), 1) == b"A"
    assert mc.get_buffer(k + "nope") is None


def test_put_parts_concatenates_and_numpy_values_round_trip(mc, k):
    assert mc.put_parts(k, b"ab", b"cd", bytearray(b"ef")) == 0
    assert mc.get(k) == b"abcdef"
    assert mc.put_parts(k, b"zz") == 0 and mc.get(k) == b"abcdef"
    assert mc.put_parts(k + "0") == 0 and mc.is_exist(k + "0") == 0
    assert mc.upsert_parts(k, b"p1", np.frombuffer(b"p2", dtype=np.uint8)) == 0
    assert mc.get(k) == b"p1p2"
    with pytest.raises(RuntimeError):
        mc.put_parts(k, np.zeros((2, 2), dtype=np.uint8))
    arr = np.arange(1000, dtype=np.float32)
    assert mc.put(k + "np", arr) == 0
    assert mc.get(k + "np") == arr.tobytes()


def test_zero_copy_from_and_into_registered_memory(mc, k):
    src = np.random.default_rng(1).integers(0, 255, 4 * MIB, dtype=np.uint8)
    dst = np.zeros(4 * MIB, dtype=np.uint8)
    assert mc.register_buffer(address(src), src.nbytes) == 0
    assert mc.register_buffer(address(dst), dst.nbytes) == 0
    assert mc.register_buffer(address(dst), 4096) == -600
    try:
        assert mc.put_from(k, address(src), MIB) == 0
        assert mc.put_from(k, address(src) + 1, MIB) == 0
        assert mc.get_into(k, address(dst), 4 * MIB) == MIB
        assert np.array_equal(dst[:MIB], src[:MIB])
        assert mc.get_into(k, address(dst), 16) == -600
        assert mc.get_into(k + "nope", address(dst), 16) == -704
        assert mc.put_from(k + "0", address(src), 0) == 0 and mc.is_exist(k + "0") == 0
        keys = [k + "a", k + "b", k]
        assert mc.batch_put_from(keys, [address(src) + i * 4096 for i in range(3)],
                                 [4096] * 3) == [0, 0, 0]
        assert mc.batch_put_from([k + "x", k + "y"], [address(src)], [1]) == [-600, -600]
        assert mc.batch_put_from([], [], []) == []
        # Per item, as Mooncake: an empty item is 0 (nothing stored), a bad address -600;
        # numpy integers are addresses.
        assert mc.batch_put_from([k + "e", k + "n", k + "z"],
                                 [address(src), np.int64(address(src)), 0],
                                 [0, 64, 8]) == [0, 0, -600]
        assert mc.is_exist(k + "e") == 0 and mc.get_size(k + "n") == 64
        got = mc.batch_get_into([k + "a", k + "nope", k + "b"],
                                [address(dst) + i * 8192 for i in range(3)], [8192] * 3)
        assert got == [4096, -704, 4096]
        assert np.array_equal(dst[16384:20480], src[4096:8192])
        assert mc.batch_get_into([k + "a"], [address(dst)], [16]) == [-600]
        assert mc.upsert_from(k + "a", address(src) + 100, 100) == 0
        assert mc.batch_upsert_from([k + "b"], [address(src) + 7], [50]) == [0]
        assert mc.get(k + "a") == src[100:200].tobytes()
        assert mc.get_size(k + "b") == 50
    finally:
        assert mc.unregister_buffer(address(src)) == 0
        assert mc.unregister_buffer(address(dst)) == 0
    assert mc.unregister_buffer(address(dst)) == -600


def test_put_from_with_metadata_stores_metadata_first(mc, k):
    meta, data = ctypes.create_string_buffer(b"M" * 8, 8), ctypes.create_string_buffer(b"D" * 100, 100)
    assert mc.put_from_with_metadata(k, ctypes.addressof(data), ctypes.addressof(meta), 100, 8) == 0
    assert mc.get(k) == b"M" * 8 + b"D" * 100


def test_existence_sizes_leases_and_removal(mc, k):
    for i in range(3):
        assert mc.put(f"{k}/b{i}", b"v") == 0
    assert mc.is_exist(k + "/b0") == 1 and mc.is_exist(k + "/none") == 0 and mc.is_exist("") == 0
    assert mc.batch_is_exist([k + "/b0", k + "/none"]) == [1, 0] and mc.batch_is_exist([]) == []
    assert mc.get_size(k + "/b0") == 1 and mc.get_size(k + "/none") == -704
    assert mc.get(k + "/b1") == b"v"
    assert mc.remove(k + "/b1") == -706, "a read holds a lease"
    assert mc.remove(k + "/b0") == 0 and mc.remove(k + "/b0") == -704 and mc.remove("") == -704
    assert mc.remove_by_regex(f"^{k}/b[0-9]$") == 1, "the leased one is skipped"
    assert mc.remove_by_regex(f"^{k}/b[0-9]$", True) == 1
    assert mc.remove_by_regex("(", True) == -600
    assert mc.put(k + "/c", b"v") == 0
    assert mc.batch_remove([k + "/c", k + "/none"], True) == [0, -704]


def test_hostname_health_and_replica_descriptors(mc, cluster, k):
    host, port = mc.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert mc.health_check() == 0
    assert mc.put(k, b"x" * 10) == 0
    (r,) = mc.get_replica_desc(k)
    assert r.status == ReplicaStatus.COMPLETE and r.is_memory_replica() and not r.is_disk_replica()
    d = r.get_memory_descriptor().buffer_descriptor
    assert d.size == 10 and d.buffer_address != 0 and ":" in d.transport_endpoint
    with pytest.raises(RuntimeError):
        r.get_disk_descriptor()
    assert mc.get_replica_desc(k + "nope") == []
    assert list(mc.batch_get_replica_desc([k, k + "nope"])) == [k]


def test_a_client_with_its_own_segment_and_remove_all(cluster):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "", cluster.address) == 0
    prefix = f"own/{uuid.uuid4().hex}"
    cfg = ReplicateConfig()
    cfg.preferred_segment = st.get_hostname()
    assert st.put(prefix, b"mine", cfg) == 0
    (r,) = st.get_replica_desc(prefix)
    assert r.get_memory_descriptor().buffer_descriptor.transport_endpoint == st.get_hostname()
    assert st.remove_all(True) >= 1
    assert st.close() == 0 and st.health_check() == 1


def test_host_names_split_into_host_and_port_as_mooncake_writes_them():
    from mooncake import _hostname
    assert _hostname.split("localhost:13001") == ("localhost", 13001)
    assert _hostname.split("127.0.0.1") == ("127.0.0.1", None)
    assert _hostname.split("[::1]:13001") == ("[::1]", 13001)
    assert _hostname.split("::1") == ("::1", None), "a bare IPv6 address names no port"
    assert _hostname.split("fe80::1:2") == ("fe80::1:2", None)
    assert _hostname.split("host:0") == ("host", 0)
    assert _hostname.split("host:70000") == ("host:70000", None)
    assert _hostname.split("host:\u00b2") == ("host:\u00b2", None), "not an ASCII digit"


def test_replica_nodes_are_spelled_as_the_clients_of_one_host_spell_themselves():
    from mooncake import _hostname
    assert _hostname.spelled("127.0.0.1:10002", "localhost:10001") == "localhost:10002"
    assert _hostname.spelled("127.0.0.1:10002", "127.0.0.1:10001") == "127.0.0.1:10002"
    # Another host's node, and a client with no port of its own, keep yuebing's name.
    assert _hostname.spelled("10.1.2.3:10002", "localhost:10001") == "10.1.2.3:10002"
    assert _hostname.spelled("127.0.0.1:10002", "localhost") == "127.0.0.1:10002"
    # Either spelling names the same node.
    assert _hostname.node_name(_hostname.spelled("127.0.0.1:7", "localhost:1")) == "127.0.0.1:7"


def test_a_hostname_without_port_gets_one_from_mooncakes_range(cluster, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", "13300")
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", "13350")
    st = MooncakeDistributedStore()
    assert st.setup("localhost", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "",
                    cluster.address) == 0
    try:
        host, port = st.get_hostname().split(":")
        assert host == "localhost" and 13300 <= int(port) <= 13350
        # Mooncake's name for the segment places there, as yuebing's does.
        cfg = ReplicateConfig()
        cfg.preferred_segment = st.get_hostname()
        key = f"own/{uuid.uuid4().hex}"
        assert st.put(key, b"mine", cfg) == 0
        (r,) = st.get_replica_desc(key)
        endpoint = r.get_memory_descriptor().buffer_descriptor.transport_endpoint
        # Spelled as the client spells itself, as Mooncake shows it.
        assert endpoint == st.get_hostname() == f"localhost:{port}"
        # A second client of the same host name gets another port of the range.
        other = MooncakeDistributedStore()
        assert other.setup("localhost", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                           cluster.address) == 0
        assert other.get_hostname() != st.get_hostname()
        other.close()
    finally:
        st.close()


def test_fewer_round_trips_are_asked_for_through_the_environment(cluster, monkeypatch):
    monkeypatch.setenv("YUEBING_LEASE_CACHE", "64")
    monkeypatch.setenv("YUEBING_GRANT_SIZE", "1MiB")
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.address) == 0
    try:
        keys = [f"few/{uuid.uuid4().hex}" for _ in range(8)]
        values = [bytes([i]) * 4096 for i in range(8)]
        assert st.put_batch(keys, values) == 0
        for _ in range(2):
            assert st.get_batch(keys) == values
    finally:
        st.close()
    for bad in [("YUEBING_LEASE_CACHE", "many"), ("YUEBING_GRANT_SIZE", "lots")]:
        monkeypatch.setenv(*bad)
        st = MooncakeDistributedStore()
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                        cluster.address) == -600, bad
        monkeypatch.setenv("YUEBING_LEASE_CACHE", "64")
        monkeypatch.setenv("YUEBING_GRANT_SIZE", "1MiB")


def test_a_soft_pin_ttl_needs_enable_as_in_mooncake(mc, k):
    cfg = ReplicateConfig()
    cfg.soft_pin_ttl_ms = 1000
    assert mc.put(k, b"v", cfg) == -600, "PRESERVE with a TTL"
    cfg.soft_pin_action = SoftPinAction.DISABLE
    assert mc.upsert(k, b"v", cfg) == -600
    cfg.soft_pin_action = SoftPinAction.ENABLE
    cfg.soft_pin_ttl_ms = 24 * 3600 * 1000 + 1
    assert mc.put(k, b"v", cfg) == -600, "above Mooncake's max_kv_soft_pin_ttl"
    cfg.soft_pin_ttl_ms = 1000
    assert mc.put(k, b"v", cfg) == 0
    assert mc.is_exist(k) == 1


def test_close_then_setup_again_works_like_a_new_client(cluster):
    """Mooncake's test_client_tear_down: a value put into the client's own segment is gone
    after close() (its memory went with the client), and the same object set up again stores
    and reads that key anew."""
    st = MooncakeDistributedStore()
    key, value = f"teardown/{uuid.uuid4().hex}", b"Hello, World!"

    def setup():
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "",
                        cluster.address) == 0

    setup()
    cfg = ReplicateConfig()
    cfg.preferred_segment = st.get_hostname()
    assert st.put(key, value, cfg) == 0
    assert st.close() == 0
    setup()
    assert st.get(key) == b""
    assert st.put(key, value) == 0
    assert st.get(key) == value
    assert st.close() == 0


def test_bytes_puts_are_bounded_by_the_local_buffer_as_in_mooncake(cluster, k):
    """Mooncake stages every bytes-API value through the setup's local buffer: a larger value,
    and any value with local_buffer_size 0, is -600 there; zero-copy puts are not staged."""
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", cluster.address) == 0
    assert st.put(k, b"v") == -600
    assert st.put_parts(k, b"a", b"b") == -600
    assert st.upsert(k, b"v") == -600
    assert st.is_exist(k) == 0, "a refused put stores nothing"
    buf = np.frombuffer(b"zero-copy", dtype=np.uint8).copy()
    assert st.put_from(k, address(buf), buf.nbytes) == 0
    assert st.get(k) == b"zero-copy"
    assert st.close() == 0
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4096, "tcp", "", cluster.address) == 0
    assert st.put(k + "/fits", b"x" * 4096) == 0
    assert st.put(k + "/over", b"x" * 4097) == -600
    assert st.put_parts(k + "/over", b"x" * 4000, b"y" * 97) == -600
    assert st.close() == 0


def test_replicate_config_matches_mooncakes():
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.with_hard_pin, cfg.soft_pin_action) == (1, False, SoftPinAction.PRESERVE)
    assert str(cfg).startswith("ReplicateConfig: { replica_num: 1, nof_replica_num: 0")
    with pytest.raises(TypeError):
        pickle.dumps(cfg)
    cfg.prefer_alloc_in_same_node = True
    assert MooncakeDistributedStore().put("k", b"v", cfg) == -600


def test_soft_pin_ttl_is_an_optional_uint64_as_in_mooncake():
    cfg = ReplicateConfig()
    assert cfg.soft_pin_ttl_ms is None
    for ok in (0, 5000, (1 << 64) - 1, None):
        cfg.soft_pin_ttl_ms = ok
        assert cfg.soft_pin_ttl_ms == ok
    for bad in (-1, 1 << 64, 1.5, "5000"):
        with pytest.raises(TypeError):
            cfg.soft_pin_ttl_ms = bad
    assert cfg.soft_pin_ttl_ms is None, "a refused value changes nothing"
    assert "soft_pin_ttl_ms: default" in str(cfg)


def test_import_refuses_beside_the_stock_wheel(tmp_path):
    dist = tmp_path / "mooncake_transfer_engine_non_cuda-0.3.13.post1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mooncake-transfer-engine-non-cuda\nVersion: 0.3.13.post1\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = textwrap.dedent("""
        try:
            import mooncake
        except ImportError as e:
            print("refused:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert "refused:" in out.stdout and "mutually exclusive" in out.stdout, out


def test_multi_buffer_batches_move_per_layer_blocks_as_one_object(mc, k):
    # vLLM's layout: one paged KV buffer per layer, registered once; a key is one block of
    # every layer.
    layers, blocks, block = 8, 24, 4096
    src = [np.random.default_rng(l).integers(0, 256, blocks * block, dtype=np.uint8)
           for l in range(layers)]
    dst = [np.zeros(blocks * block, dtype=np.uint8) for _ in range(layers)]
    for a in src + dst:
        assert mc.register_buffer(address(a), a.nbytes) == 0
    keys = [f"{k}/{b}" for b in range(16)]
    ptrs = [[address(src[l]) + b * block for l in range(layers)] for b in range(16)]
    sizes = [[block] * layers for _ in range(16)]
    assert mc.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0] * 16
    assert mc.get_size(keys[3]) == layers * block
    assert mc.get(keys[3]) == b"".join(bytes(src[l][3 * block:4 * block]) for l in range(layers))
    # Read back into other blocks: key b into block 23 - b of every layer.
    out = [[address(dst[l]) + (23 - b) * block for l in range(layers)] for b in range(16)]
    assert mc.batch_get_into_multi_buffers(keys, out, sizes) == [layers * block] * 16
    for b in range(16):
        for l in range(layers):
            assert (dst[l][(23 - b) * block:(24 - b) * block] == src[l][b * block:(b + 1) * block]).all()
    assert not dst[0][:8 * block].any(), "blocks no key was read into stay untouched"
    # Per-key answers: too little room, mismatched lists, a missing key.
    bad = mc.batch_get_into_multi_buffers(
        [keys[0], keys[1], k + "/missing"],
        [[address(dst[0])], [address(dst[0])], [address(dst[1])]],
        [[block], [block, block], [block]])
    assert bad[0] == -600 and bad[1] == -600 and bad[2] < 0
    assert mc.batch_put_from_multi_buffers([k + "/x"], [[0]], [[block]]) == [-600]
    for a in src + dst:
        assert mc.unregister_buffer(address(a)) == 0


def test_tensor_methods_raise_not_implemented_naming_torch(mc, k):
    from mooncake import store
    assert len(store._TENSOR_METHODS) == 42
    for name in store._TENSOR_METHODS:
        with pytest.raises(NotImplementedError, match="need torch"):
            getattr(mc, name)(k, None)
    with pytest.raises(NotImplementedError, match="put_tensor"):
        mc.put_tensor(k, object())
    assert mc.is_exist(k) == 0, "nothing was stored"


def test_an_engine_binds_its_named_port_or_a_free_one_when_taken():
    from mooncake.engine import TransferEngine
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = TransferEngine()
    assert first.initialize(f"127.0.0.1:{port}", "P2PHANDSHAKE", "tcp", "") == 0
    assert first.get_rpc_port() == port, "peers reach it under its name"
    second = TransferEngine()
    assert second.initialize(f"127.0.0.1:{port}", "P2PHANDSHAKE", "tcp", "") == 0
    assert second.get_rpc_port() not in (0, port)


def test_ranged_sessions_move_layers_after_one_master_round_trip(mc, k):
    # Mooncake's layerwise save and load: one buffer per layer, each key one page of each.
    layers, page, n = 4, 4096, 6
    src = [np.random.default_rng(l).integers(0, 256, n * page, dtype=np.uint8)
           for l in range(layers)]
    dst = [np.zeros(n * page, dtype=np.uint8) for _ in range(layers)]
    for a in src + dst:
        assert mc.register_buffer(address(a), a.nbytes) == 0
    keys = [f"{k}/{i}" for i in range(n)]
    assert mc.batch_put_session_start(keys, [layers * page] * n) == [0] * n
    assert mc.batch_put_session_start(keys[:1], [page]) == [-600], "already open"
    assert mc.is_exist(keys[0]) == 0, "not readable before its end"
    for layer in reversed(range(layers)):
        rcs = mc.batch_put_from_multi_buffer_ranges(
            keys, [[address(src[layer]) + i * page] for i in range(n)], [[page]] * n,
            [[layer * page]] * n)
        assert rcs == [page] * n
    # Per key: a range past the object, mismatched lists, no session.
    bad = mc.batch_put_from_multi_buffer_ranges(
        [keys[0], keys[1], k + "/none"], [[address(src[0])], [address(src[0])] * 2,
                                          [address(src[0])]],
        [[page]] * 3, [[layers * page - 1], [0], [0]])
    assert bad == [-600, -600, -600]
    assert mc.batch_put_session_end(keys + [k + "/none"]) == [0] * n + [-600]
    assert mc.batch_put_from_multi_buffer_ranges(
        keys[:1], [[address(src[0])]], [[page]], [[0]]) == [-600], "ended"
    for i in range(n):
        assert mc.get(keys[i]) == b"".join(bytes(src[l][i * page:(i + 1) * page])
                                           for l in range(layers))
    assert mc.batch_get_session_start(keys + [k + "/missing"]) == [0] * n + [-704]
    for layer in range(layers):
        rcs = mc.batch_get_into_multi_buffer_ranges(
            keys, [[address(dst[layer]) + (n - 1 - i) * page] for i in range(n)],
            [[page]] * n, [[layer * page]] * n)
        assert rcs == [page] * n
    # Two ranges of one key into one call; a range outside the object; no session.
    two = mc.batch_get_into_multi_buffer_ranges(
        [keys[0], keys[1], k + "/missing"],
        [[address(dst[0]), address(dst[0]) + 10], [address(dst[0])], [address(dst[0])]],
        [[10, 20], [page], [page]], [[0, 10], [layers * page - 1], [0]])
    assert two == [30, -600, -600]
    assert mc.batch_get_session_end(keys) == 0
    assert mc.batch_get_into_multi_buffer_ranges(
        keys[:1], [[address(dst[0])]], [[page]], [[0]]) == [-600], "closed"
    for layer in range(layers):
        for i in range(n):
            got = dst[layer][(n - 1 - i) * page:(n - i) * page]
            if layer == 0 and i == n - 1:
                got = got[30:]
            want = src[layer][i * page:(i + 1) * page]
            assert (got == want[-len(got):]).all()
    # Revoke: nothing stored, the key free again.
    assert mc.batch_put_session_start([k + "/r"], [page]) == [0]
    assert mc.batch_put_session_revoke([k + "/r", k + "/none"]) == [0, -600]
    assert mc.is_exist(k + "/r") == 0
    assert mc.batch_put_session_start([k + "/r"], [page]) == [0]
    assert mc.batch_put_session_revoke([k + "/r"]) == [0]
    for a in src + dst:
        assert mc.unregister_buffer(address(a)) == 0


def test_a_get_session_past_its_lease_is_lease_expired_and_dropped(cluster, k):
    short = Cluster(nodes=1, master_args=("--lease-ttl-ms", "300"))
    st = MooncakeDistributedStore()
    try:
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", short.address) == 0
        assert st.put(k, b"x" * 1000) == 0
        buf = np.zeros(1000, dtype=np.uint8)
        assert st.register_buffer(address(buf), buf.nbytes) == 0
        assert st.batch_get_session_start([k]) == [0]
        time.sleep(0.5)
        args = ([k], [[address(buf)]], [[1000]], [[0]])
        assert st.batch_get_into_multi_buffer_ranges(*args) == [-707]
        assert not buf.any(), "nothing read outside the lease"
        assert st.batch_get_into_multi_buffer_ranges(*args) == [-600], "the session was dropped"
        assert st.batch_get_session_start([k]) == [0]
        assert st.batch_get_into_multi_buffer_ranges(*args) == [1000]
        assert bytes(buf) == b"x" * 1000
    finally:
        st.close()
        short.stop()


def test_mooncakes_session_e2e_passes_unmodified(cluster, tmp_path):
    # Mooncake's script imports the built pybind module as `store`; the stock wheel's users
    # import it as `mooncake.store`, which is what the shim names.
    (tmp_path / "store.py").write_text("from mooncake.store import MooncakeDistributedStore\n")
    script = (pathlib.Path(__file__).resolve().parents[1] / "mooncake-upstream-tests"
              / "session_ranges_tcp_e2e.py")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), MOONCAKE_MASTER=cluster.address,
               MOONCAKE_PROTOCOL="tcp", MOONCAKE_LOCAL_HOSTNAME="localhost",
               MOONCAKE_TE_META_DATA_SERVER="P2PHANDSHAKE")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "session_ranges_tcp_e2e PASSED" in run.stdout


def wait_gone(st, key, within=5.0):
    """Waits (up to ``within`` seconds) until ``key`` no longer exists for ``st``; the replicas
    of an unmounted segment go once the leases on them ended."""
    deadline = time.time() + within
    while st.is_exist(key) == 1 and time.time() < deadline:
        time.sleep(0.05)


def mc_replicas_on(st, key):
    return [d.get_memory_descriptor().buffer_descriptor.transport_endpoint
            for d in st.get_replica_desc(key)]


def test_segments_are_allocated_mounted_and_freed_at_run_time(cluster, k):
    from mooncake.store import MooncakeDistributedStore as Store
    reader = Store()
    owner = Store()
    try:
        assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                            cluster.address) == 0
        assert owner.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                           cluster.address) == 0
        r = owner.allocate_and_mount_segment(5 * MIB)
        assert r["ret"] == 0 and r["allocated_size"] == 8 * MIB, r
        (segment,) = r["segment_ids"]
        # Zero-copy from the client's pool memory into its own segments: 40 MiB fit only in
        # the second one.
        big = os.urandom(40 * MIB)
        addr = owner.alloc_from_mem_pool(len(big))
        assert addr != 0
        ctypes.memmove(addr, big, len(big))
        r2 = owner.allocate_and_mount_segment(44 * MIB)
        assert r2["ret"] == 0
        here = ReplicateConfig()
        here.preferred_segment = owner.get_hostname()
        assert owner.put_from(k, addr, len(big), here) == 0
        assert mc_replicas_on(reader, k) == [owner.get_hostname()]
        assert reader.get(k) == big
        assert owner.unmount_and_free_segment(r2["segment_ids"]) == 0
        wait_gone(reader, k)
        assert reader.is_exist(k) == 0, "its only replica went with the segment"
        assert owner.unmount_and_free_segment(r2["segment_ids"]) == -1, "not mounted any more"
        assert owner.unmount_and_free_segment(["no-such-id", segment]) == -1
        assert owner.unmount_and_free_segment([segment]) == -1, "the second one went already"
        # Bad requests mount nothing.
        for bad in (0, -1, "x"):
            assert owner.allocate_and_mount_segment(bad)["ret"] == -1
        assert owner.allocate_and_mount_segment(MIB, protocol="nvlink")["ret"] == -1
        assert owner.alloc_from_mem_pool(0) == 0
    finally:
        owner.close()
        reader.close()
    assert owner.allocate_and_mount_segment(MIB)["ret"] == -1, "closed"


def test_a_file_is_mounted_as_a_segment_and_its_objects_live_in_the_file(cluster, k):
    from mooncake.store import MooncakeDistributedStore as Store
    path = pathlib.Path(f"/dev/shm/yuebing-test-mount-{uuid.uuid4().hex}")
    path.write_bytes(bytes(8 * MIB))
    reader, owner = Store(), Store()
    try:
        assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                            cluster.address) == 0
        # The owner's only store space is the second half of the file.
        assert owner.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                           cluster.address) == 0
        r = owner.mount_segment(str(path), 4 * MIB, 4 * MIB)
        assert r["ret"] == 0 and len(r["segment_ids"]) == 1, r
        value = os.urandom(2 * MIB)
        here = ReplicateConfig()
        here.preferred_segment = owner.get_hostname()
        # A same-host peer writes it into the file (over tcp: it cannot map the file).
        assert reader.put(k, value, here) == 0
        assert mc_replicas_on(reader, k) == [owner.get_hostname()]
        data = path.read_bytes()
        assert data.find(value) >= 4 * MIB, "the object is in the file's mounted half"
        assert reader.get(k) == value and owner.get(k) == value
        # Each kind of segment is unmounted by its own call.
        assert owner.unmount_and_free_segment(r["segment_ids"]) == -1
        assert owner.unmount_segment(r["segment_ids"]) == 0
        wait_gone(reader, k)
        assert reader.is_exist(k) == 0, "its only replica went with the segment"
        assert owner.unmount_segment(r["segment_ids"]) == -1, "not mounted any more"
        assert owner.unmount_segment(["no-such-id"]) == -1
        # Bad requests mount nothing.
        for args in ((str(path), 4 * MIB, 100), (str(path), 4 * MIB, 6 * MIB),
                     (str(path), 0), (str(path), -1), (f"{path}.missing", MIB),
                     ("/dev/null", MIB)):
            assert owner.mount_segment(*args)["ret"] == -1, args
        assert owner.mount_segment(str(path), MIB, protocol="nvlink")["ret"] == -1
        # The file's owner truncates it under a mounted segment: reads fail, nobody dies.
        r = owner.mount_segment(str(path), 8 * MIB)
        assert r["ret"] == 0, r
        assert reader.put(k, value, here) == 0
        os.truncate(path, 0)
        assert reader.get(k) == b""
        assert reader.get_buffer(k) is None
        assert reader.put(f"{k}-after", value, here) != 0, "no page of the file is left"
        assert owner.unmount_segment(r["segment_ids"], grace_period_seconds=0) == 0
        assert owner.unmount_local_disk_segment() == 0, "no SSD offload: nothing to drain"
    finally:
        owner.close()
        reader.close()
        path.unlink(missing_ok=True)
    assert owner.mount_segment(str(path), MIB)["ret"] == -1, "closed"


def test_host_memory_is_never_freed_while_a_store_has_it_registered(mc):
    from mooncake.store import MooncakeHostMemAllocator, bind_to_numa_node
    alloc = MooncakeHostMemAllocator()
    ptr = alloc.alloc(3 * MIB)
    assert ptr != 0 and ptr % 4096 == 0
    assert ctypes.string_at(ptr, 16) == bytes(16), "zero-filled"
    assert mc.register_buffer(ptr, 3 * MIB) == 0
    assert alloc.free(ptr) == -1, "still registered"
    assert mc.unregister_buffer(ptr) == 0
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == -1, "freed already"
    assert alloc.alloc(0) == 0
    before = os.sched_getaffinity(0)
    try:
        bind_to_numa_node(0)
        assert os.sched_getaffinity(0) <= before
        with pytest.raises(ValueError, match="NUMA node 4096"):
            bind_to_numa_node(4096)
    finally:
        os.sched_setaffinity(0, before)


# Every public name of the stock 0.3.13.post1 wheel's mooncake.store and mooncake.engine
# (dir() of each, without the underscored ones).
STOCK_STORE_NAMES = """ACTIVATION BufferHandle BufferLease BufferLeaseView BufferPool COMPLETE
Descriptor DiskDescriptor EngramStore EngramStoreConfig FAILED GENERAL GRADIENT INITIALIZED
KVCACHE METADATA MemoryDescriptor MooncakeDistributedNoFRegister MooncakeDistributedStore
MooncakeHostMemAllocator OPTIMIZER_STATE ObjectDataType PENDING PROCESSING ParallelAxis
QueryTaskResponse REMOVED REPLICA_COPY REPLICA_MOVE ReadTarget RegisteredBufferLease
RegisteredBufferLeaseView RegisteredBufferPool ReplicaDescriptor ReplicaStatus ReplicateConfig
SAMPLE SUCCESS SoftPinAction TENSOR TaskStatus TaskType TensorParallelism UNDEFINED UNKNOWN
WEIGHT bind_to_numa_node get_alloc_func_addr get_free_func_addr""".split()


def test_the_store_module_has_every_name_of_the_stock_wheel():
    from mooncake import store
    assert len(STOCK_STORE_NAMES) == 49
    assert [n for n in STOCK_STORE_NAMES if not hasattr(store, n)] == []
    assert store.PENDING is store.TaskStatus.PENDING and store.FAILED is store.TaskStatus.FAILED
    assert store.KVCACHE is store.ObjectDataType.KVCACHE and store.REMOVED.name == "REMOVED"
    with pytest.raises(NotImplementedError, match="MooncakeDistributedNoFRegister"):
        store.MooncakeDistributedNoFRegister()
    # The pluggable-allocator pair: C functions that allocate and free host memory.
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
        store.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)(store.get_free_func_addr())
    p = alloc(4096, 0, None)
    assert p
    ctypes.memset(p, 7, 4096)
    free(p, 4096, 0, None)
    r = store.QueryTaskResponse()
    assert r.status is store.TaskStatus.PENDING and r.message == ""


def test_buffer_pool_leases_registered_memory_for_zero_copy_calls(mc, k):
    # Arguments, limits and messages as the stock wheel's native pool (Mooncake's own
    # test_buffer_pool_native.py runs in test_mooncake_upstream.py).
    from mooncake.buffer_pool import BufferPool, RegisteredBufferPool
    assert RegisteredBufferPool is BufferPool
    pool = BufferPool(mc, max_regions=2)
    value = os.urandom(100_000)
    with pool.buffer(len(value)) as src:
        src.buffer[:] = value
        assert mc.put_from(k, src.ptr, src.size) == 0
    with pool.acquire(len(value)) as dst:
        assert dst.ptr == src._pool._all[0].addr, "the region is reused"
        assert mc.get_into(k, dst.ptr, dst.size) == len(value)
        whole = dst.buffer
        view = whole[:10]
        del whole
        with pytest.raises(RuntimeError, match="exported views"):
            dst.release()
        assert bytes(view) == value[:10], "still leased"
        del view
    with pytest.raises(RuntimeError, match="closed"):
        dst.ptr
    # A view keeps its lease: the region is not leased again while the view can reach it.
    view = pool.acquire(10).buffer
    other = pool.acquire(10)
    assert other.ptr != ctypes.addressof(ctypes.c_char.from_buffer(view))
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(10, block=False)
    with pytest.raises(RuntimeError, match="timed out"):
        pool.acquire(10, timeout=0.05)
    with pytest.raises(RuntimeError, match="active leases"):
        pool.close()
    del view
    other.release()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(10)
    with pytest.raises(RuntimeError, match="exceeds pool capacity"):
        BufferPool(mc).acquire(32 * MIB + 1)  # twice the 16 MiB local buffer
    bare = MooncakeDistributedStore()
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(bare)


def test_close_ends_every_registration_before_host_memory_may_be_freed(cluster):
    from mooncake.store import MooncakeHostMemAllocator
    alloc = MooncakeHostMemAllocator()
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.address) == 0
    ptr = alloc.alloc(MIB)
    assert st.register_buffer(ptr, MIB) == 0
    pool = st.alloc_from_mem_pool(MIB)
    assert pool != 0
    assert alloc.free(ptr) == -1, "registered"
    # Set up again: the first client's registrations end with it.
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.address) == 0
    assert alloc.free(ptr) == 0
    ptr = alloc.alloc(MIB)
    assert st.register_buffer(ptr, MIB) == 0
    assert st.close() == 0
    assert alloc.free(ptr) == 0, "close ended the registration"


SETUP_NAMES = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
               "protocol", "rdma_devices", "master_server_addr")


@pytest.mark.parametrize("form", ["keywords", "dict"])
def test_setups_optional_arguments_are_checked_not_dropped(cluster, caplog, form):
    # SGLang's full-client setup passes these keyword arguments; the dict form takes them too.
    base = ("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.address)
    st = MooncakeDistributedStore()

    def setup(**optional):
        if form == "keywords":
            return st.setup(*base, **optional)
        return st.setup({**dict(zip(SETUP_NAMES, base)), **optional})

    port = free_port()
    with caplog.at_level("WARNING", logger="mooncake"):
        assert setup(enable_ssd_offload=True, ssd_offload_path="/tmp/x",
                     enable_client_http_server=True, client_http_port=port) == 0
    assert "SSD tier" in caplog.text
    # The client HTTP server serves Mooncake's /health, and /ready and /metrics, until close.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "healthy", "code": 0}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=10) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert b"yuebing_client_ready 1" in r.read()
    # Set up again on the same port: the new client's server takes it over.
    assert setup(enable_client_http_server=True, client_http_port=port) == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        assert json.loads(r.read())["status"] == "healthy"
    assert st.close() == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)
    # A port Mooncake refuses.
    for bad in (0, 65536):
        assert setup(enable_client_http_server=True, client_http_port=bad) == -600, bad
    # Mooncake reads a blank tenant as the default one.
    for tenant in ("default", ""):
        assert setup(tenant_id=tenant) == 0, tenant
        assert st.close() == 0
    assert setup(tenant_id="team-a") == -600, "tenants would not be kept apart"
    if form == "keywords":
        with pytest.raises(TypeError, match="enable_ssd_offload"):
            setup(enable_ssd_offload="yes")


@pytest.mark.parametrize("form", ["keywords", "dict"])
def test_setup_with_protocol_rdma_serves_over_tcp_here_and_says_so(cluster, caplog, k, form):
    # vLLM's and SGLang's configs name protocol "rdma" and their devices; without a usable NIC
    # the client serves over tcp and a warning says so.
    if "rdma" in yuebing.Engine().transports:
        pytest.skip("this machine has an active RDMA NIC")
    st = MooncakeDistributedStore()

    def setup(devices):
        args = ("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "rdma", devices,
                cluster.address)
        return st.setup(*args) if form == "keywords" else st.setup(dict(zip(SETUP_NAMES, args)))

    try:
        with caplog.at_level("WARNING", logger="mooncake"):
            assert setup("") == 0
        assert "protocol 'rdma'" in caplog.text and "over tcp" in caplog.text
        assert st.put(k, b"over tcp") == 0 and st.get(k) == b"over tcp"
        # A list that is not one is refused where the package would use it.
        assert setup("mlx5_0 mlx5_1") == (-600 if "rdma" in yuebing.FEATURES else 0)
        assert setup("yuebing_no_nic0,yuebing_no_nic1") == 0, "named, absent: tcp"
        assert st.put(f"{k}-2", b"still tcp") == 0 and st.get(f"{k}-2") == b"still tcp"
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "RDMA", "",
                        cluster.address) == -1, "Mooncake's protocols are lower case"
    finally:
        st.close()


def test_setups_dict_form_reads_optional_settings_from_their_text(cluster, caplog):
    # Mooncake's dict form passes every value through str(), then reads it as the setting's kind.
    config = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
              "global_segment_size": 0, "master_server_addr": cluster.address}
    st = MooncakeDistributedStore()
    with caplog.at_level("WARNING", logger="mooncake"):
        assert st.setup({**config, "enable_ssd_offload": " YES ", "client_http_port": " 9301 ",
                         "enable_client_http_server": "off", "tenant_id": "default"}) == 0
    assert "SSD tier" in caplog.text and "client HTTP server" not in caplog.text
    assert st.close() == 0
    caplog.clear()
    # A flag that is no yes/no word is its default (off), with a warning, as in Mooncake.
    with caplog.at_level("WARNING", logger="mooncake"):
        assert st.setup({**config, "enable_client_http_server": "maybe"}) == 0
    assert "'maybe' is not a yes/no word" in caplog.text
    assert "client HTTP server" not in caplog.text
    assert st.close() == 0
    # A port that is not a decimal int is refused, as Mooncake refuses it (str(True): "True").
    for port in ("9300x", "", True, 1 << 31, 9300.0):
        assert st.setup({**config, "client_http_port": port}) == -600, port
    assert st.setup({**config, "tenant_id": 7}) == -600, "tenant '7'"
    assert st.health_check() == 1, "nothing was set up"
