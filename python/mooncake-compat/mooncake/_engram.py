"""``EngramStore``: a layer's Engram embedding tables (one float32 table ``[N_h, D]`` per hash
head) kept in the store, one object per head, and looked up by row ids, as Mooncake's
``mooncake.store.EngramStore`` does (``mooncake-store/src/engram/engram_store.cpp``): the same
keys (``engram:l{layer}:h{head}``), checks, results and errors. Tables and results are NumPy
arrays; NumPy is imported when a table is populated or looked up.

``populate`` registers the tables' memory, puts every head at once from it (``batch_put_from``)
and unregisters it; it refuses a layer whose keys exist, and takes back what it put if any put
fails. ``lookup`` reads each requested row straight into the result with one ranged read
(``get_into_ranges``: one fragment per row).
"""

from . import _codes


class EngramStoreConfig:
    """An Engram layer's shape: ``table_vocab_sizes`` (rows of each head's table) and
    ``embedding_dim`` (``D``)."""

    def __init__(self):
        self.table_vocab_sizes = [1024]
        self.embedding_dim = 64


class EngramStore:
    """The Engram tables of layer ``layer_id`` shaped by ``config``, in ``store`` (a set-up
    ``MooncakeDistributedStore``; without one, only the shape and keys are known: ``populate``
    and ``lookup`` raise ``RuntimeError``)."""

    def __init__(self, layer_id, config, store=None):
        from .store import MooncakeDistributedStore
        if not isinstance(config, EngramStoreConfig):
            raise TypeError("config must be a mooncake.store.EngramStoreConfig")
        if store is not None and not isinstance(store, MooncakeDistributedStore):
            raise RuntimeError("EngramStore store parameter must be a "
                               "MooncakeDistributedStore")
        sizes = [int(n) for n in config.table_vocab_sizes]
        dim = int(config.embedding_dim)
        if not sizes:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if dim <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(n <= 0 for n in sizes):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only positive "
                             "values")
        self._store, self._sizes, self._dim = store, sizes, dim
        self._keys = [f"engram:l{int(layer_id)}:h{h}" for h in range(len(sizes))]

    def get_table_vocab_sizes(self):
        return list(self._sizes)

    def get_store_keys(self):
        return list(self._keys)

    def get_num_heads(self):
        return len(self._sizes)

    def get_embedding_dim(self):
        return self._dim

    def remove_from_store(self, force=False):
        """Removes the layer's tables; how many there were (missing ones are skipped).
        ``RuntimeError`` with the first failure's code."""
        if self._store is None:
            rc = _codes.INVALID_PARAMS
        else:
            removed, rc = 0, 0
            # One master round trip for the whole layer.
            for code in self._store.batch_remove(self._keys, force):
                if code == 0:
                    removed += 1
                elif code != _codes.OBJECT_NOT_FOUND and rc == 0:
                    rc = code
            if rc == 0:
                return removed
        raise RuntimeError(f"remove_from_store failed, rc={rc}")

    def populate(self, embedding_buffers):
        """Stores the layer's tables: one float32 ``[N_h, D]`` NumPy array per head (others
        are converted). ``RuntimeError`` if a table's shape is wrong, the layer's keys exist,
        or a put fails (nothing of the layer is left then)."""
        import numpy as np
        if len(embedding_buffers) != len(self._sizes):
            raise RuntimeError("embedding_buffers size must match num_heads")
        tables = []
        for buf, rows in zip(embedding_buffers, self._sizes):
            if not isinstance(buf, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            table = np.ascontiguousarray(buf, dtype=np.float32)
            if table.ndim != 2:
                raise RuntimeError("each embedding buffer must be 2D [N_h, D]")
            if table.shape != (rows, self._dim):
                raise RuntimeError("embedding buffer shape does not match "
                                   "get_table_vocab_sizes()/get_embedding_dim()")
            tables.append(table)
        if self._populate(tables) != 0:
            raise RuntimeError("populate failed")

    def _populate(self, tables):
        store = self._store
        if store is None:
            return -1
        exists = store.batch_is_exist(self._keys)
        if len(exists) != len(self._keys):
            return -1
        for key, found in zip(self._keys, exists):
            if found != 0:
                _codes.log.error("EngramStore populate requires empty destination key '%s' "
                                 "(is_exist: %d). Remove the existing layer first.", key, found)
                return -1
        ptrs = [t.ctypes.data for t in tables]
        sizes = [t.nbytes for t in tables]
        registered = []
        try:
            for ptr, size in zip(ptrs, sizes):
                if store.register_buffer(ptr, size) != 0:
                    return -1
                registered.append(ptr)
            results = store.batch_put_from(self._keys, ptrs, sizes)
        finally:
            unregister_failed = any([store.unregister_buffer(p) != 0 for p in registered])
        if any(r != 0 for r in results) or unregister_failed:
            stored = [key for key, r in zip(self._keys, results) if r == 0]
            codes = store.batch_remove(stored, True) if stored else []
            for key, code in zip(stored, codes):
                if code not in (0, _codes.OBJECT_NOT_FOUND):
                    _codes.log.error("EngramStore: cannot take back '%s' of a failed "
                                     "populate: %d", key, code)
            return -1
        return 0

    def lookup(self, row_ids):
        """The rows ``row_ids[b][l][h]`` of each head's table: a float32 array
        ``[B, L, H, D]``. ``row_ids``: nested lists, or an integer array ``[B, L, H]``.
        ``RuntimeError`` for a row id out of its table, ragged or empty ids, or a failed
        read."""
        import numpy as np
        heads = len(self._sizes)
        if isinstance(row_ids, np.ndarray):
            try:
                ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            except (TypeError, ValueError) as e:
                raise RuntimeError("row_ids array must be convertible to int64") from e
            if ids.ndim != 3:
                raise RuntimeError("row_ids array must have shape [B, L, H]")
            if ids.shape[2] != heads:
                raise RuntimeError("row_ids last dimension must match num_heads")
        else:
            nested = [[[int(i) for i in token] for token in batch] for batch in row_ids]
            if not nested or not nested[0]:
                raise RuntimeError("row_ids must not be empty")
            length = len(nested[0])
            if any(len(b) != length or any(len(t) != heads for t in b) for b in nested):
                raise RuntimeError("EngramStore lookup failed")
            ids = np.array(nested, dtype=np.int64).reshape(len(nested), length, heads)
        out = np.zeros((ids.shape[0], ids.shape[1], heads, self._dim), dtype=np.float32)
        if self._lookup(ids, out) != 0:
            out[...] = 0
            raise RuntimeError("EngramStore lookup failed")
        return out

    def _lookup(self, ids, out):
        store = self._store
        if store is None or ids.shape[0] == 0 or ids.shape[1] == 0:
            return -1
        tokens = ids.reshape(-1, len(self._sizes))
        row_bytes = self._dim * 4
        dst, src, sizes = [], [], []
        for h, rows in enumerate(self._sizes):
            column = tokens[:, h]
            if column.min() < 0 or column.max() >= rows:
                return -1
            dst.append([(t * len(self._sizes) + h) * row_bytes for t in range(len(column))])
            src.append([int(i) * row_bytes for i in column])
            sizes.append([row_bytes] * len(column))
        ptr = out.ctypes.data
        if store.register_buffer(ptr, out.nbytes) != 0:
            return -1
        try:
            results = store.get_into_ranges([ptr], [list(self._keys)], [dst], [src], [sizes])
        finally:
            unregistered = store.unregister_buffer(ptr)
        if unregistered != 0 or len(results) != 1 or len(results[0]) != len(self._keys):
            return -1
        for got, want in zip(results[0], sizes):
            if len(got) != len(want) or any(n != row_bytes for n in got):
                return -1
        return 0
