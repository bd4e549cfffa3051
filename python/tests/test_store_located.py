"""yuebing.Store's reads in two steps against a real master and node: ``locate`` finds an
object and takes its read lease, ``read_located`` reads it into the caller's memory, and
``get_or_locate`` returns a small value at once and only locates a large one."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import yuebing


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_locate_then_read_located_into_memory_sized_for_the_object(store, key):
    value = payload(1 << 20, 11)
    store.put(key, value)
    loc = store.locate(key)
    assert isinstance(loc, yuebing.Location)
    assert (loc.key, loc.size) == (key, len(value))
    assert repr(loc) == f'Location(key="{key}", size={len(value)})'
    # Locating took a read lease, as a get does.
    with pytest.raises(yuebing.ObjectHasLease):
        store.remove(key)
    # Into a numpy array of exactly its size, then a bytearray with room to spare: the
    # location is read as often as wanted while its lease lasts.
    dst = np.empty(loc.size, dtype=np.uint8)
    assert store.read_located(loc, dst) == len(value)
    assert dst.tobytes() == value
    roomy = bytearray(loc.size + 100)
    assert store.read_located(loc, roomy, timeout=10.0) == len(value)
    assert bytes(roomy[: len(value)]) == value and not any(roomy[len(value):])
    # Into a raw address with its size.
    raw = (ctypes.c_uint8 * loc.size)()
    assert store.read_located(loc, ctypes.addressof(raw), ctypes.sizeof(raw)) == len(value)
    assert bytes(raw) == value
    store.remove(key, force=True)


def test_read_located_refuses_a_small_or_read_only_buffer_and_writes_nothing(store, key):
    store.put(key, payload(4096, 12))
    loc = store.locate(key)
    small = bytearray(b"\xaa" * 4095)
    with pytest.raises(yuebing.InvalidParams):
        store.read_located(loc, small)
    assert small == bytearray(b"\xaa" * 4095)
    with pytest.raises(yuebing.InvalidArgument):
        store.read_located(loc, bytes(4096))
    with pytest.raises(TypeError, match="size"):
        store.read_located(loc, ctypes.addressof((ctypes.c_uint8 * 4096)()))
    with pytest.raises(TypeError):
        store.read_located(key, bytearray(4096))        # a key is not a Location
    with pytest.raises(ValueError, match="timeout"):
        store.read_located(loc, bytearray(4096), timeout=-1.0)
    store.remove(key, force=True)


def test_locate_of_a_missing_key_raises_object_not_found(store, key):
    with pytest.raises(yuebing.ObjectNotFound) as missing:
        store.locate(f"{key}/missing")
    assert missing.value.code == -704 and isinstance(missing.value, KeyError)
    with pytest.raises(yuebing.ObjectNotFound):
        store.get_or_locate(f"{key}/missing")
    # The store's own answer for an empty key (Mooncake's INVALID_PARAMS, -600).
    with pytest.raises(yuebing.InvalidParams, match="key"):
        store.locate("")


def test_get_or_locate_returns_small_values_and_locates_large_ones(store, key):
    small, large = payload(1000, 13), payload(256 << 10, 14)
    store.put(f"{key}/small", small)
    store.put(f"{key}/large", large)
    # By default what `get` reads in one call: below 64 KiB.
    assert store.get_or_locate(f"{key}/small") == small
    got = store.get_or_locate(f"{key}/large")
    assert isinstance(got, yuebing.Location) and got.size == len(large)
    dst = bytearray(got.size)
    assert store.read_located(got, dst) == len(large) and bytes(dst) == large
    # inline_max is inclusive; 0 locates everything but an empty value.
    assert store.get_or_locate(f"{key}/small", 1000) == small
    assert isinstance(store.get_or_locate(f"{key}/small", 999), yuebing.Location)
    assert store.get_or_locate(f"{key}/large", inline_max=len(large), timeout=10.0) == large
    located = store.get_or_locate(f"{key}/small", 0)
    assert (located.key, located.size) == (f"{key}/small", 1000)
    with pytest.raises(OverflowError):
        store.get_or_locate(f"{key}/small", -1)
    store.remove(f"{key}/small", force=True)
    store.remove(f"{key}/large", force=True)


def test_a_location_outlives_a_closed_store_but_cannot_be_read_through_it(cluster, key):
    s = yuebing.Store(cluster.address)
    s.put(key, b"v" * 100)
    loc = s.locate(key)
    s.close()
    assert loc.size == 100
    with pytest.raises(ValueError, match="closed"):
        s.read_located(loc, bytearray(100))
    with pytest.raises(ValueError, match="closed"):
        s.locate(key)


def test_sessions_locate_or_reserve_once_then_move_ranges(store, key):
    layers, page = 3, 5000
    values = [payload(layers * page, s) for s in (1, 2)]
    keys = [f"{key}/a", f"{key}/b"]
    res = store.batch_reserve(keys + [""], [layers * page] * 3)
    assert isinstance(res[2], yuebing.InvalidParams)
    rs = res[:2]
    assert all(isinstance(r, yuebing.Reservation) for r in rs)
    assert (rs[0].key, rs[0].size, rs[0].sealed) == (keys[0], layers * page, False)
    # Layer by layer from bytes, bytearrays and numpy arrays (each layer of both keys at once).
    for layer in range(layers):
        part = [v[layer * page:(layer + 1) * page] for v in values]
        bufs = [[part[0]], [np.frombuffer(bytearray(part[1]), dtype=np.uint8)]]
        got = store.batch_write_reserved(rs, bufs, [[layer * page]] * 2)
        assert got == [page, page]
    late = store.batch_write_reserved(rs[:1], [[b"x" * 10]], [[layers * page - 5]])
    assert isinstance(late[0], yuebing.InvalidParams), "outside the object"
    assert store.batch_publish(rs) == [None, None]
    assert rs[0].sealed
    assert isinstance(store.batch_write_reserved(rs[:1], [[b"x"]], [[0]])[0],
                      yuebing.InvalidParams), "published: sealed"
    assert [store.get(k) for k in keys] == values
    # A reserved key revoked: not stored.
    (r,) = store.batch_reserve([f"{key}/c"], [10])
    assert store.batch_revoke([r]) == [None]
    assert not store.exist(f"{key}/c")
    # Reads: located once, then ranges (two per item), from the end backwards.
    found = store.batch_locate(keys + [f"{key}/none"])
    assert isinstance(found[2], yuebing.ObjectNotFound)
    out = [bytearray(layers * page), np.zeros(layers * page, dtype=np.uint8)]
    for layer in reversed(range(layers)):
        at = layer * page
        views = [[memoryview(o)[at:at + 100], memoryview(o)[at + 100:at + page]] for o in out]
        assert store.batch_read_located(found[:2], views, [[at, at + 100]] * 2) == [page] * 2
    assert bytes(out[0]) == values[0] and out[1].tobytes() == values[1]
    with pytest.raises(yuebing.InvalidArgument):
        store.batch_read_located(found[:1], [[bytearray(1)]], [[0, 1]])
