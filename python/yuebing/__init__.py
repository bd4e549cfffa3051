"""yuebing: a distributed store and transfer engine for large byte objects (LLM KV cache).

``yuebing.Store`` is a client of a running yuebing store (``yuebing master`` and its
``yuebing node`` s)::

    import numpy as np, yuebing

    store = yuebing.Store("127.0.0.1:50051")           # a master's address
    store.put("kv/layer0/block7", b"...")               # any buffer: bytes, bytearray, numpy
    value = store.get("kv/layer0/block7")               # bytes
    dst = np.empty(1 << 20, dtype=np.uint8)
    n = store.get_into("kv/layer0/block7", dst)         # zero-copy into your memory
    store.put_from("kv/layer1/block7", tensor.data_ptr(), nbytes)   # or a raw address

``yuebing.Engine`` is a Transfer Engine: register memory, open a peer's segment by name and
read or write it one-sided, one transfer or a batch at a time.

Errors are ``yuebing.YuebingError`` subclasses with ``.code`` and ``.name`` (see
``yuebing.errors``): ``ObjectNotFound`` (also a ``KeyError``), ``ObjectAlreadyExists``,
``ObjectHasLease``, ``InvalidParams`` (also a ``ValueError``), ``Timeout`` (also a
``TimeoutError``), ... Batch calls return one entry per item, a failed item's entry being its
exception instance (not raised). An argument of the wrong type raises ``TypeError``; one out of
its domain (an empty name, a null address, a zero or overflowing length, a range that wraps, a
read-only buffer as a destination) raises ``InvalidArgument`` (also a ``ValueError``) naming it,
before anything is changed.

Read-only memory (``bytes``, a read-only ``mmap``) may be registered and used as a source, but
nothing ever writes it: a call whose destination lies in a read-only registration raises
``InvalidArgument`` before any byte moves.

Threads and signals: every call blocks only its own thread and releases the GIL while it
waits, so other threads run meanwhile; Ctrl-C (any signal handler that raises) cancels the
call, waits until nothing touches your buffers any more, and raises ``KeyboardInterrupt``.

fork: a Store, Engine or Buffer made before ``os.fork()`` cannot be used in the child (its
calls raise ``yuebing.Forked``); make a new one there. With multiprocessing, the "spawn" start method
avoids the question.

``yuebing.MessageServer`` and ``yuebing.MessageClient`` send byte messages to a server's
Python callback, each delivered once, on a callback thread.

asyncio: no coroutine API is offered. The calls release the GIL, so ``await
asyncio.to_thread(store.get, key)`` (or ``loop.run_in_executor``) runs them without blocking
the event loop.
"""

from __future__ import annotations

from . import errors
from ._native import (
    BatchStatus,
    Buffer,
    Engine,
    Location,
    MessageClient,
    MessageServer,
    Reservation,
    ObjectInfo,
    Replicas,
    Store,
    TaskStatus,
    FEATURES,
    __version__,
)
from .errors import *  # noqa: F401,F403  (one exception class per error code)
from .errors import ERRORS_BY_CODE, ERRORS_BY_NAME, YuebingError

__all__ = [
    "Store",
    "Engine",
    "Buffer",
    "MessageServer",
    "MessageClient",
    "ObjectInfo",
    "Replicas",
    "Location",
    "Reservation",
    "BatchStatus",
    "TaskStatus",
    "YuebingError",
    "ERRORS_BY_CODE",
    "ERRORS_BY_NAME",
    "errors",
    "FEATURES",
    "__version__",
] + sorted(ERRORS_BY_NAME)
