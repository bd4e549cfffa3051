"""The integrators' call sequences through the drop-in, as their sources make them, against a
real ``yuebing master`` and node, every byte checked:

- vLLM's Mooncake store connector (``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/
  store/worker.py``): per-layer paged KV buffers registered once, ``batch_is_exist`` to find
  the blocks not stored yet, ``batch_put_from_multi_buffers`` of those (each key one block of
  every layer's K and V), ``batch_get_into_multi_buffers`` into other blocks on the consumer,
  ``batch_get_replica_desc``, ``remove_all(force=True)``, ``close``;
- LMCache's Mooncake connector (``lmcache/v1/storage_backend/connector/
  mooncakestore_connector.py``): chunks stored with ``put_parts(key, metadata, kv)`` (and
  ``put_parts(key, b"", data)``) and read back with ``batch_get_buffer``; the zero-copy mode's
  ``register_buffer``, ``put_from``, ``batch_put_from``, ``get_into``, ``batch_get_into``,
  ``is_exist`` and ``batch_is_exist``;
- SGLang HiCache (``python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py``), as a
  full client and, with ``standalone_storage``, as a dummy client of ``mooncake_client --port``
  beside a full one.
"""

from __future__ import annotations

import ctypes
import struct
import uuid

import numpy as np
import pytest

from conftest import free_port, mooncake_real_client

from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig

MIB = 1 << 20


def address(a: np.ndarray) -> int:
    return a.ctypes.data


@pytest.fixture
def pair(cluster):
    """A producer that contributes store space (vLLM's embedded mode) and a consumer that
    contributes none (standalone-store mode)."""
    producer, consumer = MooncakeDistributedStore(), MooncakeDistributedStore()
    assert producer.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MIB, 64 * MIB, "tcp", "",
                          cluster.address) == 0
    assert consumer.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MIB, "tcp", "",
                          cluster.address) == 0
    yield producer, consumer
    assert consumer.close() == 0
    assert producer.close() == 0


class PagedKV:
    """One K and one V buffer per layer, ``blocks`` blocks of ``block`` bytes each, as vLLM's
    paged KV cache lays them out; registered with ``store`` once."""

    def __init__(self, store, layers, blocks, block, seed=None):
        rng = np.random.default_rng(seed)
        make = ((lambda: rng.integers(0, 256, blocks * block, dtype=np.uint8))
                if seed is not None else (lambda: np.zeros(blocks * block, dtype=np.uint8)))
        self.tensors = [make() for _ in range(2 * layers)]
        self.block = block
        for t in self.tensors:
            assert store.register_buffer(address(t), t.nbytes) == 0

    def addrs(self, block_id):
        return [address(t) + block_id * self.block for t in self.tensors]

    def sizes(self):
        return [self.block] * len(self.tensors)

    def block_bytes(self, block_id):
        return [t[block_id * self.block:(block_id + 1) * self.block] for t in self.tensors]

    def unregister(self, store):
        for t in self.tensors:
            assert store.unregister_buffer(address(t)) == 0


@pytest.mark.parametrize("batch", [16, 32, 64])
def test_vllm_stores_and_loads_paged_kv_blocks(pair, batch):
    producer, consumer = pair
    layers, blocks, block = 8, 80, 4096
    src = PagedKV(producer, layers, blocks, block, seed=batch)
    dst = PagedKV(consumer, layers, blocks, block)
    prefix = f"vllm@tp0@{uuid.uuid4().hex}"
    keys = [f"{prefix}@{i}" for i in range(batch)]
    # Save: the blocks not stored yet, all layers of each in one key.
    config = ReplicateConfig()
    assert producer.batch_is_exist(keys) == [0] * batch
    src_ids = list(range(3, 3 + batch))
    assert producer.batch_put_from_multi_buffers(
        keys, [src.addrs(b) for b in src_ids], [src.sizes()] * batch, config) == [0] * batch
    exists = producer.batch_is_exist(keys)
    assert exists == [1] * batch
    missing = [i for i, e in enumerate(exists) if e != 1]
    assert missing == [], "a second save stores nothing"
    # Load on the consumer into other blocks.
    dst_ids = [blocks - 1 - i for i in range(batch)]
    got = consumer.batch_get_into_multi_buffers(
        keys, [dst.addrs(b) for b in dst_ids], [dst.sizes()] * batch)
    assert got == [2 * layers * block] * batch
    for s, d in zip(src_ids, dst_ids):
        for a, b in zip(src.block_bytes(s), dst.block_bytes(d)):
            assert (a == b).all()
    untouched = set(range(blocks)) - set(dst_ids)
    assert all(not t[i * block:(i + 1) * block].any() for t in dst.tensors for i in untouched)
    descs = consumer.batch_get_replica_desc(keys + [prefix + "@none"])
    assert sorted(descs) == sorted(keys)
    assert all(d[0].is_memory_replica() for d in descs.values())
    # A missing block among present ones is a negative code in its place only.
    mixed = consumer.batch_get_into_multi_buffers(
        [keys[0], prefix + "@none"], [dst.addrs(0), dst.addrs(1)], [dst.sizes()] * 2)
    assert mixed[0] == 2 * layers * block and mixed[1] < 0
    assert producer.remove_all(force=True) >= batch
    assert consumer.batch_is_exist(keys) == [0] * batch
    src.unregister(producer)
    dst.unregister(consumer)


METADATA = struct.Struct("iiiiii")


def test_lmcache_puts_chunks_with_metadata_and_reads_them_back(pair):
    producer, consumer = pair
    assert producer.get_hostname().startswith("127.0.0.1:")
    rng = np.random.default_rng(7)
    chunks = {}
    for i in range(12):
        kv = rng.integers(0, 256, 2 * 16 * 256 * 8, dtype=np.uint8)
        key = f"lmcache@{uuid.uuid4().hex}@{i}"
        meta = METADATA.pack(kv.nbytes, 3, 2, 16, 256, 8)
        kv_bytes = memoryview((ctypes.c_ubyte * kv.nbytes).from_address(address(kv)))
        assert producer.put_parts(key, meta, kv_bytes) == 0
        chunks[key] = (meta, kv.tobytes())
    plain = f"lmcache@{uuid.uuid4().hex}@plain"
    assert producer.put_parts(plain, b"", b"remote-bytes") == 0
    keys = list(chunks)
    assert consumer.batch_is_exist(keys + [plain]) == [1] * (len(keys) + 1)
    for key, handle in zip(keys, consumer.batch_get_buffer(keys)):
        value = memoryview(handle)
        meta, kv = chunks[key]
        assert handle.size() == len(meta) + len(kv)
        assert METADATA.unpack(value[:METADATA.size]) == METADATA.unpack(meta)
        assert bytes(value[METADATA.size:]) == kv
    (one,) = consumer.batch_get_buffer([plain])
    assert bytes(one) == b"remote-bytes"
    assert consumer.batch_get_buffer([plain + "-missing"]) == [None]


def test_lmcache_zero_copy_mode_moves_chunks_between_registered_pools(pair):
    producer, consumer = pair
    chunk, n = 256 * 1024, 8
    pool = np.random.default_rng(3).integers(0, 256, chunk * n, dtype=np.uint8)
    back = np.zeros(chunk * n, dtype=np.uint8)
    assert producer.register_buffer(address(pool), pool.nbytes) == 0
    assert consumer.register_buffer(address(back), back.nbytes) == 0
    config = ReplicateConfig()
    base = f"lmcache@{uuid.uuid4().hex}"
    assert producer.put_from(f"{base}@0", address(pool), chunk, config) == 0
    keys = [f"{base}@{i}" for i in range(1, n)]
    ptrs = [address(pool) + i * chunk for i in range(1, n)]
    assert producer.batch_put_from(keys, ptrs, [chunk] * (n - 1), config) == [0] * (n - 1)
    assert consumer.is_exist(f"{base}@0") == 1
    assert consumer.get_into(f"{base}@0", address(back), chunk) == chunk
    got = consumer.batch_get_into(keys, [address(back) + i * chunk for i in range(1, n)],
                                  [chunk] * (n - 1))
    assert got == [chunk] * (n - 1)
    assert (back == pool).all()
    assert producer.unregister_buffer(address(pool)) == 0
    assert consumer.unregister_buffer(address(back)) == 0


def test_sglang_hicache_full_client_stores_and_loads_kv_pages(cluster):
    """SGLang HiCache's Mooncake backend as a full client (``standalone_storage`` off): setup with its keyword arguments, the host KV
    pool registered once, a warm-up put/get, then per page ``batch_is_exist`` and zero-copy
    ``batch_put_from`` of the K and V halves (``ReplicateConfig.group_ids`` naming the page),
    ``batch_get_into`` into another pool's pages."""
    rng = np.random.default_rng(11)
    page, pages = 64 * 1024, 48
    src_pool = rng.integers(0, 256, 2 * pages * page, dtype=np.uint8)  # K pages, then V pages
    dst_pool = np.zeros_like(src_pool)
    stores = []
    try:
        for pool in (src_pool, dst_pool):
            st = MooncakeDistributedStore()
            assert st.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MIB, 16 * MIB, "tcp", "",
                            cluster.address, None, enable_ssd_offload=False) == 0
            assert st.register_buffer(address(pool), pool.nbytes) == 0
            stores.append(st)
        writer, reader = stores
        # Warm-up, as SGLang's backend does after setup.
        warm = f"warmup-{uuid.uuid4().hex}"
        assert writer.put(warm, b"x" * 4096) == 0
        assert writer.is_exist(warm) == 1 and writer.get(warm) == b"x" * 4096
        prefix = uuid.uuid4().hex
        hashes = [f"{prefix}{i:04x}" for i in range(pages)]
        keys = [f"{h}_0_{kv}" for h in hashes for kv in ("k", "v")]
        ptrs = [address(src_pool) + (kv * pages + i) * page
                for i in range(pages) for kv in (0, 1)]
        config = ReplicateConfig()
        config.group_ids = [h for h in hashes for _ in (0, 1)]
        assert writer.batch_is_exist(keys) == [0] * len(keys)
        assert writer.batch_put_from(keys, ptrs, [page] * len(keys), config) == [0] * len(keys)
        assert reader.batch_is_exist(keys) == [1] * len(keys)
        # Loaded into the pages in reverse order.
        out = [address(dst_pool) + (kv * pages + (pages - 1 - i)) * page
               for i in range(pages) for kv in (0, 1)]
        assert reader.batch_get_into(keys, out, [page] * len(keys)) == [page] * len(keys)
        for i in range(pages):
            for kv in (0, 1):
                a = src_pool[(kv * pages + i) * page:(kv * pages + i + 1) * page]
                j = pages - 1 - i
                b = dst_pool[(kv * pages + j) * page:(kv * pages + j + 1) * page]
                assert (a == b).all()
        assert writer.remove_all(force=True) >= len(keys)
    finally:
        for st, pool in zip(stores, (src_pool, dst_pool)):
            st.unregister_buffer(address(pool))
            st.close()


def test_sglang_hicache_standalone_storage_is_a_dummy_client_beside_a_real_one(
        cluster, tmp_path, monkeypatch):
    """SGLang HiCache with ``standalone_storage``: its host KV pool comes from
    ``MooncakeHostMemAllocator`` (its ``MooncakeHostTensorAllocator``), the backend calls
    ``setup_dummy(pool bytes, 16 MiB, client_server_address)`` against a ``mooncake_client
    --port``, registers the pool, warms up, then stores pages with ``batch_is_exist`` and
    ``batch_put_from`` (``group_ids`` set) and loads them with ``batch_get_into``; a full
    client beside it, with a pool of its own, loads the same pages."""
    monkeypatch.setenv("YUEBING_DUMMY_DIR", str(tmp_path / "dummies"))
    port = free_port()
    real = mooncake_real_client(cluster, port)
    page, pages = 64 * 1024, 32
    pool_bytes = 2 * pages * page  # K pages, then V pages
    allocator = MooncakeHostMemAllocator()
    pool = allocator.alloc(pool_bytes)
    full = MooncakeDistributedStore()
    dst = np.zeros(pool_bytes, dtype=np.uint8)
    dummy = MooncakeDistributedStore()
    try:
        src = np.random.default_rng(5).integers(0, 256, pool_bytes, dtype=np.uint8)
        ctypes.memmove(pool, address(src), pool_bytes)
        assert dummy.setup_dummy(pool_bytes, 16 * MIB, f"127.0.0.1:{port}") == 0
        assert dummy.register_buffer(pool, pool_bytes) == 0
        warm = f"sglang_mooncake_store_warmup_key{uuid.uuid4().hex}"
        assert dummy.put(warm, bytes(4096)) == 0
        assert dummy.is_exist(warm) == 1 and dummy.get(warm) == bytes(4096)
        prefix = uuid.uuid4().hex
        hashes = [f"{prefix}{i:04x}" for i in range(pages)]
        keys = [f"{h}_0_{kv}" for h in hashes for kv in ("k", "v")]
        ptrs = [pool + (kv * pages + i) * page for i in range(pages) for kv in (0, 1)]
        config = ReplicateConfig()
        config.group_ids = [h for h in hashes for _ in (0, 1)]
        assert dummy.batch_is_exist(keys) == [0] * len(keys)
        assert dummy.batch_put_from(keys, ptrs, [page] * len(keys), config) == [0] * len(keys)
        # The dummy loads its pages back into the other half of their slots, reversed.
        ctypes.memset(pool, 0, pool_bytes)
        back = [pool + (kv * pages + (pages - 1 - i)) * page
                for i in range(pages) for kv in (0, 1)]
        assert dummy.batch_get_into(keys, back, [page] * len(keys)) == [page] * len(keys)
        got = np.ctypeslib.as_array((ctypes.c_uint8 * pool_bytes).from_address(pool)).copy()
        # A full client loads the same pages into its own pool.
        assert full.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                          cluster.address) == 0
        assert full.register_buffer(address(dst), dst.nbytes) == 0
        out = [address(dst) + (kv * pages + i) * page for i in range(pages) for kv in (0, 1)]
        assert full.batch_get_into(keys, out, [page] * len(keys)) == [page] * len(keys)
        assert (dst == src).all()
        for i in range(pages):
            for kv in (0, 1):
                j = pages - 1 - i
                a = src[(kv * pages + i) * page:(kv * pages + i + 1) * page]
                assert (got[(kv * pages + j) * page:(kv * pages + j + 1) * page] == a).all()
        assert dummy.remove_all(True) >= len(keys)
    finally:
        full.unregister_buffer(address(dst))
        full.close()
        dummy.unregister_buffer(pool)
        dummy.close()
        allocator.free(pool)
        # Gracefully: its store space leaves the shared master with it.
        real.terminate()
