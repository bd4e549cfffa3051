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
