"""``mooncake.buffer_pool``: the store's ``BufferPool``, as in the stock wheel."""

from .store import BufferPool

RegisteredBufferPool = BufferPool

__all__ = ["BufferPool", "RegisteredBufferPool"]
