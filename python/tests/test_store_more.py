"""yuebing.Store's calls for Mooncake's API against a real master and node: values from several
parts, upserts from memory and in batches, batch and pattern removal, replica lists, health,
the hostname, and a Store sharing an Engine."""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import yuebing
from conftest import Cluster


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_put_parts_stores_the_bytes_of_every_part_in_order(store, key):
    floats = np.arange(1000, dtype=np.float32)          # 4000 bytes, 1000 elements
    matrix = np.arange(64, dtype=np.int64).reshape(8, 8)  # 512 bytes
    parts = [b"head", floats, bytearray(b""), memoryview(payload(3000, 1))[7:2007], matrix,
             bytearray(b"tail")]
    store.put_parts(key, *parts)
    want = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    assert len(want) == 4 + 4000 + 0 + 2000 + 512 + 4
    assert store.get(key) == want
    assert store.get_size(key) == len(want)
    # An existing key keeps its value; upsert_parts replaces it.
    with pytest.raises(yuebing.ObjectAlreadyExists):
        store.put_parts(key, b"other")
    assert store.get(key) == want
    store.upsert_parts(key, b"new", np.frombuffer(b"er", dtype=np.uint8), timeout=10.0)
    assert store.get(key) == b"newer"
    # upsert_parts on a new key stores it; a single part is a plain value.
    store.upsert_parts(f"{key}/one", payload(1 << 20, 2))
    assert store.get(f"{key}/one") == payload(1 << 20, 2)


def test_put_parts_refuses_bad_parts_with_python_errors(store, key):
    with pytest.raises(TypeError, match=r"parts\[1\]"):
        store.put_parts(key, b"a", "a str is not bytes")
    with pytest.raises(TypeError, match=r"parts\[0\]"):
        store.put_parts(key, 12345)
    with pytest.raises(ValueError, match="C-contiguous"):
        store.put_parts(key, np.zeros(64, dtype=np.uint8)[::2])
    with pytest.raises(ValueError, match="replicas"):
        store.put_parts(key, b"x", replicas=0)
    # No bytes at all is not a value.
    with pytest.raises(ValueError):
        store.put_parts(key)
    with pytest.raises(ValueError):
        store.put_parts(key, b"", bytearray())
    assert not store.exist(key)


def test_upsert_from_replaces_from_a_buffer_or_an_address(store, key):
    first = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    store.upsert_from(key, first)                  # a new key
    assert store.get(key) == first.tobytes()
    with pytest.raises(yuebing.ObjectAlreadyExists):
        store.put_from(key, first)
    second = np.frombuffer(bytearray(payload(10_000, 4)), dtype=np.uint8)
    store.upsert_from(key, second.ctypes.data, 5000)
    assert store.get(key) == second.tobytes()[:5000]
    store.upsert_from(key, second, 100)             # the first `size` bytes of a buffer
    assert store.get(key) == second.tobytes()[:100]
    buf = store.engine.allocate(4096)              # an engine Buffer
    buf.write(b"\x42" * 4096)
    store.upsert_from(key, buf, 10)
    assert store.get(key) == b"\x42" * 10
    buf.free()
    with pytest.raises(TypeError, match="size"):
        store.upsert_from(key, second.ctypes.data)


def test_batch_upserts_replace_and_add_one_entry_per_key(store, key):
    keys = [f"{key}/{i}" for i in range(3)]
    assert store.batch_put(keys[:2], [b"old0", b"old1"]) == [None, None]
    assert store.batch_upsert(keys, [b"new0", bytearray(b"new1"), np.arange(4, dtype=np.uint8)]) \
        == [None, None, None]
    assert store.batch_get(keys) == [b"new0", b"new1", bytes(range(4))]
    block = 32 << 10
    src = np.random.default_rng(5).integers(0, 256, 3 * block, dtype=np.uint8)
    views = [memoryview(src)[i * block:(i + 1) * block] for i in range(3)]
    assert store.batch_upsert_from(keys, views) == [None, None, None]
    assert store.batch_get(keys) == [v.tobytes() for v in views]
    # Raw addresses with sizes, and a size that cuts a buffer short.
    got = store.batch_upsert_from(keys[:2], [src.ctypes.data, views[2]], [100, 10])
    assert got == [None, None]
    assert store.batch_get(keys[:2]) == [src.tobytes()[:100], views[2].tobytes()[:10]]
    with pytest.raises(ValueError, match="keys"):
        store.batch_upsert(keys, [b"x"])
    with pytest.raises(ValueError, match="keys"):
        store.batch_upsert_from(keys, views[:1])


def test_batch_remove_gives_each_key_its_outcome(store, key):
    keys = [f"{key}/{i}" for i in range(3)]
    store.batch_put(keys, [b"a", b"b", b"c"])
    store.get(keys[2])                              # a read lease on the third
    got = store.batch_remove([keys[0], f"{key}/missing", keys[2], keys[1]])
    assert got[0] is None and got[3] is None
    assert isinstance(got[1], yuebing.ObjectNotFound) and got[1].code == -704
    assert isinstance(got[2], yuebing.ObjectHasLease) and got[2].code == -706
    assert store.batch_exist(keys) == [False, False, True]
    assert store.batch_remove([keys[2]], force=True) == [None]
    assert not store.exist(keys[2])
    assert store.batch_remove([]) == []


def test_remove_by_regex_counts_and_refuses_a_bad_pattern(store, key):
    for name in ("req1/l0", "req1/l1", "req2/l0", "other"):
        store.put(f"{key}/{name}", b"v")
    prefix = "^" + re.escape(key)
    assert store.remove_by_regex(prefix + "/req1/") == 2
    assert store.remove_by_regex(prefix + "/req1/") == 0
    store.get(f"{key}/req2/l0")                     # leased: only a forced removal takes it
    assert store.remove_by_regex(prefix + "/req2/") == 0
    assert store.remove_by_regex(prefix + "/req2/", force=True) == 1
    assert [o.key for o in store.list(prefix=f"{key}/")] == [f"{key}/other"]
    with pytest.raises(yuebing.InvalidParams) as bad:
        store.remove_by_regex("(")
    assert bad.value.code == -600 and isinstance(bad.value, ValueError)
    assert store.exist(f"{key}/other")


def test_replicas_of_a_key_and_of_a_batch(cluster, key):
    with yuebing.Store(cluster.address, store_size="16MiB") as s:
        assert s.hostname == s.segment_name
        value = payload(12_345, 6)
        s.put(key, value, preferred=[s.hostname])
        r = s.replicas(key)
        assert isinstance(r, yuebing.Replicas)
        assert (r.size, len(r), r.lease_ms > 0) == (len(value), 1, True)
        node, addr, length = r.replicas[0]
        assert (node, length) == (s.hostname, len(value)) and addr > 0
        assert "Replicas(" in repr(r)
        # The node's replicas name the node; a missing key is its own entry.
        s.put(f"{key}/there", b"x" * 10, preferred=[cluster.nodes[0].announced])
        each = s.batch_replicas([key, f"{key}/missing", f"{key}/there"])
        assert (each[0].size, each[0].replicas) == (r.size, r.replicas)
        assert isinstance(each[1], yuebing.ObjectNotFound) and each[1].code == -704
        assert each[2].replicas[0][0] == cluster.nodes[0].announced and each[2].size == 10
        with pytest.raises(yuebing.ObjectNotFound):
            s.replicas(f"{key}/missing")
        # The replica list took a read lease, as a get does.
        with pytest.raises(yuebing.ObjectHasLease):
            s.remove(key)
        s.remove(key, force=True)


def test_health_check_healthy_unreachable_and_closed():
    c = Cluster(nodes=0)
    try:
        s = yuebing.Store(c.address, store_size="4MiB")
        assert s.health_check() == 0
        assert s.health_check(timeout=5.0) == 0
        c.master.kill()
        assert s.health_check(timeout=1.0) == 2
    finally:
        c.stop()


def test_health_check_after_close_is_1_and_does_not_raise(cluster):
    s = yuebing.Store(cluster.address)
    assert s.health_check() == 0
    s.close()
    assert s.health_check() == 1
    assert s.health_check(timeout=0.1) == 1
    assert s.hostname == s.segment_name             # still named after close
    with pytest.raises(ValueError, match="closed"):
        s.replicas("any")


def test_a_store_on_a_shared_engine_leaves_it_usable_after_close(cluster, key):
    e = yuebing.Engine()
    s = yuebing.Store(cluster.address, engine=e, store_size="8MiB")
    assert s.segment_name == s.hostname == e.name
    value = payload(300_000, 7)
    s.put(key, value, preferred=[e.name])
    assert s.get(key) == value
    assert s.replicas(key).replicas[0][0] == e.name
    # Memory registered with the engine serves the store's zero-copy calls, and the other way.
    src = np.frombuffer(bytearray(payload(64 << 10, 8)), dtype=np.uint8)
    e.register(src)
    s.put_from(f"{key}/from", src)
    assert s.get(f"{key}/from") == src.tobytes()
    with pytest.raises(yuebing.AddressOverlapped):
        s.register_buffer(src)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    s.register_buffer(dst)
    with pytest.raises(yuebing.AddressOverlapped):
        e.register(dst)
    assert s.get_into(key, dst) == len(value)
    assert dst[: len(value)].tobytes() == value
    s.unregister_buffer(dst)
    # The store space goes with the store: what it holds goes first.
    assert s.remove_by_regex("^" + re.escape(key), force=True) == 2
    s.close()
    assert s.health_check() == 1
    del s
    gc.collect()

    # The engine still serves: a write into its own exported memory and a read back.
    target = e.allocate(1 << 16, remote="rw")
    seg = e.open_segment(e.name)
    e.write(src, seg, target.addr, 4096)
    out = np.zeros(4096, dtype=np.uint8)
    e.read(out, seg, target.addr)
    np.testing.assert_array_equal(out, src[:4096])
    e.unregister(src)
    # A second store may run on it afterwards (a pure client: the node holds its objects).
    with yuebing.Store(cluster.address, engine=e) as again:
        again.put(key, value)
        assert again.get(key) == value
        assert again.replicas(key).replicas[0][0] == cluster.nodes[0].announced


def test_a_shared_engine_must_carry_the_stores_token_and_settings(cluster):
    with pytest.raises(yuebing.InvalidParams, match="token"):
        yuebing.Store(cluster.address, engine=yuebing.Engine(token="secret"))
    e = yuebing.Engine()
    with pytest.raises(yuebing.InvalidParams, match="token"):
        yuebing.Store(cluster.address, engine=e, token="secret")
    with pytest.raises(ValueError, match="engine"):
        yuebing.Store(cluster.address, engine=e, transport="tcp")
    with pytest.raises(ValueError, match="engine"):
        yuebing.Store(cluster.address, engine=e, bind="127.0.0.1:7")
    with pytest.raises(TypeError):
        yuebing.Store(cluster.address, engine="not an engine")


def test_batch_get_ranges_gathers_parts_and_refuses_each_bad_fragment(store, key):
    a = bytes(range(256)) * 40
    b = b"0123456789" * 10
    store.put(key + "a", a)
    store.put(key + "b", b)
    first, second = bytearray(64), np.zeros(32, dtype=np.uint8)
    out = store.batch_get_ranges(
        [key + "a", key + "b", key + "a", key + "missing"],
        [first, first, second, second],
        [[(0, 100, 10), (10, 10_000, 2000)], [(20, 95, 5), (60, 0, 5)], [(0, 10_239, 1)],
         [(8, 0, 4)]],
    )
    assert out[0][0] == 10
    assert isinstance(out[0][1], yuebing.InvalidParams), "outside the object"
    assert out[1][0] == 5
    assert isinstance(out[1][1], yuebing.InvalidParams), "outside its buffer (60 + 5 > 64)"
    assert out[2] == [1]
    assert isinstance(out[3][0], yuebing.ObjectNotFound)
    assert bytes(first[:10]) == a[100:110]
    assert bytes(first[20:25]) == b[95:]
    assert bytes(first[60:64]) == bytes(4), "nothing written for a refused fragment"
    assert second[0] == a[10_239] and not second[8:12].any()
    with pytest.raises(yuebing.InvalidArgument):
        store.batch_get_ranges([key + "a"], [first], [])


def test_multi_buffer_forms_gather_scatter_and_upsert(store, key):
    parts = [bytes([i]) * n for i, n in enumerate([300, 7000, 5])]
    bufs = [bytearray(p) for p in parts]
    assert store.batch_put_from_buffers([key], [bufs]) == [None]
    assert store.get(key) == b"".join(parts)
    (dup,) = store.batch_put_from_buffers([key], [bufs])
    assert isinstance(dup, yuebing.ObjectAlreadyExists)
    assert store.batch_upsert_from_buffers([key], [bufs[:1]]) == [None]
    assert store.get(key) == parts[0]
    store.upsert(key, b"".join(parts))
    out = [np.zeros(4000, dtype=np.uint8), np.zeros(4000, dtype=np.uint8)]
    assert store.batch_get_into_buffers([key], [out]) == [7305]
    assert bytes(out[0]) + bytes(out[1][:3305]) == b"".join(parts)
    assert not out[1][3305:].any()
    (short,) = store.batch_get_into_buffers([key], [[np.zeros(7000, dtype=np.uint8)]])
    assert isinstance(short, yuebing.InvalidParams)
    with pytest.raises(yuebing.InvalidArgument):
        store.batch_get_into_buffers([key], [out], [[4000]])


def test_fewer_round_trips_are_asked_for_per_store_and_turned_off_per_read(cluster, key):
    """A Store with grants puts small values through them, one with a lease cache reads them
    again from their replicas; every read takes ``uncached=True``; bad settings raise."""
    writer = yuebing.Store(cluster.address, grant_size="1MiB")
    reader = yuebing.Store(cluster.address, lease_cache=64)
    try:
        keys = [f"{key}/{i}" for i in range(8)]
        values = [payload(4096, i) for i in range(8)]
        for k, v in zip(keys[:4], values[:4]):
            writer.put(k, v)
        assert writer.batch_put(keys[4:], values[4:]) == [None] * 4
        for _ in range(2):
            assert reader.batch_get(keys) == values
        assert reader.get(keys[0], uncached=True) == values[0]
        buf = bytearray(4096)
        assert reader.get_into(keys[1], buf, uncached=True) == 4096 and bytes(buf) == values[1]
        assert reader.batch_get(keys, uncached=True) == values
        bufs = [bytearray(4096) for _ in keys]
        assert reader.batch_get_into(keys, bufs, uncached=True) == [4096] * 8
        assert [bytes(b) for b in bufs] == values
        # A Store reads its own writes back, cached or not.
        reader.upsert(keys[2], b"new")
        assert reader.get(keys[2]) == b"new"
    finally:
        writer.close()
        reader.close()
    with pytest.raises(yuebing.InvalidArgument, match="grant_size"):
        yuebing.Store(cluster.address, grant_size="lots")
