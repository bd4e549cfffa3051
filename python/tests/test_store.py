"""yuebing.Store against a real master and node: round trips, zero-copy, batches, errors."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import yuebing


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# 64 KiB is where put and get stop copying (they register the value's memory instead).
@pytest.mark.parametrize(
    "size", [1, 4096, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 1 << 20, 3 * (1 << 20) + 17])
def test_bytes_round_trip_is_byte_exact(store, key, size):
    value = payload(size, size)
    store.put(key, value)
    assert store.get(key) == value
    assert store.get_size(key) == size
    assert store.exist(key)


def test_any_buffer_is_a_value(store, key):
    arr = np.arange(10_000, dtype=np.float32).reshape(100, 100)
    big = np.arange(100_000, dtype=np.float32).reshape(1000, 100)
    values = {
        "bytearray": bytearray(payload(5000, 1)),
        "memoryview": memoryview(payload(6000, 2))[100:5100],
        "numpy": arr,
        "numpy-slice-rows": arr[10:20],
        # From 64 KiB on, sent from their own memory rather than copied.
        "bytearray-large": bytearray(payload(300_000, 3)),
        "memoryview-large": memoryview(payload(300_000, 4))[1000:201_000],
        "numpy-large-rows": big[100:900],
    }
    for name, v in values.items():
        store.put(f"{key}/{name}", v)
        assert store.get(f"{key}/{name}") == bytes(memoryview(v).cast("B")), name
    back = np.frombuffer(store.get(f"{key}/numpy"), dtype=np.float32).reshape(100, 100)
    np.testing.assert_array_equal(back, arr)


def test_get_into_a_numpy_array_and_a_bytearray_without_copy(store, key):
    value = payload(1 << 20, 3)
    store.put(key, value)
    dst = np.zeros(2 << 20, dtype=np.uint8)
    assert store.get_into(key, dst) == len(value)
    assert dst[: len(value)].tobytes() == value
    assert not dst[len(value):].any()
    ba = bytearray(len(value))
    assert store.get_into(key, ba) == len(value)
    assert bytes(ba) == value
    # Into a slice of a larger array (a memoryview of part of it).
    big = np.zeros(3 << 20, dtype=np.uint8)
    assert store.get_into(key, memoryview(big)[1 << 20:]) == len(value)
    assert big[1 << 20:(1 << 20) + len(value)].tobytes() == value
    assert not big[: 1 << 20].any()


def test_get_into_and_put_from_a_raw_address(store, key):
    value = payload(64 << 10, 4)
    src = np.frombuffer(bytearray(value), dtype=np.uint8)
    store.put_from(key, src.ctypes.data, src.nbytes)
    raw = (ctypes.c_uint8 * (128 << 10))()
    n = store.get_into(key, ctypes.addressof(raw), ctypes.sizeof(raw))
    assert n == len(value)
    assert bytes(raw)[:n] == value
    # An address needs its size.
    with pytest.raises(TypeError, match="size"):
        store.get_into(key, ctypes.addressof(raw))
    with pytest.raises(ValueError, match="null"):
        store.get_into(key, 0, 16)


def test_get_into_and_put_from_an_engine_buffer(store, key):
    value = payload(10_000, 9)
    store.put(key, value)
    buf = store.engine.allocate(16384)
    assert store.get_into(key, buf) == len(value)
    assert buf.read(0, len(value)) == value
    store.put_from(f"{key}/again", buf, len(value))
    assert store.get(f"{key}/again") == value
    buf.free()


def test_put_from_a_numpy_array_and_part_of_one(store, key):
    arr = np.random.default_rng(5).standard_normal((256, 64)).astype(np.float32)
    store.put_from(key, arr)
    assert store.get(key) == arr.tobytes()
    store.put_from(f"{key}/head", arr, 1000)
    assert store.get(f"{key}/head") == arr.tobytes()[:1000]
    with pytest.raises(ValueError, match="larger"):
        store.put_from(f"{key}/over", arr, arr.nbytes + 1)


def test_a_read_only_or_strided_destination_is_refused(store, key):
    store.put(key, b"abcd")
    with pytest.raises(yuebing.InvalidArgument, match="read-only"):
        store.get_into(key, b"\0" * 16)
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(yuebing.InvalidArgument, match="read-only"):
        store.get_into(key, ro)
    with pytest.raises(ValueError, match="C-contiguous"):
        store.get_into(key, np.zeros(64, dtype=np.uint8)[::2])
    with pytest.raises(ValueError, match="C-contiguous"):
        store.put(f"{key}/strided", np.zeros(64, dtype=np.uint8)[::2])


def test_bad_arguments_raise_python_errors_not_panics(store, key):
    with pytest.raises(TypeError):
        store.put(key, "a str is not bytes")
    with pytest.raises(TypeError):
        store.put(key, 12345)
    with pytest.raises(TypeError):
        store.get_into(key, object())
    with pytest.raises(ValueError, match="timeout"):
        store.get(key, timeout=-1)
    with pytest.raises(ValueError, match="empty"):
        store.get_into(key, bytearray())
    with pytest.raises(ValueError, match="replicas"):
        store.put(key, b"x", replicas=0)
    with pytest.raises(ValueError, match="address"):
        store.get_into(key, -5, 10)
    with pytest.raises(ValueError, match="keys"):
        store.batch_put([key, f"{key}/2"], [b"x"])
    with pytest.raises(yuebing.InvalidEndpoint) as e:
        yuebing.Store("not an address")
    assert e.value.code == -2012
    with pytest.raises(ValueError, match="transport"):
        yuebing.Store("127.0.0.1:1", transport="carrier-pigeon")


def test_errors_carry_code_and_name(store, key):
    with pytest.raises(yuebing.ObjectNotFound) as missing:
        store.get(key)
    assert (missing.value.code, missing.value.name) == (-704, "ObjectNotFound")
    assert isinstance(missing.value, KeyError) and isinstance(missing.value, yuebing.YuebingError)
    assert key in str(missing.value)

    store.put(key, b"first")
    with pytest.raises(yuebing.ObjectAlreadyExists) as exists:
        store.put(key, b"second")
    assert exists.value.code == -705
    assert store.get(key) == b"first"          # the value is unchanged

    # The get above took a read lease: removing without force is refused.
    with pytest.raises(yuebing.ObjectHasLease) as leased:
        store.remove(key)
    assert (leased.value.code, leased.value.name) == (-706, "ObjectHasLease")
    store.remove(key, force=True)
    assert not store.exist(key)
    with pytest.raises(yuebing.ObjectNotFound):
        store.remove(key)


def test_a_buffer_smaller_than_the_value_is_invalid_params_and_untouched(store, key):
    store.put(key, payload(4096, 6))
    small = bytearray(b"\xee" * 100)
    with pytest.raises(yuebing.InvalidParams) as e:
        store.get_into(key, small)
    assert e.value.code == -600 and isinstance(e.value, ValueError)
    assert "smaller" in str(e.value)
    assert small == bytearray(b"\xee" * 100)


def test_upsert_replaces(store, key):
    store.upsert(key, b"one")
    store.upsert(key, b"two, longer")
    assert store.get(key) == b"two, longer"
    assert store.get_size(key) == len(b"two, longer")


def test_batches_return_one_entry_per_key(store, key):
    keys = [f"{key}/{i}" for i in range(4)]
    values = [payload(1000 + i, i) for i in range(4)]
    assert store.batch_put(keys[:3], values[:3]) == [None, None, None]
    again = store.batch_put(keys[2:], values[2:])
    assert isinstance(again[0], yuebing.ObjectAlreadyExists) and again[1] is None
    got = store.batch_get([keys[0], f"{key}/missing", keys[3]])
    assert got[0] == values[0] and got[2] == values[3]
    assert isinstance(got[1], yuebing.ObjectNotFound) and got[1].code == -704
    assert store.batch_exist([keys[1], f"{key}/missing"]) == [True, False]
    assert store.batch_get([]) == []


def test_zero_copy_batches_on_slices_of_one_array(store, key):
    layers, block = 4, 64 << 10
    src = np.random.default_rng(7).integers(0, 256, layers * block, dtype=np.uint8)
    keys = [f"{key}/layer{i}" for i in range(layers)]
    views = [memoryview(src)[i * block:(i + 1) * block] for i in range(layers)]
    assert store.batch_put_from(keys, views) == [None] * layers
    dst = np.zeros(layers * block, dtype=np.uint8)
    dst_views = [memoryview(dst)[i * block:(i + 1) * block] for i in range(layers)]
    got = store.batch_get_into(keys + [f"{key}/missing"], dst_views + [bytearray(16)])
    assert got[:layers] == [block] * layers
    assert isinstance(got[layers], yuebing.ObjectNotFound)
    np.testing.assert_array_equal(dst, src)
    # Raw addresses with sizes.
    out = np.zeros(block, dtype=np.uint8)
    assert store.batch_get_into([keys[1]], [out.ctypes.data], [block]) == [block]
    np.testing.assert_array_equal(out, src[block:2 * block])


def test_registered_buffers_serve_many_calls(store, key):
    big = np.zeros(1 << 20, dtype=np.uint8)
    addr = store.register_buffer(big)
    assert addr == big.ctypes.data
    with pytest.raises(yuebing.AddressOverlapped):
        store.register_buffer(memoryview(big)[4096:8192])
    value = payload(100_000, 8)
    store.put(key, value)
    for offset in (0, 4096, 500_000):
        assert store.get_into(key, memoryview(big)[offset:]) == len(value)
        assert big[offset:offset + len(value)].tobytes() == value
    store.put_from(f"{key}/from", big.ctypes.data + 4096, len(value))
    assert store.get(f"{key}/from") == value
    store.unregister_buffer(big)
    with pytest.raises(yuebing.AddressNotRegistered):
        store.unregister_buffer(addr)
    # Unregistered memory still works: it is registered for each call.
    assert store.get_into(key, big) == len(value)


def test_list_stats_and_remove(store, key):
    for i in range(3):
        store.put(f"{key}/{i}", b"x" * (i + 1))
    listed = store.list(prefix=f"{key}/")
    assert [o.key for o in listed] == [f"{key}/{i}" for i in range(3)]
    assert [o.size for o in listed] == [1, 2, 3]
    assert all(o.replicas == 1 for o in listed)
    assert len(store.list(prefix=f"{key}/", limit=2)) == 2
    stats = store.stats()
    assert stats["objects"] >= 3 and stats["nodes"] >= 1 and stats["bytes_capacity"] > 0
    for i in range(3):
        store.remove(f"{key}/{i}")
    assert store.list(prefix=f"{key}/") == []


def test_a_store_with_space_of_its_own_and_close(cluster, key):
    # Any unit spelling yuebing's sizes take, as `yuebing node --store-size` takes them.
    with yuebing.Store(cluster.address, store_size="16 mb", staging_size="4Mi") as s:
        assert s.segment_name.startswith("127.0.0.1:")
        for i in range(8):
            s.put(f"{key}/{i}", payload(100_000, i))
        assert all(s.get(f"{key}/{i}") == payload(100_000, i) for i in range(8))
        assert "Store" in repr(s)
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        s.get(f"{key}/0")
    s.close()  # twice is fine


def test_remove_all_counts(key):
    from conftest import Cluster

    c = Cluster()
    try:
        s = yuebing.Store(c.address)
        for i in range(5):
            s.put(f"{key}/{i}", b"v")
        s.get(f"{key}/0")  # leased: only a forced remove_all takes it
        assert s.remove_all() == 4
        assert s.remove_all(force=True) == 1
        assert s.remove_all() == 0
        s.close()
    finally:
        c.stop()
